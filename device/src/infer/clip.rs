//! Fitting audio to a keyword spotter's window and computing its features.
//!
//! A model sees exactly `frames` feature frames. [`clip_samples`] is the number of
//! samples that gives them; [`fit_clip`] pads a short clip with zeros at the end, or
//! takes the loudest window of a long one; [`clip_features`] computes the features and
//! pads (repeating the last frame) or truncates to `frames`.
//!
//! ```
//! use hush_device::features::{FeatureConfig, FeatureKind};
//! use hush_device::infer::{clip_features, clip_samples};
//! let mut cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
//! cfg.mel.num_bins = 40;
//! assert_eq!(clip_samples(&cfg, 98), 15_920);
//! let f = clip_features(&cfg, &vec![0.01; 16_000], 98).unwrap();
//! assert_eq!(f.len(), 98 * 40);
//! ```

use crate::features::{compute, FeatureConfig, FeatureError};

/// Samples needed for `frames` frames: `(frames − 1) · shift + window`.
pub fn clip_samples(cfg: &FeatureConfig, frames: usize) -> usize {
    frames.saturating_sub(1) * cfg.frame.window_shift() + cfg.frame.window_length()
}

/// `n` samples from `samples`: zero-padded at the end when shorter, the window of highest
/// energy (searched in 10 ms steps) when longer.
pub fn fit_clip(samples: &[f32], n: usize) -> Vec<f32> {
    if samples.len() <= n {
        let mut out = samples.to_vec();
        out.resize(n, 0.0);
        return out;
    }
    let step = 160.min(n.max(1));
    let mut prefix = Vec::with_capacity(samples.len() + 1);
    prefix.push(0.0f64);
    let mut acc = 0.0f64;
    for &s in samples {
        acc += f64::from(s) * f64::from(s);
        prefix.push(acc);
    }
    let mut best = (0usize, f64::NEG_INFINITY);
    let mut start = 0;
    while start + n <= samples.len() {
        let e = prefix[start + n] - prefix[start];
        if e > best.1 {
            best = (start, e);
        }
        start += step;
    }
    samples[best.0..best.0 + n].to_vec()
}

/// Features of one clip for a model over `frames` frames: `frames × dim` values,
/// row-major.
pub fn clip_features(
    cfg: &FeatureConfig,
    samples: &[f32],
    frames: usize,
) -> Result<Vec<f32>, FeatureError> {
    let clip = fit_clip(samples, clip_samples(cfg, frames));
    let f = compute(cfg, &clip)?;
    let mut data = f.data;
    data.truncate(frames * f.dim);
    while data.len() < frames * f.dim {
        let last = data.len() - f.dim;
        data.extend_from_within(last..last + f.dim);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_pads_short_and_finds_the_loud_part_of_long_clips() {
        assert_eq!(fit_clip(&[1.0, 2.0], 4), vec![1.0, 2.0, 0.0, 0.0]);
        let mut long = vec![0.0f32; 1000];
        for v in &mut long[480..640] {
            *v = 1.0;
        }
        let c = fit_clip(&long, 160);
        assert_eq!(c.iter().sum::<f32>(), 160.0);
    }
}
