//! Typed feature options: everything that decides which numbers come out.
//!
//! A [`FeatureConfig`] is serde-serialisable because it travels inside `model.json`: a
//! device computes exactly the features its model was trained on. [`FeatureConfig::kaldi`]
//! and [`FeatureConfig::librosa`] are the two presets; [`FeatureConfig::validate`] checks
//! every option and names the first bad one.
//!
//! ```
//! use hush_device::features::{FeatureConfig, FeatureKind};
//! let mut cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
//! cfg.mel.num_bins = 40;
//! let json = serde_json::to_string(&cfg).unwrap();
//! let back: FeatureConfig = serde_json::from_str(&json).unwrap();
//! assert_eq!(cfg, back);
//! assert_eq!(back.frame.window_length(), 400);
//! ```

use serde::{Deserialize, Serialize};

use super::error::FeatureError;

/// Which features to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureKind {
    /// Log (or linear) power/magnitude spectrum, `fft_size / 2 + 1` bins.
    Spectrogram,
    /// Log Mel filterbank energies, `mel.num_bins` bins.
    Fbank,
    /// Mel-frequency cepstral coefficients, `mfcc.num_ceps` coefficients.
    Mfcc,
}

/// Window shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// Kaldi's default: `(0.5 - 0.5 cos(2πi/(N-1)))^0.85`.
    Povey,
    /// `0.54 - 0.46 cos(2πi/D)`.
    Hamming,
    /// `0.5 - 0.5 cos(2πi/D)`.
    Hann,
    /// All ones.
    Rectangular,
}

impl WindowKind {
    /// Parses `povey`, `hamming`, `hann`/`hanning`, `rectangular`.
    pub fn parse(name: &str) -> Result<Self, FeatureError> {
        match name.to_ascii_lowercase().as_str() {
            "povey" => Ok(Self::Povey),
            "hamming" => Ok(Self::Hamming),
            "hann" | "hanning" => Ok(Self::Hann),
            "rectangular" | "rect" => Ok(Self::Rectangular),
            _ => Err(FeatureError::option(
                "window",
                name,
                "one of povey, hamming, hann, rectangular",
            )),
        }
    }
}

/// How frames are laid over the signal, and what is read past its ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Padding {
    /// Kaldi `snip_edges=true`: frame `i` starts at `i·shift`; only whole frames.
    SnipEdges,
    /// Kaldi `snip_edges=false`: frame `i` is centred at `i·shift + shift/2`, and
    /// `(n + shift/2) / shift` frames; samples past the ends are mirrored Kaldi's way
    /// (the edge sample repeated: `x[-1] = x[0]`).
    KaldiMirror,
    /// librosa `center=True`: frame `i` is centred at `i·shift` (the window centred in an
    /// `fft_size` buffer), `1 + n / shift` frames; past the ends, numpy `reflect`
    /// (`x[-1] = x[1]`).
    CenterReflect,
    /// librosa `center=True, pad_mode="constant"`: as `CenterReflect`, zeros past the ends.
    CenterZero,
}

/// Framing and per-frame signal processing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameOptions {
    /// Sample rate the features are computed at (Hz); other input is resampled to it.
    pub sample_rate: u32,
    /// Frame (window) length in milliseconds.
    pub frame_length_ms: f32,
    /// Frame shift (hop) in milliseconds.
    pub frame_shift_ms: f32,
    /// Window shape.
    pub window: WindowKind,
    /// Periodic window (denominator `N`, scipy `fftbins=True`, librosa) rather than
    /// symmetric (`N - 1`, Kaldi). Povey is always symmetric.
    pub periodic_window: bool,
    /// Pre-emphasis coefficient, applied within each frame Kaldi's way (0 = off).
    pub preemphasis: f32,
    /// Subtract each frame's mean before pre-emphasis.
    pub remove_dc_offset: bool,
    /// Standard deviation of Gaussian dither added to each (scaled) sample; 0 = off.
    pub dither: f32,
    /// Seed of the dither noise (the same seed gives the same features).
    pub dither_seed: u64,
    /// Samples (in [-1, 1]) are multiplied by this before anything else: Kaldi works in
    /// the int16 range (32768), librosa on [-1, 1] (1).
    pub input_scale: f32,
    /// Frame placement and edge handling.
    pub padding: Padding,
    /// FFT size; `None` = the window length rounded up to a power of two.
    pub fft_size: Option<usize>,
}

impl FrameOptions {
    /// Window length in samples (truncated, as Kaldi does).
    pub fn window_length(&self) -> usize {
        (f64::from(self.sample_rate) * 0.001 * f64::from(self.frame_length_ms)) as usize
    }

    /// Frame shift in samples (truncated, as Kaldi does).
    pub fn window_shift(&self) -> usize {
        (f64::from(self.sample_rate) * 0.001 * f64::from(self.frame_shift_ms)) as usize
    }

    /// FFT size actually used.
    pub fn padded_length(&self) -> usize {
        self.fft_size
            .unwrap_or_else(|| self.window_length().next_power_of_two())
    }
}

/// Mel scale formulas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MelScale {
    /// HTK / Kaldi: `1127 ln(1 + f/700)`.
    Htk,
    /// Slaney (Auditory Toolbox, librosa default): linear below 1 kHz, log above.
    Slaney,
}

/// How triangular filters are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MelLayout {
    /// Kaldi: triangles linear on the mel axis over FFT bins `0..fft/2` (no Nyquist bin).
    Kaldi,
    /// librosa: triangles linear in Hz between mel-spaced corners, all `fft/2 + 1` bins.
    Librosa,
}

/// Filter normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MelNorm {
    /// Peak 1 for every filter.
    None,
    /// Slaney area normalisation: each filter scaled by `2 / (f_right - f_left)`.
    Slaney,
}

/// Mel filterbank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MelOptions {
    /// Number of triangular filters.
    pub num_bins: usize,
    /// Lowest filter edge (Hz).
    pub low_freq: f32,
    /// Highest filter edge (Hz); `<= 0` means Nyquist plus this value (Kaldi).
    pub high_freq: f32,
    /// Mel scale formula.
    pub scale: MelScale,
    /// Triangle drawing convention.
    pub layout: MelLayout,
    /// Normalisation.
    pub norm: MelNorm,
}

impl MelOptions {
    /// The high edge in Hz for sample rate `sample_rate`.
    pub fn high_freq_hz(&self, sample_rate: u32) -> f32 {
        let nyquist = sample_rate as f32 * 0.5;
        if self.high_freq > 0.0 {
            self.high_freq
        } else {
            nyquist + self.high_freq
        }
    }
}

/// Power or magnitude spectrum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpectrumKind {
    /// `|X|²`.
    Power,
    /// `|X|`.
    Magnitude,
}

/// Compression of energies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogKind {
    /// Linear energies (no floor).
    None,
    /// `ln(max(e, floor))` (Kaldi).
    Natural,
    /// `10 log10(max(e, floor))` (librosa `power_to_db` with `ref=1`, no `top_db`).
    Decibel,
}

/// Spectrum and log compression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpectrumOptions {
    /// Power or magnitude.
    pub kind: SpectrumKind,
    /// Log compression.
    pub log: LogKind,
    /// Floor applied before the log (Kaldi: `f32::EPSILON`; librosa `amin`: 1e-10).
    pub floor: f32,
}

/// Cepstral liftering conventions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifter {
    /// No liftering.
    None,
    /// Kaldi: `c[i] *= 1 + Q/2 · sin(π i / Q)`.
    Kaldi(f32),
    /// librosa: `c[i] *= 1 + L/2 · sin(π (i + 1) / L)`.
    Librosa(f32),
}

/// MFCC options (an orthonormal DCT-II of the log mel energies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MfccOptions {
    /// Number of cepstra kept.
    pub num_ceps: usize,
    /// Liftering.
    pub lifter: Lifter,
    /// Replace `c0` by the frame's log energy (Kaldi `use_energy`, computed after DC
    /// removal and before pre-emphasis and windowing).
    pub use_energy: bool,
}

/// Cepstral mean (and variance) normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum CmvnOptions {
    /// No normalisation.
    None,
    /// Over the whole utterance (only at the end of a stream).
    Utterance {
        /// Also divide by the standard deviation.
        norm_vars: bool,
    },
    /// Over the last `window` frames including the current one (causal, streamable).
    Sliding {
        /// Window length in frames.
        window: usize,
        /// Also divide by the standard deviation.
        norm_vars: bool,
    },
}

/// Everything that decides the features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureConfig {
    /// What to compute.
    pub kind: FeatureKind,
    /// Framing.
    pub frame: FrameOptions,
    /// Spectrum and log.
    pub spectrum: SpectrumOptions,
    /// Mel filterbank (fbank, MFCC).
    pub mel: MelOptions,
    /// MFCC (MFCC only).
    pub mfcc: MfccOptions,
    /// Normalisation.
    pub cmvn: CmvnOptions,
}

/// Named presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// kaldi-native-fbank / torchaudio.compliance.kaldi conventions (dither 0).
    Kaldi,
    /// librosa.feature.melspectrogram / mfcc conventions.
    Librosa,
}

impl Preset {
    /// Parses `kaldi` or `librosa`.
    pub fn parse(name: &str) -> Result<Self, FeatureError> {
        match name.to_ascii_lowercase().as_str() {
            "kaldi" => Ok(Self::Kaldi),
            "librosa" => Ok(Self::Librosa),
            _ => Err(FeatureError::option(
                "preset",
                name,
                "one of kaldi, librosa",
            )),
        }
    }

    /// The preset's configuration for `kind`.
    pub fn config(self, kind: FeatureKind) -> FeatureConfig {
        match self {
            Self::Kaldi => FeatureConfig::kaldi(kind),
            Self::Librosa => FeatureConfig::librosa(kind),
        }
    }
}

impl FeatureConfig {
    /// Kaldi conventions (kaldi-native-fbank, torchaudio.compliance.kaldi): 16 kHz,
    /// 25/10 ms, povey, pre-emphasis 0.97, DC removal, dither 0, snip_edges, int16-range
    /// input, power spectrum, natural log floored at `f32::EPSILON`, HTK mel from 20 Hz
    /// to Nyquist; 80 bins for fbank, 23 bins and 13 cepstra (lifter 22, energy) for MFCC.
    pub fn kaldi(kind: FeatureKind) -> Self {
        Self {
            kind,
            frame: FrameOptions {
                sample_rate: 16_000,
                frame_length_ms: 25.0,
                frame_shift_ms: 10.0,
                window: WindowKind::Povey,
                periodic_window: false,
                preemphasis: 0.97,
                remove_dc_offset: true,
                dither: 0.0,
                dither_seed: 0,
                input_scale: 32_768.0,
                padding: Padding::SnipEdges,
                fft_size: None,
            },
            spectrum: SpectrumOptions {
                kind: SpectrumKind::Power,
                log: LogKind::Natural,
                floor: f32::EPSILON,
            },
            mel: MelOptions {
                num_bins: if kind == FeatureKind::Mfcc { 23 } else { 80 },
                low_freq: 20.0,
                high_freq: 0.0,
                scale: MelScale::Htk,
                layout: MelLayout::Kaldi,
                norm: MelNorm::None,
            },
            mfcc: MfccOptions {
                num_ceps: 13,
                lifter: Lifter::Kaldi(22.0),
                use_energy: true,
            },
            cmvn: CmvnOptions::None,
        }
    }

    /// librosa conventions: 16 kHz, 25 ms periodic Hann window centred in a 512-point FFT,
    /// 10 ms hop, `center=True` with reflect padding, no pre-emphasis, no DC removal,
    /// [-1, 1] input, power 2, Slaney mel with area normalisation from 0 Hz to Nyquist,
    /// dB (`power_to_db(ref=1, amin=1e-10, top_db=None)`); 80 bins for fbank, 40 bins and
    /// 13 cepstra (orthonormal DCT-II, no lifter) for MFCC.
    pub fn librosa(kind: FeatureKind) -> Self {
        Self {
            kind,
            frame: FrameOptions {
                sample_rate: 16_000,
                frame_length_ms: 25.0,
                frame_shift_ms: 10.0,
                window: WindowKind::Hann,
                periodic_window: true,
                preemphasis: 0.0,
                remove_dc_offset: false,
                dither: 0.0,
                dither_seed: 0,
                input_scale: 1.0,
                padding: Padding::CenterReflect,
                fft_size: None,
            },
            spectrum: SpectrumOptions {
                kind: SpectrumKind::Power,
                log: LogKind::Decibel,
                floor: 1e-10,
            },
            mel: MelOptions {
                num_bins: if kind == FeatureKind::Mfcc { 40 } else { 80 },
                low_freq: 0.0,
                high_freq: 0.0,
                scale: MelScale::Slaney,
                layout: MelLayout::Librosa,
                norm: MelNorm::Slaney,
            },
            mfcc: MfccOptions {
                num_ceps: 13,
                lifter: Lifter::None,
                use_energy: false,
            },
            cmvn: CmvnOptions::None,
        }
    }

    /// Number of values per frame.
    pub fn dim(&self) -> usize {
        match self.kind {
            FeatureKind::Spectrogram => self.frame.padded_length() / 2 + 1,
            FeatureKind::Fbank => self.mel.num_bins,
            FeatureKind::Mfcc => self.mfcc.num_ceps,
        }
    }

    /// Checks every option; the error names the first bad one, its value and what is
    /// expected.
    pub fn validate(&self) -> Result<(), FeatureError> {
        let f = &self.frame;
        reject_if(
            f.sample_rate == 0 || f.sample_rate > 1_000_000,
            "sample_rate",
            f.sample_rate,
            "between 1 and 1000000 Hz",
        )?;
        reject_if(
            !(f.frame_length_ms.is_finite() && f.frame_length_ms > 0.0),
            "frame_length_ms",
            f.frame_length_ms,
            "a positive number of milliseconds",
        )?;
        reject_if(
            !(f.frame_shift_ms.is_finite() && f.frame_shift_ms > 0.0),
            "frame_shift_ms",
            f.frame_shift_ms,
            "a positive number of milliseconds",
        )?;
        let win = f.window_length();
        if win < 2 {
            return Err(FeatureError::option(
                "frame_length_ms",
                f.frame_length_ms,
                format!(
                    "at least 2 samples per frame (got {win} at {} Hz)",
                    f.sample_rate
                ),
            ));
        }
        reject_if(
            win > 1 << 20,
            "frame_length_ms",
            f.frame_length_ms,
            "at most 2^20 samples per frame",
        )?;
        reject_if(
            f.window_shift() == 0,
            "frame_shift_ms",
            f.frame_shift_ms,
            format!("at least 1 sample (0 at {} Hz)", f.sample_rate),
        )?;
        reject_if(
            !(f.preemphasis.is_finite() && (0.0..=1.0).contains(&f.preemphasis)),
            "preemphasis",
            f.preemphasis,
            "a coefficient in [0, 1]",
        )?;
        reject_if(
            !(f.dither.is_finite() && f.dither >= 0.0),
            "dither",
            f.dither,
            "a finite standard deviation >= 0",
        )?;
        reject_if(
            !(f.input_scale.is_finite() && f.input_scale > 0.0),
            "input_scale",
            f.input_scale,
            "a finite positive factor",
        )?;
        let fft = f.padded_length();
        reject_if(
            fft < win || fft > 1 << 21,
            "fft_size",
            fft,
            format!("at least the window length ({win}) and at most 2^21"),
        )?;
        let s = &self.spectrum;
        reject_if(
            !(s.floor.is_finite() && s.floor >= f32::MIN_POSITIVE) && s.log != LogKind::None,
            "log_floor",
            s.floor,
            "a finite floor of at least 1.2e-38 (f32::MIN_POSITIVE) for the log",
        )?;
        if self.kind != FeatureKind::Spectrogram {
            let m = &self.mel;
            let nyquist = f.sample_rate as f32 * 0.5;
            let fft_bins = fft / 2;
            reject_if(
                m.num_bins == 0 || m.num_bins > fft_bins,
                "num_mel_bins",
                m.num_bins,
                format!("between 1 and the number of FFT bins ({fft_bins} for FFT size {fft})"),
            )?;
            reject_if(
                !(m.low_freq.is_finite() && m.low_freq >= 0.0 && m.low_freq < nyquist),
                "low_freq",
                m.low_freq,
                format!("in [0, Nyquist = {nyquist}) Hz"),
            )?;
            let high = m.high_freq_hz(f.sample_rate);
            if !(m.high_freq.is_finite() && high > m.low_freq && high <= nyquist) {
                return Err(FeatureError::option(
                    "high_freq",
                    m.high_freq,
                    format!(
                        "above low_freq ({}) and at most Nyquist ({nyquist}) Hz (<= 0: offset from Nyquist)",
                        m.low_freq
                    ),
                ));
            }
        }
        if self.kind == FeatureKind::Mfcc {
            let c = &self.mfcc;
            if c.num_ceps == 0 || c.num_ceps > self.mel.num_bins {
                return Err(FeatureError::option(
                    "num_ceps",
                    c.num_ceps,
                    format!(
                        "between 1 and the number of mel bins ({})",
                        self.mel.num_bins
                    ),
                ));
            }
            if let Lifter::Kaldi(q) | Lifter::Librosa(q) = c.lifter {
                reject_if(
                    !(q.is_finite() && q > 0.0),
                    "cepstral_lifter",
                    q,
                    "a positive lifter coefficient (or no liftering)",
                )?;
            }
            reject_if(
                s.log == LogKind::None,
                "log",
                "none",
                "natural or decibel for MFCC (the DCT is taken of log energies)",
            )?;
        }
        if let CmvnOptions::Sliding { window, .. } = self.cmvn {
            reject_if(window == 0, "cmvn_window", window, "at least 1 frame")?;
        }
        Ok(())
    }
}

/// The error for `option` when `bad` holds: its value and what is expected.
fn reject_if(
    bad: bool,
    option: &'static str,
    value: impl std::fmt::Display,
    expected: impl Into<String>,
) -> Result<(), FeatureError> {
    if bad {
        Err(FeatureError::option(option, value, expected))
    } else {
        Ok(())
    }
}
