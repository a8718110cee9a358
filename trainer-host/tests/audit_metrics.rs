//! Audit metrics against their reference implementations: STOI against pystoi 0.4.1 on
//! real speech from the corpus with seeded noise, at 16, 10 and 8 kHz (fixtures and the
//! script that made them in tests/fixtures/audit/).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use hush_device::audio::read_audio;
use hush_host::audit::stoi;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit")
}

#[derive(serde::Deserialize)]
struct Case {
    reference: String,
    degraded: String,
    rate: u32,
    what: String,
    stoi: f64,
}

#[derive(serde::Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

#[test]
fn stoi_matches_pystoi_to_1e_9() {
    let text = std::fs::read_to_string(fixtures().join("stoi_cases.json")).unwrap();
    let cases: Cases = serde_json::from_str(&text).unwrap();
    assert!(cases.cases.len() >= 6);
    let mut worst = 0.0f64;
    for c in &cases.cases {
        let x = read_audio(&fixtures().join(&c.reference)).unwrap();
        let y = read_audio(&fixtures().join(&c.degraded)).unwrap();
        assert_eq!((x.sample_rate, y.sample_rate), (c.rate, c.rate));
        let got = stoi(&x.samples, &y.samples, c.rate).unwrap();
        let diff = (got - c.stoi).abs();
        eprintln!(
            "{}: hush {got:.6}, pystoi {:.6}, |diff| {diff:.2e}",
            c.what, c.stoi
        );
        worst = worst.max(diff);
        // The issue asks for 1e-3; the port is exact up to f64 rounding.
        assert!(diff <= 1e-9, "{}: hush {got} vs pystoi {}", c.what, c.stoi);
    }
    eprintln!("worst |diff| {worst:.2e}");
}

#[test]
fn stoi_orders_noise_levels() {
    let x = read_audio(&fixtures().join("clean16.wav")).unwrap();
    let score = |f: &str| {
        let y = read_audio(&fixtures().join(f)).unwrap();
        stoi(&x.samples, &y.samples, 16_000).unwrap()
    };
    let (m5, p0, p10) = (
        score("noisy16_m5dB.wav"),
        score("noisy16_p0dB.wav"),
        score("noisy16_p10dB.wav"),
    );
    assert!(m5 < p0 && p0 < p10 && p10 < 1.0, "{m5} {p0} {p10}");
    assert!((score("clean16.wav") - 1.0).abs() < 1e-9);
}

fn hush_host(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn audit_metrics_cli_prints_stoi_and_names_bad_pairs() {
    let f = |n: &str| fixtures().join(n).display().to_string();
    let out = hush_host(&[
        "audit",
        "metrics",
        "--reference",
        &f("clean16.wav"),
        "--degraded",
        &f("noisy16_p10dB.wav"),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = std::fs::read_to_string(fixtures().join("stoi_cases.json")).unwrap();
    let cases: Cases = serde_json::from_str(&text).unwrap();
    let want = cases
        .cases
        .iter()
        .find(|c| c.degraded == "noisy16_p10dB.wav")
        .unwrap()
        .stoi;
    assert!((report["stoi"].as_f64().unwrap() - want).abs() <= 1e-3);
    assert!(report["wmse"].as_f64().unwrap() > 0.0);

    let out = hush_host(&[
        "audit",
        "metrics",
        "--reference",
        &f("clean16.wav"),
        "--degraded",
        &f("clean10.wav"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("16000 Hz") && err.contains("10000 Hz"),
        "{err}"
    );

    let out = hush_host(&[
        "audit",
        "metrics",
        "--reference",
        &f("missing.wav"),
        "--degraded",
        &f("clean16.wav"),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.wav"));
}
