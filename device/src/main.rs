//! `hush-device`: the device binary. Each subcommand is a thin wrapper over the library.

mod cli;

use clap::{Parser, Subcommand};

/// hush on the device: audio in, features, keyword spotting and ASR, and private local
/// training for federated rounds.
#[derive(Parser)]
#[command(name = "hush-device", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print what an audio file holds (format, rate, duration, level) after decoding.
    Info(cli::info::InfoArgs),
    /// Classify audio files (or directories, recursively) with a keyword-spotting model
    /// package: one JSON line per file.
    Classify(cli::classify::ClassifyArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Info(args) => cli::info::run(args),
        Command::Classify(args) => cli::classify::run(args),
    }
}
