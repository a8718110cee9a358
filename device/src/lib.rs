//! # hush-device
//!
//! Everything hush runs on the device: audio in (files and, behind the `mic` feature,
//! the microphone), the feature front-end, inference, local private training, the wire
//! protocol and the client. The host links this library (without `mic`) so that features,
//! dataset reading and the protocol are one code on both sides.
//!
//! Features: `train` (local training, burn) and `client` (federated rounds over HTTPS) are
//! on by default; without them the crate is the inference-only build. `mic` adds capture.

pub mod audio;
#[cfg(feature = "client")]
pub mod client;
pub mod dataset;
pub mod features;
pub mod infer;
pub mod protocol;
#[cfg(feature = "train")]
pub mod training;
