//! The device's HTTP client: one blocking call per protocol endpoint (ureq), JSON for
//! control messages, postcard for updates. Error replies are decoded into the host's
//! [`ApiError`] so the caller sees what the host said.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};

use crate::protocol::{
    checksum_hex, ApiError, Assignment, CheckInRequest, RegisterRequest, RegisterResponse,
    StatusReport, UploadReceipt, CHECKSUM_HEADER,
};

use super::ClientError;

/// Largest model file the client downloads (a guard against a confused server).
pub const MAX_DOWNLOAD_BYTES: u64 = 256 << 20;

/// A connection to one host, which may be several replicas sharing its rounds (hush-host
/// on PostgreSQL): each request goes to the current replica, and when that one cannot be
/// reached (refused, reset, timed out) to the next ones in turn; the first that answers
/// becomes current, for this client and its clones. Resending is safe: an upload carries
/// its idempotency key, so a replica that took it before the connection broke answers the
/// second copy as a duplicate wherever it lands.
#[derive(Debug, Clone)]
pub struct HostClient {
    agent: ureq::Agent,
    /// Base URLs of the host's replicas (one for a lone host).
    bases: Arc<Vec<String>>,
    /// Index into `bases` of the replica requests go to first.
    current: Arc<AtomicUsize>,
    token: Option<String>,
}

impl HostClient {
    /// A client for the host at `server` (e.g. `http://127.0.0.1:7878`, or the replicas'
    /// URLs separated by commas), with a per-request timeout. An `https://` host's
    /// certificate is checked against Mozilla's root certificates (webpki-roots).
    pub fn new(server: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::build(server, timeout, RootCerts::WebPki)
    }

    /// A client that trusts only the CA certificates in `ca_pem` (PEM, one or more
    /// certificates) for an `https://` host: a self-signed host or a private CA.
    pub fn with_ca_pem(
        server: &str,
        timeout: Duration,
        ca_pem: &[u8],
    ) -> Result<Self, ClientError> {
        let certs = ureq::tls::parse_pem(ca_pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::BadCa {
                reason: format!("not PEM: {e}"),
            })?;
        if certs.is_empty() {
            return Err(ClientError::BadCa {
                reason: "no CERTIFICATE block".into(),
            });
        }
        Self::build(server, timeout, RootCerts::new_with_certs(&certs))
    }

    fn build(server: &str, timeout: Duration, roots: RootCerts) -> Result<Self, ClientError> {
        let bases = server
            .split(',')
            .map(|one| {
                let base = one.trim().trim_end_matches('/').to_string();
                if base.starts_with("http://") || base.starts_with("https://") {
                    Ok(base)
                } else {
                    Err(ClientError::BadServer {
                        server: one.trim().to_string(),
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(roots)
            .build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .tls_config(tls)
            .build();
        Ok(Self {
            agent: ureq::Agent::new_with_config(config),
            bases: Arc::new(bases),
            current: Arc::new(AtomicUsize::new(0)),
            token: None,
        })
    }

    /// The same client, authenticated with `token`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_string());
        self
    }

    /// The base URL requests go to first.
    pub fn server(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Runs `request` (given a base URL) against the current replica, then, while it fails
    /// to reach one, against the next ones in turn (see the type's doc).
    fn failover<T>(
        &self,
        mut request: impl FnMut(&str) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let n = self.bases.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut unreachable = None;
        for k in 0..n {
            let i = (first + k) % n;
            match request(&self.bases[i]) {
                Err(e @ ClientError::Transport { .. }) => unreachable = Some(e),
                answered => {
                    if k > 0 {
                        self.current.store(i, Ordering::Relaxed);
                    }
                    return answered;
                }
            }
        }
        Err(unreachable.expect("a client has at least one server"))
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    fn finish(
        &self,
        what: &str,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        limit: u64,
    ) -> Result<Vec<u8>, ClientError> {
        let mut resp = result.map_err(|e| transport_error(what, &e))?;
        let status = resp.status().as_u16();
        // Back-pressure (503) and rate limits (429) say when to come back, in seconds; a
        // device waits at least that long, at most a minute.
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(60.0)));
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|e| ClientError::Transport {
                what: what.to_string(),
                reason: format!("reading the reply: {e}"),
            })?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let api = serde_json::from_slice::<ApiError>(&body).unwrap_or_else(|_| ApiError {
            code: "http".into(),
            error: String::from_utf8_lossy(&body).chars().take(300).collect(),
        });
        Err(ClientError::Refused {
            what: what.to_string(),
            status,
            code: api.code,
            message: api.error,
            retry_after,
        })
    }

    fn json<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, ClientError> {
        serde_json::from_slice(body).map_err(|e| ClientError::BadReply {
            what: what.to_string(),
            reason: e.to_string(),
        })
    }

    fn post_json<Q: Serialize, A: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        req: &Q,
    ) -> Result<A, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::BadReply {
            what: what.to_string(),
            reason: e.to_string(),
        })?;
        let reply = self.failover(|base| {
            let mut r = self
                .agent
                .post(&format!("{base}{path}"))
                .header("content-type", "application/json");
            if let Some(a) = self.auth() {
                r = r.header("authorization", &a);
            }
            self.finish(what, r.send(&body[..]), 1 << 20)
        })?;
        Self::json(what, &reply)
    }

    /// `POST /v1/devices` with the enrolment token the operator issued.
    pub fn register(
        &self,
        label: &str,
        enrolment_token: &str,
    ) -> Result<RegisterResponse, ClientError> {
        self.post_json(
            "register",
            "/v1/devices",
            &RegisterRequest {
                label: label.to_string(),
                enrolment_token: enrolment_token.to_string(),
            },
        )
    }

    /// `POST /v1/checkin`.
    pub fn check_in(&self, req: &CheckInRequest) -> Result<Assignment, ClientError> {
        self.post_json("check-in", "/v1/checkin", req)
    }

    /// `GET /v1/models/{version}/{file}`.
    pub fn download(&self, version: u64, file: &str) -> Result<Vec<u8>, ClientError> {
        let what = format!("download of model v{version} {file}");
        self.failover(|base| {
            let mut r = self
                .agent
                .get(&format!("{base}/v1/models/{version}/{file}"));
            if let Some(a) = self.auth() {
                r = r.header("authorization", &a);
            }
            self.finish(&what, r.call(), MAX_DOWNLOAD_BYTES)
        })
    }

    /// `POST /v1/rounds/{round}/update` with an encoded update body.
    pub fn upload(&self, round: u64, body: &[u8]) -> Result<UploadReceipt, ClientError> {
        let what = format!("upload for round {round}");
        let checksum = checksum_hex(body);
        let reply = self.failover(|base| {
            let mut r = self
                .agent
                .post(&format!("{base}/v1/rounds/{round}/update"))
                .header("content-type", "application/octet-stream")
                .header(CHECKSUM_HEADER, &checksum);
            if let Some(a) = self.auth() {
                r = r.header("authorization", &a);
            }
            self.finish(&what, r.send(body), 1 << 20)
        })?;
        Self::json(&what, &reply)
    }

    /// `GET /v1/status` (the operator's: this client must hold the operator token).
    pub fn status(&self) -> Result<StatusReport, ClientError> {
        let reply = self.failover(|base| {
            let mut r = self.agent.get(&format!("{base}/v1/status"));
            if let Some(a) = self.auth() {
                r = r.header("authorization", &a);
            }
            self.finish("status", r.call(), 1 << 20)
        })?;
        Self::json("status", &reply)
    }
}

/// A failed call as a [`ClientError`]: a certificate the client does not trust is
/// [`ClientError::UntrustedHost`] (retrying cannot help), anything else is a transport
/// failure worth retrying.
fn transport_error(what: &str, e: &ureq::Error) -> ClientError {
    let reason = e.to_string();
    // ureq reports a failed handshake either directly or as the I/O error rustls raised.
    let tls = match e {
        ureq::Error::Rustls(t) => Some(t),
        ureq::Error::Io(io) => io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()),
        _ => None,
    };
    if matches!(tls, Some(rustls::Error::InvalidCertificate(_))) {
        ClientError::UntrustedHost {
            what: what.to_string(),
            reason,
        }
    } else {
        ClientError::Transport {
            what: what.to_string(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A one-shot HTTP server on loopback answering every request with `reply`.
    fn answering(reply: &'static str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(reply.as_bytes());
            }
        });
        format!("http://{addr}")
    }

    #[test]
    fn a_busy_host_s_retry_after_is_kept_for_the_retry() {
        let url = answering(
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Type: application/json\r\n\
             Content-Length: 32\r\nConnection: close\r\n\r\n{\"code\":\"busy\",\"error\":\"later\"}\n",
        );
        let client = HostClient::new(&url, Duration::from_secs(10)).unwrap();
        let e = client.upload(1, b"x").unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)), "{e}");
        assert!(e.to_string().contains("busy"), "{e}");
    }

    #[test]
    fn a_replica_that_cannot_be_reached_is_skipped_and_the_one_that_answers_kept() {
        // A port nothing listens on (bound, then closed), and a replica that answers.
        let down = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let up = answering(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\
             Connection: close\r\n\r\n{\"round\":4,\"duplicate\":false}\n",
        );
        let client = HostClient::new(&format!("{down}, {up}/"), Duration::from_secs(10)).unwrap();
        assert_eq!(client.server(), down);
        let receipt = client.clone().upload(4, b"x").unwrap();
        assert_eq!(receipt.round, 4);
        assert_eq!(
            client.server(),
            up,
            "the replica that answered is kept, clones too"
        );
        // Every replica down: the transport error, retryable.
        let e = HostClient::new(&down, Duration::from_secs(10))
            .unwrap()
            .upload(1, b"x")
            .unwrap_err();
        assert!(e.is_transient(), "{e}");
        let bad = HostClient::new(&format!("{up},ftp://x"), Duration::from_secs(1)).unwrap_err();
        assert!(bad.to_string().contains("ftp://x"), "{bad}");
    }

    #[test]
    fn a_refusal_without_retry_after_has_none() {
        let url = answering(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: 47\r\n\
             Connection: close\r\n\r\n{\"code\":\"enrolment_refused\",\"error\":\"no seat\"}\n",
        );
        let client = HostClient::new(&url, Duration::from_secs(10)).unwrap();
        let e = client.register("d", "hush-enrol-x").unwrap_err();
        assert!(!e.is_transient(), "{e}");
        assert_eq!(e.retry_after(), None);
        assert!(e.to_string().contains("enrolment_refused"), "{e}");
    }
}
