//! Streaming features: push samples in chunks of any size, get each frame as soon as all
//! of its samples have arrived. The numbers are exactly those of [`super::compute`] over
//! the whole signal (which is this stream fed once), because every frame is computed from
//! the same samples by the same code, in the same order.
//!
//! ```
//! use hush_device::features::{FeatureConfig, FeatureKind, FeatureStream};
//! let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
//! let mut stream = FeatureStream::new(cfg).unwrap();
//! let mut out = Vec::new();
//! let tone: Vec<f32> = (0..16_000).map(|i| (i as f32 * 0.05).sin() * 0.1).collect();
//! for chunk in tone.chunks(777) {
//!     stream.push(chunk, &mut out).unwrap();
//! }
//! stream.finish(&mut out).unwrap();
//! assert_eq!(out.len(), 98 * 80); // 98 frames of 80 bins
//! ```
//!
//! Samples are kept only while a future frame may read them. Frames that reach past the
//! end (Kaldi `snip_edges=false`, librosa `center=True`) come out at [`FeatureStream::finish`].
//! Utterance CMVN needs the whole utterance, so with it every frame comes out at `finish`.

use super::cmvn::{utterance_cmvn, SlidingCmvn};
use super::config::{CmvnOptions, FeatureConfig};
use super::error::FeatureError;
use super::frame::Framing;
use super::mel::LANES;
use super::pipeline::FramePipeline;

/// A streaming feature extractor for one [`FeatureConfig`].
#[derive(Debug)]
pub struct FeatureStream {
    cfg: FeatureConfig,
    framing: Framing,
    pipeline: FramePipeline,
    dim: usize,
    /// Retained samples; `buf[0]` is sample `buf_start` of the stream.
    buf: Vec<f32>,
    buf_start: u64,
    received: u64,
    next_frame: u64,
    finished: bool,
    /// Gathering buffer for frames that reach past the signal's ends.
    gather: Vec<f32>,
    sliding: Option<SlidingCmvn>,
    /// Frames held back for utterance CMVN.
    held: Vec<f32>,
}

impl FeatureStream {
    /// Checks the config and makes every plan and buffer.
    pub fn new(cfg: FeatureConfig) -> Result<Self, FeatureError> {
        cfg.validate()?;
        let framing = Framing::new(&cfg.frame);
        let dim = cfg.dim();
        let sliding = match cfg.cmvn {
            CmvnOptions::Sliding { window, norm_vars } => {
                Some(SlidingCmvn::new(window, dim, norm_vars))
            }
            _ => None,
        };
        Ok(Self {
            pipeline: FramePipeline::new(&cfg),
            buf: Vec::with_capacity(4 * framing.win.max(framing.fft)),
            gather: vec![0.0; framing.win],
            cfg,
            framing,
            dim,
            buf_start: 0,
            received: 0,
            next_frame: 0,
            finished: false,
            sliding,
            held: Vec::new(),
        })
    }

    /// The config.
    pub fn config(&self) -> &FeatureConfig {
        &self.cfg
    }

    /// Values per frame.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Frames produced so far.
    pub fn frames_done(&self) -> u64 {
        self.next_frame
    }

    /// Samples pushed so far.
    pub fn samples_received(&self) -> u64 {
        self.received
    }

    /// Starts a new utterance with the same config (plans and buffers are kept).
    pub fn reset(&mut self) {
        self.pipeline.reset();
        self.buf.clear();
        self.buf_start = 0;
        self.received = 0;
        self.next_frame = 0;
        self.finished = false;
        self.held.clear();
        if let Some(s) = &mut self.sliding {
            s.reset();
        }
    }

    /// Appends `samples` (in [-1, 1], at the config's rate) and appends every frame now
    /// complete to `out` (`dim` values each). Returns the number of frames appended.
    /// A non-finite sample is refused before anything is consumed.
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<f32>) -> Result<usize, FeatureError> {
        self.push_batched(samples, 1, out)
    }

    /// [`FeatureStream::push`], but the frames now complete are computed only when there
    /// are at least `at_least` of them; fewer wait for a later push. For a consumer that
    /// reads frames in batches (a keyword spotter's hop): the filterbank runs on a batch's
    /// frames together, which costs less a frame than one at a time. The numbers are the
    /// same.
    pub fn push_batched(
        &mut self,
        samples: &[f32],
        at_least: usize,
        out: &mut Vec<f32>,
    ) -> Result<usize, FeatureError> {
        if self.finished {
            return Err(FeatureError::Finished);
        }
        check_finite(samples, self.received)?;
        self.buf.extend_from_slice(samples);
        self.received += samples.len() as u64;
        let ready = self.framing.num_frames(self.received);
        let n = if ready.saturating_sub(self.next_frame) >= at_least as u64 {
            self.emit(ready, false, out)
        } else {
            0
        };
        self.compact();
        Ok(n)
    }

    /// Ends the stream: appends the frames that read past the end (and, with utterance
    /// CMVN, every frame). Returns the number of frames appended.
    pub fn finish(&mut self, out: &mut Vec<f32>) -> Result<usize, FeatureError> {
        if self.finished {
            return Err(FeatureError::Finished);
        }
        self.finished = true;
        let total = self.framing.num_frames(self.received);
        let n = self.emit(total, true, out);
        Ok(self.release_held(n, out))
    }

    /// The whole signal at once, from a fresh stream: [`FeatureStream::push`] then
    /// [`FeatureStream::finish`], with the same numbers, but reading `samples` in place
    /// instead of copying them into the stream's buffer.
    pub(crate) fn push_all_and_finish(
        &mut self,
        samples: &[f32],
        out: &mut Vec<f32>,
    ) -> Result<usize, FeatureError> {
        if self.finished || self.received > 0 {
            return Err(FeatureError::Finished);
        }
        check_finite(samples, 0)?;
        self.received = samples.len() as u64;
        self.finished = true;
        let total = self.framing.num_frames(self.received);
        let n = self.emit_from(samples, 0, total, true, out);
        Ok(self.release_held(n, out))
    }

    /// With utterance CMVN, normalises the held frames and appends them all; otherwise
    /// returns `emitted` unchanged.
    fn release_held(&mut self, emitted: usize, out: &mut Vec<f32>) -> usize {
        let CmvnOptions::Utterance { norm_vars } = self.cfg.cmvn else {
            return emitted;
        };
        utterance_cmvn(&mut self.held, self.dim, norm_vars);
        out.extend_from_slice(&self.held);
        let n = self.held.len() / self.dim.max(1);
        self.held.clear();
        n
    }

    /// [`FeatureStream::emit_from`] the stream's own buffer.
    fn emit(&mut self, limit: u64, at_end: bool, out: &mut Vec<f32>) -> usize {
        let buf = std::mem::take(&mut self.buf);
        let n = self.emit_from(&buf, self.buf_start, limit, at_end, out);
        self.buf = buf;
        n
    }

    /// Computes frames `next_frame..limit` that are complete (all of them when `at_end`),
    /// reading the signal from `src`, whose first value is sample `src_start`.
    fn emit_from(
        &mut self,
        src: &[f32],
        src_start: u64,
        limit: u64,
        at_end: bool,
        out: &mut Vec<f32>,
    ) -> usize {
        let win = self.framing.win as i64;
        let utterance = matches!(self.cfg.cmvn, CmvnOptions::Utterance { .. });
        let mut count = 0;
        // Output rows of the staged frames.
        let mut rows = [0usize; LANES];
        while self.next_frame < limit {
            let start = self.framing.start(self.next_frame);
            if !at_end && start + win > self.received as i64 {
                break;
            }
            let target = if utterance { &mut self.held } else { &mut *out };
            rows[self.pipeline.staged()] = target.len();
            target.resize(target.len() + self.dim, 0.0);
            let lo = start - src_start as i64;
            let full = if start >= 0 && start + win <= self.received as i64 && lo >= 0 {
                let lo = lo as usize;
                self.pipeline.stage(&src[lo..lo + self.framing.win])
            } else {
                let n = self.received as i64;
                for (k, g) in self.gather.iter_mut().enumerate() {
                    *g = match self.framing.source(start + k as i64, n) {
                        Some(s) => {
                            let idx = (s - src_start as i64).max(0) as usize;
                            src.get(idx).copied().unwrap_or(0.0)
                        }
                        None => 0.0,
                    };
                }
                self.pipeline.stage(&self.gather)
            };
            self.next_frame += 1;
            count += 1;
            if full {
                self.flush(&rows, out);
            }
        }
        let staged = self.pipeline.staged();
        self.flush(&rows[..staged], out);
        if utterance {
            0
        } else {
            count
        }
    }

    /// Computes the staged frames into their `rows` (of `out`, or of the frames held for
    /// utterance CMVN), then applies sliding CMVN to them in order.
    fn flush(&mut self, rows: &[usize], out: &mut [f32]) {
        let target = if matches!(self.cfg.cmvn, CmvnOptions::Utterance { .. }) {
            &mut self.held[..]
        } else {
            out
        };
        self.pipeline.flush(target, rows);
        if let Some(s) = &mut self.sliding {
            for &row in rows {
                s.apply(&mut target[row..row + self.dim]);
            }
        }
    }

    /// Drops samples no future frame reads: before the next frame's start, keeping the
    /// last window's worth (mirroring at the end reads back up to one window).
    fn compact(&mut self) {
        let next_start = self.framing.start(self.next_frame);
        let keep_tail = self.received as i64 - self.framing.win.max(self.framing.fft) as i64;
        let keep_from = next_start.min(keep_tail).max(self.buf_start as i64) as u64;
        let drop = (keep_from - self.buf_start) as usize;
        if drop > 0 {
            self.buf.copy_within(drop.., 0);
            self.buf.truncate(self.buf.len() - drop);
            self.buf_start = keep_from;
        }
    }
}

/// Refuses a non-finite sample, naming its index in the stream (`first` is the index of
/// `samples[0]`).
fn check_finite(samples: &[f32], first: u64) -> Result<(), FeatureError> {
    if all_finite(samples) {
        return Ok(());
    }
    match samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        Some((i, &value)) => Err(FeatureError::NonFiniteSample {
            index: first + i as u64,
            value,
        }),
        None => Ok(()),
    }
}

/// Whether every sample is finite (branch-free, so it vectorises).
pub(crate) fn all_finite(samples: &[f32]) -> bool {
    const EXP: u32 = 0x7f80_0000;
    samples
        .iter()
        .fold(0u32, |bad, v| bad | u32::from(v.to_bits() & EXP == EXP))
        == 0
}
