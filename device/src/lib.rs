//! # hush-device
//!
//! Everything hush runs on the device: audio in (files and, behind the `mic` feature,
//! the microphone), the feature front-end, inference, local private training, the wire
//! protocol and the client. The host links this library (without `mic`) so that features,
//! dataset reading and the protocol are one code on both sides.

pub mod audio;
pub mod client;
pub mod dataset;
pub mod features;
pub mod infer;
pub mod protocol;
pub mod training;
