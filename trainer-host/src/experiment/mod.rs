//! Experiments: runs of the library's training code over a grid of settings, each writing
//! `results.json`, `results.md` and a PNG plot to one folder (DESIGN.md, "Formats").
//!
//! An experiment only assembles: corpora come from [`crate::corpus`], training from
//! [`crate::train`], ε from [`crate::accountant`] (through the DP trainer's privacy
//! report), plots from [`crate::plot`].
//!
//! - [`dp_sgd`]: KWS accuracy against ε for flat and per-layer-dim clipping, with and
//!   without a public warm start and gradient-based layer freezing
//!   (`hush-host experiment dp-sgd`).
//! - [`kws_generalization`]: KWS accuracy on voices never heard — leave one engine or
//!   donor family out — beside the speaker-disjoint test
//!   (`hush-host experiment kws-generalization`).

pub mod dp_sgd;
pub mod kws_generalization;
