//! The round server: the federated round engine ([`hush_fl::RoundEngine`]) over HTTP
//! or HTTPS ([`tls`], rustls), on the configured store ([`hush_store::open`]: SQLite in the
//! data directory, or PostgreSQL with `server.store`), and
//! [`start_host`] / [`HostHandle`] for the CLI, the demo and tests.
//!
//! Connections are accepted and timed by [`conn`] (header, idle, request and TLS handshake
//! timeouts; a connection limit that evicts idle sockets first), counted in [`metrics`],
//! and rate-limited per address and per device by [`ratelimit`]. Endpoints are those of
//! [`hush_device::protocol`], plus `GET /metrics` (Prometheus); `/v1/status` and
//! `/metrics` need the operator token (`<data_dir>/operator.token`, written at first
//! start), everything else a device token, and registration an enrolment token
//! ([`hush_fl::enrolment`]).
//!
//! Every error is an HTTP status with a JSON [`ApiError`] body: `unauthorized` (401),
//! `enrolment_required` / `enrolment_refused` (403), `too_large` (413: checked from
//! `Content-Length` before reading, and while reading), `body_timeout` (408: a body slower
//! than `limits.body_min_bytes_per_sec`; the connection is closed), `rate_limited` (429)
//! and `busy` (503, too many uploads at once) — both with `Retry-After` —,
//! `malformed` / `bad_checksum` / `invalid_update` / `bad_path` (400), `not_found` (404),
//! `method_not_allowed` (405), the upload refusals of [`hush_fl::aggregate`], and `internal`
//! (500, a host failure). Handlers never unwrap request data; work on the engine runs on
//! blocking threads, and a panic there becomes a 500, not a dead server. An upload's frame
//! is decoded ([`hush_fl::aggregate::UpdateValidator`]) before the engine's lock is taken;
//! the engine then reads its values once, checking and adding them in one pass.

pub mod conn;
pub mod metrics;
pub mod ratelimit;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hush_device::protocol::{
    ApiError, CheckInRequest, RegisterRequest, StatusReport, CHECKSUM_HEADER,
};
use hush_fl::aggregate::{Rejection, UpdateValidator};
use hush_fl::config::LimitsSection;
use hush_fl::engine::{token_hash, Acceptance};
use hush_fl::enrolment::{self, random_token};
use hush_fl::store::Store;
use hush_fl::{Clock, FlConfig, FlError, RoundEngine, RoundLog, SystemClock};
use rand::SeedableRng;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::conn::{ConnLimits, PeerAddr};
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;

/// The engine as the server runs it: the configured store (SQLite in the data directory,
/// or `server.store`'s PostgreSQL) and the system clock.
pub type HostEngine = RoundEngine<Box<dyn Store>, SystemClock>;

/// Largest JSON control body.
const MAX_JSON_BYTES: usize = 64 * 1024;
/// Longest device label kept.
const MAX_LABEL_CHARS: usize = 256;
/// The operator token's file in the data directory.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// Descriptors kept free of connections (database, WAL, model files, the listener).
const RESERVED_FDS: usize = 128;

struct Shared {
    mgr: Mutex<HostEngine>,
    /// A second connection to the store, for token checks outside the engine's lock.
    auth: Mutex<Box<dyn Store>>,
    validator: Arc<UpdateValidator>,
    metrics: Arc<Metrics>,
    limits: LimitsSection,
    uploads: Arc<Semaphore>,
    register_per_address: RateLimiter<IpAddr>,
    checkin_per_address: RateLimiter<IpAddr>,
    checkin_per_device: RateLimiter<u64>,
    operator_token_hash: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HostEngine> {
        // A panic while holding the lock leaves the manager as it was between statements;
        // keep serving rather than poisoning every later request.
        self.mgr.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type AppState = Arc<Shared>;

/// The JSON error code of a response, for the refusal counter.
#[derive(Clone)]
struct ErrorCode(String);

fn api_error(status: StatusCode, code: &str, error: impl Into<String>) -> Response {
    let mut resp = (
        status,
        Json(ApiError {
            code: code.into(),
            error: error.into(),
        }),
    )
        .into_response();
    resp.extensions_mut().insert(ErrorCode(code.to_string()));
    resp
}

/// 429 or 503 with `Retry-After` (whole seconds, at least 1).
fn retry_later(status: StatusCode, code: &str, error: String, wait: Duration) -> Response {
    let mut resp = api_error(status, code, error);
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

fn internal(e: impl std::fmt::Display) -> Response {
    warn!("internal error: {e}");
    api_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
}

/// What a failed engine or store call answers: the store being unreachable (a database
/// restarting, a full disk) is a 503 `store_unavailable` with `Retry-After`, which devices
/// retry; anything else a 500.
fn engine_failed(e: FlError) -> Response {
    match e {
        FlError::Store(e) => {
            warn!("store failed: {e}");
            retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("the host's store failed ({e}); try again"),
                Duration::from_secs(1),
            )
        }
        e => internal(e),
    }
}

fn rejection(r: Rejection) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
    api_error(status, r.code, r.error)
}

/// Counts every JSON error by its code (the `hush_requests_refused_total` metric).
async fn count_refusals(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if let Some(ErrorCode(code)) = resp.extensions().get::<ErrorCode>() {
        state.metrics.refused(code);
    }
    resp
}

/// Runs `f` on the manager on a blocking thread.
async fn with_mgr<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&mut HostEngine) -> Result<T, FlError> + Send + 'static,
) -> Result<T, Response> {
    let s = state.clone();
    match tokio::task::spawn_blocking(move || f(&mut s.lock())).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(engine_failed(e)),
        Err(e) => Err(internal(format!("request handler failed: {e}"))),
    }
}

fn unauthorized(why: &str, which: &str) -> Response {
    api_error(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        format!("{why}; send `Authorization: Bearer <token>` with {which}"),
    )
}

/// The bearer token of `headers`, if well-formed.
fn bearer(headers: &HeaderMap) -> Result<String, &'static str> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or("missing Authorization header")?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .map(str::to_string)
        .ok_or("Authorization header is not `Bearer <token>`")
}

/// The device holding the request's bearer token, checked on the store's second
/// connection: requests do not queue behind the engine's lock just to be authenticated.
async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<u64, Response> {
    const WHICH: &str = "the token from registration";
    let token = bearer(headers).map_err(|why| unauthorized(why, WHICH))?;
    let s = state.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let store = s.auth.lock().unwrap_or_else(|p| p.into_inner());
        enrolment::authenticate(&*store, &token, SystemClock.now_ms())
    })
    .await;
    match checked {
        Ok(Ok(Ok(id))) => Ok(id),
        Ok(Ok(Err(why))) => Err(unauthorized(why, WHICH)),
        Ok(Err(e)) => Err(engine_failed(e)),
        Err(e) => Err(internal(format!("token check failed: {e}"))),
    }
}

/// Hands memory freed by the last round (update buffers, the sum) back to the OS: glibc
/// keeps it otherwise, and the host's footprint grows round after round (BENCHMARKS.md,
/// "Fleet load").
fn trim_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Only the operator (`/v1/status`, `/metrics`): the refusal for anyone else.
fn refuse_unless_operator(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    const WHICH: &str = "the operator token (the host's data directory, `operator.token`)";
    match bearer(headers) {
        Err(why) => Some(unauthorized(why, WHICH)),
        Ok(token) if token_hash(&token) == state.operator_token_hash => None,
        Ok(_) => Some(unauthorized("not the operator token", WHICH)),
    }
}

fn rate_limited(what: &str, wait: Duration) -> Response {
    retry_later(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("too many {what}; retry after the time in Retry-After"),
        wait,
    )
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads a body of at most `limit` bytes: 413 from `Content-Length` before reading, or as
/// soon as the stream passes the limit; 408 (and the connection closed) if it arrives
/// slower than `limits.body_min_bytes_per_sec` after `limits.body_timeout_secs` of grace.
async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, Response> {
    let too_large = |got: String| {
        api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("body is {got} bytes; the limit is {limit}"),
        )
    };
    let declared = content_length(headers);
    if let Some(n) = declared {
        if n > limit as u64 {
            return Err(too_large(n.to_string()));
        }
    }
    let l = &state.limits;
    let expected = declared.unwrap_or(limit as u64) as f64;
    let allowed =
        Duration::from_secs_f64(l.body_timeout_secs + expected / l.body_min_bytes_per_sec);
    match tokio::time::timeout(allowed, to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if e.to_string().contains("length limit") => {
            Err(too_large(format!("more than {limit}")))
        }
        Ok(Err(e)) => Err(api_error(
            StatusCode::BAD_REQUEST,
            "incomplete_body",
            format!("the body could not be read: {e}"),
        )),
        Err(_) => {
            state.metrics.connection_closed(conn::reason::BODY);
            let mut resp = api_error(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the body did not arrive within {:.1} s (limits.body_timeout_secs plus \
                     its size at limits.body_min_bytes_per_sec = {} B/s); closing the \
                     connection",
                    allowed.as_secs_f64(),
                    l.body_min_bytes_per_sec
                ),
            );
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(resp)
        }
    }
}

async fn read_json<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, Response> {
    let bytes = read_body(state, headers, body, MAX_JSON_BYTES).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        api_error(
            StatusCode::BAD_REQUEST,
            "malformed",
            format!(
                "body is not a valid {} JSON object: {e}",
                std::any::type_name::<T>().rsplit("::").next().unwrap_or("")
            ),
        )
    })
}

async fn register(
    State(state): State<AppState>,
    Extension(PeerAddr(peer)): Extension<PeerAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(wait) = state.register_per_address.check(&peer.ip()) {
        return rate_limited("registrations from this address", wait);
    }
    let req: RegisterRequest = match read_json(&state, &headers, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let label: String = req.label.chars().take(MAX_LABEL_CHARS).collect();
    let enrolment = req.enrolment_token;
    match with_mgr(&state, move |m| m.register(&label, &enrolment)).await {
        Ok(Ok(r)) => (StatusCode::OK, Json(r)).into_response(),
        Ok(Err(rej)) => rejection(rej),
        Err(resp) => resp,
    }
}

async fn check_in(
    State(state): State<AppState>,
    Extension(PeerAddr(peer)): Extension<PeerAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    if let Err(wait) = state.checkin_per_address.check(&peer.ip()) {
        return rate_limited("check-ins from this address", wait);
    }
    let device = match authenticate(&state, &headers).await {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    if let Err(wait) = state.checkin_per_device.check(&device) {
        return rate_limited("check-ins from this device", wait);
    }
    let req: CheckInRequest = match read_json(&state, &headers, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let resp = match with_mgr(&state, move |m| m.check_in(device, &req)).await {
        Ok(a) => (StatusCode::OK, Json(a)).into_response(),
        Err(resp) => resp,
    };
    state.metrics.checkin.observe(started.elapsed());
    resp
}

async fn upload(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let device = match authenticate(&state, &headers).await {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    let round: u64 = match path.ok().and_then(|Path(r)| r.parse().ok()) {
        Some(r) => r,
        None => {
            return api_error(
                StatusCode::BAD_REQUEST,
                "bad_path",
                "expected /v1/rounds/{round}/update with a numeric round id",
            )
        }
    };
    // Back-pressure: a bounded number of bodies in memory and decoders running.
    let Ok(_permit) = state.uploads.clone().try_acquire_owned() else {
        return retry_later(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "{} uploads are being read already (limits.max_concurrent_uploads); retry \
                 after the time in Retry-After",
                state.limits.max_concurrent_uploads
            ),
            Duration::from_secs(1),
        );
    };
    let bytes = match read_body(&state, &headers, body, state.validator.limits.max_bytes).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let checksum = headers
        .get(CHECKSUM_HEADER)
        .map(|v| v.to_str().map(str::to_string));
    let checksum = match checksum {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                "bad_checksum",
                format!("header `{CHECKSUM_HEADER}` is not ASCII hex"),
            )
        }
    };
    // The frame is decoded outside the engine's lock; the engine reads the values once,
    // checking and adding them in the same pass.
    let validator = state.validator.clone();
    let checked =
        tokio::task::spawn_blocking(move || validator.validate(bytes, checksum.as_deref())).await;
    let update = match checked {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => return rejection(e.into()),
        Err(e) => return internal(format!("decoding failed: {e}")),
    };
    // With several replicas the upload is queued, and answered once the replica's next
    // group commit holds it: the engine's lock is let go in between, so the uploads that
    // arrive meanwhile join the same transaction.
    let answer = match with_mgr(&state, move |m| m.accept_deferred(device, round, update)).await {
        Ok(Acceptance::Done(answer)) => Ok(answer),
        Ok(Acceptance::Pending(ticket)) => with_mgr(&state, move |m| m.flush(ticket)).await,
        Err(resp) => Err(resp),
    };
    let resp = match answer {
        Ok(Ok(receipt)) => {
            state.metrics.upload_accepted();
            (StatusCode::OK, Json(receipt)).into_response()
        }
        Ok(Err(rej)) => rejection(rej),
        Err(resp) => resp,
    };
    state.metrics.upload.observe(started.elapsed());
    resp
}

async fn model_file(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    if let Err(resp) = authenticate(&state, &headers).await {
        return resp;
    }
    let parsed = path.ok().and_then(|Path((v, f))| {
        v.trim_start_matches('v')
            .parse::<u64>()
            .ok()
            .map(|v| (v, f))
    });
    let Some((version, file)) = parsed else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "bad_path",
            "expected /v1/models/{version}/{file} with a numeric version",
        );
    };
    let found = match with_mgr(&state, {
        let file = file.clone();
        move |m| m.model_file(version, &file)
    })
    .await
    {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let Some(p) = found else {
        return api_error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no file {file:?} in model v{version}; published versions have model.json, \
                 weights.safetensors, model.onnx and its NNEF archive model.nnef.tar, and for a \
                 model with a streaming form frames.onnx, head.onnx, frames.nnef.tar, \
                 head.nnef.tar and the trunk pulsed for listening, frames.pulse{{N}}.nnef.tar"
            ),
        );
    };
    let read = {
        let p = p.clone();
        tokio::task::spawn_blocking(move || std::fs::read(p)).await
    };
    match read {
        Ok(Ok(bytes)) => {
            let ct = if file.ends_with(".json") {
                "application/json"
            } else {
                "application/octet-stream"
            };
            ([(header::CONTENT_TYPE, ct)], bytes).into_response()
        }
        Ok(Err(e)) => internal(format!("{}: {e}", p.display())),
        Err(e) => internal(format!("reading {}: {e}", p.display())),
    }
}

async fn status(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(refused) = refuse_unless_operator(&state, &headers) {
        return refused;
    }
    match with_mgr(&state, |m| m.status()).await {
        Ok(s) => (StatusCode::OK, Json(s)).into_response(),
        Err(resp) => resp,
    }
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(refused) = refuse_unless_operator(&state, &headers) {
        return refused;
    }
    match with_mgr(&state, |m| Ok((m.status()?, m.round_log()?))).await {
        Ok((status, rounds)) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            state.metrics.render(&status, &rounds),
        )
            .into_response(),
        Err(resp) => resp,
    }
}

async fn not_found() -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint; see hush_device::protocol for the endpoints under /v1",
    )
}

async fn method_not_allowed() -> Response {
    api_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/devices", post(register))
        .route("/v1/checkin", post(check_in))
        .route("/v1/models/{version}/{file}", get(model_file))
        .route("/v1/rounds/{round}/update", post(upload))
        .route("/v1/status", get(status))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_refusals,
        ))
        .with_state(state)
}

/// The operator token: read from `<data_dir>/operator.token`, or made and written there
/// (owner-only, via a temporary file and a rename) on first start.
fn operator_token(data_dir: &FsPath) -> Result<String, FlError> {
    let path = data_dir.join(OPERATOR_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(FlError::Io { path, source: e }),
    }
    let token = random_token("hush-op-", &mut rand_chacha::ChaCha20Rng::from_os_rng());
    let tmp = data_dir.join(format!("{OPERATOR_TOKEN_FILE}.tmp"));
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp).map_err(FlError::io(&tmp))?;
        writeln!(f, "{token}").map_err(FlError::io(&tmp))?;
        f.sync_all().map_err(FlError::io(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(FlError::io(&path))?;
    info!(path = %path.display(), "operator token written");
    Ok(token)
}

/// Raises this process's soft open-file limit to its hard limit and returns the soft
/// limit now in force (`None` where it cannot be read).
fn raise_open_file_limit() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
        #[allow(unsafe_code)]
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return None;
            }
            if lim.rlim_cur < lim.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: lim.rlim_max,
                    rlim_max: lim.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    lim = raised;
                }
            }
        }
        Some(usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The connection limit: `limits.max_connections`, or what the open-file limit allows;
/// an explicit value the limit cannot hold is an error naming the key.
fn connection_limit(limits: &LimitsSection) -> Result<usize, FlError> {
    let fds = raise_open_file_limit();
    let room = fds.map(|n| n.saturating_sub(RESERVED_FDS).max(2));
    match (limits.max_connections, room) {
        (Some(n), Some(room)) if n > room => Err(FlError::config(
            "limits.max_connections",
            &format!(
                "= {n}, but the open-file limit ({}) leaves room for {room} connections \
                 beside {RESERVED_FDS} descriptors for files; raise `ulimit -n` or lower it",
                fds.unwrap_or(0)
            ),
        )),
        (Some(n), _) => Ok(n),
        (None, Some(room)) => Ok(room),
        (None, None) => Ok(1024 - RESERVED_FDS),
    }
}

fn conn_limits(l: &LimitsSection, max_connections: usize) -> ConnLimits {
    ConnLimits {
        header_timeout: Duration::from_secs_f64(l.header_timeout_secs),
        idle_timeout: Duration::from_secs_f64(l.idle_timeout_secs),
        request_timeout: Duration::from_secs_f64(l.request_timeout_secs),
        tls_handshake_timeout: Duration::from_secs_f64(l.tls_handshake_timeout_secs),
        max_connections,
    }
}

/// Blocks until the process gets SIGTERM (what `systemctl stop` and `docker stop` send) or
/// SIGINT (Ctrl-C), and says which: what `hush-host serve` waits for before
/// [`HostHandle::shutdown`].
pub fn wait_for_stop_signal() -> Result<&'static str, FlError> {
    let failed = |e: std::io::Error| FlError::Server(format!("waiting for a stop signal: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(failed)?;
    rt.block_on(async {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                _ = term.recv() => Ok("SIGTERM"),
                r = tokio::signal::ctrl_c() => r.map(|()| "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.map(|()| "Ctrl-C")
        }
    })
    .map_err(failed)
}

/// A running host: its address and handles to stop it and to read its state.
pub struct HostHandle {
    /// The bound address (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    https: bool,
    operator_token: String,
    shared: AppState,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<Result<(), FlError>>>,
}

/// Opens the data directory (recovering from a previous run), binds `server.listen` and
/// serves on a background thread with its own tokio runtime. Returns once the listener is
/// bound.
pub fn start_host(config: FlConfig) -> Result<HostHandle, FlError> {
    let addr = config.listen_addr()?;
    let tls = config
        .server
        .tls
        .as_ref()
        .map(tls::server_config)
        .transpose()?;
    let tick = Duration::from_millis(config.server.tick_ms);
    let mut limits = config.limits.clone();
    // Never refuse the pace the host itself asks waiting devices for (twice it, for jitter).
    let own_pace = 1000.0 / config.rounds.retry_after_ms.max(1) as f64;
    limits.checkin_per_device_per_second = limits.checkin_per_device_per_second.max(2.0 * own_pace);
    let max_connections = connection_limit(&limits)?;
    let data = &config.server.data_dir.clone();
    std::fs::create_dir_all(data).map_err(FlError::io(data))?;
    let operator = operator_token(data)?;
    let store_url = config.server.store.clone();
    let store = hush_store::open_to_run_rounds(data, store_url.as_deref())?;
    let mgr = RoundEngine::open(config, store, SystemClock)?;
    let auth = hush_store::open(data, store_url.as_deref())?;
    let validator = mgr.validator();
    let shared = Arc::new(Shared {
        mgr: Mutex::new(mgr),
        auth: Mutex::new(auth),
        validator,
        metrics: Arc::new(Metrics::default()),
        uploads: Arc::new(Semaphore::new(limits.max_concurrent_uploads)),
        register_per_address: RateLimiter::new(
            limits.register_per_address_per_minute / 60.0,
            limits.register_per_address_per_minute,
        ),
        checkin_per_address: RateLimiter::new(
            limits.checkin_per_address_per_second,
            2.0 * limits.checkin_per_address_per_second,
        ),
        checkin_per_device: RateLimiter::new(
            limits.checkin_per_device_per_second,
            2.0 * limits.checkin_per_device_per_second,
        ),
        operator_token_hash: token_hash(&operator),
        limits,
    });
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| FlError::Server(format!("bind {addr}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| FlError::Server(format!("listener: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| FlError::Server(format!("listener: {e}")))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Engine calls queue on one lock: more threads than this only add switching.
        .max_blocking_threads(32)
        .enable_all()
        .thread_name("hush-host")
        .build()
        .map_err(|e| FlError::Server(format!("tokio runtime: {e}")))?;
    let https = tls.is_some();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let state = shared.clone();
    let thread = std::thread::Builder::new()
        .name("hush-host-server".into())
        .spawn(move || -> Result<(), FlError> {
            rt.block_on(async move {
                let ticker_state = state.clone();
                let ticker = tokio::spawn(async move {
                    let mut every = tokio::time::interval(tick);
                    let mut version = None;
                    loop {
                        every.tick().await;
                        let ticked = with_mgr(&ticker_state, |m| {
                            m.tick()?;
                            Ok(m.latest_model().0)
                        });
                        match ticked.await {
                            Ok(v) => {
                                if version.is_some_and(|old| old != v) {
                                    let _ = tokio::task::spawn_blocking(trim_freed_memory).await;
                                }
                                version = Some(v);
                            }
                            Err(resp) => warn!(status = %resp.status(), "round timer failed"),
                        }
                    }
                });
                info!(addr = %local, tls = tls.is_some(), max_connections, "hush host listening");
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|e| FlError::Server(format!("listener: {e}")))?;
                let serving = conn::Serving {
                    app: router(state.clone()),
                    tls,
                    limits: conn_limits(&state.limits, max_connections),
                    metrics: state.metrics.clone(),
                };
                conn::serve(listener, serving, rx, Duration::from_secs(10)).await;
                ticker.abort();
                Ok::<(), FlError>(())
            })?;
            // Requests still on blocking threads (a release among them) hold the engine's
            // lock; `stop` takes it after this returns, so they finish first.
            rt.shutdown_timeout(Duration::from_secs(5));
            Ok(())
        })
        .map_err(|e| FlError::Server(format!("thread: {e}")))?;
    Ok(HostHandle {
        addr: local,
        https,
        operator_token: operator,
        shared,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

impl HostHandle {
    /// `http://{addr}`, or `https://localhost:{port}` when serving TLS (certificates
    /// name hosts, so a loopback client must ask for a name the certificate carries).
    pub fn url(&self) -> String {
        if self.https {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// The operator token (`/v1/status`, `/metrics`).
    pub fn operator_token(&self) -> &str {
        &self.operator_token
    }

    /// The server's counters.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Issues an enrolment token for `quota` devices, valid for `valid` (what
    /// `hush-host devices enrol` does, on the running host's store).
    pub fn enrol(&self, label: &str, quota: u64, valid: Duration) -> Result<String, FlError> {
        let mut engine = self.shared.lock();
        Ok(engine.issue_enrolment(label, quota, valid)?.token)
    }

    /// Stops accepting, lets in-flight requests finish (a release among them), waits for
    /// the server thread, then abandons the open round, if any (recorded: no release, no
    /// ε spent). A restart from the same data directory carries on.
    pub fn shutdown(mut self) -> Result<(), FlError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), FlError> {
        let Some(tx) = self.shutdown.take() else {
            return Ok(());
        };
        let _ = tx.send(true);
        let served = match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| FlError::Server("the server thread panicked".into()))?,
            None => Ok(()),
        };
        // The lock waits for any request still running on a blocking thread.
        self.shared.lock().stop("the host stopped")?;
        served
    }

    /// Whether training has finished (rounds done, budget exhausted or a failed publish).
    pub fn is_finished(&self) -> bool {
        self.shared.lock().status().is_ok_and(|s| s.finished)
    }

    /// Blocks until training has finished; `false` if `timeout` passed first.
    pub fn wait_finished_timeout(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.is_finished() {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Blocks until training has finished.
    pub fn wait_finished(&self) {
        while !self.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What `GET /v1/status` returns.
    pub fn status(&self) -> Result<StatusReport, FlError> {
        self.shared.lock().status()
    }

    /// The per-round log: round id, state, realized cohort, reports accepted and rejected,
    /// ε spent so far by RDP and PLD.
    pub fn round_log(&self) -> Result<Vec<RoundLog>, FlError> {
        self.shared.lock().round_log()
    }

    /// The latest published model version and its package directory.
    pub fn latest_model(&self) -> (u64, PathBuf) {
        self.shared.lock().latest_model()
    }

    /// Closes the open round now if its deadline has passed (the timer does this too).
    pub fn tick(&self) -> Result<(), FlError> {
        self.shared.lock().tick()
    }
}

impl Drop for HostHandle {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
