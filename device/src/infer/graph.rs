//! A model file of a package as tract reads it: the ONNX file (`model.onnx`, `frames.onnx`,
//! `head.onnx`, Silero's `silero_vad_16k_sequence.onnx`) or the NNEF archive prepared from it
//! beside it (`model.nnef.tar`, ...: hush-models' `export::nnef`, written by
//! `hush-host export --format nnef` and by the host's rounds).
//!
//! A build with the `onnx` feature (the default) reads the ONNX file when it is there and the
//! archive otherwise; a build without it reads archives only and does not link tract's ONNX
//! parser and its type inference (the inference-only device build: firmware-notes/budget.md).
//! Either way the device gets a typed model with the input shapes it fixes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tract_nnef::framework::Nnef;
use tract_nnef::tract_core::internal::*;
use tract_pulse_opl::WithPulse;

use super::InferError;

pub use hush_models::export::nnef::archive_path;

/// What a build reads of a package's model files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildReads {
    /// The ONNX files (a build with the `onnx` feature); their NNEF archives otherwise.
    pub onnx: bool,
    /// Whether it pulses a streaming form's trunk itself (the `pulse` feature); otherwise it
    /// reads the trunk pulsed by the host (`frames.pulse{N}.nnef.tar`).
    pub pulse: bool,
}

impl BuildReads {
    /// What this build reads.
    pub const THIS_BUILD: Self = Self {
        onnx: cfg!(feature = "onnx"),
        pulse: cfg!(feature = "pulse"),
    };

    /// The file this build reads for the model file named `onnx` (`model.onnx`): that name,
    /// or its NNEF archive's ([`archive_path`]: `model.nnef.tar`).
    pub fn file_for(self, onnx: &str) -> String {
        if self.onnx {
            onnx.to_string()
        } else {
            archive_path(Path::new(onnx)).to_string_lossy().into_owned()
        }
    }
}

/// One dimension of an input shape a caller asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dim {
    /// This many.
    Is(usize),
    /// Left symbolic (the frames of an utterance or a stream), under this name in an ONNX
    /// file; an archive keeps its own symbol there.
    Free(&'static str),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Is(n) => write!(f, "{n}"),
            Dim::Free(name) => f.write_str(name),
        }
    }
}

/// `[1, frames, 20]`: a shape as errors print it.
pub(crate) fn shape_text(dims: &[Dim]) -> String {
    let dims: Vec<String> = dims.iter().map(Dim::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// tract's NNEF reader with the pulsed delay lines' operators, built once per process and
/// shared by every archive read: building one parses NNEF's standard library of fragments,
/// which costs more than reading one of hush's archives.
pub(crate) fn nnef_reader() -> &'static Nnef {
    static NNEF: OnceLock<Nnef> = OnceLock::new();
    NNEF.get_or_init(|| tract_nnef::nnef().with_pulse())
}

/// A model file read by tract, its input shapes not yet fixed.
#[derive(Debug, Clone)]
pub(crate) struct ModelFile {
    /// The file read: the ONNX file or its archive.
    path: PathBuf,
    graph: Graph,
}

#[derive(Debug, Clone)]
enum Graph {
    #[cfg(feature = "onnx")]
    Onnx(tract_onnx::prelude::InferenceModel),
    Nnef(TypedModel),
}

impl ModelFile {
    /// Reads the model whose ONNX file is `onnx`: that file (in a build with the `onnx`
    /// feature) or else the archive beside it ([`archive_path`]).
    pub fn read(onnx: &Path) -> Result<Self, InferError> {
        #[cfg(feature = "onnx")]
        if onnx.is_file() {
            let model = tract_onnx::onnx()
                .model_for_path(onnx)
                .map_err(|e| InferError::load(onnx, format!("{e:#}")))?;
            return Ok(Self {
                path: onnx.to_path_buf(),
                graph: Graph::Onnx(model),
            });
        }
        let nnef = archive_path(onnx);
        if !nnef.is_file() {
            let reason = if cfg!(feature = "onnx") {
                format!(
                    "missing file (nor is its NNEF archive {} there)",
                    nnef.display()
                )
            } else {
                format!(
                    "this build reads NNEF archives only (built without the `onnx` feature), \
                     and {} is missing: write it with `hush-host export --format nnef`",
                    nnef.display()
                )
            };
            return Err(InferError::load(onnx, reason));
        }
        let model = nnef_reader()
            .model_for_path(&nnef)
            .map_err(|e| InferError::load(&nnef, format!("{e:#}")))?;
        Ok(Self {
            path: nnef,
            graph: Graph::Nnef(model),
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the graph takes one input (`input` describes it for the error).
    pub fn expect_inputs(&self, input: &str) -> Result<(), InferError> {
        match self.inputs() {
            1 => Ok(()),
            n => Err(InferError::foreign(
                &self.path,
                format!("{n} inputs; expected one, {input}"),
            )),
        }
    }

    /// How many inputs the graph takes.
    pub fn inputs(&self) -> usize {
        match &self.graph {
            #[cfg(feature = "onnx")]
            Graph::Onnx(m) => m.inputs.len(),
            Graph::Nnef(m) => m.inputs.len(),
        }
    }

    /// The names of the graph's outputs, in order: an ONNX file's output nodes' names; an
    /// archive's results, which hush's writer names as the ONNX file named its outputs.
    pub fn output_names(&self) -> Vec<String> {
        match &self.graph {
            #[cfg(feature = "onnx")]
            Graph::Onnx(m) => m
                .outputs
                .iter()
                .map(|o| m.node(o.node).name.clone())
                .collect(),
            Graph::Nnef(m) => m
                .outputs
                .iter()
                .map(|o| match m.outlet_label(*o) {
                    Some(label) => label.to_string(),
                    None => m.node(o.node).name.clone(),
                })
                .collect(),
        }
    }

    /// The graph typed with input `i` of f32 `shapes[i]` (as many shapes as inputs).
    pub fn typed(&self, shapes: &[&[Dim]]) -> TractResult<TypedModel> {
        if shapes.len() != self.inputs() {
            bail!("{} inputs; expected {}", self.inputs(), shapes.len());
        }
        match &self.graph {
            #[cfg(feature = "onnx")]
            Graph::Onnx(model) => {
                let mut model = model.clone();
                for (i, dims) in shapes.iter().enumerate() {
                    let dims: TVec<TDim> = dims
                        .iter()
                        .map(|d| match d {
                            Dim::Is(n) => n.to_dim(),
                            Dim::Free(name) => model.symbols.sym(name).into(),
                        })
                        .collect();
                    model = model.with_input_fact(i, f32::fact(dims).into())?;
                }
                tract_onnx::prelude::InferenceModelExt::into_typed(model)
            }
            Graph::Nnef(model) => {
                let mut subs = HashMap::new();
                for (i, dims) in shapes.iter().enumerate() {
                    let fact = model.input_fact(i)?;
                    let wanted =
                        || format!("input {i} is {fact:?}; expected f32 {}", shape_text(dims));
                    if fact.datum_type != f32::datum_type() || fact.rank() != dims.len() {
                        bail!("{}", wanted());
                    }
                    for (have, dim) in fact.shape.iter().zip(dims.iter()) {
                        match (have, dim) {
                            (TDim::Sym(s), Dim::Is(n)) => {
                                if subs
                                    .insert(s.clone(), n.to_dim())
                                    .is_some_and(|v| v != n.to_dim())
                                {
                                    bail!("{}", wanted());
                                }
                            }
                            (TDim::Sym(_), Dim::Free(_)) => {}
                            (have, Dim::Is(n)) if have.to_usize().ok() == Some(*n) => {}
                            _ => bail!("{}", wanted()),
                        }
                    }
                }
                if subs.is_empty() {
                    Ok(model.clone())
                } else {
                    model.set_symbols(&subs)
                }
            }
        }
    }
}
