//! `hush-host demo`: the main job on the bundled data.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::demo::{demo_config, run_demo};
use indicatif::{ProgressBar, ProgressStyle};

use super::simulate::{print_summary, say};

/// Arguments of `hush-host demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Keyword corpus to run on.
    #[arg(long, default_value = "data/corpus/kws")]
    pub data: PathBuf,
    /// Output folder (results.json, accuracy.png, model/).
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
    /// Rounds (default: the demo's 60).
    #[arg(long)]
    pub rounds: Option<u64>,
}

/// Runs the demo and prints what it does.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut cfg = demo_config(&args.data, &args.out);
    if let Some(r) = args.rounds {
        cfg.host.rounds.rounds = r;
    }
    let bar = ProgressBar::new(cfg.host.rounds.rounds);
    bar.set_style(
        ProgressStyle::with_template("demo: [{elapsed_precise}] {bar:30} round {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = run_demo(
        &cfg,
        &mut |line| say(&bar, format!("demo: {line}")),
        &mut |point, _| {
            bar.set_position(point.version);
            bar.set_message(format!("test accuracy {:.3}", point.accuracy));
        },
    )
    .context("hush-host demo")?;
    bar.finish_and_clear();
    print_summary("demo", &report.simulation);
    println!(
        "demo: device path (tract on model.onnx): {:.3} on {} held-out clips",
        report.device_accuracy, report.device_clips
    );
    Ok(())
}
