//! Learning-rate schedule: linear warm-up, then cosine decay to `min_ratio · peak`.

/// Warm-up then cosine decay, by optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupCosine {
    /// Peak learning rate.
    pub peak: f64,
    /// Warm-up steps.
    pub warmup: usize,
    /// Total steps.
    pub total: usize,
    /// Final learning rate as a fraction of the peak.
    pub min_ratio: f64,
}

impl WarmupCosine {
    /// Learning rate at step `step` (0-based).
    pub fn lr(&self, step: usize) -> f64 {
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let t = ((step - self.warmup) as f64 / span).min(1.0);
        let min = self.peak * self.min_ratio;
        min + 0.5 * (self.peak - min) * (1.0 + (std::f64::consts::PI * t).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_then_decays() {
        let s = WarmupCosine {
            peak: 1.0,
            warmup: 10,
            total: 110,
            min_ratio: 0.01,
        };
        assert!((s.lr(0) - 0.1).abs() < 1e-12);
        assert!((s.lr(9) - 1.0).abs() < 1e-12);
        assert!((s.lr(60) - 0.505).abs() < 1e-9);
        assert!((s.lr(110) - 0.01).abs() < 1e-12);
    }
}
