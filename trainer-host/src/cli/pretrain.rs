//! `hush-host pretrain …`: BEST-RQ pretraining of the ASR encoder on unlabeled speech,
//! non-private or with DP-SGD (`--dp`, see [`hush_host::train::pretrain`]), into an
//! encoder folder that `hush-host train --task asr --init DIR` fine-tunes.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::train::pretrain::{pretrain, PretrainConfig};
use hush_models::pretrained::PretrainEpoch;
use indicatif::{ProgressBar, ProgressStyle};

use super::simulate::say;
use super::train::{print_privacy, DpArgs};

/// Arguments of `hush-host pretrain`.
#[derive(clap::Args)]
pub struct PretrainArgs {
    /// Unlabeled corpus (LibriSpeech layout or JSONL manifest; transcripts are ignored).
    #[arg(long)]
    pub data: PathBuf,
    /// Architecture whose encoder is pretrained: ctc-gru or ctc-gru-small (fine-tune with
    /// the same --arch).
    #[arg(long, default_value = "ctc-gru-small")]
    pub arch: String,
    /// Epochs (of the DP phase with --dp).
    #[arg(long, default_value_t = 10)]
    pub epochs: usize,
    /// Utterances per step (the expected batch with --dp).
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Peak learning rate (AdamW, warm-up then cosine).
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f64,
    /// Codewords of the random-projection quantizer.
    #[arg(long, default_value_t = 256)]
    pub codebook_size: usize,
    /// Expected fraction of encoder steps masked, in (0, 1).
    #[arg(long, default_value_t = 0.4)]
    pub mask_fraction: f64,
    /// Encoder steps (4 frames each) per masked span.
    #[arg(long, default_value_t = 2)]
    pub mask_span: usize,
    /// Seed of the quantizer's projection and codebook.
    #[arg(long, default_value_t = 0)]
    pub quantizer_seed: u64,
    /// Seed of initialisation, shuffling and masks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to train: cpu, or gpu (burn's wgpu backend on Vulkan; a build with
    /// `--features gpu`; falls back to the CPU with a message when no GPU starts).
    #[arg(long, default_value = "cpu")]
    pub device: hush_models::compute::ComputeKind,
    /// DP-SGD (example-level differential privacy) and its options.
    #[command(flatten)]
    pub dp: DpArgs,
    /// Output encoder folder (encoder.json, weights.safetensors; privacy.json with --dp).
    #[arg(long)]
    pub out: PathBuf,
}

impl PretrainArgs {
    /// The pretraining configuration of these flags.
    pub fn config(&self) -> PretrainConfig {
        let mut cfg = PretrainConfig::new(&self.data, &self.arch);
        cfg.epochs = self.epochs;
        cfg.batch_size = self.batch_size;
        cfg.lr = self.lr;
        cfg.bestrq.codebook_size = self.codebook_size;
        cfg.bestrq.mask_fraction = self.mask_fraction;
        cfg.bestrq.mask_span = self.mask_span;
        cfg.bestrq.quantizer_seed = self.quantizer_seed;
        cfg.seed = self.seed;
        cfg.compute = self.device;
        cfg
    }
}

/// Pretrains with a progress bar over epochs, then prints the outcome.
pub fn run(args: PretrainArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let cfg = args.config();
    super::train::announce_device(cfg.compute);
    let dp = args.dp.config()?;
    // Bad flags fail here, before the corpus is read.
    cfg.check(dp.as_ref())?;
    let bar = ProgressBar::new(cfg.epochs as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "pretrain [{elapsed_precise}] {bar:30} epoch {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = pretrain(
        &cfg,
        dp.as_ref(),
        &args.out,
        &command,
        &mut |e: &PretrainEpoch| {
            say(
                &bar,
                format!(
                    "epoch {:>3}/{}  best-rq loss {:.4}  val loss {:.4}  lr {:.2e}",
                    e.epoch, cfg.epochs, e.train_loss, e.val_loss, e.lr
                ),
            );
            bar.set_position(e.epoch as u64);
            bar.set_message(format!("val loss {:.4}", e.val_loss));
        },
    )
    .with_context(|| format!("pretraining on {}", args.data.display()))?;
    bar.finish_and_clear();
    if let Some(p) = &report.privacy {
        println!(
            "DP-SGD: noise multiplier {:.4}, q {:.4}, {} steps, clip {} ({}), {} private \
             utterances, {} frozen layers",
            p.noise_multiplier,
            p.sampling_rate,
            p.steps,
            p.clip,
            p.clipping,
            p.population,
            p.frozen_layers.len()
        );
        print_privacy(p, &args.out);
    }
    println!(
        "{} encoder ({} trainable parameters, quantizer seed {}) → {}",
        report.card.arch.name(),
        report.card.num_trainable,
        report.card.bestrq.quantizer_seed,
        args.out.display()
    );
    Ok(())
}
