//! SQLite implementation of [`LedgerStore`] (rusqlite, bundled SQLite).
//!
//! One table, `releases`; triggers make it append-only (UPDATE and DELETE abort). Every append
//! runs in its own transaction with `synchronous = FULL`, committed before `append` returns.
//! Enum columns hold their snake_case names; a row that does not decode is reported as
//! [`LedgerError::Corrupt`], never a panic.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection};

use super::{LedgerError, LedgerStore, Release, ReleaseRecord};
use crate::accountant::SubsampledGaussian;

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
    released         TEXT    NOT NULL
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
        source,
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
        conn.execute_batch(SCHEMA).map_err(store_err(&location))?;
        Ok(Self { conn, location })
    }
}

fn enum_text<T: serde::Serialize + std::fmt::Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{v:?}"),
    }
}

fn parse_enum<T: serde::de::DeserializeOwned>(
    id: i64,
    column: &'static str,
    s: String,
) -> Result<T, LedgerError> {
    serde_json::from_value(serde_json::Value::String(s.clone())).map_err(|_| LedgerError::Corrupt {
        id,
        column,
        value: s,
    })
}

/// One raw row, before decoding.
type RawRow = (
    i64,
    i64,
    String,
    String,
    f64,
    f64,
    i64,
    String,
    String,
    Option<i64>,
    f64,
    Option<f64>,
    Option<f64>,
    String,
);

fn decode(row: RawRow) -> Result<ReleaseRecord, LedgerError> {
    let (id, at, mech, sampling, rate, sigma, steps, unit, adjacency, pop, delta, er, ep, rel) =
        row;
    let steps = u64::try_from(steps).map_err(|_| LedgerError::Corrupt {
        id,
        column: "steps",
        value: steps.to_string(),
    })?;
    let population = match pop {
        None => None,
        Some(p) => Some(u64::try_from(p).map_err(|_| LedgerError::Corrupt {
            id,
            column: "population",
            value: p.to_string(),
        })?),
    };
    let event = SubsampledGaussian {
        sampling: parse_enum(id, "sampling", sampling)?,
        sampling_rate: rate,
        noise_multiplier: sigma,
        steps,
    }
    .validated()
    .map_err(|e| LedgerError::Corrupt {
        id,
        column: "sampling_rate/noise_multiplier/steps",
        value: e.to_string(),
    })?;
    Ok(ReleaseRecord {
        id,
        recorded_at_ms: at,
        release: Release {
            mechanism: parse_enum(id, "mechanism", mech)?,
            event,
            unit: parse_enum(id, "unit", unit)?,
            adjacency: parse_enum(id, "adjacency", adjacency)?,
            population,
            delta,
            released: rel,
        },
        epsilon_rdp: er,
        epsilon_pld: ep,
    })
}

impl LedgerStore for SqliteLedgerStore {
    fn append(
        &mut self,
        release: &Release,
        epsilon_rdp: Option<f64>,
        epsilon_pld: Option<f64>,
    ) -> Result<ReleaseRecord, LedgerError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let steps = i64::try_from(release.event.steps).map_err(|_| {
            LedgerError::Accountant(crate::accountant::validate::invalid(
                "steps",
                release.event.steps,
                "below 2^63",
            ))
        })?;
        let population = match release.population {
            None => None,
            Some(p) => Some(i64::try_from(p).map_err(|_| {
                LedgerError::Accountant(crate::accountant::validate::invalid(
                    "population",
                    p,
                    "below 2^63",
                ))
            })?),
        };
        let loc = self.location.clone();
        let tx = self.conn.transaction().map_err(store_err(&loc))?;
        tx.execute(
            "INSERT INTO releases (recorded_at_ms, mechanism, sampling, sampling_rate,
                 noise_multiplier, steps, unit, adjacency, population, delta, epsilon_rdp,
                 epsilon_pld, released)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                now_ms,
                enum_text(&release.mechanism),
                enum_text(&release.event.sampling),
                release.event.sampling_rate,
                release.event.noise_multiplier,
                steps,
                enum_text(&release.unit),
                enum_text(&release.adjacency),
                population,
                release.delta,
                epsilon_rdp,
                epsilon_pld,
                release.released,
            ],
        )
        .map_err(store_err(&loc))?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(store_err(&loc))?;
        Ok(ReleaseRecord {
            id,
            recorded_at_ms: now_ms,
            release: release.clone(),
            epsilon_rdp,
            epsilon_pld,
        })
    }

    fn records(&self) -> Result<Vec<ReleaseRecord>, LedgerError> {
        let loc = &self.location;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, recorded_at_ms, mechanism, sampling, sampling_rate, noise_multiplier,
                        steps, unit, adjacency, population, delta, epsilon_rdp, epsilon_pld,
                        released
                 FROM releases ORDER BY id",
            )
            .map_err(store_err(loc))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                    r.get(11)?,
                    r.get(12)?,
                    r.get(13)?,
                ))
            })
            .map_err(store_err(loc))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(decode(row.map_err(store_err(loc))?)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::{Adjacency, PrivacyUnit};
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
}
