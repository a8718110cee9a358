//! One frame in, one feature row out: pre-FFT chain, spectrum, mel filterbank, log,
//! cepstra. Every buffer and plan is made in [`FramePipeline::new`]; computing a frame
//! allocates nothing.

use super::config::{FeatureConfig, FeatureKind, LogKind, SpectrumOptions};
use super::mel::MelBank;
use super::mfcc::Mfcc;
use super::spectrum::{compress, Spectrum};
use super::window::FrameProcessor;

/// The per-frame computation for one validated [`FeatureConfig`].
#[derive(Debug)]
pub struct FramePipeline {
    kind: FeatureKind,
    prep: FrameProcessor,
    spectrum: Spectrum,
    spectrum_opts: SpectrumOptions,
    mel: Option<MelBank>,
    mel_out: Vec<f32>,
    mfcc: Option<Mfcc>,
    win: usize,
}

impl FramePipeline {
    /// For a validated config.
    pub fn new(cfg: &FeatureConfig) -> Self {
        let fft = cfg.frame.padded_length();
        let mel = (cfg.kind != FeatureKind::Spectrogram)
            .then(|| MelBank::new(&cfg.mel, cfg.frame.sample_rate, fft));
        let mfcc = (cfg.kind == FeatureKind::Mfcc).then(|| Mfcc::new(&cfg.mfcc, cfg.mel.num_bins));
        Self {
            kind: cfg.kind,
            prep: FrameProcessor::new(&cfg.frame),
            spectrum: Spectrum::new(fft, cfg.spectrum.kind),
            spectrum_opts: cfg.spectrum.clone(),
            mel_out: vec![0.0; mel.as_ref().map_or(0, MelBank::num_bins)],
            mel,
            mfcc,
            win: cfg.frame.window_length(),
        }
    }

    /// Back to the state after `new` (restarts the dither stream).
    pub fn reset(&mut self) {
        self.prep.reset();
    }

    /// Computes the features of one frame of raw samples (`win` of them) into `out`
    /// (`dim` values).
    pub fn compute(&mut self, raw: &[f32], out: &mut [f32]) {
        let want_energy = self.mfcc.as_ref().is_some_and(Mfcc::uses_energy);
        let energy = self
            .prep
            .process(raw, self.spectrum.input_mut(), want_energy);
        let spec = self.spectrum.compute(self.win);
        let SpectrumOptions { log, floor, .. } = self.spectrum_opts;
        match (self.kind, &self.mel) {
            (FeatureKind::Spectrogram, _) | (_, None) => {
                out.copy_from_slice(spec);
                compress(out, log, floor);
            }
            (FeatureKind::Fbank, Some(mel)) => {
                mel.apply(spec, out);
                compress(out, log, floor);
            }
            (FeatureKind::Mfcc, Some(mel)) => {
                mel.apply(spec, &mut self.mel_out);
                compress(&mut self.mel_out, log, floor);
                if let Some(mfcc) = &self.mfcc {
                    let energy = if log == LogKind::Decibel {
                        energy * (10.0 / std::f32::consts::LN_10)
                    } else {
                        energy
                    };
                    mfcc.apply(&self.mel_out, energy, out);
                }
            }
        }
    }
}
