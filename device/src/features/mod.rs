//! The feature front-end: spectrogram, log mel filterbank (fbank) and MFCC as pure
//! functions of a [`FeatureConfig`], computed whole ([`compute`]) or streaming
//! ([`FeatureStream`]) with the same numbers.
//!
//! Modules, one concept each: [`config`] (typed, serde options and the `kaldi` / `librosa`
//! presets), [`frame`] (framing and edge padding), [`window`] (window shapes and the
//! pre-FFT chain), [`spectrum`] (FFT, power, log), [`mel`] (mel scales and filterbank),
//! [`mfcc`] (DCT-II and liftering), [`cmvn`] (normalisation), [`pipeline`] (one frame),
//! [`stream`] (chunked input).
//!
//! It does not read files or resample: that is [`crate::audio`].
//!
//! ```
//! use hush_device::features::{compute, FeatureConfig, FeatureKind};
//! let cfg = FeatureConfig::kaldi(FeatureKind::Mfcc);
//! let samples = vec![0.01f32; 16_000]; // 1 s at 16 kHz
//! let f = compute(&cfg, &samples).unwrap();
//! assert_eq!((f.num_frames, f.dim), (98, 13));
//! ```

pub mod cmvn;
pub mod config;
mod error;
pub mod frame;
pub mod mel;
pub mod mfcc;
pub mod npy;
pub mod pipeline;
pub mod spectrum;
pub mod stream;
pub mod window;

pub use config::{
    CmvnOptions, FeatureConfig, FeatureKind, FrameOptions, Lifter, LogKind, MelLayout, MelNorm,
    MelOptions, MelScale, MfccOptions, Padding, Preset, SpectrumKind, SpectrumOptions, WindowKind,
};
pub use error::FeatureError;
pub use stream::FeatureStream;

/// A feature matrix, `num_frames × dim`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    /// The values, frame after frame.
    pub data: Vec<f32>,
    /// Number of frames (rows).
    pub num_frames: usize,
    /// Values per frame (columns).
    pub dim: usize,
}

impl Features {
    /// Frame `i`.
    pub fn frame(&self, i: usize) -> Option<&[f32]> {
        self.data.get(i * self.dim..(i + 1) * self.dim)
    }
}

/// Computes the features of a whole signal (`samples` in [-1, 1] at
/// `cfg.frame.sample_rate`).
///
/// Errors: a bad option, no samples, a non-finite sample, or a signal too short for one
/// frame.
pub fn compute(cfg: &FeatureConfig, samples: &[f32]) -> Result<Features, FeatureError> {
    let mut stream = FeatureStream::new(cfg.clone())?;
    if samples.is_empty() {
        return Err(FeatureError::EmptyInput);
    }
    let framing = frame::Framing::new(&cfg.frame);
    let frames = framing.num_frames(samples.len() as u64);
    if frames == 0 {
        return Err(FeatureError::TooShort {
            samples: samples.len() as u64,
            needed: match cfg.frame.padding {
                Padding::SnipEdges => framing.win as u64,
                Padding::KaldiMirror => (framing.shift as u64).div_ceil(2),
                Padding::CenterReflect | Padding::CenterZero => 1,
            },
        });
    }
    let dim = stream.dim();
    let mut data = Vec::with_capacity(frames as usize * dim);
    stream.push_all_and_finish(samples, &mut data)?;
    Ok(Features {
        num_frames: data.len() / dim,
        data,
        dim,
    })
}

/// Computes the features of decoded audio, resampling it first when its rate differs from
/// `cfg.frame.sample_rate`.
pub fn compute_audio(
    cfg: &FeatureConfig,
    audio: &crate::audio::Audio,
) -> Result<Features, FeatureError> {
    let rate = cfg.frame.sample_rate;
    if audio.sample_rate == rate {
        compute(cfg, &audio.samples)
    } else {
        let samples = crate::audio::resample(&audio.samples, audio.sample_rate, rate)?;
        compute(cfg, &samples)
    }
}
