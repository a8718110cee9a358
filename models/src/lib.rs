//! # hush-models
//!
//! The learning core that the device and the host share: architectures, per-example
//! gradients, clipping, noise, optimizers, checkpoints and ONNX/NNEF export.
//!
//! Privacy-critical math (clip, then noise; Poisson sampling; CSPRNG noise) lives here
//! once, so a device and the host can never disagree about it.
