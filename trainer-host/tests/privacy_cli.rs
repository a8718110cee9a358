//! The `hush-host privacy …` commands, run as a user would.

use std::process::Command;

use hush_host::accountant::{Adjacency, PrivacyUnit, SubsampledGaussian};
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::{LedgerStore, Mechanism, Release};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn hush_host(args: &[&str]) -> Result<std::process::Output, std::io::Error> {
    Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
}

#[test]
fn epsilon_json_names_delta_adjacency_unit_accountant() -> TestResult {
    let out = hush_host(&[
        "privacy",
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        "1.1",
        "--steps",
        "10000",
        "--delta",
        "1e-5",
        "--json",
    ])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let r = &v["report"];
    assert!((r["epsilon"].as_f64().unwrap_or(0.0) - 5.632010670081592).abs() < 1e-9);
    assert_eq!(r["optimal_order"].as_f64(), Some(4.7));
    assert_eq!(r["delta"].as_f64(), Some(1e-5));
    assert_eq!(r["adjacency"], "add_remove");
    assert_eq!(r["unit"], "example");
    assert_eq!(r["accountant"], "rdp");
    Ok(())
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() -> TestResult {
    for (args, needle) in [
        (
            vec![
                "--sampling-rate",
                "1.5",
                "--noise-multiplier",
                "1",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "sampling_rate",
        ),
        (
            vec![
                "--sampling-rate",
                "0.1",
                "--noise-multiplier",
                "0",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "noise_multiplier",
        ),
        (
            vec![
                "--sampling-rate",
                "0.1",
                "--noise-multiplier",
                "NaN",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "noise_multiplier",
        ),
        (
            vec![
                "--sampling-rate",
                "0.1",
                "--noise-multiplier",
                "1",
                "--steps",
                "0",
                "--delta",
                "1e-5",
            ],
            "steps",
        ),
        (
            vec![
                "--sampling-rate",
                "0.1",
                "--noise-multiplier",
                "1",
                "--steps",
                "10",
                "--delta",
                "1",
            ],
            "delta",
        ),
    ] {
        let mut full = vec!["privacy", "epsilon"];
        full.extend(args);
        let out = hush_host(&full)?;
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && !err.contains("panicked"), "{err}");
    }
    let dir = tempfile::tempdir()?;
    let csv = dir.path().join("votes.csv");
    std::fs::write(&csv, "1,2\nx,3\n")?;
    let path = csv.to_string_lossy().to_string();
    let out = hush_host(&[
        "privacy", "pate", "--votes", &path, "--sigma", "40", "--delta", "1e-8",
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("row 2"), "{err}");
    Ok(())
}

#[test]
fn ledger_lists_releases_and_totals() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("ledger.sqlite");
    let mut store = SqliteLedgerStore::open(&db)?;
    for steps in [4_000, 6_000] {
        let release = Release {
            mechanism: Mechanism::DpSgd,
            event: SubsampledGaussian::poisson(0.01, 1.1, steps)?,
            unit: PrivacyUnit::Example,
            adjacency: Adjacency::AddRemove,
            population: Some(60_000),
            delta: 1e-5,
            released: format!("checkpoint at {steps}"),
            additional: Default::default(),
        };
        store.append(&release, None, None)?;
    }
    drop(store);
    let db = db.to_string_lossy().to_string();
    let out = hush_host(&["privacy", "ledger", "--db", &db, "--json"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(v["releases"].as_array().map(Vec::len), Some(2));
    let total = &v["totals"][0]["totals"];
    let rdp = total["rdp"]["epsilon"].as_f64().unwrap_or(0.0);
    assert!((rdp - 5.632010670081592).abs() < 1e-9, "{rdp}");
    let pld = total["pld"]["epsilon"].as_f64().unwrap_or(0.0);
    assert!((pld - 5.192620123878041).abs() < 1e-3, "{pld}");
    Ok(())
}
