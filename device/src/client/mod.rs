//! The device client: registration, polling, model download, local training and upload
//! against a hush host ([`join`]), over the protocol in [`crate::protocol`].
//!
//! - [`HostClient`]: one blocking HTTP call per endpoint;
//! - [`DeviceState`]: the state directory (identity and token, downloaded models);
//! - [`join`]: the loop a device runs until the host says training is done or it is
//!   told to stop.

mod http;
mod join;
mod state;

pub use http::{HostClient, MAX_DOWNLOAD_BYTES};
pub use join::{join, JoinConfig, JoinEvent, JoinSummary};
pub use state::{DeviceIdentity, DeviceState};

use std::path::PathBuf;

/// Why the client stopped or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server URL is not an http(s) URL.
    #[error("server {server:?} is not an http:// or https:// URL")]
    BadServer {
        /// What was given.
        server: String,
    },
    /// The CA certificate file given to trust the host does not hold a certificate.
    #[error("CA certificate: {reason}; expected PEM certificates (-----BEGIN CERTIFICATE-----)")]
    BadCa {
        /// What is wrong.
        reason: String,
    },
    /// The host's TLS certificate did not verify against the trusted roots.
    #[error(
        "{what}: the host's TLS certificate is not trusted ({reason}); for a self-signed or \
         private-CA host, pass its CA certificate with --ca-cert"
    )]
    UntrustedHost {
        /// The call.
        what: String,
        /// The TLS error.
        reason: String,
    },
    /// The host could not be reached or the connection broke.
    #[error("{what}: {reason}")]
    Transport {
        /// The call.
        what: String,
        /// What failed.
        reason: String,
    },
    /// The host answered with an error.
    #[error("{what}: host refused with HTTP {status} ({code}): {message}")]
    Refused {
        /// The call.
        what: String,
        /// HTTP status.
        status: u16,
        /// The host's error code.
        code: String,
        /// The host's explanation.
        message: String,
        /// How long the host asked the client to wait (`Retry-After` on a 429 or 503).
        retry_after: Option<std::time::Duration>,
    },
    /// The host's reply does not decode.
    #[error("{what}: the host's reply is not what the protocol says: {reason}")]
    BadReply {
        /// The call.
        what: String,
        /// Decoder message.
        reason: String,
    },
    /// The state directory could not be read or written.
    #[error("state {path}: {reason}")]
    State {
        /// File or directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// Local training failed.
    #[error(transparent)]
    Training(#[from] crate::training::TrainingError),
    /// The update could not be encoded.
    #[error(transparent)]
    Protocol(#[from] crate::protocol::ProtocolError),
}

impl ClientError {
    /// Whether retrying the same call later can succeed (network trouble, host busy or
    /// restarting) rather than the host refusing the request itself.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport { .. } => true,
            Self::Refused { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// The wait the host asked for before a retry (`Retry-After`), if it named one.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Refused { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
