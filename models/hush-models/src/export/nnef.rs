//! NNEF export through tract's own writer: tract reads the ONNX file hush writes
//! ([`super::onnx`]), types it, and writes it as an NNEF tar archive
//! (`graph.nnef`, `graph.quant` when needed, one `.dat` per tensor). The archive has fixed
//! timestamps, so the same weights give hush's models the same bytes (not every model:
//! where tract's decluttering splits nodes, as in Silero VAD, it names them in no fixed
//! order), and keeps the ONNX file's symbolic dimensions (the batch `N` of a keyword
//! spotter, the frame count of a CTC recogniser). [`nnef`] reads it back:
//!
//! ```no_run
//! use tract_onnx::prelude::*;
//! let model = hush_models::export::nnef::nnef()
//!     .model_for_path("model.nnef.tar")?
//!     .into_optimized()?
//!     .into_runnable()?;
//! # Ok::<(), TractError>(())
//! ```
//!
//! There is no pulsed (streaming) variant of the whole model: every hush keyword spotter
//! ends in a reduction over the whole time axis (global average pooling, or a flatten into
//! a dense layer), and tract-pulse cannot pulse a reduction over the streaming axis. A
//! package's streaming form splits that reduction off (`frames.onnx`, the per-frame trunk,
//! and `head.onnx`, archived as [`STREAM_FRAMES_NNEF`] and [`STREAM_HEAD_NNEF`]), and the
//! device pulses the trunk itself (`hush_device::infer::StreamForm::pulsed_trunk`).
//!
//! The device reads these archives in place of the ONNX files when it is built without
//! tract's ONNX parser (`hush_device::infer::graph`).

use std::path::{Path, PathBuf};

use tract_onnx::prelude::*;
use tract_onnx::WithOnnx;

use crate::ModelError;

/// File name of the NNEF archive in a package.
pub const NNEF: &str = "model.nnef.tar";
/// The NNEF archive of the streaming form's trunk (`frames.onnx`).
pub const STREAM_FRAMES_NNEF: &str = "frames.nnef.tar";
/// The NNEF archive of the streaming form's head (`head.onnx`).
pub const STREAM_HEAD_NNEF: &str = "head.nnef.tar";

/// The archive of the streaming form's trunk pulsed `pulse` frames at a time by tract-pulse
/// (`frames.pulse6.nnef.tar`): stateful, for a device that does not link tract-pulse.
pub fn pulsed_trunk_archive(pulse: usize) -> String {
    format!("frames.pulse{pulse}.nnef.tar")
}

/// `trunk` (typed, the frame axis of its input symbolic) pulsed by tract-pulse `pulse`
/// frames at a time: stateful, each layer keeping its recent frames; its `pulse.delay`
/// property says how many output frames come before the stream's first.
#[cfg(feature = "pulse")]
pub fn pulse_trunk(trunk: &TypedModel, pulse: usize) -> TractResult<TypedModel> {
    use tract_pulse::internal::{PulsedModel, PulsedModelExt};
    let time = match &trunk.input_fact(0)?.shape[1] {
        TDim::Sym(time) => time.clone(),
        d => {
            return Err(TractError::msg(format!(
                "the time axis is {d}, not a symbol"
            )))
        }
    };
    let mut pulsed = PulsedModel::new(trunk, time, &pulse.to_dim())?.into_typed()?;
    // A slice along the stream (BC-ResNet's cropped shortcuts) only moves the pulsed
    // stream's delay, and then runs as an identity that NNEF has no form for: out with it.
    for id in pulsed.eval_order()? {
        let node = pulsed.node(id);
        if node.op_is::<tract_pulse_opl::ops::PulsedAxisSlice>() {
            if let Some(patch) = TypedModelPatch::shunt_one_op(&pulsed, node)? {
                patch.apply(&mut pulsed)?;
            }
        }
    }
    pulsed.into_compact()
}

/// Writes into the keyword-spotting package in `dir` the archive of its streaming form's
/// trunk (`frames.onnx`) pulsed `pulse` frames at a time ([`pulsed_trunk_archive`]), with
/// tract-pulse's delay lines, which tract reads back with tract-pulse-opl alone. Written
/// whole and renamed. Returns its path.
#[cfg(feature = "pulse")]
pub fn write_pulsed_trunk(dir: &Path, pulse: usize) -> Result<PathBuf, ModelError> {
    let onnx = dir.join(crate::package::STREAM_FRAMES);
    let path = dir.join(pulsed_trunk_archive(pulse));
    let fail = |e: TractError| ModelError::Export {
        path: path.clone(),
        format: "nnef",
        reason: format!("the trunk pulsed {pulse} frames at a time: {e:#}"),
    };
    let trunk = tract_onnx::onnx()
        .model_for_path(&onnx)
        .and_then(|m| m.into_typed())
        .and_then(|m| m.into_decluttered())
        .map_err(fail)?;
    let pulsed = pulse_trunk(&trunk, pulse).map_err(fail)?;
    let bytes = tract_pulse::WithPulse::with_pulse(tract_nnef::nnef())
        .write_to_tar_with_config(&pulsed, Vec::new(), false, true)
        .map_err(fail)?;
    super::write_atomic(&path, &bytes, super::ExportFormat::Nnef)?;
    Ok(path)
}

/// Writes into the package in `dir`, from its own ONNX files, the NNEF archives a device
/// built without tract's ONNX parser reads in their place: the whole model's ([`NNEF`]) and,
/// where `dir` has its streaming form, its trunk's and head's ([`STREAM_FRAMES_NNEF`],
/// [`STREAM_HEAD_NNEF`]); and the trunk pulsed at each of `pulses`
/// ([`pulsed_trunk_archive`]), for a device built without tract-pulse as well. Each file is
/// written whole and renamed. Returns the files written, in that order.
#[cfg(feature = "pulse")]
pub fn write_archives(dir: &Path, pulses: &[usize]) -> Result<Vec<PathBuf>, ModelError> {
    use crate::package::{ONNX, STREAM_FRAMES, STREAM_HEAD};
    let mut written = Vec::new();
    for name in [ONNX, STREAM_FRAMES, STREAM_HEAD] {
        let onnx = dir.join(name);
        if !onnx.is_file() {
            continue;
        }
        let bytes = std::fs::read(&onnx).map_err(ModelError::io(&onnx))?;
        let path = archive_path(&onnx);
        super::write_atomic(
            &path,
            &onnx_to_nnef(&bytes, &onnx)?,
            super::ExportFormat::Nnef,
        )?;
        written.push(path);
    }
    for &pulse in pulses {
        written.push(write_pulsed_trunk(dir, pulse)?);
    }
    Ok(written)
}

/// The pulses the package in `dir` has a pulsed trunk's archive for, in increasing order.
pub fn archived_pulses(dir: &Path) -> Result<Vec<usize>, ModelError> {
    let mut pulses = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(ModelError::io(dir))? {
        let name = entry.map_err(ModelError::io(dir))?.file_name();
        pulses.extend(pulse_of_archive(&name.to_string_lossy()));
    }
    pulses.sort_unstable();
    Ok(pulses)
}

/// The pulse a [`pulsed_trunk_archive`] is named for (`frames.pulse6.nnef.tar` → 6);
/// `None` for any other name.
pub fn pulse_of_archive(name: &str) -> Option<usize> {
    name.strip_prefix("frames.pulse")
        .and_then(|rest| rest.strip_suffix(".nnef.tar"))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// Whether `name` is a [`pulsed_trunk_archive`]'s.
pub fn is_pulsed_trunk_archive(name: &str) -> bool {
    pulse_of_archive(name).is_some()
}

/// The NNEF archive prepared from the ONNX file at `onnx`, beside it: the same stem with
/// `.nnef.tar` (`model.onnx` → `model.nnef.tar`, `frames.onnx` → `frames.nnef.tar`). A device
/// built without ONNX reads it in the ONNX file's place.
pub fn archive_path(onnx: &Path) -> PathBuf {
    onnx.with_extension("nnef.tar")
}

/// The NNEF framework hush writes and reads with: tract's core operators and its ONNX
/// extension.
pub fn nnef() -> tract_nnef::framework::Nnef {
    tract_nnef::nnef().with_onnx()
}

/// The NNEF tar archive of an encoded ONNX model; `origin` names the source in errors.
/// Each output keeps the ONNX file's name for it, which tract's typing may have dropped:
/// NNEF names the graph's results after their outlets' labels, and tract reading the
/// archive labels the outputs with them (a reader checks outputs by name).
pub fn onnx_to_nnef(onnx: &[u8], origin: &Path) -> Result<Vec<u8>, ModelError> {
    let fail = |stage: &str, e: TractError| ModelError::Export {
        path: origin.to_path_buf(),
        format: "nnef",
        reason: format!("{stage}: {e:#}"),
    };
    let model = tract_onnx::onnx()
        .model_for_read(&mut &onnx[..])
        .map_err(|e| fail("reading the ONNX graph", e))?;
    let names: Vec<String> = model
        .output_outlets()
        .map_err(|e| fail("reading the ONNX graph", e))?
        .iter()
        .map(|o| match model.outlet_label(*o) {
            Some(label) => label.to_string(),
            None => model.node(o.node).name.clone(),
        })
        .collect();
    let mut model = model
        .into_typed()
        .map_err(|e| fail("typing the ONNX graph", e))?;
    for (ix, name) in names.into_iter().enumerate() {
        let outlet = model.outputs[ix];
        model
            .set_outlet_label(outlet, name)
            .map_err(|e| fail("naming the outputs", e))?;
    }
    // Typed, not decluttered, where tract can write it so: a reader declutters it for its
    // own shapes (a device fixes the batch at one first), as it would the ONNX file, and
    // gets the same graph; decluttered with the batch symbolic, DS-CNN-S optimises less well
    // there (a batch norm left unfused after its first pointwise convolution: 7 % more CPU
    // listening). Some typed ops have no NNEF form until decluttered (Silero VAD's strided
    // slices): then the decluttered graph.
    let write = |m: &TypedModel| nnef().write_to_tar_with_config(m, Vec::new(), false, true);
    match write(&model) {
        Ok(bytes) => Ok(bytes),
        Err(_) => model
            .into_decluttered()
            .map_err(|e| fail("decluttering", e))
            .and_then(|m| write(&m).map_err(|e| fail("writing NNEF", e))),
    }
}
