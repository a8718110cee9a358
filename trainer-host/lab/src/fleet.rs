//! The fleet in this process: the round engine itself (its SQLite store, ledger, noise,
//! a manual clock) driven directly, no HTTP and no thread per device, each round's
//! reachable cohort trained together in one batched model
//! ([`hush_device::training::local_updates`]). Users come from a [`FleetUsers`]: a
//! corpus's speakers ([`crate::simulate`]) or a population whose data is made when a user
//! is drawn (the population benchmark), so memory follows the cohort, not the population.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hush_device::protocol::{encode_update, StatusReport, TrainTask, Update};
use hush_device::training::{given_update, local_updates, CohortSplit, LocalData};
use hush_fl::{FlConfig, ManualClock, RoundEngine, RoundLog};
use hush_models::checkpoint::NamedTensor;
use hush_store::{SqliteStore, DB_FILE};

use crate::simulate::{fleet_draw, io_err, FleetParticipation, ParticipationCounts, SimulateError};

/// The users of an in-process fleet, registered in index order.
pub trait FleetUsers {
    /// How many.
    fn count(&self) -> usize;
    /// User `i`'s device name (registered as `sim-{name}`).
    fn name(&self, i: usize) -> String;
    /// User `i`'s local examples, read or made when the user is drawn.
    fn data(&self, i: usize) -> Result<Cow<'_, LocalData>, SimulateError>;
    /// Whether user `i` uploads a given delta instead of training (a privacy audit's
    /// canary client); false for every real user.
    fn has_given_delta(&self, _i: usize) -> bool {
        false
    }
    /// User `i`'s given delta (the device bounds it like a trained one); `None` for every
    /// real user.
    fn given_delta(&self, _i: usize) -> Option<Vec<NamedTensor>> {
        None
    }
}

/// Clients who upload a given delta instead of training: a privacy audit's canaries.
pub trait GivenDeltas {
    /// How many.
    fn count(&self) -> usize;
    /// Client `k`'s delta, one tensor per trainable layer of the model.
    fn delta(&self, k: usize) -> Vec<NamedTensor>;
}

/// Real users, then the clients of `given` (enrolled after them, named `canary-{k}`).
pub struct WithGiven<'a> {
    /// The real users.
    pub users: &'a dyn FleetUsers,
    /// The clients with given deltas.
    pub given: &'a dyn GivenDeltas,
}

impl FleetUsers for WithGiven<'_> {
    fn count(&self) -> usize {
        self.users.count() + self.given.count()
    }
    fn name(&self, i: usize) -> String {
        match i.checked_sub(self.users.count()) {
            None => self.users.name(i),
            Some(k) => format!("canary-{k}"),
        }
    }
    fn data(&self, i: usize) -> Result<Cow<'_, LocalData>, SimulateError> {
        if i < self.users.count() {
            self.users.data(i)
        } else {
            Err(SimulateError::Unusable(format!(
                "client {i} uploads a given delta and has no local data"
            )))
        }
    }
    fn has_given_delta(&self, i: usize) -> bool {
        i >= self.users.count()
    }
    fn given_delta(&self, i: usize) -> Option<Vec<NamedTensor>> {
        let k = i.checked_sub(self.users.count())?;
        Some(self.given.delta(k))
    }
}

/// Users held in memory with their names (a corpus's training speakers).
impl FleetUsers for &[(String, LocalData)] {
    fn count(&self) -> usize {
        self.len()
    }
    fn name(&self, i: usize) -> String {
        self[i].0.clone()
    }
    fn data(&self, i: usize) -> Result<Cow<'_, LocalData>, SimulateError> {
        Ok(Cow::Borrowed(&self[i].1))
    }
}

/// What a run of the fleet left.
#[derive(Debug)]
pub struct FleetRun {
    /// The host's log of every round.
    pub round_log: Vec<RoundLog>,
    /// The host's status at the end (ε spent, versions).
    pub status: StatusReport,
    /// The last published version.
    pub final_version: u64,
    /// Its package.
    pub final_dir: PathBuf,
    /// Uploads the engine accepted.
    pub uploads_accepted: u64,
    /// Uploads it refused.
    pub uploads_refused: u64,
    /// Drawn devices that were away, dropped out or came late.
    pub participation: ParticipationCounts,
}

/// How the in-process fleet behaves and trains.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcessFleet {
    /// Who is reachable, drops out or comes late.
    pub participation: FleetParticipation,
    /// How a round's local training is batched (changes no result).
    pub batching: CohortSplit,
}

/// Rounds in a row that may open with an empty cohort before the run gives up (q so small
/// that nobody is ever drawn).
const MAX_EMPTY_ROUNDS: u32 = 10_000;

impl InProcessFleet {
    /// Runs `host_cfg`'s rounds: the engine on its SQLite store in `host_cfg`'s data
    /// directory with a manual clock (one virtual second per round), `users` registered in
    /// order with one enrolment token, each cohort's reachable devices trained together
    /// from the published model's files and their updates checked and added as the server
    /// would. Drawn devices that are away, drop out or straggle leave the round to close at its
    /// deadline; a straggler's upload then arrives too late. `observe` sees every published
    /// version (the initial one first) before the next round trains.
    pub fn run(
        &self,
        host_cfg: &FlConfig,
        users: &dyn FleetUsers,
        log: &mut dyn FnMut(&str),
        observe: &mut dyn FnMut(u64, &Path) -> Result<(), SimulateError>,
    ) -> Result<FleetRun, SimulateError> {
        let data_dir = &host_cfg.server.data_dir;
        std::fs::create_dir_all(data_dir).map_err(|e| io_err(data_dir, e))?;
        let store = SqliteStore::open(&data_dir.join(DB_FILE)).map_err(hush_fl::FlError::from)?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let clock = ManualClock::new(now_ms);
        let mut engine = RoundEngine::open(host_cfg.clone(), store, clock.clone())?;
        log(&format!(
            "round engine in process (store {})",
            data_dir.join(DB_FILE).display()
        ));
        let enrolment = engine
            .issue_enrolment(
                "simulation",
                users.count() as u64,
                Duration::from_secs(86_400),
            )?
            .token;
        // Device ids key the cohort draws: register in user order, as the HTTP fleet does.
        let mut index = HashMap::with_capacity(users.count());
        for i in 0..users.count() {
            let id = match engine.register(&format!("sim-{}", users.name(i)), &enrolment)? {
                Ok(r) => r.device_id,
                Err(rej) => {
                    return Err(SimulateError::Unusable(format!(
                        "device {i}: registration refused: {}",
                        rej.error
                    )))
                }
            };
            index.insert(id, i);
        }
        let validator = engine.validator();
        let (mut accepted, mut refused) = (0u64, 0u64);
        let mut counts = ParticipationCounts::default();
        let fleet_seed = host_cfg.seed.unwrap_or(0) ^ 0xF1EE_7000;
        let behaviour = self.participation;
        let mut empty = 0u32;
        loop {
            let (version, dir) = engine.latest_model();
            observe(version, &dir)?;
            if engine.finished().is_some() {
                break;
            }
            let tasks = engine.cohort_tasks()?;
            if tasks.is_empty() {
                empty += 1;
                if empty > MAX_EMPTY_ROUNDS {
                    return Err(SimulateError::Unusable(format!(
                        "{MAX_EMPTY_ROUNDS} rounds in a row drew nobody (q = {}, {} devices)",
                        host_cfg.rounds.sampling_rate,
                        users.count()
                    )));
                }
                clock.advance(1_000);
                continue;
            }
            empty = 0;
            let round = tasks[0].1.round;
            let deadline_in = tasks[0].1.deadline_ms;
            let reachable = behaviour.available_fraction(round);
            // The round trains the latest published version; nothing is published before its
            // whole cohort reported, so it stays the same through the loop.
            let package = engine.latest_model().1;
            // Every reachable device of the cohort trains, batched together; then each one's
            // upload is dropped, late or on time.
            let mut drawn = Vec::with_capacity(tasks.len());
            let mut given = Vec::new();
            for (device, task) in &tasks {
                if fleet_draw(fleet_seed, round, *device, 1) >= reachable {
                    counts.unavailable += 1;
                    continue;
                }
                let user = *index.get(device).ok_or_else(|| {
                    SimulateError::Unusable(format!(
                        "the engine drew device {device}, not enrolled here"
                    ))
                })?;
                if users.has_given_delta(user) {
                    given.push((task, *device, user));
                } else {
                    drawn.push((users.data(user)?, task, *device));
                }
            }
            let reachable_tasks: Vec<(&LocalData, &_, u64)> = drawn
                .iter()
                .map(|(d, t, id)| (d.as_ref(), *t, *id))
                .collect();
            let trained = local_updates(&package, &reachable_tasks, self.batching)?
                .into_iter()
                .zip(&reachable_tasks)
                .map(|((update, _), (_, task, device))| {
                    Ok::<_, SimulateError>((*task, *device, update))
                });
            // Given deltas become updates one at a time (a canary is the whole model's size).
            let given = given.into_iter().map(|(task, device, user)| {
                let mut delta = users.given_delta(user).ok_or_else(|| {
                    SimulateError::Unusable(format!("user {user} has no given delta"))
                })?;
                // A given delta may be flat (a canary over the flat layout); the upload
                // carries the model's shapes, which the host checks.
                for (t, (_, shape)) in delta.iter_mut().zip(&validator.limits.layout) {
                    if t.data.len() == shape.iter().product::<usize>() {
                        t.shape.clone_from(shape);
                    }
                }
                Ok((task, device, given_update(task, device, delta)?))
            });
            let mut late = Vec::new();
            for upload in trained.chain(given) {
                let (task, device, update): (&TrainTask, u64, Update) = upload?;
                let draw = |what| fleet_draw(fleet_seed, round, device, what);
                let received = encode_update(&update)
                    .and_then(|body| validator.received(body.into()))
                    .map_err(|e| SimulateError::Unusable(format!("device {device}: {e}")))?;
                if draw(2) < behaviour.dropout {
                    counts.dropped += 1;
                    continue;
                }
                if draw(3) < behaviour.straggle {
                    late.push((device, received));
                    continue;
                }
                match engine.accept(device, task.round, received)? {
                    Ok(_) => accepted += 1,
                    Err(rej) => {
                        refused += 1;
                        log(&format!(
                            "device {device}, round {}: refused: {}",
                            task.round, rej.error
                        ));
                    }
                }
            }
            // Somebody drawn did not report: the round closes at its deadline.
            if engine.round_is_open(round) {
                clock.advance(deadline_in + 1);
                engine.tick()?;
            }
            for (device, checked) in late {
                counts.late += 1;
                match engine.accept(device, round, checked)? {
                    Ok(_) => {
                        return Err(SimulateError::Unusable(format!(
                            "device {device}'s upload after round {round}'s deadline was counted"
                        )))
                    }
                    Err(_) => refused += 1,
                }
            }
            clock.advance(1_000);
        }
        let (final_version, final_dir) = engine.latest_model();
        Ok(FleetRun {
            round_log: engine.round_log()?,
            status: engine.status()?,
            final_version,
            final_dir,
            uploads_accepted: accepted,
            uploads_refused: refused,
            participation: counts,
        })
    }
}
