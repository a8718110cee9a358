//! PATE (Papernot et al. 2017, 2018): teachers trained on disjoint speakers of the private
//! data vote on public, unlabelled examples; a noisy aggregate of their votes labels the
//! public data, and a student learns from those labels only. The privacy cost is the
//! accountant's PATE analysis of the votes ([`crate::accountant::pate`]).
//!
//! One concept per module: [`partition`] (teachers' speakers), [`aggregate`] (noisy
//! votes and their cost).

pub mod aggregate;
pub mod partition;

pub use aggregate::{vote_histogram, Aggregator};
pub use partition::partition_by_speaker;

/// What can go wrong in a PATE run.
#[derive(Debug, thiserror::Error)]
pub enum PateError {
    /// A bad option, named.
    #[error("{option}: {reason}")]
    Option {
        /// The option (CLI spelling).
        option: &'static str,
        /// What was expected.
        reason: String,
    },
}
