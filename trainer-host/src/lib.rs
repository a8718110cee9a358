//! # hush-host
//!
//! hush on the workstation: the round server, aggregation with central noise, privacy
//! accounting and the ledger, central DP training, PATE, audits, and corpus tools.
//!
//! This crate is the `hush-host` binary and a facade: the code lives in the crates under
//! `trainer-host/` (one per concern, layered so dependencies run one way), re-exported here
//! under the module names the CLI, the integration tests and the benches use.

pub use hush_audit as audit;
pub use hush_corpus as corpus;
pub use hush_fl as fl;
pub use hush_lab::demo;
pub use hush_lab::experiment;
pub use hush_lab::fleet;
pub use hush_lab::population;
pub use hush_lab::privacy_audit;
pub use hush_lab::recipes;
pub use hush_lab::simulate;
pub use hush_pate as pate;
pub use hush_plot as plot;
pub use hush_privacy::accountant;
pub use hush_privacy::ledger;
pub use hush_server as server;
pub use hush_store as store;
pub use hush_train as train;
