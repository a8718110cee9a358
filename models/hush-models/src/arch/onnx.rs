//! An ONNX (opset 17) writer over the public `tract_onnx::pb` prost types: a small graph
//! builder with one method per op hush needs (Conv with groups for depthwise,
//! BatchNormalization, Relu, pooling, ReduceMean, Gemm, Softmax, …), reading weights
//! straight out of burn layers under the names they have in `weights.safetensors`.
//!
//! The graph's contract (checked by the device before it trusts a file):
//! - keyword spotters ([`OnnxGraph::finish`]): input `features` `[N, frames, bins]` f32;
//!   outputs `logits` and `probs`, `[N, classes]`;
//! - CTC recognisers ([`OnnxGraph::finish_ctc`]): input `features` `[1, frames, bins]`
//!   with a symbolic frame count; output `log_probs` `[1, steps, vocab]`.
//!
//! `producer_name` is `hush` and the metadata holds `hush.arch`.
//!
//! It does not run models: tract does that on the device. It lives beside the
//! architectures that lay out their graphs with it; the export module re-exports it as
//! `export::onnx` and writes whole packages with it.

use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear, PaddingConfig2d};
use prost::Message;
use tract_onnx::pb;

use super::layers::named;
use crate::checkpoint::NamedTensor;
use crate::ModelError;

/// The opset the writer targets.
pub const OPSET: i64 = 17;
/// Name of the graph input.
pub const INPUT: &str = "features";
/// Name of the logits output.
pub const LOGITS: &str = "logits";
/// Name of the probabilities output.
pub const PROBS: &str = "probs";
/// Name of a streaming trunk's per-frame output.
pub const FRAMES: &str = "frames";
/// Name of a streaming head's input: what it reads of a window's frames (`HeadInput`).
pub const POOLED: &str = "pooled";
/// Name of the per-step log-probabilities output of a CTC model.
pub const LOG_PROBS: &str = "log_probs";
/// `producer_name` of every file hush writes.
pub const PRODUCER: &str = "hush";

/// A graph under construction: nodes in topological order and initializers.
#[derive(Debug, Default)]
pub struct OnnxGraph {
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    next: usize,
}

fn attr_int(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    }
}

fn attr_float(name: &str, v: f32) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Float as i32,
        f: v,
        ..Default::default()
    }
}

fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn as_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

fn value_info(name: &str, dims: &[Option<usize>]) -> pb::ValueInfoProto {
    let dims: Vec<Result<usize, &str>> = dims.iter().map(|d| d.ok_or("N")).collect();
    value_info_sym(name, &dims)
}

/// A float tensor's value info; `Err(symbol)` is a symbolic dimension.
fn value_info_sym(name: &str, dims: &[Result<usize, &str>]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    let dim = dims
        .iter()
        .map(|d| Dimension {
            denotation: String::new(),
            value: Some(match d {
                Ok(n) => Value::DimValue(*n as i64),
                Err(sym) => Value::DimParam((*sym).into()),
            }),
        })
        .collect();
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            denotation: String::new(),
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto { dim }),
            })),
        }),
        ..Default::default()
    }
}

impl OnnxGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    fn fresh(&mut self, op: &str) -> String {
        self.next += 1;
        format!("{}_{}", op.to_ascii_lowercase(), self.next)
    }

    /// Adds a node with one output and returns the output's name.
    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: Vec<pb::AttributeProto>) -> String {
        let out = self.fresh(op);
        self.node_named(op, inputs, attrs, &out);
        out
    }

    fn node_named(&mut self, op: &str, inputs: &[&str], attrs: Vec<pb::AttributeProto>, out: &str) {
        self.nodes.push(pb::NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.to_string()],
            name: out.to_string(),
            op_type: op.into(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Adds an f32 initializer.
    pub fn initializer(&mut self, t: NamedTensor) -> String {
        let name = t.name.clone();
        self.initializers.push(pb::TensorProto {
            dims: as_i64(&t.shape),
            data_type: pb::tensor_proto::DataType::Float as i32,
            raw_data: t.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            name: t.name,
            ..Default::default()
        });
        name
    }

    /// Adds an int64 initializer (shapes, axes).
    pub fn initializer_i64(&mut self, name: &str, values: &[i64]) -> String {
        self.initializers.push(pb::TensorProto {
            dims: vec![values.len() as i64],
            data_type: pb::tensor_proto::DataType::Int64 as i32,
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            name: name.into(),
            ..Default::default()
        });
        name.to_string()
    }

    /// `Conv` from a burn [`Conv2d`] named `name` (weights `{name}.weight`, `{name}.bias`).
    pub fn conv(&mut self, name: &str, x: &str, c: &Conv2d) -> Result<String, ModelError> {
        let w = self.initializer(named(&format!("{name}.weight"), c.weight.val())?);
        let [_, _, kh, kw] = c.weight.val().dims();
        let mut inputs = vec![x.to_string(), w];
        if let Some(b) = &c.bias {
            inputs.push(self.initializer(named(&format!("{name}.bias"), b.val())?));
        }
        let pads = match &c.padding {
            PaddingConfig2d::Valid => [0, 0, 0, 0],
            PaddingConfig2d::Explicit(top, left, bottom, right) => [*top, *left, *bottom, *right],
            PaddingConfig2d::Same => {
                return Err(ModelError::config(
                    name,
                    "padding",
                    "Same padding is not exported; use Explicit",
                ))
            }
        };
        let attrs = vec![
            attr_ints("kernel_shape", &[kh as i64, kw as i64]),
            attr_ints("strides", &as_i64(&c.stride)),
            attr_ints("dilations", &as_i64(&c.dilation)),
            // ONNX order: [top, left, bottom, right] = [h_begin, w_begin, h_end, w_end].
            attr_ints("pads", &as_i64(&pads)),
            attr_int("group", c.groups as i64),
        ];
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        Ok(self.node("Conv", &refs, attrs))
    }

    /// `BatchNormalization` (inference form) from a burn [`BatchNorm`] named `name`.
    pub fn batch_norm(&mut self, name: &str, x: &str, b: &BatchNorm) -> Result<String, ModelError> {
        let g = self.initializer(named(&format!("{name}.gamma"), b.gamma.val())?);
        let bt = self.initializer(named(&format!("{name}.beta"), b.beta.val())?);
        let m = self.initializer(named(
            &format!("{name}.running_mean"),
            b.running_mean.value(),
        )?);
        let v = self.initializer(named(
            &format!("{name}.running_var"),
            b.running_var.value(),
        )?);
        Ok(self.node(
            "BatchNormalization",
            &[x, &g, &bt, &m, &v],
            vec![attr_float("epsilon", b.epsilon as f32)],
        ))
    }

    /// `Gemm` (`y = x·W + b`, W `[in, out]` as burn keeps it) from a burn [`Linear`].
    pub fn linear(&mut self, name: &str, x: &str, l: &Linear) -> Result<String, ModelError> {
        let w = self.initializer(named(&format!("{name}.weight"), l.weight.val())?);
        let mut inputs = vec![x.to_string(), w];
        if let Some(b) = &l.bias {
            inputs.push(self.initializer(named(&format!("{name}.bias"), b.val())?));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        Ok(self.node("Gemm", &refs, vec![]))
    }

    /// `Relu`.
    pub fn relu(&mut self, x: &str) -> String {
        self.node("Relu", &[x], vec![])
    }

    /// `Add` (with ONNX broadcasting).
    pub fn add(&mut self, a: &str, b: &str) -> String {
        self.node("Add", &[a, b], vec![])
    }

    /// `Sub` (with ONNX broadcasting).
    pub fn sub(&mut self, a: &str, b: &str) -> String {
        self.node("Sub", &[a, b], vec![])
    }

    /// `Mul` (with ONNX broadcasting).
    pub fn mul(&mut self, a: &str, b: &str) -> String {
        self.node("Mul", &[a, b], vec![])
    }

    /// `Unsqueeze` at `axes` (opset 13+: axes as an input).
    pub fn unsqueeze(&mut self, x: &str, axes: &[i64]) -> String {
        let name = self.fresh("axes");
        let a = self.initializer_i64(&name, axes);
        self.node("Unsqueeze", &[x, &a], vec![])
    }

    /// `Slice` of `axis` from `start` to `end` (negative: counted from the axis's end).
    pub fn slice(&mut self, x: &str, axis: i64, start: i64, end: i64) -> String {
        let mut input = |v: i64| {
            let name = self.fresh("slice");
            self.initializer_i64(&name, &[v])
        };
        let (starts, ends, axes) = (input(start), input(end), input(axis));
        self.node("Slice", &[x, &starts, &ends, &axes], vec![])
    }

    /// `ReduceMean` over `axes` (opset 17: axes as an attribute).
    pub fn reduce_mean(&mut self, x: &str, axes: &[i64], keepdims: bool) -> String {
        self.node(
            "ReduceMean",
            &[x],
            vec![
                attr_ints("axes", axes),
                attr_int("keepdims", i64::from(keepdims)),
            ],
        )
    }

    /// `GlobalAveragePool` then `Flatten`: `[N, C, H, W]` → `[N, C]`.
    pub fn global_avg_pool_flat(&mut self, x: &str) -> String {
        let p = self.node("GlobalAveragePool", &[x], vec![]);
        self.flatten(&p)
    }

    /// A conv stack's output `[N, C, T, F]` averaged over time and frequency, then the
    /// classifier `fc`: `[N, classes]` logits.
    pub fn pooled_classifier(&mut self, x: &str, fc: &Linear) -> Result<String, ModelError> {
        let pooled = self.global_avg_pool_flat(x);
        self.linear("fc", &pooled, fc)
    }

    /// A streaming trunk's output: the conv stack's `[1, C, T', F]` averaged over frequency,
    /// one `C`-vector per output frame, `[1, T', C]` (with valid time padding, frame `j`
    /// reads only its own input frames).
    pub fn frame_vectors(&mut self, x: &str) -> String {
        let x = self.reduce_mean(x, &[3], false);
        self.transpose(&x, &[0, 2, 1])
    }

    /// A streaming trunk's output that keeps frequency apart: the conv stack's
    /// `[1, C, T', F]` as one `C·F`-vector per output frame (`width` values), `[1, T', C·F]`.
    pub fn flat_frame_vectors(&mut self, x: &str, width: usize) -> String {
        let x = self.transpose(x, &[0, 2, 1, 3]);
        self.reshape(&x, &[1, -1, width as i64])
    }

    /// `MaxPool`, no padding.
    pub fn max_pool(&mut self, x: &str, kernel: [usize; 2], stride: [usize; 2]) -> String {
        self.node(
            "MaxPool",
            &[x],
            vec![
                attr_ints("kernel_shape", &as_i64(&kernel)),
                attr_ints("strides", &as_i64(&stride)),
            ],
        )
    }

    /// `Flatten` at axis 1.
    pub fn flatten(&mut self, x: &str) -> String {
        self.node("Flatten", &[x], vec![attr_int("axis", 1)])
    }

    /// Finishes the graph: `logits` → `Identity` named `logits` and `Softmax` named
    /// `probs`; returns the encoded `ModelProto`.
    pub fn finish(
        self,
        logits: &str,
        frames: usize,
        bins: usize,
        classes: usize,
        arch: &str,
    ) -> Vec<u8> {
        let input = value_info(INPUT, &[None, Some(frames), Some(bins)]);
        self.finish_classifier(logits, input, classes, arch)
    }

    /// Finishes a streaming trunk: `frames` `[1, T', channels]` named `frames`; the input
    /// `features` is `[1, T, bins]` with `T` symbolic.
    pub fn finish_frames(
        mut self,
        frames: &str,
        bins: usize,
        channels: usize,
        arch: &str,
    ) -> Vec<u8> {
        self.node_named("Identity", &[frames], vec![], FRAMES);
        let input = value_info_sym(INPUT, &[Ok(1), Err("frames"), Ok(bins)]);
        let outputs = vec![value_info_sym(FRAMES, &[Ok(1), Err("steps"), Ok(channels)])];
        self.encode(input, outputs, arch)
    }

    /// Finishes a streaming head: input `pooled` `[N, channels]`; `logits` → `Identity`
    /// named `logits` and `Softmax` named `probs`.
    pub fn finish_head(self, logits: &str, channels: usize, classes: usize, arch: &str) -> Vec<u8> {
        let input = value_info(POOLED, &[None, Some(channels)]);
        self.finish_classifier(logits, input, classes, arch)
    }

    /// `logits` `[N, classes]` → `Identity` named `logits` and `Softmax` named `probs`, the
    /// graph's outputs over `input`.
    fn finish_classifier(
        mut self,
        logits: &str,
        input: pb::ValueInfoProto,
        classes: usize,
        arch: &str,
    ) -> Vec<u8> {
        self.node_named("Identity", &[logits], vec![], LOGITS);
        self.node_named("Softmax", &[LOGITS], vec![attr_int("axis", -1)], PROBS);
        let outputs = vec![
            value_info(LOGITS, &[None, Some(classes)]),
            value_info(PROBS, &[None, Some(classes)]),
        ];
        self.encode(input, outputs, arch)
    }

    /// Finishes a CTC graph: `scores` `[1, steps, vocab]` → `LogSoftmax` named
    /// `log_probs`; the input `features` is `[1, frames, bins]` with `frames` symbolic.
    pub fn finish_ctc(mut self, scores: &str, bins: usize, vocab: usize, arch: &str) -> Vec<u8> {
        self.node_named(
            "LogSoftmax",
            &[scores],
            vec![attr_int("axis", -1)],
            LOG_PROBS,
        );
        let input = value_info_sym(INPUT, &[Ok(1), Err("frames"), Ok(bins)]);
        let outputs = vec![value_info_sym(LOG_PROBS, &[Ok(1), Err("steps"), Ok(vocab)])];
        self.encode(input, outputs, arch)
    }

    fn encode(
        self,
        input: pb::ValueInfoProto,
        output: Vec<pb::ValueInfoProto>,
        arch: &str,
    ) -> Vec<u8> {
        let graph = pb::GraphProto {
            node: self.nodes,
            name: format!("hush-{arch}"),
            initializer: self.initializers,
            input: vec![input],
            output,
            ..Default::default()
        };
        let model = pb::ModelProto {
            ir_version: 8,
            opset_import: vec![pb::OperatorSetIdProto {
                domain: String::new(),
                version: OPSET,
            }],
            producer_name: PRODUCER.into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            graph: Some(graph),
            metadata_props: vec![pb::StringStringEntryProto {
                key: "hush.arch".into(),
                value: arch.into(),
            }],
            ..Default::default()
        };
        model.encode_to_vec()
    }

    /// `Transpose` with permutation `perm`.
    pub fn transpose(&mut self, x: &str, perm: &[i64]) -> String {
        self.node("Transpose", &[x], vec![attr_ints("perm", perm)])
    }

    /// `Reshape` to `shape` (ONNX rules: `0` copies the input's dimension, `-1` is
    /// inferred).
    pub fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let name = self.fresh("shape");
        let s = self.initializer_i64(&name, shape);
        self.node("Reshape", &[x, &s], vec![])
    }

    /// `Squeeze` at `axes` (opset 13+: axes as an input).
    pub fn squeeze(&mut self, x: &str, axes: &[i64]) -> String {
        let name = self.fresh("axes");
        let a = self.initializer_i64(&name, axes);
        self.node("Squeeze", &[x, &a], vec![])
    }

    /// `MatMul` then `Add`: a burn [`Linear`] over the last axis of a tensor of any rank
    /// (`Gemm` takes only matrices).
    pub fn linear_nd(&mut self, name: &str, x: &str, l: &Linear) -> Result<String, ModelError> {
        let w = self.initializer(named(&format!("{name}.weight"), l.weight.val())?);
        let y = self.node("MatMul", &[x, &w], vec![]);
        match &l.bias {
            Some(b) => {
                let b = self.initializer(named(&format!("{name}.bias"), b.val())?);
                Ok(self.add(&y, &b))
            }
            None => Ok(y),
        }
    }

    /// A forward ONNX `GRU` over `x` `[steps, 1, input]` (ONNX's default, sequence-first
    /// layout) with `W` `[1, 3H, input]`, `R` `[1, 3H, H]`, `B` `[1, 6H]` given as
    /// initializers named `{name}.W`, `{name}.R`, `{name}.B` (gate order z, r, h) and
    /// `linear_before_reset` as told; returns `Y` `[steps, 1, 1, H]`.
    pub fn gru(
        &mut self,
        name: &str,
        x: &str,
        [w, r, b]: [NamedTensor; 3],
        hidden: usize,
        linear_before_reset: bool,
    ) -> Result<String, ModelError> {
        let expect = |t: &NamedTensor, shape: Vec<usize>| {
            if t.shape == shape {
                Ok(())
            } else {
                Err(ModelError::ShapeMismatch {
                    name: t.name.clone(),
                    expected: shape,
                    got: t.shape.clone(),
                })
            }
        };
        let input = w.shape.get(2).copied().unwrap_or(0);
        expect(&w, vec![1, 3 * hidden, input])?;
        expect(&r, vec![1, 3 * hidden, hidden])?;
        expect(&b, vec![1, 6 * hidden])?;
        let rename = |mut t: NamedTensor, part: &str| {
            t.name = format!("{name}.{part}");
            t
        };
        let w = self.initializer(rename(w, "W"));
        let r = self.initializer(rename(r, "R"));
        let b = self.initializer(rename(b, "B"));
        Ok(self.node(
            "GRU",
            &[x, &w, &r, &b],
            vec![
                attr_int("hidden_size", hidden as i64),
                attr_int("linear_before_reset", i64::from(linear_before_reset)),
            ],
        ))
    }
}
