//! Voice-activity detection with Silero VAD (v5, the 16 kHz "sequence" ONNX export that
//! PyPI's `silero-vad` wheel ships: `models/vad/`), run by tract, and the gate built on it:
//! [`VoiceGate`] says, for any point of the stream, whether speech was heard recently
//! enough that the keyword spotter's window there could hold a word
//! ([`crate::infer::KeywordSpotter::with_voice_gate`], `hush-device listen --vad`).
//!
//! The model reads 32 ms frames (512 samples at 16 kHz), each preceded by the last 64
//! samples of the frame before (zeros before the first), and carries an LSTM state (`h`,
//! `c`, 128 values each) from frame to frame; it returns each frame's probability of
//! speech. [`SileroVad`] keeps the context, the state and a partial frame between pushes,
//! so audio may come in chunks of any size; its memory does not grow with the stream.

use std::path::{Path, PathBuf};

use tract_nnef::prelude::*;

use super::graph::{Dim, ModelFile};
use super::{output_values, InferError, Plan};

/// The sample rate the model is trained for.
pub const VAD_RATE: u32 = 16_000;
/// New samples per frame (32 ms).
pub const VAD_FRAME: usize = 512;
/// Samples of the previous frame each frame is read with.
const CONTEXT: usize = 64;
/// LSTM state size (`h` and `c` are `[1, 1, STATE]`).
const STATE: usize = 128;

/// Silero VAD over a stream of 16 kHz samples.
#[derive(Debug, Clone)]
pub struct SileroVad {
    plan: Plan,
    path: PathBuf,
    /// The model's input: the context followed by the frame being filled.
    input: Vec<f32>,
    /// Samples of the frame being filled.
    filled: usize,
    h: Vec<f32>,
    c: Vec<f32>,
    frames: u64,
}

impl SileroVad {
    /// Loads the model at `path` (`silero_vad_16k_sequence.onnx`: inputs `input`
    /// [frames, 576], `h` and `c` [1, 1, 128]; outputs the speech probabilities, `hn`,
    /// `cn`).
    pub fn load(path: &Path) -> Result<Self, InferError> {
        let file = ModelFile::read(path)?;
        let path = file.path();
        let (inputs, outputs) = (file.inputs(), file.output_names().len());
        if (inputs, outputs) != (3, 3) {
            return Err(InferError::foreign(
                path,
                format!(
                    "{inputs} inputs and {outputs} outputs; expected Silero VAD's sequence \
                     export (input [frames, 576], h, c -> speech_probs, hn, cn)"
                ),
            ));
        }
        let fits = |e: TractError| {
            InferError::foreign(
                path,
                format!(
                    "not Silero VAD's sequence export (input [1, 576], h and c [1, 1, 128]): {e:#}"
                ),
            )
        };
        let state = [Dim::Is(1), Dim::Is(1), Dim::Is(STATE)];
        let plan = file
            .typed(&[&[Dim::Is(1), Dim::Is(CONTEXT + VAD_FRAME)], &state, &state])
            .and_then(|m| hush_tract_ops::optimize(m).map(|(m, _)| m))
            .map_err(fits)?
            .into_runnable()
            .map_err(|e| InferError::load(path, format!("{e:#}")))?;
        Ok(Self {
            plan: plan.into(),
            path: path.to_path_buf(),
            input: vec![0.0; CONTEXT + VAD_FRAME],
            filled: 0,
            h: vec![0.0; STATE],
            c: vec![0.0; STATE],
            frames: 0,
        })
    }

    /// Pushes samples (16 kHz, in [-1, 1]) and appends the speech probability of every
    /// frame completed to `out`, in order.
    pub fn push(&mut self, mut samples: &[f32], out: &mut Vec<f32>) -> Result<(), InferError> {
        while !samples.is_empty() {
            let take = (VAD_FRAME - self.filled).min(samples.len());
            let at = CONTEXT + self.filled;
            self.input[at..at + take].copy_from_slice(&samples[..take]);
            self.filled += take;
            samples = &samples[take..];
            if self.filled == VAD_FRAME {
                out.push(self.run_frame()?);
                self.input.copy_within(VAD_FRAME.., 0);
                self.filled = 0;
            }
        }
        Ok(())
    }

    /// Frames completed so far.
    pub fn frames_done(&self) -> u64 {
        self.frames
    }

    fn run_frame(&mut self) -> Result<f32, InferError> {
        let run = |reason: String| InferError::Run {
            path: self.path.clone(),
            reason,
        };
        let tensor = |shape: &[usize], data: &[f32]| {
            Tensor::from_shape(shape, data).map_err(|e| run(format!("{e:#}")))
        };
        let out = self
            .plan
            .run(tvec!(
                tensor(&[1, CONTEXT + VAD_FRAME], &self.input)?.into_tvalue(),
                tensor(&[1, 1, STATE], &self.h)?.into_tvalue(),
                tensor(&[1, 1, STATE], &self.c)?.into_tvalue(),
            ))
            .map_err(|e| run(format!("{e:#}")))?;
        let values = |i: usize| output_values(&out, i).map_err(run);
        let prob = values(0)?
            .first()
            .copied()
            .ok_or_else(|| run("empty speech probability".into()))?;
        let (h, c) = (values(1)?, values(2)?);
        if h.len() != STATE || c.len() != STATE {
            return Err(run(format!(
                "state of {} and {} values; expected {STATE}",
                h.len(),
                c.len()
            )));
        }
        self.h = h;
        self.c = c;
        self.frames += 1;
        Ok(prob)
    }
}

/// Speech or not, for any sample of the stream: open from the first frame whose speech
/// probability reaches `threshold` until `hold` samples after the end of the last such
/// frame (the spotter sets `hold` to its window's length,
/// [`crate::infer::KeywordSpotter::set_voice_gate`]).
#[derive(Debug, Clone)]
pub struct VoiceGate {
    vad: SileroVad,
    threshold: f32,
    hold: u64,
    /// Where the last speech frame ended (samples from the start).
    last_speech_end: Option<u64>,
    probs: Vec<f32>,
}

impl VoiceGate {
    /// A gate over `vad` that opens at a frame with speech probability ≥ `threshold` (in
    /// (0, 1)); it holds nothing until given a hold ([`VoiceGate::with_hold`]).
    pub fn new(vad: SileroVad, threshold: f32) -> Result<Self, InferError> {
        if !(threshold > 0.0 && threshold < 1.0) {
            return Err(InferError::Options {
                reason: format!("VAD threshold {threshold}: expected a probability in (0, 1)"),
            });
        }
        Ok(Self {
            vad,
            threshold,
            hold: 0,
            last_speech_end: None,
            probs: Vec::new(),
        })
    }

    /// The same gate holding `hold` samples instead.
    pub fn with_hold(mut self, hold: u64) -> Self {
        self.hold = hold;
        self
    }

    /// Runs the VAD over the next samples of the stream.
    pub fn push(&mut self, samples: &[f32]) -> Result<(), InferError> {
        self.probs.clear();
        let first = self.vad.frames_done();
        self.vad.push(samples, &mut self.probs)?;
        for (k, p) in self.probs.iter().enumerate() {
            if *p >= self.threshold {
                self.last_speech_end = Some((first + k as u64 + 1) * VAD_FRAME as u64);
            }
        }
        Ok(())
    }

    /// Whether speech was heard within `hold` samples before sample `at` (or after it, in
    /// audio already pushed).
    pub fn open_at(&self, at: u64) -> bool {
        self.last_speech_end
            .is_some_and(|end| end.saturating_add(self.hold) >= at)
    }
}
