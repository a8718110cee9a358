//! Window shapes and the per-frame signal chain that runs before the FFT: input scaling,
//! dither, DC removal, raw log energy, pre-emphasis and windowing, in Kaldi's order
//! (`feature-window.cc`, `ProcessWindow`).
//!
//! It owns no framing (that is [`super::frame`]) and no spectrum (that is
//! [`super::spectrum`]).

use std::f64::consts::PI;

use super::config::{FrameOptions, WindowKind};

/// The window of `len` samples. Povey is always symmetric (Kaldi); others use the
/// denominator `len` when `periodic` (scipy `fftbins=True`, librosa) and `len - 1`
/// otherwise (Kaldi).
pub fn window(kind: WindowKind, len: usize, periodic: bool) -> Vec<f32> {
    let denom = if periodic && kind != WindowKind::Povey {
        len as f64
    } else {
        (len.max(2) - 1) as f64
    };
    (0..len)
        .map(|i| {
            let a = 2.0 * PI * i as f64 / denom;
            let w = match kind {
                WindowKind::Povey => (0.5 - 0.5 * a.cos()).powf(0.85),
                WindowKind::Hamming => 0.54 - 0.46 * a.cos(),
                WindowKind::Hann => 0.5 - 0.5 * a.cos(),
                WindowKind::Rectangular => 1.0,
            };
            w as f32
        })
        .collect()
}

/// Gaussian dither from a seeded SplitMix64 stream (Box–Muller): the same seed gives the
/// same noise, frame after frame, however the audio was chunked.
#[derive(Debug, Clone)]
struct Dither {
    state: u64,
    spare: Option<f64>,
    std: f32,
}

impl Dither {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        // In (0, 1]: never 0, so the log below is finite.
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn gauss(&mut self) -> f32 {
        if let Some(s) = self.spare.take() {
            return s as f32;
        }
        let r = (-2.0 * self.uniform().ln()).sqrt();
        let t = 2.0 * PI * self.uniform();
        self.spare = Some(r * t.sin());
        (r * t.cos()) as f32
    }
}

/// Runs the pre-FFT chain on one frame. Buffers are made once.
#[derive(Debug, Clone)]
pub struct FrameProcessor {
    /// Window times the input scale (used when the raw samples are read directly).
    window_scaled: Vec<f32>,
    /// Plain window (used on the scratch copy, which is already scaled).
    window: Vec<f32>,
    input_scale: f32,
    preemphasis: f32,
    remove_dc: bool,
    dither: Option<Dither>,
    scratch: Vec<f32>,
    dither_seed: u64,
}

impl FrameProcessor {
    /// For validated options.
    pub fn new(opts: &FrameOptions) -> Self {
        let len = opts.window_length();
        let window = window(opts.window, len, opts.periodic_window);
        let window_scaled = window.iter().map(|w| w * opts.input_scale).collect();
        let dither = (opts.dither > 0.0).then_some(Dither {
            state: opts.dither_seed,
            spare: None,
            std: opts.dither,
        });
        Self {
            window_scaled,
            window,
            input_scale: opts.input_scale,
            preemphasis: opts.preemphasis,
            remove_dc: opts.remove_dc_offset,
            dither,
            scratch: vec![0.0; len],
            dither_seed: opts.dither_seed,
        }
    }

    /// Back to the state after `new` (the dither stream restarts from its seed).
    pub fn reset(&mut self) {
        if let Some(d) = &mut self.dither {
            d.state = self.dither_seed;
            d.spare = None;
        }
    }

    /// Processes `raw` (one frame of unscaled samples, the window's length) into
    /// `out[..raw.len()]` and returns the frame's log energy after DC removal and before
    /// pre-emphasis (Kaldi's raw energy, floored at `f32::EPSILON`) when `want_energy`.
    pub fn process(&mut self, raw: &[f32], out: &mut [f32], want_energy: bool) -> f32 {
        if let Some(d) = &mut self.dither {
            let scale = self.input_scale;
            for (s, x) in self.scratch.iter_mut().zip(raw) {
                *s = x * scale + d.std * d.gauss();
            }
            chain(
                &self.scratch,
                &self.window,
                1.0,
                self.preemphasis,
                self.remove_dc,
                out,
                want_energy,
            )
        } else {
            chain(
                raw,
                &self.window_scaled,
                self.input_scale,
                self.preemphasis,
                self.remove_dc,
                out,
                want_energy,
            )
        }
    }
}

/// `out[i] = w[i] · ((x[i] - m) - c · (x[i-1] - m))`, `out[0] = w[0] · (x[0] - m)(1 - c)`,
/// with `m` the frame mean (or 0): Kaldi's DC removal, then in-frame pre-emphasis, then
/// the window, fused into one pass. `w` already carries the input scale `scale`.
fn chain(
    x: &[f32],
    w: &[f32],
    scale: f32,
    c: f32,
    remove_dc: bool,
    out: &mut [f32],
    want_energy: bool,
) -> f32 {
    let n = x.len();
    let mean = if remove_dc { sum8(x) / n as f32 } else { 0.0 };
    let energy = if want_energy {
        let e: f32 =
            x.iter().map(|v| f64::from(v - mean).powi(2)).sum::<f64>() as f32 * scale * scale;
        e.max(f32::EPSILON).ln()
    } else {
        0.0
    };
    let out = &mut out[..n];
    if c == 0.0 {
        for ((o, xi), wi) in out.iter_mut().zip(x).zip(w) {
            *o = wi * (xi - mean);
        }
    } else {
        out[0] = w[0] * (x[0] - mean) * (1.0 - c);
        let bias = mean * (1.0 - c);
        // Three plain slices of one length: the loop vectorises.
        let (cur, prev, wr) = (&x[1..], &x[..n - 1], &w[1..n]);
        for (((o, xi), xp), wi) in out[1..].iter_mut().zip(cur).zip(prev).zip(wr) {
            *o = wi * (xi - c * xp - bias);
        }
    }
    energy
}

/// Sum in eight lanes (vectorises; also a little more accurate than one running sum).
fn sum8(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_have_the_textbook_values() {
        let h = window(WindowKind::Hann, 4, true);
        let want = [0.0, 0.5, 1.0, 0.5];
        for (a, b) in h.iter().zip(want) {
            assert!((a - b).abs() < 1e-6);
        }
        let s = window(WindowKind::Hann, 5, false);
        assert!((s[2] - 1.0).abs() < 1e-6 && s[0].abs() < 1e-6 && s[4].abs() < 1e-6);
        let p = window(WindowKind::Povey, 5, true);
        assert!(p[0].abs() < 1e-6 && (p[2] - 1.0).abs() < 1e-6 && p[4].abs() < 1e-6);
        let m = window(WindowKind::Hamming, 3, false);
        assert!((m[0] - 0.08).abs() < 1e-6 && (m[1] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn chain_matches_the_step_by_step_kaldi_order() {
        let x: Vec<f32> = (0..16).map(|i| ((i * 7 % 5) as f32) * 0.1 - 0.2).collect();
        let w = window(WindowKind::Povey, 16, false);
        let mut out = vec![0.0; 16];
        chain(&x, &w, 1.0, 0.97, true, &mut out, false);
        let m = x.iter().sum::<f32>() / 16.0;
        let mut y: Vec<f32> = x.iter().map(|v| v - m).collect();
        for i in (1..16).rev() {
            y[i] -= 0.97 * y[i - 1];
        }
        y[0] -= 0.97 * y[0];
        for i in 0..16 {
            assert!((out[i] - y[i] * w[i]).abs() < 1e-6, "{i}");
        }
    }

    #[test]
    fn dither_is_seeded() {
        let mut a = Dither {
            state: 7,
            spare: None,
            std: 1.0,
        };
        let mut b = a.clone();
        let va: Vec<f32> = (0..100).map(|_| a.gauss()).collect();
        let vb: Vec<f32> = (0..100).map(|_| b.gauss()).collect();
        assert_eq!(va, vb);
        let mean = va.iter().sum::<f32>() / 100.0;
        assert!(mean.abs() < 0.3);
    }
}
