//! Frames in, feature rows out: pre-FFT chain, spectrum, mel filterbank, log, cepstra.
//!
//! Frames are *staged* one by one (chain and FFT, the spectrum kept in the next of
//! [`LANES`] lanes) and *flushed* together: the filterbank runs on every lane at once
//! ([`MelBank::apply_lanes`]) when three frames or more are staged, which is where
//! batching pays, and on one or two frames one by one ([`MelBank::apply_lane`]: a stream
//! fed a frame's worth of samples at a time). Every frame's numbers are the same however
//! the frames are grouped, so streaming in any chunk size still equals the whole-signal
//! result.
//! Every buffer and plan is made in [`FramePipeline::new`]; computing frames allocates
//! nothing.

use super::config::{FeatureConfig, FeatureKind, LogKind, SpectrumOptions};
use super::mel::{MelBank, LANES};
use super::mfcc::Mfcc;
use super::spectrum::{compress, Spectrum};
use super::window::FrameProcessor;

/// Staged frames from which the filterbank runs on every lane at once: one frame alone
/// costs about half of a block's eight ([`MelBank::apply_lane`]), so two cost about a
/// block.
const BLOCK_FROM: usize = 3;

/// The per-frame computation for one validated [`FeatureConfig`].
#[derive(Debug)]
pub struct FramePipeline {
    kind: FeatureKind,
    prep: FrameProcessor,
    spectrum: Spectrum,
    spectrum_opts: SpectrumOptions,
    mel: Option<MelBank>,
    mfcc: Option<Mfcc>,
    win: usize,
    /// Spectra of the staged frames, bin-major: `spectra[k][lane]`.
    spectra: Vec<[f32; LANES]>,
    /// Filterbank outputs of the staged frames: `mel_lanes[j][lane]`.
    mel_lanes: Vec<[f32; LANES]>,
    /// One frame's log mel energies (MFCC input).
    mel_row: Vec<f32>,
    /// Raw log energy of each staged frame (MFCC with energy).
    energy: [f32; LANES],
    staged: usize,
}

impl FramePipeline {
    /// For a validated config.
    pub fn new(cfg: &FeatureConfig) -> Self {
        let fft = cfg.frame.padded_length();
        let mel = (cfg.kind != FeatureKind::Spectrogram)
            .then(|| MelBank::new(&cfg.mel, cfg.frame.sample_rate, fft));
        let mfcc = (cfg.kind == FeatureKind::Mfcc).then(|| Mfcc::new(&cfg.mfcc, cfg.mel.num_bins));
        let mel_bins = mel.as_ref().map_or(0, MelBank::num_bins);
        Self {
            kind: cfg.kind,
            prep: FrameProcessor::new(&cfg.frame),
            spectrum: Spectrum::new(fft, cfg.spectrum.kind),
            spectrum_opts: cfg.spectrum.clone(),
            spectra: vec![[0.0; LANES]; fft / 2 + 1],
            mel_lanes: vec![[0.0; LANES]; mel_bins],
            mel_row: vec![0.0; mel_bins],
            mel,
            mfcc,
            win: cfg.frame.window_length(),
            energy: [0.0; LANES],
            staged: 0,
        }
    }

    /// Back to the state after `new` (restarts the dither stream, drops staged frames).
    pub fn reset(&mut self) {
        self.prep.reset();
        self.staged = 0;
    }

    /// Frames staged and not yet flushed.
    pub fn staged(&self) -> usize {
        self.staged
    }

    /// Stages one frame of raw samples (`win` of them): the pre-FFT chain and the
    /// spectrum. Returns whether every lane is now full (then [`FramePipeline::flush`]
    /// must run before the next `stage`).
    pub fn stage(&mut self, raw: &[f32]) -> bool {
        let lane = self.staged;
        if lane == LANES {
            return true;
        }
        let want_energy = self.mfcc.as_ref().is_some_and(Mfcc::uses_energy);
        self.energy[lane] = self
            .prep
            .process(raw, self.spectrum.input_mut(), want_energy);
        self.spectrum
            .compute_into_lane(self.win, &mut self.spectra, lane);
        self.staged += 1;
        self.staged == LANES
    }

    /// Computes the features of the staged frames, in staging order, into the rows of
    /// `out` that start at `rows[0..staged]` (`dim` values each), and empties the stage.
    pub fn flush(&mut self, out: &mut [f32], rows: &[usize]) {
        let n = self.staged.min(rows.len());
        self.staged = 0;
        if n == 0 {
            return;
        }
        let SpectrumOptions { log, floor, .. } = self.spectrum_opts;
        // A full block takes the log of every lane at once; a partial one (streaming in
        // small chunks) only of its own rows, so a lone frame costs one frame's logs.
        let block_log = n == LANES;
        if let Some(mel) = &self.mel {
            if n >= BLOCK_FROM {
                // Every lane, the unused ones' spectra left from earlier frames (finite,
                // and no lane's sums read another's).
                mel.apply_lanes(&self.spectra, &mut self.mel_lanes);
            } else {
                for lane in 0..n {
                    mel.apply_lane(&self.spectra, lane, &mut self.mel_lanes);
                }
            }
            if block_log {
                compress(self.mel_lanes.as_flattened_mut(), log, floor);
            }
        }
        for (lane, &row) in rows.iter().enumerate().take(n) {
            match (self.kind, &self.mfcc) {
                (FeatureKind::Spectrogram, _) => {
                    let dst = &mut out[row..row + self.spectra.len()];
                    for (d, s) in dst.iter_mut().zip(&self.spectra) {
                        *d = s[lane];
                    }
                    compress(dst, log, floor);
                }
                (FeatureKind::Fbank, _) | (FeatureKind::Mfcc, None) => {
                    let dst = &mut out[row..row + self.mel_lanes.len()];
                    for (d, m) in dst.iter_mut().zip(&self.mel_lanes) {
                        *d = m[lane];
                    }
                    if !block_log {
                        compress(dst, log, floor);
                    }
                }
                (FeatureKind::Mfcc, Some(mfcc)) => {
                    for (d, m) in self.mel_row.iter_mut().zip(&self.mel_lanes) {
                        *d = m[lane];
                    }
                    if !block_log {
                        compress(&mut self.mel_row, log, floor);
                    }
                    let energy = if log == LogKind::Decibel {
                        self.energy[lane] * (10.0 / std::f32::consts::LN_10)
                    } else {
                        self.energy[lane]
                    };
                    let dim = mfcc.num_ceps();
                    mfcc.apply(&self.mel_row, energy, &mut out[row..row + dim]);
                }
            }
        }
    }
}
