//! # libhush_device: hush on the device behind a C API
//!
//! What an app (Android through JNI, iOS through Swift, a C program on a board) links to
//! spot keywords, transcribe speech and train for a federated round, without Rust:
//! `libhush_device.a` or `libhush_device.so` and the header `include/hush_device.h`,
//! which cbindgen writes from this crate (a test fails when the committed header is
//! stale). firmware-notes/c-api.md says how to build and link it for each target.
//!
//! It owns the boundary only: every pointer, length, rate and string is checked here,
//! then the work is hush-device's ([`hush::infer::KeywordSpotter`], the loop `hush-device
//! listen` runs; [`hush::infer::AsrRecognizer`]; [`hush::training::local_update`] and
//! [`hush::protocol::encode_update`], the bytes the client uploads).
//!
//! - **Status codes.** Every function returns a [`HushStatus`] (`int32_t`); on failure
//!   `hush_last_error_message()` says what was wrong, naming the argument. Codes are
//!   stable within a major [`HUSH_API_VERSION_MAJOR`]; new ones are only appended.
//! - **No panic crosses the boundary.** Each entry point runs inside `catch_unwind`; a
//!   panic (a bug in hush) returns `HUSH_STATUS_INTERNAL_PANIC` and makes the handle it
//!   happened in unusable (close it). The crate does not compile with `panic = "abort"`.
//! - **Handles are tokens, never dereferenced.** A `HushSpotter *` is an id in a table:
//!   a closed, foreign or already-closed handle gives `HUSH_STATUS_INVALID_HANDLE`, and
//!   calls on one handle from several threads are serialised.
//!
//! This is the one crate of the workspace where `unsafe` is allowed: reading the
//! caller's buffers and strings and writing its outputs ([`ffi`]), each after a null and
//! alignment check, with a `SAFETY:` comment.

#![allow(unsafe_code)]

#[cfg(panic = "abort")]
compile_error!(
    "hush-device-capi catches panics at the C boundary and needs unwinding: build it with \
     `--profile capi` (or release), not `device` (panic = \"abort\")"
);

mod ffi;
mod package;
mod registry;
mod spotter;
mod status;
mod train;
mod transcriber;

pub use spotter::{
    hush_spotter_close, hush_spotter_default_options, hush_spotter_enable_vad, hush_spotter_open,
    hush_spotter_pending, hush_spotter_push, hush_spotter_sample_rate, HushDetection, HushSpotter,
    HushSpotterOptions,
};
pub use status::{hush_api_version, hush_last_error_message, hush_status_name, HushStatus};
pub use train::{hush_train_round, HushClip, HushPrivacyRecord};
pub use transcriber::{
    hush_transcribe, hush_transcriber_close, hush_transcriber_open, hush_transcriber_sample_rate,
    HushTranscriber,
};

/// Major version of this API: bumped when a function, type or status code changes
/// incompatibly. An app built against another major version must not use the library.
pub const HUSH_API_VERSION_MAJOR: u32 = 1;
/// Minor version: bumped when functions or status codes are added (compatible: an app
/// built against an older minor version runs unchanged).
pub const HUSH_API_VERSION_MINOR: u32 = 1;

/// Most samples one `hush_spotter_push` takes: 10 s at 16 kHz.
pub const HUSH_MAX_PUSH_SAMPLES: usize = 160_000;
/// Most samples `hush_transcribe` takes: 30 s at 16 kHz.
pub const HUSH_MAX_TRANSCRIBE_SAMPLES: usize = 480_000;
/// Most clips one `hush_train_round` takes.
pub const HUSH_MAX_TRAIN_CLIPS: usize = 1024;
/// Most samples of one training clip: 10 s at 16 kHz (a clip is fitted to the model's
/// one-second window).
pub const HUSH_MAX_CLIP_SAMPLES: usize = 160_000;
/// Most bytes of a path, before its NUL.
pub const HUSH_MAX_PATH_BYTES: usize = 4096;
/// Most bytes of a training task's JSON, before its NUL.
pub const HUSH_MAX_TASK_JSON_BYTES: usize = 1 << 20;
/// Size of `HushDetection.label` and most bytes of a clip's label, NUL included: a model
/// with a longer label is refused when opened.
pub const HUSH_MAX_LABEL_BYTES: usize = 64;
/// Most detections a spotter holds for the caller (see `hush_spotter_push`).
pub const HUSH_MAX_PENDING_DETECTIONS: usize = 1024;
/// Widest beam `hush_transcribe` takes.
pub const HUSH_MAX_BEAM: u32 = 256;
