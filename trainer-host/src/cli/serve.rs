//! `hush-host serve --config hush.toml`: the federated round server until SIGTERM or
//! Ctrl-C.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::fl::FlConfig;
use hush_host::server::{start_host, wait_for_stop_signal};

/// Arguments of `hush-host serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (see trainer-host/hush.example.toml for every key and default).
    #[arg(long, default_value = "hush.toml")]
    pub config: PathBuf,
    /// Override `server.listen`.
    #[arg(long)]
    pub listen: Option<String>,
    /// Override `server.store`: a PostgreSQL database, postgres://user@host:port/db, for
    /// devices, rounds and the ledger (default: SQLite in `server.data_dir`).
    #[arg(long)]
    pub store: Option<String>,
    /// Log lines as `text` or as one JSON object per line (`json`, for log collectors).
    /// The level is set by `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Loads the config, starts the host and serves until SIGTERM or Ctrl-C, then stops
/// accepting, lets in-flight requests (a release among them) finish, abandons the open
/// round (no release, no ε) and exits 0.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Logs go to stderr (journald and docker keep both streams; stdout stays clean).
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match args.log_format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
    let mut config = FlConfig::load(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    if args.listen.is_some() || args.store.is_some() {
        if let Some(listen) = args.listen {
            config.server.listen = listen;
        }
        if let Some(store) = args.store {
            config.server.store = Some(store);
        }
        config.validate()?;
    }
    let data_dir = config.server.data_dir.clone();
    let host = start_host(config).context("starting the round server")?;
    tracing::info!(
        url = %host.url(),
        data_dir = %data_dir.display(),
        "serving; SIGTERM or Ctrl-C to stop"
    );
    let signal = wait_for_stop_signal()?;
    tracing::info!("{signal}: shutting down");
    host.shutdown().context("shutting down")?;
    Ok(())
}
