//! Small signal measures shared by the augmentations ([`crate::augment`],
//! [`crate::resynth`], [`crate::burst`]) and the simulator's virtual voices, kept apart so
//! that none of them imports another for them.

/// Root mean square (0 for an empty signal).
pub fn rms(x: &[f32]) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt()
}
