//! The device's main loop: register once, check in, train when picked, upload, repeat
//! until the host says training is done or `stop` is set (Ctrl-C).
//!
//! Transient failures (host unreachable, 5xx) are retried with exponential backoff; an
//! upload is retried with the same body, and the host counts a (round, device) once, so
//! a retry after a lost reply never counts twice. A refusal (4xx) is reported and the
//! loop goes on with the next check-in.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::infer::BuildReads;
use crate::protocol::{encode_update, Assignment, CheckInRequest, TrainTask};
use crate::training::{local_update, LocalData, LocalRoundReport};
use hush_models::package::ModelCard;

use super::{ClientError, DeviceIdentity, DeviceState, HostClient};

/// How a device joins a host.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    /// Host URL.
    pub server: String,
    /// The device's labelled recordings (Speech Commands layout).
    pub data: PathBuf,
    /// Only this speaker's clips (simulations share one corpus among devices).
    pub speaker: Option<String>,
    /// State directory (identity, models).
    pub state: PathBuf,
    /// Label sent at registration.
    pub label: String,
    /// Timeout of each HTTP call.
    pub timeout: Duration,
    /// Longest wait between retries after transient failures.
    pub max_backoff: Duration,
    /// Upload attempts before giving up on a round.
    pub upload_attempts: u32,
    /// Trust only the CA certificates in this PEM file for an `https://` host (default:
    /// Mozilla's roots).
    pub ca_cert: Option<PathBuf>,
    /// The enrolment token the operator issued, needed to register (not once the device
    /// holds an identity).
    pub enrolment_token: String,
}

impl JoinConfig {
    /// Defaults for `server`, `data` and `state`: 30 s timeouts, backoff up to 10 s,
    /// 5 upload attempts.
    pub fn new(server: &str, data: PathBuf, state: PathBuf) -> Self {
        Self {
            server: server.to_string(),
            data,
            speaker: None,
            state,
            label: "hush-device".into(),
            timeout: Duration::from_secs(30),
            max_backoff: Duration::from_secs(10),
            upload_attempts: 5,
            ca_cert: None,
            enrolment_token: String::new(),
        }
    }
}

/// Something the loop did (for logs and progress).
#[derive(Debug)]
pub enum JoinEvent<'a> {
    /// Registered (or reused a stored identity).
    Joined {
        /// Device id.
        device_id: u64,
        /// Whether the identity is new.
        new: bool,
    },
    /// Trained locally for a round.
    Trained {
        /// Round.
        round: u64,
        /// What the local round did.
        report: &'a LocalRoundReport,
    },
    /// The host took the update.
    Uploaded {
        /// Round.
        round: u64,
        /// It had already been counted (a retry).
        duplicate: bool,
    },
    /// The host refused the update or the round's work failed.
    Refused {
        /// Round.
        round: u64,
        /// Why.
        error: &'a ClientError,
    },
    /// A transient failure; retrying after `wait`.
    Retrying {
        /// Why.
        error: &'a ClientError,
        /// Delay before the retry.
        wait: Duration,
    },
}

/// How the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinSummary {
    /// Device id.
    pub device_id: u64,
    /// Rounds trained.
    pub rounds_trained: u64,
    /// Updates the host accepted.
    pub uploads_accepted: u64,
    /// Updates the host refused.
    pub uploads_refused: u64,
    /// The host's reason when it said training is done; `None` when stopped.
    pub done: Option<String>,
    /// The last model version the host published and where this device keeps it (the
    /// state directory's `models/v{N}`), downloaded when the host said training is done.
    pub model: Option<(u64, PathBuf)>,
}

/// Sleeps `d` in short slices; returns `false` if `stop` was set meanwhile.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(25)));
    }
    !stop.load(Ordering::Relaxed)
}

/// Local data for the model in `package`, reloaded only when the model's features or
/// labels change.
struct DataCache {
    key: Option<String>,
    data: Option<LocalData>,
}

impl DataCache {
    fn get(
        &mut self,
        cfg: &JoinConfig,
        package: &std::path::Path,
    ) -> Result<&LocalData, ClientError> {
        let card = ModelCard::read(package)
            .map_err(crate::infer::InferError::from)
            .map_err(crate::training::TrainingError::from)?;
        let io = card.arch.io();
        let key = format!("{}|{}|{:?}", card.features, io.frames, card.labels);
        if self.key.as_deref() != Some(key.as_str()) || self.data.is_none() {
            let data =
                LocalData::load_for_model(&card, package, &cfg.data, cfg.speaker.as_deref())?;
            self.data = Some(data);
            self.key = Some(key);
        }
        self.data.as_ref().ok_or_else(|| ClientError::State {
            path: cfg.data.clone(),
            reason: "local data not loaded".into(),
        })
    }
}

/// Runs the device loop until the host says done, `stop` is set, or a non-transient
/// error (e.g. a revoked token) ends it.
pub fn join(
    cfg: &JoinConfig,
    stop: &AtomicBool,
    events: &mut dyn FnMut(JoinEvent<'_>),
) -> Result<JoinSummary, ClientError> {
    let state = DeviceState::open(&cfg.state)?;
    let anonymous = match &cfg.ca_cert {
        None => HostClient::new(&cfg.server, cfg.timeout)?,
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| ClientError::State {
                path: path.clone(),
                reason: format!("cannot read the CA certificate: {e}"),
            })?;
            HostClient::with_ca_pem(&cfg.server, cfg.timeout, &pem).map_err(|e| {
                ClientError::State {
                    path: path.clone(),
                    reason: e.to_string(),
                }
            })?
        }
    };
    let mut backoff = Duration::from_millis(100);
    let identity = loop {
        match state.identity(&cfg.server)? {
            Some(id) => {
                events(JoinEvent::Joined {
                    device_id: id.device_id,
                    new: false,
                });
                break id;
            }
            None => match anonymous.register(&cfg.label, &cfg.enrolment_token) {
                Ok(r) => {
                    let id = DeviceIdentity {
                        server: cfg.server.clone(),
                        device_id: r.device_id,
                        token: r.token,
                    };
                    state.save_identity(&id)?;
                    events(JoinEvent::Joined {
                        device_id: id.device_id,
                        new: true,
                    });
                    break id;
                }
                Err(e) if e.is_transient() => {
                    let wait = e.retry_after().unwrap_or(backoff).max(backoff);
                    events(JoinEvent::Retrying { error: &e, wait });
                    if !nap(wait, stop) {
                        return Err(e);
                    }
                    backoff = (backoff * 2).min(cfg.max_backoff);
                }
                Err(e) => return Err(e),
            },
        }
    };
    let client = anonymous.with_token(&identity.token);
    let mut summary = JoinSummary {
        device_id: identity.device_id,
        rounds_trained: 0,
        uploads_accepted: 0,
        uploads_refused: 0,
        done: None,
        model: None,
    };
    let mut cache = DataCache {
        key: None,
        data: None,
    };
    let mut held: Option<u64> = None;
    backoff = Duration::from_millis(100);
    while !stop.load(Ordering::Relaxed) {
        let examples = cache.data.as_ref().map_or(0, |d| d.len() as u32);
        let assignment = match client.check_in(&CheckInRequest {
            model_version: held,
            examples,
        }) {
            Ok(a) => {
                backoff = Duration::from_millis(100);
                a
            }
            Err(e) if e.is_transient() => {
                let wait = e.retry_after().unwrap_or(backoff).max(backoff);
                events(JoinEvent::Retrying { error: &e, wait });
                nap(wait, stop);
                backoff = (backoff * 2).min(cfg.max_backoff);
                continue;
            }
            Err(e) => return Err(e),
        };
        match assignment {
            Assignment::Wait { retry_after_ms } => {
                nap(Duration::from_millis(retry_after_ms.min(60_000)), stop);
            }
            Assignment::Done {
                reason,
                model_version,
            } => {
                // The federated model stays on the device, to listen with.
                if let Some(v) = model_version {
                    let dir = state.ensure_model(&client, v, BuildReads::THIS_BUILD)?;
                    summary.model = Some((v, dir));
                }
                summary.done = Some(reason);
                break;
            }
            Assignment::Train(task) => {
                match train_and_upload(
                    cfg,
                    &state,
                    &client,
                    &mut cache,
                    &task,
                    identity.device_id,
                    stop,
                    events,
                ) {
                    Ok(Some(duplicate)) => {
                        held = Some(task.model_version);
                        summary.rounds_trained += 1;
                        summary.uploads_accepted += 1;
                        events(JoinEvent::Uploaded {
                            round: task.round,
                            duplicate,
                        });
                    }
                    Ok(None) => {}
                    Err(e) if matches!(e, ClientError::Refused { status: 401, .. }) => {
                        return Err(e)
                    }
                    Err(e) => {
                        summary.uploads_refused += 1;
                        events(JoinEvent::Refused {
                            round: task.round,
                            error: &e,
                        });
                    }
                }
            }
        }
    }
    Ok(summary)
}

/// Trains for `task` and uploads, retrying transient failures with the same body.
/// `Ok(None)` when stopped before the upload went through.
#[allow(clippy::too_many_arguments)]
fn train_and_upload(
    cfg: &JoinConfig,
    state: &DeviceState,
    client: &HostClient,
    cache: &mut DataCache,
    task: &TrainTask,
    device_id: u64,
    stop: &AtomicBool,
    events: &mut dyn FnMut(JoinEvent<'_>),
) -> Result<Option<bool>, ClientError> {
    let package = state.ensure_model(client, task.model_version, BuildReads::THIS_BUILD)?;
    let data = cache.get(cfg, &package)?;
    let (update, report) = local_update(&package, data, task, device_id)?;
    events(JoinEvent::Trained {
        round: task.round,
        report: &report,
    });
    let body = encode_update(&update)?;
    let mut wait = Duration::from_millis(100);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match client.upload(task.round, &body) {
            Ok(receipt) => return Ok(Some(receipt.duplicate)),
            Err(e) if e.is_transient() && attempt < cfg.upload_attempts => {
                // The host's Retry-After (back-pressure) overrides the doubling backoff.
                let pause = e.retry_after().unwrap_or(wait).max(wait);
                events(JoinEvent::Retrying {
                    error: &e,
                    wait: pause,
                });
                if !nap(pause, stop) {
                    return Ok(None);
                }
                wait = (wait * 2).min(cfg.max_backoff);
            }
            Err(e) => return Err(e),
        }
    }
}
