//! The round engine's durable state ([`hush_fl::store::Store`]) in a database, with the
//! privacy ledger in the same one so that a release is one transaction:
//!
//! - [`SqliteStore`] ([`sqlite`]): one file in the data directory, the default; needs
//!   nothing installed.
//! - [`PostgresStore`] ([`postgres_store`]): a PostgreSQL database that several host
//!   replicas can share (`hush-host serve --store postgres://…`).
//!
//! [`open`] picks one from the configuration. [`postgres_cluster`] starts a throwaway
//! PostgreSQL server for tests and trials.

use std::path::Path;

use hush_fl::store::{Store, StoreResult};

pub mod postgres_cluster;
pub mod postgres_store;
pub mod sqlite;

pub use postgres_store::PostgresStore;
pub use sqlite::{SqliteStore, DB_FILE};

/// Opens the store `url` names (`postgres://…` or `postgresql://…`), or, without one, the
/// SQLite store in `data_dir` ([`DB_FILE`]).
pub fn open(data_dir: &Path, url: Option<&str>) -> StoreResult<Box<dyn Store>> {
    match url {
        Some(url) => Ok(Box::new(PostgresStore::connect(url)?)),
        None => Ok(Box::new(SqliteStore::open(&data_dir.join(DB_FILE))?)),
    }
}

/// [`open`] for the round engine of `hush-host serve`: on PostgreSQL the host is one of
/// the replicas sharing the database's rounds ([`PostgresStore::connect_as_replica`]).
pub fn open_to_run_rounds(data_dir: &Path, url: Option<&str>) -> StoreResult<Box<dyn Store>> {
    match url {
        Some(url) => Ok(Box::new(PostgresStore::connect_as_replica(url)?)),
        None => open(data_dir, None),
    }
}

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod postgres_tests;
