//! The round engine's [`Store`] on PostgreSQL, for hosts that share one database
//! (`hush-host serve --store postgres://…`): the same logical schema as the SQLite store
//! ([`crate::sqlite`]), in PostgreSQL's types (`BIGINT` ids and times, `DOUBLE PRECISION`,
//! `BYTEA`), with the privacy ledger's `releases` table in the same database so that
//! [`Store::commit_release`] is one transaction here too.
//!
//! The client is the blocking `postgres` crate (tokio-postgres under a small runtime of its
//! own): the [`Store`] trait is synchronous (docs/design/round-engine.md), and a
//! PostgreSQL-only client keeps SQLite's native library (rusqlite, bundled) the only SQLite
//! in the build — `sqlx` with its sqlite feature would link a second one. Plain TCP or a
//! Unix socket, no TLS: the database is on the hosts' private network.
//!
//! # Schema and migrations
//!
//! [`MIGRATIONS`] lists the schema's versions; opening a store applies the ones the
//! database lacks, in one transaction under an advisory lock (replicas starting together
//! migrate once), and records each in `schema_migrations`. A database whose schema is newer
//! than this binary knows is refused. Version 1:
//!
//! ```sql
//! devices(id BIGINT IDENTITY PRIMARY KEY, token_hash TEXT UNIQUE NOT NULL, label TEXT,
//!         registered_at_ms BIGINT, enrolment BIGINT, expires_at_ms BIGINT, revoked_at_ms BIGINT)
//! enrolments(id BIGINT IDENTITY PRIMARY KEY, token_hash TEXT UNIQUE NOT NULL, label TEXT,
//!            quota BIGINT, used BIGINT, created_at_ms BIGINT, expires_at_ms BIGINT,
//!            revoked_at_ms BIGINT)
//! rounds(id BIGINT PRIMARY KEY, model_version, state CHECK (open | released | abandoned |
//!        release_failed), opened_at_ms, deadline_ms, population, max_device_id,
//!        expected_cohort DOUBLE PRECISION, closed_at_ms, reason, released_version,
//!        selected, accepted, rejected, epsilon_rdp, epsilon_pld)
//! cohort(round BIGINT REFERENCES rounds, device BIGINT, drawn_at_ms, PRIMARY KEY (round, device))
//! reports(id BIGINT IDENTITY PRIMARY KEY, round, device, idempotency_key TEXT UNIQUE,
//!         status CHECK (accepted | rejected), reason, bytes, received_at_ms)
//! model_versions(version BIGINT PRIMARY KEY, round BIGINT, path TEXT, published_at_ms, digest TEXT)
//! host(key TEXT PRIMARY KEY, value BYTEA)      -- 'cohort_key': 32 secret bytes
//! releases(id BIGINT IDENTITY PRIMARY KEY, …)  -- the ledger: hush_privacy::ledger::row
//! ```
//!
//! Version 2 (rounds shared by several replicas): the state `closing`; at most one round
//! open or closing, and one accepted report per device and round (partial unique
//! indexes); `partial_sums(round, replica, accepted, rejected, sum BYTEA)`, each replica's
//! share of a round's sum; `model_files(version, name, bytes)`, every version's files,
//! written in its release's transaction.
//!
//! `releases` is append-only: a trigger raises on UPDATE, DELETE and TRUNCATE. Ids come
//! from sequences, so they increase and are never reused (a rolled-back insert leaves a gap).
//! Every `u64` is range-checked into `BIGINT` before it is written.
//!
//! # Durability
//!
//! Every transaction commits with the server's `synchronous_commit` (on by default), but
//! for a report of a host that runs rounds alone (`SET LOCAL synchronous_commit = off`, as
//! the SQLite store skips its fsync): a crash loses that round's sum anyway. A replica's
//! reports and partial sum ([`SharedRounds::add_to_partial`], several uploads at once) wait
//! for the flush: a device hears 200 only once its update survives the replica.
//!
//! # Replicas
//!
//! [`PostgresStore::connect_as_replica`] makes the store one of several `serve` processes
//! sharing the database's rounds ([`SharedRounds`], docs/design/replicas.md). The
//! coordinator is the replica whose session holds an advisory lock; its writes (opening,
//! closing, releasing a round) are refused once a reconnect has lost the lock, so a replica
//! that lost it cannot act on a round another one now coordinates.
//!
//! A connection that the server closed (a restart) is opened again on the next call; the
//! call that saw it fail returns its error. A COMMIT that gets no answer because the
//! connection died may or may not have committed: for a round's opening, a release and an
//! accepted report — the writes whose outcome the engine acts on — the store asks the
//! database on a new connection and reports what happened (a round opened is never opened
//! again, a release the ledger holds is never reported failed, an update whose receipt is
//! stored never left out of the sum).

use std::cell::{Cell, RefCell, RefMut};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hush_fl::store::{
    Added, DeviceRow, EnrolRefusal, EnrolmentRow, ModelVersionRow, NewDevice, PartialSum,
    ReleaseCommit, ReportRow, RoundOutcome, RoundRow, RoundState, SharedRounds, Store, StoreError,
    StoreResult,
};
use hush_privacy::ledger::row::{LedgerRow, COLUMNS};
use hush_privacy::ledger::{LedgerError, LedgerStore, Release, ReleaseRecord};
use postgres::config::Host;
use postgres::{Client, Config, GenericClient, NoTls, Row};

/// The schema's versions, oldest first: `(version, DDL)`.
pub const MIGRATIONS: &[(i32, &str)] = &[(1, SCHEMA_V1), (2, SCHEMA_V2)];

const SCHEMA_V1: &str = "
CREATE TABLE devices (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_hash       TEXT   NOT NULL UNIQUE,
    label            TEXT   NOT NULL,
    registered_at_ms BIGINT NOT NULL,
    enrolment        BIGINT,
    expires_at_ms    BIGINT,
    revoked_at_ms    BIGINT
);
CREATE TABLE enrolments (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_hash    TEXT   NOT NULL UNIQUE,
    label         TEXT   NOT NULL,
    quota         BIGINT NOT NULL,
    used          BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);
CREATE TABLE rounds (
    id               BIGINT PRIMARY KEY,
    model_version    BIGINT NOT NULL,
    state            TEXT   NOT NULL
                     CHECK (state IN ('open', 'released', 'abandoned', 'release_failed')),
    opened_at_ms     BIGINT NOT NULL,
    deadline_ms      BIGINT NOT NULL,
    population       BIGINT NOT NULL,
    max_device_id    BIGINT NOT NULL,
    expected_cohort  DOUBLE PRECISION NOT NULL,
    closed_at_ms     BIGINT,
    reason           TEXT,
    released_version BIGINT,
    selected         BIGINT NOT NULL DEFAULT 0,
    accepted         BIGINT NOT NULL DEFAULT 0,
    rejected         BIGINT NOT NULL DEFAULT 0,
    epsilon_rdp      DOUBLE PRECISION,
    epsilon_pld      DOUBLE PRECISION
);
CREATE TABLE cohort (
    round       BIGINT NOT NULL REFERENCES rounds (id),
    device      BIGINT NOT NULL,
    drawn_at_ms BIGINT NOT NULL,
    PRIMARY KEY (round, device)
);
CREATE TABLE reports (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    round           BIGINT NOT NULL,
    device          BIGINT NOT NULL,
    idempotency_key TEXT UNIQUE,
    status          TEXT   NOT NULL CHECK (status IN ('accepted', 'rejected')),
    reason          TEXT,
    bytes           BIGINT NOT NULL,
    received_at_ms  BIGINT NOT NULL
);
CREATE INDEX reports_round ON reports (round, device);
CREATE TABLE model_versions (
    version         BIGINT PRIMARY KEY,
    round           BIGINT,
    path            TEXT   NOT NULL,
    published_at_ms BIGINT NOT NULL,
    digest          TEXT   NOT NULL
);
CREATE TABLE host (
    key   TEXT  PRIMARY KEY,
    value BYTEA NOT NULL
);
CREATE TABLE releases (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recorded_at_ms   BIGINT NOT NULL,
    mechanism        TEXT   NOT NULL,
    sampling         TEXT   NOT NULL,
    sampling_rate    DOUBLE PRECISION NOT NULL,
    noise_multiplier DOUBLE PRECISION NOT NULL,
    steps            BIGINT NOT NULL,
    unit             TEXT   NOT NULL,
    adjacency        TEXT   NOT NULL,
    population       BIGINT,
    delta            DOUBLE PRECISION NOT NULL,
    epsilon_rdp      DOUBLE PRECISION,
    epsilon_pld      DOUBLE PRECISION,
    released         TEXT   NOT NULL,
    additional_cost  TEXT
);
CREATE FUNCTION hush_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the privacy ledger is append-only'; END $$;
CREATE TRIGGER releases_no_update_or_delete BEFORE UPDATE OR DELETE ON releases
    FOR EACH ROW EXECUTE FUNCTION hush_ledger_append_only();
CREATE TRIGGER releases_no_truncate BEFORE TRUNCATE ON releases
    FOR EACH STATEMENT EXECUTE FUNCTION hush_ledger_append_only();
";

/// Version 2: rounds shared by several replicas (docs/design/replicas.md).
const SCHEMA_V2: &str = "
ALTER TABLE rounds DROP CONSTRAINT rounds_state_check;
ALTER TABLE rounds ADD CONSTRAINT rounds_state_check
    CHECK (state IN ('open', 'closing', 'released', 'abandoned', 'release_failed'));
CREATE UNIQUE INDEX reports_one_accepted_per_device ON reports (round, device)
    WHERE status = 'accepted';
-- At most one round open or closing, whichever replica opened it.
CREATE UNIQUE INDEX rounds_one_current ON rounds ((true)) WHERE state IN ('open', 'closing');
CREATE TABLE partial_sums (
    round          BIGINT NOT NULL REFERENCES rounds (id),
    replica        TEXT   NOT NULL,
    accepted       BIGINT NOT NULL,
    rejected       BIGINT NOT NULL,
    sum            BYTEA  NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (round, replica)
);
CREATE TABLE model_files (
    version BIGINT NOT NULL REFERENCES model_versions (version),
    name    TEXT   NOT NULL,
    bytes   BYTEA  NOT NULL,
    PRIMARY KEY (version, name)
);
-- Sums of 64-bit integers and model weights barely compress: stored out of line without
-- trying (pglz would spend more CPU than an upload's whole transaction).
ALTER TABLE partial_sums ALTER COLUMN sum SET STORAGE EXTERNAL;
ALTER TABLE model_files ALTER COLUMN bytes SET STORAGE EXTERNAL;
";

/// The advisory lock migrations run under (any constant; `hush` in ASCII).
const MIGRATION_LOCK: i64 = 0x6875_7368;
/// The advisory lock the coordinator among the replicas sharing a database's rounds holds
/// for as long as its session lives (`hush` + `host`).
const COORDINATOR_LOCK: i64 = 0x6875_7368_686f_7374;

/// [`Store`] (and the ledger's [`LedgerStore`]) in a PostgreSQL database.
pub struct PostgresStore {
    client: RefCell<Client>,
    config: Config,
    location: String,
    /// This process's name among the replicas, when it runs rounds
    /// ([`PostgresStore::connect_as_replica`]).
    replica: Option<String>,
    /// Whether this session holds [`COORDINATOR_LOCK`] (false again after a reconnect:
    /// the lock died with the old session).
    coordinator: Cell<bool>,
    /// When [`SharedRounds::coordinate`] last asked the database.
    coordinator_asked: Cell<Option<Instant>>,
}

/// How long [`SharedRounds::coordinate`] answers from its last look: a follower's check-ins
/// do not each ask for the lock, nor a coordinator's each probe its session (a write on a
/// session that died fails anyway, and a reconnect drops the lock).
const COORDINATOR_RECHECK: Duration = Duration::from_millis(100);

fn err(op: &'static str) -> impl Fn(postgres::Error) -> StoreError {
    move |e| StoreError::new(op, e)
}

fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| {
        StoreError::new(
            what,
            format!("{v} does not fit PostgreSQL's BIGINT (below 2^63)"),
        )
    })
}

fn to_u64(v: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::new(what, format!("stored value {v} is negative")))
}

fn opt_u64(v: Option<i64>, what: &str) -> StoreResult<Option<u64>> {
    v.map(|v| to_u64(v, what)).transpose()
}

fn opt_i64(v: Option<u64>, what: &str) -> StoreResult<Option<i64>> {
    v.map(|v| to_i64(v, what)).transpose()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `postgres://user@host:port/db`, without the password.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(h, p)| match h {
            Host::Tcp(name) => format!("{name}:{p}"),
            Host::Unix(dir) => format!("{}:{p}", dir.display()),
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

/// Applies the migrations `client`'s database lacks, in one transaction under
/// [`MIGRATION_LOCK`].
fn migrate(client: &mut Client) -> StoreResult<()> {
    let op = err("migrate the schema");
    let mut tx = client.transaction().map_err(&op)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(&op)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version       INTEGER PRIMARY KEY,
             applied_at_ms BIGINT  NOT NULL)",
    )
    .map_err(&op)?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM schema_migrations", &[])
        .map_err(&op)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let known = MIGRATIONS.last().map_or(0, |(v, _)| *v);
    if let Some(newer) = applied.iter().find(|v| **v > known) {
        return Err(StoreError::new(
            "migrate the schema",
            format!(
                "the database's schema is version {newer}, newer than this hush-host knows \
                 (up to {known}): run a newer hush-host"
            ),
        ));
    }
    for (version, ddl) in MIGRATIONS {
        if !applied.contains(version) {
            tx.batch_execute(ddl).map_err(&op)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, $2)",
                &[version, &now_ms()],
            )
            .map_err(&op)?;
        }
    }
    tx.commit().map_err(&op)
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user[:password]@host[:port]/db`, or
    /// libpq's `key=value` form) and brings its schema up to date.
    pub fn connect(url: &str) -> StoreResult<Self> {
        let mut config: Config = url.parse().map_err(|e| {
            StoreError::new(
                "read the store URL",
                format!("{e} (expected postgres://user@host:port/database)"),
            )
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let location = describe(&config);
        let mut client = config
            .connect(NoTls)
            .map_err(|e| StoreError::new(&format!("connect to {location}"), e))?;
        migrate(&mut client)?;
        Ok(Self {
            client: RefCell::new(client),
            config,
            location,
            replica: None,
            coordinator: Cell::new(false),
            coordinator_asked: Cell::new(None),
        })
    }

    /// [`PostgresStore::connect`] for a host that runs rounds, as one of the replicas
    /// sharing the database's rounds ([`SharedRounds`]; one of them is the coordinator).
    pub fn connect_as_replica(url: &str) -> StoreResult<Self> {
        let mut store = Self::connect(url)?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        store.replica = Some(format!("{}-{nanos:08x}", std::process::id()));
        Ok(store)
    }

    /// The connection, opened again first if the server closed it.
    fn client(&self) -> StoreResult<RefMut<'_, Client>> {
        let mut client = self.client.borrow_mut();
        if client.is_closed() {
            let fresh = self
                .config
                .connect(NoTls)
                .map_err(|e| StoreError::new(&format!("reconnect to {}", self.location), e))?;
            // The coordinator lock died with the old session.
            self.coordinator.set(false);
            *client = fresh;
        }
        Ok(client)
    }

    /// The connection for a write only the coordinator makes (opening, closing and
    /// releasing rounds): refused on a replica whose session no longer holds the lock,
    /// so that a replica that lost it (a reconnect) cannot act on a round another one
    /// now coordinates.
    fn coordinator_client(&self, op: &str) -> StoreResult<RefMut<'_, Client>> {
        let client = self.client()?;
        if self.replica.is_some() && !self.coordinator.get() {
            return Err(StoreError::new(
                op,
                "this replica is not the coordinator (its database session was lost); \
                 another replica carries on with the round",
            ));
        }
        Ok(client)
    }
}

const ROUND_COLUMNS: &str = "id, model_version, state, opened_at_ms, deadline_ms, population, \
     max_device_id, expected_cohort, closed_at_ms, reason, released_version, selected, \
     accepted, rejected, epsilon_rdp, epsilon_pld";

fn decode_round(r: &Row) -> StoreResult<RoundRow> {
    let id: i64 = r.get(0);
    let state: String = r.get(2);
    Ok(RoundRow {
        id: to_u64(id, "round id")?,
        model_version: to_u64(r.get(1), "model_version")?,
        state: RoundState::parse(&state).ok_or_else(|| {
            StoreError::new("read rounds", format!("round {id} has state {state:?}"))
        })?,
        opened_at_ms: to_u64(r.get(3), "opened_at_ms")?,
        deadline_ms: to_u64(r.get(4), "deadline_ms")?,
        population: to_u64(r.get(5), "population")?,
        max_device_id: to_u64(r.get(6), "max_device_id")?,
        expected_cohort: r.get(7),
        closed_at_ms: opt_u64(r.get(8), "closed_at_ms")?,
        reason: r.get(9),
        released_version: opt_u64(r.get(10), "released_version")?,
        selected: to_u64(r.get(11), "selected")?,
        accepted: to_u64(r.get(12), "accepted")?,
        rejected: to_u64(r.get(13), "rejected")?,
        epsilon_rdp: r.get(14),
        epsilon_pld: r.get(15),
    })
}

const DEVICE_COLUMNS: &str = "id, label, registered_at_ms, enrolment, expires_at_ms, revoked_at_ms";

fn decode_device(r: &Row) -> StoreResult<DeviceRow> {
    Ok(DeviceRow {
        id: to_u64(r.get(0), "device id")?,
        label: r.get(1),
        registered_at_ms: to_u64(r.get(2), "registered_at_ms")?,
        enrolment: opt_u64(r.get(3), "enrolment")?,
        expires_at_ms: opt_u64(r.get(4), "expires_at_ms")?,
        revoked_at_ms: opt_u64(r.get(5), "revoked_at_ms")?,
    })
}

fn ids(rows: Vec<Row>, what: &str) -> StoreResult<Vec<u64>> {
    rows.iter().map(|r| to_u64(r.get(0), what)).collect()
}

/// `UPDATE rounds` with how round `id` ended; refused unless it is open.
fn write_outcome(
    c: &mut impl GenericClient,
    id: u64,
    o: &RoundOutcome,
    now_ms: u64,
) -> StoreResult<()> {
    let changed = c
        .execute(
            "UPDATE rounds SET state = $2, closed_at_ms = $3, reason = $4,
                 released_version = $5, selected = $6, accepted = $7, rejected = $8,
                 epsilon_rdp = $9, epsilon_pld = $10
             WHERE id = $1 AND state IN ('open', 'closing')",
            &[
                &to_i64(id, "round id")?,
                &o.state.as_str(),
                &to_i64(now_ms, "time")?,
                &o.reason,
                &opt_i64(o.released_version, "model version")?,
                &to_i64(o.selected, "selected")?,
                &to_i64(o.accepted, "accepted")?,
                &to_i64(o.rejected, "rejected")?,
                &o.epsilon_rdp,
                &o.epsilon_pld,
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

/// `INSERT INTO model_versions`.
fn write_version(c: &mut impl GenericClient, v: &ModelVersionRow, now_ms: u64) -> StoreResult<()> {
    c.execute(
        "INSERT INTO model_versions (version, round, path, published_at_ms, digest)
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &to_i64(v.version, "model version")?,
            &opt_i64(v.round, "round")?,
            &format!("models/v{}", v.version),
            &to_i64(now_ms, "time")?,
            &v.digest,
        ],
    )
    .map_err(err("add model version"))?;
    Ok(())
}

/// `INSERT INTO model_files` of model `version`.
fn write_files(
    c: &mut impl GenericClient,
    version: u64,
    files: &[(String, Vec<u8>)],
) -> StoreResult<()> {
    let version = to_i64(version, "model version")?;
    for (name, bytes) in files {
        c.execute(
            "INSERT INTO model_files (version, name, bytes) VALUES ($1, $2, $3)",
            &[&version, name, bytes],
        )
        .map_err(err("store model files"))?;
    }
    Ok(())
}

/// Appends `release` to `releases` on `c` (durable when `c`'s transaction commits).
fn append_on(
    c: &mut impl GenericClient,
    release: &Release,
    epsilon_rdp: Option<f64>,
    epsilon_pld: Option<f64>,
    now_ms: i64,
) -> Result<ReleaseRecord, Box<dyn std::error::Error + Send + Sync>> {
    let row = LedgerRow::encode(release, epsilon_rdp, epsilon_pld, now_ms)?;
    let id: i64 = c
        .query_one(
            &format!(
                "INSERT INTO releases ({COLUMNS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                 RETURNING id"
            ),
            &[
                &row.recorded_at_ms,
                &row.mechanism,
                &row.sampling,
                &row.sampling_rate,
                &row.noise_multiplier,
                &row.steps,
                &row.unit,
                &row.adjacency,
                &row.population,
                &row.delta,
                &row.epsilon_rdp,
                &row.epsilon_pld,
                &row.released,
                &row.additional_cost,
            ],
        )?
        .get(0);
    Ok(ReleaseRecord {
        id,
        recorded_at_ms: now_ms,
        release: release.clone(),
        epsilon_rdp,
        epsilon_pld,
    })
}

impl PostgresStore {
    fn ledger_err(
        &self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> LedgerError {
        LedgerError::Store {
            location: self.location.clone(),
            source: source.into(),
        }
    }
}

impl PostgresStore {
    /// After a COMMIT of `op` got no answer (the connection was lost, so the server may or
    /// may not have committed), asks the database on a new connection with `committed`
    /// whether the transaction's effect is there. `Ok(true)`: it committed; an error: it
    /// did not, or that could not be told.
    fn lost_commit(
        &self,
        op: &str,
        lost: postgres::Error,
        committed: impl FnOnce(&mut Client) -> Result<bool, postgres::Error>,
    ) -> StoreResult<()> {
        let unknown = |why: String| {
            StoreError::new(
                op,
                format!("{lost}; whether it committed is unknown: {why}"),
            )
        };
        let found = committed(&mut *self.client().map_err(|e| unknown(e.to_string()))?)
            .map_err(|e| unknown(e.to_string()))?;
        if found {
            tracing::warn!("{op}: the COMMIT got no answer, but the database holds it");
            Ok(())
        } else {
            Err(StoreError::new(
                op,
                format!(
                    "{lost}; the connection was lost and the database shows it was not \
                     committed (nothing recorded)"
                ),
            ))
        }
    }
}

impl LedgerStore for PostgresStore {
    fn append(
        &mut self,
        release: &Release,
        epsilon_rdp: Option<f64>,
        epsilon_pld: Option<f64>,
    ) -> Result<ReleaseRecord, LedgerError> {
        let mut client = self.client().map_err(|e| self.ledger_err(e))?;
        append_on(&mut *client, release, epsilon_rdp, epsilon_pld, now_ms()).map_err(|e| {
            match e.downcast::<LedgerError>() {
                Ok(ledger) => *ledger,
                Err(other) => self.ledger_err(other),
            }
        })
    }

    fn records(&self) -> Result<Vec<ReleaseRecord>, LedgerError> {
        let mut client = self.client().map_err(|e| self.ledger_err(e))?;
        let rows = client
            .query(
                &format!("SELECT id, {COLUMNS} FROM releases ORDER BY id"),
                &[],
            )
            .map_err(|e| self.ledger_err(e))?;
        rows.iter()
            .map(|r| {
                LedgerRow {
                    id: r.get(0),
                    recorded_at_ms: r.get(1),
                    mechanism: r.get(2),
                    sampling: r.get(3),
                    sampling_rate: r.get(4),
                    noise_multiplier: r.get(5),
                    steps: r.get(6),
                    unit: r.get(7),
                    adjacency: r.get(8),
                    population: r.get(9),
                    delta: r.get(10),
                    epsilon_rdp: r.get(11),
                    epsilon_pld: r.get(12),
                    released: r.get(13),
                    additional_cost: r.get(14),
                }
                .decode()
            })
            .collect()
    }
}

impl Store for PostgresStore {
    fn cohort_key(&mut self, fresh: [u8; 32]) -> StoreResult<[u8; 32]> {
        let mut c = self.client()?;
        c.execute(
            "INSERT INTO host (key, value) VALUES ('cohort_key', $1) ON CONFLICT (key) DO NOTHING",
            &[&&fresh[..]],
        )
        .map_err(err("store cohort key"))?;
        let stored: Vec<u8> = c
            .query_one("SELECT value FROM host WHERE key = 'cohort_key'", &[])
            .map_err(err("read cohort key"))?
            .get(0);
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
        let id: i64 = self
            .client()?
            .query_one(
                "INSERT INTO enrolments (token_hash, label, quota, used, created_at_ms,
                     expires_at_ms) VALUES ($1, $2, $3, 0, $4, $5) RETURNING id",
                &[
                    &token_hash,
                    &label,
                    &to_i64(quota, "quota")?,
                    &to_i64(now_ms, "time")?,
                    &to_i64(expires_at_ms, "expiry")?,
                ],
            )
            .map_err(err("add enrolment token"))?
            .get(0);
        to_u64(id, "enrolment id")
    }

    fn enrol_device(
        &mut self,
        d: &NewDevice<'_>,
        now_ms: u64,
    ) -> StoreResult<Result<u64, EnrolRefusal>> {
        let now = to_i64(now_ms, "time")?;
        let expires = to_i64(d.expires_at_ms, "expiry")?;
        let op = err("enrol device");
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(&op)?;
        // FOR UPDATE: the seat count is read and taken under the row's lock, so two
        // replicas (or a host and the CLI) cannot both take the last seat.
        let found = tx
            .query_opt(
                "SELECT id, quota, used, expires_at_ms, revoked_at_ms FROM enrolments
                 WHERE token_hash = $1 FOR UPDATE",
                &[&d.enrolment_hash],
            )
            .map_err(&op)?;
        let Some(row) = found else {
            return Ok(Err(EnrolRefusal::Unknown));
        };
        let (enrolment, quota, used): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        if row.get::<_, Option<i64>>(4).is_some() {
            return Ok(Err(EnrolRefusal::Revoked));
        }
        if now >= row.get::<_, i64>(3) {
            return Ok(Err(EnrolRefusal::Expired));
        }
        if used >= quota {
            return Ok(Err(EnrolRefusal::QuotaUsed {
                quota: to_u64(quota, "quota")?,
            }));
        }
        tx.execute(
            "UPDATE enrolments SET used = used + 1 WHERE id = $1",
            &[&enrolment],
        )
        .map_err(&op)?;
        let id: i64 = tx
            .query_one(
                "INSERT INTO devices (token_hash, label, registered_at_ms, enrolment,
                     expires_at_ms) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                &[&d.token_hash, &d.label, &now, &enrolment, &expires],
            )
            .map_err(&op)?
            .get(0);
        tx.commit().map_err(&op)?;
        Ok(Ok(to_u64(id, "device id")?))
    }

    fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<DeviceRow>> {
        self.client()?
            .query_opt(
                &format!("SELECT {DEVICE_COLUMNS} FROM devices WHERE token_hash = $1"),
                &[&token_hash],
            )
            .map_err(err("look up token"))?
            .map(|r| decode_device(&r))
            .transpose()
    }

    fn devices(&self, now_ms: u64) -> StoreResult<(u64, u64)> {
        let row = self
            .client()?
            .query_one(
                "SELECT COUNT(*), MAX(id) FROM devices WHERE revoked_at_ms IS NULL
                     AND (expires_at_ms IS NULL OR expires_at_ms > $1)",
                &[&to_i64(now_ms, "time")?],
            )
            .map_err(err("count devices"))?;
        Ok((
            to_u64(row.get(0), "device count")?,
            to_u64(row.get::<_, Option<i64>>(1).unwrap_or(0), "device id")?,
        ))
    }

    fn active_devices(&self, now_ms: u64) -> StoreResult<Vec<u64>> {
        let rows = self
            .client()?
            .query(
                "SELECT id FROM devices WHERE revoked_at_ms IS NULL
                     AND (expires_at_ms IS NULL OR expires_at_ms > $1) ORDER BY id",
                &[&to_i64(now_ms, "time")?],
            )
            .map_err(err("list active devices"))?;
        ids(rows, "device id")
    }

    fn device_list(&self) -> StoreResult<Vec<DeviceRow>> {
        let rows = self
            .client()?
            .query(
                &format!("SELECT {DEVICE_COLUMNS} FROM devices ORDER BY id"),
                &[],
            )
            .map_err(err("list devices"))?;
        rows.iter().map(decode_device).collect()
    }

    fn enrolments(&self) -> StoreResult<Vec<EnrolmentRow>> {
        let rows = self
            .client()?
            .query(
                "SELECT id, label, quota, used, created_at_ms, expires_at_ms, revoked_at_ms
                 FROM enrolments ORDER BY id",
                &[],
            )
            .map_err(err("list enrolments"))?;
        rows.iter()
            .map(|r| {
                Ok(EnrolmentRow {
                    id: to_u64(r.get(0), "enrolment id")?,
                    label: r.get(1),
                    quota: to_u64(r.get(2), "quota")?,
                    used: to_u64(r.get(3), "used")?,
                    created_at_ms: to_u64(r.get(4), "created_at_ms")?,
                    expires_at_ms: to_u64(r.get(5), "expires_at_ms")?,
                    revoked_at_ms: opt_u64(r.get(6), "revoked_at_ms")?,
                })
            })
            .collect()
    }

    fn revoke_device(&mut self, id: u64, now_ms: u64) -> StoreResult<bool> {
        let n = self
            .client()?
            .execute(
                "UPDATE devices SET revoked_at_ms = $2 WHERE id = $1 AND revoked_at_ms IS NULL",
                &[&to_i64(id, "device id")?, &to_i64(now_ms, "time")?],
            )
            .map_err(err("revoke device"))?;
        Ok(n == 1)
    }

    fn revoke_enrolment(&mut self, id: u64, now_ms: u64) -> StoreResult<bool> {
        let n = self
            .client()?
            .execute(
                "UPDATE enrolments SET revoked_at_ms = $2 WHERE id = $1 AND revoked_at_ms IS NULL",
                &[&to_i64(id, "enrolment id")?, &to_i64(now_ms, "time")?],
            )
            .map_err(err("revoke enrolment"))?;
        Ok(n == 1)
    }

    fn open_round(&mut self, r: &RoundRow, cohort: &[u64]) -> StoreResult<()> {
        let id = to_i64(r.id, "round id")?;
        let opened = to_i64(r.opened_at_ms, "time")?;
        let members = cohort
            .iter()
            .map(|&d| to_i64(d, "device"))
            .collect::<StoreResult<Vec<i64>>>()?;
        let op = err("open round");
        let mut c = self.coordinator_client("open round")?;
        let mut tx = c.transaction().map_err(&op)?;
        tx.execute(
            "INSERT INTO rounds (id, model_version, state, opened_at_ms, deadline_ms,
                 population, max_device_id, expected_cohort, selected)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &id,
                &to_i64(r.model_version, "model version")?,
                &r.state.as_str(),
                &opened,
                &to_i64(r.deadline_ms, "deadline")?,
                &to_i64(r.population, "population")?,
                &to_i64(r.max_device_id, "device id")?,
                &r.expected_cohort,
                &to_i64(cohort.len() as u64, "cohort size")?,
            ],
        )
        .map_err(&op)?;
        // The whole cohort in one statement (a round of a large fleet draws thousands).
        tx.execute(
            "INSERT INTO cohort (round, device, drawn_at_ms)
             SELECT $1, device, $2 FROM unnest($3::BIGINT[]) AS device",
            &[&id, &opened, &members],
        )
        .map_err(err("record cohort"))?;
        match tx.commit() {
            Ok(()) => Ok(()),
            // Committed unless the round is missing: without asking, the engine would try
            // to open the same round again, and fail on its id, for ever.
            Err(e) if c.is_closed() => {
                drop(c);
                self.lost_commit("open round", e, |client| {
                    Ok(client
                        .query_opt("SELECT 1 FROM rounds WHERE id = $1", &[&id])?
                        .is_some())
                })
            }
            Err(e) => Err(op(e)),
        }
    }

    fn rounds(&self) -> StoreResult<Vec<RoundRow>> {
        let rows = self
            .client()?
            .query(
                &format!("SELECT {ROUND_COLUMNS} FROM rounds ORDER BY id"),
                &[],
            )
            .map_err(err("read rounds"))?;
        rows.iter().map(decode_round).collect()
    }

    fn close_round(&mut self, id: u64, outcome: &RoundOutcome, now_ms: u64) -> StoreResult<()> {
        write_outcome(
            &mut *self.coordinator_client("close round")?,
            id,
            outcome,
            now_ms,
        )
    }

    fn cohort(&self, round: u64) -> StoreResult<Vec<u64>> {
        let rows = self
            .client()?
            .query(
                "SELECT device FROM cohort WHERE round = $1 ORDER BY device",
                &[&to_i64(round, "round")?],
            )
            .map_err(err("read cohort"))?;
        ids(rows, "device")
    }

    fn accepted_key(&self, key: &str) -> StoreResult<Option<u64>> {
        let round: Option<i64> = self
            .client()?
            .query_opt(
                "SELECT round FROM reports WHERE idempotency_key = $1 AND status = 'accepted'",
                &[&key],
            )
            .map_err(err("look up idempotency key"))?
            .map(|r| r.get(0));
        opt_u64(round, "round")
    }

    fn record_report(&mut self, r: &ReportRow, now_ms: u64) -> StoreResult<()> {
        let op = err("record report");
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(&op)?;
        // Only this transaction skips waiting for the WAL flush (see the module docs).
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .map_err(&op)?;
        tx.execute(
            "INSERT INTO reports (round, device, idempotency_key, status, reason, bytes,
                 received_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &to_i64(r.round, "round")?,
                &to_i64(r.device, "device")?,
                &r.idempotency_key,
                &if r.accepted { "accepted" } else { "rejected" },
                &r.reason,
                &to_i64(r.bytes, "bytes")?,
                &to_i64(now_ms, "time")?,
            ],
        )
        .map_err(&op)?;
        match tx.commit() {
            Ok(()) => Ok(()),
            // An accepted report whose COMMIT went unanswered: if its key is in the
            // database, the engine must count the update (a retry would be told
            // "duplicate" and never sent again).
            Err(e) if c.is_closed() => {
                drop(c);
                match &r.idempotency_key {
                    Some(key) => self.lost_commit("record report", e, |client| {
                        Ok(client
                            .query_opt("SELECT 1 FROM reports WHERE idempotency_key = $1", &[key])?
                            .is_some())
                    }),
                    None => Err(StoreError::new("record report", e)),
                }
            }
            Err(e) => Err(op(e)),
        }
    }

    fn rejected_total(&self) -> StoreResult<u64> {
        let n: i64 = self
            .client()?
            .query_one(
                "SELECT COUNT(*) FROM reports WHERE status = 'rejected'",
                &[],
            )
            .map_err(err("count rejected reports"))?
            .get(0);
        to_u64(n, "count")
    }

    fn add_initial_version(&mut self, version: &ModelVersionRow, now_ms: u64) -> StoreResult<()> {
        write_version(&mut *self.client()?, version, now_ms)
    }

    fn model_versions(&self) -> StoreResult<Vec<ModelVersionRow>> {
        let rows = self
            .client()?
            .query(
                "SELECT version, round, digest FROM model_versions ORDER BY version",
                &[],
            )
            .map_err(err("read model versions"))?;
        rows.iter()
            .map(|r| {
                Ok(ModelVersionRow {
                    version: to_u64(r.get(0), "model version")?,
                    round: opt_u64(r.get(1), "round")?,
                    digest: r.get(2),
                })
            })
            .collect()
    }

    fn commit_release(&mut self, c: &ReleaseCommit) -> StoreResult<Option<ReleaseRecord>> {
        let now = to_i64(c.now_ms, "time")?;
        let mut client = self.coordinator_client("commit release")?;
        let mut tx = client.transaction().map_err(err("begin release"))?;
        let record = match &c.ledger {
            Some(sealed) => Some(
                append_on(
                    &mut tx,
                    sealed.release(),
                    sealed.epsilon_rdp(),
                    sealed.epsilon_pld(),
                    now,
                )
                .map_err(|e| StoreError::new("ledger", e))?,
            ),
            None => None,
        };
        write_outcome(&mut tx, c.round, &c.outcome, c.now_ms)?;
        write_version(&mut tx, &c.version, c.now_ms)?;
        write_files(&mut tx, c.version.version, &c.files)?;
        match tx.commit() {
            Ok(()) => Ok(record),
            // The connection died with the COMMIT in flight: the server may have committed.
            // Without asking, a host could abandon (and delete the files of) a release the
            // ledger holds. Committed means round `c.round` released as `c.version`.
            Err(e) if client.is_closed() => {
                drop(client);
                let (round, version) = (
                    to_i64(c.round, "round id")?,
                    to_i64(c.version.version, "model version")?,
                );
                self.lost_commit("commit release", e, |client| {
                    Ok(client
                        .query_opt(
                            "SELECT 1 FROM rounds WHERE id = $1 AND state = 'released'
                                 AND released_version = $2",
                            &[&round, &version],
                        )?
                        .is_some())
                })?;
                Ok(record)
            }
            Err(e) => Err(StoreError::new("commit release", e)),
        }
    }

    fn shared_rounds(&self) -> Option<&dyn SharedRounds> {
        self.replica.as_ref().map(|_| self as &dyn SharedRounds)
    }
}

impl SharedRounds for PostgresStore {
    fn replica(&self) -> &str {
        self.replica.as_deref().unwrap_or("")
    }

    fn db_now_ms(&self) -> StoreResult<u64> {
        let now: i64 = self
            .client()?
            .query_one(
                "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
                &[],
            )
            .map_err(err("read the database's clock"))?
            .get(0);
        to_u64(now, "the database's clock")
    }

    fn coordinate(&self) -> StoreResult<bool> {
        if self
            .coordinator_asked
            .get()
            .is_some_and(|t| t.elapsed() < COORDINATOR_RECHECK)
            && !self.client.borrow().is_closed()
        {
            return Ok(self.coordinator.get());
        }
        self.coordinator_asked.set(Some(Instant::now()));
        // A session that died unnoticed (a database restart) shows only when used: ask
        // on it, and if it turns out closed, once more on a new one (without the lock).
        for _ in 0..2 {
            let mut client = self.client()?;
            let asked = if self.coordinator.get() {
                client.query_one("SELECT true", &[])
            } else {
                // Session-level: held until this connection ends, when the next replica
                // to ask takes it.
                client.query_one("SELECT pg_try_advisory_lock($1)", &[&COORDINATOR_LOCK])
            };
            match asked {
                Ok(row) => {
                    let holds: bool = row.get(0);
                    if holds && !self.coordinator.get() {
                        tracing::info!(replica = self.replica(), "this replica is the coordinator");
                    }
                    self.coordinator.set(holds);
                    return Ok(holds);
                }
                Err(_) if client.is_closed() => continue,
                Err(e) => return Err(StoreError::new("take the coordinator lock", e)),
            }
        }
        Err(StoreError::new(
            "take the coordinator lock",
            format!("the connection to {} closed twice", self.location),
        ))
    }

    fn current_round(&self) -> StoreResult<Option<RoundRow>> {
        self.client()?
            .query_opt(
                &format!(
                    "SELECT {ROUND_COLUMNS} FROM rounds WHERE state IN ('open', 'closing')
                     ORDER BY id DESC LIMIT 1"
                ),
                &[],
            )
            .map_err(err("read the current round"))?
            .map(|r| decode_round(&r))
            .transpose()
    }

    fn has_reported(&self, round: u64, device: u64) -> StoreResult<bool> {
        Ok(self
            .client()?
            .query_opt(
                "SELECT 1 FROM reports WHERE round = $1 AND device = $2 AND status = 'accepted'",
                &[&to_i64(round, "round")?, &to_i64(device, "device")?],
            )
            .map_err(err("look up a device's report"))?
            .is_some())
    }

    fn add_to_partial(
        &self,
        reports: &[ReportRow],
        partial: &mut dyn FnMut(&[Added]) -> PartialSum,
        now_ms: u64,
    ) -> StoreResult<Vec<Added>> {
        let op = err("add to the partial sum");
        let Some(first) = reports.first() else {
            return Ok(Vec::new());
        };
        if reports.iter().any(|r| r.round != first.round) {
            return Err(StoreError::new(
                "add to the partial sum",
                "the uploads of one transaction belong to two rounds",
            ));
        }
        let round = to_i64(first.round, "round")?;
        let now = to_i64(now_ms, "time")?;
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(&op)?;
        // FOR SHARE: uploads proceed side by side, and the coordinator's close (an UPDATE
        // of this row) waits for those in flight; later ones find the round closing.
        let state: Option<String> = tx
            .query_opt(
                "SELECT state FROM rounds WHERE id = $1 FOR SHARE",
                &[&round],
            )
            .map_err(&op)?
            .map(|row| row.get(0));
        if state.as_deref() != Some("open") {
            return Ok(vec![Added::Closed; reports.len()]);
        }
        let mut outcomes = Vec::with_capacity(reports.len());
        for r in reports {
            // A unique key, and one accepted report per device and round (a partial
            // unique index), whichever replica the device reached.
            let inserted = tx
                .query_opt(
                    "INSERT INTO reports (round, device, idempotency_key, status, reason,
                         bytes, received_at_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT DO NOTHING RETURNING id",
                    &[
                        &round,
                        &to_i64(r.device, "device")?,
                        &r.idempotency_key,
                        &if r.accepted { "accepted" } else { "rejected" },
                        &r.reason,
                        &to_i64(r.bytes, "bytes")?,
                        &now,
                    ],
                )
                .map_err(&op)?;
            outcomes.push(if inserted.is_some() {
                Added::Counted
            } else if tx
                .query_opt(
                    "SELECT 1 FROM reports WHERE idempotency_key = $1",
                    &[&r.idempotency_key],
                )
                .map_err(&op)?
                .is_some()
            {
                Added::Duplicate
            } else {
                Added::AlreadyReported
            });
        }
        if outcomes.contains(&Added::Counted) {
            let p = partial(&outcomes);
            tx.execute(
                "INSERT INTO partial_sums (round, replica, accepted, rejected, sum,
                     updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (round, replica) DO UPDATE SET accepted = EXCLUDED.accepted,
                     rejected = EXCLUDED.rejected, sum = EXCLUDED.sum,
                     updated_at_ms = EXCLUDED.updated_at_ms",
                &[
                    &round,
                    &p.replica,
                    &to_i64(p.accepted, "accepted")?,
                    &to_i64(p.rejected, "rejected")?,
                    &p.sum,
                    &now,
                ],
            )
            .map_err(&op)?;
        }
        match tx.commit() {
            Ok(()) => Ok(outcomes),
            // Unanswered: the reports and the sum went in together or not at all; an
            // accepted report's key tells which.
            Err(e) if c.is_closed() => {
                drop(c);
                let counted_key = reports
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, o)| **o == Added::Counted)
                    .find_map(|(r, _)| r.idempotency_key.clone());
                match counted_key {
                    Some(key) => self
                        .lost_commit("add to the partial sum", e, |client| {
                            Ok(client
                                .query_opt(
                                    "SELECT 1 FROM reports WHERE idempotency_key = $1",
                                    &[&key],
                                )?
                                .is_some())
                        })
                        .map(|()| outcomes),
                    None => Err(StoreError::new("add to the partial sum", e)),
                }
            }
            Err(e) => Err(op(e)),
        }
    }

    fn reported(&self, round: u64) -> StoreResult<u64> {
        let n: i64 = self
            .client()?
            .query_one(
                "SELECT COALESCE(SUM(accepted + rejected), 0)::BIGINT FROM partial_sums
                 WHERE round = $1",
                &[&to_i64(round, "round")?],
            )
            .map_err(err("count reports"))?
            .get(0);
        to_u64(n, "count")
    }

    fn begin_close(&self, round: u64) -> StoreResult<bool> {
        let n = self
            .coordinator_client("close uploads")?
            .execute(
                "UPDATE rounds SET state = 'closing' WHERE id = $1 AND state = 'open'",
                &[&to_i64(round, "round")?],
            )
            .map_err(err("close uploads"))?;
        Ok(n == 1)
    }

    fn partial_sums(&self, round: u64) -> StoreResult<Vec<PartialSum>> {
        let rows = self
            .client()?
            .query(
                "SELECT replica, accepted, rejected, sum FROM partial_sums WHERE round = $1
                 ORDER BY replica",
                &[&to_i64(round, "round")?],
            )
            .map_err(err("read partial sums"))?;
        rows.iter()
            .map(|r| {
                Ok(PartialSum {
                    replica: r.get(0),
                    accepted: to_u64(r.get(1), "accepted")?,
                    rejected: to_u64(r.get(2), "rejected")?,
                    sum: r.get(3),
                })
            })
            .collect()
    }

    fn publish_initial(
        &self,
        v: &ModelVersionRow,
        files: &[(String, Vec<u8>)],
        now_ms: u64,
    ) -> StoreResult<ModelVersionRow> {
        let op = err("publish the initial model");
        let version = to_i64(v.version, "model version")?;
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(&op)?;
        let inserted = tx
            .execute(
                "INSERT INTO model_versions (version, round, path, published_at_ms, digest)
                 VALUES ($1, NULL, $2, $3, $4) ON CONFLICT (version) DO NOTHING",
                &[
                    &version,
                    &format!("models/v{}", v.version),
                    &to_i64(now_ms, "time")?,
                    &v.digest,
                ],
            )
            .map_err(&op)?;
        if inserted == 1 {
            write_files(&mut tx, v.version, files)?;
        }
        let digest: String = tx
            .query_one(
                "SELECT digest FROM model_versions WHERE version = $1",
                &[&version],
            )
            .map_err(&op)?
            .get(0);
        tx.commit().map_err(&op)?;
        Ok(ModelVersionRow {
            version: v.version,
            round: None,
            digest,
        })
    }

    fn model_files(&self, version: u64) -> StoreResult<Vec<(String, Vec<u8>)>> {
        let rows = self
            .client()?
            .query(
                "SELECT name, bytes FROM model_files WHERE version = $1 ORDER BY name",
                &[&to_i64(version, "model version")?],
            )
            .map_err(err("read model files"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}
