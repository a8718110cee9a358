//! Features back to audio.
