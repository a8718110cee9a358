//! End to end: `hush-host simulate`'s library path, in process and with a real host on
//! loopback and real device clients (each training on its own speaker's clips), plus a
//! device that dies mid-upload.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use hush_host::accountant::federated::FederatedPlan;
use hush_host::accountant::Accountant;
use hush_host::simulate::{simulate, FleetParticipation, SimulateConfig, Transport};
use hush_tests::bundled_corpus;

#[test]
fn a_small_fleet_trains_privately_and_accounts_every_round() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = SimulateConfig::small_kws(&bundled_corpus().join("kws"), out.path());
    cfg.devices = Some(10);
    cfg.host.rounds.rounds = 24;
    cfg.host.rounds.sampling_rate = 0.5;
    let report = simulate(&cfg, &mut |_| {}, &mut |_, _| {}).unwrap();

    let released: Vec<_> = report
        .rounds
        .iter()
        .filter(|r| r.released_version.is_some())
        .collect();
    assert_eq!(released.len(), 24);
    // Versions 1..=24 were published in order, one per released round.
    let versions: Vec<u64> = released
        .iter()
        .map(|r| r.released_version.unwrap())
        .collect();
    assert_eq!(versions, (1..=24).collect::<Vec<_>>());
    // Every accepted report was an upload a device saw accepted, and none was refused.
    let reports: u64 = report.rounds.iter().map(|r| r.reports_accepted).sum();
    assert_eq!(reports, report.uploads_accepted);
    assert_eq!(report.uploads_refused, 0);
    // ε by RDP, user level, growing round by round. (The effective noise multiplier of this
    // noise-cohort simulation, 2 × 4/1000, is below the PLD accountant's floor, so the ledger
    // holds no PLD value for it; the extrapolated deployment has both.)
    assert_eq!(report.ledger_epsilon.len(), 1);
    assert_eq!(
        report.ledger_epsilon[0].accountant,
        hush_host::accountant::Accountant::Rdp
    );
    let eps: Vec<f64> = released.iter().map(|r| r.epsilon_rdp.unwrap()).collect();
    assert!(eps.windows(2).all(|w| w[1] > w[0]), "{eps:?}");
    assert!(report
        .ledger_epsilon
        .iter()
        .all(|e| e.epsilon > 0.0 && e.delta == cfg.host.budget.delta));
    assert_eq!(report.deployment_epsilon.len(), 2);
    // The model learned keywords from the devices' updates: well above the initial weights
    // and above the one-class plateau (which scores 0 balanced keyword accuracy).
    let first = report.curve.first().unwrap().accuracy;
    let last = report.curve.last().unwrap().accuracy;
    let test = report
        .test
        .as_ref()
        .expect("a run that is not tuning scores the test set");
    eprintln!(
        "accuracy {first} → {last}, balanced {}",
        test.balanced_keyword_accuracy
    );
    assert!(last > first + 0.15, "accuracy {first} → {last}");
    assert!(test.balanced_keyword_accuracy > 0.2, "{test:?}");
    for f in [
        "results.json",
        "accuracy.png",
        "model/model.onnx",
        "model/model.json",
    ] {
        assert!(out.path().join(f).is_file(), "{f} missing");
    }
}

/// The demo's path is deterministic for a seed: devices register in speaker order, cohort
/// draws are keyed by (round, device), the host's sum does not depend on arrival order and
/// local rounds draw only their own seed's randomness — so two runs with concurrent device
/// threads release bit-identical models and the same ledger. The in-process simulator runs
/// the same engine, local training and seeds without HTTP or threads, and releases the
/// same: the tolerance between the two transports is zero (bit for bit).
#[test]
fn a_seeded_fleet_simulation_repeats_bit_for_bit_over_http_and_in_process() {
    let run = |transport: Transport| {
        let out = tempfile::tempdir().unwrap();
        let mut cfg = SimulateConfig::small_kws(&bundled_corpus().join("kws"), out.path());
        cfg.devices = Some(6);
        cfg.host.rounds.rounds = 4;
        cfg.host.rounds.sampling_rate = 0.5;
        cfg.transport = transport;
        let report = simulate(&cfg, &mut |_| {}, &mut |_, _| {}).unwrap();
        let weights = std::fs::read(out.path().join("model/weights.safetensors")).unwrap();
        let rounds: Vec<_> = report
            .rounds
            .iter()
            .map(|r| {
                (
                    r.round,
                    r.realized_cohort,
                    r.reports_accepted,
                    r.epsilon_rdp,
                )
            })
            .collect();
        let curve: Vec<_> = report
            .curve
            .iter()
            .map(|p| (p.version, p.accuracy))
            .collect();
        (weights, rounds, curve, report.uploads_accepted)
    };
    let (a, b) = (run(Transport::Http), run(Transport::Http));
    assert_eq!(a.1, b.1, "the same cohorts, reports and ε");
    assert!(a.0 == b.0, "the same released model, bit for bit");
    let c = run(Transport::InProcess);
    assert!(a.1.iter().any(|r| r.2 > 0), "rounds released updates");
    assert_eq!(a.1, c.1, "in process: the same cohorts, reports and ε");
    // The HTTP run scores the versions it sees while polling (it may miss one released
    // between two polls); the in-process run scores every version. Where both scored a
    // version, they scored it the same, and both end on the same version and accuracy.
    assert_eq!(
        c.2.len(),
        5,
        "in process: v0 and each of the 4 releases scored"
    );
    for point in &a.2 {
        assert!(
            c.2.contains(point),
            "in process scored {point:?} otherwise: {:?}",
            c.2
        );
    }
    assert_eq!(
        a.2.last(),
        c.2.last(),
        "in process: the same final model's accuracy"
    );
    assert_eq!(a.3, c.3, "in process: the same accepted uploads");
    assert!(
        a.0 == c.0,
        "in process: the same released model, bit for bit"
    );
}

/// A fleet partly away (a daily cycle), with dropouts and stragglers: rounds close at their
/// deadline with fewer reports than their cohort, late uploads are refused and not counted,
/// the divisor is q × devices × the published availability (never the realized count), and
/// the ledger accounts every device with q — the ε of the plan at rate q, to the last digit.
#[test]
fn a_partly_available_fleet_is_accounted_with_q_and_divided_by_the_published_estimate() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = SimulateConfig::small_kws(&bundled_corpus().join("kws"), out.path());
    cfg.devices = Some(10);
    cfg.host.rounds.rounds = 6;
    cfg.host.rounds.sampling_rate = 0.5;
    cfg.participation = FleetParticipation {
        availability: 0.6,
        daily_swing: 0.5,
        rounds_per_day: 4,
        dropout: 0.2,
        straggle: 0.2,
    };
    let report = simulate(&cfg, &mut |_| {}, &mut |_, _| {}).unwrap();
    let p = report.participation;
    assert!(p.unavailable > 0 && p.dropped > 0 && p.late > 0, "{p:?}");
    assert_eq!(report.uploads_refused, p.late, "every late upload refused");
    let accepted: u64 = report.rounds.iter().map(|r| r.reports_accepted).sum();
    assert_eq!(
        accepted, report.uploads_accepted,
        "every accepted upload counted once"
    );
    let released: Vec<_> = report
        .rounds
        .iter()
        .filter(|r| r.released_version.is_some())
        .collect();
    assert_eq!(released.len(), 6);
    assert!(
        released
            .iter()
            .any(|r| r.reports_accepted < r.realized_cohort),
        "some round closed at its deadline short of its cohort"
    );
    for r in &report.rounds {
        assert!(
            (r.expected_cohort - 0.5 * 10.0 * 0.6).abs() < 1e-12,
            "{r:?}"
        );
    }
    let plan = FederatedPlan::new(10, 5, 1000, 2.0, 6)
        .unwrap()
        .with_availability(0.6)
        .unwrap();
    let planned = plan
        .simulation_epsilon(Accountant::Rdp, cfg.host.budget.delta)
        .unwrap()
        .epsilon;
    let ledger = report.ledger_epsilon[0].epsilon;
    assert!(
        (ledger - planned).abs() <= 1e-9 * planned,
        "ledger {ledger} vs the plan at q = 0.5: {planned}"
    );
}

/// A fixed-size cohort chosen among the available devices cannot be accounted: refused
/// before any round, with the reason.
#[test]
fn a_fixed_size_cohort_among_the_available_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = SimulateConfig::small_kws(&bundled_corpus().join("kws"), out.path());
    cfg.devices = Some(4);
    cfg.host.rounds.cohort_size = Some(2);
    let e = simulate(&cfg, &mut |_| {}, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rounds.cohort_size") && e.contains("not Poisson sampling"),
        "{e}"
    );
    assert!(
        !out.path().join("host").join("hush.sqlite").exists(),
        "no round ran"
    );
}

#[test]
fn a_device_dying_mid_upload_leaves_the_host_serving() {
    use hush_device::client::HostClient;
    use hush_host::fl::FlConfig;
    use hush_host::server::start_host;
    let dir = tempfile::tempdir().unwrap();
    let package = hush_tests::tiny_kws_package(&dir.path().join("initial"));
    let mut cfg = FlConfig::with_model(&package, &dir.path().join("host"));
    cfg.server.listen = "127.0.0.1:0".into();
    cfg.seed = Some(3);
    let host = start_host(cfg).unwrap();
    let client = HostClient::new(&host.url(), Duration::from_secs(10)).unwrap();
    let enrolment = host.enrol("t", 1, Duration::from_secs(60)).unwrap();
    let reg = client.register("dies", &enrolment).unwrap();
    // Claim a 10 MB body, send 1 KB, vanish.
    let mut s = TcpStream::connect(host.addr).unwrap();
    write!(
        s,
        "POST /v1/rounds/1/update HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: 10000000\r\n\r\n",
        reg.token
    )
    .unwrap();
    s.write_all(&[7u8; 1024]).unwrap();
    drop(s);
    // The host still answers, the device's token still works, nothing was counted.
    let status = host.status().unwrap();
    assert_eq!(status.reports_in_round, 0);
    assert_eq!(status.reports_rejected, 0);
    let again = client.with_token(&reg.token);
    again
        .check_in(&hush_device::protocol::CheckInRequest {
            model_version: None,
            examples: 1,
        })
        .unwrap();
    host.shutdown().unwrap();
}
