//! Streaming keyword detection, the loop `hush-device listen` and the C API share: audio
//! pushed in chunks of any size goes through the model window by window ([`KwsStream`]),
//! and the window posteriors become detections ([`KeywordDetector`]). Options are in
//! milliseconds, as a person sets them; [`KeywordSpotter::new`] turns them into whole
//! frames and windows.
//!
//! It does not read files, open microphones or resample: samples come in at the model's
//! rate (the caller checks it against [`KwsClassifier::features`]).
//!
//! ```no_run
//! use hush_device::infer::{KeywordSpotter, KwsClassifier, SpotterOptions};
//! let clf = KwsClassifier::load(std::path::Path::new("models/kws-12"))?;
//! let mut spotter = KeywordSpotter::new(&clf, &SpotterOptions::default())?;
//! let mut detections = Vec::new();
//! spotter.push(&vec![0.0; 1600], &mut detections)?; // 100 ms at 16 kHz
//! for d in &detections {
//!     println!("{:.2} s: {} ({:.2})", d.time_s, d.label, d.score);
//! }
//! # Ok::<(), hush_device::infer::InferError>(())
//! ```

use std::path::Path;

use hush_models::arch::StreamGeometry;
use hush_models::export::nnef::pulsed_trunk_archive;
use hush_models::package::{ModelCard, ONNX, STREAM_FRAMES, STREAM_HEAD};

use super::graph::BuildReads;
use super::kws::card_features;
use super::vad::{VoiceGate, VAD_RATE};
use super::WindowVerdict;
use super::{Detection, DetectorOptions, InferError, KeywordDetector, KwsClassifier, KwsStream};
use crate::features::FeatureConfig;

/// How a [`KeywordSpotter`] runs, in milliseconds of audio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpotterOptions {
    /// Run the model every this many milliseconds of audio (> 0; rounded to whole frames,
    /// at least one; for a model with a streaming form, to whole multiples of its time
    /// stride, so that its trunk runs pulsed: 100 ms is 120 at a 20 ms shift and stride 2).
    pub hop_ms: u32,
    /// Average each class's posterior over the windows of the last this many
    /// milliseconds (rounded to whole windows, at least one).
    pub smooth_ms: u32,
    /// Detect a keyword when its smoothed posterior reaches this probability, in (0, 1].
    pub threshold: f32,
    /// After a detection, report nothing for this many milliseconds.
    pub refractory_ms: u32,
}

impl SpotterOptions {
    /// Default hop: 100 ms.
    pub const HOP_MS: u32 = 100;
    /// Default smoothing: 500 ms.
    pub const SMOOTH_MS: u32 = 500;
    /// Default threshold: 0.8.
    pub const THRESHOLD: f32 = 0.8;
    /// Default refractory period: 1000 ms.
    pub const REFRACTORY_MS: u32 = 1000;
}

impl Default for SpotterOptions {
    fn default() -> Self {
        Self {
            hop_ms: Self::HOP_MS,
            smooth_ms: Self::SMOOTH_MS,
            threshold: Self::THRESHOLD,
            refractory_ms: Self::REFRACTORY_MS,
        }
    }
}

/// The hop of `hop_ms` in whole input frames (at least one; for a model with a streaming
/// form of time axis `geometry`, a multiple of its time stride), and in milliseconds, for
/// features `features`.
fn hop_frames(
    features: &FeatureConfig,
    geometry: Option<StreamGeometry>,
    hop_ms: u32,
) -> (usize, f64) {
    let frame = &features.frame;
    let shift_ms = 1000.0 * frame.window_shift() as f64 / f64::from(frame.sample_rate);
    let stride = geometry.map_or(1, |g| g.stride);
    let step_ms = shift_ms * stride as f64;
    let hop = ((f64::from(hop_ms) / step_ms).round() as usize).max(1) * stride;
    (hop, hop as f64 * shift_ms)
}

/// The pulse at which a spotter with the default hop runs the streaming form of a package
/// with `card` and `features` (the archive it reads in a build without tract-pulse is
/// hush-models' `export::nnef::pulsed_trunk_archive` of it). `None` when the architecture
/// has no streaming form or that hop runs it unpulsed.
pub fn listen_pulse(card: &ModelCard, features: &FeatureConfig) -> Option<usize> {
    let geometry = card.arch.stream_geometry()?;
    let (hop, _) = hop_frames(features, Some(geometry), SpotterOptions::HOP_MS);
    super::stream::pulse_for(geometry, hop, card.arch.io().frames)
}

/// The model files a build reading as `build` says listens with, for the keyword-spotting
/// package in `dir` (only its `model.json` is read): the whole model and, where the
/// architecture has a streaming form, its trunk and head (ONNX files or their NNEF
/// archives), and for a build that does not pulse the trunk itself the trunk pulsed as
/// [`listen_pulse`] says. A device downloading a model version fetches these.
pub fn listen_files(dir: &Path, build: BuildReads) -> Result<Vec<String>, InferError> {
    let card = ModelCard::read(dir)?;
    let features = card_features(&card, dir)?;
    let mut files = vec![build.file_for(ONNX)];
    if card.arch.stream_geometry().is_some() {
        files.push(build.file_for(STREAM_FRAMES));
        files.push(build.file_for(STREAM_HEAD));
        if !build.pulse {
            files.extend(listen_pulse(&card, &features).map(pulsed_trunk_archive));
        }
    }
    Ok(files)
}

/// Writes into the keyword-spotting package in `dir` the archive of its streaming form's
/// trunk pulsed as a spotter with the default hop runs it ([`listen_pulse`];
/// hush-models' `export::nnef::write_pulsed_trunk`), for devices built without tract-pulse.
/// `None` when the package has no streaming form or that hop runs it unpulsed.
#[cfg(feature = "pulse")]
pub fn write_listen_archive(dir: &Path) -> Result<Option<std::path::PathBuf>, InferError> {
    let clf = KwsClassifier::load_for_streams(dir)?;
    if clf.stream_form().is_none() {
        return Ok(None);
    }
    match listen_pulse(clf.card(), clf.features()) {
        Some(pulse) => Ok(Some(hush_models::export::nnef::write_pulsed_trunk(
            dir, pulse,
        )?)),
        None => Ok(None),
    }
}

/// A keyword spotter over a stream: the model, its stream and the detector.
#[derive(Debug)]
pub struct KeywordSpotter {
    stream: KwsStream,
    detector: KeywordDetector,
    /// The last push's window verdicts (kept to reuse the allocation).
    verdicts: Vec<WindowVerdict>,
    /// Scores only windows around speech, when set.
    gate: Option<VoiceGate>,
    samples: u64,
    windows: u64,
    skipped: u64,
}

impl KeywordSpotter {
    /// A spotter for `clf` running as `opts` says; errors name the first bad option.
    pub fn new(clf: &KwsClassifier, opts: &SpotterOptions) -> Result<Self, InferError> {
        let bad = |reason: String| InferError::Options { reason };
        if opts.hop_ms == 0 {
            return Err(bad(
                "hop 0 ms: expected a positive number of milliseconds".into()
            ));
        }
        let geometry = clf.stream_form().map(|f| f.geometry());
        let (hop, hop_ms) = hop_frames(clf.features(), geometry, opts.hop_ms);
        let smooth_windows = ((f64::from(opts.smooth_ms) / hop_ms).round() as usize).max(1);
        let detector = KeywordDetector::new(
            &clf.card().labels,
            DetectorOptions {
                smooth_windows,
                threshold: opts.threshold,
                refractory_s: f64::from(opts.refractory_ms) / 1000.0,
            },
        )
        .map_err(bad)?;
        Ok(Self {
            stream: KwsStream::new(clf, hop)?,
            detector,
            verdicts: Vec::new(),
            gate: None,
            samples: 0,
            windows: 0,
            skipped: 0,
        })
    }

    /// The same spotter, gated by `gate` ([`KeywordSpotter::set_voice_gate`]).
    pub fn with_voice_gate(mut self, gate: VoiceGate) -> Result<Self, InferError> {
        self.set_voice_gate(gate)?;
        Ok(self)
    }

    /// From now on, runs the model only on windows that end within the model's window
    /// length of speech `gate` heard (so every window holding a frame of speech is
    /// scored); the others are skipped, and smoothing starts afresh after them. The
    /// model's rate must be the VAD's, 16 kHz; set it once, before the first push (the
    /// gate counts samples from the start of the stream).
    pub fn set_voice_gate(&mut self, gate: VoiceGate) -> Result<(), InferError> {
        let frame = &self.classifier().features().frame;
        if frame.sample_rate != VAD_RATE {
            return Err(InferError::Options {
                reason: format!(
                    "the voice-activity gate runs at {VAD_RATE} Hz; the model's features are \
                     at {} Hz",
                    frame.sample_rate
                ),
            });
        }
        if self.gate.is_some() {
            return Err(InferError::Options {
                reason: "this spotter has a voice-activity gate already".into(),
            });
        }
        if self.samples > 0 {
            return Err(InferError::Options {
                reason: format!(
                    "a voice-activity gate is set before the first push; {} samples were \
                     pushed already",
                    self.samples
                ),
            });
        }
        let io = self.classifier().card().arch.io();
        let window =
            (io.frames.saturating_sub(1) * frame.window_shift() + frame.window_length()) as u64;
        self.gate = Some(gate.with_hold(window));
        Ok(())
    }

    /// Pushes samples (in [-1, 1], at the model's rate), appends the detections now due
    /// to `detections`, and returns this push's window verdicts, in order (every window,
    /// whether or not it gave a detection).
    pub fn push(
        &mut self,
        samples: &[f32],
        detections: &mut Vec<Detection>,
    ) -> Result<&[WindowVerdict], InferError> {
        self.verdicts.clear();
        match &mut self.gate {
            None => self.stream.push(samples, &mut self.verdicts)?,
            Some(gate) => {
                gate.push(samples)?;
                let gate = &*gate;
                let skipped = self
                    .stream
                    .push_gated(samples, &mut self.verdicts, |end| gate.open_at(end))?;
                if skipped > 0 {
                    self.detector.forget();
                }
                self.skipped += skipped;
            }
        }
        self.samples += samples.len() as u64;
        self.windows += self.verdicts.len() as u64;
        for v in &self.verdicts {
            if let Some(d) = self.detector.push(v.end_s, &v.probs) {
                detections.push(d);
            }
        }
        Ok(&self.verdicts)
    }

    /// The classifier.
    pub fn classifier(&self) -> &KwsClassifier {
        self.stream.classifier()
    }

    /// The sample rate pushed samples must have (the model's features').
    pub fn sample_rate(&self) -> u32 {
        self.classifier().features().frame.sample_rate
    }

    /// Samples pushed so far.
    pub fn samples_pushed(&self) -> u64 {
        self.samples
    }

    /// Windows scored so far.
    pub fn windows_scored(&self) -> u64 {
        self.windows
    }

    /// Windows the voice-activity gate skipped so far (0 without a gate).
    pub fn windows_skipped(&self) -> u64 {
        self.skipped
    }
}
