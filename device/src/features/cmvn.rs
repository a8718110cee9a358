//! Cepstral mean and variance normalisation: over a whole utterance, or over a causal
//! sliding window of frames (streamable: frame `t` is normalised by the statistics of
//! frames `t - window + 1 ..= t`).

/// Normalises `data` (`frames × dim`, row-major) by its own per-dimension mean (and
/// standard deviation when `norm_vars`).
pub fn utterance_cmvn(data: &mut [f32], dim: usize, norm_vars: bool) {
    if dim == 0 || data.is_empty() {
        return;
    }
    let frames = (data.len() / dim) as f64;
    let mut sum = vec![0.0f64; dim];
    let mut sq = vec![0.0f64; dim];
    for row in data.chunks_exact(dim) {
        for ((s, q), &v) in sum.iter_mut().zip(sq.iter_mut()).zip(row) {
            *s += f64::from(v);
            *q += f64::from(v) * f64::from(v);
        }
    }
    let (shift, scale) = stats(&sum, &sq, frames, norm_vars);
    for row in data.chunks_exact_mut(dim) {
        for ((v, m), s) in row.iter_mut().zip(&shift).zip(&scale) {
            *v = ((f64::from(*v) - m) * s) as f32;
        }
    }
}

fn stats(sum: &[f64], sq: &[f64], n: f64, norm_vars: bool) -> (Vec<f64>, Vec<f64>) {
    let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
    let scale = sum
        .iter()
        .zip(sq)
        .zip(&mean)
        .map(|((_, q), m)| {
            if norm_vars {
                let var = (q / n - m * m).max(1e-20);
                1.0 / var.sqrt()
            } else {
                1.0
            }
        })
        .collect();
    (mean, scale)
}

/// Causal sliding-window CMVN with fixed buffers.
#[derive(Debug, Clone)]
pub struct SlidingCmvn {
    window: usize,
    dim: usize,
    norm_vars: bool,
    /// The last `window` raw frames, a ring.
    history: Vec<f32>,
    filled: usize,
    next: usize,
    sum: Vec<f64>,
    sq: Vec<f64>,
}

impl SlidingCmvn {
    /// A window of `window >= 1` frames of `dim` values.
    pub fn new(window: usize, dim: usize, norm_vars: bool) -> Self {
        Self {
            window,
            dim,
            norm_vars,
            history: vec![0.0; window * dim],
            filled: 0,
            next: 0,
            sum: vec![0.0; dim],
            sq: vec![0.0; dim],
        }
    }

    /// Forgets every frame.
    pub fn reset(&mut self) {
        self.filled = 0;
        self.next = 0;
        self.sum.fill(0.0);
        self.sq.fill(0.0);
    }

    /// Normalises one frame in place.
    pub fn apply(&mut self, frame: &mut [f32]) {
        let slot = &mut self.history[self.next * self.dim..(self.next + 1) * self.dim];
        if self.filled == self.window {
            for ((s, q), &old) in self.sum.iter_mut().zip(self.sq.iter_mut()).zip(&*slot) {
                *s -= f64::from(old);
                *q -= f64::from(old) * f64::from(old);
            }
        } else {
            self.filled += 1;
        }
        slot.copy_from_slice(frame);
        for ((s, q), &v) in self.sum.iter_mut().zip(self.sq.iter_mut()).zip(&*frame) {
            *s += f64::from(v);
            *q += f64::from(v) * f64::from(v);
        }
        self.next = (self.next + 1) % self.window;
        let n = self.filled as f64;
        for ((v, s), q) in frame.iter_mut().zip(&self.sum).zip(&self.sq) {
            let m = s / n;
            let mut x = f64::from(*v) - m;
            if self.norm_vars {
                x /= (q / n - m * m).max(1e-20).sqrt();
            }
            *v = x as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utterance_cmvn_zeroes_the_mean() {
        let mut d = vec![1.0, 10.0, 3.0, 20.0, 5.0, 30.0];
        utterance_cmvn(&mut d, 2, true);
        let m0 = (d[0] + d[2] + d[4]) / 3.0;
        let v1 = (d[1] * d[1] + d[3] * d[3] + d[5] * d[5]) / 3.0;
        assert!(m0.abs() < 1e-6 && (v1 - 1.0).abs() < 1e-5);
    }

    #[test]
    fn sliding_cmvn_equals_a_direct_window_mean() {
        let data: Vec<f32> = (0..40).map(|i| ((i * 37 % 11) as f32) - 3.0).collect();
        let mut s = SlidingCmvn::new(4, 1, false);
        for t in 0..40 {
            let mut f = [data[t]];
            s.apply(&mut f);
            let lo = t.saturating_sub(3);
            let m: f32 = data[lo..=t].iter().sum::<f32>() / (t - lo + 1) as f32;
            assert!((f[0] - (data[t] - m)).abs() < 1e-4, "{t}");
        }
    }
}
