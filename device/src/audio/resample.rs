//! Band-limited resampling between any two integer rates: a polyphase windowed-sinc
//! (Kaiser) filter, zero-phase, whole-signal ([`resample`]) or streaming
//! ([`StreamResampler`]) with the same numbers.
//!
//! With `g = gcd(from, to)`, `L = to / g`, `M = from / g`, output sample `n` sits at input
//! time `t = n·M/L`; it is `Σ_k x[k] · h(t - k)` with `h` a sinc of cut-off
//! `0.95 · min(from, to) / 2` windowed by a Kaiser window (β = 8.6, ≈ 85 dB stop band)
//! spanning 48 zero crossings each side at the lower rate (pass band to ≈ 0.9 × the
//! lower Nyquist frequency, stop band from it). Each phase's taps are
//! normalised to sum to 1 (exact DC gain). Samples before the start and after the end
//! are zeros, and `ceil(n·L/M)` samples come out, as with `scipy.signal.resample_poly`.
//!
//! ```
//! use hush_device::audio::resample;
//! let x: Vec<f32> = (0..44_100).map(|i| (i as f32 * 0.01).sin()).collect();
//! let y = resample(&x, 44_100, 16_000).unwrap();
//! assert_eq!(y.len(), 16_000);
//! ```

use std::f64::consts::PI;

/// Why resampling failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResampleError {
    /// A rate is zero or above 1 MHz.
    #[error("{which} sample rate {value} Hz: expected between 1 and 1000000 Hz")]
    InvalidRate {
        /// `from` or `to`.
        which: &'static str,
        /// The rate given.
        value: u32,
    },
    /// A sample is NaN or infinite.
    #[error("sample {index} is not finite ({value}); resampling needs finite samples")]
    NonFiniteSample {
        /// Index since the start of the stream.
        index: u64,
        /// Its value.
        value: f32,
    },
    /// `push` after `finish`.
    #[error("the resampler is finished; reset it to push more audio")]
    Finished,
}

/// Zero crossings of the sinc kept on each side, at the lower of the two rates.
const HALF_ZEROS: f64 = 48.0;
/// Cut-off as a fraction of the lower rate's Nyquist frequency.
const CUTOFF: f64 = 0.95;
/// Kaiser window β.
const BETA: f64 = 8.6;
/// Largest coefficient table kept (floats); rarer rate pairs compute taps per sample.
const MAX_TABLE: usize = 1 << 21;

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Modified Bessel function of the first kind, order 0 (series).
fn bessel_i0(x: f64) -> f64 {
    let mut sum = 1.0;
    let mut term = 1.0;
    let q = x * x / 4.0;
    for k in 1..64 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// Streaming resampler: push chunks of any size, get every output sample whose inputs
/// have all arrived; [`StreamResampler::finish`] flushes the tail (zeros past the end).
#[derive(Debug, Clone)]
pub struct StreamResampler {
    from: u32,
    to: u32,
    up: u64,
    down: u64,
    /// Taps each side: output `n` reads inputs `i0 - taps + 1 ..= i0 + taps`.
    taps: usize,
    /// Cut-off relative to the input rate (cycles per input sample × 2).
    fc: f64,
    /// Half-width of the window in input samples.
    width: f64,
    /// `up × 2·taps` coefficients when small enough, else empty.
    table: Vec<f32>,
    /// Per-sample taps for rates without a table.
    scratch: Vec<f32>,
    buf: Vec<f32>,
    buf_start: u64,
    received: u64,
    next_out: u64,
    finished: bool,
}

impl StreamResampler {
    /// A resampler from `from_hz` to `to_hz`.
    pub fn new(from_hz: u32, to_hz: u32) -> Result<Self, ResampleError> {
        for (which, value) in [("from", from_hz), ("to", to_hz)] {
            if value == 0 || value > 1_000_000 {
                return Err(ResampleError::InvalidRate { which, value });
            }
        }
        let g = gcd(u64::from(from_hz), u64::from(to_hz));
        let (up, down) = (u64::from(to_hz) / g, u64::from(from_hz) / g);
        let ratio = (up as f64 / down as f64).min(1.0);
        let fc = CUTOFF * ratio;
        let width = HALF_ZEROS / ratio;
        let taps = width.ceil() as usize + 1;
        let mut r = Self {
            from: from_hz,
            to: to_hz,
            up,
            down,
            taps,
            fc,
            width,
            table: Vec::new(),
            scratch: vec![0.0; 2 * taps],
            buf: Vec::new(),
            buf_start: 0,
            received: 0,
            next_out: 0,
            finished: false,
        };
        if (up as usize).saturating_mul(2 * taps) <= MAX_TABLE {
            let mut table = vec![0.0f32; up as usize * 2 * taps];
            for (p, row) in table.chunks_exact_mut(2 * taps).enumerate() {
                r.phase_taps(p as u64, row);
            }
            r.table = table;
        }
        Ok(r)
    }

    /// Input rate.
    pub fn from_hz(&self) -> u32 {
        self.from
    }

    /// Output rate.
    pub fn to_hz(&self) -> u32 {
        self.to
    }

    /// Taps for phase `p` (fractional position `p / up`), normalised to sum 1.
    fn phase_taps(&self, p: u64, out: &mut [f32]) {
        let frac = p as f64 / self.up as f64;
        let i0 = bessel_i0(BETA);
        let mut h = vec![0.0f64; out.len()];
        for (j, hj) in h.iter_mut().enumerate() {
            // Tap j reads input i0 - taps + 1 + j: distance tau = frac - (j + 1 - taps).
            let tau = frac - (j as f64 + 1.0 - self.taps as f64);
            if tau.abs() >= self.width {
                continue;
            }
            let x = self.fc * tau;
            let sinc = if x.abs() < 1e-12 {
                1.0
            } else {
                (PI * x).sin() / (PI * x)
            };
            let r = tau / self.width;
            let win = bessel_i0(BETA * (1.0 - r * r).max(0.0).sqrt()) / i0;
            *hj = self.fc * sinc * win;
        }
        let sum: f64 = h.iter().sum();
        for (o, v) in out.iter_mut().zip(&h) {
            *o = (v / sum) as f32;
        }
    }

    /// Output samples a signal of `n` input samples gives: `ceil(n · to / from)`.
    pub fn output_len(&self, n: u64) -> u64 {
        (n * self.up).div_ceil(self.down)
    }

    /// Starts a new signal (tables are kept).
    pub fn reset(&mut self) {
        self.buf.clear();
        self.buf_start = 0;
        self.received = 0;
        self.next_out = 0;
        self.finished = false;
    }

    /// Appends `samples` and appends every output sample now computable to `out`.
    /// Returns how many were appended. A non-finite sample is refused before anything is
    /// consumed.
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<f32>) -> Result<usize, ResampleError> {
        if self.finished {
            return Err(ResampleError::Finished);
        }
        if let Some((i, &v)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(ResampleError::NonFiniteSample {
                index: self.received + i as u64,
                value: v,
            });
        }
        self.buf.extend_from_slice(samples);
        self.received += samples.len() as u64;
        let n = self.emit(false, out);
        self.compact();
        Ok(n)
    }

    /// Ends the signal: appends the remaining output samples (zeros past the end).
    pub fn finish(&mut self, out: &mut Vec<f32>) -> Result<usize, ResampleError> {
        if self.finished {
            return Err(ResampleError::Finished);
        }
        self.finished = true;
        Ok(self.emit(true, out))
    }

    fn emit(&mut self, at_end: bool, out: &mut Vec<f32>) -> usize {
        let total = self.output_len(self.received);
        let taps = self.taps as i64;
        let mut count = 0;
        while self.next_out < total {
            let pos = self.next_out * self.down;
            let i0 = (pos / self.up) as i64;
            let phase = pos % self.up;
            let last = i0 + taps;
            if !at_end && last >= self.received as i64 {
                break;
            }
            let first = i0 - taps + 1;
            let coefs: &[f32] = if self.table.is_empty() {
                let mut s = std::mem::take(&mut self.scratch);
                self.phase_taps(phase, &mut s);
                self.scratch = s;
                &self.scratch
            } else {
                let w = 2 * self.taps;
                &self.table[phase as usize * w..(phase as usize + 1) * w]
            };
            let lo = first - self.buf_start as i64;
            let value = if lo >= 0 && last < self.received as i64 {
                let lo = lo as usize;
                let x = &self.buf[lo..lo + coefs.len()];
                x.iter().zip(coefs).map(|(a, b)| a * b).sum()
            } else {
                let mut acc = 0.0f32;
                for (j, c) in coefs.iter().enumerate() {
                    let idx = first + j as i64 - self.buf_start as i64;
                    if idx >= 0 {
                        acc += c * self.buf.get(idx as usize).copied().unwrap_or(0.0);
                    }
                }
                acc
            };
            out.push(value);
            self.next_out += 1;
            count += 1;
        }
        count
    }

    fn compact(&mut self) {
        let pos = self.next_out * self.down;
        let first = (pos / self.up) as i64 - self.taps as i64 + 1;
        let keep_from = first.max(self.buf_start as i64) as u64;
        let drop = (keep_from - self.buf_start) as usize;
        if drop > 0 {
            let drop = drop.min(self.buf.len());
            self.buf.copy_within(drop.., 0);
            self.buf.truncate(self.buf.len() - drop);
            self.buf_start += drop as u64;
        }
    }
}

/// Resamples a whole signal from `from_hz` to `to_hz` (a copy when they are equal).
pub fn resample(samples: &[f32], from_hz: u32, to_hz: u32) -> Result<Vec<f32>, ResampleError> {
    let mut r = StreamResampler::new(from_hz, to_hz)?;
    if from_hz == to_hz {
        if let Some((i, &v)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(ResampleError::NonFiniteSample {
                index: i as u64,
                value: v,
            });
        }
        return Ok(samples.to_vec());
    }
    let mut out = Vec::with_capacity(r.output_len(samples.len() as u64) as usize);
    r.push(samples, &mut out)?;
    r.finish(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(freq: f64, rate: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * PI * freq * i as f64 / f64::from(rate)).sin() as f32)
            .collect()
    }

    #[test]
    fn a_sine_survives_and_keeps_its_frequency() {
        for (from, to) in [
            (44_100, 16_000),
            (22_050, 16_000),
            (8_000, 16_000),
            (48_000, 16_000),
        ] {
            let x = sine(1000.0, from, from as usize);
            let y = resample(&x, from, to).unwrap();
            assert_eq!(y.len(), to as usize);
            let want = sine(1000.0, to, to as usize);
            // Away from the edges (zero padding there), the error is tiny.
            let m = to as usize / 10;
            let err = y[m..y.len() - m]
                .iter()
                .zip(&want[m..])
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-3, "{from}->{to}: {err}");
        }
    }

    #[test]
    fn content_above_the_new_nyquist_is_removed() {
        // 9 kHz at 44.1 kHz would alias to 7 kHz at 16 kHz.
        let x = sine(9_000.0, 44_100, 44_100);
        let y = resample(&x, 44_100, 16_000).unwrap();
        let m = 1600;
        let peak = y[m..y.len() - m].iter().fold(0.0f32, |a, v| a.max(v.abs()));
        assert!(peak < 1e-3, "aliased peak {peak}");
    }

    #[test]
    fn streaming_equals_whole_for_any_chunking() {
        let x: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        for (from, to) in [(44_100, 16_000), (8_000, 16_000), (16_001, 16_000)] {
            let whole = resample(&x, from, to).unwrap();
            let mut r = StreamResampler::new(from, to).unwrap();
            let mut out = Vec::new();
            let mut i = 0;
            let mut step = 1;
            while i < x.len() {
                let j = (i + step).min(x.len());
                r.push(&x[i..j], &mut out).unwrap();
                i = j;
                step = step * 3 % 997 + 1;
            }
            r.finish(&mut out).unwrap();
            assert_eq!(whole, out, "{from}->{to}");
        }
    }

    #[test]
    fn bad_rates_and_samples_are_named() {
        assert_eq!(
            resample(&[0.0], 0, 16_000),
            Err(ResampleError::InvalidRate {
                which: "from",
                value: 0
            })
        );
        assert!(matches!(
            resample(&[0.0, f32::NAN], 8_000, 16_000),
            Err(ResampleError::NonFiniteSample { index: 1, .. })
        ));
        assert_eq!(resample(&[], 8_000, 16_000), Ok(vec![]));
    }
}
