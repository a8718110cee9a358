//! Every bundled model carries the NNEF archive of its ONNX file beside it (what a device
//! built without tract's ONNX parser reads: `hush_device::infer::graph`), and the archive is
//! current: on the same inputs it gives the committed ONNX file's outputs. (Not the same
//! bytes: tract names the nodes its optimiser splits in no fixed order, so two archives of
//! Silero VAD can differ in names alone.) A model file changed without its archive fails
//! here, naming the command that writes it again.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{flat_outputs, max_abs, Rng};
use hush_models::export::nnef::{archive_path, nnef};
use tract_onnx::prelude::*;

/// `model` with every symbolic input dimension set to 64 (frames: more than the streaming
/// trunk's receptive field of 26), optimised and run on
/// `seed`'s values: its outputs, flattened.
fn outputs(model: TypedModel, seed: u64) -> Vec<Vec<f32>> {
    let mut subs = HashMap::new();
    for i in 0..model.inputs.len() {
        for d in model.input_fact(i).unwrap().shape.iter() {
            if let TDim::Sym(s) = d {
                subs.insert(s.clone(), 64.to_dim());
            }
        }
    }
    let model = model.set_symbols(&subs).unwrap();
    let mut rng = Rng(seed);
    let inputs: TVec<TValue> = (0..model.inputs.len())
        .map(|i| {
            let shape = model
                .input_fact(i)
                .unwrap()
                .shape
                .as_concrete()
                .unwrap()
                .to_vec();
            let values = rng.values(shape.iter().product(), 1.0);
            tract_ndarray::ArrayD::from_shape_vec(shape, values)
                .unwrap()
                .into_tensor()
                .into_tvalue()
        })
        .collect();
    let plan = model.into_optimized().unwrap().into_runnable().unwrap();
    flat_outputs(plan.run(inputs).unwrap())
}

#[test]
fn the_bundled_archives_give_the_bundled_onnx_files_outputs() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for model in [
        "kws-12/model.onnx",
        "kws-12/frames.onnx",
        "kws-12/head.onnx",
        "kws-22/model.onnx",
        "kws-22/frames.onnx",
        "kws-22/head.onnx",
        "asr/model.onnx",
        "vad/silero_vad_16k_sequence.onnx",
    ] {
        let onnx = models.join(model);
        let archive = archive_path(&onnx);
        let stale = format!(
            "{} is not the archive of {model}: write it again with \
             `hush-host export --model models/{model} --format nnef`",
            archive.display()
        );
        let from_onnx = tract_onnx::onnx()
            .model_for_path(&onnx)
            .unwrap()
            .into_typed()
            .unwrap();
        let from_archive = nnef()
            .model_for_path(&archive)
            .unwrap_or_else(|e| panic!("{stale} ({e:#})"));
        let (a, b) = (outputs(from_onnx, 5), outputs(from_archive, 5));
        assert_eq!(a.len(), b.len(), "{stale}");
        for (x, y) in a.iter().zip(&b) {
            assert!(x.len() == y.len() && max_abs(x, y) <= 1e-5, "{stale}");
        }
    }
}
