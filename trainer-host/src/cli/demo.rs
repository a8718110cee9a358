//! `hush-host demo`: the main job on the bundled data.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::demo::{run_demo, DemoConfig};

/// Arguments of `hush-host demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Keyword corpus to run on.
    #[arg(long, default_value = "data/corpus/kws")]
    pub data: PathBuf,
    /// Folder for results.json.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
}

/// Runs the demo and prints what it does.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let cfg = DemoConfig::new(args.data, args.out);
    run_demo(&cfg, &mut |line| println!("demo: {line}")).context("hush-host demo")?;
    Ok(())
}
