//! # hush-lab
//!
//! Runs assembled from the other hush-host crates: the quick demo ([`demo`]), the simulated
//! fleet ([`simulate`]) and the experiments behind `docs/results/` ([`experiment`]).

pub mod demo;
pub mod experiment;
pub mod simulate;
