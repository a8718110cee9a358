//! # hush-models
//!
//! The learning core that the device and the host share: architectures, per-example
//! gradients, clipping, noise, optimizers, checkpoints and ONNX/NNEF export.
//!
//! Privacy-critical math (clip, then noise; Poisson sampling; CSPRNG noise) lives here
//! once, so a device and the host can never disagree about it.
//!
//! - [`arch`]: keyword-spotting architectures (DS-CNN-S, BC-ResNet, the leakage CNN);
//! - [`asr`]: CTC speech recognisers (`ctc-gru`), greedy and beam-search decoding, WER;
//! - [`compute`]: where training runs (`--device cpu|gpu`, with a CPU fallback);
//! - [`cohort`]: local training of a federated round, a whole cohort batched in one model;
//! - [`checkpoint`]: `weights.safetensors`, tensors named per layer;
//! - [`package`]: the model package (`model.json` + weights + `model.onnx`);
//! - [`pretrained`]: the pretrained-encoder directory (BEST-RQ pretraining → CTC fine-tuning);
//! - [`export`]: ONNX (the graph builder is [`arch::onnx`]), NNEF through tract,
//!   `export_package`;
//! - [`optim`]: server optimizers for federated rounds (FedAvg, FedAdam, LAMB);
//! - [`step`]: the loss and gradient step shared by every trainer.

pub mod arch;
pub mod asr;
pub mod checkpoint;
pub mod cohort;
pub mod compute;
pub mod dp;
mod error;
pub mod export;
pub mod optim;
pub mod package;
pub mod pretrained;
pub mod rng;
pub mod step;

pub use error::ModelError;
