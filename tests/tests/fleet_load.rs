//! Load: 1 000 devices against one real host on loopback, uploading concurrently from
//! 100 threads; every update counted exactly once, every retry recognised as a duplicate.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hush_device::client::{ClientError, HostClient};
use hush_device::protocol::{
    encode_update, Assignment, CheckInRequest, LayerDelta, Update, UpdateHeader,
    UPDATE_FORMAT_VERSION,
};
use hush_host::fl::FlConfig;
use hush_host::server::start_host;
use hush_tests::tiny_kws_package;

const DEVICES: usize = 1000;
const THREADS: usize = 100;

#[test]
fn a_thousand_concurrent_uploads_are_each_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let package = tiny_kws_package(&dir.path().join("initial"));
    let mut cfg = FlConfig::with_model(&package, &dir.path().join("host"));
    cfg.server.listen = "127.0.0.1:0".into();
    cfg.rounds.rounds = 1;
    cfg.rounds.sampling_rate = 1.0;
    cfg.rounds.min_devices = DEVICES as u64;
    cfg.rounds.deadline_secs = 300.0;
    cfg.rounds.retry_after_ms = 20;
    cfg.dp.noise_multiplier = 1.0;
    cfg.budget.epsilon = 1e6;
    cfg.seed = Some(1);
    // One loopback address stands for a fleet's many: only per-device limits apply.
    cfg.limits.register_per_address_per_minute = 1e6;
    cfg.limits.checkin_per_address_per_second = 1e6;
    let host = start_host(cfg).unwrap();
    let url = host.url();
    let enrolment = host
        .enrol("load", DEVICES as u64, Duration::from_secs(3600))
        .unwrap();

    let accepted = Arc::new(AtomicU64::new(0));
    let duplicates = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (url, accepted, duplicates) = (url.clone(), accepted.clone(), duplicates.clone());
            let enrolment = enrolment.clone();
            std::thread::spawn(move || {
                let anon = HostClient::new(&url, Duration::from_secs(120)).unwrap();
                let mut devices: Vec<(u64, HostClient)> = (0..DEVICES / THREADS)
                    .map(|i| {
                        let r = anon.register(&format!("load-{w}-{i}"), &enrolment).unwrap();
                        (r.device_id, anon.clone().with_token(&r.token))
                    })
                    .collect();
                // Check in until each device is assigned the round, then upload twice.
                let mut card: Option<serde_json::Value> = None;
                while !devices.is_empty() {
                    let mut waiting = Vec::new();
                    for (id, client) in devices {
                        let a = honouring_retry_after(|| {
                            client.check_in(&CheckInRequest {
                                model_version: None,
                                examples: 1,
                            })
                        });
                        match a {
                            Assignment::Train(task) => {
                                let card = card.get_or_insert_with(|| {
                                    serde_json::from_slice(
                                        &client.download(0, "model.json").unwrap(),
                                    )
                                    .unwrap()
                                });
                                let layers: Vec<LayerDelta> = task
                                    .clip
                                    .layers
                                    .iter()
                                    .map(|name| zero_layer(card, name))
                                    .collect();
                                let update = Update {
                                    header: UpdateHeader {
                                        format_version: UPDATE_FORMAT_VERSION,
                                        model_version: task.model_version,
                                        round: task.round,
                                        device_id: id,
                                        idempotency_key: Update::key(task.round, id),
                                        layer_norms: vec![0.0; layers.len()],
                                    },
                                    layers,
                                };
                                let body = encode_update(&update).unwrap();
                                let first =
                                    honouring_retry_after(|| client.upload(task.round, &body));
                                let again =
                                    honouring_retry_after(|| client.upload(task.round, &body));
                                assert!(!first.duplicate);
                                assert!(again.duplicate);
                                accepted.fetch_add(1, Ordering::Relaxed);
                                duplicates.fetch_add(1, Ordering::Relaxed);
                            }
                            Assignment::Wait { .. } => waiting.push((id, client)),
                            Assignment::Done { reason, .. } => {
                                panic!("done before uploading: {reason}")
                            }
                        }
                    }
                    devices = waiting;
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(host.wait_finished_timeout(Duration::from_secs(120)));
    let log = host.round_log().unwrap();
    let released: Vec<_> = log
        .iter()
        .filter(|r| r.released_version.is_some())
        .collect();
    assert_eq!(released.len(), 1, "{log:?}");
    assert_eq!(released[0].realized_cohort, DEVICES as u64);
    assert_eq!(released[0].reports_accepted, DEVICES as u64);
    assert_eq!(released[0].reports_rejected, 0);
    assert_eq!(accepted.load(Ordering::Relaxed), DEVICES as u64);
    assert_eq!(duplicates.load(Ordering::Relaxed), DEVICES as u64);
    host.shutdown().unwrap();
}

/// Calls `f` until it succeeds, waiting out each 429 or 503 for its `Retry-After` (as the
/// device's own loop does); any other error fails the test.
fn honouring_retry_after<T>(mut f: impl FnMut() -> Result<T, ClientError>) -> T {
    for _ in 0..100 {
        match f() {
            Ok(v) => return v,
            Err(e) => match e.retry_after() {
                Some(wait) => std::thread::sleep(wait),
                None => panic!("{e}"),
            },
        }
    }
    panic!("still refused after 100 waits")
}

/// A zero delta of the right shape for `name`, from the model card's parameter list.
fn zero_layer(card: &serde_json::Value, name: &str) -> LayerDelta {
    let p = card["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap();
    let shape: Vec<u32> = p["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as u32)
        .collect();
    let n = shape.iter().product::<u32>() as usize;
    LayerDelta {
        name: name.to_string(),
        shape,
        data: vec![0.0; n],
    }
}
