//! Keyword spotting over a stream: push audio in chunks of any size (a microphone's
//! callbacks, a file read piecewise), get the model's verdict on the last window of
//! `frames` feature frames every `hop` new frames.
//!
//! The front-end runs once over the stream ([`FeatureStream`]); each window is the last
//! `frames` frames, normalised as the model's feature config says (utterance or sliding
//! CMVN restarted at the window's first frame), so a window's features are those
//! [`clip_features`](super::clip_features) computes for the same samples. Memory is
//! bounded by the model's window, whatever the stream's length.
//!
//! ```no_run
//! use hush_device::infer::{KwsClassifier, KwsStream};
//! let clf = KwsClassifier::load(std::path::Path::new("out/demo/model"))?;
//! let mut spot = KwsStream::new(&clf, 5)?;
//! let mut verdicts = Vec::new();
//! spot.push(&vec![0.0; 1600], &mut verdicts)?; // 100 ms at 16 kHz
//! for v in &verdicts {
//!     println!("{:.2} s: {} ({:.2})", v.end_s, v.label, v.score);
//! }
//! # Ok::<(), hush_device::infer::InferError>(())
//! ```

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{InferError, KwsClassifier};
use crate::features::cmvn::{utterance_cmvn, SlidingCmvn};
use crate::features::{CmvnOptions, FeatureStream};

/// The model's verdict on one window of the stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowVerdict {
    /// Where the window ends, in seconds from the start of the stream (the end of its
    /// last frame).
    pub end_s: f64,
    /// The most probable class.
    pub label: String,
    /// Its probability.
    pub score: f32,
    /// Every class's probability, in the model's label order (what a
    /// [`KeywordDetector`](super::KeywordDetector) smooths; not printed).
    #[serde(skip)]
    pub probs: Vec<f32>,
}

/// A keyword spotter running over a stream of samples at the model's rate. It holds its
/// own copy of the classifier (cheap: the optimised model is shared, not copied), so a
/// stream can outlive the classifier it was made from.
#[derive(Debug)]
pub struct KwsStream {
    clf: KwsClassifier,
    front: FeatureStream,
    cmvn: CmvnOptions,
    frames: usize,
    dim: usize,
    hop: usize,
    /// The last `frames` frames (fewer at the start), oldest first.
    recent: Vec<f32>,
    /// The window handed to the model (normalised copy of `recent`).
    window: Vec<f32>,
    /// New frames since the last verdict.
    since: usize,
    /// Frames out of the front-end in one push (kept to reuse its allocation).
    new: Vec<f32>,
    origin: PathBuf,
}

impl KwsStream {
    /// A stream for `clf` that runs the model every `hop` new frames (≥ 1).
    pub fn new(clf: &KwsClassifier, hop: usize) -> Result<Self, InferError> {
        let origin = PathBuf::from("<stream>");
        let mut cfg = clf.features().clone();
        let cmvn = std::mem::replace(&mut cfg.cmvn, CmvnOptions::None);
        let front = FeatureStream::new(cfg).map_err(|source| InferError::Features {
            path: origin.clone(),
            source,
        })?;
        let io = clf.card().arch.io();
        Ok(Self {
            clf: clf.clone(),
            dim: front.dim(),
            front,
            cmvn,
            frames: io.frames,
            hop: hop.max(1),
            recent: Vec::with_capacity(2 * io.frames * io.bins),
            window: Vec::with_capacity(io.frames * io.bins),
            since: 0,
            new: Vec::new(),
            origin,
        })
    }

    /// Pushes samples (in [-1, 1], at the model's rate) and appends a verdict to `out`
    /// for every window that became due.
    pub fn push(
        &mut self,
        samples: &[f32],
        out: &mut Vec<WindowVerdict>,
    ) -> Result<(), InferError> {
        self.push_gated(samples, out, |_| true).map(|_| ())
    }

    /// [`KwsStream::push`], but a window that became due is scored only when `gate` says
    /// yes for the sample its window ends at (counted from the start of the stream); the
    /// others are skipped without running the model. Returns how many were skipped.
    pub fn push_gated(
        &mut self,
        samples: &[f32],
        out: &mut Vec<WindowVerdict>,
        gate: impl Fn(u64) -> bool,
    ) -> Result<u64, InferError> {
        let mut new = std::mem::take(&mut self.new);
        new.clear();
        self.front
            .push(samples, &mut new)
            .map_err(|source| InferError::Features {
                path: self.origin.clone(),
                source,
            })?;
        let full = self.frames * self.dim;
        let frame = &self.clf.features().frame;
        let (shift, win, rate) = (
            frame.window_shift() as u64,
            frame.window_length() as u64,
            f64::from(frame.sample_rate),
        );
        // Frame by frame, so that a large chunk yields every window that falls due in it.
        let done_before = self.front.frames_done() - (new.len() / self.dim.max(1)) as u64;
        let mut skipped = 0;
        for (k, frame) in new.chunks_exact(self.dim.max(1)).enumerate() {
            self.recent.extend_from_slice(frame);
            if self.recent.len() > full {
                self.recent.drain(..self.recent.len() - full);
            }
            self.since += 1;
            if self.recent.len() == full && self.since >= self.hop {
                self.since = 0;
                let end = (done_before + k as u64) * shift + win;
                if !gate(end) {
                    skipped += 1;
                    continue;
                }
                let probs = match self.window_probs() {
                    Ok(p) => p,
                    Err(e) => {
                        self.new = new;
                        return Err(e);
                    }
                };
                out.push(self.verdict(probs, end as f64 / rate));
            }
        }
        self.new = new;
        Ok(skipped)
    }

    /// The classifier this stream runs.
    pub fn classifier(&self) -> &KwsClassifier {
        &self.clf
    }

    fn window_probs(&mut self) -> Result<Vec<f32>, InferError> {
        self.window.clear();
        self.window.extend_from_slice(&self.recent);
        match self.cmvn {
            CmvnOptions::None => {}
            CmvnOptions::Utterance { norm_vars } => {
                utterance_cmvn(&mut self.window, self.dim, norm_vars)
            }
            CmvnOptions::Sliding { window, norm_vars } => {
                let mut s = SlidingCmvn::new(window, self.dim, norm_vars);
                for f in self.window.chunks_exact_mut(self.dim) {
                    s.apply(f);
                }
            }
        }
        self.clf.probs(&self.window, Path::new(&self.origin))
    }

    fn verdict(&self, probs: Vec<f32>, end_s: f64) -> WindowVerdict {
        let (best, score) = super::kws::best_class(&probs);
        WindowVerdict {
            end_s,
            label: self
                .clf
                .card()
                .labels
                .get(best)
                .cloned()
                .unwrap_or_default(),
            score,
            probs,
        }
    }
}
