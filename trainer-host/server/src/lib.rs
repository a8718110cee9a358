//! The round server: the federated round engine ([`hush_fl::RoundEngine`]) over HTTP
//! (axum) or HTTPS ([`tls`], rustls), on the SQLite store ([`hush_store::SqliteStore`]),
//! and [`start_host`] / [`HostHandle`] for the CLI, the demo and tests.
//!
//! Endpoints are those of [`hush_device::protocol`]. Every error is an HTTP status with a
//! JSON [`ApiError`] body: `unauthorized` (401: missing or unknown bearer token),
//! `too_large` (413: checked from `Content-Length` before reading, and while reading),
//! `malformed` / `bad_checksum` / `invalid_update` / `bad_path` (400), `not_found` (404),
//! `method_not_allowed` (405), the upload refusals of [`hush_fl::aggregate`], and `internal`
//! (500). Handlers never unwrap request data; work on the shared state runs on blocking
//! threads, and a panic there becomes a 500, not a dead server. An upload is decoded and
//! its norms checked ([`hush_fl::aggregate::UpdateValidator`]) before the engine's lock is
//! taken, so uploads are checked in parallel.

pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hush_device::protocol::{
    ApiError, CheckInRequest, ProtocolError, RegisterRequest, StatusReport, CHECKSUM_HEADER,
};
use hush_fl::aggregate::{Rejection, UpdateValidator};
use hush_fl::{FlConfig, FlError, RoundEngine, RoundLog, SystemClock};
use hush_store::{SqliteStore, DB_FILE};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

/// The engine as the server runs it: the SQLite store and the system clock.
pub type HostEngine = RoundEngine<SqliteStore, SystemClock>;

/// Largest JSON control body.
const MAX_JSON_BYTES: usize = 64 * 1024;
/// Longest device label kept.
const MAX_LABEL_CHARS: usize = 256;

struct Shared {
    mgr: Mutex<HostEngine>,
    validator: Arc<UpdateValidator>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HostEngine> {
        // A panic while holding the lock leaves the manager as it was between statements;
        // keep serving rather than poisoning every later request.
        self.mgr.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type AppState = Arc<Shared>;

fn api_error(status: StatusCode, code: &str, error: impl Into<String>) -> Response {
    (
        status,
        Json(ApiError {
            code: code.into(),
            error: error.into(),
        }),
    )
        .into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    warn!("internal error: {e}");
    api_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
}

fn rejection(r: Rejection) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
    api_error(status, r.code, r.error)
}

/// Runs `f` on the manager on a blocking thread.
async fn with_mgr<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&mut HostEngine) -> Result<T, FlError> + Send + 'static,
) -> Result<T, Response> {
    let s = state.clone();
    match tokio::task::spawn_blocking(move || f(&mut s.lock())).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(internal(e)),
        Err(e) => Err(internal(format!("request handler failed: {e}"))),
    }
}

async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<u64, Response> {
    let unauthorized = |why: &str| {
        api_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("{why}; send `Authorization: Bearer <token>` with the token from registration"),
        )
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized("missing Authorization header"));
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .map(str::to_string);
    let Some(token) = token else {
        return Err(unauthorized("Authorization header is not `Bearer <token>`"));
    };
    match with_mgr(state, move |m| m.authenticate(&token)).await? {
        Some(id) => Ok(id),
        None => Err(unauthorized("unknown token")),
    }
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
/// soon as the stream passes the limit.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Response> {
    let too_large = |got: String| {
        api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("body is {got} bytes; the limit is {limit}"),
        )
    };
    if let Some(n) = content_length(headers) {
        if n > limit as u64 {
            return Err(too_large(n.to_string()));
        }
    }
    to_bytes(body, limit).await.map_err(|e| {
        if e.to_string().contains("length limit") {
            too_large(format!("more than {limit}"))
        } else {
            api_error(
                StatusCode::BAD_REQUEST,
                "incomplete_body",
                format!("the body could not be read: {e}"),
            )
        }
    })
}

async fn read_json<T: DeserializeOwned>(headers: &HeaderMap, body: Body) -> Result<T, Response> {
    let bytes = read_body(headers, body, MAX_JSON_BYTES).await?;
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

async fn register(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let req: RegisterRequest = match read_json(&headers, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let label: String = req.label.chars().take(MAX_LABEL_CHARS).collect();
    match with_mgr(&state, move |m| m.register(&label)).await {
        Ok(r) => (StatusCode::OK, Json(r)).into_response(),
        Err(resp) => resp,
    }
}

async fn check_in(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let device = match authenticate(&state, &headers).await {
        Ok(d) => d,
        Err(resp) => return resp,
    };
    let req: CheckInRequest = match read_json(&headers, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match with_mgr(&state, move |m| m.check_in(device, &req)).await {
        Ok(a) => (StatusCode::OK, Json(a)).into_response(),
        Err(resp) => resp,
    }
}

fn protocol_error(e: ProtocolError) -> Response {
    let (status, code) = match &e {
        ProtocolError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        ProtocolError::Malformed { .. } => (StatusCode::BAD_REQUEST, "malformed"),
        ProtocolError::Checksum { .. } => (StatusCode::BAD_REQUEST, "bad_checksum"),
        ProtocolError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid_update"),
    };
    api_error(status, code, e.to_string())
}

async fn upload(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
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
    let bytes = match read_body(&headers, body, state.validator.limits.max_bytes).await {
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
    // Decode and norm-check outside the engine's lock.
    let validator = state.validator.clone();
    let checked =
        tokio::task::spawn_blocking(move || validator.validate(&bytes, checksum.as_deref())).await;
    let update = match checked {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => return protocol_error(e),
        Err(e) => return internal(format!("decoding failed: {e}")),
    };
    match with_mgr(&state, move |m| m.accept(device, round, update)).await {
        Ok(Ok(receipt)) => (StatusCode::OK, Json(receipt)).into_response(),
        Ok(Err(rej)) => rejection(rej),
        Err(resp) => resp,
    }
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
        move |m| Ok(m.model_file(version, &file))
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
                "no file {file:?} in model v{version}; published files are model.json, \
                 weights.safetensors, model.onnx and (when the initial model has one) \
                 model.nnef.tar of published versions"
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

async fn status(State(state): State<AppState>) -> Response {
    match with_mgr(&state, |m| m.status()).await {
        Ok(s) => (StatusCode::OK, Json(s)).into_response(),
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
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves `app` on `listener` until `shutdown` resolves: plain HTTP with axum, or HTTPS
/// through rustls when `tls` is set. In-flight requests finish either way.
async fn serve(
    listener: std::net::TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), FlError> {
    let failed = |e: std::io::Error| FlError::Server(format!("serve: {e}"));
    match tls {
        None => {
            let listener = tokio::net::TcpListener::from_std(listener).map_err(failed)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(failed)
        }
        Some(config) => {
            let handle = axum_server::Handle::new();
            let stopper = handle.clone();
            tokio::spawn(async move {
                shutdown.await;
                stopper.graceful_shutdown(Some(Duration::from_secs(5)));
            });
            let config = axum_server::tls_rustls::RustlsConfig::from_config(config);
            axum_server::tls_rustls::from_tcp_rustls(listener, config)
                .map_err(failed)?
                .handle(handle)
                .serve(app.into_make_service())
                .await
                .map_err(failed)
        }
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
    shared: AppState,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
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
    let data = &config.server.data_dir;
    std::fs::create_dir_all(data).map_err(FlError::io(data))?;
    let store = SqliteStore::open(&data.join(DB_FILE))?;
    let mgr = RoundEngine::open(config, store, SystemClock)?;
    let validator = mgr.validator();
    let shared = Arc::new(Shared {
        mgr: Mutex::new(mgr),
        validator,
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
        .enable_all()
        .thread_name("hush-host")
        .build()
        .map_err(|e| FlError::Server(format!("tokio runtime: {e}")))?;
    let https = tls.is_some();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let state = shared.clone();
    let thread = std::thread::Builder::new()
        .name("hush-host-server".into())
        .spawn(move || -> Result<(), FlError> {
            rt.block_on(async move {
                let ticker_state = state.clone();
                let ticker = tokio::spawn(async move {
                    let mut every = tokio::time::interval(tick);
                    loop {
                        every.tick().await;
                        if let Err(resp) = with_mgr(&ticker_state, |m| m.tick()).await {
                            warn!(status = %resp.status(), "round timer failed");
                        }
                    }
                });
                info!(addr = %local, tls = tls.is_some(), "hush host listening");
                let served = serve(listener, router(state), tls, async {
                    let _ = rx.await;
                })
                .await;
                ticker.abort();
                served.map_err(|e| FlError::Server(format!("serve: {e}")))
            })?;
            rt.shutdown_timeout(Duration::from_secs(5));
            Ok(())
        })
        .map_err(|e| FlError::Server(format!("thread: {e}")))?;
    Ok(HostHandle {
        addr: local,
        https,
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

    /// Stops serving (in-flight requests finish) and waits for the server thread. An open
    /// round is left open in the store, exactly as if the process had been killed: the
    /// next start from the same data directory abandons it.
    pub fn shutdown(mut self) -> Result<(), FlError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), FlError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| FlError::Server("the server thread panicked".into()))?,
            None => Ok(()),
        }
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
