//! The federated round server end to end: a real host on loopback (port 0), raw HTTP from
//! ureq, a tiny leak-CNN package. Every refusal is checked for its status, its JSON code,
//! and for having no effect on the model and the privacy ledger.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hush_device::client::{join, DeviceState, HostClient, JoinConfig};
use hush_device::infer::{listen_files, BuildReads, KwsClassifier};
use hush_device::protocol::{
    checksum_hex, encode_update, ApiError, Assignment, CheckInRequest, RegisterResponse,
    StatusReport, TrainTask, Update, UploadReceipt, CHECKSUM_HEADER,
};
use hush_host::accountant::{Accountant, Adjacency, SubsampledGaussian};
use hush_host::fl::config::TlsSection;
use hush_host::fl::store::RoundState;
use hush_host::fl::FlConfig;
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::{LedgerStore, ReleaseRecord};
use hush_host::server::{start_host, HostHandle};
use hush_models::checkpoint::NamedTensor;
use hush_models::export::nnef::{
    onnx_to_nnef, write_pulsed_trunk, NNEF, STREAM_FRAMES_NNEF, STREAM_HEAD_NNEF,
};
use hush_models::export::{export_package, ExportFormat};

mod common;
use common::{fixture, fixture_with, trainable_tensors, update, Fixture};

// ---------------------------------------------------------------- helpers

/// q = 1 (every checked-in device is picked), `devices` devices per round, a seed.
fn config(f: &Fixture, devices: u64) -> FlConfig {
    let mut c = FlConfig::with_model(&f.model, &f.data);
    c.server.listen = "127.0.0.1:0".into();
    c.server.tick_ms = 20;
    c.rounds.rounds = 3;
    c.rounds.sampling_rate = 1.0;
    c.rounds.min_devices = devices;
    c.rounds.deadline_secs = 30.0;
    c.rounds.min_reports = 1;
    c.dp.noise_multiplier = 1.0;
    c.dp.clip = 1.0;
    c.budget.epsilon = 1000.0;
    c.budget.delta = 1e-5;
    c.seed = Some(7);
    c
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

struct Reply {
    status: u16,
    body: Vec<u8>,
}

impl Reply {
    fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body {:?} is not the expected JSON: {e}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn error_code(&self) -> String {
        self.json::<ApiError>().code
    }
}

fn post(
    host: &HostHandle,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let mut req = agent().post(format!("{}{path}", host.url()));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.send(&body[..]).unwrap();
    Reply {
        status: resp.status().as_u16(),
        body: resp.body_mut().read_to_vec().unwrap(),
    }
}

fn get(host: &HostHandle, path: &str, token: Option<&str>) -> Reply {
    let mut req = agent().get(format!("{}{path}", host.url()));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = req.call().unwrap();
    Reply {
        status: resp.status().as_u16(),
        body: resp.body_mut().read_to_vec().unwrap(),
    }
}

/// An enrolment token for one device, issued by the running host.
fn enrolment(host: &HostHandle) -> String {
    host.enrol("test", 1, Duration::from_secs(3600)).unwrap()
}

fn register(host: &HostHandle, label: &str) -> RegisterResponse {
    let token = enrolment(host);
    let r = post(
        host,
        "/v1/devices",
        None,
        &[("content-type", "application/json")],
        serde_json::to_vec(&serde_json::json!({ "label": label, "enrolment_token": token }))
            .unwrap(),
    );
    assert_eq!(r.status, 200);
    r.json()
}

fn check_in(host: &HostHandle, token: &str) -> Assignment {
    let r = post(
        host,
        "/v1/checkin",
        Some(token),
        &[("content-type", "application/json")],
        br#"{"model_version": null, "examples": 10}"#.to_vec(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn train_task(host: &HostHandle, token: &str) -> TrainTask {
    match check_in(host, token) {
        Assignment::Train(t) => t,
        other => panic!("expected a training task, got {other:?}"),
    }
}

fn status(host: &HostHandle) -> StatusReport {
    let r = get(host, "/v1/status", Some(host.operator_token()));
    assert_eq!(r.status, 200);
    r.json()
}

/// The trainable tensors of the latest published model, in the model's layer order.
fn trainable(host: &HostHandle) -> Vec<NamedTensor> {
    trainable_tensors(&host.latest_model().1)
}

fn params(layout: &[NamedTensor]) -> usize {
    layout.iter().map(|t| t.data.len()).sum()
}

/// A value whose constant update has flat norm `norm`.
fn value_for_norm(layout: &[NamedTensor], norm: f32) -> f32 {
    norm / (params(layout) as f32).sqrt()
}

fn upload_body(host: &HostHandle, token: &str, round: u64, body: Vec<u8>) -> Reply {
    let sum = checksum_hex(&body);
    post(
        host,
        &format!("/v1/rounds/{round}/update"),
        Some(token),
        &[
            (CHECKSUM_HEADER, sum.as_str()),
            ("content-type", "application/octet-stream"),
        ],
        body,
    )
}

fn upload(host: &HostHandle, token: &str, u: &Update) -> Reply {
    upload_body(host, token, u.header.round, encode_update(u).unwrap())
}

fn ledger(f: &Fixture) -> Vec<ReleaseRecord> {
    SqliteLedgerStore::open(&f.data.join("hush.sqlite"))
        .unwrap()
        .records()
        .unwrap()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn happy_path_releases_a_round_records_it_and_publishes_the_model() {
    let f = fixture();
    let host = start_host(config(&f, 2)).unwrap();
    let a = register(&host, "a");
    let b = register(&host, "b");
    assert_ne!(a.token, b.token);
    let before = trainable(&host);

    let ta = train_task(&host, &a.token);
    let tb = train_task(&host, &b.token);
    assert_eq!((ta.round, ta.model_version), (1, 0));
    assert_eq!(ta.clip.bounds, vec![1.0]);
    // A second check-in does not re-draw: still the same task.
    assert_eq!(train_task(&host, &a.token).round, 1);

    // The model can be downloaded with the token, not without.
    let w = get(&host, "/v1/models/0/weights.safetensors", Some(&a.token));
    assert_eq!(w.status, 200);
    assert!(w.body.len() > 100);
    assert_eq!(get(&host, "/v1/models/0/model.json", None).status, 401);
    let escape = get(&host, "/v1/models/0/..%2Fhush.sqlite", Some(&a.token));
    assert!(matches!(escape.status, 400 | 404), "{}", escape.status);

    let v = value_for_norm(&before, 0.5);
    let r = upload(&host, &a.token, &update(&before, &ta, a.device_id, v));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json::<UploadReceipt>(),
        UploadReceipt {
            round: 1,
            duplicate: false
        }
    );
    assert_eq!(status(&host).open_round, Some(1));
    let r = upload(&host, &b.token, &update(&before, &tb, b.device_id, v));
    assert_eq!(r.status, 200);

    // Everyone checked in and reported: the round closes without waiting for its deadline.
    wait_until("model v1", || status(&host).model_version == 1);
    let s = status(&host);
    assert_eq!(s.rounds_done, 1);
    assert_eq!(s.unit, "user");
    assert_eq!(s.delta, 1e-5);
    let expected = SubsampledGaussian::poisson(1.0, 1.0, 1)
        .unwrap()
        .epsilon(Accountant::Rdp, Adjacency::AddRemove, 1e-5)
        .unwrap()
        .epsilon;
    let eps = s.epsilon_rdp.unwrap();
    assert!((eps - expected).abs() < 1e-9, "{eps} vs {expected}");
    assert!(s.epsilon_pld.unwrap() > 0.0);

    let records = ledger(&f);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].release.event.sampling_rate, 1.0);
    assert_eq!(records[0].release.event.noise_multiplier, 1.0);
    assert_eq!(records[0].release.population, Some(2));

    let log = host.round_log().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].state, RoundState::Released);
    assert_eq!(
        (
            log[0].realized_cohort,
            log[0].reports_accepted,
            log[0].reports_rejected
        ),
        (2, 2, 0)
    );
    assert_eq!(log[0].released_version, Some(1));
    assert_eq!(log[0].epsilon_rdp, Some(eps));

    let after = trainable(&host);
    assert_ne!(before, after, "the published model moved");
    // The ledger entry was committed no later than the model version was recorded.
    let conn = rusqlite::Connection::open(f.data.join("hush.sqlite")).unwrap();
    let published: i64 = conn
        .query_row(
            "SELECT published_at_ms FROM model_versions WHERE version = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(records[0].recorded_at_ms <= published);
    // The next round trains the new version.
    assert_eq!(train_task(&host, &a.token).model_version, 1);
    host.shutdown().unwrap();
}

/// A model that comes with its streaming form and NNEF archives (`hush-host export --format
/// nnef`, and a pulsed trunk) keeps them in every version the host publishes, made from that
/// version's weights; a device downloads the ones its build listens with.
#[test]
fn published_versions_keep_the_archives_the_initial_model_has() {
    let f = fixture_with(true);
    export_package(&f.model, ExportFormat::Nnef, None).unwrap();
    write_pulsed_trunk(&f.model, 4).unwrap();
    let archives = [
        NNEF,
        STREAM_FRAMES_NNEF,
        STREAM_HEAD_NNEF,
        "frames.pulse4.nnef.tar",
    ];
    let host = start_host(config(&f, 1)).unwrap();
    let a = register(&host, "a");
    release_v1(&host, &a);

    let models = f.data.join("models");
    let read = |v: &str, name: &str| std::fs::read(models.join(v).join(name)).unwrap();
    for name in archives {
        assert_eq!(read("v0", name), std::fs::read(f.model.join(name)).unwrap());
    }
    // v1's archives are v1's own weights, as tract's writer makes them from v1's ONNX files.
    let v1 = models.join("v1");
    for (onnx, archive) in [
        ("model.onnx", NNEF),
        ("frames.onnx", STREAM_FRAMES_NNEF),
        ("head.onnx", STREAM_HEAD_NNEF),
    ] {
        let made = onnx_to_nnef(&read("v1", onnx), &v1).unwrap();
        assert_eq!(read("v1", archive), made, "{archive}");
    }
    let again = tempfile::tempdir().unwrap();
    std::fs::copy(v1.join("frames.onnx"), again.path().join("frames.onnx")).unwrap();
    let pulsed = write_pulsed_trunk(again.path(), 4).unwrap();
    assert_eq!(
        read("v1", "frames.pulse4.nnef.tar"),
        std::fs::read(pulsed).unwrap()
    );
    for name in archives {
        assert_ne!(
            read("v1", name),
            read("v0", name),
            "{name} follows the weights"
        );
    }
    // Devices can download each of them, with their token.
    for name in archives {
        let got = get(&host, &format!("/v1/models/1/{name}"), Some(&a.token));
        assert_eq!(
            (got.status, got.body == read("v1", name)),
            (200, true),
            "{name}"
        );
    }
    let missing = get(&host, "/v1/models/1/frames.pulse8.nnef.tar", Some(&a.token));
    assert_eq!(missing.status, 404);
    // A device gets the card, the weights and what its build listens with: ONNX files, or
    // their archives (and the pulsed trunk, where listening pulses one) in a build without
    // tract's ONNX parser; that package loads with its streaming form.
    let nnef_only = BuildReads {
        onnx: false,
        pulse: false,
    };
    for build in [BuildReads::THIS_BUILD, nnef_only] {
        let (_state, dir) = download(&host, &a.token, 1, build);
        let mut want = vec!["model.json".to_string(), "weights.safetensors".into()];
        want.extend(listen_files(&v1, build).unwrap());
        want.sort();
        assert_eq!(held(&dir), want, "{build:?}");
        for name in &want {
            assert_eq!(
                std::fs::read(dir.join(name)).unwrap(),
                read("v1", name),
                "{name}"
            );
        }
        let clf = KwsClassifier::load(&dir).unwrap();
        assert!(clf.stream_form().is_some(), "{build:?}");
    }
    host.shutdown().unwrap();
}

/// Device `a` trains in round 1 and uploads an update within the bound; the host releases
/// model v1.
fn release_v1(host: &HostHandle, a: &RegisterResponse) {
    let before = trainable(host);
    let task = train_task(host, &a.token);
    let v = value_for_norm(&before, 0.5);
    assert_eq!(
        upload(host, &a.token, &update(&before, &task, a.device_id, v)).status,
        200
    );
    wait_until("model v1", || status(host).model_version == 1);
}

/// Model version `version` as `DeviceState::ensure_model` downloads it for `build`, in a new
/// state directory (returned to keep it).
fn download(
    host: &HostHandle,
    token: &str,
    version: u64,
    build: BuildReads,
) -> (tempfile::TempDir, PathBuf) {
    let state = tempfile::tempdir().unwrap();
    let client = HostClient::new(&host.url(), Duration::from_secs(10))
        .unwrap()
        .with_token(token);
    let dir = DeviceState::open(state.path())
        .unwrap()
        .ensure_model(&client, version, build)
        .unwrap();
    (state, dir)
}

/// The names of the files in `dir`, sorted.
fn held(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A device that joins trains in each round it is drawn for and, when the host says training
/// is done, keeps the last model version the host published, to listen with.
#[test]
fn a_joined_device_keeps_the_federated_model_when_training_is_done() {
    let f = fixture_with(true);
    let mut c = config(&f, 1);
    c.rounds.rounds = 2;
    let host = start_host(c).unwrap();
    let state = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let mut jc = JoinConfig::new(&host.url(), data, state.path().to_path_buf());
    jc.speaker = Some("01fddb35".into());
    jc.enrolment_token = enrolment(&host);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let summary = join(&jc, &stop, &mut |_| {}).unwrap();
    assert_eq!((summary.rounds_trained, summary.uploads_accepted), (2, 2));
    assert!(summary.done.is_some());
    let (version, dir) = summary.model.expect("the final model");
    assert_eq!(version, 2);
    assert_eq!(dir, state.path().join("models").join("v2"));
    let published = f.data.join("models").join("v2");
    for name in [
        "model.json",
        "weights.safetensors",
        "model.onnx",
        "frames.onnx",
    ] {
        let held = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(held, std::fs::read(published.join(name)).unwrap(), "{name}");
    }
    // Only the final version is kept.
    let models: Vec<_> = std::fs::read_dir(state.path().join("models"))
        .unwrap()
        .collect();
    assert_eq!(models.len(), 1);
    assert!(KwsClassifier::load(&dir).unwrap().stream_form().is_some());
    match check_in(&host, &stored_token(state.path())) {
        Assignment::Done { model_version, .. } => assert_eq!(model_version, Some(2)),
        a => panic!("expected done, got {a:?}"),
    }
    host.shutdown().unwrap();
}

/// The bearer token a joined device stored in its state directory.
fn stored_token(state: &Path) -> String {
    let id: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("device.json")).unwrap()).unwrap();
    id["token"].as_str().unwrap().to_string()
}

/// An initial model that comes without NNEF archives is published with them, made by
/// tract's writer from its ONNX files, and so is every version after it; a device downloads
/// the model files its build reads and skips any the host does not have.
#[test]
fn an_initial_model_without_archives_is_published_with_them() {
    let f = fixture_with(true);
    assert!(!f.model.join(NNEF).exists());
    let mut c = config(&f, 1);
    c.rounds.rounds = 1;
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let nnef_only = BuildReads {
        onnx: false,
        pulse: false,
    };
    let models = f.data.join("models");
    let v0 = models.join("v0");
    let wanted = listen_files(&v0, nnef_only).unwrap();
    assert_eq!(wanted, [NNEF, STREAM_FRAMES_NNEF, STREAM_HEAD_NNEF]);
    let archives = |dir: &Path| {
        for (onnx, archive) in [
            ("model.onnx", NNEF),
            ("frames.onnx", STREAM_FRAMES_NNEF),
            ("head.onnx", STREAM_HEAD_NNEF),
        ] {
            let made = onnx_to_nnef(&std::fs::read(dir.join(onnx)).unwrap(), dir).unwrap();
            assert_eq!(std::fs::read(dir.join(archive)).unwrap(), made, "{archive}");
        }
    };
    archives(&v0);
    release_v1(&host, &a);
    archives(&models.join("v1"));

    // A host that does not have the streaming form's archives (one of an earlier release)
    // answers 404 for them: the device takes the rest, and listens with the whole model.
    for name in [STREAM_FRAMES_NNEF, STREAM_HEAD_NNEF] {
        std::fs::remove_file(v0.join(name)).unwrap();
        let got = get(&host, &format!("/v1/models/0/{name}"), Some(&a.token));
        assert_eq!(got.status, 404, "{name}");
    }
    let (_state, dir) = download(&host, &a.token, 0, nnef_only);
    assert_eq!(held(&dir), ["model.json", NNEF, "weights.safetensors"]);
    assert!(KwsClassifier::load(&dir).unwrap().stream_form().is_none());
    host.shutdown().unwrap();
}

/// With `server.nnef_archives = false` (what `simulate` runs, its devices reading ONNX) the
/// host writes no archive: v0 is the initial model's files.
#[test]
fn a_host_told_not_to_writes_no_archives() {
    let f = fixture_with(true);
    let mut c = config(&f, 1);
    c.server.nnef_archives = false;
    let host = start_host(c).unwrap();
    let v0 = f.data.join("models").join("v0");
    assert_eq!(
        held(&v0),
        [
            "frames.onnx",
            "head.onnx",
            "model.json",
            "model.onnx",
            "weights.safetensors"
        ]
    );
    host.shutdown().unwrap();
}

#[test]
fn non_private_mean_is_applied_exactly_and_rounds_end_in_done() {
    let f = fixture();
    let mut c = config(&f, 1);
    c.dp.enabled = false;
    c.rounds.rounds = 1;
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let before = trainable(&host);
    let t = train_task(&host, &a.token);
    let v = value_for_norm(&before, 0.9);
    assert_eq!(
        upload(&host, &a.token, &update(&before, &t, a.device_id, v)).status,
        200
    );
    wait_until("model v1", || status(&host).model_version == 1);
    for (b, n) in before.iter().zip(trainable(&host)) {
        for (x, y) in b.data.iter().zip(&n.data) {
            assert!((x + v - y).abs() < 1e-5, "{x} + {v} != {y}");
        }
    }
    assert!(matches!(check_in(&host, &a.token), Assignment::Done { .. }));
    assert!(host.wait_finished_timeout(Duration::from_secs(5)));
    assert!(ledger(&f).is_empty(), "a non-private run records nothing");
    assert_eq!(status(&host).epsilon_rdp, None);
    host.shutdown().unwrap();
}

#[test]
fn duplicate_upload_is_counted_once() {
    let f = fixture();
    let host = start_host(config(&f, 2)).unwrap();
    let a = register(&host, "a");
    let _b = register(&host, "b");
    let layout = trainable(&host);
    let t = train_task(&host, &a.token);
    let u = update(&layout, &t, a.device_id, value_for_norm(&layout, 0.5));
    let first = upload(&host, &a.token, &u);
    assert!(!first.json::<UploadReceipt>().duplicate);
    let second = upload(&host, &a.token, &u);
    assert_eq!(second.status, 200);
    assert_eq!(
        second.json::<UploadReceipt>(),
        UploadReceipt {
            round: 1,
            duplicate: true
        }
    );
    assert_eq!(status(&host).reports_in_round, 1);
    // A corrupted copy of it is not answered as the duplicate it claims to be: the
    // checksum is verified before any refusal or receipt (the values are read only when
    // an update is added).
    let mut body = encode_update(&u).unwrap();
    let sum = checksum_hex(&body);
    let last = body.len() - 1;
    body[last] ^= 1;
    let corrupt = post(
        &host,
        "/v1/rounds/1/update",
        Some(&a.token),
        &[(CHECKSUM_HEADER, sum.as_str())],
        body,
    );
    assert_eq!(
        (corrupt.status, corrupt.error_code().as_str()),
        (400, "bad_checksum")
    );
    assert_eq!(host.round_log().unwrap()[0].reports_accepted, 1);
    host.shutdown().unwrap();
}

#[test]
fn wrong_or_missing_token_is_401() {
    let f = fixture();
    let host = start_host(config(&f, 1)).unwrap();
    let a = register(&host, "a");
    let body = br#"{"model_version": null, "examples": 1}"#.to_vec();
    for token in [None, Some("not-a-token"), Some("")] {
        let r = post(&host, "/v1/checkin", token, &[], body.clone());
        assert_eq!(r.status, 401);
        assert_eq!(r.error_code(), "unauthorized");
    }
    let r = post(
        &host,
        "/v1/checkin",
        None,
        &[("Authorization", a.token.as_str())],
        body,
    );
    assert_eq!(r.status, 401, "a token without `Bearer` is refused");
    let r = upload_body(&host, "wrong", 1, vec![1, 2, 3]);
    assert_eq!((r.status, r.error_code().as_str()), (401, "unauthorized"));
    assert_eq!(
        get(&host, "/v1/models/0/model.json", Some("wrong")).status,
        401
    );
    assert_eq!(
        status(&host).open_round,
        None,
        "no round opened for unauthenticated calls"
    );
    host.shutdown().unwrap();
}

#[test]
fn oversized_malformed_and_corrupted_bodies_are_refused() {
    let f = fixture();
    let probe = {
        let host = start_host(config(&f, 1)).unwrap();
        let layout = trainable(&host);
        host.shutdown().unwrap();
        layout
    };
    let task0 = TrainTask {
        round: 1,
        model_version: 0,
        deadline_ms: 0,
        local: hush_device::protocol::LocalTraining {
            epochs: 1,
            batch_size: 1,
            lr: 0.1,
            example_clip: None,
            seed: 0,
        },
        clip: hush_device::protocol::UpdateClip {
            bounds: vec![1.0],
            layers: vec![],
            normalize_layers: false,
            local_noise_std: 0.0,
        },
    };
    let encoded = encode_update(&update(&probe, &task0, 1, 0.0))
        .unwrap()
        .len();
    let mut c = config(&f, 1);
    c.server.max_upload_bytes = Some(encoded + 100);
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let t = train_task(&host, &a.token);
    let good = update(&probe, &t, a.device_id, value_for_norm(&probe, 0.5));
    let body = encode_update(&good).unwrap();

    let r = upload_body(&host, &a.token, 1, vec![0u8; encoded + 200]);
    assert_eq!((r.status, r.error_code().as_str()), (413, "too_large"));
    let r = upload_body(&host, &a.token, 1, vec![0xff; 64]);
    assert_eq!((r.status, r.error_code().as_str()), (400, "malformed"));
    let r = upload_body(&host, &a.token, 1, body[..body.len() / 2].to_vec());
    assert_eq!((r.status, r.error_code().as_str()), (400, "malformed"));
    let r = post(
        &host,
        "/v1/rounds/1/update",
        Some(&a.token),
        &[(CHECKSUM_HEADER, checksum_hex(b"something else").as_str())],
        body.clone(),
    );
    assert_eq!((r.status, r.error_code().as_str()), (400, "bad_checksum"));
    let r = post(
        &host,
        "/v1/rounds/1/update",
        Some(&a.token),
        &[],
        body.clone(),
    );
    assert_eq!((r.status, r.error_code().as_str()), (400, "bad_checksum"));
    let mut bad_shape = good.clone();
    bad_shape.layers[0].shape.push(1);
    let r = upload(&host, &a.token, &bad_shape);
    assert_eq!((r.status, r.error_code().as_str()), (400, "invalid_update"));
    let r = upload_body(&host, &a.token, 1, vec![]);
    assert_eq!(r.status, 400);
    let r = post(
        &host,
        "/v1/rounds/abc/update",
        Some(&a.token),
        &[],
        body.clone(),
    );
    assert_eq!((r.status, r.error_code().as_str()), (400, "bad_path"));
    let r = post(
        &host,
        "/v1/checkin",
        Some(&a.token),
        &[],
        b"{not json".to_vec(),
    );
    assert_eq!((r.status, r.error_code().as_str()), (400, "malformed"));
    let r = post(&host, "/v1/devices", None, &[], b"[]".to_vec());
    assert_eq!((r.status, r.error_code().as_str()), (400, "malformed"));
    let r = get(&host, "/v1/nothing", None);
    assert_eq!((r.status, r.error_code().as_str()), (404, "not_found"));
    let r = get(&host, "/v1/checkin", None);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (405, "method_not_allowed")
    );
    // Header naming another device's round or identity.
    let mut other = good.clone();
    other.header.device_id = 99;
    other.header.idempotency_key = Update::key(1, 99);
    let r = upload(&host, &a.token, &other);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (403, "device_mismatch")
    );

    // Round ids no store can hold: a clear 404, never a 500.
    for huge in [1u64 << 63, u64::MAX] {
        let mut far = good.clone();
        far.header.round = huge;
        far.header.idempotency_key = Update::key(huge, a.device_id);
        let r = upload(&host, &a.token, &far);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (404, "unknown_round"),
            "round {huge}"
        );
    }

    // None of it counted; the good body still goes through afterwards.
    assert_eq!(status(&host).reports_in_round, 0);
    let r = upload_body(&host, &a.token, 1, body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    host.shutdown().unwrap();
}

#[test]
fn update_over_the_norm_bound_is_rejected_with_no_effect() {
    // Non-private, so the released model shows exactly which updates were summed.
    let f = fixture();
    let mut c = config(&f, 2);
    c.dp.enabled = false;
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let b = register(&host, "b");
    let before = trainable(&host);
    let ta = train_task(&host, &a.token);
    let tb = train_task(&host, &b.token);
    let big = update(&before, &ta, a.device_id, value_for_norm(&before, 100.0));
    let r = upload(&host, &a.token, &big);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "over_norm_bound")
    );
    assert_eq!(status(&host).reports_rejected, 1);
    assert_eq!(status(&host).reports_in_round, 0);
    let v = value_for_norm(&before, 0.5);
    assert_eq!(
        upload(&host, &b.token, &update(&before, &tb, b.device_id, v)).status,
        200
    );
    wait_until("model v1", || status(&host).model_version == 1);
    for (x, y) in before.iter().zip(trainable(&host)) {
        for (p, q) in x.data.iter().zip(&y.data) {
            assert!((p + v - q).abs() < 1e-5, "only b's update was applied");
        }
    }
    let log = host.round_log().unwrap();
    assert_eq!((log[0].reports_accepted, log[0].reports_rejected), (1, 1));
    host.shutdown().unwrap();

    // With DP: a round whose only update is over the bound releases nothing.
    let f = fixture();
    let host = start_host(config(&f, 1)).unwrap();
    let a = register(&host, "a");
    let layout = trainable(&host);
    let t = train_task(&host, &a.token);
    let mut over = update(&layout, &t, a.device_id, 0.0);
    over.layers[0].data[0] = 1.5;
    let r = upload(&host, &a.token, &over);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "over_norm_bound")
    );
    wait_until("round closed", || status(&host).open_round.is_none());
    assert!(
        ledger(&f).is_empty(),
        "no ledger entry for a round with no accepted update"
    );
    assert_eq!(status(&host).model_version, 0);
    assert_eq!(host.round_log().unwrap()[0].state, RoundState::Abandoned);
    host.shutdown().unwrap();
}

#[test]
fn late_upload_after_the_round_closed_is_refused() {
    let f = fixture();
    let mut c = config(&f, 2);
    c.rounds.deadline_secs = 0.5;
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let b = register(&host, "b");
    let layout = trainable(&host);
    let ta = train_task(&host, &a.token);
    let tb = train_task(&host, &b.token);
    let v = value_for_norm(&layout, 0.5);
    assert_eq!(
        upload(&host, &a.token, &update(&layout, &ta, a.device_id, v)).status,
        200
    );
    wait_until("deadline", || status(&host).model_version == 1);
    let r = upload(&host, &b.token, &update(&layout, &tb, b.device_id, v));
    assert_eq!((r.status, r.error_code().as_str()), (409, "round_closed"));
    let log = host.round_log().unwrap();
    assert_eq!(log[0].state, RoundState::Released);
    assert_eq!(log[0].reports_accepted, 1);
    assert_eq!(ledger(&f).len(), 1, "the late upload spent nothing");
    host.shutdown().unwrap();
}

#[test]
fn round_with_too_few_reports_is_abandoned_without_a_ledger_entry() {
    let f = fixture();
    let mut c = config(&f, 2);
    c.rounds.deadline_secs = 0.5;
    c.rounds.min_reports = 2;
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let b = register(&host, "b");
    let layout = trainable(&host);
    let ta = train_task(&host, &a.token);
    let _ = train_task(&host, &b.token);
    let v = value_for_norm(&layout, 0.5);
    assert_eq!(
        upload(&host, &a.token, &update(&layout, &ta, a.device_id, v)).status,
        200
    );
    wait_until("deadline", || status(&host).open_round.is_none());
    let log = host.round_log().unwrap();
    assert_eq!(log[0].state, RoundState::Abandoned);
    assert!(log[0]
        .reason
        .as_deref()
        .unwrap_or("")
        .contains("min_reports"));
    assert!(ledger(&f).is_empty());
    let s = status(&host);
    assert_eq!((s.model_version, s.rounds_done), (0, 0));
    assert_eq!(s.epsilon_rdp.unwrap_or(0.0), 0.0);
    // The next check-in opens a fresh round on the same model.
    let t = train_task(&host, &a.token);
    assert_eq!((t.round, t.model_version), (2, 0));
    host.shutdown().unwrap();
}

#[test]
fn restart_mid_round_abandons_it_and_spends_no_epsilon_twice() {
    let f = fixture();
    let host = start_host(config(&f, 2)).unwrap();
    let a = register(&host, "a");
    let b = register(&host, "b");
    let layout = trainable(&host);
    let ta = train_task(&host, &a.token);
    let _ = train_task(&host, &b.token);
    let v = value_for_norm(&layout, 0.5);
    assert_eq!(
        upload(&host, &a.token, &update(&layout, &ta, a.device_id, v)).status,
        200
    );
    // Stop mid-round (b never reported): the in-memory sum is gone.
    host.shutdown().unwrap();
    assert!(ledger(&f).is_empty());

    let host = start_host(config(&f, 2)).unwrap();
    let log = host.round_log().unwrap();
    assert_eq!(log[0].state, RoundState::Abandoned);
    // The shutdown itself recorded why (a crash would leave it to the restart).
    let reason = log[0].reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("host stopped") && reason.contains("no epsilon spent"),
        "{reason}"
    );
    assert_eq!(status(&host).open_round, None);
    // Tokens are still valid; a fresh round opens; the old round's upload is late.
    let ta = train_task(&host, &a.token);
    let tb = train_task(&host, &b.token);
    assert_eq!((ta.round, ta.model_version), (2, 0));
    let old = update(
        &layout,
        &TrainTask {
            round: 1,
            ..ta.clone()
        },
        a.device_id,
        v,
    );
    let r = upload(&host, &a.token, &old);
    assert_eq!(
        r.status, 200,
        "round 1's accepted upload is a duplicate, not a new report"
    );
    assert!(r.json::<UploadReceipt>().duplicate);
    assert_eq!(
        upload(&host, &a.token, &update(&layout, &ta, a.device_id, v)).status,
        200
    );
    assert_eq!(
        upload(&host, &b.token, &update(&layout, &tb, b.device_id, v)).status,
        200
    );
    wait_until("model v1", || status(&host).model_version == 1);
    let records = ledger(&f);
    assert_eq!(
        records.len(),
        1,
        "one release: the abandoned round spent nothing"
    );
    assert!(records[0].release.released.contains("round 2"));
    host.shutdown().unwrap();

    // A third start finds the release and the published model.
    let host = start_host(config(&f, 2)).unwrap();
    let s = status(&host);
    assert_eq!((s.model_version, s.rounds_done), (1, 1));
    assert!(s.epsilon_rdp.unwrap() > 0.0);
    assert_eq!(ledger(&f).len(), 1);
    host.shutdown().unwrap();
}

#[test]
fn restart_between_rounds_keeps_the_server_optimizer_momentum() {
    // FedAvg with momentum 0.9, non-private, the same update v each round:
    // w1 = w0 + v, then m = 0.9·(−v) + (−v) so w2 = w1 + 1.9·v — but w1 + v if the
    // momentum were lost in the restart.
    let f = fixture();
    let momentum_config = |f: &Fixture| {
        let mut c = config(f, 1);
        c.dp.enabled = false;
        c.rounds.rounds = 2;
        c.optimizer.momentum = Some(0.9);
        c
    };
    let host = start_host(momentum_config(&f)).unwrap();
    let a = register(&host, "a");
    let w0 = trainable(&host);
    let v = value_for_norm(&w0, 0.5);
    let t = train_task(&host, &a.token);
    assert_eq!(
        upload(&host, &a.token, &update(&w0, &t, a.device_id, v)).status,
        200
    );
    wait_until("model v1", || status(&host).model_version == 1);
    host.shutdown().unwrap();

    let host = start_host(momentum_config(&f)).unwrap();
    let w1 = trainable(&host);
    let t = train_task(&host, &a.token);
    assert_eq!(t.model_version, 1);
    assert_eq!(
        upload(&host, &a.token, &update(&w1, &t, a.device_id, v)).status,
        200
    );
    wait_until("model v2", || status(&host).model_version == 2);
    for (b, n) in w1.iter().zip(trainable(&host)) {
        for (x, y) in b.data.iter().zip(&n.data) {
            assert!((x + 1.9 * v - y).abs() < 1e-5, "{x} + 1.9·{v} != {y}");
        }
    }
    host.shutdown().unwrap();

    // Changing the optimizer under a saved state is refused, naming the section.
    let mut changed = momentum_config(&f);
    changed.optimizer.momentum = Some(0.5);
    let err = start_host(changed)
        .err()
        .expect("a changed optimizer must not resume");
    assert!(err.to_string().contains("optimizer"), "{err}");
}

#[test]
fn a_model_that_cannot_be_written_is_not_released_and_spends_no_epsilon() {
    // Make staging v1 impossible (a file where the staging directory goes): the release
    // must stop before its transaction, so nothing is recorded and no model is served.
    let f = fixture();
    let host = start_host(config(&f, 1)).unwrap();
    let staging = f.data.join("models").join(".staging");
    std::fs::remove_dir_all(&staging).unwrap();
    std::fs::write(&staging, b"in the way").unwrap();
    let a = register(&host, "a");
    let layout = trainable(&host);
    let t = train_task(&host, &a.token);
    let v = value_for_norm(&layout, 0.5);
    assert_eq!(
        upload(&host, &a.token, &update(&layout, &t, a.device_id, v)).status,
        200
    );
    wait_until("round closed", || status(&host).open_round.is_none());
    assert!(ledger(&f).is_empty(), "no release, so no ledger record");
    let s = status(&host);
    assert_eq!(s.model_version, 0, "nothing published");
    assert_eq!(s.epsilon_rdp, Some(0.0));
    assert!(s.finished, "training stops when models cannot be written");
    let log = host.round_log().unwrap();
    assert_eq!(log[0].state, RoundState::Abandoned);
    assert!(
        log[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("could not be written"),
        "{:?}",
        log[0].reason
    );
    assert!(matches!(check_in(&host, &a.token), Assignment::Done { .. }));
    host.shutdown().unwrap();
}

#[test]
fn budget_exhaustion_ends_training_before_a_round_opens() {
    let f = fixture();
    let mut c = config(&f, 1);
    // One round at q = 1, z = 1 costs far more than this.
    c.budget.epsilon = 0.1;
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    match check_in(&host, &a.token) {
        Assignment::Done { reason, .. } => assert!(reason.contains("budget"), "{reason}"),
        other => panic!("expected Done, got {other:?}"),
    }
    assert!(host.round_log().unwrap().is_empty(), "no round was opened");
    assert!(ledger(&f).is_empty());
    host.shutdown().unwrap();
}

#[test]
fn noise_cohort_is_accounted_at_the_effective_multiplier() {
    let f = fixture();
    let mut c = config(&f, 2);
    c.dp.noise_cohort_size = Some(8.0);
    let host = start_host(c).unwrap();
    let a = register(&host, "a");
    let b = register(&host, "b");
    let layout = trainable(&host);
    let ta = train_task(&host, &a.token);
    let tb = train_task(&host, &b.token);
    let v = value_for_norm(&layout, 0.5);
    assert_eq!(
        upload(&host, &a.token, &update(&layout, &ta, a.device_id, v)).status,
        200
    );
    assert_eq!(
        upload(&host, &b.token, &update(&layout, &tb, b.device_id, v)).status,
        200
    );
    wait_until("model v1", || status(&host).model_version == 1);
    let records = ledger(&f);
    // Expected cohort C = q·N = 2, M = 8: z_eff = z·C/M = 0.25.
    assert!((records[0].release.event.noise_multiplier - 0.25).abs() < 1e-12);
    host.shutdown().unwrap();
}

// ---------------------------------------------------------------- TLS

fn tls_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

fn tls_config(f: &Fixture) -> FlConfig {
    let mut c = config(f, 1);
    c.dp.enabled = false;
    c.rounds.rounds = 1;
    c.server.tls = Some(TlsSection {
        cert: tls_fixture("localhost.pem"),
        key: tls_fixture("localhost.key"),
    });
    c
}

#[test]
fn tls_host_runs_a_round_for_a_device_that_trusts_its_ca() {
    let f = fixture();
    let host = start_host(tls_config(&f)).unwrap();
    let url = host.url();
    assert!(url.starts_with("https://localhost:"), "{url}");
    let ca = std::fs::read(tls_fixture("ca.pem")).unwrap();
    let anon = HostClient::with_ca_pem(&url, Duration::from_secs(10), &ca).unwrap();
    let reg = anon.register("over-tls", &enrolment(&host)).unwrap();
    let device = anon.clone().with_token(&reg.token);
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    let task = match device.check_in(&req).unwrap() {
        Assignment::Train(t) => t,
        other => panic!("expected a training task, got {other:?}"),
    };
    let onnx = device.download(task.model_version, "model.onnx").unwrap();
    assert!(!onnx.is_empty());
    let before = trainable(&host);
    let v = value_for_norm(&before, 0.5);
    let body = encode_update(&update(&before, &task, reg.device_id, v)).unwrap();
    let receipt = device.upload(task.round, &body).unwrap();
    assert!(!receipt.duplicate);
    let operator = anon.clone().with_token(host.operator_token());
    wait_until("model v1", || operator.status().unwrap().model_version == 1);
    for (b, n) in before.iter().zip(trainable(&host)) {
        assert!((b.data[0] + v - n.data[0]).abs() < 1e-5);
    }
    host.shutdown().unwrap();
}

#[test]
fn tls_host_is_refused_by_clients_that_do_not_trust_it_and_refuses_plain_http() {
    let f = fixture();
    let host = start_host(tls_config(&f)).unwrap();
    // Mozilla's roots do not include the test CA: the handshake fails, nothing is sent.
    let public_roots = HostClient::new(&host.url(), Duration::from_secs(10)).unwrap();
    let err = public_roots
        .register("untrusted", &enrolment(&host))
        .unwrap_err();
    assert!(
        !err.is_transient(),
        "an untrusted certificate is not retried: {err}"
    );
    assert!(err.to_string().contains("--ca-cert"), "{err}");
    // A CA file without certificates is refused before any connection.
    let key = std::fs::read(tls_fixture("localhost.key")).unwrap();
    let err = HostClient::with_ca_pem(&host.url(), Duration::from_secs(10), &key).unwrap_err();
    assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
    // Plain HTTP to the TLS port gets no protocol answer.
    let plain = HostClient::new(&format!("http://{}", host.addr), Duration::from_secs(10)).unwrap();
    assert!(plain.status().is_err());
    assert_eq!(status_over_tls(&host).devices, 0, "nobody registered");
    host.shutdown().unwrap();
}

fn status_over_tls(host: &HostHandle) -> StatusReport {
    let ca = std::fs::read(tls_fixture("ca.pem")).unwrap();
    HostClient::with_ca_pem(&host.url(), Duration::from_secs(10), &ca)
        .unwrap()
        .with_token(host.operator_token())
        .status()
        .unwrap()
}

#[test]
fn tls_config_with_a_mismatched_key_fails_at_start_naming_the_key() {
    let f = fixture();
    let mut c = tls_config(&f);
    if let Some(t) = c.server.tls.as_mut() {
        t.key = tls_fixture("other.key");
    }
    let err = start_host(c)
        .err()
        .expect("a mismatched key must not start");
    assert!(err.to_string().contains("server.tls"), "{err}");
}
