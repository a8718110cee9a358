//! Connections: the accept loop, the connection limit and the per-connection timeouts.
//!
//! Every accepted socket (plain, or after a TLS handshake bounded by
//! `limits.tls_handshake_timeout_secs`) is served by hyper's HTTP/1.1 connection driver
//! on its own task, its reads watched through `Watched` and its requests through the
//! service wrapper, so that one sweeper task can see, for each connection, whether it is
//! idle, half-way through a request's headers, or serving a request, and for how long.
//! The sweeper closes a connection that has been:
//! - idle (no request, no byte) longer than `idle_timeout_secs` → `idle_timeout`;
//! - sending headers longer than `header_timeout_secs` since their first byte →
//!   `header_timeout`;
//! - serving one request longer than `request_timeout_secs` → `request_timeout`.
//!
//! (A body slower than `body_min_bytes_per_sec` is the handler's to refuse: 408 and
//! `Connection: close`, counted as `body_timeout`.)
//!
//! At `max_connections`, accepting one more makes the server close its oldest idle or
//! half-sent connection (`evicted`), so a flood of idle sockets cannot keep a device out;
//! when every connection is serving a request the new one is closed at once
//! (`connection_limit`). Running out of file descriptors anyway (`EMFILE`) evicts too, and
//! the loop waits a moment instead of spinning. Each close is counted by reason in
//! [`Metrics`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower_service::Service;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// Largest read buffer one connection keeps (bodies stream through it).
const MAX_READ_BUFFER: usize = 16 * 1024;

/// The peer's address, in every request's extensions (for the per-address rate limits).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// The timeouts and the connection limit, in the units the loop uses.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// From the first byte of a request's headers to their end.
    pub header_timeout: Duration,
    /// Between requests on a keep-alive connection.
    pub idle_timeout: Duration,
    /// From a request's headers to its answer.
    pub request_timeout: Duration,
    /// A TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Most open connections.
    pub max_connections: usize,
}

impl ConnLimits {
    /// How often the sweeper looks: a tenth of the shortest timeout, between 20 ms and 1 s.
    fn sweep_every(&self) -> Duration {
        let shortest = self
            .header_timeout
            .min(self.idle_timeout)
            .min(self.request_timeout);
        (shortest / 10).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }
}

/// Why the server closed a connection (the `reason` label of the metric).
pub mod reason {
    /// Idle between requests too long.
    pub const IDLE: &str = "idle_timeout";
    /// Headers not complete in time.
    pub const HEADER: &str = "header_timeout";
    /// A request not answered in time.
    pub const REQUEST: &str = "request_timeout";
    /// A body slower than the minimum rate (the handler's 408).
    pub const BODY: &str = "body_timeout";
    /// A TLS handshake not complete in time.
    pub const TLS_HANDSHAKE: &str = "tls_handshake_timeout";
    /// A TLS handshake that failed.
    pub const TLS_ERROR: &str = "tls_error";
    /// Closed to make room for a new connection at the limit.
    pub const EVICTED: &str = "evicted";
    /// A new connection refused at the limit (every open one busy).
    pub const LIMIT: &str = "connection_limit";
    /// The server is stopping.
    pub const SHUTDOWN: &str = "shutdown";
}

/// What the sweeper knows of one connection. Times are milliseconds since the loop's
/// epoch; 0 means "not set".
struct ConnState {
    in_flight: AtomicU32,
    idle_since: AtomicU64,
    first_byte: AtomicU64,
    request_started: AtomicU64,
    reason: OnceLock<&'static str>,
    close: Notify,
}

impl ConnState {
    fn new(now: u64) -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(now),
            first_byte: AtomicU64::new(0),
            request_started: AtomicU64::new(0),
            reason: OnceLock::new(),
            close: Notify::new(),
        }
    }

    /// Asks the connection's task to close it, for `why` (the first reason wins).
    fn close(&self, why: &'static str) {
        if self.reason.set(why).is_ok() {
            self.close.notify_one();
        }
    }

    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// The open connections, shared by the accept loop, the connection tasks and the sweeper.
struct Registry {
    epoch: Instant,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        // +1 keeps 0 free for "not set".
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open_count(&self) -> usize {
        self.lock().len()
    }

    fn add(&self) -> (u64, Arc<ConnState>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new(self.now_ms()));
        self.lock().insert(id, state.clone());
        (id, state)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the idle (or half-sent) connection idle the longest; `false` if every
    /// connection is serving a request.
    fn evict_oldest_idle(&self) -> bool {
        let conns = self.lock();
        let oldest = conns
            .values()
            .filter(|c| c.idle() && c.reason.get().is_none())
            .min_by_key(|c| c.idle_since.load(Ordering::Relaxed));
        match oldest {
            Some(c) => {
                c.close(reason::EVICTED);
                true
            }
            None => false,
        }
    }

    /// One pass of the sweeper.
    fn sweep(&self, limits: &ConnLimits) {
        let now = self.now_ms();
        let ms = |d: Duration| d.as_millis() as u64;
        for c in self.lock().values() {
            if c.reason.get().is_some() {
                continue;
            }
            if c.idle() {
                let first = c.first_byte.load(Ordering::Acquire);
                if first != 0 {
                    if now.saturating_sub(first) > ms(limits.header_timeout) {
                        c.close(reason::HEADER);
                    }
                } else if now.saturating_sub(c.idle_since.load(Ordering::Acquire))
                    > ms(limits.idle_timeout)
                {
                    c.close(reason::IDLE);
                }
            } else {
                let started = c.request_started.load(Ordering::Acquire);
                if started != 0 && now.saturating_sub(started) > ms(limits.request_timeout) {
                    c.close(reason::REQUEST);
                }
            }
        }
    }
}

/// A socket whose reads tell the sweeper when a request's first byte arrived.
struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
    registry: Arc<Registry>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before && self.state.idle() {
            let now = self.registry.now_ms();
            let _ =
                self.state
                    .first_byte
                    .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Marks a request in flight while it lives (so a handler that panics or is dropped still
/// ends it).
struct InFlight {
    state: Arc<ConnState>,
    registry: Arc<Registry>,
}

impl InFlight {
    fn begin(state: Arc<ConnState>, registry: Arc<Registry>) -> Self {
        state
            .request_started
            .store(registry.now_ms(), Ordering::Release);
        state.first_byte.store(0, Ordering::Release);
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        Self { state, registry }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state
            .idle_since
            .store(self.registry.now_ms(), Ordering::Release);
        self.state.request_started.store(0, Ordering::Release);
        self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The accept loop's inputs.
pub struct Serving {
    /// What answers requests.
    pub app: Router,
    /// HTTPS when set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Timeouts and the connection limit.
    pub limits: ConnLimits,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

/// Accepts connections on `listener` until `stop` turns `true`, then stops accepting, lets
/// requests in flight finish (at most `drain` longer) and returns.
pub async fn serve(
    listener: TcpListener,
    serving: Serving,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let registry = Arc::new(Registry {
        epoch: Instant::now(),
        next_id: AtomicU64::new(0),
        conns: Mutex::new(HashMap::new()),
    });
    let serving = Arc::new(serving);
    let sweeper = {
        let (registry, limits) = (registry.clone(), serving.limits.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(limits.sweep_every());
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                registry.sweep(&limits);
            }
        })
    };
    let tasks = tokio_util_tasks::Tasks::default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        match accepted {
            Ok((tcp, peer)) => {
                if registry.open_count() >= serving.limits.max_connections
                    && !registry.evict_oldest_idle()
                {
                    serving.metrics.connection_closed(reason::LIMIT);
                    drop(tcp);
                    continue;
                }
                let (id, state) = registry.add();
                serving.metrics.connection_opened();
                let (registry, serving, stop) = (registry.clone(), serving.clone(), stop.clone());
                tasks.spawn(async move {
                    let why = connection(tcp, peer, &state, &registry, &serving, stop).await;
                    registry.remove(id);
                    serving.metrics.connection_done(why);
                });
            }
            Err(e) => {
                // EMFILE/ENFILE: make room and wait; other errors (a peer that reset before
                // accept) are per-connection and the loop goes on.
                warn!("accept failed: {e}");
                if matches!(e.raw_os_error(), Some(24) | Some(23)) {
                    registry.evict_oldest_idle();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    // Stop accepting; idle connections close now, busy ones when their request is answered.
    drop(listener);
    for c in registry.lock().values() {
        if c.idle() {
            c.close(reason::SHUTDOWN);
        }
    }
    let _ = tokio::time::timeout(drain, tasks.wait()).await;
    sweeper.abort();
}

/// Serves one connection; returns why it ended (`None`: the client closed it or it failed).
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    state: &Arc<ConnState>,
    registry: &Arc<Registry>,
    serving: &Serving,
    stop: watch::Receiver<bool>,
) -> Option<&'static str> {
    let _ = tcp.set_nodelay(true);
    match &serving.tls {
        None => http(tcp, peer, state, registry, serving, stop).await,
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
            let limit = serving.limits.tls_handshake_timeout;
            match tokio::time::timeout(limit, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => http(tls, peer, state, registry, serving, stop).await,
                Ok(Err(e)) => {
                    debug!(%peer, "TLS handshake failed: {e}");
                    Some(reason::TLS_ERROR)
                }
                Err(_) => Some(reason::TLS_HANDSHAKE),
            }
        }
    }
}

async fn http<T>(
    io: T,
    peer: SocketAddr,
    state: &Arc<ConnState>,
    registry: &Arc<Registry>,
    serving: &Serving,
    mut stop: watch::Receiver<bool>,
) -> Option<&'static str>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Watched {
        inner: io,
        state: state.clone(),
        registry: registry.clone(),
    });
    let service = {
        let (app, state, registry) = (serving.app.clone(), state.clone(), registry.clone());
        hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let guard = InFlight::begin(state.clone(), registry.clone());
            req.extensions_mut().insert(PeerAddr(peer));
            let mut app = app.clone();
            async move {
                let response = app.call(req.map(Body::new)).await;
                drop(guard);
                response
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        // The read buffer of a connection that carried an upload would otherwise stay at
        // the body's size for as long as the connection lives (headers fit in 16 KiB).
        .max_buf_size(MAX_READ_BUFFER)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    debug!(%peer, "connection ended: {e}");
                }
                return state.reason.get().copied();
            }
            _ = state.close.notified() => {
                // Dropping the connection closes the socket at once.
                return state.reason.get().copied();
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// A set of spawned tasks one can wait for (what `tokio_util::task::TaskTracker` does,
/// without the dependency).
mod tokio_util_tasks {
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::sync::Notify;

    #[derive(Default, Clone)]
    pub struct Tasks {
        inner: Arc<(AtomicUsize, Notify)>,
    }

    struct Running(Arc<(AtomicUsize, Notify)>);

    impl Drop for Running {
        fn drop(&mut self) {
            if self.0 .0.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.0 .1.notify_waiters();
            }
        }
    }

    impl Tasks {
        pub fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
            self.inner.0.fetch_add(1, Ordering::AcqRel);
            let running = Running(self.inner.clone());
            tokio::spawn(async move {
                let _running = running;
                f.await;
            });
        }

        pub async fn wait(&self) {
            loop {
                let notified = self.inner.1.notified();
                tokio::pin!(notified);
                // Registered before the check, so a last task ending in between still wakes it.
                notified.as_mut().enable();
                if self.inner.0.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        }
    }
}
