//! The federated round server: devices register, check in, are Poisson-sampled into
//! rounds, train locally and upload clipped updates; the host sums them in O(model)
//! memory, adds central noise, records the release in the privacy ledger, steps the server
//! optimizer and publishes a new model version.
//!
//! - [`config`]: `hush.toml` ([`FlConfig`]);
//! - [`store`]: durable state behind [`store::FlStore`] (SQLite today; schema in its doc);
//! - [`round`]: the round state machine ([`round::RoundManager`]);
//! - [`aggregate`]: the streaming sum and the per-upload checks;
//! - [`server`]: the axum router and [`start_host`] / [`HostHandle`];
//! - [`tls`]: HTTPS from `[server.tls]` (rustls).
//!
//! The wire contract is [`hush_device::protocol`]. Privacy invariants are enforced where
//! DESIGN.md says: the host re-checks every norm ([`hush_models::dp::ClipBounds::check`]),
//! noise and the division by the **expected** cohort happen only in
//! [`hush_models::dp::GaussianMechanism::privatize`], a round opens only after
//! [`hush_privacy::ledger::Ledger::authorize`] and its release is recorded before the new model
//! version is written.

pub mod aggregate;
pub mod config;
pub mod round;
pub mod server;
pub mod store;
pub mod tls;

use std::path::PathBuf;

pub use config::FlConfig;
pub use round::RoundLog;
pub use server::{start_host, HostHandle};

/// Errors of the round server (start-up, storage, model handling). Request-level problems
/// are answered as HTTP errors with an `ApiError` body instead.
#[derive(Debug, thiserror::Error)]
pub enum FlError {
    /// A configuration key is missing or out of range.
    #[error("config `{key}`: {reason}")]
    Config {
        /// The key (e.g. `rounds.sampling_rate`) or the file.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The SQLite store failed.
    #[error("round store ({op}): {source}")]
    Store {
        /// What was being done.
        op: String,
        /// The underlying error.
        #[source]
        source: rusqlite::Error,
    },
    /// The store holds a value that does not decode.
    #[error("round store: {0}")]
    Corrupt(String),
    /// The privacy ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] hush_privacy::ledger::LedgerError),
    /// The model package could not be read, built or written.
    #[error(transparent)]
    Model(#[from] hush_models::ModelError),
    /// A DP primitive refused its parameters.
    #[error(transparent)]
    Dp(#[from] hush_models::dp::DpError),
    /// The server optimizer refused.
    #[error(transparent)]
    Optim(#[from] hush_models::optim::OptimError),
    /// The listener could not be bound or the runtime failed.
    #[error("server: {0}")]
    Server(String),
}

impl FlError {
    /// A configuration error naming `key`.
    pub fn config(key: &str, reason: &str) -> Self {
        Self::Config {
            key: key.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn store(op: &str) -> impl FnOnce(rusqlite::Error) -> FlError + '_ {
        move |source| FlError::Store {
            op: op.to_string(),
            source,
        }
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> FlError + '_ {
        move |source| FlError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
