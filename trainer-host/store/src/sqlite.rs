//! The round engine's [`Store`] on SQLite, the default: one file, `<data_dir>/hush.sqlite`, in WAL
//! mode with `synchronous = FULL` (but for the rows a crash may lose: the open round's
//! reports), written through one connection (one writer). The privacy
//! ledger's `releases` table lives in the same database ([`hush_privacy::ledger::sqlite`]
//! owns its schema and row format), so [`Store::commit_release`] appends the ledger
//! record, marks the round released and adds the model version in **one transaction**.
//!
//! # Schema
//!
//! ```sql
//! devices(id INTEGER PRIMARY KEY AUTOINCREMENT, token_hash TEXT UNIQUE NOT NULL,
//!         label TEXT NOT NULL, registered_at_ms INTEGER NOT NULL,
//!         enrolment INTEGER,                  -- the enrolment token it used (NULL: older)
//!         expires_at_ms INTEGER,              -- token expiry (NULL: never, older devices)
//!         revoked_at_ms INTEGER)              -- set by `hush-host devices revoke`
//! enrolments(id INTEGER PRIMARY KEY AUTOINCREMENT, token_hash TEXT UNIQUE NOT NULL,
//!            label TEXT NOT NULL, quota INTEGER NOT NULL, used INTEGER NOT NULL,
//!            created_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL,
//!            revoked_at_ms INTEGER)
//! rounds(id INTEGER PRIMARY KEY,              -- 1, 2, … (never reused)
//!        model_version INTEGER NOT NULL,      -- version the cohort trains from
//!        state TEXT NOT NULL,                 -- open | released | abandoned | release_failed
//!        opened_at_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL,
//!        population INTEGER NOT NULL,         -- devices registered when it opened
//!        max_device_id INTEGER NOT NULL,      -- devices with id <= this are eligible
//!        expected_cohort REAL NOT NULL,       -- q × population: the divisor
//!        closed_at_ms INTEGER, reason TEXT,
//!        released_version INTEGER,            -- model version published from it
//!        selected INTEGER NOT NULL DEFAULT 0, -- realized cohort (written at open)
//!        accepted INTEGER NOT NULL DEFAULT 0, rejected INTEGER NOT NULL DEFAULT 0,
//!        epsilon_rdp REAL, epsilon_pld REAL)  -- ε spent after this round (ledger totals)
//! cohort(round INTEGER NOT NULL, device INTEGER NOT NULL,
//!        selected INTEGER NOT NULL,           -- 1: the devices drawn, all written when the
//!                                             -- round opens (0 only in older databases)
//!        drawn_at_ms INTEGER NOT NULL, PRIMARY KEY (round, device))
//! reports(id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL,
//!         device INTEGER NOT NULL,
//!         idempotency_key TEXT UNIQUE,        -- set on accepted reports only
//!         status TEXT NOT NULL,               -- accepted | rejected
//!         reason TEXT, bytes INTEGER NOT NULL, received_at_ms INTEGER NOT NULL)
//! model_versions(version INTEGER PRIMARY KEY, round INTEGER,  -- NULL for v0
//!                path TEXT NOT NULL,          -- models/v{N}, relative to the data directory
//!                published_at_ms INTEGER NOT NULL,
//!                digest TEXT)                 -- SHA-256 of its files (NULL before digests)
//! host(key TEXT PRIMARY KEY, value BLOB NOT NULL)  -- 'cohort_key': 32 secret bytes
//! releases(…)                                 -- the privacy ledger (hush-privacy)
//! ```
//!
//! Tokens are stored only as SHA-256 hashes. A database written by a host before this
//! store (no `digest` column, no `host` or `enrolments` table, devices without expiry) is
//! upgraded in place on open.

use std::path::Path;

use hush_fl::store::{
    DeviceRow, EnrolRefusal, EnrolmentRow, ModelVersionRow, NewDevice, ReleaseCommit, ReportRow,
    RoundOutcome, RoundRow, RoundState, Store, StoreError, StoreResult,
};
use hush_privacy::ledger::sqlite::{append_committed, append_on, create_schema, read_records};
use hush_privacy::ledger::{LedgerError, LedgerStore, Release, ReleaseRecord};
use rusqlite::{params, Connection, OptionalExtension};

/// File name of the database in the data directory.
pub const DB_FILE: &str = "hush.sqlite";

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
CREATE TABLE IF NOT EXISTS enrolments (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash    TEXT    NOT NULL UNIQUE,
    label         TEXT    NOT NULL,
    quota         INTEGER NOT NULL,
    used          INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
);
CREATE TABLE IF NOT EXISTS host (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
";

/// [`Store`] (and the ledger's [`LedgerStore`]) in one SQLite file.
pub struct SqliteStore {
    conn: Connection,
    location: String,
}

fn err(op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::new(op, e)
}

fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| StoreError::new(what, format!("{v} does not fit SQLite")))
}

fn to_u64(v: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::new(what, format!("stored value {v} is negative")))
}

fn ledger_err(e: LedgerError) -> StoreError {
    StoreError::new("ledger", e)
}

impl SqliteStore {
    /// Opens (creating or upgrading if needed) the store at `path`.
    pub fn open(path: &Path) -> StoreResult<Self> {
        let location = path.display().to_string();
        let conn = Connection::open(path).map_err(|e| StoreError::new(&location, e))?;
        Self::init(conn, location)
    }

    /// An in-memory store (tests).
    pub fn open_in_memory() -> StoreResult<Self> {
        let conn = Connection::open_in_memory().map_err(err("open :memory:"))?;
        Self::init(conn, ":memory:".into())
    }

    fn init(conn: Connection, location: String) -> StoreResult<Self> {
        let op = |e| StoreError::new(&format!("open {location}"), e);
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(op)?;
        // WAL: readers never block the one writer; FULL: a commit is on disk when it returns.
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(op)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(op)?;
        conn.execute_batch(SCHEMA).map_err(op)?;
        for (table, column) in [
            ("model_versions", "digest TEXT"),
            ("devices", "enrolment INTEGER"),
            ("devices", "expires_at_ms INTEGER"),
            ("devices", "revoked_at_ms INTEGER"),
        ] {
            let name = column.split(' ').next().unwrap_or(column);
            let has: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
                    params![table, name],
                    |r| r.get(0),
                )
                .map_err(op)?;
            if has == 0 {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column}"))
                    .map_err(op)?;
            }
        }
        create_schema(&conn, &location).map_err(ledger_err)?;
        Ok(Self { conn, location })
    }
}

impl SqliteStore {
    /// Runs one write without waiting for the disk (`synchronous = NORMAL` in WAL mode: the
    /// database stays consistent after a crash, but the last such writes may be lost).
    /// Only for rows a crash may lose: a report of the open round (whose sum a crash loses
    /// anyway, so the round is abandoned on restart). The next synced commit — a release, a registration — makes
    /// them durable too; everything else commits with `synchronous = FULL`.
    fn unsynced<T>(
        &mut self,
        op: &'static str,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> StoreResult<T> {
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(err(op))?;
        let written = write(&self.conn).map_err(err(op));
        self.conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(err(op))?;
        written
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

fn decode_round(r: RawRound) -> StoreResult<RoundRow> {
    let (id, mv, state, opened, deadline, pop, maxid, expected, closed, reason, rel, counts) = r;
    let (selected, accepted, rejected, er, ep) = counts;
    Ok(RoundRow {
        id: to_u64(id, "round id")?,
        model_version: to_u64(mv, "model_version")?,
        state: RoundState::parse(&state).ok_or_else(|| {
            StoreError::new("read rounds", format!("round {id} has state {state:?}"))
        })?,
        opened_at_ms: to_u64(opened, "opened_at_ms")?,
        deadline_ms: to_u64(deadline, "deadline_ms")?,
        population: to_u64(pop, "population")?,
        max_device_id: to_u64(maxid, "max_device_id")?,
        expected_cohort: expected,
        closed_at_ms: closed.map(|c| to_u64(c, "closed_at_ms")).transpose()?,
        reason,
        released_version: rel.map(|v| to_u64(v, "released_version")).transpose()?,
        selected: to_u64(selected, "selected")?,
        accepted: to_u64(accepted, "accepted")?,
        rejected: to_u64(rejected, "rejected")?,
        epsilon_rdp: er,
        epsilon_pld: ep,
    })
}

const DEVICE_COLUMNS: &str = "id, label, registered_at_ms, enrolment, expires_at_ms, revoked_at_ms";

type RawDevice = (i64, String, i64, Option<i64>, Option<i64>, Option<i64>);

fn raw_device(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawDevice> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn decode_device(r: RawDevice) -> StoreResult<DeviceRow> {
    let (id, label, registered, enrolment, expires, revoked) = r;
    let opt = |v: Option<i64>, what| v.map(|v| to_u64(v, what)).transpose();
    Ok(DeviceRow {
        id: to_u64(id, "device id")?,
        label,
        registered_at_ms: to_u64(registered, "registered_at_ms")?,
        enrolment: opt(enrolment, "enrolment")?,
        expires_at_ms: opt(expires, "expires_at_ms")?,
        revoked_at_ms: opt(revoked, "revoked_at_ms")?,
    })
}

/// `UPDATE rounds` with how round `id` ended, on `conn` (a connection or a transaction).
fn write_outcome(conn: &Connection, id: u64, o: &RoundOutcome, now_ms: u64) -> StoreResult<()> {
    let changed = conn
        .execute(
            "UPDATE rounds SET state = ?2, closed_at_ms = ?3, reason = ?4,
                 released_version = ?5, selected = ?6, accepted = ?7, rejected = ?8,
                 epsilon_rdp = ?9, epsilon_pld = ?10
             WHERE id = ?1 AND state = 'open'",
            params![
                to_i64(id, "round id")?,
                o.state.as_str(),
                to_i64(now_ms, "time")?,
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
        .map_err(err("close round"))?;
    if changed != 1 {
        return Err(StoreError::new(
            "close round",
            format!("round {id} is not open in the store"),
        ));
    }
    Ok(())
}

/// `INSERT INTO model_versions` on `conn`.
fn write_version(conn: &Connection, v: &ModelVersionRow, now_ms: u64) -> StoreResult<()> {
    conn.execute(
        "INSERT INTO model_versions (version, round, path, published_at_ms, digest)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            to_i64(v.version, "model version")?,
            v.round.map(|r| to_i64(r, "round")).transpose()?,
            format!("models/v{}", v.version),
            to_i64(now_ms, "time")?,
            v.digest,
        ],
    )
    .map_err(err("add model version"))?;
    Ok(())
}

impl LedgerStore for SqliteStore {
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

impl Store for SqliteStore {
    fn cohort_key(&mut self, fresh: [u8; 32]) -> StoreResult<[u8; 32]> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO host (key, value) VALUES ('cohort_key', ?1)",
                params![&fresh[..]],
            )
            .map_err(err("store cohort key"))?;
        let stored: Vec<u8> = self
            .conn
            .query_row("SELECT value FROM host WHERE key = 'cohort_key'", [], |r| {
                r.get(0)
            })
            .map_err(err("read cohort key"))?;
        stored.try_into().map_err(|v: Vec<u8>| {
            StoreError::new(
                "read cohort key",
                format!("the stored key has {} bytes, not 32", v.len()),
            )
        })
    }

    fn add_enrolment(
        &mut self,
        token_hash: &str,
        label: &str,
        quota: u64,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.conn
            .execute(
                "INSERT INTO enrolments (token_hash, label, quota, used, created_at_ms,
                     expires_at_ms) VALUES (?1, ?2, ?3, 0, ?4, ?5)",
                params![
                    token_hash,
                    label,
                    to_i64(quota, "quota")?,
                    to_i64(now_ms, "time")?,
                    to_i64(expires_at_ms, "expiry")?
                ],
            )
            .map_err(err("add enrolment token"))?;
        to_u64(self.conn.last_insert_rowid(), "enrolment id")
    }

    fn enrol_device(
        &mut self,
        d: &NewDevice<'_>,
        now_ms: u64,
    ) -> StoreResult<Result<u64, EnrolRefusal>> {
        let now = to_i64(now_ms, "time")?;
        // IMMEDIATE: the seat count is read and taken under the write lock, so two hosts
        // (or a host and the CLI) cannot both take the last seat.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("enrol device"))?;
        let found: Option<(i64, i64, i64, i64, Option<i64>)> = tx
            .query_row(
                "SELECT id, quota, used, expires_at_ms, revoked_at_ms FROM enrolments
                 WHERE token_hash = ?1",
                params![d.enrolment_hash],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()
            .map_err(err("enrol device"))?;
        let Some((enrolment, quota, used, expires, revoked)) = found else {
            return Ok(Err(EnrolRefusal::Unknown));
        };
        if revoked.is_some() {
            return Ok(Err(EnrolRefusal::Revoked));
        }
        if now >= expires {
            return Ok(Err(EnrolRefusal::Expired));
        }
        if used >= quota {
            return Ok(Err(EnrolRefusal::QuotaUsed {
                quota: to_u64(quota, "quota")?,
            }));
        }
        tx.execute(
            "UPDATE enrolments SET used = used + 1 WHERE id = ?1",
            params![enrolment],
        )
        .map_err(err("enrol device"))?;
        tx.execute(
            "INSERT INTO devices (token_hash, label, registered_at_ms, enrolment, expires_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                d.token_hash,
                d.label,
                now,
                enrolment,
                to_i64(d.expires_at_ms, "expiry")?
            ],
        )
        .map_err(err("enrol device"))?;
        let id = to_u64(tx.last_insert_rowid(), "device id")?;
        tx.commit().map_err(err("enrol device"))?;
        Ok(Ok(id))
    }

    fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<DeviceRow>> {
        self.conn
            .query_row(
                &format!("SELECT {DEVICE_COLUMNS} FROM devices WHERE token_hash = ?1"),
                params![token_hash],
                raw_device,
            )
            .optional()
            .map_err(err("look up token"))?
            .map(decode_device)
            .transpose()
    }

    fn devices(&self, now_ms: u64) -> StoreResult<(u64, u64)> {
        let (n, max): (i64, Option<i64>) = self
            .conn
            .query_row(
                "SELECT COUNT(*), MAX(id) FROM devices WHERE revoked_at_ms IS NULL
                     AND (expires_at_ms IS NULL OR expires_at_ms > ?1)",
                params![to_i64(now_ms, "time")?],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(err("count devices"))?;
        Ok((
            to_u64(n, "device count")?,
            to_u64(max.unwrap_or(0), "device id")?,
        ))
    }

    fn active_devices(&self, now_ms: u64) -> StoreResult<Vec<u64>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id FROM devices WHERE revoked_at_ms IS NULL
                     AND (expires_at_ms IS NULL OR expires_at_ms > ?1) ORDER BY id",
            )
            .map_err(err("list active devices"))?;
        let ids = stmt
            .query_map(params![to_i64(now_ms, "time")?], |r| r.get::<_, i64>(0))
            .map_err(err("list active devices"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("list active devices"))?;
        ids.into_iter().map(|id| to_u64(id, "device id")).collect()
    }

    fn device_list(&self) -> StoreResult<Vec<DeviceRow>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {DEVICE_COLUMNS} FROM devices ORDER BY id"))
            .map_err(err("list devices"))?;
        let rows = stmt
            .query_map([], raw_device)
            .map_err(err("list devices"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("list devices"))?;
        rows.into_iter().map(decode_device).collect()
    }

    fn enrolments(&self) -> StoreResult<Vec<EnrolmentRow>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, label, quota, used, created_at_ms, expires_at_ms, revoked_at_ms
                 FROM enrolments ORDER BY id",
            )
            .map_err(err("list enrolments"))?;
        type Raw = (i64, String, i64, i64, i64, i64, Option<i64>);
        let rows: Vec<Raw> = stmt
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .map_err(err("list enrolments"))?
            .collect::<Result<_, _>>()
            .map_err(err("list enrolments"))?;
        rows.into_iter()
            .map(|(id, label, quota, used, created, expires, revoked)| {
                Ok(EnrolmentRow {
                    id: to_u64(id, "enrolment id")?,
                    label,
                    quota: to_u64(quota, "quota")?,
                    used: to_u64(used, "used")?,
                    created_at_ms: to_u64(created, "created_at_ms")?,
                    expires_at_ms: to_u64(expires, "expires_at_ms")?,
                    revoked_at_ms: revoked.map(|r| to_u64(r, "revoked_at_ms")).transpose()?,
                })
            })
            .collect()
    }

    fn revoke_device(&mut self, id: u64, now_ms: u64) -> StoreResult<bool> {
        let n = self
            .conn
            .execute(
                "UPDATE devices SET revoked_at_ms = ?2 WHERE id = ?1 AND revoked_at_ms IS NULL",
                params![to_i64(id, "device id")?, to_i64(now_ms, "time")?],
            )
            .map_err(err("revoke device"))?;
        Ok(n == 1)
    }

    fn revoke_enrolment(&mut self, id: u64, now_ms: u64) -> StoreResult<bool> {
        let n = self
            .conn
            .execute(
                "UPDATE enrolments SET revoked_at_ms = ?2 WHERE id = ?1 AND revoked_at_ms IS NULL",
                params![to_i64(id, "enrolment id")?, to_i64(now_ms, "time")?],
            )
            .map_err(err("revoke enrolment"))?;
        Ok(n == 1)
    }

    fn open_round(&mut self, r: &RoundRow, cohort: &[u64]) -> StoreResult<()> {
        let tx = self.conn.transaction().map_err(err("open round"))?;
        tx.execute(
            "INSERT INTO rounds (id, model_version, state, opened_at_ms, deadline_ms,
                 population, max_device_id, expected_cohort, selected)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                to_i64(r.id, "round id")?,
                to_i64(r.model_version, "model version")?,
                r.state.as_str(),
                to_i64(r.opened_at_ms, "time")?,
                to_i64(r.deadline_ms, "deadline")?,
                to_i64(r.population, "population")?,
                to_i64(r.max_device_id, "device id")?,
                r.expected_cohort,
                to_i64(cohort.len() as u64, "cohort size")?,
            ],
        )
        .map_err(err("open round"))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO cohort (round, device, selected, drawn_at_ms)
                     VALUES (?1, ?2, 1, ?3)",
                )
                .map_err(err("record cohort"))?;
            for &d in cohort {
                insert
                    .execute(params![
                        to_i64(r.id, "round id")?,
                        to_i64(d, "device")?,
                        to_i64(r.opened_at_ms, "time")?
                    ])
                    .map_err(err("record cohort"))?;
            }
        }
        tx.commit().map_err(err("open round"))?;
        Ok(())
    }

    fn rounds(&self) -> StoreResult<Vec<RoundRow>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, model_version, state, opened_at_ms, deadline_ms, population,
                        max_device_id, expected_cohort, closed_at_ms, reason, released_version,
                        selected, accepted, rejected, epsilon_rdp, epsilon_pld
                 FROM rounds ORDER BY id",
            )
            .map_err(err("read rounds"))?;
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
            .map_err(err("read rounds"))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(decode_round(row.map_err(err("read rounds"))?)?);
        }
        Ok(out)
    }

    fn close_round(&mut self, id: u64, outcome: &RoundOutcome, now_ms: u64) -> StoreResult<()> {
        write_outcome(&self.conn, id, outcome, now_ms)
    }

    fn cohort(&self, round: u64) -> StoreResult<Vec<u64>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT device FROM cohort WHERE round = ?1 AND selected = 1 ORDER BY device",
            )
            .map_err(err("read cohort"))?;
        let ids = stmt
            .query_map(params![to_i64(round, "round")?], |r| r.get::<_, i64>(0))
            .map_err(err("read cohort"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("read cohort"))?;
        ids.into_iter().map(|d| to_u64(d, "device")).collect()
    }

    fn accepted_key(&self, key: &str) -> StoreResult<Option<u64>> {
        let r: Option<i64> = self
            .conn
            .query_row(
                "SELECT round FROM reports WHERE idempotency_key = ?1 AND status = 'accepted'",
                params![key],
                |r| r.get(0),
            )
            .optional()
            .map_err(err("look up idempotency key"))?;
        r.map(|v| to_u64(v, "round")).transpose()
    }

    fn record_report(&mut self, r: &ReportRow, now_ms: u64) -> StoreResult<()> {
        let row = params![
            to_i64(r.round, "round")?,
            to_i64(r.device, "device")?,
            r.idempotency_key,
            if r.accepted { "accepted" } else { "rejected" },
            r.reason,
            to_i64(r.bytes, "bytes")?,
            to_i64(now_ms, "time")?
        ];
        self.unsynced("record report", |c| {
            c.execute(
                "INSERT INTO reports (round, device, idempotency_key, status, reason, bytes,
                     received_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                row,
            )
        })?;
        Ok(())
    }

    fn rejected_total(&self) -> StoreResult<u64> {
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM reports WHERE status = 'rejected'",
                [],
                |r| r.get(0),
            )
            .map_err(err("count rejected reports"))?;
        to_u64(n, "count")
    }

    fn add_initial_version(&mut self, version: &ModelVersionRow, now_ms: u64) -> StoreResult<()> {
        write_version(&self.conn, version, now_ms)
    }

    fn model_versions(&self) -> StoreResult<Vec<ModelVersionRow>> {
        let mut stmt = self
            .conn
            .prepare("SELECT version, round, digest FROM model_versions ORDER BY version")
            .map_err(err("read model versions"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .map_err(err("read model versions"))?;
        let mut out = Vec::new();
        for row in rows {
            let (v, round, digest) = row.map_err(err("read model versions"))?;
            out.push(ModelVersionRow {
                version: to_u64(v, "model version")?,
                round: round.map(|r| to_u64(r, "round")).transpose()?,
                digest: digest.unwrap_or_default(),
            });
        }
        Ok(out)
    }

    fn commit_release(&mut self, c: &ReleaseCommit) -> StoreResult<Option<ReleaseRecord>> {
        let tx = self.conn.transaction().map_err(err("begin release"))?;
        let record = match &c.ledger {
            Some(sealed) => Some(
                append_on(
                    &tx,
                    &self.location,
                    sealed.release(),
                    sealed.epsilon_rdp(),
                    sealed.epsilon_pld(),
                    to_i64(c.now_ms, "time")?,
                )
                .map_err(ledger_err)?,
            ),
            None => None,
        };
        write_outcome(&tx, c.round, &c.outcome, c.now_ms)?;
        write_version(&tx, &c.version, c.now_ms)?;
        tx.commit().map_err(err("commit release"))?;
        Ok(record)
    }
}

#[cfg(test)]
#[path = "sqlite_tests.rs"]
mod tests;
