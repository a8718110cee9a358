//! PESQ (ITU-T P.862) through the `pesq` crate, a pure-Rust implementation that passes
//! the P.862 Annex A conformance data: wideband P.862.2 MOS-LQO at 16 kHz, narrowband
//! P.862.1 MOS-LQO at 8 kHz — the two modes the reference C code offers.

/// Why PESQ cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PesqError {
    /// PESQ is defined at 8 kHz (narrowband) and 16 kHz (wideband) only.
    #[error("PESQ needs 8000 Hz (narrowband) or 16000 Hz (wideband) audio, got {0} Hz")]
    Rate(u32),
    /// The two signals differ in length.
    #[error("reference has {reference} samples but the degraded signal {degraded}")]
    LengthMismatch {
        /// Reference length.
        reference: usize,
        /// Degraded length.
        degraded: usize,
    },
    /// The model refused the signals (too short, no speech found).
    #[error("PESQ: {0}")]
    Model(String),
}

/// Which PESQ a rate gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PesqMode {
    /// P.862 with the P.862.1 mapping, 8 kHz.
    Narrowband,
    /// P.862.2, 16 kHz.
    Wideband,
}

/// PESQ MOS-LQO of `degraded` against `reference` (about 1 to 4.64): wideband at
/// 16 kHz, narrowband at 8 kHz. Samples in [−1, 1] are rounded to 16-bit PCM first.
pub fn pesq_mos(
    reference: &[f32],
    degraded: &[f32],
    rate: u32,
) -> Result<(PesqMode, f64), PesqError> {
    if reference.len() != degraded.len() {
        return Err(PesqError::LengthMismatch {
            reference: reference.len(),
            degraded: degraded.len(),
        });
    }
    let pcm = |s: &[f32]| -> Vec<i16> {
        s.iter()
            .map(|&v| (f64::from(v) * 32768.0).round().clamp(-32768.0, 32767.0) as i16)
            .collect()
    };
    let (x, y) = (pcm(reference), pcm(degraded));
    let model = |e: pesq::PesqError| PesqError::Model(e.to_string());
    match rate {
        16_000 => Ok((
            PesqMode::Wideband,
            f64::from(pesq::pesq_wb(&x, &y).map_err(model)?),
        )),
        8_000 => {
            let raw = pesq::pesq_8k(&x, &y).map_err(model)?;
            Ok((
                PesqMode::Narrowband,
                f64::from(pesq::score::mos_lqo(f64::from(raw))),
            ))
        }
        other => Err(PesqError::Rate(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_rates_and_lengths_are_refused_by_name() {
        let x = vec![0.0; 16_000];
        assert_eq!(pesq_mos(&x, &x, 10_000), Err(PesqError::Rate(10_000)));
        assert!(matches!(
            pesq_mos(&x, &x[..100], 16_000),
            Err(PesqError::LengthMismatch { .. })
        ));
        // Under 250 ms: the model's refusal comes back as an error.
        let short = &x[..1000];
        assert!(matches!(
            pesq_mos(short, short, 16_000),
            Err(PesqError::Model(_))
        ));
    }
}
