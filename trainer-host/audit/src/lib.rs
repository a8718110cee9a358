//! Privacy audits: what a shared update reveals. This module starts with the metrics the
//! gradient-leakage paper reports for reconstructed audio:
//!
//! - [`stoi`](mod@stoi): short-time objective intelligibility (a port of the reference algorithm,
//!   checked against pystoi);
//! - [`quality::pesq_mos`]: PESQ MOS-LQO, wideband at 16 kHz and narrowband at 8 kHz;
//! - [`waveform_mse`]: W-MSE, the mean squared error between two waveforms;
//! - [`RecordingMetrics`]: all three for a recording against its reference (`audit metrics`).
//!
//! and the attack itself:
//!
//! - [`leak_net`]: the leak-CNN written out by hand, with the exact second-order pass
//!   gradient inversion needs (burn has no double backprop);
//! - [`update`]: the update a device shares for one clip (a single gradient, or the delta
//!   of K local steps; optionally clipped and noised), and the attacker's exact
//!   simulation of it;
//! - [`invert`]: iDLG label recovery, and feature reconstruction by update matching;
//! - [`waveform`]: features back to audio (inverse DCT, NNLS onto |STFT|, Griffin-Lim);
//! - [`speaker`]: a small speaker-embedding model with an equal-error-rate threshold;
//! - [`attack`]: one clip end to end, with every metric; [`baseline`]: what an attacker
//!   gets without the update (random and mean features, the attack on a pure-noise
//!   update, other speakers' recordings of the word), scored the same way; [`report`]:
//!   many clips, Mel vs MFCC, with and without DP; [`target`]: the models the audit
//!   attacks; [`artifacts`]: the files `audit invert` writes;
//! - [`lower_bound`]: canary scores to an empirical ε (Steinke et al.'s one-run lower bound,
//!   Andrew et al.'s one-shot estimate).

pub mod artifacts;
pub mod attack;
pub mod baseline;
pub mod invert;
pub mod leak_net;
pub mod lower_bound;
pub mod quality;
pub mod report;
pub mod speaker;
pub mod stoi;
pub mod target;
pub mod update;
pub mod waveform;

use std::path::PathBuf;

/// Why an audit failed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The model cannot be attacked (wrong architecture, a missing layer).
    #[error("unsupported model: {reason}")]
    UnsupportedModel {
        /// What is missing or different.
        reason: String,
    },
    /// An option is out of range.
    #[error("option {option}: {reason}")]
    Option {
        /// The option (as the CLI flag).
        option: &'static str,
        /// What is expected.
        reason: String,
    },
    /// The input does not fit the model (feature kind, sample rate, length).
    #[error("{path}: {reason}")]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Audio could not be read or written.
    #[error(transparent)]
    Audio(#[from] hush_device::audio::AudioError),
    /// The feature front-end failed.
    #[error(transparent)]
    Features(#[from] hush_device::features::FeatureError),
    /// The model or its package failed.
    #[error(transparent)]
    Model(#[from] hush_models::ModelError),
    /// Clipping or noise failed.
    #[error(transparent)]
    Dp(#[from] hush_models::dp::DpError),
    /// The device's local training failed.
    #[error("local steps: {0}")]
    Training(#[from] hush_device::training::TrainingError),
    /// STOI could not be computed.
    #[error(transparent)]
    Stoi(#[from] StoiError),
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] hush_plot::PlotError),
    /// PESQ could not be computed.
    #[error(transparent)]
    Pesq(#[from] PesqError),
}

pub use quality::{pesq_mos, PesqError, PesqMode};
pub use stoi::{stoi, StoiError};

/// W-MSE: mean squared difference of two equally long waveforms (`None` when the
/// lengths differ or both are empty).
pub fn waveform_mse(reference: &[f32], degraded: &[f32]) -> Option<f64> {
    if reference.len() != degraded.len() || reference.is_empty() {
        return None;
    }
    let sum: f64 = reference
        .iter()
        .zip(degraded)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    Some(sum / reference.len() as f64)
}

/// The speech-quality metrics of a recording against its clean reference, as
/// `hush-host audit metrics` reports them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecordingMetrics {
    /// The recordings' sample rate.
    pub sample_rate: u32,
    /// Their length in seconds.
    pub seconds: f64,
    /// STOI.
    pub stoi: f64,
    /// PESQ MOS-LQO; `None` at rates other than 8 and 16 kHz.
    pub pesq: Option<f64>,
    /// Which PESQ the rate gets; `None` where there is none.
    pub pesq_mode: Option<PesqMode>,
    /// W-MSE.
    pub wmse: f64,
}

impl RecordingMetrics {
    /// STOI, PESQ (at 8 and 16 kHz only) and W-MSE of `degraded` against `reference`,
    /// two aligned recordings of equal length at `sample_rate`.
    pub fn of(reference: &[f32], degraded: &[f32], sample_rate: u32) -> Result<Self, AuditError> {
        let pesq = match sample_rate {
            8_000 | 16_000 => Some(pesq_mos(reference, degraded, sample_rate)?),
            _ => None,
        };
        Ok(Self {
            sample_rate,
            seconds: reference.len() as f64 / f64::from(sample_rate),
            stoi: stoi(reference, degraded, sample_rate)?,
            pesq: pesq.map(|p| p.1),
            pesq_mode: pesq.map(|p| p.0),
            wmse: waveform_mse(reference, degraded).unwrap_or(0.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waveform_mse_is_the_mean_squared_difference() {
        assert_eq!(waveform_mse(&[1.0, 2.0], &[1.0, 0.0]), Some(2.0));
        assert_eq!(waveform_mse(&[1.0], &[1.0, 0.0]), None);
        assert_eq!(waveform_mse(&[], &[]), None);
    }
}
