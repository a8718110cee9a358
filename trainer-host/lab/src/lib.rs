//! # hush-lab
//!
//! Runs assembled from the other hush-host crates: the quick demo ([`demo`]), the simulated
//! fleet ([`simulate`]) and the experiments behind `docs/results/` ([`experiment`]), with
//! the training set-ups they share ([`recipes`]).

pub mod demo;
pub mod experiment;
pub mod recipes;
pub mod simulate;
