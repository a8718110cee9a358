//! `HushTranscriber`: speech recognition of a buffer, hush-device's [`AsrRecognizer`]
//! (what `hush-device transcribe` runs) behind a handle.

use std::ffi::c_char;
use std::path::Path;

use hush::audio::Audio;
use hush::infer::{AsrRecognizer, Decoder};
use hush_models::package::Task;

use crate::ffi::{c_str, finite, out_buffer, out_ptr, put, reset, slice, write_slice};
use crate::package::{checked_package, infer_error};
use crate::registry::{handle_of, token_of, Registry};
use crate::status::{call, fail, HushStatus};
use crate::{HUSH_MAX_BEAM, HUSH_MAX_PATH_BYTES, HUSH_MAX_TRANSCRIBE_SAMPLES};

/// A speech recogniser (opaque). Open with `hush_transcriber_open`, close with
/// `hush_transcriber_close`. Calls on one transcriber from several threads run one at a
/// time.
pub struct HushTranscriber {
    _opaque: [u8; 0],
}

static TRANSCRIBERS: Registry<AsrRecognizer> = Registry::new("HushTranscriber");

/// Opens the speech-recognition model package in the directory `package_dir` (UTF-8,
/// NUL-terminated, at most `HUSH_MAX_PATH_BYTES`) and stores the new transcriber in
/// `*out` (set to NULL first, and left NULL on failure).
///
/// Errors: NULL_POINTER, TOO_LONG (path), INVALID_ARGUMENT (a path that is empty or not
/// UTF-8), NOT_FOUND, BAD_PACKAGE, WRONG_MODEL_KIND (a keyword spotter's package).
///
/// # Safety
/// `package_dir` is NULL or a NUL-terminated string; `out` is NULL or points to writable
/// memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hush_transcriber_open(
    package_dir: *const c_char,
    out: *mut *mut HushTranscriber,
) -> HushStatus {
    call(|| {
        // SAFETY: `out` is NULL or writable per the contract.
        unsafe { reset(out, std::ptr::null_mut()) };
        let out = out_ptr(out, "out")?;
        // SAFETY: NULL or NUL-terminated per the contract.
        let path = unsafe { c_str(package_dir, HUSH_MAX_PATH_BYTES, "package_dir") }?;
        let dir = checked_package(path, Task::Asr, "hush_transcriber_open")?;
        let asr = AsrRecognizer::load(&dir).map_err(infer_error)?;
        let token = TRANSCRIBERS.insert(asr)?;
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe { put(out, handle_of(token)) };
        Ok(())
    })
}

/// Writes the sample rate the transcriber takes (the model's, e.g. 16000) to `*out`.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn hush_transcriber_sample_rate(
    transcriber: *const HushTranscriber,
    out: *mut u32,
) -> HushStatus {
    call(|| {
        let token = token_of(transcriber, "transcriber")?;
        let out = out_ptr(out, "out")?;
        let rate = TRANSCRIBERS.with(token, |t| Ok(t.features().frame.sample_rate))?;
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe { put(out, rate) };
        Ok(())
    })
}

/// Transcribes one utterance: `len` mono samples (1 to `HUSH_MAX_TRANSCRIBE_SAMPLES`, in
/// [-1, 1]) at `sample_rate` Hz, which must be the model's. `beam` 0 decodes greedily (as
/// `hush-device transcribe`), N > 0 by prefix beam search keeping N prefixes (at most
/// `HUSH_MAX_BEAM`). The text (UTF-8, lower case) is written to `text` with a NUL, and
/// its length in bytes, without the NUL, to `*text_len`.
///
/// When `text_cap` is under that length + 1, nothing is written to `text` (which may be
/// NULL when `text_cap` is 0), `*text_len` is the length needed without the NUL, and the
/// status is BUFFER_TOO_SMALL: call again with a larger buffer (the same input gives the
/// same text).
///
/// Errors: NULL_POINTER, INVALID_ARGUMENT (no samples, a sample that is not finite, a
/// beam over the maximum), TOO_LONG, UNSUPPORTED_SAMPLE_RATE, BUFFER_TOO_SMALL,
/// INVALID_HANDLE, INFERENCE_FAILED.
///
/// # Safety
/// `pcm` is NULL or points to `len` floats; `text` is NULL or points to `text_cap`
/// writable bytes; `text_len` is NULL or points to writable memory for one `size_t`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn hush_transcribe(
    transcriber: *mut HushTranscriber,
    pcm: *const f32,
    len: usize,
    sample_rate: u32,
    beam: u32,
    text: *mut c_char,
    text_cap: usize,
    text_len: *mut usize,
) -> HushStatus {
    call(|| {
        // SAFETY: `text_len` is NULL or writable per the contract.
        unsafe { reset(text_len, 0) };
        let text_len = out_ptr(text_len, "text_len")?;
        let token = token_of(transcriber, "transcriber")?;
        // SAFETY: `pcm` is NULL or points to `len` floats per the contract.
        let samples = unsafe { slice(pcm, len, HUSH_MAX_TRANSCRIBE_SAMPLES, "pcm") }?;
        let buffer = out_buffer(text.cast::<u8>(), text_cap, "text")?;
        if samples.is_empty() {
            return fail(
                HushStatus::InvalidArgument,
                "`len` is 0: an utterance needs samples",
            );
        }
        finite(samples, "pcm")?;
        let decoder = match beam {
            0 => Decoder::Greedy,
            n if n <= HUSH_MAX_BEAM => Decoder::Beam(n as usize),
            n => {
                return fail(
                    HushStatus::InvalidArgument,
                    format!("`beam` {n}: at most {HUSH_MAX_BEAM} prefixes"),
                )
            }
        };
        let spelled = TRANSCRIBERS.with(token, |t| {
            let rate = t.features().frame.sample_rate;
            if sample_rate != rate {
                return fail(
                    HushStatus::UnsupportedSampleRate,
                    format!(
                        "`sample_rate` {sample_rate} Hz: this model's features are computed \
                         at {rate} Hz (resample first)"
                    ),
                );
            }
            let audio = Audio {
                samples: samples.to_vec(),
                sample_rate,
            };
            t.transcribe_audio(&audio, Path::new("<pcm>"), &decoder)
                .map_err(infer_error)
        })?;
        let bytes = spelled.text.as_bytes();
        // SAFETY: checked by `out_ptr`; writable per the contract.
        unsafe { put(text_len, bytes.len()) };
        if bytes.len() >= buffer.1 {
            return fail(
                HushStatus::BufferTooSmall,
                format!(
                    "the text is {} bytes and its NUL one more; `text_cap` is {}",
                    bytes.len(),
                    buffer.1
                ),
            );
        }
        let mut with_nul = bytes.to_vec();
        with_nul.push(0);
        // SAFETY: `buffer` came from `out_buffer` on `text`, which points to `text_cap`
        // writable bytes per the contract, and `with_nul.len()` ≤ `text_cap`.
        unsafe { write_slice(buffer, &with_nul) };
        Ok(())
    })
}

/// Closes a transcriber: its memory is freed once no other thread's call is using it.
/// The handle is invalid afterwards (using or closing it again gives INVALID_HANDLE).
#[no_mangle]
pub extern "C" fn hush_transcriber_close(transcriber: *mut HushTranscriber) -> HushStatus {
    call(|| TRANSCRIBERS.remove(token_of(transcriber, "transcriber")?))
}
