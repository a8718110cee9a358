//! `hush_train_round`: one federated round's local training on clips the app hands
//! over, hush-device's [`local_update`] (what `hush-device join` runs), returning the
//! clipped, noised update as the bytes the client uploads and a record of what privacy
//! mechanism was applied to them.

use std::ffi::c_char;

use hush::protocol::{encode_update, TrainTask};
use hush::training::{encoded_update_len, local_update, LabelledClip, LocalData};
use hush_models::package::{ModelCard, Task};

use crate::ffi::{c_str, finite, out_buffer, out_ptr, put, reset, slice, write_slice};
use crate::package::{checked_package, infer_error, model_error, training_error};
use crate::status::{call, fail, ApiError, HushStatus};
use crate::{
    HUSH_MAX_CLIP_SAMPLES, HUSH_MAX_LABEL_BYTES, HUSH_MAX_PATH_BYTES, HUSH_MAX_TASK_JSON_BYTES,
    HUSH_MAX_TRAIN_CLIPS,
};

/// One labelled recording for local training.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HushClip {
    /// Mono samples in [-1, 1] (1 to `HUSH_MAX_CLIP_SAMPLES`; fitted to the model's
    /// window as in training: padded with silence, or its loudest window kept).
    pub pcm: *const f32,
    /// Number of samples.
    pub len: usize,
    /// Their rate: must be the model's.
    pub sample_rate: u32,
    /// Its class, one of the model's labels (UTF-8, NUL-terminated, under
    /// `HUSH_MAX_LABEL_BYTES`); any other word counts as `_unknown_`, as in a corpus.
    pub label: *const c_char,
}

/// What a training round released and under which privacy mechanism: the user-level clip
/// bound (the sensitivity the host's accountant uses), the local noise, and the header
/// fields of the update. Nothing in it is computed from the clips' content beyond what the
/// update itself carries (and their count). The host adds the central noise and keeps
/// the ε ledger.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HushPrivacyRecord {
    /// Round id (the task's).
    pub round: u64,
    /// Model version trained from (the task's).
    pub model_version: u64,
    /// Device id the update is for.
    pub device_id: u64,
    /// Bytes of the update (as `*update_len`).
    pub update_bytes: u64,
    /// The user-level L2 bound the update was clipped to, sqrt(Σ C_l²) over the task's
    /// per-layer bounds (the one bound when flat).
    pub clip_bound: f64,
    /// L2 norm of the update as sent (≤ `clip_bound`): sqrt(Σ layer_norms²) of its header.
    pub update_norm: f64,
    /// Standard deviation of the Gaussian noise added on the device (0: none).
    pub local_noise_std: f64,
    /// Per-example gradient clip bound in the local steps (0: none).
    pub example_clip: f64,
    /// Update encoding version (hush's `UPDATE_FORMAT_VERSION`).
    pub format_version: u32,
    /// Local examples trained on (the clips).
    pub examples: u32,
    /// Local SGD steps taken.
    pub steps: u32,
    /// Layers (trainable tensors) in the update.
    pub layers: u32,
    /// 1 when every layer was scaled to exactly its bound (layer-wise normalization), else
    /// 0.
    pub normalized_layers: u32,
    /// CRC-32 (IEEE) of the update bytes: the value of the upload's `x-hush-crc32` header
    /// (print it with `%08x`).
    pub checksum_crc32: u32,
}

/// Runs one round of local training from the keyword-spotting model package in
/// `package_dir` on `clip_count` clips, as the round's task says, for device
/// `device_id`. `task_json` is the task the host handed out at check-in (the `Train`
/// assignment's fields: `round`, `model_version`, `deadline_ms`, `local`, `clip`), UTF-8
/// and NUL-terminated. The update — the weight delta, clipped to the task's bound, with
/// the task's local noise — is written to `update` as the postcard-encoded bytes to
/// upload, its length to `*update_len`, and what was done to `*record`.
///
/// The update's size depends only on the model, the task and the device id, and is known
/// before training: when `update_cap` is smaller, nothing is trained, `*update_len` is the
/// size needed and the status is BUFFER_TOO_SMALL (`update` may be NULL when `update_cap`
/// is 0: a size query).
///
/// Errors: NULL_POINTER, INVALID_ARGUMENT (no clips, an empty clip or label, a sample that
/// is not finite, a task that does not parse or does not fit the model), TOO_LONG
/// (`clip_count` over `HUSH_MAX_TRAIN_CLIPS`, a clip over `HUSH_MAX_CLIP_SAMPLES`, a path,
/// task or label over its maximum), UNSUPPORTED_SAMPLE_RATE, NOT_FOUND, BAD_PACKAGE,
/// WRONG_MODEL_KIND, BUFFER_TOO_SMALL, TRAINING_FAILED.
///
/// # Safety
/// `package_dir` and `task_json` are NULL or NUL-terminated strings; `clips` is NULL or
/// points to `clip_count` `HushClip`s, each with `pcm` NULL or pointing to `len` floats
/// and `label` NULL or a NUL-terminated string; `update` is NULL or points to
/// `update_cap` writable bytes; `update_len` and `record` are NULL or point to writable
/// memory for one `size_t` and one `HushPrivacyRecord`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn hush_train_round(
    package_dir: *const c_char,
    task_json: *const c_char,
    device_id: u64,
    clips: *const HushClip,
    clip_count: usize,
    update: *mut u8,
    update_cap: usize,
    update_len: *mut usize,
    record: *mut HushPrivacyRecord,
) -> HushStatus {
    call(|| {
        // SAFETY: NULL or writable per the contract.
        unsafe { reset(update_len, 0) };
        // SAFETY: NULL or writable per the contract.
        unsafe { reset(record, HushPrivacyRecord::default()) };
        let update_len = out_ptr(update_len, "update_len")?;
        let record = out_ptr(record, "record")?;
        // SAFETY: NULL or NUL-terminated per the contract.
        let path = unsafe { c_str(package_dir, HUSH_MAX_PATH_BYTES, "package_dir") }?;
        // SAFETY: NULL or NUL-terminated per the contract.
        let task = unsafe { c_str(task_json, HUSH_MAX_TASK_JSON_BYTES, "task_json") }?;
        let task: TrainTask = serde_json::from_str(task).or_else(|e| {
            fail(
                HushStatus::InvalidArgument,
                format!("`task_json` is not a hush training task: {e}"),
            )
        })?;
        // SAFETY: `clips` is NULL or points to `clip_count` HushClips per the contract.
        let clips = unsafe { slice(clips, clip_count, HUSH_MAX_TRAIN_CLIPS, "clips") }?;
        if clips.is_empty() {
            return fail(
                HushStatus::InvalidArgument,
                "`clip_count` is 0: local training needs at least one clip",
            );
        }
        let buffer = out_buffer(update, update_cap, "update")?;
        let dir = checked_package(path, Task::Kws, "hush_train_round")?;
        let card = ModelCard::read(&dir).map_err(model_error)?;
        let rate = hush::infer::card_features(&card, &dir)
            .map_err(infer_error)?
            .frame
            .sample_rate;
        let clips = clips
            .iter()
            .enumerate()
            // SAFETY: each clip's pointers are NULL or valid per the contract.
            .map(|(i, c)| unsafe { clip(c, i, rate) })
            .collect::<Result<Vec<_>, _>>()?;

        let needed = encoded_update_len(&card, &task, device_id).map_err(training_error)?;
        if update_cap < needed {
            // SAFETY: checked by `out_ptr`; writable per the contract.
            unsafe { put(update_len, needed) };
            return fail(
                HushStatus::BufferTooSmall,
                format!(
                    "the update is {needed} bytes; `update_cap` is {update_cap} (nothing \
                     was trained)"
                ),
            );
        }
        let data = LocalData::from_clips(&card, &dir, &clips).map_err(training_error)?;
        let (delta, report) =
            local_update(&dir, &data, &task, device_id).map_err(training_error)?;
        let body =
            encode_update(&delta).or_else(|e| fail(HushStatus::TrainingFailed, e.to_string()))?;
        if body.len() > update_cap {
            // encoded_update_len is exact; this would be a bug, but the buffer is safe.
            return fail(
                HushStatus::TrainingFailed,
                format!(
                    "the update is {} bytes, not the {needed} predicted (a bug in hush)",
                    body.len()
                ),
            );
        }
        // SAFETY: `buffer` came from `out_buffer` on `update`, which points to
        // `update_cap` writable bytes per the contract, and `body.len()` ≤ `update_cap`.
        unsafe { write_slice(buffer, &body) };
        let h = &delta.header;
        let norm = h
            .layer_norms
            .iter()
            .map(|n| f64::from(*n) * f64::from(*n))
            .sum::<f64>()
            .sqrt();
        let made = HushPrivacyRecord {
            round: h.round,
            model_version: h.model_version,
            device_id: h.device_id,
            update_bytes: body.len() as u64,
            clip_bound: report.sensitivity,
            update_norm: norm,
            local_noise_std: f64::from(task.clip.local_noise_std),
            example_clip: task.local.example_clip.map_or(0.0, f64::from),
            format_version: u32::from(h.format_version),
            examples: report.examples as u32,
            steps: report.steps as u32,
            layers: delta.layers.len() as u32,
            normalized_layers: u32::from(task.clip.normalize_layers),
            checksum_crc32: crc32fast::hash(&body),
        };
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe {
            put(update_len, body.len());
            put(record, made);
        }
        Ok(())
    })
}

/// Clip number `i`, checked: its samples, rate and label.
///
/// # Safety
/// `c.pcm` is NULL or points to `c.len` floats; `c.label` is NULL or NUL-terminated.
unsafe fn clip(c: &HushClip, i: usize, rate: u32) -> Result<LabelledClip<'_>, ApiError> {
    let name = format!("clips[{i}].pcm");
    // SAFETY: per this function's contract.
    let samples = unsafe { slice(c.pcm, c.len, HUSH_MAX_CLIP_SAMPLES, &name) }?;
    if samples.is_empty() {
        return fail(
            HushStatus::InvalidArgument,
            format!("`clips[{i}].len` is 0: a clip needs samples"),
        );
    }
    if c.sample_rate != rate {
        return fail(
            HushStatus::UnsupportedSampleRate,
            format!(
                "`clips[{i}].sample_rate` {} Hz: this model's features are computed at {rate} \
                 Hz (resample first)",
                c.sample_rate
            ),
        );
    }
    finite(samples, &name)?;
    let label_name = format!("clips[{i}].label");
    // SAFETY: per this function's contract.
    let label = unsafe { c_str(c.label, HUSH_MAX_LABEL_BYTES - 1, &label_name) }?;
    if label.is_empty() {
        return fail(
            HushStatus::InvalidArgument,
            format!("`{label_name}` is empty"),
        );
    }
    Ok(LabelledClip {
        samples,
        sample_rate: c.sample_rate,
        label,
    })
}
