//! SQLite implementation of [`LedgerStore`] (rusqlite, bundled SQLite).
//!
//! One table, `releases`; triggers make it append-only (UPDATE and DELETE abort). Every append
//! runs in its own transaction with `synchronous = FULL`, committed before `append` returns.
//! Rows are [`super::row::LedgerRow`]s (enum names, the additional cost as exact text); a
//! ledger made before the `additional_cost` column existed gets it added, NULL in every old
//! row, on open.
//!
//! [`create_schema`], [`append_on`] and [`read_records`] work on any connection, so that
//! another store keeping the ledger in its own database (the federated round store) can
//! append a release inside its own transaction.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection};

use super::row::{LedgerRow, COLUMNS};
use super::{LedgerError, LedgerStore, Release, ReleaseRecord};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS releases (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at_ms   INTEGER NOT NULL,
    mechanism        TEXT    NOT NULL,
    sampling         TEXT    NOT NULL,
    sampling_rate    REAL    NOT NULL,
    noise_multiplier REAL    NOT NULL,
    steps            INTEGER NOT NULL,
    unit             TEXT    NOT NULL,
    adjacency        TEXT    NOT NULL,
    population       INTEGER,
    delta            REAL    NOT NULL,
    epsilon_rdp      REAL,
    epsilon_pld      REAL,
    released         TEXT    NOT NULL,
    additional_cost  TEXT
);
CREATE TRIGGER IF NOT EXISTS releases_no_update BEFORE UPDATE ON releases
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS releases_no_delete BEFORE DELETE ON releases
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
";

/// A ledger store in one SQLite file.
pub struct SqliteLedgerStore {
    conn: Connection,
    location: String,
}

fn store_err(location: &str) -> impl Fn(rusqlite::Error) -> LedgerError + '_ {
    move |source| LedgerError::Store {
        location: location.to_string(),
        source: Box::new(source),
    }
}

impl SqliteLedgerStore {
    /// Opens (creating if needed) the ledger at `path`.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let location = path.display().to_string();
        let conn = Connection::open(path).map_err(store_err(&location))?;
        Self::init(conn, location)
    }

    /// An in-memory ledger (tests, dry runs).
    pub fn open_in_memory() -> Result<Self, LedgerError> {
        let location = ":memory:".to_string();
        let conn = Connection::open_in_memory().map_err(store_err(&location))?;
        Self::init(conn, location)
    }

    fn init(conn: Connection, location: String) -> Result<Self, LedgerError> {
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(store_err(&location))?;
        create_schema(&conn, &location)?;
        Ok(Self { conn, location })
    }
}

/// Creates the `releases` table and its append-only triggers on `conn` if missing, and
/// adds the `additional_cost` column to a ledger made before it existed.
pub fn create_schema(conn: &Connection, location: &str) -> Result<(), LedgerError> {
    conn.execute_batch(SCHEMA).map_err(store_err(location))?;
    // Ledgers made before `additional_cost` existed: add it (old rows read as NULL).
    let has_additional: bool = conn
        .query_row(
            "SELECT COUNT(*) FROM pragma_table_info('releases') \
             WHERE name = 'additional_cost'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(store_err(location))?
        > 0;
    if !has_additional {
        conn.execute_batch("ALTER TABLE releases ADD COLUMN additional_cost TEXT")
            .map_err(store_err(location))?;
    }
    Ok(())
}

/// Appends `release` to the ledger on `conn` (a plain connection or an open
/// transaction: the row is durable when that transaction commits) and returns the record.
pub fn append_on(
    conn: &Connection,
    location: &str,
    release: &Release,
    epsilon_rdp: Option<f64>,
    epsilon_pld: Option<f64>,
    now_ms: i64,
) -> Result<ReleaseRecord, LedgerError> {
    let row = LedgerRow::encode(release, epsilon_rdp, epsilon_pld, now_ms)?;
    conn.execute(
        &format!(
            "INSERT INTO releases ({COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        ),
        params![
            row.recorded_at_ms,
            row.mechanism,
            row.sampling,
            row.sampling_rate,
            row.noise_multiplier,
            row.steps,
            row.unit,
            row.adjacency,
            row.population,
            row.delta,
            row.epsilon_rdp,
            row.epsilon_pld,
            row.released,
            row.additional_cost,
        ],
    )
    .map_err(store_err(location))?;
    Ok(ReleaseRecord {
        id: conn.last_insert_rowid(),
        recorded_at_ms: now_ms,
        release: release.clone(),
        epsilon_rdp,
        epsilon_pld,
    })
}

/// Every record of the ledger on `conn`, in the order they were appended.
pub fn read_records(conn: &Connection, location: &str) -> Result<Vec<ReleaseRecord>, LedgerError> {
    let mut stmt = conn
        .prepare(&format!("SELECT id, {COLUMNS} FROM releases ORDER BY id"))
        .map_err(store_err(location))?;
    let rows = stmt
        .query_map([], |r| {
            Ok(LedgerRow {
                id: r.get(0)?,
                recorded_at_ms: r.get(1)?,
                mechanism: r.get(2)?,
                sampling: r.get(3)?,
                sampling_rate: r.get(4)?,
                noise_multiplier: r.get(5)?,
                steps: r.get(6)?,
                unit: r.get(7)?,
                adjacency: r.get(8)?,
                population: r.get(9)?,
                delta: r.get(10)?,
                epsilon_rdp: r.get(11)?,
                epsilon_pld: r.get(12)?,
                released: r.get(13)?,
                additional_cost: r.get(14)?,
            })
        })
        .map_err(store_err(location))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(store_err(location))?.decode()?);
    }
    Ok(out)
}

/// Appends `release` to the ledger on `conn` in a transaction of its own, stamped with the
/// current time, committed before returning ([`LedgerStore::append`] of every SQLite store
/// that keeps this table).
pub fn append_committed(
    conn: &mut Connection,
    location: &str,
    release: &Release,
    epsilon_rdp: Option<f64>,
    epsilon_pld: Option<f64>,
) -> Result<ReleaseRecord, LedgerError> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let tx = conn.transaction().map_err(store_err(location))?;
    let record = append_on(&tx, location, release, epsilon_rdp, epsilon_pld, now_ms)?;
    tx.commit().map_err(store_err(location))?;
    Ok(record)
}

impl LedgerStore for SqliteLedgerStore {
    fn append(
        &mut self,
        release: &Release,
        epsilon_rdp: Option<f64>,
        epsilon_pld: Option<f64>,
    ) -> Result<ReleaseRecord, LedgerError> {
        append_committed(
            &mut self.conn,
            &self.location,
            release,
            epsilon_rdp,
            epsilon_pld,
        )
    }

    fn records(&self) -> Result<Vec<ReleaseRecord>, LedgerError> {
        read_records(&self.conn, &self.location)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::{AdditionalCost, Adjacency, PrivacyUnit, SubsampledGaussian};
    use crate::ledger::Mechanism;

    #[test]
    fn rows_cannot_be_updated_or_deleted() -> Result<(), Box<dyn std::error::Error>> {
        let mut store = SqliteLedgerStore::open_in_memory()?;
        let release = Release {
            mechanism: Mechanism::DpSgd,
            event: SubsampledGaussian::poisson(0.01, 1.0, 10)?,
            unit: PrivacyUnit::Example,
            adjacency: Adjacency::AddRemove,
            population: None,
            delta: 1e-5,
            released: "x".into(),
            additional: AdditionalCost::none(),
        };
        store.append(&release, Some(1.0), None)?;
        assert!(store
            .conn
            .execute("UPDATE releases SET delta = 0.5", [])
            .is_err());
        assert!(store.conn.execute("DELETE FROM releases", []).is_err());
        assert_eq!(store.records()?.len(), 1);
        Ok(())
    }

    fn release_with(additional: AdditionalCost) -> Result<Release, Box<dyn std::error::Error>> {
        Ok(Release {
            mechanism: Mechanism::Pate,
            event: SubsampledGaussian::poisson(1.0, 30.0, 100)?,
            unit: PrivacyUnit::User,
            adjacency: Adjacency::AddRemove,
            population: Some(40),
            delta: 1e-5,
            released: "labels".into(),
            additional,
        })
    }

    #[test]
    fn additional_costs_survive_a_reopen_and_old_ledgers_gain_the_column(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("old.sqlite");
        // A ledger as hush wrote it before `additional_cost` existed, with one row.
        let old = Connection::open(&path)?;
        old.execute_batch(&SCHEMA.replace(",\n    additional_cost  TEXT", ""))?;
        old.execute(
            "INSERT INTO releases (recorded_at_ms, mechanism, sampling, sampling_rate,
                 noise_multiplier, steps, unit, adjacency, population, delta, epsilon_rdp,
                 epsilon_pld, released)
             VALUES (1, 'dp_sgd', 'poisson', 0.01, 1.0, 10, 'example', 'add_remove', NULL,
                     1e-5, 1.0, NULL, 'old')",
            [],
        )?;
        drop(old);
        // Numbers that a decimal round trip must keep bit for bit.
        let cost = AdditionalCost {
            rdp: vec![(1.1, 10.811072727868297), (3.5, 0.1 + 0.2)],
            delta: 3.140141924652721e-10,
        };
        let mut store = SqliteLedgerStore::open(&path)?;
        store.append(&release_with(cost.clone())?, Some(3.0), None)?;
        drop(store);
        let records = SqliteLedgerStore::open(&path)?.records()?;
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].release.released, "old");
        assert!(records[0].release.additional.is_none());
        assert_eq!(records[1].release.additional, cost);
        Ok(())
    }

    #[test]
    fn a_malformed_additional_cost_is_reported_as_corrupt() -> Result<(), Box<dyn std::error::Error>>
    {
        let mut store = SqliteLedgerStore::open_in_memory()?;
        store.append(&release_with(AdditionalCost::none())?, None, None)?;
        for bad in [
            "{not this format}",
            "delta=2;rdp=",
            "delta=0;rdp=0.5:1",
            "delta=0;rdp=2:x",
        ] {
            store.conn.execute(
                "INSERT INTO releases (recorded_at_ms, mechanism, sampling, sampling_rate,
                     noise_multiplier, steps, unit, adjacency, population, delta, epsilon_rdp,
                     epsilon_pld, released, additional_cost)
                 SELECT recorded_at_ms, mechanism, sampling, sampling_rate, noise_multiplier,
                     steps, unit, adjacency, population, delta, epsilon_rdp, epsilon_pld,
                     released, ?1 FROM releases WHERE id = 1",
                [bad],
            )?;
            match store.records() {
                Err(LedgerError::Corrupt { column, .. }) => assert_eq!(column, "additional_cost"),
                other => panic!("{bad}: {other:?}"),
            }
            store
                .conn
                .execute_batch("DROP TRIGGER releases_no_delete")?;
            store
                .conn
                .execute("DELETE FROM releases WHERE id > 1", [])?;
            store.conn.execute_batch(SCHEMA)?;
        }
        Ok(())
    }
}
