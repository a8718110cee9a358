//! # hush-lab
//!
//! Runs assembled from the other hush-host crates: the quick demo ([`demo`]), the simulated
//! fleet ([`simulate`], in process: [`fleet`], its virtual users: [`population`]), the
//! empirical privacy audits' runs ([`privacy_audit`]) and the experiments behind
//! `docs/results/` ([`experiment`]), with the training set-ups they share ([`recipes`]).

pub mod demo;
pub mod experiment;
pub mod fleet;
pub mod population;
pub mod privacy_audit;
pub mod recipes;
pub mod simulate;
