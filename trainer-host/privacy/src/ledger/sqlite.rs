//! SQLite implementation of [`LedgerStore`] (rusqlite, bundled SQLite).
//!
//! One table, `releases`; triggers make it append-only (UPDATE and DELETE abort). Every append
//! runs in its own transaction with `synchronous = FULL`, committed before `append` returns.
//! Enum columns hold their snake_case names. A release's [`AdditionalCost`] is text in
//! `additional_cost`, `delta=<δ spent>;rdp=<order>:<rdp>,<order>:<rdp>,…`, every number in
//! Rust's shortest round-trip form so that it reads back bit for bit (NULL when there is no
//! such cost; a ledger made before that column existed gets it added, NULL in every old row,
//! on open). A row that does not decode is reported as
//! [`LedgerError::Corrupt`], never a panic.
//!
//! [`create_schema`], [`append_on`] and [`read_records`] work on any connection, so that
//! another store keeping the ledger in its own database (the federated round store) can
//! append a release inside its own transaction.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection};

use super::{LedgerError, LedgerStore, Release, ReleaseRecord};
use crate::accountant::{AdditionalCost, SubsampledGaussian};

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
    Option<String>,
);

/// `delta=<δ>;rdp=<order>:<rdp>,…` (each number exact: Rust prints the shortest text that
/// parses back to the same `f64`).
fn encode_additional(cost: &AdditionalCost) -> String {
    let rdp: Vec<String> = cost
        .rdp
        .iter()
        .map(|(o, r)| format!("{o:?}:{r:?}"))
        .collect();
    format!("delta={:?};rdp={}", cost.delta, rdp.join(","))
}

fn decode_additional(text: &str) -> Result<AdditionalCost, String> {
    let number = |s: &str| {
        s.parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number"))
    };
    let (delta, rdp) = text
        .strip_prefix("delta=")
        .and_then(|rest| rest.split_once(";rdp="))
        .ok_or("expected delta=<number>;rdp=<order>:<rdp>,...")?;
    let rdp = rdp
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (o, r) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?} is not <order>:<rdp>"))?;
            Ok((number(o)?, number(r)?))
        })
        .collect::<Result<Vec<_>, String>>()?;
    AdditionalCost {
        rdp,
        delta: number(delta)?,
    }
    .validated()
    .map_err(|e| e.to_string())
}

fn decode(row: RawRow) -> Result<ReleaseRecord, LedgerError> {
    let (id, at, mech, sampling, rate, sigma, steps, unit, adjacency, pop, delta, er, ep, rel, add) =
        row;
    let additional = match add {
        None => AdditionalCost::none(),
        Some(text) => decode_additional(&text).map_err(|e| LedgerError::Corrupt {
            id,
            column: "additional_cost",
            value: format!("{text} ({e})"),
        })?,
    };
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
            additional,
        },
        epsilon_rdp: er,
        epsilon_pld: ep,
    })
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
    let additional =
        (!release.additional.is_none()).then(|| encode_additional(&release.additional));
    conn.execute(
        "INSERT INTO releases (recorded_at_ms, mechanism, sampling, sampling_rate,
             noise_multiplier, steps, unit, adjacency, population, delta, epsilon_rdp,
             epsilon_pld, released, additional_cost)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
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
            additional,
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
        .prepare(
            "SELECT id, recorded_at_ms, mechanism, sampling, sampling_rate, noise_multiplier,
                    steps, unit, adjacency, population, delta, epsilon_rdp, epsilon_pld,
                    released, additional_cost
             FROM releases ORDER BY id",
        )
        .map_err(store_err(location))?;
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
                r.get(14)?,
            ))
        })
        .map_err(store_err(location))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(decode(row.map_err(store_err(location))?)?);
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
