//! Framing: how many frames `n` samples give, where each starts, and which sample is read
//! past the signal's ends. Ported from Kaldi `feature-window.cc` (`NumFrames`,
//! `FirstSampleOfFrame`, `ExtractWindow`) and librosa `stft(center=True)`.

use super::config::{FrameOptions, Padding};

/// Frame geometry for validated options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// Window length in samples.
    pub win: usize,
    /// Shift in samples.
    pub shift: usize,
    /// FFT size.
    pub fft: usize,
    /// Placement and edge handling.
    pub padding: Padding,
}

impl Framing {
    /// From validated options.
    pub fn new(opts: &FrameOptions) -> Self {
        Self {
            win: opts.window_length(),
            shift: opts.window_shift(),
            fft: opts.padded_length(),
            padding: opts.padding,
        }
    }

    /// Frames in a signal of `n` samples.
    pub fn num_frames(&self, n: u64) -> u64 {
        let (win, shift, fft) = (self.win as u64, self.shift as u64, self.fft as u64);
        match self.padding {
            Padding::SnipEdges => {
                if n < win {
                    0
                } else {
                    1 + (n - win) / shift
                }
            }
            Padding::KaldiMirror => (n + shift / 2) / shift,
            Padding::CenterReflect | Padding::CenterZero => {
                let padded = n + 2 * (fft / 2);
                if n == 0 || padded < fft {
                    0
                } else {
                    1 + (padded - fft) / shift
                }
            }
        }
    }

    /// First sample of frame `i` (negative: before the signal).
    pub fn start(&self, i: u64) -> i64 {
        let (win, shift, fft) = (self.win as i64, self.shift as i64, self.fft as i64);
        let i = i as i64;
        match self.padding {
            Padding::SnipEdges => i * shift,
            Padding::KaldiMirror => i * shift + shift / 2 - win / 2,
            Padding::CenterReflect | Padding::CenterZero => i * shift - fft / 2 + (fft - win) / 2,
        }
    }

    /// The index read for sample `s` of a signal of `n >= 1` samples, or `None` for a zero.
    pub fn source(&self, mut s: i64, n: i64) -> Option<i64> {
        if (0..n).contains(&s) {
            return Some(s);
        }
        match self.padding {
            Padding::CenterZero => None,
            Padding::SnipEdges | Padding::KaldiMirror => {
                while s < 0 || s >= n {
                    s = if s < 0 { -s - 1 } else { 2 * n - 1 - s };
                }
                Some(s)
            }
            Padding::CenterReflect => {
                if n == 1 {
                    return Some(0);
                }
                // numpy "reflect" (edge not repeated): period 2n - 2.
                let period = 2 * n - 2;
                let mut r = s.rem_euclid(period);
                if r >= n {
                    r = period - r;
                }
                Some(r)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::config::{FeatureConfig, FeatureKind};

    #[test]
    fn frame_counts_follow_kaldi_and_librosa() {
        let mut o = FeatureConfig::kaldi(FeatureKind::Fbank).frame;
        let f = Framing::new(&o);
        assert_eq!((f.win, f.shift, f.fft), (400, 160, 512));
        assert_eq!(f.num_frames(16_000), 98);
        assert_eq!(f.num_frames(399), 0);
        o.padding = Padding::KaldiMirror;
        assert_eq!(Framing::new(&o).num_frames(16_000), 100);
        assert_eq!(Framing::new(&o).start(0), 80 - 200);
        let l = Framing::new(&FeatureConfig::librosa(FeatureKind::Fbank).frame);
        assert_eq!(l.num_frames(16_000), 101);
        assert_eq!(l.start(0), -256 + 56);
    }

    #[test]
    fn mirrors_match_kaldi_and_numpy() {
        let mut o = FeatureConfig::kaldi(FeatureKind::Fbank).frame;
        o.padding = Padding::KaldiMirror;
        let k = Framing::new(&o);
        assert_eq!(k.source(-1, 5), Some(0));
        assert_eq!(k.source(-2, 5), Some(1));
        assert_eq!(k.source(5, 5), Some(4));
        let l = Framing::new(&FeatureConfig::librosa(FeatureKind::Fbank).frame);
        assert_eq!(l.source(-1, 5), Some(1));
        assert_eq!(l.source(5, 5), Some(3));
        assert_eq!(l.source(-9, 5), Some(1));
    }
}
