//! # hush-host
//!
//! hush on the workstation: the round server, aggregation with central noise, privacy
//! accounting and the ledger, central DP training, PATE, audits, and corpus tools.

pub mod accountant;
pub mod audit;
pub mod corpus;
pub mod demo;
pub mod experiment;
pub mod fl;
pub mod ledger;
pub mod pate;
pub mod plot;
pub mod simulate;
pub mod train;
