//! The round engine: the whole life cycle of federated rounds, with no transport and no
//! SQL. It talks to storage through [`Store`] and to time through [`Clock`], and is driven
//! by callers — the HTTP server (`hush-server`) is one driver, an in-process simulator
//! another; the same seed and the same inputs give the same released models and ledger
//! through either.
//!
//! - **Open.** A round opens at a check-in (or [`RoundEngine::cohort_tasks`]) when none is
//!   open, training is not finished and at least `rounds.min_devices` devices are
//!   registered. Its population is the devices active at that moment (later ones wait for
//!   the next round); its expected cohort `C = q × population × rounds.availability` (the
//!   published availability estimate, 1 by default) is the divisor. It opens only if [`Ledger::authorize`] accepts its
//!   release: user-level, Poisson-subsampled Gaussian with rate `q` and the **effective**
//!   noise multiplier actually used (`z·C/M` with a noise cohort `M`, else `z`). Refused →
//!   training is finished (`Assignment::Done`).
//! - **Cohort.** Device `d`'s membership of round `r` is one Bernoulli(q) draw keyed by
//!   (cohort key, `r`, `d`) ([`KeyedPoissonSampler`]): the same whichever thread or replica
//!   asks and in whatever order devices check in. The key is 32 secret bytes from the OS
//!   kept in the store, or derived from `seed`. Every active device is drawn when the round
//!   opens, and the cohort is written with the round in one transaction
//!   ([`Store::open_round`]): a check-in only reads it, so a fleet's check-ins cost no
//!   writes, and the draw cannot depend on who checked in or when.
//! - **Upload.** [`UpdateValidator`] decodes and norm-checks a body outside any lock;
//!   [`RoundEngine::accept`] checks sender, round, cohort and model version, and adds the
//!   update into the order-free fixed-point sum ([`Aggregator`]).
//! - **Close.** At the deadline, or as soon as every device of the cohort has reported
//!   (accepted or rejected); a round whose cohort is empty closes as it opens.
//! - **Release** ([`RoundEngine`]'s `release`). Fewer than `rounds.min_reports` accepted →
//!   abandoned: no release, no ε. Otherwise privatize the sum
//!   ([`GaussianMechanism::privatize`]: noise keyed by the round, then divide by `C`), step
//!   a copy of the server optimizer and stage the new model's files ([`ModelDirs::stage`],
//!   synced); then [`Ledger::complete`], the one order of every private release: re-check
//!   the budget and seal the record, commit **one transaction** — ledger record, round
//!   released, version row with the files' digest ([`Store::commit_release`]) — and only
//!   then make the files visible. A failure before the commit abandons the round with
//!   nothing recorded; a crash anywhere is finished or undone by the next start
//!   ([`ModelDirs::recover`]). The named [`fault`] points sit between these steps.
//! - **Replicas.** On a store with [`SharedRounds`] (PostgreSQL), several hosts share the
//!   rounds (docs/design/replicas.md): each adds the uploads it accepts into its own
//!   partial sum, committed with the report before the device hears 200 (a device counts
//!   once per round whichever replica it reaches; the uploads queued while one commit is
//!   under way share the next: [`RoundEngine::accept_deferred`], [`RoundEngine::flush`]);
//!   one replica, the coordinator (a lock in the database), opens rounds and closes them —
//!   uploads end (`closing`), every partial sum is added (integers: the same total however
//!   they were split), then the release above, its files written into the database in the
//!   same transaction. Every replica catches up at most once a tick (`sync`: new versions
//!   copied from the database, the current round); deadlines are the database's clock. A
//!   coordinator that dies leaves its round to the next one, which finishes a `closing`
//!   round from the partial sums, so a round is released once or not at all.
//! - **Restart.** Alone, a round still open in the store lost its in-memory sum: it is
//!   marked abandoned (no release, no ε) and the next check-in opens a fresh one. Tokens,
//!   cohorts and reports are in the store. The server optimizer's state is written into
//!   each published model version ([`OPTIMIZER_STATE`]), so a restarted host goes on with
//!   the same moments.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::Device;
use hush_device::infer::{card_features, listen_pulse};
use hush_device::protocol::{
    Assignment, CheckInRequest, LocalTraining, RegisterResponse, StatusReport, TrainTask,
    UpdateClip, UpdateHeader, UpdateLimits, UploadReceipt,
};
use hush_models::arch::is_trainable;
use hush_models::checkpoint::{NamedTensor, TensorSource};
use hush_models::dp::{
    ClipBounds, ExpectedCount, GaussianMechanism, KeyedPoissonSampler, NoiseSource,
};
use hush_models::export::nnef::{
    archived_pulses, is_pulsed_trunk_archive, write_archives, NNEF, STREAM_FRAMES_NNEF,
    STREAM_HEAD_NNEF,
};
use hush_models::optim::{ServerOptimizer, ServerOptimizerConfig, ServerOptimizerState};
use hush_models::package::{
    load_package, remove_nnef_archives, write_package, ModelCard, MODEL_JSON, ONNX, STREAM_FRAMES,
    STREAM_HEAD, WEIGHTS,
};
use hush_privacy::accountant::{Adjacency, PrivacyUnit, SubsampledGaussian};
use hush_privacy::ledger::{
    totals, Authorization, Budget, Ledger, LedgerError, Mechanism, Release, ReleaseRecord,
    SealedRelease,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::aggregate::{Aggregator, ReceivedUpdate, Refusal, Rejection, UpdateValidator};
use crate::clock::Clock;
use crate::enrolment::random_token;
use crate::fault;
use crate::publish::ModelDirs;
pub use crate::publish::OPTIMIZER_STATE;
use crate::store::{
    Added, ModelVersionRow, NewDevice, PartialSum, ReleaseCommit, ReportRow, RoundOutcome,
    RoundRow, RoundState, SharedRounds, Store, StoreError,
};
use crate::{FlConfig, FlError};

/// One line of the per-round log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundLog {
    /// Round id.
    pub round: u64,
    /// Model version the cohort trained from.
    pub model_version: u64,
    /// State.
    pub state: RoundState,
    /// Why it was abandoned or failed.
    pub reason: Option<String>,
    /// Devices registered when it opened.
    pub population: u64,
    /// Expected cohort `q × population` (the divisor).
    pub expected_cohort: f64,
    /// Devices drawn into the cohort (realized cohort).
    pub realized_cohort: u64,
    /// Accepted reports.
    pub reports_accepted: u64,
    /// Rejected reports.
    pub reports_rejected: u64,
    /// Model version published from it.
    pub released_version: Option<u64>,
    /// User-level ε spent after this round, by RDP.
    pub epsilon_rdp: Option<f64>,
    /// User-level ε spent after this round, by PLD.
    pub epsilon_pld: Option<f64>,
}

struct OpenRound {
    row: RoundRow,
    /// The release's noise and ledger authorization, fixed when the round opened (`None`
    /// without DP, or in a replica that did not open it: worked out again at its close).
    terms: Option<RoundTerms>,
    /// The sum of the updates accepted here (with several replicas, this replica's
    /// partial sum; the release adds up every replica's).
    agg: Aggregator,
    /// The devices drawn into the cohort when the round opened (`row.selected` of them).
    cohort: HashSet<u64>,
    reported: HashSet<u64>,
    rejected: u64,
}

/// What [`RoundEngine::accept_deferred`] did with an upload.
#[derive(Debug)]
pub enum Acceptance {
    /// Answered now: a receipt, or a refusal to send to the device.
    Done(Result<UploadReceipt, Rejection>),
    /// Queued for this replica's next group commit (several replicas only):
    /// [`RoundEngine::flush`] with this ticket answers it.
    Pending(u64),
}

/// What the checks on an upload's header found ([`RoundEngine::screen`]).
enum Screen {
    /// Every check passed: the values are read next.
    Admit,
    /// Answered without a report (a mismatch, a duplicate's receipt).
    Answer(Result<UploadReceipt, Rejection>),
    /// Refused, and the refusal recorded as a report.
    Refuse(Rejection),
}

/// An upload a replica has checked and queued for its next group commit.
struct PendingUpload {
    ticket: u64,
    report: ReportRow,
    /// The update and the factor each layer is added with, or why a cohort member's
    /// update was refused.
    layers: Result<(ReceivedUpdate, Vec<f32>), Rejection>,
}

/// The refusal of an upload to round `round` after it closed.
fn closed(round: u64) -> Rejection {
    Rejection::new(
        409,
        "round_closed",
        format!("round {round} is closed; the upload came too late and was not counted"),
    )
}

/// A private round's noise and the ledger's authorization of its release.
struct RoundTerms {
    mechanism: GaussianMechanism,
    authorization: Authorization,
}

/// Where the noise of each release comes from.
enum NoiseKey {
    /// Fresh OS entropy for every release.
    Os,
    /// Keyed by the round, from a key derived from `seed` (reproducible runs only).
    Seeded([u8; 32]),
}

/// The round engine over a store `S` and a clock `C` (see the module doc).
pub struct RoundEngine<S: Store, C: Clock> {
    cfg: FlConfig,
    ledger: Ledger<S>,
    clock: C,
    models: ModelDirs,
    card: ModelCard,
    weights: Vec<NamedTensor>,
    layout: Vec<(String, Vec<usize>)>,
    bounds: ClipBounds,
    validator: Arc<UpdateValidator>,
    optimizer: ServerOptimizer,
    noise: NoiseKey,
    cohort: KeyedPoissonSampler,
    tokens: ChaCha20Rng,
    model_version: u64,
    open: Option<OpenRound>,
    next_round: u64,
    released: u64,
    finished: Option<String>,
    epsilon: (Option<f64>, Option<f64>),
    rejected_total: u64,
    /// Active devices when last counted (paces waiting devices).
    population: u64,
    /// When this replica last caught up with the others (`sync`; several replicas only).
    synced_at: Option<std::time::Instant>,
    /// Uploads queued for this replica's next group commit, in arrival order.
    pending: Vec<PendingUpload>,
    /// Answers of committed uploads not yet collected by [`RoundEngine::flush`] (a store
    /// failure as its message).
    resolved: HashMap<u64, Result<Result<UploadReceipt, Rejection>, String>>,
    /// The last ticket handed out.
    next_ticket: u64,
}

/// SHA-256 hex of a token (what the store keeps).
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Files every published model version has: its card, its weights and its ONNX file.
pub const PACKAGE_FILES: [&str; 3] = [MODEL_JSON, WEIGHTS, ONNX];

/// Whether devices may download the file `name` of a published model version: the package's
/// own files ([`PACKAGE_FILES`]), its streaming form (`frames.onnx`, `head.onnx`), and the
/// NNEF archives a device built without tract's ONNX parser reads in their place, the
/// pulsed trunk's too (what `hush-host export --format nnef` writes).
pub fn is_published(name: &str) -> bool {
    PACKAGE_FILES.contains(&name)
        || [
            STREAM_FRAMES,
            STREAM_HEAD,
            NNEF,
            STREAM_FRAMES_NNEF,
            STREAM_HEAD_NNEF,
        ]
        .contains(&name)
        || is_pulsed_trunk_archive(name)
}

/// Copies the published files of the package in `from` into `to` (model v0).
fn copy_package(from: &Path, to: &Path) -> Result<(), FlError> {
    for f in PACKAGE_FILES {
        let src = from.join(f);
        std::fs::copy(&src, to.join(f)).map_err(FlError::io(&src))?;
    }
    for entry in std::fs::read_dir(from).map_err(FlError::io(from))? {
        let src = entry.map_err(FlError::io(from))?.path();
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if src.is_file() && is_published(name) && !PACKAGE_FILES.contains(&name) {
            std::fs::copy(&src, to.join(name)).map_err(FlError::io(&src))?;
        }
    }
    Ok(())
}

/// Writes the NNEF archives of the initial model copied into `dir` (model v0) when it came
/// without them: the whole model's, its streaming form's, and its trunk pulsed at `listen`'s
/// default hop ([`listen_pulse`]), so that devices built without tract's ONNX parser or
/// tract-pulse listen with every version (each later version keeps what v0 has). A model
/// tract cannot write as NNEF is published without archives, with a warning.
fn add_archives(dir: &Path) -> Result<(), FlError> {
    if dir.join(NNEF).is_file() {
        return Ok(());
    }
    let card = ModelCard::read(dir)?;
    let pulse = card_features(&card, dir)
        .ok()
        .and_then(|f| listen_pulse(&card, &f));
    if let Err(e) = write_archives(dir, pulse.as_slice()) {
        warn!(
            "the initial model has no NNEF archives and tract could not write them ({e}); \
             model versions are published without them, for devices that read ONNX"
        );
        remove_nnef_archives(dir)?;
    }
    Ok(())
}

/// How a round with `selected` drawn, `accepted` and `rejected` reports ended without a
/// release, and why.
fn abandoned(reason: String, selected: u64, accepted: u64, rejected: u64) -> RoundOutcome {
    RoundOutcome {
        state: RoundState::Abandoned,
        reason: Some(reason),
        released_version: None,
        selected,
        accepted,
        rejected,
        epsilon_rdp: None,
        epsilon_pld: None,
    }
}

/// Why a release did not complete, by how far it got.
enum ReleaseFailure {
    /// The ledger refused it (budget): nothing committed.
    Refused(LedgerError),
    /// The transaction failed: nothing committed.
    Commit(FlError),
    /// Committed, but the files could not be made visible (the next start finishes it).
    Publish(FlError),
}

impl From<LedgerError> for ReleaseFailure {
    fn from(e: LedgerError) -> Self {
        Self::Refused(e)
    }
}

/// A sealed release as the record it will be once appended (for the totals that the
/// round's row carries, computed inside the same transaction).
fn pending_record(sealed: &SealedRelease) -> ReleaseRecord {
    ReleaseRecord {
        id: 0,
        recorded_at_ms: 0,
        release: sealed.release().clone(),
        epsilon_rdp: sealed.epsilon_rdp(),
        epsilon_pld: sealed.epsilon_pld(),
    }
}

/// User-level ε of `records` by RDP and PLD; `(None, None)` for a non-private run.
fn epsilon_totals(
    records: &[ReleaseRecord],
    private: bool,
    delta: f64,
) -> (Option<f64>, Option<f64>) {
    if !private {
        return (None, None);
    }
    let t = totals(records, Adjacency::AddRemove, PrivacyUnit::User, delta);
    (t.rdp.map(|r| r.epsilon), t.pld.map(|r| r.epsilon))
}

impl<S: Store, C: Clock> RoundEngine<S, C> {
    /// Opens the engine on `store` (creating `models/v0` on first start), recovering from a
    /// previous run: model files a crash left staged are finished or undone
    /// ([`ModelDirs::recover`]) and a round left open is abandoned.
    pub fn open(cfg: FlConfig, mut store: S, clock: C) -> Result<Self, FlError> {
        cfg.validate()?;
        let models = ModelDirs::new(cfg.server.data_dir.join("models"))?;
        let budget = Budget::new(
            cfg.budget.epsilon,
            cfg.budget.delta,
            cfg.budget.accountant,
            Adjacency::AddRemove,
            PrivacyUnit::User,
        )
        .map_err(|e| FlError::config("budget", &e.to_string()))?;

        let mut versions = store.model_versions()?;
        if let Some(shared) = store.shared_rounds() {
            // One of several replicas: every version the others released, from the database.
            materialize_versions(&models, shared, &versions)?;
        }
        models.recover(&versions)?;
        let now = clock.now_ms();
        // An open round's sum died with the previous process (with several replicas the
        // round goes on: its partial sums are in the database).
        let alone = store.shared_rounds().is_none();
        for r in store.rounds()? {
            if alone && r.state == RoundState::Open {
                warn!(
                    round = r.id,
                    "round was open when the host stopped; abandoning it"
                );
                let outcome = RoundOutcome {
                    state: RoundState::Abandoned,
                    reason: Some(
                        "host restarted mid-round: its partial sum was lost; no release, no \
                         epsilon spent"
                            .into(),
                    ),
                    released_version: None,
                    selected: r.selected,
                    accepted: r.accepted,
                    rejected: r.rejected,
                    epsilon_rdp: None,
                    epsilon_pld: None,
                };
                store.close_round(r.id, &outcome, now)?;
            }
        }
        if versions.is_empty() {
            let init = &cfg.server.initial_model;
            load_package(init, &Device::flex())
                .map_err(|e| FlError::config("server.initial_model", &e.to_string()))?;
            let digest = models.stage(0, |dir| {
                copy_package(init, dir)?;
                if cfg.server.nnef_archives {
                    add_archives(dir)?;
                }
                Ok(())
            })?;
            let v0 = ModelVersionRow {
                version: 0,
                round: None,
                digest,
            };
            match store.shared_rounds() {
                Some(shared) => {
                    let files = read_files(&models.staging_dir(0))?;
                    let stored = shared.publish_initial(&v0, &files, now)?;
                    if stored.digest != v0.digest {
                        models.discard(0);
                        return Err(FlError::config(
                            "server.initial_model",
                            &format!(
                                "another replica on this database published a different \
                                 initial model (SHA-256 {} against this one's {}); replicas \
                                 share one configuration",
                                stored.digest, v0.digest
                            ),
                        ));
                    }
                }
                None => store.add_initial_version(&v0, now)?,
            }
            let dir = models.make_visible(0)?;
            info!(path = %dir.display(), "initial model published as v0");
            versions.push(v0);
        }
        let model_version = versions.iter().map(|v| v.version).max().unwrap_or(0);
        let model_dir = models.version_dir(model_version);
        let (card, _) = load_package(&model_dir, &Device::flex())?;
        let weights = load_weights(&model_dir)?;
        let layout: Vec<(String, Vec<usize>)> = weights
            .iter()
            .filter(|t| is_trainable(&t.name))
            .map(|t| (t.name.clone(), t.shape.clone()))
            .collect();
        let counts: Vec<(String, usize)> = layout
            .iter()
            .map(|(n, s)| (n.clone(), s.iter().product()))
            .collect();
        let bounds = ClipBounds::new(cfg.dp.clipping, cfg.dp.clip, &counts)?;
        let mut limits = UpdateLimits::for_layout(layout.clone());
        if let Some(b) = cfg.server.max_upload_bytes {
            limits.max_bytes = b;
        }
        let validator = Arc::new(UpdateValidator::new(
            limits,
            bounds.clone(),
            cfg.dp.norm_tolerance,
            cfg.dp.normalize_layers,
        ));
        let optimizer =
            read_optimizer_state(&model_dir.join(OPTIMIZER_STATE), cfg.optimizer.resolve()?)?;
        let q = cfg.rounds.sampling_rate;
        let (noise, key) = match cfg.seed {
            Some(s) => (
                NoiseKey::Seeded(KeyedPoissonSampler::seed_key(s ^ 0x0015_e5ed)),
                KeyedPoissonSampler::seed_key(s ^ 0x5eed_c0de),
            ),
            None => (
                NoiseKey::Os,
                store.cohort_key(KeyedPoissonSampler::os_key())?,
            ),
        };
        let cohort = KeyedPoissonSampler::new(q, key)?;
        let rounds = store.rounds()?;
        let released = released_count(&rounds);
        let next_round = rounds.last().map_or(1, |r| r.id + 1);
        let rejected_total = store.rejected_total()?;
        let mut m = Self {
            cfg,
            ledger: Ledger::new(store, budget),
            clock,
            models,
            card,
            weights,
            layout,
            bounds,
            validator,
            optimizer,
            noise,
            cohort,
            tokens: ChaCha20Rng::from_os_rng(),
            model_version,
            open: None,
            next_round,
            released,
            finished: None,
            epsilon: (None, None),
            rejected_total,
            population: 0,
            synced_at: None,
            pending: Vec::new(),
            resolved: HashMap::new(),
            next_ticket: 0,
        };
        m.epsilon = epsilon_totals(&m.store().records()?, m.cfg.dp.enabled, m.cfg.budget.delta);
        if let Some(failed) = rounds.iter().find(|r| r.state == RoundState::ReleaseFailed) {
            m.finished = Some(format!(
                "round {} was recorded in the ledger but its model could not be published; \
                 fix the data directory before training further",
                failed.id
            ));
        } else if m.released >= m.cfg.rounds.rounds {
            m.finished = Some(format!("all {} rounds are done", m.cfg.rounds.rounds));
        }
        Ok(m)
    }

    fn store(&self) -> &S {
        self.ledger.store()
    }

    fn store_mut(&mut self) -> &mut S {
        self.ledger.store_mut()
    }

    /// What uploads are checked against before [`RoundEngine::accept`]: call
    /// [`UpdateValidator::validate`] on any thread, outside any lock.
    pub fn validator(&self) -> Arc<UpdateValidator> {
        self.validator.clone()
    }

    /// Latest published model version and its package directory.
    pub fn latest_model(&self) -> (u64, PathBuf) {
        (
            self.model_version,
            self.models.version_dir(self.model_version),
        )
    }

    /// Whether training is over, and why.
    pub fn finished(&self) -> Option<&str> {
        self.finished.as_deref()
    }

    /// Registers a device that presents an operator-issued `enrolment_token`
    /// ([`crate::enrolment`]): a fresh random device token (returned once; only its hash is
    /// stored) that expires after `enrolment.device_token_days`. `Ok(Err(_))` is a refusal
    /// for the client (403: no, unknown, revoked, expired or used-up enrolment token).
    pub fn register(
        &mut self,
        label: &str,
        enrolment_token: &str,
    ) -> Result<Result<RegisterResponse, Rejection>, FlError> {
        if enrolment_token.is_empty() {
            return Ok(Err(Rejection::new(
                403,
                "enrolment_required",
                "registration needs an enrolment token issued by the operator \
                 (`hush-host devices enrol`): send it as `enrolment_token`",
            )));
        }
        let token = random_token("", &mut self.tokens);
        let now = self.clock.now_ms();
        let valid_ms = (self.cfg.enrolment.device_token_days * 86_400_000.0) as u64;
        let expires_at_ms = now.saturating_add(valid_ms);
        let device = NewDevice {
            enrolment_hash: &token_hash(enrolment_token),
            label,
            token_hash: &token_hash(&token),
            expires_at_ms,
        };
        match self.store_mut().enrol_device(&device, now)? {
            Ok(device_id) => {
                debug!(device_id, label, "device registered");
                Ok(Ok(RegisterResponse {
                    device_id,
                    token,
                    expires_at_ms: Some(expires_at_ms),
                }))
            }
            Err(refusal) => {
                warn!(label, "registration refused: {refusal}");
                Ok(Err(Rejection::new(
                    403,
                    "enrolment_refused",
                    format!("{refusal}; ask the operator for a valid enrolment token"),
                )))
            }
        }
    }

    /// Issues an enrolment token for `quota` devices, valid for `valid`, on this engine's
    /// store and clock ([`crate::enrolment::issue`]).
    pub fn issue_enrolment(
        &mut self,
        label: &str,
        quota: u64,
        valid: std::time::Duration,
    ) -> Result<crate::enrolment::Issued, FlError> {
        let now = self.clock.now_ms();
        let valid_ms = u64::try_from(valid.as_millis()).unwrap_or(u64::MAX);
        crate::enrolment::issue(self.store_mut(), label, quota, valid_ms, now)
    }

    /// The device holding `token`, or why the token is refused (unknown, revoked, expired;
    /// [`crate::enrolment::authenticate`]).
    pub fn authenticate(&self, token: &str) -> Result<Result<u64, &'static str>, FlError> {
        crate::enrolment::authenticate(self.store(), token, self.clock.now_ms())
    }

    /// Round `id`'s expected cohort over `population` active devices: the divisor.
    fn expected_cohort(&self, population: u64) -> Result<ExpectedCount, FlError> {
        Ok(
            ExpectedCount::poisson(self.cfg.rounds.sampling_rate, population as usize)?
                .with_availability(self.cfg.rounds.availability)?,
        )
    }

    /// The noise of round `id` (over `population` devices, training model `version`) and
    /// the ledger's authorization of its release; `Ok(None)` without DP. `Err(reason)`
    /// inside: the round cannot be released (budget exhausted, bad noise cohort), and
    /// training is finished for that reason.
    fn round_terms(
        &self,
        id: u64,
        population: u64,
        version: u64,
    ) -> Result<Result<Option<RoundTerms>, String>, FlError> {
        if !self.cfg.dp.enabled {
            return Ok(Ok(None));
        }
        let q = self.cfg.rounds.sampling_rate;
        let mut mechanism = GaussianMechanism::new(
            self.cfg.dp.noise_multiplier,
            self.bounds.sensitivity(),
            self.expected_cohort(population)?,
            self.cfg.dp.noise_kind(),
        )?;
        if let Some(m) = self.cfg.dp.noise_cohort_size {
            mechanism = match mechanism.with_noise_cohort(m) {
                Ok(m) => m,
                Err(e) => return Ok(Err(format!("dp.noise_cohort_size: {e}"))),
            };
        }
        // The multiplier actually used against the sensitivity: z·C/M with a noise cohort.
        let z_eff = mechanism.noise_std_on_sum() / mechanism.sensitivity;
        let release = Release {
            mechanism: Mechanism::FederatedAveraging,
            event: SubsampledGaussian::poisson(q, z_eff, 1)
                .map_err(|e| FlError::config("dp.noise_multiplier", &e.to_string()))?,
            unit: PrivacyUnit::User,
            adjacency: Adjacency::AddRemove,
            population: Some(population),
            delta: self.cfg.budget.delta,
            released: format!("federated round {id}: model v{}", version + 1),
            additional: Default::default(),
        };
        match self.ledger.authorize(&release) {
            Ok(authorization) => Ok(Ok(Some(RoundTerms {
                mechanism,
                authorization,
            }))),
            Err(e @ LedgerError::BudgetExceeded { .. }) => {
                info!(round = id, "privacy budget exhausted: {e}");
                Ok(Err(format!("privacy budget exhausted: {e}")))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The replicas' shared rounds, when this host is one of several on one database.
    fn shared(&self) -> Option<&dyn SharedRounds> {
        self.store().shared_rounds()
    }

    /// Now for deadlines: the database's clock when replicas share the rounds (a replica
    /// with a wrong clock cannot close a round early), else this host's.
    fn deadline_now(&self) -> Result<u64, FlError> {
        match self.shared() {
            Some(shared) => Ok(shared.db_now_ms()?),
            None => Ok(self.clock.now_ms()),
        }
    }

    fn try_open_round(&mut self) -> Result<(), FlError> {
        if self.open.is_some() || self.finished.is_some() {
            return Ok(());
        }
        if !self.coordinates()? {
            return Ok(());
        }
        if self.shared().is_some() {
            // Another coordinator may have opened (and abandoned) rounds since this
            // replica last looked, or left one open.
            self.sync(true)?;
            if self.open.is_some() || self.finished.is_some() {
                return Ok(());
            }
            self.next_round = self.store().rounds()?.last().map_or(1, |r| r.id + 1);
        }
        let now = self.clock.now_ms();
        let (count, _) = self.store().devices(now)?;
        self.population = count;
        if count < self.cfg.rounds.min_devices {
            return Ok(());
        }
        let active = self.store().active_devices(now)?;
        let population = active.len() as u64;
        let max_device_id = active.last().copied().unwrap_or(0);
        let id = self.next_round;
        let expected = self.expected_cohort(population)?;
        let terms = match self.round_terms(id, population, self.model_version)? {
            Ok(terms) => terms,
            Err(reason) => {
                self.finished = Some(reason);
                return Ok(());
            }
        };
        // Every active device's draw, keyed by (cohort key, round, device): the cohort is
        // fixed now and written with the round in one transaction.
        let cohort: Vec<u64> = active
            .into_iter()
            .filter(|&d| self.cohort.includes(id, d))
            .collect();
        let opened = self.deadline_now()?;
        let deadline = opened + (self.cfg.rounds.deadline_secs * 1000.0) as u64;
        let row = RoundRow {
            id,
            model_version: self.model_version,
            state: RoundState::Open,
            opened_at_ms: opened,
            deadline_ms: deadline,
            population,
            max_device_id,
            expected_cohort: expected.get(),
            closed_at_ms: None,
            reason: None,
            released_version: None,
            selected: cohort.len() as u64,
            accepted: 0,
            rejected: 0,
            epsilon_rdp: None,
            epsilon_pld: None,
        };
        self.store_mut().open_round(&row, &cohort)?;
        self.next_round = id + 1;
        info!(
            round = id,
            population,
            expected_cohort = expected.get(),
            cohort = cohort.len(),
            model_version = self.model_version,
            "round opened"
        );
        self.open = Some(OpenRound {
            row,
            terms,
            agg: Aggregator::new(&self.layout, self.bounds.sensitivity()),
            cohort: cohort.into_iter().collect(),
            reported: HashSet::new(),
            rejected: 0,
        });
        // An empty cohort has nothing to wait for.
        self.close_if_complete()
    }

    fn train_task(&self, open: &OpenRound, device: u64) -> TrainTask {
        TrainTask {
            round: open.row.id,
            model_version: open.row.model_version,
            deadline_ms: open.row.deadline_ms.saturating_sub(self.clock.now_ms()),
            local: LocalTraining {
                epochs: self.cfg.local.epochs,
                batch_size: self.cfg.local.batch_size,
                lr: self.cfg.local.lr,
                example_clip: self.cfg.local.example_clip,
                seed: open.row.id.wrapping_mul(1_000_003).wrapping_add(device),
            },
            clip: UpdateClip {
                bounds: self.bounds.bounds().to_vec(),
                layers: self.bounds.layers().to_vec(),
                normalize_layers: self.cfg.dp.normalize_layers,
                local_noise_std: self.cfg.dp.local_noise_std,
            },
        }
    }

    /// Come back later: at least `rounds.retry_after_ms`, longer for a fleet large enough
    /// to exceed `rounds.max_checkins_per_second` at that pace.
    fn wait(&self) -> Assignment {
        let r = &self.cfg.rounds;
        let spread = (self.population as f64 * 1000.0 / r.max_checkins_per_second).ceil();
        Assignment::Wait {
            retry_after_ms: r.retry_after_ms.max(spread as u64),
        }
    }

    /// A device checks in: its cohort draw for the open round, and its assignment.
    pub fn check_in(&mut self, device: u64, _req: &CheckInRequest) -> Result<Assignment, FlError> {
        self.tick()?;
        self.try_open_round()?;
        if let Some(reason) = &self.finished {
            if self.open.is_none() {
                return Ok(Assignment::Done {
                    reason: reason.clone(),
                    model_version: Some(self.model_version),
                });
            }
        }
        let Some(open) = self.open.as_ref() else {
            return Ok(self.wait());
        };
        let assignment = if open.row.state == RoundState::Open
            && open.cohort.contains(&device)
            && !self.has_reported(open, device)?
        {
            Assignment::Train(self.train_task(open, device))
        } else {
            self.wait()
        };
        Ok(assignment)
    }

    /// Whether round `round` is still open (some of its cohort has not reported).
    pub fn round_is_open(&self, round: u64) -> bool {
        self.open.as_ref().is_some_and(|o| o.row.id == round)
    }

    /// Opens a round if none is open (and training is not finished), and returns the tasks
    /// of its cohort's devices that have not reported yet, in device order: what
    /// [`RoundEngine::check_in`] would tell each of them, without asking the others. For
    /// drivers that hold the whole fleet (the in-process simulator).
    pub fn cohort_tasks(&mut self) -> Result<Vec<(u64, TrainTask)>, FlError> {
        self.tick()?;
        self.try_open_round()?;
        let Some(open) = self.open.as_ref() else {
            return Ok(Vec::new());
        };
        let mut devices: Vec<u64> = open
            .cohort
            .iter()
            .copied()
            .filter(|d| !open.reported.contains(d))
            .collect();
        devices.sort_unstable();
        Ok(devices
            .into_iter()
            .map(|d| (d, self.train_task(open, d)))
            .collect())
    }

    /// Whether `device` has reported in `open` (with several replicas: to any of them).
    fn has_reported(&self, open: &OpenRound, device: u64) -> Result<bool, FlError> {
        Ok(match self.shared() {
            Some(shared) => shared.has_reported(open.row.id, device)?,
            None => open.reported.contains(&device),
        })
    }

    /// Whether this host opens and closes rounds: always when it is alone; with several
    /// replicas, only while it holds the coordinator lock.
    fn coordinates(&self) -> Result<bool, FlError> {
        match self.shared() {
            Some(shared) => Ok(shared.coordinate()?),
            None => Ok(true),
        }
    }

    fn close_if_complete(&mut self) -> Result<(), FlError> {
        let Some(open) = self.open.as_ref() else {
            return Ok(());
        };
        if open.row.state != RoundState::Open || !self.coordinates()? {
            return Ok(());
        }
        let reported = match self.shared() {
            Some(shared) => shared.reported(open.row.id)?,
            None => open.reported.len() as u64,
        };
        if reported >= open.row.selected {
            self.close_round("every device of the cohort reported")?;
        }
        Ok(())
    }

    /// Closes the open round if its deadline has passed. With several replicas, first
    /// catches up with the others ([`RoundEngine`]'s `sync`); the coordinator also closes a
    /// round whose cohort has all reported to some replica, and finishes a release that a
    /// coordinator before it left half done.
    pub fn tick(&mut self) -> Result<(), FlError> {
        self.sync(false)?;
        let Some((state, deadline)) = self.open.as_ref().map(|o| (o.row.state, o.row.deadline_ms))
        else {
            return Ok(());
        };
        if !self.coordinates()? {
            return Ok(());
        }
        if state == RoundState::Closing {
            return self
                .close_round("a coordinator stopped during its release; finished by another");
        }
        if self.deadline_now()? >= deadline {
            self.close_round("deadline")?;
        } else if self.shared().is_some() {
            self.close_if_complete()?;
        }
        Ok(())
    }

    /// With several replicas: catches up with what the others did — model versions they
    /// released (their files copied from the database), the round open or closing now.
    /// Requests and ticks catch up at most once per `server.tick_ms` (a check-in answered
    /// from a view that old is at worst told to wait); `force` catches up now, for what a
    /// stale view would get wrong (an upload or model for a round or version this replica
    /// has not seen yet, a coordinator about to open a round). Alone, a host knows it all.
    fn sync(&mut self, force: bool) -> Result<(), FlError> {
        let Some(shared) = self.shared() else {
            return Ok(());
        };
        let every = std::time::Duration::from_millis(self.cfg.server.tick_ms);
        if !force && self.synced_at.is_some_and(|t| t.elapsed() < every) {
            return Ok(());
        }
        // Versions first: a release between the two reads then shows as the next round
        // (with its model fetched on demand), never as a closed round with a new model.
        let versions = self.store().model_versions()?;
        let current = shared.current_round()?;
        let latest = versions.iter().map(|v| v.version).max().unwrap_or(0);
        if latest != self.model_version {
            materialize_versions(&self.models, shared, &versions)?;
            self.weights = load_weights(&self.models.version_dir(latest))?;
            self.optimizer = read_optimizer_state(
                &self.models.version_dir(latest).join(OPTIMIZER_STATE),
                self.cfg.optimizer.resolve()?,
            )?;
            self.model_version = latest;
            let rounds = self.store().rounds()?;
            self.released = released_count(&rounds);
            self.epsilon = epsilon_totals(
                &self.store().records()?,
                self.cfg.dp.enabled,
                self.cfg.budget.delta,
            );
            if self.released >= self.cfg.rounds.rounds {
                self.finished = Some(format!("all {} rounds are done", self.cfg.rounds.rounds));
            }
            debug!(
                version = latest,
                "caught up with a release by another replica"
            );
        }
        // Followers pace waiting devices by the fleet's size too (they never open rounds,
        // where a lone host counts it).
        self.population = self.store().devices(self.clock.now_ms())?.0;
        self.synced_at = Some(std::time::Instant::now());
        // Uploads queued for a round that is over are refused as late.
        let current_id = current.as_ref().map(|r| r.id);
        for p in std::mem::take(&mut self.pending) {
            if Some(p.report.round) == current_id {
                self.pending.push(p);
            } else {
                self.resolved
                    .insert(p.ticket, Ok(Err(closed(p.report.round))));
            }
        }
        match current {
            None => self.open = None,
            Some(row) if self.open.as_ref().is_some_and(|o| o.row.id == row.id) => {
                if let Some(o) = self.open.as_mut() {
                    o.row.state = row.state;
                }
            }
            Some(row) => {
                let cohort = self.store().cohort(row.id)?;
                self.open = Some(OpenRound {
                    row,
                    terms: None,
                    agg: Aggregator::new(&self.layout, self.bounds.sensitivity()),
                    cohort: cohort.into_iter().collect(),
                    reported: HashSet::new(),
                    rejected: 0,
                });
            }
        }
        Ok(())
    }

    fn log_rejection(
        &mut self,
        device: u64,
        round: u64,
        bytes: u64,
        rej: Rejection,
    ) -> Result<Rejection, FlError> {
        let now = self.clock.now_ms();
        self.store_mut().record_report(
            &ReportRow {
                round,
                device,
                idempotency_key: None,
                accepted: false,
                reason: Some(format!("{}: {}", rej.code, rej.error)),
                bytes,
            },
            now,
        )?;
        self.count_rejection(device, round, &rej);
        Ok(rej)
    }

    /// Counts and logs a refused upload (its report already recorded).
    fn count_rejection(&mut self, device: u64, round: u64, rej: &Rejection) {
        self.rejected_total += 1;
        warn!(
            device,
            round,
            code = rej.code,
            "upload rejected: {}",
            rej.error
        );
    }

    /// An upload from `device` to the round in the path, its frame decoded by
    /// [`UpdateValidator`], answered: [`RoundEngine::accept_deferred`], then, if it was
    /// queued for a group commit, [`RoundEngine::flush`]. `Ok(Err(_))` is a refusal to send
    /// to the device; `Err(_)` is a host failure.
    pub fn accept(
        &mut self,
        device: u64,
        path_round: u64,
        update: ReceivedUpdate,
    ) -> Result<Result<UploadReceipt, Rejection>, FlError> {
        match self.accept_deferred(device, path_round, update)? {
            Acceptance::Done(answer) => Ok(answer),
            Acceptance::Pending(ticket) => self.flush(ticket),
        }
    }

    /// Checks an upload from `device` to the round in the path, its frame decoded by
    /// [`UpdateValidator`], and answers it — adding it in one pass over its values
    /// ([`Aggregator::add_received`]) — or, with several replicas, queues it for the
    /// replica's next group commit ([`Acceptance::Pending`]: a server lets go of the
    /// engine, then calls [`RoundEngine::flush`], so that the uploads that arrived
    /// meanwhile are committed in the same transaction). A refusal is answered only for a
    /// body whose checksum holds. `Err(_)` is a host failure.
    pub fn accept_deferred(
        &mut self,
        device: u64,
        path_round: u64,
        update: ReceivedUpdate,
    ) -> Result<Acceptance, FlError> {
        let done = |answer| Ok(Acceptance::Done(answer));
        let (round, bytes) = (update.header.round, update.bytes);
        // Nothing is answered for a body that is not what its sender sent: a refusal or a
        // receipt made from the header waits for the checksum.
        match self.screen(device, path_round, &update.header)? {
            Screen::Admit => {}
            Screen::Answer(answer) => return done(update.verify_checksum().and(answer)),
            Screen::Refuse(rej) => {
                if let Err(corrupt) = update.verify_checksum() {
                    return done(Err(corrupt));
                }
                return self
                    .log_rejection(device, round, bytes, rej)
                    .map(|r| Acceptance::Done(Err(r)));
            }
        }
        if self.shared().is_some() {
            return self.queue(device, update);
        }
        let Some(open) = self.open.as_mut() else {
            return done(Err(closed(round)));
        };
        let added = match open.agg.add_received(&update, &self.validator) {
            Ok(added) => added,
            Err(Refusal::NotRecorded(rej)) => return done(Err(rej)),
            Err(Refusal::OverBound(rej)) => {
                let rej = self.log_rejection(device, round, bytes, rej)?;
                if let Some(o) = self.open.as_mut() {
                    o.rejected += 1;
                    o.reported.insert(device);
                }
                self.close_if_complete()?;
                return done(Err(rej));
            }
        };
        // Recorded (with its idempotency key) before it counts: a retry after a store
        // failure is refused as a duplicate only once the report is durable, and an update
        // whose report could not be recorded is taken back out of the sum.
        let now = self.clock.now_ms();
        let recorded = self.store_mut().record_report(
            &ReportRow {
                round,
                device,
                idempotency_key: Some(update.header.idempotency_key.clone()),
                accepted: true,
                reason: None,
                bytes,
            },
            now,
        );
        if let Err(e) = recorded {
            if let Some(o) = self.open.as_mut() {
                o.agg.remove(&update, &added);
            }
            return Err(e.into());
        }
        if let Some(o) = self.open.as_mut() {
            o.reported.insert(device);
        }
        info!(device, round, "update accepted");
        self.close_if_complete()?;
        done(Ok(UploadReceipt {
            round,
            duplicate: false,
        }))
    }

    /// The checks of an upload that need only its header and the engine's state — who
    /// sent it, for which round, from which model — in the order the module doc lists.
    fn screen(
        &mut self,
        device: u64,
        path_round: u64,
        h: &UpdateHeader,
    ) -> Result<Screen, FlError> {
        let round = h.round;
        if round != path_round {
            return Ok(Screen::Answer(Err(Rejection::new(
                400,
                "round_mismatch",
                format!("the path names round {path_round} but the update is for round {round}"),
            ))));
        }
        if h.device_id != device {
            return Ok(Screen::Answer(Err(Rejection::new(
                403,
                "device_mismatch",
                format!(
                    "the update names device {} but the token belongs to device {device}",
                    h.device_id
                ),
            ))));
        }
        if round > i64::MAX as u64 {
            // No round can have this id (stores keep ids as signed 64-bit integers): refused
            // before anything reaches the store.
            return Ok(Screen::Answer(Err(Rejection::new(
                404,
                "unknown_round",
                format!("there is no round {round}"),
            ))));
        }
        if self.store().accepted_key(&h.idempotency_key)?.is_some() {
            return Ok(Screen::Answer(Ok(UploadReceipt {
                round,
                duplicate: true,
            })));
        }
        self.tick()?;
        if self.shared().is_some() && self.open.as_ref().map(|o| o.row.id) != Some(round) {
            // The device may have its task from a replica that saw the round first.
            self.sync(true)?;
        }
        let open_id = self.open.as_ref().map(|o| o.row.id);
        if open_id != Some(round) {
            return Ok(Screen::Refuse(if round < self.next_round && round > 0 {
                closed(round)
            } else {
                Rejection::new(404, "unknown_round", format!("there is no round {round}"))
            }));
        }
        if !self
            .open
            .as_ref()
            .is_some_and(|o| o.cohort.contains(&device))
        {
            return Ok(Screen::Refuse(Rejection::new(
                403,
                "not_in_cohort",
                format!("device {device} was not drawn into round {round}'s cohort"),
            )));
        }
        let expected_version = self.open.as_ref().map_or(0, |o| o.row.model_version);
        if h.model_version != expected_version {
            return Ok(Screen::Refuse(Rejection::new(
                409,
                "stale_model",
                format!(
                    "the update starts from model v{} but round {round} trains v{expected_version}",
                    h.model_version
                ),
            )));
        }
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.row.state != RoundState::Open)
        {
            return Ok(Screen::Refuse(closed(round)));
        }
        Ok(Screen::Admit)
    }

    /// A second accepted update from a device in one round, which the database refuses
    /// (the idempotency key is fixed by round and device, so only a store-level guard
    /// sees this): refused and logged, never added — a user contributes at most once per
    /// round, which is what the user-level sensitivity assumes.
    fn already_reported(
        &mut self,
        device: u64,
        round: u64,
        bytes: u64,
    ) -> Result<Rejection, FlError> {
        let rej = Rejection::new(
            409,
            "already_reported",
            format!(
                "device {device} has already reported in round {round}; one update per round \
                 counts"
            ),
        );
        self.log_rejection(device, round, bytes, rej)
    }

    /// [`RoundEngine::accept_deferred`] with several replicas: an upload that passed every
    /// check — an update, or a cohort member's malformed one (a refusal that counts as its
    /// report) — is queued for the replica's next group commit ([`RoundEngine::flush`]).
    /// A second upload with the key of one already queued is told to retry (503): by then
    /// the first is committed and the retry is a duplicate, or it failed and the retry
    /// counts.
    fn queue(&mut self, device: u64, update: ReceivedUpdate) -> Result<Acceptance, FlError> {
        let (round, bytes) = (update.header.round, update.bytes);
        let key = update.header.idempotency_key.clone();
        if self
            .pending
            .iter()
            .any(|p| p.report.idempotency_key.as_deref() == Some(key.as_str()))
        {
            return Ok(Acceptance::Done(update.verify_checksum().and(Err(
                Rejection::new(
                    503,
                    "in_progress",
                    "an upload with this idempotency key is being recorded; retry in a moment",
                ),
            ))));
        }
        // The values are read now (the checksum among them) and added at the commit.
        let layers = match self.validator.check_values(&update) {
            Ok(factors) => Ok((update, factors)),
            Err(Refusal::NotRecorded(rej)) => return Ok(Acceptance::Done(Err(rej))),
            Err(Refusal::OverBound(rej)) => Err(rej),
        };
        if let (Ok((u, _)), Some(open)) = (&layers, self.open.as_ref()) {
            // Room in the sum for this one after every update queued before it.
            if let Err(rej) = open.agg.admits(u, self.pending.len() as u64) {
                return Ok(Acceptance::Done(Err(rej)));
            }
        }
        let accepted = layers.is_ok();
        let report = ReportRow {
            round,
            device,
            idempotency_key: accepted.then_some(key),
            accepted,
            reason: layers
                .as_ref()
                .err()
                .map(|rej| format!("{}: {}", rej.code, rej.error)),
            bytes,
        };
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.pending.push(PendingUpload {
            ticket,
            report,
            layers,
        });
        Ok(Acceptance::Pending(ticket))
    }

    /// Answers the upload queued as `ticket` ([`RoundEngine::accept_deferred`]): commits
    /// every upload queued now in one transaction ([`SharedRounds::add_to_partial`]: their
    /// reports, and this replica's partial sum with the updates recorded), unless an
    /// earlier call already did. A failed commit fails every upload in it (the devices
    /// retry; nothing of them was added).
    pub fn flush(&mut self, ticket: u64) -> Result<Result<UploadReceipt, Rejection>, FlError> {
        if !self.resolved.contains_key(&ticket) {
            self.commit_pending()?;
        }
        match self.resolved.remove(&ticket) {
            Some(Ok(answer)) => Ok(answer),
            Some(Err(e)) => Err(FlError::Store(StoreError::new("add to the partial sum", e))),
            None => Err(FlError::Corrupt(format!("no upload is queued as {ticket}"))),
        }
    }

    /// Commits every queued upload (see [`RoundEngine::flush`]) and records each answer.
    fn commit_pending(&mut self) -> Result<(), FlError> {
        let batch = std::mem::take(&mut self.pending);
        if batch.is_empty() {
            return Ok(());
        }
        if self.open.is_none() {
            for p in &batch {
                self.resolved
                    .insert(p.ticket, Ok(Err(closed(p.report.round))));
            }
            return Ok(());
        }
        let (Some(shared), Some(open)) = (self.store().shared_rounds(), self.open.as_ref()) else {
            return Err(FlError::Corrupt(
                "uploads were queued on a host without shared rounds".into(),
            ));
        };
        let reports: Vec<ReportRow> = batch.iter().map(|p| p.report.clone()).collect();
        let (base, base_rejected) = (&open.agg, open.rejected);
        let replica = shared.replica().to_string();
        let mut summed: Option<(Aggregator, u64)> = None;
        let mut partial = |outcomes: &[Added]| {
            let mut agg = base.clone();
            let mut rejected = base_rejected;
            for (p, o) in batch.iter().zip(outcomes) {
                if *o == Added::Counted {
                    match &p.layers {
                        // Admitted when queued: the layout matches, and the sum had room
                        // for it after every update queued before it.
                        Ok((u, factors)) => {
                            agg.add_checked(u, factors.clone());
                        }
                        Err(_) => rejected += 1,
                    }
                }
            }
            let sum = PartialSum {
                replica: replica.clone(),
                accepted: agg.accepted(),
                rejected,
                sum: agg.to_bytes(),
            };
            summed = Some((agg, rejected));
            sum
        };
        let now = self.clock.now_ms();
        let outcomes = match shared.add_to_partial(&reports, &mut partial, now) {
            Ok(o) => o,
            Err(e) => {
                let why = e.to_string();
                for p in &batch {
                    self.resolved.insert(p.ticket, Err(why.clone()));
                }
                return Ok(());
            }
        };
        if let (Some((agg, rejected)), Some(open)) = (summed, self.open.as_mut()) {
            open.agg = agg;
            open.rejected = rejected;
        }
        debug!(uploads = batch.len(), "group commit");
        for (p, o) in batch.into_iter().zip(outcomes) {
            let (device, round, bytes) = (p.report.device, p.report.round, p.report.bytes);
            let answer = match (o, p.layers) {
                (Added::Counted, Ok(_)) => {
                    info!(device, round, "update accepted");
                    Ok(UploadReceipt {
                        round,
                        duplicate: false,
                    })
                }
                (Added::Counted, Err(rej)) => {
                    self.count_rejection(device, round, &rej);
                    Err(rej)
                }
                (Added::Duplicate, _) => Ok(UploadReceipt {
                    round,
                    duplicate: true,
                }),
                (Added::AlreadyReported, _) => Err(self.already_reported(device, round, bytes)?),
                (Added::Closed, _) => {
                    Err(self.log_rejection(device, round, bytes, closed(round))?)
                }
            };
            self.resolved.insert(p.ticket, Ok(answer));
        }
        self.close_if_complete()
    }

    /// Abandons round `id` with `outcome` (no release, no ε).
    fn abandon(&mut self, id: u64, outcome: &RoundOutcome) -> Result<(), FlError> {
        let now = self.clock.now_ms();
        Ok(self.store_mut().close_round(id, outcome, now)?)
    }

    /// The host is stopping: the open round, if any, is abandoned now — recorded as such,
    /// no release, no ε spent — rather than left for the next start to find. A release in
    /// progress has already finished (it runs under the same `&mut self`).
    ///
    /// A replica among several leaves the round to the others: what it accepted is in its
    /// partial sum in the database, and the coordinator releases it.
    pub fn stop(&mut self, why: &str) -> Result<(), FlError> {
        if self.shared().is_some() {
            info!(
                "{why}: this replica's partial sum stays in the database for the round's release"
            );
            return Ok(());
        }
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let id = open.row.id;
        let outcome = abandoned(
            format!(
                "{why} while the round was open: its partial sum is dropped; no release, \
                 no epsilon spent"
            ),
            open.row.selected,
            open.agg.accepted(),
            open.rejected,
        );
        info!(round = id, "round abandoned: {why}");
        self.abandon(id, &outcome)
    }

    fn close_round(&mut self, why: &str) -> Result<(), FlError> {
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        let id = open.row.id;
        if let Some(shared) = self.shared() {
            // Uploads end (those in flight commit first); then every replica's partial sum
            // is final and adds up to the round's sum.
            if open.row.state == RoundState::Open && !shared.begin_close(id)? {
                return Ok(());
            }
            open.row.state = RoundState::Closing;
            let mut agg = Aggregator::new(&self.layout, self.bounds.sensitivity());
            let mut rejected = 0;
            for p in shared.partial_sums(id)? {
                agg.add_partial(&p.sum, p.accepted).map_err(|e| {
                    FlError::Corrupt(format!(
                        "round {id}: replica {}'s partial sum: {e}",
                        p.replica
                    ))
                })?;
                rejected += p.rejected;
            }
            open.agg = agg;
            open.rejected = rejected;
        }
        let accepted = open.agg.accepted();
        let min = self.cfg.rounds.min_reports;
        if accepted < min {
            let outcome = abandoned(
                format!(
                    "closed ({why}) with {accepted} accepted reports; rounds.min_reports is \
                     {min}: abandoned, no release, no epsilon spent"
                ),
                open.row.selected,
                accepted,
                open.rejected,
            );
            info!(round = id, accepted, "round abandoned: too few reports");
            return self.abandon(id, &outcome);
        }
        self.release(open, why)
    }

    /// The one place a round's release is ordered (see the module doc): privatize → seal
    /// the ledger record → step the optimizer → stage the files → commit one transaction →
    /// make the files visible.
    fn release(&mut self, open: OpenRound, why: &str) -> Result<(), FlError> {
        let OpenRound {
            row,
            terms,
            agg,
            rejected,
            ..
        } = open;
        let id = row.id;
        let selected = row.selected;
        let accepted = agg.accepted();
        if row.model_version != self.model_version {
            return Err(FlError::Corrupt(format!(
                "round {id} trains model v{} but the latest version is v{}",
                row.model_version, self.model_version
            )));
        }
        let version = self.model_version + 1;
        // A replica that took over a round works out its terms again: the same round, the
        // same population, the same noise.
        let terms = match terms {
            Some(t) => Some(t),
            None => match self.round_terms(id, row.population, row.model_version)? {
                Ok(t) => t,
                Err(reason) => {
                    self.finished = Some(reason.clone());
                    let outcome = abandoned(reason, selected, accepted, rejected);
                    return self.abandon(id, &outcome);
                }
            },
        };
        let (mechanism, authorization) = match terms {
            Some(t) => (Some(t.mechanism), Some(t.authorization)),
            None => (None, None),
        };
        let mut mean = agg.into_sum();
        let step = match &mechanism {
            Some(mech) => {
                let mut noise = match &self.noise {
                    NoiseKey::Os => NoiseSource::from_os(),
                    NoiseKey::Seeded(key) => NoiseSource::from_key(*key, id),
                };
                mech.privatize(&mut mean, &mut noise).map_err(FlError::from)
            }
            None => {
                let n = accepted as f32;
                mean.iter_mut()
                    .flat_map(|t| t.data.iter_mut())
                    .for_each(|v| *v /= n);
                Ok(())
            }
        };
        if let Err(e) = step {
            warn!(round = id, "round abandoned: {e}");
            let outcome = abandoned(
                format!("aggregation failed: {e}; no release"),
                selected,
                accepted,
                rejected,
            );
            return self.abandon(id, &outcome);
        }
        // The optimizer steps on a copy: it becomes the host's only once the release is
        // committed, so a release that fails first leaves it untouched.
        let mut optimizer = self.optimizer.clone();
        let staged = self.stage(version, &mut optimizer, &mean);
        drop(mean);
        let (weights, digest) = match staged {
            Ok(v) => v,
            Err(e) => {
                warn!(round = id, "model v{version} could not be staged: {e}");
                self.models.discard(version);
                self.finished = Some(format!(
                    "model v{version} could not be written ({e}); training stopped"
                ));
                let outcome = abandoned(
                    format!("the model could not be written: {e}; no release, no epsilon spent"),
                    selected,
                    accepted,
                    rejected,
                );
                return self.abandon(id, &outcome);
            }
        };
        fault::point(fault::RELEASE_BEFORE_COMMIT);
        // One transaction: the ledger record, the round released, the version row; then
        // the files become visible. For a private round that is `Ledger::complete`, the one
        // order of every private release.
        let mut commit = ReleaseCommit {
            round: id,
            outcome: RoundOutcome {
                state: RoundState::Released,
                reason: None,
                released_version: Some(version),
                selected,
                accepted,
                rejected,
                epsilon_rdp: None,
                epsilon_pld: None,
            },
            ledger: None,
            version: ModelVersionRow {
                version,
                round: Some(id),
                digest,
            },
            now_ms: self.clock.now_ms(),
            files: Vec::new(),
        };
        if self.shared().is_some() {
            // Every replica serves every version: the files go into the database in the
            // release's transaction.
            match read_files(&self.models.staging_dir(version)) {
                Ok(files) => commit.files = files,
                Err(e) => {
                    self.models.discard(version);
                    let outcome = abandoned(
                        format!("the staged model could not be read back: {e}; no release"),
                        selected,
                        accepted,
                        rejected,
                    );
                    return self.abandon(id, &outcome);
                }
            }
        }
        let private = self.cfg.dp.enabled;
        let delta = self.cfg.budget.delta;
        let models = &self.models;
        let mut epsilon = (None, None);
        let publish = || -> Result<PathBuf, ReleaseFailure> {
            fault::point(fault::RELEASE_AFTER_COMMIT);
            models
                .make_visible(version)
                .map_err(ReleaseFailure::Publish)
        };
        let released = match authorization {
            Some(auth) => self.ledger.complete(
                auth.release(),
                |store, sealed| {
                    let mut records = store.records()?;
                    records.push(pending_record(&sealed));
                    epsilon = epsilon_totals(&records, private, delta);
                    (commit.outcome.epsilon_rdp, commit.outcome.epsilon_pld) = epsilon;
                    commit.ledger = Some(sealed);
                    store
                        .commit_release(&commit)
                        .map_err(|e| ReleaseFailure::Commit(e.into()))?
                        .ok_or_else(|| {
                            ReleaseFailure::Commit(FlError::Corrupt(
                                "the store committed a private release without its ledger \
                                 record"
                                    .into(),
                            ))
                        })
                },
                |_| publish(),
            ),
            None => self
                .ledger
                .store_mut()
                .commit_release(&commit)
                .map_err(|e| ReleaseFailure::Commit(e.into()))
                .and_then(|_| publish()),
        };
        let dir = match released {
            Ok(dir) => dir,
            Err(ReleaseFailure::Refused(e)) => {
                // Nothing was committed: no ε recorded.
                self.models.discard(version);
                warn!(round = id, "round abandoned: ledger refused: {e}");
                if matches!(e, LedgerError::BudgetExceeded { .. }) {
                    self.finished = Some(format!("privacy budget exhausted: {e}"));
                }
                let outcome = abandoned(
                    format!("the ledger refused the release: {e}"),
                    selected,
                    accepted,
                    rejected,
                );
                return self.abandon(id, &outcome);
            }
            Err(ReleaseFailure::Commit(e)) if self.shared().is_some() => {
                // Nothing was committed, and the round stays closing in the database with
                // its partial sums: the coordinator (this replica once its session is back,
                // or another) releases it from them.
                self.models.discard(version);
                warn!(
                    round = id,
                    "the release could not be committed ({e}); it will be retried"
                );
                return Err(e);
            }
            Err(ReleaseFailure::Commit(e)) => {
                // Nothing was committed: the round is abandoned with no ε recorded.
                self.models.discard(version);
                self.finished = Some(format!(
                    "the release of round {id} could not be committed ({e}); training stopped"
                ));
                let outcome = abandoned(
                    format!("the release could not be committed: {e}; no epsilon spent"),
                    selected,
                    accepted,
                    rejected,
                );
                self.abandon(id, &outcome)?;
                return Err(e);
            }
            Err(ReleaseFailure::Publish(e)) => {
                // Committed: the next start finishes what this one could not.
                self.released += 1;
                self.epsilon = epsilon;
                warn!(
                    round = id,
                    "model v{version} committed but not made visible: {e}"
                );
                self.finished = Some(format!(
                    "model v{version} was released but its files could not be moved into \
                     place ({e}); restart the host to finish publishing it"
                ));
                return Ok(());
            }
        };
        self.released += 1;
        self.epsilon = epsilon;
        fault::point(fault::RELEASE_DONE);
        // Only the newest optimizer state is ever read back; older ones are dead weight.
        let stale = self
            .models
            .version_dir(self.model_version)
            .join(OPTIMIZER_STATE);
        if stale.exists() {
            if let Err(e) = std::fs::remove_file(&stale) {
                warn!(path = %stale.display(), "could not remove an old optimizer state: {e}");
            }
        }
        self.weights = weights;
        self.optimizer = optimizer;
        self.model_version = version;
        info!(
            round = id,
            version,
            accepted,
            epsilon_rdp = ?self.epsilon.0,
            epsilon_pld = ?self.epsilon.1,
            path = %dir.display(),
            "round released ({why})"
        );
        if self.released >= self.cfg.rounds.rounds {
            self.finished = Some(format!("all {} rounds are done", self.cfg.rounds.rounds));
        }
        Ok(())
    }

    /// Steps `optimizer` with `mean` and writes model `version` (package, the NNEF archives
    /// the current version has, made from its own weights, optimizer state) into its staging
    /// directory.
    /// Returns the new weights and the files' digest.
    fn stage(
        &self,
        version: u64,
        optimizer: &mut ServerOptimizer,
        mean: &[NamedTensor],
    ) -> Result<(Vec<NamedTensor>, String), FlError> {
        let mut trainable: Vec<NamedTensor> = self
            .weights
            .iter()
            .filter(|t| is_trainable(&t.name))
            .cloned()
            .collect();
        optimizer.step(&mut trainable, mean)?;
        let mut all = self.weights.clone();
        for t in trainable {
            if let Some(slot) = all.iter_mut().find(|w| w.name == t.name) {
                *slot = t;
            }
        }
        let current = self.models.version_dir(self.model_version);
        let digest = self.models.stage(version, |dir| {
            // Building the model draws from burn's process-wide random state (when its
            // parameters are first used); hold it until the files are written, so that a
            // local round training in another thread keeps its seed's stream.
            let _rng = hush_models::rng::hold_backend_rng();
            let model = self.card.arch.init(&Device::flex())?.load_tensors(
                TensorSource::new(&dir.join(WEIGHTS), all.clone()),
                self.card.arch.name(),
            )?;
            let mut card = self.card.clone();
            card.metrics = None;
            write_package(dir, &card, &model)?;
            fault::point(fault::RELEASE_STAGING);
            // Every version has the NNEF archives the one before has.
            if current.join(NNEF).is_file() {
                write_archives(dir, &archived_pulses(&current)?)?;
            }
            write_optimizer_state(&dir.join(OPTIMIZER_STATE), optimizer)
        })?;
        Ok((all, digest))
    }

    /// `GET /v1/status`.
    pub fn status(&self) -> Result<StatusReport, FlError> {
        let (devices, _) = self.store().devices(self.clock.now_ms())?;
        Ok(StatusReport {
            model_version: self.model_version,
            open_round: self.open.as_ref().map(|o| o.row.id),
            rounds_done: self.released,
            rounds_planned: self.cfg.rounds.rounds,
            devices,
            reports_in_round: self.open.as_ref().map_or(0, |o| o.agg.accepted()),
            reports_rejected: self.rejected_total,
            epsilon_rdp: self.epsilon.0,
            epsilon_pld: self.epsilon.1,
            delta: self.cfg.budget.delta,
            unit: PrivacyUnit::User.to_string(),
            adjacency: "add/remove".into(),
            epsilon_budget: self.cfg.budget.epsilon,
            finished: self.finished.is_some() && self.open.is_none(),
        })
    }

    /// The per-round log (closed rounds from the store; the open one live).
    pub fn round_log(&self) -> Result<Vec<RoundLog>, FlError> {
        Ok(self
            .store()
            .rounds()?
            .into_iter()
            .map(|r| {
                let live = self.open.as_ref().filter(|o| o.row.id == r.id);
                RoundLog {
                    round: r.id,
                    model_version: r.model_version,
                    state: r.state,
                    reason: r.reason,
                    population: r.population,
                    expected_cohort: r.expected_cohort,
                    realized_cohort: r.selected,
                    reports_accepted: live.map_or(r.accepted, |o| o.agg.accepted()),
                    reports_rejected: live.map_or(r.rejected, |o| o.rejected),
                    released_version: r.released_version,
                    epsilon_rdp: r.epsilon_rdp,
                    epsilon_pld: r.epsilon_pld,
                }
            })
            .collect())
    }

    /// The package file `file` of model `version`, if published (only the package's own
    /// files are served). A replica asked for a version newer than it knows catches up
    /// first: the device may have learnt of it from another replica.
    pub fn model_file(&mut self, version: u64, file: &str) -> Result<Option<PathBuf>, FlError> {
        if version > self.model_version {
            self.sync(true)?;
        }
        if !is_published(file) || version > self.model_version {
            return Ok(None);
        }
        let p = self.models.version_dir(version).join(file);
        Ok(p.is_file().then_some(p))
    }
}

/// Rounds released (or recorded and not published, by older hosts) among `rounds`.
fn released_count(rounds: &[RoundRow]) -> u64 {
    rounds
        .iter()
        .filter(|r| matches!(r.state, RoundState::Released | RoundState::ReleaseFailed))
        .count() as u64
}

/// The weights of the model package in `dir`.
fn load_weights(dir: &Path) -> Result<Vec<NamedTensor>, FlError> {
    let (_, model) = load_package(dir, &Device::flex())?;
    Ok(model.named_tensors()?)
}

/// The regular files of a staged version (name, bytes), to store with its release.
fn read_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, FlError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(FlError::io(dir))? {
        let path = entry.map_err(FlError::io(dir))?.path();
        if path.is_file() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push((name, std::fs::read(&path).map_err(FlError::io(&path))?));
        }
    }
    files.sort();
    Ok(files)
}

/// Copies into `models` every version of `versions` it lacks, from the files the database
/// holds, checking each against its recorded digest (staged, then made visible, as a
/// release would).
fn materialize_versions(
    models: &ModelDirs,
    shared: &dyn SharedRounds,
    versions: &[ModelVersionRow],
) -> Result<(), FlError> {
    for v in versions {
        if models.version_dir(v.version).is_dir() {
            continue;
        }
        let files = shared.model_files(v.version)?;
        if files.is_empty() {
            return Err(FlError::Corrupt(format!(
                "model v{} has no files in the database",
                v.version
            )));
        }
        let digest = models.stage(v.version, |dir| {
            for (name, bytes) in &files {
                if !(is_published(name) || name == OPTIMIZER_STATE) {
                    return Err(FlError::Corrupt(format!(
                        "model v{} holds an unexpected file {name:?} in the database",
                        v.version
                    )));
                }
                let path = dir.join(name);
                std::fs::write(&path, bytes).map_err(FlError::io(&path))?;
            }
            Ok(())
        })?;
        if digest != v.digest {
            models.discard(v.version);
            return Err(FlError::Corrupt(format!(
                "model v{}'s files in the database have SHA-256 {digest}, not the {} its \
                 release recorded",
                v.version, v.digest
            )));
        }
        models.make_visible(v.version)?;
        info!(version = v.version, "model copied from the database");
    }
    Ok(())
}

/// [`ServerOptimizerState`] as stored: postcard cannot carry the config's tagged enum,
/// so the config travels as its JSON text.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredOptimizerState {
    config_json: String,
    steps: u64,
    m: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

fn write_optimizer_state(path: &Path, optimizer: &ServerOptimizer) -> Result<(), FlError> {
    let state = optimizer.state();
    let stored = StoredOptimizerState {
        config_json: serde_json::to_string(&state.config)
            .map_err(|e| FlError::Corrupt(format!("encoding the optimizer config: {e}")))?,
        steps: state.steps,
        m: state.m,
        v: state.v,
    };
    let bytes = postcard::to_stdvec(&stored)
        .map_err(|e| FlError::Corrupt(format!("encoding the optimizer state: {e}")))?;
    std::fs::write(path, bytes).map_err(FlError::io(path))
}

/// The optimizer for `config`, resumed from `path` when the latest model version has a
/// state (fresh otherwise: v0, or a model published before states were kept).
fn read_optimizer_state(
    path: &Path,
    config: ServerOptimizerConfig,
) -> Result<ServerOptimizer, FlError> {
    if !path.exists() {
        return Ok(ServerOptimizer::new(config)?);
    }
    let bytes = std::fs::read(path).map_err(FlError::io(path))?;
    let corrupt = |e: String| {
        FlError::Corrupt(format!(
            "{}: the server optimizer state does not decode ({e}); delete it to restart \
             the optimizer from zero",
            path.display()
        ))
    };
    let stored: StoredOptimizerState =
        postcard::from_bytes(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let state = ServerOptimizerState {
        config: serde_json::from_str(&stored.config_json).map_err(|e| corrupt(e.to_string()))?,
        steps: stored.steps,
        m: stored.m,
        v: stored.v,
    };
    ServerOptimizer::resume(config, state).map_err(|e| {
        FlError::config(
            "optimizer",
            &format!(
                "{e} ({}); restore the previous [optimizer] settings, or delete that file to \
                 restart the optimizer from zero",
                path.display()
            ),
        )
    })
}
