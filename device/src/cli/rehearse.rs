//! `hush-device rehearse`: one local training round offline, as a round task from the
//! host would run it (the same library call as `join`), to check a device's data, time
//! and memory before it joins. Nothing is sent anywhere.

use std::path::PathBuf;

use anyhow::Context;
use hush_device::protocol::{encode_update, LocalTraining, TrainTask, UpdateClip};
use hush_device::training::{local_update, LocalData};
use hush_models::package::ModelCard;

/// The demo's local learning rate, `--lr`'s default.
const DEFAULT_LR: f32 = 0.3;

/// Arguments of `hush-device rehearse`; the defaults are the demo's round recipe.
#[derive(clap::Args)]
pub struct RehearseArgs {
    /// Model package directory (the round's model).
    #[arg(long)]
    pub model: PathBuf,
    /// Labelled recordings (Speech Commands layout: <word>/<speaker>_nohash_<k>.wav).
    #[arg(long)]
    pub data: PathBuf,
    /// Use only this speaker's clips from --data.
    #[arg(long)]
    pub speaker: Option<String>,
    /// Passes over the local data.
    #[arg(long, default_value_t = 5)]
    pub epochs: u32,
    /// Examples per local step.
    #[arg(long, default_value_t = 8)]
    pub batch_size: u32,
    /// Local SGD learning rate.
    #[arg(long, default_value_t = DEFAULT_LR)]
    pub lr: f32,
    /// Flat L2 bound on the whole update (the user-level clip).
    #[arg(long, default_value_t = 1.0)]
    pub clip: f32,
    /// Per-example gradient clip in local steps (default: none).
    #[arg(long)]
    pub example_clip: Option<f32>,
    /// Seed of the local shuffle.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the encoded update (postcard, as it would be uploaded) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Trains once and prints the round report as JSON.
pub fn run(args: RehearseArgs) -> anyhow::Result<()> {
    let card = ModelCard::read(&args.model)
        .with_context(|| format!("reading model {}", args.model.display()))?;
    let data = LocalData::load_for_model(&card, &args.model, &args.data, args.speaker.as_deref())
        .with_context(|| format!("reading local data {}", args.data.display()))?;
    let layers = card
        .parameters
        .iter()
        .filter(|p| p.trainable)
        .map(|p| p.name.clone())
        .collect();
    let task = TrainTask {
        round: 0,
        model_version: 0,
        deadline_ms: u64::MAX,
        local: LocalTraining {
            epochs: args.epochs,
            batch_size: args.batch_size,
            lr: args.lr,
            example_clip: args.example_clip,
            seed: args.seed,
        },
        clip: UpdateClip {
            bounds: vec![args.clip],
            layers,
            normalize_layers: false,
            local_noise_std: 0.0,
        },
    };
    let (update, report) =
        local_update(&args.model, &data, &task, 0).context("training the local round")?;
    if !report.mean_loss.is_finite() {
        let zero = update
            .layers
            .iter()
            .all(|l| l.data.iter().all(|v| *v == 0.0));
        eprintln!(
            "warning: training diverged (mean loss {}){}; try a smaller --lr (the default {} \
             suits the demo's leak-CNN; the bundled kws-12 trains at 0.001)",
            report.mean_loss,
            if zero {
                ": the update is all zeros (clipping drops a non-finite one)"
            } else {
                ""
            },
            DEFAULT_LR
        );
    }
    let body = encode_update(&update).context("encoding the update")?;
    if let Some(out) = &args.out {
        std::fs::write(out, &body).with_context(|| format!("writing {}", out.display()))?;
    }
    println!(
        "{}",
        serde_json::json!({
            "examples": report.examples,
            "steps": report.steps,
            "mean_loss": report.mean_loss,
            "update_bytes": body.len(),
        })
    );
    Ok(())
}
