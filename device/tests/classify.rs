//! `infer`: a package written by hush-models loads and classifies; bad packages, foreign
//! ONNX files and wrong-rate audio are refused with errors that say what is wrong.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use hush_device::audio::{write_wav_i16, Audio};
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{clip_samples, KwsClassifier, KwsStream};
use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape};
use hush_models::package::{write_package, ModelCard};

fn features() -> FeatureConfig {
    let mut f = FeatureConfig::kaldi(FeatureKind::Fbank);
    f.mel.num_bins = 40;
    f
}

fn package(dir: &Path) -> ModelCard {
    let io = IoShape {
        frames: 98,
        bins: 40,
        classes: 4,
    };
    let arch = ArchConfig::DsCnnS(DsCnnConfig {
        channels: 8,
        blocks: 1,
        ..DsCnnConfig::small(io)
    });
    let model = arch.init_seeded(&Device::flex(), 1).unwrap().valid();
    let labels = ["yes", "no", "_silence_", "_unknown_"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let card = ModelCard::new(
        arch,
        serde_json::to_value(features()).unwrap(),
        labels,
        &model,
    )
    .unwrap();
    write_package(dir, &card, &model).unwrap();
    card
}

fn tone(dir: &Path, rate: u32) -> std::path::PathBuf {
    let p = dir.join(format!("tone{rate}.wav"));
    let samples = (0..rate)
        .map(|i| 0.3 * (i as f32 * 440.0 * std::f32::consts::TAU / rate as f32).sin())
        .collect();
    write_wav_i16(
        &p,
        &Audio {
            samples,
            sample_rate: rate,
        },
    )
    .unwrap();
    p
}

fn load_err(dir: &Path) -> String {
    format!("{}", KwsClassifier::load(dir).unwrap_err())
}

#[test]
fn a_package_classifies_and_scores_sum_to_one() {
    let dir = tempfile::tempdir().unwrap();
    package(dir.path());
    let clf = KwsClassifier::load(dir.path()).unwrap();
    let wav = tone(dir.path(), 16_000);
    let c = clf.classify_file(&wav).unwrap();
    assert_eq!(c.scores.len(), 4);
    let total: f32 = c.scores.values().sum();
    assert!((total - 1.0).abs() < 1e-4, "{total}");
    assert_eq!(c.scores[&c.label], c.score);
}

#[test]
fn a_stream_scores_each_window_as_its_clip_alone() {
    let dir = tempfile::tempdir().unwrap();
    package(dir.path());
    let clf = KwsClassifier::load(dir.path()).unwrap();
    let cfg = clf.features().clone();
    // 2.5 s of a gliding tone, so that windows differ.
    let samples: Vec<f32> = (0..40_000)
        .map(|i| {
            let t = i as f32 / 16_000.0;
            0.3 * (std::f32::consts::TAU * (300.0 + 400.0 * t) * t).sin()
        })
        .collect();
    let hop = 7;
    let mut spot = KwsStream::new(&clf, hop).unwrap();
    let mut verdicts = Vec::new();
    for chunk in samples.chunks(333) {
        spot.push(chunk, &mut verdicts).unwrap();
    }
    // 98 frames a window; 248 frames in 2.5 s: windows end at frames 98, 105, …, 245.
    assert_eq!(verdicts.len(), 1 + (248 - 98) / hop);
    let shift = cfg.frame.window_shift();
    let n = clip_samples(&cfg, 98);
    for (k, v) in verdicts.iter().enumerate() {
        let start = k * hop * shift;
        let alone = Audio {
            samples: samples[start..start + n].to_vec(),
            sample_rate: 16_000,
        };
        let c = clf.classify_audio(&alone, Path::new("clip")).unwrap();
        assert_eq!(v.label, c.label, "window {k}");
        assert!(
            (v.score - c.score).abs() < 1e-5,
            "window {k}: {} vs {}",
            v.score,
            c.score
        );
        let end = (start + n) as f64 / 16_000.0;
        assert!(
            (v.end_s - end).abs() < 1e-9,
            "window {k}: ends {} not {end}",
            v.end_s
        );
    }
}

#[test]
fn wrong_rate_audio_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    package(dir.path());
    let clf = KwsClassifier::load(dir.path()).unwrap();
    let wav = tone(dir.path(), 8_000);
    let e = clf.classify_file(&wav).unwrap_err().to_string();
    assert!(e.contains("8000 Hz") && e.contains("16000 Hz"), "{e}");
}

#[test]
fn bad_packages_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // Not a directory / no model.json.
    let e = load_err(&d.join("nope"));
    assert!(e.contains("not a directory"), "{e}");
    std::fs::create_dir(d.join("empty")).unwrap();
    let e = load_err(&d.join("empty"));
    assert!(e.contains("model.json"), "{e}");

    // model.json that is not ours.
    let p = d.join("json");
    package(&p);
    std::fs::write(p.join("model.json"), "{\"hello\": 1}").unwrap();
    let e = load_err(&p);
    assert!(e.contains("not a hush model.json"), "{e}");

    // Labels that do not match the architecture.
    let p = d.join("labels");
    let mut card = package(&p);
    card.labels.pop();
    card.write(&p).unwrap();
    let e = load_err(&p);
    assert!(e.contains("3 labels") && e.contains("4 outputs"), "{e}");

    // Feature config giving another number of bins than the model takes.
    let p = d.join("bins");
    let mut card = package(&p);
    let mut f = features();
    f.mel.num_bins = 23;
    card.features = serde_json::to_value(f).unwrap();
    card.write(&p).unwrap();
    let e = load_err(&p);
    assert!(
        e.contains("23 values per frame") && e.contains("takes 40"),
        "{e}"
    );

    // An ONNX file that is not an ONNX file.
    let p = d.join("garbage");
    package(&p);
    std::fs::write(p.join("model.onnx"), b"definitely not protobuf").unwrap();
    let e = load_err(&p);
    assert!(
        e.contains("model.onnx") && e.contains("tract cannot load"),
        "{e}"
    );

    // A real ONNX model, but of another shape: the package of a 2-class model.
    let p = d.join("foreign");
    package(&p);
    let other = d.join("other");
    let io = IoShape {
        frames: 98,
        bins: 40,
        classes: 2,
    };
    let arch = ArchConfig::DsCnnS(DsCnnConfig {
        channels: 8,
        blocks: 1,
        ..DsCnnConfig::small(io)
    });
    let model = arch.init_seeded(&Device::flex(), 2).unwrap().valid();
    let card = ModelCard::new(
        arch,
        serde_json::to_value(features()).unwrap(),
        vec!["a".into(), "b".into()],
        &model,
    )
    .unwrap();
    write_package(&other, &card, &model).unwrap();
    std::fs::copy(other.join("model.onnx"), p.join("model.onnx")).unwrap();
    let e = load_err(&p);
    assert!(e.contains("not the model model.json describes"), "{e}");
}

/// An ONNX model from elsewhere: `Identity` from `x` `[1, 98, 40]` to `y`, and as many
/// more inputs as `extra_inputs`.
fn foreign_onnx(extra_inputs: usize) -> Vec<u8> {
    use prost::Message;
    use tract_onnx::pb;
    let input = |name: &str| pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            denotation: String::new(),
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto {
                    dim: [1, 98, 40]
                        .iter()
                        .map(|&n| pb::tensor_shape_proto::Dimension {
                            denotation: String::new(),
                            value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(n)),
                        })
                        .collect(),
                }),
            })),
        }),
        ..Default::default()
    };
    let mut inputs = vec![input("x")];
    inputs.extend((0..extra_inputs).map(|k| input(&format!("extra{k}"))));
    let graph = pb::GraphProto {
        node: vec![pb::NodeProto {
            input: vec!["x".into()],
            output: vec!["y".into()],
            name: "y".into(),
            op_type: "Identity".into(),
            ..Default::default()
        }],
        name: "elsewhere".into(),
        input: inputs,
        output: vec![pb::ValueInfoProto {
            name: "y".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    pb::ModelProto {
        ir_version: 8,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "elsewhere".into(),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn an_onnx_model_from_elsewhere_is_refused_by_the_contract_it_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pkg");
    package(&p);
    std::fs::write(p.join("model.onnx"), foreign_onnx(0)).unwrap();
    let e = load_err(&p);
    assert!(
        e.contains("model.onnx")
            && e.contains("not the model model.json describes")
            && e.contains("[\"y\"]")
            && e.contains("expected an output named `probs`"),
        "{e}"
    );
    std::fs::write(p.join("model.onnx"), foreign_onnx(1)).unwrap();
    let e = load_err(&p);
    assert!(e.contains("2 inputs; expected one"), "{e}");
}

/// What the device runs (tract with hush-tract-ops' kernels swapped in) gives burn's
/// probabilities, within 1e-4, for every keyword-spotting architecture at its default size,
/// and runs each architecture's slow ops with hush's kernels: DS-CNN-S and BC-ResNet's
/// depthwise convolutions, BC-ResNet's means over frequency, leak-CNN's max pooling.
#[test]
fn the_device_plan_equals_burn_on_every_architecture() {
    use burn::tensor::{Tensor, TensorData};
    use hush_models::arch::ARCH_NAMES;
    let io = IoShape {
        frames: 98,
        bins: 40,
        classes: 4,
    };
    let labels: Vec<String> = ["yes", "no", "_silence_", "_unknown_"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let window: Vec<f32> = (0..io.frames * io.bins)
        .map(|i| ((i as f32) * 0.37).sin() * 3.0)
        .collect();
    for arch in ARCH_NAMES {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = ArchConfig::default_for(arch, io).unwrap();
        let device = Device::flex();
        let model = cfg.init_seeded(&device, 7).unwrap().valid();
        let card = ModelCard::new(
            cfg,
            serde_json::to_value(features()).unwrap(),
            labels.clone(),
            &model,
        )
        .unwrap();
        write_package(tmp.path(), &card, &model).unwrap();
        let clf = KwsClassifier::load(tmp.path()).unwrap();
        let got = clf.probs(&window, Path::new("window")).unwrap();

        let x = Tensor::<3>::from_data(
            TensorData::new(window.clone(), [1, io.frames, io.bins]),
            &device,
        );
        let logits = hush_models::step::logits(&model, x).unwrap().concat();
        let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = logits.iter().map(|v| (v - top).exp()).collect();
        let want: Vec<f32> = e.iter().map(|v| v / e.iter().sum::<f32>()).collect();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-4,
                "{arch}: device {got:?}, burn {want:?}"
            );
        }

        // Where tract has a vectorised channels-last depthwise kernel (aarch64's NEON), its
        // declutter pass moves depthwise convolutions of 16 channels or more channels-last and
        // runs them itself (with the means over frequency around them); elsewhere hush's run.
        let tract_depthwise = cfg!(target_arch = "aarch64");
        let k = clf.hush_kernels().unwrap();
        match arch {
            // Each depthwise and pointwise convolution with the batch norm's multiply and the
            // ReLU after it folded in (and its add, which tract drops here: an untrained
            // model's adds 0), and the first convolution with its ReLU; channels-last, the
            // head too (a dense layer, its bias folded in).
            "ds-cnn-s" => assert!(
                tract_depthwise
                    || (k.depthwise > 0
                        && k.pointwise == k.depthwise
                        && k.dense_layers == k.channels_last as usize
                        && k.dense == 1
                        && k.folded == 4 * k.depthwise + k.dense + k.channels_last as usize),
                "{arch}: {k:?}"
            ),
            "bc-resnet" => assert!(
                tract_depthwise || (k.depthwise > 0 && k.sum > 0),
                "{arch}: {k:?}"
            ),
            // Its dense layers are matrix-vector products (the first over the flattened
            // second pooling). Channels-last (where the CPU has vectors) each convolution
            // takes in its ReLU and pooling, and each dense layer its bias (the first its
            // ReLU too); else the first pooling stays an op of its own.
            "leak-cnn" => assert!(
                k.dense_layers == 2
                    && k.dense == 2
                    && if k.channels_last {
                        k.max_pool == 0 && k.folded == 7
                    } else {
                        k.max_pool > 0
                    },
                "{arch}: {k:?}"
            ),
            other => panic!("an architecture this test does not know: {other}"),
        }
    }
}
