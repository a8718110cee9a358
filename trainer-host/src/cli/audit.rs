//! `hush-host audit …`: privacy audits. Today: `audit metrics`, the speech-quality
//! metrics the gradient-leakage paper reports, for any pair of recordings.

use std::path::PathBuf;

use anyhow::{bail, Context};
use hush_device::audio::read_audio;
use hush_host::audit::{stoi, waveform_mse};
use serde::Serialize;

/// Subcommands of `hush-host audit`.
#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// STOI and W-MSE of a degraded (e.g. reconstructed) recording against its reference.
    Metrics(MetricsArgs),
}

/// Flags of `audit metrics`.
#[derive(clap::Args)]
pub struct MetricsArgs {
    /// The clean reference recording (WAV or FLAC).
    #[arg(long)]
    reference: PathBuf,
    /// The recording to score, same rate and length as the reference.
    #[arg(long)]
    degraded: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct MetricsReport {
    sample_rate: u32,
    seconds: f64,
    stoi: f64,
    wmse: f64,
}

/// Runs an `audit` subcommand.
pub fn run(cmd: AuditCommand) -> anyhow::Result<()> {
    match cmd {
        AuditCommand::Metrics(args) => metrics(args),
    }
}

fn metrics(args: MetricsArgs) -> anyhow::Result<()> {
    let x = read_audio(&args.reference)
        .with_context(|| format!("reading the reference {}", args.reference.display()))?;
    let y = read_audio(&args.degraded)
        .with_context(|| format!("reading the degraded {}", args.degraded.display()))?;
    if x.sample_rate != y.sample_rate {
        bail!(
            "{} is {} Hz but {} is {} Hz: resample one so both have the same rate",
            args.reference.display(),
            x.sample_rate,
            args.degraded.display(),
            y.sample_rate
        );
    }
    if x.samples.len() != y.samples.len() {
        bail!(
            "{} has {} samples but {} has {}: the metrics compare aligned recordings of equal length",
            args.reference.display(),
            x.samples.len(),
            args.degraded.display(),
            y.samples.len()
        );
    }
    let report = MetricsReport {
        sample_rate: x.sample_rate,
        seconds: x.duration_s(),
        stoi: stoi(&x.samples, &y.samples, x.sample_rate)?,
        wmse: waveform_mse(&x.samples, &y.samples).unwrap_or(0.0),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{:.2} s at {} Hz\nSTOI   {:.4}\nW-MSE  {:.6e}",
            report.seconds, report.sample_rate, report.stoi, report.wmse
        );
    }
    Ok(())
}
