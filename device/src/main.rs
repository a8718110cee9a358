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
    /// Detect keywords in a recording or from a microphone, streamed through the model
    /// window by window (posteriors smoothed, thresholded, refractory period): one JSON
    /// line per detection.
    Listen(cli::listen::ListenArgs),
    /// Transcribe audio files (or directories, recursively) with a speech-recognition
    /// model package: one JSON line per file, `{"file", "text"}`.
    Transcribe(cli::transcribe::TranscribeArgs),
    #[cfg(feature = "train")]
    /// Run one local training round offline, as `join` would when picked, and report
    /// it; nothing is sent.
    Rehearse(cli::rehearse::RehearseArgs),
    /// Compute fbank / MFCC / spectrogram features of an audio file into a float32 .npy.
    Features(cli::features::FeaturesArgs),
    /// Record from a microphone into a 16-bit WAV at the model rate.
    Record(cli::record::RecordArgs),
    /// List audio input devices.
    Devices(cli::devices::DevicesArgs),
    #[cfg(feature = "client")]
    /// Take part in federated training: register with a host, train on local recordings
    /// when picked, upload clipped updates; until the host says done or Ctrl-C.
    Join(cli::join::JoinArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    hush_models::compute::keep_freed_inference_memory();
    match cli.command {
        Command::Info(args) => cli::info::run(args),
        Command::Classify(args) => cli::classify::run(args),
        Command::Listen(args) => cli::listen::run(args),
        Command::Transcribe(args) => cli::transcribe::run(args),
        #[cfg(feature = "train")]
        Command::Rehearse(args) => cli::rehearse::run(args),
        Command::Features(args) => cli::features::run(args),
        Command::Record(args) => cli::record::run(args),
        Command::Devices(args) => cli::devices::run(args),
        #[cfg(feature = "client")]
        Command::Join(args) => cli::join::run(args),
    }
}
