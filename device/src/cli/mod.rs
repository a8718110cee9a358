//! One module per subcommand: parse flags into a typed config, call the library, print.

pub mod classify;
pub mod devices;
pub mod features;
pub mod info;
#[cfg(feature = "client")]
pub mod join;
pub mod listen;
pub mod record;
#[cfg(feature = "train")]
pub mod rehearse;
pub mod transcribe;
