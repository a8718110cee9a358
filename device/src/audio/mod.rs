//! Audio in: decoding files (WAV, FLAC) into mono `f32` samples, and writing WAV.
//!
//! Everything read from outside is checked: an unreadable, truncated, empty or
//! non-finite file gives an [`AudioError`] naming the file, never a panic.

mod file;

pub use file::{read_audio, write_wav_i16, Audio, AudioError};
