//! `hush-host audit …`: privacy audits. Today: `audit metrics`, the speech-quality
//! metrics the gradient-leakage paper reports (STOI, PESQ, W-MSE), for any pair of
//! recordings.

use std::path::PathBuf;

use anyhow::{bail, Context};
use hush_device::audio::read_audio;
use hush_host::audit::{pesq_mos, stoi, waveform_mse, PesqMode};
use serde::Serialize;

/// Subcommands of `hush-host audit`.
#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// STOI, PESQ and W-MSE of a degraded (e.g. reconstructed) recording against its reference.
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
    /// `None` at rates other than 8 and 16 kHz.
    pesq: Option<f64>,
    pesq_mode: Option<PesqMode>,
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
    let pesq = match x.sample_rate {
        8_000 | 16_000 => Some(pesq_mos(&x.samples, &y.samples, x.sample_rate)?),
        _ => None,
    };
    let report = MetricsReport {
        sample_rate: x.sample_rate,
        seconds: x.duration_s(),
        stoi: stoi(&x.samples, &y.samples, x.sample_rate)?,
        pesq: pesq.map(|p| p.1),
        pesq_mode: pesq.map(|p| p.0),
        wmse: waveform_mse(&x.samples, &y.samples).unwrap_or(0.0),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{:.2} s at {} Hz", report.seconds, report.sample_rate);
        println!("STOI   {:.4}", report.stoi);
        match pesq {
            Some((PesqMode::Wideband, v)) => println!("PESQ   {v:.3} (wideband MOS-LQO)"),
            Some((PesqMode::Narrowband, v)) => println!("PESQ   {v:.3} (narrowband MOS-LQO)"),
            None => println!("PESQ   - (defined at 8 and 16 kHz only)"),
        }
        println!("W-MSE  {:.6e}", report.wmse);
    }
    Ok(())
}
