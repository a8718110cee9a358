//! Audio in: decoding files (WAV, FLAC) into mono `f32` samples, writing WAV, and
//! band-limited resampling to the model rate, the lock-free sample ring out of an audio
//! callback, and (feature `mic`) microphone capture.
//!
//! Everything read from outside is checked: an unreadable, truncated, empty or
//! non-finite file gives an [`AudioError`] naming the file, never a panic.

#[cfg(feature = "mic")]
pub mod capture;
mod file;
mod resample;
mod ring;

/// Whether this build captures from microphones (feature `mic`: cpal, which on Linux links
/// ALSA's `libasound`; a C program linking the static C library then needs `-lasound`).
pub const MIC: bool = cfg!(feature = "mic");

pub use file::{read_audio, read_audio_at, write_wav_i16, Audio, AudioError, WavBlocks};
pub use resample::{resample, ResampleError, StreamResampler};
pub use ring::{sample_ring, RingConsumer, RingProducer, RING_SLOTS};
