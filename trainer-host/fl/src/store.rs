//! Durable state of the round server behind [`FlStore`], with [`SqliteFlStore`] (one
//! SQLite file, `<data_dir>/hush.sqlite`, shared with the privacy ledger's `releases`
//! table). A PostgreSQL store can implement the same trait for several host replicas.
//!
//! # Schema
//!
//! ```sql
//! devices(id INTEGER PRIMARY KEY AUTOINCREMENT, token_hash TEXT UNIQUE NOT NULL,
//!         label TEXT NOT NULL, registered_at_ms INTEGER NOT NULL)
//! rounds(id INTEGER PRIMARY KEY,              -- 1, 2, … (never reused)
//!        model_version INTEGER NOT NULL,      -- version the cohort trains from
//!        state TEXT NOT NULL,                 -- open | released | abandoned | release_failed
//!        opened_at_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL,
//!        population INTEGER NOT NULL,         -- devices registered when it opened
//!        max_device_id INTEGER NOT NULL,      -- devices with id <= this are eligible
//!        expected_cohort REAL NOT NULL,       -- q × population: the divisor
//!        closed_at_ms INTEGER, reason TEXT,
//!        released_version INTEGER,            -- model version published from it
//!        selected INTEGER NOT NULL DEFAULT 0, -- realized cohort
//!        accepted INTEGER NOT NULL DEFAULT 0, rejected INTEGER NOT NULL DEFAULT 0,
//!        epsilon_rdp REAL, epsilon_pld REAL)  -- ε spent after this round (ledger totals)
//! cohort(round INTEGER NOT NULL, device INTEGER NOT NULL, selected INTEGER NOT NULL,
//!        drawn_at_ms INTEGER NOT NULL, PRIMARY KEY (round, device))  -- one draw per round
//! reports(id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL,
//!         device INTEGER NOT NULL,
//!         idempotency_key TEXT UNIQUE,        -- set on accepted reports only
//!         status TEXT NOT NULL,               -- accepted | rejected
//!         reason TEXT, bytes INTEGER NOT NULL, received_at_ms INTEGER NOT NULL)
//! model_versions(version INTEGER PRIMARY KEY, round INTEGER,  -- NULL for v0
//!                path TEXT NOT NULL, published_at_ms INTEGER NOT NULL)
//! ```
//!
//! Every write is its own committed transaction (`synchronous = FULL`). Tokens are stored
//! only as SHA-256 hashes.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use super::{now_ms, FlError};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS devices (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash       TEXT    NOT NULL UNIQUE,
    label            TEXT    NOT NULL,
    registered_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    id               INTEGER PRIMARY KEY,
    model_version    INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    opened_at_ms     INTEGER NOT NULL,
    deadline_ms      INTEGER NOT NULL,
    population       INTEGER NOT NULL,
    max_device_id    INTEGER NOT NULL,
    expected_cohort  REAL    NOT NULL,
    closed_at_ms     INTEGER,
    reason           TEXT,
    released_version INTEGER,
    selected         INTEGER NOT NULL DEFAULT 0,
    accepted         INTEGER NOT NULL DEFAULT 0,
    rejected         INTEGER NOT NULL DEFAULT 0,
    epsilon_rdp      REAL,
    epsilon_pld      REAL
);
CREATE TABLE IF NOT EXISTS cohort (
    round       INTEGER NOT NULL,
    device      INTEGER NOT NULL,
    selected    INTEGER NOT NULL,
    drawn_at_ms INTEGER NOT NULL,
    PRIMARY KEY (round, device)
);
CREATE TABLE IF NOT EXISTS reports (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    round           INTEGER NOT NULL,
    device          INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE,
    status          TEXT    NOT NULL,
    reason          TEXT,
    bytes           INTEGER NOT NULL,
    received_at_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_round ON reports (round, device);
CREATE TABLE IF NOT EXISTS model_versions (
    version         INTEGER PRIMARY KEY,
    round           INTEGER,
    path            TEXT    NOT NULL,
    published_at_ms INTEGER NOT NULL
);
";

/// State of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundState {
    /// Taking check-ins and uploads.
    Open,
    /// Closed, noised, recorded in the ledger and published.
    Released,
    /// Closed without a release (too few reports, host restart, budget): no ε spent.
    Abandoned,
    /// Recorded in the ledger (ε spent) but the model could not be published.
    ReleaseFailed,
}

impl RoundState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Released => "released",
            Self::Abandoned => "abandoned",
            Self::ReleaseFailed => "release_failed",
        }
    }

    fn parse(s: &str) -> Result<Self, FlError> {
        Ok(match s {
            "open" => Self::Open,
            "released" => Self::Released,
            "abandoned" => Self::Abandoned,
            "release_failed" => Self::ReleaseFailed,
            other => return Err(FlError::Corrupt(format!("round state {other:?}"))),
        })
    }
}

/// One row of `rounds`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoundRow {
    /// Round id.
    pub id: u64,
    /// Model version the cohort trains from.
    pub model_version: u64,
    /// State.
    pub state: RoundState,
    /// Opening time (Unix ms).
    pub opened_at_ms: i64,
    /// Deadline (Unix ms).
    pub deadline_ms: i64,
    /// Devices registered when it opened.
    pub population: u64,
    /// Highest eligible device id.
    pub max_device_id: u64,
    /// `q × population`.
    pub expected_cohort: f64,
    /// Closing time.
    pub closed_at_ms: Option<i64>,
    /// Why it was abandoned or failed.
    pub reason: Option<String>,
    /// Model version published from it.
    pub released_version: Option<u64>,
    /// Devices drawn into the cohort.
    pub selected: u64,
    /// Accepted reports.
    pub accepted: u64,
    /// Rejected reports.
    pub rejected: u64,
    /// ε spent after this round by RDP.
    pub epsilon_rdp: Option<f64>,
    /// ε spent after this round by PLD.
    pub epsilon_pld: Option<f64>,
}

/// How a round ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundOutcome {
    /// `Released`, `Abandoned` or `ReleaseFailed`.
    pub state: RoundState,
    /// Why (abandoned / failed).
    pub reason: Option<String>,
    /// Published version.
    pub released_version: Option<u64>,
    /// Realized cohort.
    pub selected: u64,
    /// Accepted reports.
    pub accepted: u64,
    /// Rejected reports.
    pub rejected: u64,
    /// ε spent so far by RDP.
    pub epsilon_rdp: Option<f64>,
    /// ε spent so far by PLD.
    pub epsilon_pld: Option<f64>,
}

/// A report (accepted or rejected upload) to log.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRow {
    /// Round.
    pub round: u64,
    /// Device.
    pub device: u64,
    /// Idempotency key (accepted reports only).
    pub idempotency_key: Option<String>,
    /// `true` when accepted.
    pub accepted: bool,
    /// Why rejected.
    pub reason: Option<String>,
    /// Body size.
    pub bytes: u64,
}

/// Durable state of the round server.
pub trait FlStore: Send {
    /// Adds a device; returns its id.
    fn register_device(&mut self, label: &str, token_hash: &str) -> Result<u64, FlError>;
    /// The device holding the token with this hash.
    fn device_by_token_hash(&self, token_hash: &str) -> Result<Option<u64>, FlError>;
    /// `(count, highest id)` of registered devices.
    fn devices(&self) -> Result<(u64, u64), FlError>;
    /// Inserts a newly opened round.
    fn insert_round(&mut self, round: &RoundRow) -> Result<(), FlError>;
    /// Every round, by id.
    fn rounds(&self) -> Result<Vec<RoundRow>, FlError>;
    /// Records how a round ended.
    fn close_round(&mut self, id: u64, outcome: &RoundOutcome) -> Result<(), FlError>;
    /// The recorded cohort draw of a device in a round.
    fn cohort_draw(&self, round: u64, device: u64) -> Result<Option<bool>, FlError>;
    /// Records a device's cohort draw (once per round).
    fn record_draw(&mut self, round: u64, device: u64, selected: bool) -> Result<(), FlError>;
    /// The round of an accepted report with this idempotency key.
    fn accepted_key(&self, key: &str) -> Result<Option<u64>, FlError>;
    /// Logs a report.
    fn record_report(&mut self, report: &ReportRow) -> Result<(), FlError>;
    /// Rejected reports over the whole run.
    fn rejected_total(&self) -> Result<u64, FlError>;
    /// Records a published model version.
    fn add_model_version(
        &mut self,
        version: u64,
        round: Option<u64>,
        path: &Path,
    ) -> Result<(), FlError>;
    /// The latest published model version and its directory.
    fn latest_model_version(&self) -> Result<Option<(u64, PathBuf)>, FlError>;
}

/// [`FlStore`] in one SQLite file.
pub struct SqliteFlStore {
    conn: Connection,
}

fn to_i64(v: u64, what: &str) -> Result<i64, FlError> {
    i64::try_from(v).map_err(|_| FlError::Corrupt(format!("{what} {v} does not fit SQLite")))
}

fn to_u64(v: i64, what: &str) -> Result<u64, FlError> {
    u64::try_from(v).map_err(|_| FlError::Corrupt(format!("{what} {v} is negative")))
}

impl SqliteFlStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, FlError> {
        let op = format!("open {}", path.display());
        let conn = Connection::open(path).map_err(FlError::store(&op))?;
        Self::init(conn, &op)
    }

    /// An in-memory store (tests).
    pub fn open_in_memory() -> Result<Self, FlError> {
        let conn = Connection::open_in_memory().map_err(FlError::store("open :memory:"))?;
        Self::init(conn, "open :memory:")
    }

    fn init(conn: Connection, op: &str) -> Result<Self, FlError> {
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(FlError::store(op))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(FlError::store(op))?;
        conn.execute_batch(SCHEMA).map_err(FlError::store(op))?;
        Ok(Self { conn })
    }
}

type RawRound = (
    i64,
    i64,
    String,
    i64,
    i64,
    i64,
    i64,
    f64,
    Option<i64>,
    Option<String>,
    Option<i64>,
    (i64, i64, i64, Option<f64>, Option<f64>),
);

fn decode_round(r: RawRound) -> Result<RoundRow, FlError> {
    let (id, mv, state, opened, deadline, pop, maxid, expected, closed, reason, rel, counts) = r;
    let (selected, accepted, rejected, er, ep) = counts;
    Ok(RoundRow {
        id: to_u64(id, "round id")?,
        model_version: to_u64(mv, "model_version")?,
        state: RoundState::parse(&state)?,
        opened_at_ms: opened,
        deadline_ms: deadline,
        population: to_u64(pop, "population")?,
        max_device_id: to_u64(maxid, "max_device_id")?,
        expected_cohort: expected,
        closed_at_ms: closed,
        reason,
        released_version: rel.map(|v| to_u64(v, "released_version")).transpose()?,
        selected: to_u64(selected, "selected")?,
        accepted: to_u64(accepted, "accepted")?,
        rejected: to_u64(rejected, "rejected")?,
        epsilon_rdp: er,
        epsilon_pld: ep,
    })
}

impl FlStore for SqliteFlStore {
    fn register_device(&mut self, label: &str, token_hash: &str) -> Result<u64, FlError> {
        self.conn
            .execute(
                "INSERT INTO devices (token_hash, label, registered_at_ms) VALUES (?1, ?2, ?3)",
                params![token_hash, label, now_ms()],
            )
            .map_err(FlError::store("register device"))?;
        to_u64(self.conn.last_insert_rowid(), "device id")
    }

    fn device_by_token_hash(&self, token_hash: &str) -> Result<Option<u64>, FlError> {
        let id: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM devices WHERE token_hash = ?1",
                params![token_hash],
                |r| r.get(0),
            )
            .optional()
            .map_err(FlError::store("look up token"))?;
        id.map(|i| to_u64(i, "device id")).transpose()
    }

    fn devices(&self) -> Result<(u64, u64), FlError> {
        let (n, max): (i64, Option<i64>) = self
            .conn
            .query_row("SELECT COUNT(*), MAX(id) FROM devices", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(FlError::store("count devices"))?;
        Ok((
            to_u64(n, "device count")?,
            to_u64(max.unwrap_or(0), "device id")?,
        ))
    }

    fn insert_round(&mut self, r: &RoundRow) -> Result<(), FlError> {
        self.conn
            .execute(
                "INSERT INTO rounds (id, model_version, state, opened_at_ms, deadline_ms,
                     population, max_device_id, expected_cohort)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    to_i64(r.id, "round id")?,
                    to_i64(r.model_version, "model version")?,
                    r.state.as_str(),
                    r.opened_at_ms,
                    r.deadline_ms,
                    to_i64(r.population, "population")?,
                    to_i64(r.max_device_id, "device id")?,
                    r.expected_cohort,
                ],
            )
            .map_err(FlError::store("open round"))?;
        Ok(())
    }

    fn rounds(&self) -> Result<Vec<RoundRow>, FlError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, model_version, state, opened_at_ms, deadline_ms, population,
                        max_device_id, expected_cohort, closed_at_ms, reason, released_version,
                        selected, accepted, rejected, epsilon_rdp, epsilon_pld
                 FROM rounds ORDER BY id",
            )
            .map_err(FlError::store("read rounds"))?;
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
                    (r.get(11)?, r.get(12)?, r.get(13)?, r.get(14)?, r.get(15)?),
                ))
            })
            .map_err(FlError::store("read rounds"))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(decode_round(row.map_err(FlError::store("read rounds"))?)?);
        }
        Ok(out)
    }

    fn close_round(&mut self, id: u64, o: &RoundOutcome) -> Result<(), FlError> {
        self.conn
            .execute(
                "UPDATE rounds SET state = ?2, closed_at_ms = ?3, reason = ?4,
                     released_version = ?5, selected = ?6, accepted = ?7, rejected = ?8,
                     epsilon_rdp = ?9, epsilon_pld = ?10
                 WHERE id = ?1",
                params![
                    to_i64(id, "round id")?,
                    o.state.as_str(),
                    now_ms(),
                    o.reason,
                    o.released_version
                        .map(|v| to_i64(v, "model version"))
                        .transpose()?,
                    to_i64(o.selected, "selected")?,
                    to_i64(o.accepted, "accepted")?,
                    to_i64(o.rejected, "rejected")?,
                    o.epsilon_rdp,
                    o.epsilon_pld,
                ],
            )
            .map_err(FlError::store("close round"))?;
        Ok(())
    }

    fn cohort_draw(&self, round: u64, device: u64) -> Result<Option<bool>, FlError> {
        self.conn
            .query_row(
                "SELECT selected FROM cohort WHERE round = ?1 AND device = ?2",
                params![to_i64(round, "round")?, to_i64(device, "device")?],
                |r| r.get::<_, bool>(0),
            )
            .optional()
            .map_err(FlError::store("read cohort draw"))
    }

    fn record_draw(&mut self, round: u64, device: u64, selected: bool) -> Result<(), FlError> {
        self.conn
            .execute(
                "INSERT INTO cohort (round, device, selected, drawn_at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![
                    to_i64(round, "round")?,
                    to_i64(device, "device")?,
                    selected,
                    now_ms()
                ],
            )
            .map_err(FlError::store("record cohort draw"))?;
        Ok(())
    }

    fn accepted_key(&self, key: &str) -> Result<Option<u64>, FlError> {
        let r: Option<i64> = self
            .conn
            .query_row(
                "SELECT round FROM reports WHERE idempotency_key = ?1 AND status = 'accepted'",
                params![key],
                |r| r.get(0),
            )
            .optional()
            .map_err(FlError::store("look up idempotency key"))?;
        r.map(|v| to_u64(v, "round")).transpose()
    }

    fn record_report(&mut self, r: &ReportRow) -> Result<(), FlError> {
        self.conn
            .execute(
                "INSERT INTO reports (round, device, idempotency_key, status, reason, bytes,
                     received_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    to_i64(r.round, "round")?,
                    to_i64(r.device, "device")?,
                    r.idempotency_key,
                    if r.accepted { "accepted" } else { "rejected" },
                    r.reason,
                    to_i64(r.bytes, "bytes")?,
                    now_ms()
                ],
            )
            .map_err(FlError::store("record report"))?;
        Ok(())
    }

    fn rejected_total(&self) -> Result<u64, FlError> {
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM reports WHERE status = 'rejected'",
                [],
                |r| r.get(0),
            )
            .map_err(FlError::store("count rejected reports"))?;
        to_u64(n, "count")
    }

    fn add_model_version(
        &mut self,
        version: u64,
        round: Option<u64>,
        path: &Path,
    ) -> Result<(), FlError> {
        self.conn
            .execute(
                "INSERT INTO model_versions (version, round, path, published_at_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    to_i64(version, "model version")?,
                    round.map(|r| to_i64(r, "round")).transpose()?,
                    path.display().to_string(),
                    now_ms()
                ],
            )
            .map_err(FlError::store("publish model version"))?;
        Ok(())
    }

    fn latest_model_version(&self) -> Result<Option<(u64, PathBuf)>, FlError> {
        let r: Option<(i64, String)> = self
            .conn
            .query_row(
                "SELECT version, path FROM model_versions ORDER BY version DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(FlError::store("read model versions"))?;
        r.map(|(v, p)| Ok((to_u64(v, "model version")?, PathBuf::from(p))))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_recorded_once_and_keys_are_unique() {
        let mut s = SqliteFlStore::open_in_memory().unwrap();
        let d = s.register_device("a", "h1").unwrap();
        assert_eq!(s.device_by_token_hash("h1").unwrap(), Some(d));
        assert_eq!(s.device_by_token_hash("h2").unwrap(), None);
        assert!(s.register_device("b", "h1").is_err());
        s.record_draw(1, d, true).unwrap();
        assert_eq!(s.cohort_draw(1, d).unwrap(), Some(true));
        assert!(s.record_draw(1, d, false).is_err());
        let rep = ReportRow {
            round: 1,
            device: d,
            idempotency_key: Some("1:1".into()),
            accepted: true,
            reason: None,
            bytes: 10,
        };
        s.record_report(&rep).unwrap();
        assert!(s.record_report(&rep).is_err());
        assert_eq!(s.accepted_key("1:1").unwrap(), Some(1));
    }
}
