//! One module per subcommand group: parse flags into a typed config, call the library,
//! print or write results.

pub mod audit;
pub mod corpus;
pub mod demo;
pub mod devices;
pub mod experiment;
pub mod export;
pub mod pate;
pub mod pretrain;
pub mod privacy;
pub mod serve;
pub mod simulate;
pub mod train;
