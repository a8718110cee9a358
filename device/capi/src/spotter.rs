//! `HushSpotter`: streaming keyword detection over pushed PCM, hush-device's
//! [`KeywordSpotter`] (the loop `hush-device listen` runs) behind a handle.

use std::collections::VecDeque;
use std::ffi::c_char;

use hush::infer::{Detection, KeywordSpotter, KwsClassifier, SileroVad, SpotterOptions, VoiceGate};
use hush_models::package::Task;

use crate::ffi::{c_str, finite, non_null, out_buffer, out_ptr, put, reset, slice, write_slice};
use crate::package::{checked_package, infer_error};
use crate::registry::{handle_of, token_of, Registry};
use crate::status::{call, fail, HushStatus};
use crate::{
    HUSH_MAX_LABEL_BYTES, HUSH_MAX_PATH_BYTES, HUSH_MAX_PENDING_DETECTIONS, HUSH_MAX_PUSH_SAMPLES,
};

/// A keyword spotter over a stream of audio (opaque). Open with `hush_spotter_open`,
/// close with `hush_spotter_close`. Calls on one spotter from several threads run one
/// at a time.
pub struct HushSpotter {
    _opaque: [u8; 0],
}

/// How a spotter turns window scores into detections (`hush-device listen`'s flags).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HushSpotterOptions {
    /// Run the model every this many milliseconds of audio (> 0; rounded to whole
    /// feature frames, or for a model with a streaming form to whole multiples of its time
    /// stride). Default 100.
    pub hop_ms: u32,
    /// Average each class's score over the windows of the last this many milliseconds
    /// (at least one window). Default 500.
    pub smooth_ms: u32,
    /// Detect a keyword when its smoothed score reaches this probability, in (0, 1].
    /// Default 0.8.
    pub threshold: f32,
    /// After a detection, report nothing for this many milliseconds. Default 1000.
    pub refractory_ms: u32,
}

impl From<SpotterOptions> for HushSpotterOptions {
    fn from(o: SpotterOptions) -> Self {
        Self {
            hop_ms: o.hop_ms,
            smooth_ms: o.smooth_ms,
            threshold: o.threshold,
            refractory_ms: o.refractory_ms,
        }
    }
}

impl From<HushSpotterOptions> for SpotterOptions {
    fn from(o: HushSpotterOptions) -> Self {
        Self {
            hop_ms: o.hop_ms,
            smooth_ms: o.smooth_ms,
            threshold: o.threshold,
            refractory_ms: o.refractory_ms,
        }
    }
}

/// One detected keyword.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HushDetection {
    /// When: the end of the window that triggered it, in seconds from the first sample
    /// pushed to this spotter.
    pub time_s: f64,
    /// Its smoothed score (a probability).
    pub score: f32,
    /// Its index in the model's labels (model.json `labels`).
    pub label_index: u32,
    /// The keyword, UTF-8, NUL-terminated.
    pub label: [c_char; HUSH_MAX_LABEL_BYTES],
}

/// An open spotter.
struct Spotter {
    spotter: KeywordSpotter,
    /// Detections not yet handed to the caller, oldest first.
    pending: VecDeque<Detection>,
    /// Reused for each push's detections.
    fresh: Vec<Detection>,
}

impl Spotter {
    fn detection(&self, d: &Detection) -> HushDetection {
        let labels = &self.spotter.classifier().card().labels;
        let index = labels.iter().position(|l| *l == d.label).unwrap_or(0);
        let mut label = [0 as c_char; HUSH_MAX_LABEL_BYTES];
        // Labels were checked to fit (with their NUL) when the spotter was opened.
        for (dst, src) in label
            .iter_mut()
            .zip(d.label.bytes().take(HUSH_MAX_LABEL_BYTES - 1))
        {
            *dst = src as c_char;
        }
        HushDetection {
            time_s: d.time_s,
            score: d.score,
            label_index: index as u32,
            label,
        }
    }
}

static SPOTTERS: Registry<Spotter> = Registry::new("HushSpotter");

/// Writes the default options (those of `hush-device listen`) to `*out`.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `HushSpotterOptions`.
#[no_mangle]
pub unsafe extern "C" fn hush_spotter_default_options(out: *mut HushSpotterOptions) -> HushStatus {
    call(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: checked by `out_ptr`; writable per this function's contract.
        unsafe { put(out, SpotterOptions::default().into()) };
        Ok(())
    })
}

/// Opens the keyword-spotting model package in the directory `package_dir` (UTF-8,
/// NUL-terminated, at most `HUSH_MAX_PATH_BYTES`) with `options` (NULL: the defaults) and
/// stores the new spotter in `*out` (set to NULL first, and left NULL on failure).
///
/// Errors: NULL_POINTER, TOO_LONG (path), INVALID_ARGUMENT (options, or a path that is
/// empty or not UTF-8), NOT_FOUND, BAD_PACKAGE (also for a model with a label of
/// `HUSH_MAX_LABEL_BYTES` bytes or more), WRONG_MODEL_KIND (a speech recogniser's
/// package).
///
/// # Safety
/// `package_dir` is NULL or a NUL-terminated string; `options` is NULL or points to one
/// `HushSpotterOptions`; `out` is NULL or points to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hush_spotter_open(
    package_dir: *const c_char,
    options: *const HushSpotterOptions,
    out: *mut *mut HushSpotter,
) -> HushStatus {
    call(|| {
        // SAFETY: `out` is NULL or writable per the contract.
        unsafe { reset(out, std::ptr::null_mut()) };
        let out = out_ptr(out, "out")?;
        // SAFETY: NULL or NUL-terminated per the contract.
        let path = unsafe { c_str(package_dir, HUSH_MAX_PATH_BYTES, "package_dir") }?;
        let options = if options.is_null() {
            SpotterOptions::default()
        } else {
            let p = non_null(options, "options")?;
            // SAFETY: non-null and aligned (checked); points to one initialised
            // HushSpotterOptions per the contract (a plain-data struct: any bits are a
            // value).
            SpotterOptions::from(unsafe { p.as_ptr().read() })
        };
        let dir = checked_package(path, Task::Kws, "hush_spotter_open")?;
        let clf = KwsClassifier::load(&dir).map_err(infer_error)?;
        if let Some(long) = clf
            .card()
            .labels
            .iter()
            .find(|l| l.len() >= HUSH_MAX_LABEL_BYTES)
        {
            return fail(
                HushStatus::BadPackage,
                format!(
                    "{path}: label {long:?} is {} bytes; the C API's labels hold at most {}",
                    long.len(),
                    HUSH_MAX_LABEL_BYTES - 1
                ),
            );
        }
        let spotter = KeywordSpotter::new(&clf, &options).map_err(infer_error)?;
        let token = SPOTTERS.insert(Spotter {
            spotter,
            pending: VecDeque::new(),
            fresh: Vec::new(),
        })?;
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe { put(out, handle_of(token)) };
        Ok(())
    })
}

/// Writes the sample rate the spotter takes (the model's, e.g. 16000) to `*out`.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn hush_spotter_sample_rate(
    spotter: *const HushSpotter,
    out: *mut u32,
) -> HushStatus {
    call(|| {
        let token = token_of(spotter, "spotter")?;
        let out = out_ptr(out, "out")?;
        let rate = SPOTTERS.with(token, |s| Ok(s.spotter.sample_rate()))?;
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe { put(out, rate) };
        Ok(())
    })
}

/// Pushes `len` mono samples (in [-1, 1]) at `sample_rate` Hz, which must be the model's
/// (`hush_spotter_sample_rate`; checked even when `len` is 0), and hands over the
/// detections now due: at most `out_cap` of them are written to `out`, oldest first, and
/// their count to `*out_len`. Detections that do not fit are kept, in order, and handed
/// over first by the next push; `len` 0 (with `pcm` NULL or not) only hands over kept
/// ones, and `hush_spotter_pending` counts them. `out` may be NULL when `out_cap` is 0.
/// Chunks may have any length up to `HUSH_MAX_PUSH_SAMPLES`; detections are the same
/// however the stream is cut.
///
/// Errors (nothing pushed, `*out_len` 0): NULL_POINTER, TOO_LONG (`len` over
/// `HUSH_MAX_PUSH_SAMPLES`), UNSUPPORTED_SAMPLE_RATE, INVALID_ARGUMENT (a sample that is
/// not finite), BUFFER_TOO_SMALL (`HUSH_MAX_PENDING_DETECTIONS` are kept already: hand
/// them over first), INVALID_HANDLE; INFERENCE_FAILED.
///
/// # Safety
/// `pcm` is NULL or points to `len` floats; `out` is NULL or points to `out_cap`
/// writable `HushDetection`s; `out_len` is NULL or points to writable memory for one
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn hush_spotter_push(
    spotter: *mut HushSpotter,
    pcm: *const f32,
    len: usize,
    sample_rate: u32,
    out: *mut HushDetection,
    out_cap: usize,
    out_len: *mut usize,
) -> HushStatus {
    call(|| {
        // SAFETY: `out_len` is NULL or writable per the contract.
        unsafe { reset(out_len, 0) };
        let out_len = out_ptr(out_len, "out_len")?;
        let token = token_of(spotter, "spotter")?;
        // SAFETY: `pcm` is NULL or points to `len` floats per the contract.
        let samples = unsafe { slice(pcm, len, HUSH_MAX_PUSH_SAMPLES, "pcm") }?;
        let buffer = out_buffer(out, out_cap, "out")?;
        finite(samples, "pcm")?;
        SPOTTERS.with(token, |s| {
            let rate = s.spotter.sample_rate();
            if sample_rate != rate {
                return fail(
                    HushStatus::UnsupportedSampleRate,
                    format!(
                        "`sample_rate` {sample_rate} Hz: this model's features are computed \
                         at {rate} Hz (resample first)"
                    ),
                );
            }
            if !samples.is_empty() && s.pending.len() >= HUSH_MAX_PENDING_DETECTIONS {
                return fail(
                    HushStatus::BufferTooSmall,
                    format!(
                        "{} detections are waiting to be handed over; push with `out_cap` > 0 \
                         (or with `len` 0) to take them first",
                        s.pending.len()
                    ),
                );
            }
            let mut fresh = std::mem::take(&mut s.fresh);
            fresh.clear();
            let pushed = s.spotter.push(samples, &mut fresh).map(|_| ());
            s.pending.extend(fresh.drain(..));
            s.fresh = fresh;
            pushed.map_err(infer_error)?;
            let n = s.pending.len().min(buffer.1);
            let taken: Vec<Detection> = s.pending.drain(..n).collect();
            let ready: Vec<HushDetection> = taken.iter().map(|d| s.detection(d)).collect();
            // SAFETY: `buffer` came from `out_buffer` on `out`, which points to `out_cap`
            // writable HushDetections per the contract, and `ready.len()` ≤ `out_cap`.
            unsafe { write_slice(buffer, &ready) };
            // SAFETY: checked by `out_ptr`; writable per the contract.
            unsafe { put(out_len, ready.len()) };
            Ok(())
        })
    })
}

/// Gates the spotter on speech: from now on it runs its model only on windows that hold
/// speech, as the Silero VAD model at `vad_model` hears it (UTF-8, NUL-terminated, at most
/// `HUSH_MAX_PATH_BYTES`: the `silero_vad_16k_sequence.onnx` of the repository's
/// `models/vad/`), a 32 ms frame being speech when its probability reaches `threshold`
/// (in (0, 1); `hush-device listen --vad` uses 0.05). Windows without speech cost no
/// inference: on a mostly silent stream, half the CPU of a model without a streaming form,
/// but more than a streaming package's spotter costs alone (BENCHMARKS.md). Call it after
/// `hush_spotter_open`, before the first push, once.
///
/// Errors (the spotter unchanged): NULL_POINTER, TOO_LONG (path), INVALID_ARGUMENT (a
/// threshold out of range; a path that is empty or not UTF-8; samples already pushed; a
/// gate already set), NOT_FOUND, BAD_PACKAGE (not Silero VAD's sequence export),
/// UNSUPPORTED_SAMPLE_RATE (a model not at 16 kHz), INVALID_HANDLE.
///
/// # Safety
/// `vad_model` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hush_spotter_enable_vad(
    spotter: *mut HushSpotter,
    vad_model: *const c_char,
    threshold: f32,
) -> HushStatus {
    call(|| {
        let token = token_of(spotter, "spotter")?;
        // SAFETY: NULL or NUL-terminated per the contract.
        let path = unsafe { c_str(vad_model, HUSH_MAX_PATH_BYTES, "vad_model") }?;
        let file = std::path::Path::new(path);
        if !file.is_file() {
            return fail(
                HushStatus::NotFound,
                format!("`vad_model` {path}: no such file"),
            );
        }
        SPOTTERS.with(token, |s| {
            let rate = s.spotter.sample_rate();
            if rate != hush::infer::vad::VAD_RATE {
                return fail(
                    HushStatus::UnsupportedSampleRate,
                    format!(
                        "the VAD runs at {} Hz; this model's features are at {rate} Hz",
                        hush::infer::vad::VAD_RATE
                    ),
                );
            }
            let vad = SileroVad::load(file).map_err(infer_error)?;
            let gate = VoiceGate::new(vad, threshold).map_err(infer_error)?;
            s.spotter.set_voice_gate(gate).map_err(infer_error)
        })
    })
}

/// Writes to `*out` how many detections the spotter holds for the next push.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn hush_spotter_pending(
    spotter: *const HushSpotter,
    out: *mut usize,
) -> HushStatus {
    call(|| {
        let token = token_of(spotter, "spotter")?;
        let out = out_ptr(out, "out")?;
        let n = SPOTTERS.with(token, |s| Ok(s.pending.len()))?;
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe { put(out, n) };
        Ok(())
    })
}

/// Closes a spotter: its memory is freed once no other thread's call is using it. The
/// handle is invalid afterwards (using or closing it again gives INVALID_HANDLE).
#[no_mangle]
pub extern "C" fn hush_spotter_close(spotter: *mut HushSpotter) -> HushStatus {
    call(|| SPOTTERS.remove(token_of(spotter, "spotter")?))
}
