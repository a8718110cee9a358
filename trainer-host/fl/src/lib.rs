//! Federated rounds without transport or SQL: devices register, check in, are
//! Poisson-sampled into rounds, train locally and upload clipped updates; the engine sums
//! them in O(model) memory, adds central noise, and releases the new model version and its
//! ledger record in one transaction.
//!
//! - [`engine`]: the round life cycle ([`RoundEngine`]), driven by a caller — the HTTP
//!   server in `hush-server`, or an in-process simulator;
//! - [`store`]: the durable state it needs, behind one synchronous trait ([`Store`];
//!   `hush-store` implements it on SQLite);
//! - [`enrolment`]: who may register (operator-issued enrolment tokens, revocation);
//! - [`clock`]: time ([`SystemClock`], [`ManualClock`]);
//! - [`aggregate`]: the per-upload checks and the order-free streaming sum, one pass over
//!   each update's values;
//! - [`publish`]: model versions on disk, staged and recovered after a crash;
//! - [`fault`]: named points where tests make the process die (feature `fault-points`);
//! - [`config`]: `hush.toml` ([`FlConfig`]).
//!
//! The wire contract is [`hush_device::protocol`]. Privacy invariants are enforced where
//! DESIGN.md says: the host re-checks every norm ([`hush_models::dp::ClipBounds::check_norms`], on the norms
//! computed in the pass that adds an update),
//! noise and the division by the **expected** cohort happen only in
//! [`hush_models::dp::GaussianMechanism::privatize`], a round opens only after
//! [`hush_privacy::ledger::Ledger::authorize`] and its release is recorded before the new model
//! version is written.

pub mod aggregate;
pub mod clock;
pub mod config;
pub mod engine;
pub mod enrolment;
pub mod fault;
pub mod publish;
pub mod store;
mod value_pass;

use std::path::PathBuf;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::FlConfig;
pub use engine::{RoundEngine, RoundLog};
pub use store::{Store, StoreError};

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
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
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
    /// An operator's enrolment command was refused (bad quota, unknown id).
    #[error("{0}")]
    Enrolment(String),
}

impl FlError {
    /// A configuration error naming `key`.
    pub fn config(key: &str, reason: &str) -> Self {
        Self::Config {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> FlError + '_ {
        move |source| FlError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
