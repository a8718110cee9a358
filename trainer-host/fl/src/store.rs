//! The round engine's durable state behind one trait, [`Store`]: devices, rounds, cohort
//! draws, reports, model versions and — through its [`LedgerStore`] half — the privacy
//! ledger, so that a release is **one transaction** ([`Store::commit_release`]).
//!
//! The trait is synchronous: the engine is CPU work plus a few small writes per request,
//! and an async trait would force a runtime on the simulator and every test. A server
//! calls the engine on blocking threads. `hush-store` implements it on SQLite (WAL, one
//! writer); a PostgreSQL store can implement the same trait with a blocking client
//! (docs/design/round-engine.md).

use hush_privacy::ledger::{LedgerStore, ReleaseRecord, SealedRelease};

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
#[error("round store ({op}): {source}")]
pub struct StoreError {
    /// What was being done.
    pub op: String,
    /// The underlying error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl StoreError {
    /// An error of `op` caused by `source`.
    pub fn new(op: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            op: op.to_string(),
            source: source.into(),
        }
    }
}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// State of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundState {
    /// Taking check-ins and uploads.
    Open,
    /// No longer taking uploads; its coordinator is releasing it (rounds shared by several
    /// replicas only: the partial sums are final, and a replica that takes over the
    /// coordinator's lock finishes the release from them).
    Closing,
    /// Closed, noised, recorded in the ledger and published.
    Released,
    /// Closed without a release (too few reports, host restart, budget): no ε spent.
    Abandoned,
    /// Recorded in the ledger (ε spent) but the model could not be published (written only
    /// by hosts before the one-transaction release; read back from their stores).
    ReleaseFailed,
}

impl RoundState {
    /// The state's name in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closing => "closing",
            Self::Released => "released",
            Self::Abandoned => "abandoned",
            Self::ReleaseFailed => "release_failed",
        }
    }

    /// The state named `s` (as [`RoundState::as_str`] writes it).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "open" => Self::Open,
            "closing" => Self::Closing,
            "released" => Self::Released,
            "abandoned" => Self::Abandoned,
            "release_failed" => Self::ReleaseFailed,
            _ => return None,
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
    pub opened_at_ms: u64,
    /// Deadline (Unix ms).
    pub deadline_ms: u64,
    /// Devices registered when it opened.
    pub population: u64,
    /// Highest eligible device id.
    pub max_device_id: u64,
    /// `q × population`.
    pub expected_cohort: f64,
    /// Closing time.
    pub closed_at_ms: Option<u64>,
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

/// One published model version: its number, the round that released it (`None` for v0)
/// and the SHA-256 of its files ([`crate::publish::digest`]), by which a restart
/// recognises its staged copy.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelVersionRow {
    /// Version number (0 = the initial model).
    pub version: u64,
    /// The round that released it.
    pub round: Option<u64>,
    /// SHA-256 hex of its files (empty for versions published before digests were kept).
    pub digest: String,
}

/// A registered device as the store keeps it (its token only as a hash).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceRow {
    /// Device id (1, 2, …, never reused).
    pub id: u64,
    /// The label it registered with.
    pub label: String,
    /// Registration time (Unix ms).
    pub registered_at_ms: u64,
    /// The enrolment token it registered with (`None` for devices registered before
    /// enrolment existed).
    pub enrolment: Option<u64>,
    /// When its token stops working (`None`: never, for devices registered before tokens
    /// expired).
    pub expires_at_ms: Option<u64>,
    /// When the operator revoked it.
    pub revoked_at_ms: Option<u64>,
}

impl DeviceRow {
    /// Whether its token is accepted at `now_ms`.
    pub fn active(&self, now_ms: u64) -> bool {
        self.revoked_at_ms.is_none() && self.expires_at_ms.is_none_or(|e| now_ms < e)
    }
}

/// An enrolment token the operator issued (kept only as a hash).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EnrolmentRow {
    /// Enrolment id.
    pub id: u64,
    /// What the operator called it.
    pub label: String,
    /// Devices it may register.
    pub quota: u64,
    /// Devices it has registered.
    pub used: u64,
    /// Issue time (Unix ms).
    pub created_at_ms: u64,
    /// After this no device registers with it (Unix ms).
    pub expires_at_ms: u64,
    /// When the operator revoked it.
    pub revoked_at_ms: Option<u64>,
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnrolRefusal {
    /// No enrolment token has that hash.
    #[error("the enrolment token is not one this host issued")]
    Unknown,
    /// The operator revoked it.
    #[error("the enrolment token was revoked")]
    Revoked,
    /// Past its expiry.
    #[error("the enrolment token has expired")]
    Expired,
    /// Every seat it had is taken.
    #[error("the enrolment token's quota of {quota} devices is used up")]
    QuotaUsed {
        /// Its quota.
        quota: u64,
    },
}

/// A new device, as [`Store::enrol_device`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDevice<'a> {
    /// SHA-256 hex of the enrolment token presented.
    pub enrolment_hash: &'a str,
    /// The device's label.
    pub label: &'a str,
    /// SHA-256 hex of the device token issued.
    pub token_hash: &'a str,
    /// When the device token expires (Unix ms).
    pub expires_at_ms: u64,
}

/// Everything a release changes, committed together by [`Store::commit_release`].
#[derive(Debug, Clone)]
pub struct ReleaseCommit {
    /// The round released.
    pub round: u64,
    /// How it ended (state `Released`).
    pub outcome: RoundOutcome,
    /// The ledger record (`None` for a non-private run).
    pub ledger: Option<SealedRelease>,
    /// The new model version.
    pub version: ModelVersionRow,
    /// When.
    pub now_ms: u64,
    /// The new version's files (name, bytes), for a store that serves them to several
    /// replicas ([`SharedRounds`]); empty for a host that keeps them only on its disk.
    pub files: Vec<(String, Vec<u8>)>,
}

/// One replica's share of a round's sum, as [`SharedRounds::add_to_partial`] keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialSum {
    /// The replica that holds it.
    pub replica: String,
    /// Updates in it.
    pub accepted: u64,
    /// Cohort members whose update it refused as malformed (they have reported).
    pub rejected: u64,
    /// The sum on the aggregator's fixed-point grid
    /// ([`crate::aggregate::Aggregator::to_bytes`]).
    pub sum: Vec<u8>,
}

/// What became of an upload offered to [`SharedRounds::add_to_partial`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Its report is committed, and (an accepted update) so is the partial sum holding it.
    Counted,
    /// Its idempotency key was already accepted (by any replica): a duplicate.
    Duplicate,
    /// The device already has an accepted update in the round (under another key).
    AlreadyReported,
    /// The round is no longer open: nothing was written.
    Closed,
}

/// Rounds that several host replicas share through one database (docs/design/replicas.md):
/// each replica adds the uploads it accepts into its own partial sum, durable before the
/// device hears 200; one replica at a time — the coordinator, holding a lock in the
/// database — opens rounds and releases them from every partial sum; deadlines are read
/// from the database's clock. Implemented by the PostgreSQL store.
pub trait SharedRounds {
    /// This replica's name among the partial sums (unique to the process).
    fn replica(&self) -> &str;
    /// The database's clock (Unix ms), which deadlines are set and compared by.
    fn db_now_ms(&self) -> StoreResult<u64>;
    /// Whether this replica is the coordinator: it holds the coordinator lock, or takes it
    /// now if no live replica does.
    fn coordinate(&self) -> StoreResult<bool>;
    /// The round not yet ended (open or closing), if any.
    fn current_round(&self) -> StoreResult<Option<RoundRow>>;
    /// Whether `device` has an accepted update in `round`.
    fn has_reported(&self, round: u64, device: u64) -> StoreResult<bool>;
    /// One transaction, only while the round is open (else every report is `Closed` and
    /// nothing is written): records `reports` of one round — accepted updates, or cohort
    /// members' malformed ones — each as [`Added`] says, then, if any was recorded,
    /// replaces this replica's partial sum of the round with `partial(&outcomes)`: the sum
    /// holding exactly the updates recorded. Several uploads in one transaction is the
    /// replica's group commit.
    fn add_to_partial(
        &self,
        reports: &[ReportRow],
        partial: &mut dyn FnMut(&[Added]) -> PartialSum,
        now_ms: u64,
    ) -> StoreResult<Vec<Added>>;
    /// Cohort members that have reported in `round`, over every replica (accepted
    /// updates and refused malformed ones).
    fn reported(&self, round: u64) -> StoreResult<u64>;
    /// Ends round `round`'s uploads (open → closing), after those in flight commit;
    /// `false` if it was not open.
    fn begin_close(&self, round: u64) -> StoreResult<bool>;
    /// Every replica's partial sum of `round`.
    fn partial_sums(&self, round: u64) -> StoreResult<Vec<PartialSum>>;
    /// Records the initial model v0 with its files unless a replica already has, in one
    /// transaction; returns the row stored (whoever wrote it).
    fn publish_initial(
        &self,
        version: &ModelVersionRow,
        files: &[(String, Vec<u8>)],
        now_ms: u64,
    ) -> StoreResult<ModelVersionRow>;
    /// The files of model `version` (name, bytes), as its release stored them.
    fn model_files(&self, version: u64) -> StoreResult<Vec<(String, Vec<u8>)>>;
}

/// Durable state of the round engine. Each method is one transaction.
pub trait Store: LedgerStore + Send {
    /// The cohort key: the stored one, or `fresh` stored now if there is none yet.
    fn cohort_key(&mut self, fresh: [u8; 32]) -> StoreResult<[u8; 32]>;
    /// Issues an enrolment token (stored as its hash) for `quota` devices until
    /// `expires_at_ms`; returns its id.
    fn add_enrolment(
        &mut self,
        token_hash: &str,
        label: &str,
        quota: u64,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> StoreResult<u64>;
    /// One transaction: checks the enrolment token (known, not revoked, not expired, a seat
    /// left), takes a seat and adds the device. Returns its id, or why not.
    fn enrol_device(
        &mut self,
        device: &NewDevice<'_>,
        now_ms: u64,
    ) -> StoreResult<Result<u64, EnrolRefusal>>;
    /// The device holding the token with this hash (revoked and expired ones too).
    fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<DeviceRow>>;
    /// `(count, highest id)` of the devices active at `now_ms` (not revoked, not expired).
    fn devices(&self, now_ms: u64) -> StoreResult<(u64, u64)>;
    /// Ids of the devices active at `now_ms`, ascending.
    fn active_devices(&self, now_ms: u64) -> StoreResult<Vec<u64>>;
    /// Every device, by id.
    fn device_list(&self) -> StoreResult<Vec<DeviceRow>>;
    /// Every enrolment token, by id.
    fn enrolments(&self) -> StoreResult<Vec<EnrolmentRow>>;
    /// Revokes device `id`'s token; `false` if there is no such device or it was revoked.
    fn revoke_device(&mut self, id: u64, now_ms: u64) -> StoreResult<bool>;
    /// Revokes enrolment token `id` (its devices keep theirs); `false` if there is none or
    /// it was revoked.
    fn revoke_enrolment(&mut self, id: u64, now_ms: u64) -> StoreResult<bool>;
    /// One transaction: a newly opened round and its cohort, the devices drawn into it
    /// (ascending), written together when the round opens.
    fn open_round(&mut self, round: &RoundRow, cohort: &[u64]) -> StoreResult<()>;
    /// Every round, by id.
    fn rounds(&self) -> StoreResult<Vec<RoundRow>>;
    /// Records how a round ended without a release (abandoned).
    fn close_round(&mut self, id: u64, outcome: &RoundOutcome, now_ms: u64) -> StoreResult<()>;
    /// The devices drawn into round `round`'s cohort, ascending.
    fn cohort(&self, round: u64) -> StoreResult<Vec<u64>>;
    /// The round of an accepted report with this idempotency key.
    fn accepted_key(&self, key: &str) -> StoreResult<Option<u64>>;
    /// Logs a report.
    fn record_report(&mut self, report: &ReportRow, now_ms: u64) -> StoreResult<()>;
    /// Rejected reports over the whole run.
    fn rejected_total(&self) -> StoreResult<u64>;
    /// Records the initial model, v0.
    fn add_initial_version(&mut self, version: &ModelVersionRow, now_ms: u64) -> StoreResult<()>;
    /// Every published model version, by number.
    fn model_versions(&self) -> StoreResult<Vec<ModelVersionRow>>;
    /// One transaction: the ledger record (if any), the round's outcome and the new model
    /// version — all of them or none. Returns the ledger record.
    fn commit_release(&mut self, release: &ReleaseCommit) -> StoreResult<Option<ReleaseRecord>>;
    /// The store's side of rounds shared by several replicas, if it has one.
    fn shared_rounds(&self) -> Option<&dyn SharedRounds> {
        None
    }
}

/// A boxed store (one chosen at run time, `Box<dyn Store>`: SQLite or PostgreSQL) is a
/// store.
impl<T: Store + ?Sized> Store for Box<T> {
    fn cohort_key(&mut self, fresh: [u8; 32]) -> StoreResult<[u8; 32]> {
        (**self).cohort_key(fresh)
    }
    fn add_enrolment(
        &mut self,
        token_hash: &str,
        label: &str,
        quota: u64,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> StoreResult<u64> {
        (**self).add_enrolment(token_hash, label, quota, expires_at_ms, now_ms)
    }
    fn enrol_device(
        &mut self,
        device: &NewDevice<'_>,
        now_ms: u64,
    ) -> StoreResult<Result<u64, EnrolRefusal>> {
        (**self).enrol_device(device, now_ms)
    }
    fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<DeviceRow>> {
        (**self).device_by_token_hash(token_hash)
    }
    fn devices(&self, now_ms: u64) -> StoreResult<(u64, u64)> {
        (**self).devices(now_ms)
    }
    fn active_devices(&self, now_ms: u64) -> StoreResult<Vec<u64>> {
        (**self).active_devices(now_ms)
    }
    fn device_list(&self) -> StoreResult<Vec<DeviceRow>> {
        (**self).device_list()
    }
    fn enrolments(&self) -> StoreResult<Vec<EnrolmentRow>> {
        (**self).enrolments()
    }
    fn revoke_device(&mut self, id: u64, now_ms: u64) -> StoreResult<bool> {
        (**self).revoke_device(id, now_ms)
    }
    fn revoke_enrolment(&mut self, id: u64, now_ms: u64) -> StoreResult<bool> {
        (**self).revoke_enrolment(id, now_ms)
    }
    fn open_round(&mut self, round: &RoundRow, cohort: &[u64]) -> StoreResult<()> {
        (**self).open_round(round, cohort)
    }
    fn rounds(&self) -> StoreResult<Vec<RoundRow>> {
        (**self).rounds()
    }
    fn close_round(&mut self, id: u64, outcome: &RoundOutcome, now_ms: u64) -> StoreResult<()> {
        (**self).close_round(id, outcome, now_ms)
    }
    fn cohort(&self, round: u64) -> StoreResult<Vec<u64>> {
        (**self).cohort(round)
    }
    fn accepted_key(&self, key: &str) -> StoreResult<Option<u64>> {
        (**self).accepted_key(key)
    }
    fn record_report(&mut self, report: &ReportRow, now_ms: u64) -> StoreResult<()> {
        (**self).record_report(report, now_ms)
    }
    fn rejected_total(&self) -> StoreResult<u64> {
        (**self).rejected_total()
    }
    fn add_initial_version(&mut self, version: &ModelVersionRow, now_ms: u64) -> StoreResult<()> {
        (**self).add_initial_version(version, now_ms)
    }
    fn model_versions(&self) -> StoreResult<Vec<ModelVersionRow>> {
        (**self).model_versions()
    }
    fn commit_release(&mut self, release: &ReleaseCommit) -> StoreResult<Option<ReleaseRecord>> {
        (**self).commit_release(release)
    }
    fn shared_rounds(&self) -> Option<&dyn SharedRounds> {
        (**self).shared_rounds()
    }
}
