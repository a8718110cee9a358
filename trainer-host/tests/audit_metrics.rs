//! Audit metrics against their reference implementations on real speech from the corpus
//! with seeded noise: STOI against pystoi 0.4.1 at 16, 10 and 8 kHz; PESQ against the
//! ITU-T P.862 reference C code (python-pesq 0.0.4), wideband at 16 kHz and narrowband at
//! 8 kHz (fixtures and the script that made them in tests/fixtures/audit/).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use hush_device::audio::read_audio;
use hush_host::audit::{pesq_mos, stoi, PesqMode};

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
    pesq: Option<f64>,
}

#[derive(serde::Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

/// The fixture cases with their reference values (metric_cases.json).
fn cases() -> Cases {
    let text = std::fs::read_to_string(fixtures().join("metric_cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn stoi_matches_pystoi_to_1e_9() {
    let cases = cases();
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
fn pesq_matches_the_itu_reference() {
    let cases = cases();
    let mut checked = 0;
    for c in cases.cases.iter().filter(|c| c.degraded != c.reference) {
        let Some(want) = c.pesq else { continue };
        let x = read_audio(&fixtures().join(&c.reference)).unwrap();
        let y = read_audio(&fixtures().join(&c.degraded)).unwrap();
        let (mode, got) = pesq_mos(&x.samples, &y.samples, c.rate).unwrap();
        eprintln!(
            "{} ({mode:?}): hush {got:.4}, ITU reference {want:.4}",
            c.what
        );
        let tolerance = match mode {
            PesqMode::Wideband => WIDEBAND_TOLERANCE,
            PesqMode::Narrowband => NARROWBAND_TOLERANCE,
        };
        assert!(
            (got - want).abs() <= tolerance,
            "{}: {got} vs {want}",
            c.what
        );
        checked += 1;
    }
    assert!(checked >= 4);
}

/// Wideband (what the audit reports at 16 kHz) agrees with the ITU code to under 1e-3 MOS
/// on these fixtures; 0.01 leaves room for float rounding only.
const WIDEBAND_TOLERANCE: f64 = 0.01;
/// Narrowband differs by 0.077 MOS-LQO on the 8 kHz fixture (1.824 vs 1.901). The `pesq`
/// crate passes P.862's own conformance data at 8 kHz; the gap here is reported in the
/// README, not hidden, and the issue asks for wideband agreement.
const NARROWBAND_TOLERANCE: f64 = 0.15;

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
    let cases = cases();
    let want = cases
        .cases
        .iter()
        .find(|c| c.degraded == "noisy16_p10dB.wav")
        .unwrap()
        .stoi;
    assert!((report["stoi"].as_f64().unwrap() - want).abs() <= 1e-3);
    assert!(report["wmse"].as_f64().unwrap() > 0.0);
    assert_eq!(report["pesq_mode"], "wideband");
    assert!(report["pesq"].as_f64().unwrap() > 1.0);

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
