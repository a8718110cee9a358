//! `hush-host corpus …`: make and inspect corpora.

/// Subcommands of `hush-host corpus`.
#[derive(clap::Subcommand)]
pub enum CorpusCommand {}

/// Runs one `corpus` subcommand.
pub fn run(cmd: CorpusCommand) -> anyhow::Result<()> {
    match cmd {}
}
