//! `hush-host`: the host binary. Each subcommand is a thin wrapper over the library.

mod cli;

use clap::{Parser, Subcommand};

/// hush on the host: coordinate federated rounds with user-level differential privacy,
/// account for every release, train centrally with DP-SGD, and make corpora.
#[derive(Parser)]
#[command(name = "hush-host", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: an end-to-end run on the bundled data (see README).
    Demo(cli::demo::DemoArgs),
    /// Make and inspect speech corpora (synthetic multi-speaker KWS and ASR data).
    #[command(subcommand)]
    Corpus(cli::corpus::CorpusCommand),
    /// Privacy accounting: epsilon, noise calibration, PATE analysis, the release ledger.
    #[command(subcommand)]
    Privacy(cli::privacy::PrivacyCommand),
    /// Fleet simulation: a real host on loopback and one device client per training
    /// speaker; federated training with user-level DP, accuracy per round, ε.
    Simulate(cli::simulate::SimulateArgs),
    /// Train a model centrally into a model package: `--task kws` (non-private or `--dp`) or
    /// `--task asr` (CTC speech recognition).
    Train(Box<cli::train::TrainArgs>),
    /// Write a package's model from its weights: ONNX (rewrites `model.onnx`) or an NNEF
    /// archive (`--format nnef`).
    Export(cli::export::ExportArgs),
    /// Pretrain the ASR encoder on unlabeled speech with BEST-RQ (non-private or `--dp`)
    /// into an encoder folder for `train --task asr --init DIR`.
    Pretrain(cli::pretrain::PretrainArgs),
    /// Run the federated round server (devices register, train, upload): `--config hush.toml`.
    Serve(cli::serve::ServeArgs),
    /// Who may join: issue enrolment tokens, list devices, revoke either.
    #[command(subcommand)]
    Devices(cli::devices::DevicesCommand),
    /// Privacy audits: gradient inversion of shared updates (`audit invert`, `audit report`)
    /// and the speech-quality metrics of reconstructed audio (`audit metrics`).
    #[command(subcommand)]
    Audit(cli::audit::AuditCommand),
    /// PATE: teachers on speaker-disjoint private data, noisy labels for public clips, a
    /// student trained on them.
    #[command(subcommand)]
    Pate(cli::pate::PateCommand),
    /// Experiments written as results.json, results.md and a plot (`experiment dp-sgd`).
    #[command(subcommand)]
    Experiment(cli::experiment::ExperimentCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Commands that train reuse freed tensor memory (faster steps); the long-running
    // server, which trains nothing, returns what it frees to the system as before.
    if !matches!(cli.command, Command::Serve(_)) {
        hush_models::compute::keep_freed_tensor_memory();
    }
    match cli.command {
        Command::Demo(args) => cli::demo::run(args),
        Command::Corpus(cmd) => cli::corpus::run(cmd),
        Command::Privacy(cmd) => cli::privacy::run(cmd),
        Command::Train(args) => cli::train::run(*args),
        Command::Export(args) => cli::export::run(args),
        Command::Pretrain(args) => cli::pretrain::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Devices(cmd) => cli::devices::run(cmd),
        Command::Simulate(args) => cli::simulate::run(args),
        Command::Audit(cmd) => cli::audit::run(cmd),
        Command::Pate(cmd) => cli::pate::run(cmd),
        Command::Experiment(cmd) => cli::experiment::run(cmd),
    }
}
