//! The wire protocol between a device and the host: JSON control messages and the
//! postcard-encoded model update. One definition, linked by both sides.
//!
//! Endpoints (all under `/v1`; errors are HTTP status codes with an [`ApiError`] JSON body):
//!
//! | method | path | body → reply |
//! |---|---|---|
//! | POST | `/v1/devices` | [`RegisterRequest`] → [`RegisterResponse`] |
//! | POST | `/v1/checkin` | [`CheckInRequest`] → [`Assignment`] (token required) |
//! | GET | `/v1/models/{version}/{file}` | file of the model package (`model.json`, `weights.safetensors`, `model.onnx`; token required) |
//! | POST | `/v1/rounds/{round}/update` | postcard [`Update`], header [`CHECKSUM_HEADER`] → [`UploadReceipt`] (token required) |
//! | GET | `/v1/status` | → [`StatusReport`] |
//!
//! The token goes in `Authorization: Bearer <token>`. Updates carry a CRC-32 of the body
//! in [`CHECKSUM_HEADER`] (hex), so a truncated or corrupted body is refused before it is
//! decoded. [`decode_update`] checks the size before decoding and every name, shape and
//! value after: it returns an error for any input and never panics.

mod update;

pub use update::{
    checksum_hex, checksum_mismatch, claimed_checksum, decode_frame, decode_update, encode_update,
    non_finite, parse_checksum, LayerDelta, Update, UpdateFrame, UpdateHeader, UpdateLimits,
    CHECKSUM_HEADER, UPDATE_FORMAT_VERSION,
};

use serde::{Deserialize, Serialize};

/// Why a protocol message was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    /// The body is larger than the limit.
    #[error("update body is {got} bytes; the limit is {limit}")]
    TooLarge {
        /// Bytes received.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The body does not decode as an update.
    #[error("update body is not a valid postcard update: {reason}")]
    Malformed {
        /// What the decoder said.
        reason: String,
    },
    /// The checksum header is missing or does not match the body.
    #[error("update checksum: {reason}")]
    Checksum {
        /// Missing, malformed or mismatched.
        reason: String,
    },
    /// The update decodes but does not fit the model or the round.
    #[error("update field `{field}`: {reason}")]
    Invalid {
        /// Which field.
        field: String,
        /// What was expected.
        reason: String,
    },
}

/// JSON body of every error reply: a machine-readable code and a sentence for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    /// Short code, e.g. `unauthorized`, `too_large`, `malformed`, `over_norm_bound`.
    pub code: String,
    /// What was wrong and what was expected.
    pub error: String,
}

/// `POST /v1/devices`: a device asks to join the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// Free-form label for operators (not used for any decision).
    pub label: String,
    /// The enrolment token the operator issued (`hush-host devices enrol`); without a valid
    /// one the host refuses the registration.
    #[serde(default)]
    pub enrolment_token: String,
}

/// The host's answer to a registration: the device's id and its secret token. The host
/// stores only a hash of the token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// Device id.
    pub device_id: u64,
    /// Bearer token for every later call.
    pub token: String,
    /// When the token expires (Unix ms; `None` from hosts that do not say).
    #[serde(default)]
    pub expires_at_ms: Option<u64>,
}

/// `POST /v1/checkin`: the device says it is online and eligible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckInRequest {
    /// Model version the device holds, if any.
    pub model_version: Option<u64>,
    /// Examples available locally (informational; never used to weight updates).
    pub examples: u32,
}

/// What the host tells a device at check-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Assignment {
    /// Not picked (or no round open): check in again after this many milliseconds.
    Wait {
        /// Suggested delay.
        retry_after_ms: u64,
    },
    /// Picked for a round: train and upload before the deadline.
    Train(TrainTask),
    /// Training is over (budget spent or rounds done): stop polling.
    Done {
        /// Why.
        reason: String,
        /// The last model version the host published: the federated model, for the device
        /// to keep and listen with (`None` from a host that does not say).
        #[serde(default)]
        model_version: Option<u64>,
    },
}

/// A training task for one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainTask {
    /// Round id.
    pub round: u64,
    /// Model version to start from (download it if not held).
    pub model_version: u64,
    /// Milliseconds left until the round's deadline.
    pub deadline_ms: u64,
    /// Local training recipe.
    pub local: LocalTraining,
    /// The user-level bound on the whole update.
    pub clip: UpdateClip,
}

/// How a device trains locally in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalTraining {
    /// Passes over the local data.
    pub epochs: u32,
    /// Examples per local step.
    pub batch_size: u32,
    /// Local SGD learning rate.
    pub lr: f32,
    /// Per-example gradient clip bound in local steps (`None`: no per-example clipping).
    pub example_clip: Option<f32>,
    /// Seed for the local shuffle (not a privacy mechanism).
    pub seed: u64,
}

/// Clipping of the whole model update (the user-level sensitivity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateClip {
    /// Per-layer bounds, in the order of the trainable tensors; a single entry means one
    /// flat bound over all layers.
    pub bounds: Vec<f32>,
    /// Names of the trainable tensors, in order (what `bounds` refers to when per-layer).
    pub layers: Vec<String>,
    /// Scale every layer to exactly its bound instead of only shrinking (layer-wise
    /// normalization).
    pub normalize_layers: bool,
    /// Std of Gaussian noise the device adds locally (0: none; central noise is the host's).
    pub local_noise_std: f32,
}

/// The host's answer to an upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UploadReceipt {
    /// Round id.
    pub round: u64,
    /// `true` when this upload was already counted (a retry): nothing changed.
    pub duplicate: bool,
}

/// `GET /v1/status`: where training and the privacy budget stand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Latest published model version.
    pub model_version: u64,
    /// Round in progress, if any.
    pub open_round: Option<u64>,
    /// Rounds completed (released).
    pub rounds_done: u64,
    /// Rounds planned.
    pub rounds_planned: u64,
    /// Registered devices.
    pub devices: u64,
    /// Reports accepted in the open round so far.
    pub reports_in_round: u64,
    /// Reports rejected over the whole run.
    pub reports_rejected: u64,
    /// ε spent so far by RDP (for the stated δ, unit and adjacency).
    pub epsilon_rdp: Option<f64>,
    /// ε spent so far by PLD.
    pub epsilon_pld: Option<f64>,
    /// δ.
    pub delta: f64,
    /// Privacy unit (`user` for federated rounds).
    pub unit: String,
    /// Adjacency (`add/remove` or `replace-one`).
    pub adjacency: String,
    /// ε budget.
    pub epsilon_budget: f64,
    /// `true` when training has finished.
    pub finished: bool,
}
