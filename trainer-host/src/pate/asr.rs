//! PATE for ASR, the aggregator of the Amazon study: the teachers' per-frame output
//! posteriors on a public utterance are averaged and Gaussian noise is added to every
//! averaged entry; the noisy posteriors (decoded by the usual CTC decoders, which is
//! post-processing) label the utterance for the student.
//!
//! # Sensitivity and cost
//!
//! One speaker trains one teacher, so adding or removing a speaker changes one teacher's
//! `frames × vocab` posterior matrix into any other. Each row is a probability vector and
//! two probability vectors are at most `√2` apart in L2, so the sum over teachers moves by
//! at most `√(2·frames)` in L2; the average divides by the number of teachers `n` (public,
//! fixed before the data is seen). Noise of std `σ` on each averaged entry is therefore
//! the Gaussian mechanism with noise multiplier `z = σ·n / √(2·frames)` per utterance.
//! Utterances compose; as Gaussian RDP and PLD are linear in `1/z²`, `U` utterances are
//! exactly `U` steps of one Gaussian with `1/z² = 2·mean(frames) / (σ·n)²`
//! ([`posterior_average_event`]) — the ledger's entry.
//!
//! Not here yet: the ASR teachers and student (`pate train-teachers --task asr`), and
//! noisy voting over the teachers' transcripts — GNMax over the distinct transcripts has a
//! candidate set that itself depends on the private data (a transcript only one teacher
//! produces exists only with that teacher's speaker), which needs a thresholded release
//! with its own δ, not plain GNMax.

use hush_models::dp::NoiseSource;

use super::PateError;
use crate::accountant::SubsampledGaussian;

/// The noisy average of the teachers' posteriors on one utterance: `posteriors[t]` is
/// teacher `t`'s `frames × vocab` row-major matrix of per-frame probabilities (each row
/// summing to 1); returns the `frames × vocab` average plus `N(0, σ²)` on every entry.
pub fn noisy_average_posteriors(
    posteriors: &[Vec<f32>],
    frames: usize,
    vocab: usize,
    sigma: f64,
    noise: &mut NoiseSource,
) -> Result<Vec<f32>, PateError> {
    check_sigma(sigma)?;
    if posteriors.is_empty() {
        return Err(PateError::Option {
            option: "--teachers",
            reason: "no teacher posteriors to average".into(),
        });
    }
    let len = frames * vocab;
    if let Some((t, p)) = posteriors.iter().enumerate().find(|(_, p)| p.len() != len) {
        return Err(PateError::Option {
            option: "posteriors",
            reason: format!(
                "teacher {t} gave {} values; expected {frames} frames × {vocab} tokens = {len} \
                 (every teacher must share one vocabulary and frame rate)",
                p.len()
            ),
        });
    }
    let n = posteriors.len() as f64;
    Ok((0..len)
        .map(|i| {
            let mean = posteriors.iter().map(|p| f64::from(p[i])).sum::<f64>() / n;
            (mean + sigma * noise.standard_normal()) as f32
        })
        .collect())
}

/// The Gaussian-mechanism event of averaging `teachers` teachers' posteriors with noise
/// `sigma` on utterances of `frames[u]` frames each (see the module docs).
pub fn posterior_average_event(
    frames: &[usize],
    teachers: usize,
    sigma: f64,
) -> Result<SubsampledGaussian, PateError> {
    check_sigma(sigma)?;
    if frames.is_empty() || frames.contains(&0) || teachers == 0 {
        return Err(PateError::Option {
            option: "--public",
            reason: "at least one utterance of at least one frame, and one teacher".into(),
        });
    }
    let mean_frames = frames.iter().sum::<usize>() as f64 / frames.len() as f64;
    let z = sigma * teachers as f64 / (2.0 * mean_frames).sqrt();
    SubsampledGaussian::poisson(1.0, z, frames.len() as u64).map_err(|e| PateError::Option {
        option: "--sigma",
        reason: e.to_string(),
    })
}

fn check_sigma(sigma: f64) -> Result<(), PateError> {
    if sigma.is_finite() && sigma > 0.0 {
        Ok(())
    } else {
        Err(PateError::Option {
            option: "--sigma",
            reason: format!("{sigma} is not a positive number"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::Adjacency;

    #[test]
    fn the_noise_on_the_average_has_std_sigma() {
        // Three teachers, 50 frames × 4 tokens; the mean is [0.25; 4] per frame.
        let uniform = vec![0.25f32; 200];
        let teachers = vec![uniform.clone(); 3];
        let mut noise = NoiseSource::from_seed(4);
        let mut xs = Vec::new();
        for _ in 0..500 {
            let out = noisy_average_posteriors(&teachers, 50, 4, 0.3, &mut noise).unwrap();
            xs.extend(out.iter().map(|v| f64::from(*v) - 0.25));
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        // 100 000 draws: the sample std is within 1 % of 0.3 (about 4 standard errors).
        assert!(
            mean.abs() < 0.005 && (sd / 0.3 - 1.0).abs() < 0.01,
            "{mean} {sd}"
        );
    }

    #[test]
    fn one_teacher_moves_the_average_by_at_most_the_sensitivity_the_cost_assumes() {
        // The worst case: one teacher's one-hot rows all move to another token.
        let (frames, vocab, n) = (30, 5, 4);
        let one_hot = |k: usize| -> Vec<f32> {
            (0..frames * vocab)
                .map(|i| f32::from(u8::from(i % vocab == k)))
                .collect()
        };
        let mut a = vec![one_hot(0); n];
        let mut noise = NoiseSource::from_seed(1);
        let tiny = 1e-12;
        let before = noisy_average_posteriors(&a, frames, vocab, tiny, &mut noise).unwrap();
        a[2] = one_hot(3);
        let after = noisy_average_posteriors(&a, frames, vocab, tiny, &mut noise).unwrap();
        let moved = before
            .iter()
            .zip(&after)
            .map(|(x, y)| f64::from(x - y).powi(2))
            .sum::<f64>()
            .sqrt();
        let sensitivity = (2.0 * frames as f64).sqrt() / n as f64;
        assert!(
            (moved / sensitivity - 1.0).abs() < 1e-6,
            "{moved} {sensitivity}"
        );
        // The ledger event is that Gaussian: RDP α·Δ²/(2σ²) per utterance, composed.
        let sigma = 0.5;
        let ev = posterior_average_event(&[frames, frames, frames], n, sigma).unwrap();
        let orders = [2.0, 8.0, 32.0];
        let rdp = ev.rdp(Adjacency::AddRemove, &orders).unwrap();
        for (a, r) in orders.iter().zip(rdp) {
            let want = 3.0 * a * sensitivity * sensitivity / (2.0 * sigma * sigma);
            assert!((r / want - 1.0).abs() < 1e-9, "{a}: {r} vs {want}");
        }
        // Utterances of other lengths compose as their sum.
        let ev = posterior_average_event(&[10, 50], n, sigma).unwrap();
        let r = ev.rdp(Adjacency::AddRemove, &[2.0]).unwrap()[0];
        let want: f64 = [10.0, 50.0]
            .iter()
            .map(|t| 2.0 * (2.0 * t) / (n as f64 * n as f64) / (2.0 * sigma * sigma))
            .sum();
        assert!((r / want - 1.0).abs() < 1e-9, "{r} vs {want}");
    }

    #[test]
    fn teachers_over_other_vocabularies_are_refused_by_name() {
        let mut noise = NoiseSource::from_seed(0);
        let e = noisy_average_posteriors(&[vec![0.5; 8], vec![0.5; 6]], 4, 2, 1.0, &mut noise)
            .unwrap_err();
        assert!(e.to_string().contains("teacher 1"), "{e}");
        assert!(posterior_average_event(&[3], 2, 0.0).is_err());
        assert!(posterior_average_event(&[], 2, 1.0).is_err());
    }
}
