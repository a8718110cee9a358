//! `hush-host experiment dp-sgd` on the bundled corpus, one epoch per run: every run of
//! the grid (non-private, then four DP variants per ε) lands in results.json, results.md
//! and the plot, each DP run with its ε, δ and own ledger; a used output folder is refused.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use hush_host::experiment::dp_sgd::{run_dp_sgd, DpSgdExperimentConfig, DpSgdResults, Variant};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws")
}

#[test]
fn the_grid_runs_end_to_end_and_writes_table_json_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let mut cfg = DpSgdExperimentConfig::quick(&data(), &out);
    cfg.epsilons = vec![8.0];
    cfg.epochs = 1;
    cfg.warm_start_epochs = 1;
    let mut lines = Vec::new();
    let results = run_dp_sgd(&cfg, "test", &mut |l| lines.push(l.to_string())).unwrap();
    assert!(!results.corpus.generated, "the bundled corpus exists");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("warning") && l.contains("training clips")),
        "a small corpus is flagged: {lines:?}"
    );
    assert_eq!(results.runs.len(), 1 + Variant::ALL.len());
    assert!(results.runs[0].variant.is_none() && results.runs[0].epsilon_rdp.is_none());
    for run in &results.runs[1..] {
        assert!(run.refused.is_none(), "{:?}", run.refused);
        let eps = run.epsilon_rdp.as_ref().unwrap();
        assert!(
            eps.epsilon <= 8.0 + 1e-6 && eps.epsilon > 0.0,
            "{}",
            eps.epsilon
        );
        assert_eq!(eps.delta, cfg.delta);
        assert!(run.test_accuracy.is_some());
        assert!(run.model.join("privacy.json").is_file());
        assert!(run.model.join("ledger.sqlite").is_file());
        let ws = run.variant.unwrap().warm_start_freeze;
        assert_eq!(run.public_examples > 0, ws, "{}", run.setting);
        assert_eq!(!run.frozen_layers.is_empty(), ws, "{}", run.setting);
    }
    let json: DpSgdResults =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    // (floats may differ in the last bit after the JSON round trip)
    let settings =
        |r: &DpSgdResults| -> Vec<String> { r.runs.iter().map(|x| x.setting.clone()).collect() };
    assert_eq!(settings(&json), settings(&results));
    assert_eq!(json.config, results.config);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| non-private | ∞ |"), "{md}");
    assert!(
        md.contains("| per-layer-dim + warm start + freezing | 8 |"),
        "{md}"
    );
    let png = std::fs::read(out.join("accuracy_vs_epsilon.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    // Its ledgers hold releases now: a second run into the same folder is refused.
    let err = run_dp_sgd(&cfg, "test", &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("choose a new --out"), "{err}");

    // A later run can take the non-private reference from this one, and trains only the
    // DP variants it names; one that trains differently cannot.
    let mut again = cfg.clone();
    again.out = dir.path().join("again");
    again.variants = vec![Variant::parse("per-layer-dim").unwrap()];
    again.reuse_non_private = Some(out.join("results.json"));
    let reused = run_dp_sgd(&again, "test", &mut |_| {}).unwrap();
    assert_eq!(reused.runs.len(), 2);
    assert_eq!(reused.runs[0].test_accuracy, json.runs[0].test_accuracy);
    assert!(reused.runs[0].setting.starts_with("non-private (from "));
    assert_eq!(reused.runs[1].setting, "per-layer-dim");
    assert!(!again.out.join("runs/non-private").exists());
    let mut other = again.clone();
    other.out = dir.path().join("other");
    other.epochs = 2;
    let err = run_dp_sgd(&other, "test", &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("--reuse-non-private"), "{err}");
    assert!(Variant::parse("flat-ws").is_err());
}
