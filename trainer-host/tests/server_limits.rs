//! The round server against clients that misbehave without sending a single bad update
//! (issue 36): slow and idle connections are closed by the server for the configured
//! reason (asserted on its own counters, not on wall-clock times), registration needs an
//! operator-issued enrolment token and a leaked one registers at most its quota without
//! moving an open round's divisor, rates are limited per address and per device with
//! `Retry-After`, uploads beyond the concurrency limit get 503 with `Retry-After`, revoked
//! and expired tokens are refused, `/v1/status` and `/metrics` need the operator token, and
//! an external reader holding a read transaction stalls nothing. A real host on loopback.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hush_device::protocol::{
    checksum_hex, ApiError, Assignment, RegisterResponse, TrainTask, CHECKSUM_HEADER,
};
use hush_host::fl::config::TlsSection;
use hush_host::fl::store::Store;
use hush_host::fl::FlConfig;
use hush_host::server::conn::reason;
use hush_host::server::{start_host, HostHandle};
use hush_host::store::{SqliteStore, DB_FILE};

mod common;
use common::{fixture, small_update_body, Fixture};

/// q = 1, `devices` devices to open a round, short connection timeouts.
fn config(f: &Fixture, devices: u64) -> FlConfig {
    let mut c = FlConfig::with_model(&f.model, &f.data);
    c.server.listen = "127.0.0.1:0".into();
    c.server.tick_ms = 20;
    c.rounds.rounds = 3;
    c.rounds.sampling_rate = 1.0;
    c.rounds.min_devices = devices;
    c.rounds.deadline_secs = 60.0;
    c.dp.enabled = false;
    c.seed = Some(5);
    c.limits.header_timeout_secs = 0.5;
    c.limits.idle_timeout_secs = 0.5;
    c.limits.body_timeout_secs = 0.5;
    c.limits.body_min_bytes_per_sec = 1000.0;
    c.limits.tls_handshake_timeout_secs = 0.5;
    c.limits.register_per_address_per_minute = 1000.0;
    c.limits.checkin_per_address_per_second = 1000.0;
    c.limits.checkin_per_device_per_second = 1000.0;
    c
}

struct Reply {
    status: u16,
    retry_after: Option<String>,
    body: Vec<u8>,
}

impl Reply {
    fn code(&self) -> String {
        serde_json::from_slice::<ApiError>(&self.body)
            .unwrap_or_else(|e| panic!("{}: not an ApiError: {e}", self.status))
            .code
    }
}

/// One request: `GET` or `POST` (with `body`) to `path`, with a bearer token and headers.
fn send(
    host: &HostHandle,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}{path}", host.url());
    let mut all: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(t) = token {
        all.push(("Authorization".into(), format!("Bearer {t}")));
    }
    let mut resp = if method == "GET" {
        let mut r = agent.get(&url);
        for (k, v) in &all {
            r = r.header(k, v);
        }
        r.call().unwrap()
    } else {
        let mut r = agent.post(&url);
        for (k, v) in &all {
            r = r.header(k, v);
        }
        r.send(body).unwrap()
    };
    Reply {
        status: resp.status().as_u16(),
        retry_after: resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string()),
        body: resp.body_mut().read_to_vec().unwrap(),
    }
}

fn call(host: &HostHandle, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> Reply {
    let json = [("content-type", "application/json")];
    send(host, method, path, token, &json, body)
}

fn register_with(host: &HostHandle, enrolment: Option<&str>) -> Reply {
    let body = match enrolment {
        Some(t) => serde_json::json!({ "label": "d", "enrolment_token": t }),
        None => serde_json::json!({ "label": "d" }),
    };
    call(
        host,
        "POST",
        "/v1/devices",
        None,
        &serde_json::to_vec(&body).unwrap(),
    )
}

fn register(host: &HostHandle, enrolment: &str) -> RegisterResponse {
    let r = register_with(host, Some(enrolment));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

fn check_in(host: &HostHandle, token: &str) -> Reply {
    call(
        host,
        "POST",
        "/v1/checkin",
        Some(token),
        br#"{"model_version":null,"examples":1}"#,
    )
}

fn task(host: &HostHandle, token: &str) -> TrainTask {
    let r = check_in(host, token);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    match serde_json::from_slice(&r.body).unwrap() {
        Assignment::Train(t) => t,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn upload(host: &HostHandle, token: &str, round: u64, body: &[u8]) -> Reply {
    let crc = checksum_hex(body);
    let path = format!("/v1/rounds/{round}/update");
    send(
        host,
        "POST",
        &path,
        Some(token),
        &[(CHECKSUM_HEADER, &crc)],
        body,
    )
}

/// Reads until the server closes the connection (EOF or reset); what arrived before.
/// Panics if it stays open for a minute (a generous bound, not a timing assertion).
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the server kept the connection open: {e}"),
        }
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn slow_and_idle_connections_are_closed_by_the_server_for_the_configured_reason() {
    let f = fixture();
    let host = start_host(config(&f, 1)).unwrap();
    let m = host.metrics();

    // Half a request's headers, then nothing.
    let mut s = TcpStream::connect(host.addr).unwrap();
    s.write_all(b"POST /v1/devices HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert!(
        read_until_closed(&mut s).is_empty(),
        "no answer, just closed"
    );
    wait_until("header_timeout counted", || m.closed(reason::HEADER) == 1);

    // Full headers, a body that stalls after one byte: 408 body_timeout, then closed.
    let mut s = TcpStream::connect(host.addr).unwrap();
    s.write_all(
        b"POST /v1/devices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{",
    )
    .unwrap();
    let answer = String::from_utf8(read_until_closed(&mut s)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"body_timeout\""), "{answer}");
    assert_eq!(m.closed(reason::BODY), 1);

    // A keep-alive connection that answered one request, then sits idle.
    let mut s = TcpStream::connect(host.addr).unwrap();
    s.write_all(b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answer = String::from_utf8(read_until_closed(&mut s)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    // And one that never sends a byte.
    let mut quiet = TcpStream::connect(host.addr).unwrap();
    assert!(read_until_closed(&mut quiet).is_empty());
    wait_until("idle_timeout counted twice", || m.closed(reason::IDLE) == 2);
    assert_eq!(m.closed(reason::HEADER), 1, "nothing else was counted");

    // The server still serves.
    assert_eq!(
        call(&host, "GET", "/v1/nothing", None, b"").code(),
        "not_found"
    );
    host.shutdown().unwrap();
}

#[test]
fn a_tls_handshake_that_never_starts_is_closed() {
    let f = fixture();
    let mut c = config(&f, 1);
    let tls = |n: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tls")
            .join(n)
    };
    c.server.tls = Some(TlsSection {
        cert: tls("localhost.pem"),
        key: tls("localhost.key"),
    });
    let host = start_host(c).unwrap();
    let mut s = TcpStream::connect(host.addr).unwrap();
    assert!(read_until_closed(&mut s).is_empty());
    wait_until("tls_handshake_timeout counted", || {
        host.metrics().closed(reason::TLS_HANDSHAKE) == 1
    });
    host.shutdown().unwrap();
}

#[test]
fn registration_needs_an_enrolment_token_and_a_leaked_one_registers_at_most_its_quota() {
    let f = fixture();
    let host = start_host(config(&f, 2)).unwrap();
    let fleet = host.enrol("fleet", 2, Duration::from_secs(3600)).unwrap();
    let a = register(&host, &fleet);
    let b = register(&host, &fleet);
    // Round 1 opens with the two enrolled devices: its divisor is q × 2.
    let ta = task(&host, &a.token);
    let tb = task(&host, &b.token);
    let log = host.round_log().unwrap();
    assert_eq!((log[0].population, log[0].expected_cohort), (2, 2.0));

    // A flood without a credential, or with a forged one: refused, nobody added.
    for _ in 0..20 {
        let r = register_with(&host, None);
        assert_eq!((r.status, r.code().as_str()), (403, "enrolment_required"));
    }
    let r = register_with(&host, Some("hush-enrol-forged"));
    assert_eq!((r.status, r.code().as_str()), (403, "enrolment_refused"));
    // The fleet's own token is used up too.
    let r = register_with(&host, Some(&fleet));
    assert_eq!((r.status, r.code().as_str()), (403, "enrolment_refused"));
    assert!(String::from_utf8_lossy(&r.body).contains("quota of 2"));

    // A leaked token with a quota of 3: exactly 3 of 10 attempts register.
    let leaked = host.enrol("leaked", 3, Duration::from_secs(3600)).unwrap();
    let ok = (0..10)
        .map(|_| register_with(&host, Some(&leaked)))
        .filter(|r| r.status == 200)
        .count();
    assert_eq!(ok, 3);
    assert_eq!(host.status().unwrap().devices, 5);

    // The open round's divisor did not move.
    let log = host.round_log().unwrap();
    assert_eq!((log[0].population, log[0].expected_cohort), (2, 2.0));
    for (t, d) in [(&ta, &a), (&tb, &b)] {
        let r = upload(
            &host,
            &d.token,
            t.round,
            &small_update_body(&f.model, t, d.device_id),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    wait_until("round 1 released", || host.latest_model().0 == 1);
    // The next round's population grew by at most the leaked quota.
    let _ = task(&host, &a.token);
    let log = host.round_log().unwrap();
    assert_eq!((log[1].population, log[1].expected_cohort), (5, 5.0));
    host.shutdown().unwrap();
}

#[test]
fn registration_and_check_in_rates_are_limited_with_retry_after() {
    let f = fixture();
    let mut c = config(&f, 1);
    c.limits.register_per_address_per_minute = 3.0;
    c.limits.checkin_per_device_per_second = 1.0;
    // Devices are told to wait 10 s between check-ins, so the 1/s limit stands.
    c.rounds.retry_after_ms = 10_000;
    let host = start_host(c).unwrap();
    let token = host.enrol("t", 10, Duration::from_secs(3600)).unwrap();
    let a = register(&host, &token);
    for _ in 0..2 {
        assert_eq!(register_with(&host, Some(&token)).status, 200);
    }
    let r = register_with(&host, Some(&token));
    assert_eq!((r.status, r.code().as_str()), (429, "rate_limited"));
    let wait: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=20).contains(&wait), "Retry-After: {wait}");
    assert_eq!(
        host.status().unwrap().devices,
        3,
        "the refused one was not added"
    );

    // A device may check in twice at once (burst), then once a second.
    assert_eq!(check_in(&host, &a.token).status, 200);
    assert_eq!(check_in(&host, &a.token).status, 200);
    let r = check_in(&host, &a.token);
    assert_eq!((r.status, r.code().as_str()), (429, "rate_limited"));
    assert_eq!(r.retry_after.as_deref(), Some("1"));
    host.shutdown().unwrap();
}

#[test]
fn uploads_beyond_the_concurrency_limit_get_503_with_retry_after() {
    let f = fixture();
    let mut c = config(&f, 1);
    c.limits.max_concurrent_uploads = 1;
    c.limits.body_timeout_secs = 60.0;
    let host = start_host(c).unwrap();
    let enrolment = host.enrol("t", 2, Duration::from_secs(3600)).unwrap();
    let a = register(&host, &enrolment);
    let t = task(&host, &a.token);
    let body = small_update_body(&f.model, &t, a.device_id);
    // The probe is a device registered after the round opened: should it get the slot
    // before the stalled upload does, it is refused (not in the cohort) rather than
    // counted, so the round stays open for the test.
    let b = register(&host, &enrolment);
    let probe = small_update_body(&f.model, &t, b.device_id);

    // One upload holds the only slot: its headers sent, its body stalled.
    let stall = || {
        let mut slow = TcpStream::connect(host.addr).unwrap();
        write!(
            slow,
            "POST /v1/rounds/{}/update HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Length: {}\r\n\r\n",
            t.round,
            a.token,
            body.len()
        )
        .unwrap();
        slow.write_all(&body[..10]).unwrap();
        slow.set_nonblocking(true).unwrap();
        slow
    };
    let mut slow = stall();
    // Once the server is reading it, another upload is turned away with a time to come
    // back. Should a probe take the slot first, the stalled upload is the one refused
    // (it has an answer): stall another.
    let mut busy = None;
    wait_until("the second upload is refused as busy", || {
        let r = upload(&host, &b.token, t.round, &probe);
        let refused = r.status == 503;
        busy = Some(r);
        if !refused && slow.peek(&mut [0u8; 1]).is_ok() {
            slow = stall();
        }
        refused
    });
    let busy = busy.unwrap();
    assert_eq!(busy.code(), "busy");
    assert_eq!(busy.retry_after.as_deref(), Some("1"));
    assert_eq!(host.status().unwrap().reports_in_round, 0);
    // The slow client gives up: its slot is freed, and the upload goes through.
    drop(slow);
    wait_until("the upload is accepted", || {
        upload(&host, &a.token, t.round, &body).status == 200
    });
    wait_until("round released", || host.latest_model().0 == 1);
    host.shutdown().unwrap();
}

#[test]
fn revoked_and_expired_device_tokens_are_refused_and_leave_the_population() {
    let f = fixture();
    let mut c = config(&f, 1);
    c.enrolment.device_token_days = 2.0 / 86_400.0; // 2 s
    let host = start_host(c).unwrap();
    let token = host.enrol("t", 3, Duration::from_secs(3600)).unwrap();
    let a = register(&host, &token);
    let b = register(&host, &token);
    assert_eq!(host.status().unwrap().devices, 2);
    // The operator revokes `a` on the store while the host serves (what the CLI does).
    let mut store = SqliteStore::open(&f.data.join(DB_FILE)).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(store.revoke_device(a.device_id, now).unwrap());
    let r = check_in(&host, &a.token);
    assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
    assert!(String::from_utf8_lossy(&r.body).contains("revoked"));
    assert_eq!(host.status().unwrap().devices, 1);
    // `b`'s token expires.
    let expires = b.expires_at_ms.unwrap();
    wait_until("b's token expired", || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            > expires
    });
    let r = check_in(&host, &b.token);
    assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
    assert!(String::from_utf8_lossy(&r.body).contains("expired"));
    assert_eq!(host.status().unwrap().devices, 0);
    host.shutdown().unwrap();
}

#[test]
fn status_and_metrics_need_the_operator_token() {
    let f = fixture();
    let host = start_host(config(&f, 1)).unwrap();
    let a = register(
        &host,
        &host.enrol("t", 1, Duration::from_secs(3600)).unwrap(),
    );
    let operator = host.operator_token().to_string();
    let on_disk = std::fs::read_to_string(f.data.join("operator.token")).unwrap();
    assert_eq!(on_disk.trim(), operator);
    for path in ["/v1/status", "/metrics"] {
        assert_eq!(call(&host, "GET", path, None, b"").status, 401, "{path}");
        let r = call(&host, "GET", path, Some(&a.token), b"");
        assert_eq!(
            (r.status, r.code().as_str()),
            (401, "unauthorized"),
            "{path}"
        );
        assert_eq!(call(&host, "GET", path, Some(&operator), b"").status, 200);
    }
    let t = task(&host, &a.token);
    assert_eq!(
        upload(
            &host,
            &a.token,
            t.round,
            &small_update_body(&f.model, &t, a.device_id)
        )
        .status,
        200
    );
    wait_until("released", || host.latest_model().0 == 1);
    let text =
        String::from_utf8(call(&host, "GET", "/metrics", Some(&operator), b"").body).unwrap();
    for line in [
        "hush_uploads_accepted_total 1\n",
        "hush_requests_refused_total{code=\"unauthorized\"} 4\n",
        "hush_rounds{state=\"released\"} 1\n",
        "hush_model_version 1\n",
        "hush_devices 1\n",
        "hush_upload_seconds_count 1\n",
        "hush_checkin_seconds_count 1\n",
        "# TYPE hush_connections_open gauge\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    host.shutdown().unwrap();
}

#[test]
fn an_external_reader_holding_a_read_transaction_stalls_no_release() {
    let f = fixture();
    let host = start_host(config(&f, 1)).unwrap();
    let a = register(
        &host,
        &host.enrol("t", 1, Duration::from_secs(3600)).unwrap(),
    );
    // An operator's query tool opens a read transaction and keeps it.
    let reader = rusqlite::Connection::open(f.data.join(DB_FILE)).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let count = |sql: &str| -> i64 { reader.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT COUNT(*) FROM model_versions"), 1);
    // A whole round registers, checks in, uploads and releases meanwhile.
    let t = task(&host, &a.token);
    let r = upload(
        &host,
        &a.token,
        t.round,
        &small_update_body(&f.model, &t, a.device_id),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    wait_until("round 1 released", || host.latest_model().0 == 1);
    assert_eq!(host.round_log().unwrap()[0].released_version, Some(1));
    // The reader still sees its snapshot: it held the transaction throughout.
    assert_eq!(count("SELECT COUNT(*) FROM model_versions"), 1);
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(count("SELECT COUNT(*) FROM model_versions"), 2);
    host.shutdown().unwrap();
}
