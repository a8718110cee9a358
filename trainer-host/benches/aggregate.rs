//! Aggregation throughput and upload latency (bench binary, `harness = false`).
//!
//! 1. **Streaming aggregation**: what the host does with each upload of a ~1 M-parameter
//!    model — the frame decoded and checked against the layout, then one pass over the
//!    values (checksum, finiteness, the norm re-check, the add onto the fixed-point grid)
//!    — in updates/s and GB/s of update data, against a plain memory-bandwidth reference
//!    in the same run (adding the same, already-decoded values into a sum: the least any
//!    streaming sum must do). Also the refusal path (an update over its bound, added then
//!    taken back out) and the two passes of a replica (check, then add).
//! 2. **Upload round trip on loopback**: a real host (axum, SQLite) and a real client;
//!    the time from sending a 1.53 M-parameter update (the leak-CNN) to the receipt.
//!
//! ```text
//! cargo bench -p hush-host --bench aggregate
//! ```

// A bench binary: failures should stop it loudly.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use hush_device::client::HostClient;
use hush_device::protocol::{
    checksum_hex, decode_update, encode_update, Assignment, CheckInRequest, LayerDelta, Update,
    UpdateHeader, UpdateLimits, UPDATE_FORMAT_VERSION,
};
use hush_host::fl::aggregate::{Aggregator, UpdateValidator};
use hush_host::fl::FlConfig;
use hush_host::server::start_host;
use hush_models::arch::{ArchConfig, IoShape, LeakCnnConfig};
use hush_models::dp::{ClipBounds, ClipStrategy};
use hush_models::package::{write_package, ModelCard};

const UPDATES: usize = 64;

fn layout() -> Vec<(String, Vec<usize>)> {
    vec![
        ("fc1.weight".into(), vec![512, 1536]),
        ("fc1.bias".into(), vec![512]),
        ("fc2.weight".into(), vec![400, 512]),
        ("fc2.bias".into(), vec![400]),
    ]
}

fn update_for(layout: &[(String, Vec<usize>)], round: u64, device: u64, seed: u32) -> Update {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    let layers: Vec<LayerDelta> = layout
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let data = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x as f32 / u32::MAX as f32 - 0.5) * 1e-4
                })
                .collect();
            LayerDelta {
                name: name.clone(),
                shape: shape.iter().map(|&d| d as u32).collect(),
                data,
            }
        })
        .collect();
    Update {
        header: UpdateHeader {
            format_version: UPDATE_FORMAT_VERSION,
            model_version: 0,
            round,
            device_id: device,
            idempotency_key: Update::key(round, device),
            layer_norms: vec![0.0; layers.len()],
        },
        layers,
    }
}

fn aggregation() {
    let layout = layout();
    let params: usize = layout
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum();
    let limits = UpdateLimits::for_layout(layout.clone());
    let sizes: Vec<(String, usize)> = layout
        .iter()
        .map(|(n, s)| (n.clone(), s.iter().product()))
        .collect();
    let bounds = ClipBounds::new(ClipStrategy::PerLayerDim, 1.0, &sizes).unwrap();
    let validator = UpdateValidator::new(limits.clone(), bounds, 1e-4, false);
    let bodies: Vec<(bytes::Bytes, String)> = (0..UPDATES)
        .map(|i| {
            let b = encode_update(&update_for(&layout, 1, i as u64, i as u32 + 1)).unwrap();
            let sum = checksum_hex(&b);
            (b.into(), sum)
        })
        .collect();
    let bytes: usize = bodies.iter().map(|(b, _)| b.len()).sum();

    // Reference: add already-decoded values into a sum.
    let decoded: Vec<Vec<f32>> = bodies
        .iter()
        .map(|(b, s)| {
            let u = decode_update(b, Some(s), &limits).unwrap();
            u.layers.into_iter().flat_map(|l| l.data).collect()
        })
        .collect();
    let mut best_ref = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let mut sum = vec![0f32; params];
        for d in &decoded {
            for (s, v) in sum.iter_mut().zip(d) {
                *s += v;
            }
        }
        black_box(&sum);
        best_ref = best_ref.min(t.elapsed().as_secs_f64());
    }

    // The host's path: the frame (outside the engine's lock in a server), then one pass.
    let best_of_3 = |f: &mut dyn FnMut()| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let best_host = best_of_3(&mut || {
        let mut agg = Aggregator::new(&layout, 1.0);
        for (b, s) in &bodies {
            let u = validator.validate(b.clone(), Some(s)).unwrap();
            agg.add_received(&u, &validator).unwrap();
        }
        black_box(agg.into_sum());
    });
    // A replica's path: the values read when the upload is queued, added at the commit.
    let best_replica = best_of_3(&mut || {
        let mut agg = Aggregator::new(&layout, 1.0);
        for (b, s) in &bodies {
            let u = validator.validate(b.clone(), Some(s)).unwrap();
            let factors = validator.check_values(&u).unwrap();
            agg.add_checked(&u, factors);
        }
        black_box(agg.into_sum());
    });
    // Refusals: every update over its bound (values ×1e4), added, then taken back out.
    let over: Vec<(bytes::Bytes, String)> = (0..UPDATES)
        .map(|i| {
            let mut u = update_for(&layout, 1, i as u64, i as u32 + 1);
            u.layers
                .iter_mut()
                .for_each(|l| l.data.iter_mut().for_each(|v| *v *= 1e4));
            let b = encode_update(&u).unwrap();
            let sum = checksum_hex(&b);
            (b.into(), sum)
        })
        .collect();
    let best_refused = best_of_3(&mut || {
        let mut agg = Aggregator::new(&layout, 1.0);
        for (b, s) in &over {
            let u = validator.validate(b.clone(), Some(s)).unwrap();
            agg.add_received(&u, &validator).unwrap_err();
        }
        black_box(agg.into_sum());
    });
    // Where the host's time goes.
    let stage = |name: &str, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        println!(
            "  stage {name:<34} {:>7.3} ms/update",
            t.elapsed().as_secs_f64() * 1e3 / UPDATES as f64
        );
    };
    stage("crc-32 checksum alone", &mut || {
        for (b, _) in &bodies {
            black_box(checksum_hex(b));
        }
    });
    stage("frame decode", &mut || {
        for (b, s) in &bodies {
            black_box(validator.validate(b.clone(), Some(s)).unwrap());
        }
    });
    let received: Vec<_> = bodies
        .iter()
        .map(|(b, s)| validator.validate(b.clone(), Some(s)).unwrap())
        .collect();
    stage("one pass: checksum, checks, add", &mut || {
        let mut agg = Aggregator::new(&layout, 1.0);
        for u in &received {
            agg.add_received(u, &validator).unwrap();
        }
        black_box(agg.into_sum());
    });
    let gb = bytes as f64 / 1e9;
    println!(
        "aggregation, {params} parameters, {UPDATES} updates of {:.2} MB:",
        bytes as f64 / UPDATES as f64 / 1e6
    );
    let line = |name: &str, secs: f64| {
        println!(
            "  {name:<62} {:>8.1} updates/s {:>6.2} GB/s  {:.3} of the reference",
            UPDATES as f64 / secs,
            gb / secs,
            best_ref / secs
        );
    };
    line(
        "host path (frame decode, then one pass: checksum, checks, add)",
        best_host,
    );
    line(
        "replica path (frame, a checking pass, an adding pass)",
        best_replica,
    );
    line(
        "refusal path (over the bound: added, then taken out)",
        best_refused,
    );
    line("reference (add decoded values into a sum)", best_ref);
    println!("  host / reference: {:.3}", best_ref / best_host);
}

fn upload_latency() {
    let dir = tempfile::tempdir().unwrap();
    let io = IoShape {
        frames: 98,
        bins: 40,
        classes: 12,
    };
    let arch = ArchConfig::LeakCnn(LeakCnnConfig::new(io));
    let device = burn::tensor::Device::flex();
    let model = arch.init(&device).unwrap();
    let features = serde_json::json!({});
    let labels: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    let card = ModelCard::new(arch, features, labels, &model).unwrap();
    let pkg = dir.path().join("initial");
    write_package(&pkg, &card, &model).unwrap();
    let layout: Vec<(String, Vec<usize>)> = card
        .parameters
        .iter()
        .filter(|p| p.trainable)
        .map(|p| (p.name.clone(), p.shape.clone()))
        .collect();
    let mut cfg = FlConfig::with_model(&pkg, &dir.path().join("host"));
    cfg.server.listen = "127.0.0.1:0".into();
    cfg.rounds.rounds = 5;
    cfg.rounds.sampling_rate = 1.0;
    cfg.rounds.min_devices = 2;
    cfg.rounds.retry_after_ms = 10;
    cfg.budget.epsilon = 1e9;
    cfg.seed = Some(1);
    let host = start_host(cfg).unwrap();
    let anon = HostClient::new(&host.url(), Duration::from_secs(60)).unwrap();
    let enrolment = host.enrol("bench", 2, Duration::from_secs(3600)).unwrap();
    let devices: Vec<(u64, HostClient)> = (0..2)
        .map(|i| {
            let r = anon.register(&format!("bench-{i}"), &enrolment).unwrap();
            (r.device_id, anon.clone().with_token(&r.token))
        })
        .collect();
    let mut times = Vec::new();
    let mut body_len = 0;
    for _ in 0..5 {
        // The first device's upload is timed; the second's closes the round.
        for (k, (id, client)) in devices.iter().enumerate() {
            let task = loop {
                match client
                    .check_in(&CheckInRequest {
                        model_version: None,
                        examples: 1,
                    })
                    .unwrap()
                {
                    Assignment::Train(t) => break t,
                    Assignment::Wait { .. } => std::thread::sleep(Duration::from_millis(10)),
                    Assignment::Done { reason, .. } => panic!("{reason}"),
                }
            };
            let mut u = update_for(&layout, task.round, *id, task.round as u32 * 7 + k as u32);
            u.header.model_version = task.model_version;
            let body = encode_update(&u).unwrap();
            body_len = body.len();
            let t = Instant::now();
            client.upload(task.round, &body).unwrap();
            if k == 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
    }
    host.shutdown().unwrap();
    times.sort_by(f64::total_cmp);
    println!(
        "upload round trip on loopback, {:.2} MB update (leak-CNN, {} tensors): median {:.1} ms, min {:.1} ms over {} rounds",
        body_len as f64 / 1e6,
        layout.len(),
        times[times.len() / 2] * 1e3,
        times[0] * 1e3,
        times.len()
    );
}

/// Peak resident memory of this process so far (`VmHWM`), in MB.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Peak memory while aggregating cohorts of growing size, each update made, encoded,
/// aggregated and dropped in turn (as uploads arrive): a streaming sum keeps the peak flat.
fn memory_vs_cohort() {
    let layout = layout();
    let limits = UpdateLimits::for_layout(layout.clone());
    let sizes: Vec<(String, usize)> = layout
        .iter()
        .map(|(n, s)| (n.clone(), s.iter().product()))
        .collect();
    let bounds = ClipBounds::new(ClipStrategy::Flat, 1.0, &sizes).unwrap();
    let validator = UpdateValidator::new(limits, bounds, 1e-4, false);
    print!("peak RSS (MB) after aggregating a cohort of");
    for cohort in [8usize, 64, 256] {
        let mut agg = Aggregator::new(&layout, 1.0);
        for i in 0..cohort {
            let body = encode_update(&update_for(&layout, 1, i as u64, i as u32 + 1)).unwrap();
            let sum = checksum_hex(&body);
            let u = validator.validate(body.into(), Some(&sum)).unwrap();
            agg.add_received(&u, &validator).unwrap();
        }
        black_box(agg.into_sum());
        print!("  {cohort}: {:.0}", peak_rss_mb());
    }
    println!();
}

fn main() {
    memory_vs_cohort();
    aggregation();
    upload_latency();
}
