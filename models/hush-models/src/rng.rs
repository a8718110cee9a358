//! burn's backend random state (initial weights, dropout masks) is one per process, not one
//! per thread or per device handle: two threads that each seed it and then draw interleave
//! their draws, and neither gets its own seed's stream. Code that must repeat bit for bit
//! while other threads train — a simulation's initial model, the engine's staging of a
//! release — holds
//! [`hold_backend_rng`] from seeding to its last draw, and every model build that draws
//! from the state holds it too ([`crate::package::load_package`] builds the model before
//! loading its weights), so nothing interleaves. burn draws a parameter's initial values
//! when the parameter is first used, not when the model is built: hold the guard until
//! the model's weights have been read, loaded or written
//! ([`crate::arch::ArchConfig::init_seeded`] does all of this). Local federated training draws
//! its dropout masks from each device's own stream instead ([`crate::cohort`]).

use std::sync::{Mutex, MutexGuard, PoisonError};

static BACKEND_RNG: Mutex<()> = Mutex::new(());

/// Exclusive use of burn's process-wide random state until the guard is dropped.
pub fn hold_backend_rng() -> MutexGuard<'static, ()> {
    BACKEND_RNG.lock().unwrap_or_else(PoisonError::into_inner)
}
