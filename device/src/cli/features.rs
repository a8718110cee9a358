//! `hush-device features`: compute fbank / MFCC / spectrogram features of an audio file
//! and write them as a float32 `.npy` of shape `[frames, bins]`.
//!
//! Kaldi's flag spellings (`--frame-length`, `--window-type`, `--preemphasis-coefficient`,
//! `--sample-frequency`, …) are accepted as aliases.

use std::path::PathBuf;

use anyhow::Context;
use hush_device::audio::read_audio;
use hush_device::features::npy::write_npy_f32;
use hush_device::features::{
    compute_audio, CmvnOptions, FeatureConfig, FeatureKind, Lifter, Padding, Preset, WindowKind,
};

/// Feature kinds on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// Log mel filterbank energies.
    Fbank,
    /// Mel-frequency cepstral coefficients.
    Mfcc,
    /// Log power spectrum.
    Spectrogram,
}

/// Arguments of `hush-device features`.
#[derive(Debug, clap::Args)]
pub struct FeaturesArgs {
    /// WAV or FLAC file (resampled to --sample-rate when its rate differs).
    #[arg(long)]
    pub input: PathBuf,
    /// What to compute.
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// Conventions to start from: kaldi or librosa.
    #[arg(long, default_value = "kaldi")]
    pub preset: String,
    /// Number of mel filters.
    #[arg(long, alias = "num-bins")]
    pub num_mel_bins: Option<usize>,
    /// Number of cepstra (MFCC).
    #[arg(long)]
    pub num_ceps: Option<usize>,
    /// Frame length in milliseconds.
    #[arg(long, alias = "frame-length")]
    pub frame_length_ms: Option<f32>,
    /// Frame shift in milliseconds.
    #[arg(long, alias = "frame-shift")]
    pub frame_shift_ms: Option<f32>,
    /// Window: povey, hamming, hann (hanning), rectangular.
    #[arg(long, alias = "window-type")]
    pub window: Option<String>,
    /// Dither standard deviation (in the preset's sample units; 0 = off).
    #[arg(long)]
    pub dither: Option<f32>,
    /// Seed of the dither noise.
    #[arg(long)]
    pub dither_seed: Option<u64>,
    /// Lowest mel filter edge in Hz.
    #[arg(long)]
    pub low_freq: Option<f32>,
    /// Highest mel filter edge in Hz (<= 0: offset from Nyquist).
    #[arg(long)]
    pub high_freq: Option<f32>,
    /// Only whole frames (true), or frames centred Kaldi's way with mirrored edges (false).
    #[arg(long)]
    pub snip_edges: Option<bool>,
    /// Pre-emphasis coefficient.
    #[arg(long, alias = "preemphasis-coefficient")]
    pub preemphasis: Option<f32>,
    /// Subtract each frame's mean.
    #[arg(long)]
    pub remove_dc_offset: Option<bool>,
    /// Feature sample rate in Hz.
    #[arg(long, alias = "sample-frequency")]
    pub sample_rate: Option<u32>,
    /// FFT size (default: window length rounded up to a power of two).
    #[arg(long)]
    pub fft_size: Option<usize>,
    /// Kaldi cepstral lifter coefficient (0 = none).
    #[arg(long)]
    pub cepstral_lifter: Option<f32>,
    /// Replace c0 by the log energy (MFCC).
    #[arg(long)]
    pub use_energy: Option<bool>,
    /// Normalisation: none, utterance, utterance-vars, sliding:N, sliding-vars:N.
    #[arg(long)]
    pub cmvn: Option<String>,
    /// Output `.npy` file, or `-` for a summary on stdout.
    #[arg(long)]
    pub output: String,
}

fn parse_cmvn(s: &str) -> anyhow::Result<CmvnOptions> {
    let (mode, n) = s.split_once(':').unwrap_or((s, ""));
    let window = || {
        n.parse::<usize>()
            .with_context(|| format!("--cmvn {s}: expected a window length in frames after ':'"))
    };
    Ok(match mode {
        "none" => CmvnOptions::None,
        "utterance" => CmvnOptions::Utterance { norm_vars: false },
        "utterance-vars" => CmvnOptions::Utterance { norm_vars: true },
        "sliding" => CmvnOptions::Sliding {
            window: window()?,
            norm_vars: false,
        },
        "sliding-vars" => CmvnOptions::Sliding {
            window: window()?,
            norm_vars: true,
        },
        _ => anyhow::bail!(
            "--cmvn {s}: expected none, utterance, utterance-vars, sliding:N or sliding-vars:N"
        ),
    })
}

impl FeaturesArgs {
    /// The typed config these flags describe (validated).
    pub fn config(&self) -> anyhow::Result<FeatureConfig> {
        let kind = match self.kind {
            KindArg::Fbank => FeatureKind::Fbank,
            KindArg::Mfcc => FeatureKind::Mfcc,
            KindArg::Spectrogram => FeatureKind::Spectrogram,
        };
        let mut c = Preset::parse(&self.preset)?.config(kind);
        if let Some(v) = self.num_mel_bins {
            c.mel.num_bins = v;
        }
        if let Some(v) = self.num_ceps {
            c.mfcc.num_ceps = v;
        }
        if let Some(v) = self.frame_length_ms {
            c.frame.frame_length_ms = v;
        }
        if let Some(v) = self.frame_shift_ms {
            c.frame.frame_shift_ms = v;
        }
        if let Some(v) = &self.window {
            c.frame.window = WindowKind::parse(v)?;
        }
        if let Some(v) = self.dither {
            c.frame.dither = v;
        }
        if let Some(v) = self.dither_seed {
            c.frame.dither_seed = v;
        }
        if let Some(v) = self.low_freq {
            c.mel.low_freq = v;
        }
        if let Some(v) = self.high_freq {
            c.mel.high_freq = v;
        }
        match (self.snip_edges, c.frame.padding) {
            (Some(true), _) => c.frame.padding = Padding::SnipEdges,
            (Some(false), Padding::SnipEdges) => c.frame.padding = Padding::KaldiMirror,
            _ => {}
        }
        if let Some(v) = self.preemphasis {
            c.frame.preemphasis = v;
        }
        if let Some(v) = self.remove_dc_offset {
            c.frame.remove_dc_offset = v;
        }
        if let Some(v) = self.sample_rate {
            c.frame.sample_rate = v;
        }
        if self.fft_size.is_some() {
            c.frame.fft_size = self.fft_size;
        }
        if let Some(v) = self.cepstral_lifter {
            c.mfcc.lifter = if v == 0.0 {
                Lifter::None
            } else {
                Lifter::Kaldi(v)
            };
        }
        if let Some(v) = self.use_energy {
            c.mfcc.use_energy = v;
        }
        if let Some(v) = &self.cmvn {
            c.cmvn = parse_cmvn(v)?;
        }
        c.validate()?;
        Ok(c)
    }
}

/// Reads, computes, writes.
pub fn run(args: FeaturesArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    let audio = read_audio(&args.input).context("reading audio")?;
    let f = compute_audio(&cfg, &audio)
        .with_context(|| format!("computing features of {}", args.input.display()))?;
    if args.output == "-" {
        let (mut lo, mut hi, mut sum) = (f32::INFINITY, f32::NEG_INFINITY, 0.0f64);
        for &v in &f.data {
            lo = lo.min(v);
            hi = hi.max(v);
            sum += f64::from(v);
        }
        println!(
            "{}: {} Hz -> {:?} at {} Hz: {} frames x {} values, min {lo:.4}, max {hi:.4}, mean {:.4}",
            args.input.display(),
            audio.sample_rate,
            cfg.kind,
            cfg.frame.sample_rate,
            f.num_frames,
            f.dim,
            sum / f.data.len().max(1) as f64
        );
        println!("config: {}", serde_json::to_string(&cfg)?);
    } else {
        let out = PathBuf::from(&args.output);
        write_npy_f32(&out, &f.data, &[f.num_frames, f.dim])
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!(
            "wrote {} ({} frames x {} values)",
            out.display(),
            f.num_frames,
            f.dim
        );
    }
    Ok(())
}
