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
//! When the package has a streaming form ([`StreamForm`]) and the features are not
//! normalised per window, the stream runs it incrementally and scores a window's output
//! frames with the head (their mean, or the frames in order):
//!
//! - when the hop is a multiple of the form's stride (of two strides or more) and the trunk
//!   can be pulsed for it (by tract-pulse here, or from the host's archive), through the
//!   trunk pulsed by tract
//!   ([`StreamForm::pulsed_trunk`]): each layer keeps its own recent frames, so each input
//!   frame goes through each layer once (after windows a gate skipped, the trunk starts
//!   anew from the next window's first frame, after as many zero frames as make its runs
//!   end where windows end);
//! - otherwise it keeps the output frames of the last window it scored, one set per phase
//!   of the window's start against the stride, and computes those the new window adds, each
//!   from the input frames under its receptive field (all of them after skipped windows).
//!
//! Either equals the whole-window model on the same window (golden tests hold them within
//! 1e-4); [`KwsStream::whole_window`] runs the latter always.
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

use hush_models::arch::{HeadInput, StreamGeometry};
use tract_nnef::prelude::TypedSimpleState;

use super::frames::PulsedTrunk;
use super::{InferError, KwsClassifier, Plan, StreamForm};
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
    /// The streaming form's state, when the stream runs it.
    incremental: Option<Incremental>,
}

impl KwsStream {
    /// A stream for `clf` that runs the model every `hop` new frames (≥ 1).
    pub fn new(clf: &KwsClassifier, hop: usize) -> Result<Self, InferError> {
        Self::build(clf, hop, true)
    }

    /// A stream that runs the whole-window model (`model.onnx`) on every window, even when
    /// the package has a streaming form.
    pub fn whole_window(clf: &KwsClassifier, hop: usize) -> Result<Self, InferError> {
        Self::build(clf, hop, false)
    }

    /// A stream; `incremental`: running the streaming form where the package has one.
    fn build(clf: &KwsClassifier, hop: usize, incremental: bool) -> Result<Self, InferError> {
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
            incremental: clf
                .stream_form()
                .filter(|_| incremental && matches!(cmvn, CmvnOptions::None))
                .map(|form| Incremental::new(form, hop.max(1), io.frames))
                .transpose()?,
        })
    }

    /// Whether the stream runs the package's streaming form.
    pub fn is_incremental(&self) -> bool {
        self.incremental.is_some()
    }

    /// Whether the stream runs the streaming form's trunk pulsed by tract (its hop is a
    /// multiple of the stride that a run of two output frames or more divides, and this
    /// build has tract-pulse or the package the trunk pulsed for that run).
    pub fn is_pulsed(&self) -> bool {
        self.incremental
            .as_ref()
            .is_some_and(|i| i.pulsed.is_some())
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
        // No window falls due before `due` more frames: the front-end computes them
        // together when they are all there.
        let have = self.recent.len() / self.dim.max(1);
        let due = (self.frames.saturating_sub(have))
            .max(self.hop.saturating_sub(self.since))
            .max(1);
        self.front
            .push_batched(samples, due, &mut new)
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
                let start = done_before + k as u64 + 1 - self.frames as u64;
                let probs = match self.window_probs(start) {
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

    /// The probabilities of the window in `recent`, which starts at frame `start` of the
    /// stream.
    fn window_probs(&mut self, start: u64) -> Result<Vec<f32>, InferError> {
        if let Some(inc) = &mut self.incremental {
            return inc.probs(&self.recent, start, self.dim);
        }
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

/// What an incremental stream keeps between windows: the pulsed trunk's state, or per
/// phase of the window's start (its first frame modulo the form's stride) the output frames
/// of the last window of that phase it scored and the trunk's plans by chunk length.
#[derive(Debug)]
struct Incremental {
    form: StreamForm,
    pulsed: Option<Pulsed>,
    plans: Vec<(usize, Plan)>,
    grids: Vec<Grid>,
    /// What the head reads of a window's output frames: their mean, or the frames.
    pooled: Vec<f32>,
}

/// The output frames of one phase: frame `o` reads input frames from `phase + o·stride`.
#[derive(Debug, Default)]
struct Grid {
    /// Output frames `first ..` (`channels` values each), oldest first.
    vectors: Vec<f32>,
    first: u64,
}

/// The trunk pulsed by tract, and where its state is in the stream.
struct Pulsed {
    trunk: PulsedTrunk,
    state: TypedSimpleState,
    /// The next input frame of the stream the state takes.
    fed: u64,
    /// Zero frames the state takes before it ([`pulse_lead`]), at its start.
    lead: usize,
    /// Output frames the state gave since it started (the first `delay`, and the
    /// `lead / stride` that read the zero frames, are not frames of the stream).
    given: u64,
    /// Output frames of the stream `first ..` (`channels` values each), oldest first.
    grid: Grid,
    /// A run's output frames.
    out: Vec<f32>,
}

impl Pulsed {
    /// One run of the trunk on `chunk` (`pulse` frames): its output frames after the first
    /// `skipped` the state gave go to the grid.
    fn run(
        &mut self,
        form: &StreamForm,
        chunk: &[f32],
        skipped: u64,
        channels: usize,
    ) -> Result<(), InferError> {
        self.out.clear();
        form.pulse_vectors(&mut self.state, chunk, &mut self.out)?;
        for v in self.out.chunks_exact(channels) {
            if self.given >= skipped {
                self.grid.vectors.extend_from_slice(v);
            }
            self.given += 1;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Pulsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pulsed")
            .field("pulse", &self.trunk.pulse)
            .field("delay", &self.trunk.delay)
            .field("fed", &self.fed)
            .finish_non_exhaustive()
    }
}

/// The frames per run of the pulsed trunk for windows of `frames` frames every `hop`: the
/// largest divisor of the hop that is a multiple of the stride and has a [`pulse_lead`].
/// `None` when no such divisor gives two output frames a run or more: a run per output
/// frame cost more than recomputing the receptive field (BENCHMARKS.md, "Listening after
/// folding, one-pass elementwise ops, block WAV reads and the pulsed trunk").
pub(crate) fn pulse_for(g: StreamGeometry, hop: usize, frames: usize) -> Option<usize> {
    (2 * g.stride..=hop).rev().find(|&p| {
        hop.is_multiple_of(p) && p.is_multiple_of(g.stride) && pulse_lead(g, p, frames).is_some()
    })
}

/// The zero frames the pulsed trunk takes before a window's first, so that its runs end
/// where windows end: after the last whole run within a window, the window's output frames
/// are all out (its last input frames that no output frame reads may wait for the next
/// run). A multiple of the stride, so that the zero frames' output frames are whole ones
/// before the window's; `None` when there is none under `pulse`.
pub(crate) fn pulse_lead(g: StreamGeometry, pulse: usize, frames: usize) -> Option<usize> {
    let unread = (frames - g.receptive_field) % g.stride;
    (0..pulse)
        .step_by(g.stride)
        .find(|lead| (frames + lead) % pulse <= unread)
}

impl Incremental {
    fn new(form: &StreamForm, hop: usize, frames: usize) -> Result<Self, InferError> {
        let g = form.geometry();
        let trunk = match pulse_for(g, hop, frames) {
            Some(pulse) => form.pulsed_trunk(pulse)?,
            None => None,
        };
        let pulsed = match trunk {
            Some(trunk) => {
                let state = spawn(&trunk)?;
                Some(Pulsed {
                    lead: pulse_lead(g, trunk.pulse, frames).unwrap_or(0),
                    trunk,
                    state,
                    // Not started: the first window starts it.
                    fed: u64::MAX,
                    given: 0,
                    grid: Grid::default(),
                    out: Vec::new(),
                })
            }
            None => None,
        };
        Ok(Self {
            form: form.clone(),
            pulsed,
            plans: Vec::new(),
            grids: (0..g.stride).map(|_| Grid::default()).collect(),
            pooled: Vec::new(),
        })
    }

    /// The probabilities of `window` (`frames × dim` features) starting at input frame
    /// `start` of the stream.
    fn probs(&mut self, window: &[f32], start: u64, dim: usize) -> Result<Vec<f32>, InferError> {
        if self.pulsed.is_some() {
            self.pulsed_vectors(window, start, dim)?;
        } else {
            self.grid_vectors(window, start, dim)?;
        }
        let Self {
            form,
            pulsed,
            grids,
            pooled,
            ..
        } = self;
        let g = form.geometry();
        let c = form.channels();
        let grid = match pulsed {
            Some(p) => &p.grid,
            None => &grids[(start % g.stride as u64) as usize],
        };
        pooled.clear();
        match g.head {
            HeadInput::Mean => {
                pooled.resize(c, 0.0);
                for v in grid.vectors.chunks_exact(c).take(g.window_vectors) {
                    for (p, x) in pooled.iter_mut().zip(v) {
                        *p += x;
                    }
                }
                let n = g.window_vectors as f32;
                pooled.iter_mut().for_each(|p| *p /= n);
            }
            HeadInput::Frames => {
                let frames =
                    grid.vectors
                        .get(..g.window_vectors * c)
                        .ok_or_else(|| InferError::Run {
                            path: PathBuf::from("<stream>"),
                            reason: format!(
                                "{} output frames for a window of {}",
                                grid.vectors.len() / c.max(1),
                                g.window_vectors
                            ),
                        })?;
                pooled.extend_from_slice(frames);
            }
        }
        form.probs(pooled)
    }

    /// Feeds the pulsed trunk the window's frames it has not had, until the window's output
    /// frames are out, and leaves them first in its grid.
    fn pulsed_vectors(&mut self, window: &[f32], start: u64, dim: usize) -> Result<(), InferError> {
        let Self { form, pulsed, .. } = self;
        let Some(p) = pulsed else { return Ok(()) };
        let g = form.geometry();
        let (c, stride) = (form.channels(), g.stride as u64);
        let frames = (window.len() / dim.max(1)) as u64;
        let skipped = p.trunk.delay as u64 + p.lead as u64 / stride;
        if p.fed < start || p.fed > start + frames {
            // The first window, or windows a gate skipped: start anew at this one.
            p.state = spawn(&p.trunk)?;
            (p.fed, p.given) = (start, 0);
            p.grid = Grid {
                vectors: Vec::new(),
                first: start / stride,
            };
            if p.lead > 0 {
                // The zero frames, then the window's first, in one run.
                let real = p.trunk.pulse - p.lead;
                let mut chunk = vec![0f32; p.trunk.pulse * dim];
                chunk[p.lead * dim..].copy_from_slice(&window[..real * dim]);
                p.run(form, &chunk, skipped, c)?;
                p.fed += real as u64;
            }
        }
        let pulse = p.trunk.pulse as u64;
        while p.fed + pulse <= start + frames {
            let from = ((p.fed - start) * dim as u64) as usize;
            p.run(form, &window[from..from + p.trunk.pulse * dim], skipped, c)?;
            p.fed += pulse;
        }
        let first = start / stride;
        let drop = first
            .saturating_sub(p.grid.first)
            .min((p.grid.vectors.len() / c) as u64);
        p.grid.vectors.drain(..drop as usize * c);
        p.grid.first += drop;
        let have = (p.grid.vectors.len() / c) as u64;
        if p.grid.first != first || have < g.window_vectors as u64 {
            return Err(InferError::Run {
                path: PathBuf::from("<stream>"),
                reason: format!(
                    "the pulsed trunk has output frames {}..{} for a window needing {first}..{}",
                    p.grid.first,
                    p.grid.first + have,
                    first + g.window_vectors as u64
                ),
            });
        }
        Ok(())
    }

    /// Leaves the output frames of `window` (`frames × dim` features, starting at input
    /// frame `start` of the stream) in the grid of its phase: those it shares with the last
    /// window of its phase are reused, the others computed (the frames since the last
    /// window of its phase).
    fn grid_vectors(&mut self, window: &[f32], start: u64, dim: usize) -> Result<(), InferError> {
        let Self {
            form, plans, grids, ..
        } = self;
        let g = form.geometry();
        let c = form.channels();
        let stride = g.stride as u64;
        let phase = start % stride;
        let grid = &mut grids[phase as usize];
        let first = (start - phase) / stride;
        let end = first + g.window_vectors as u64;
        let have_end = grid.first + (grid.vectors.len() / c) as u64;
        if have_end <= first || grid.first > first {
            // Nothing to share: the first window of this phase, or windows skipped since.
            grid.vectors.clear();
        } else {
            grid.vectors.drain(..(first - grid.first) as usize * c);
        }
        grid.first = first;
        let have_end = first + (grid.vectors.len() / c) as u64;
        if have_end < end {
            let missing = (end - have_end) as usize;
            // The input frames of the missing outputs, from the window's first frame.
            let from = (have_end * stride + phase - start) as usize;
            let frames = (missing - 1) * g.stride + g.receptive_field;
            let plan = match plans.iter().find(|(f, _)| *f == frames) {
                Some((_, plan)) => plan.clone(),
                None => {
                    let plan = form.trunk_plan(frames)?;
                    plans.push((frames, plan.clone()));
                    plan
                }
            };
            let chunk = &window[from * dim..(from + frames) * dim];
            form.frame_vectors(&plan, chunk, frames, &mut grid.vectors)?;
        }
        Ok(())
    }
}

/// A fresh state of the pulsed trunk: its buffers at zero.
fn spawn(trunk: &PulsedTrunk) -> Result<TypedSimpleState, InferError> {
    trunk.plan.spawn().map_err(|e| InferError::Run {
        path: PathBuf::from("<stream>"),
        reason: format!("starting the pulsed trunk: {e:#}"),
    })
}
