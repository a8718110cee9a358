//! Privacy audits: what a shared update reveals. This module starts with the metrics the
//! gradient-leakage paper reports for reconstructed audio:
//!
//! - [`stoi`]: short-time objective intelligibility (a port of the reference algorithm,
//!   checked against pystoi);
//! - [`quality::pesq_mos`]: PESQ MOS-LQO, wideband at 16 kHz and narrowband at 8 kHz;
//! - [`waveform_mse`]: W-MSE, the mean squared error between two waveforms.

pub mod quality;
pub mod stoi;

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
