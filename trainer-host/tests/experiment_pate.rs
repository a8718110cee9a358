//! `hush-host experiment pate` on the bundled corpus, one epoch per model: the
//! non-private, DP-SGD and every PATE row land in results.json, results.md and the plot,
//! each private row with its ε; the split is speaker-disjoint; a used folder is refused.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hush_device::dataset::read_corpus;
use hush_host::experiment::pate::{run_pate_experiment, PateExperimentConfig, PateResults};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws")
}

fn speakers(dir: &Path) -> BTreeSet<String> {
    read_corpus(dir)
        .unwrap()
        .1
        .into_iter()
        .map(|e| e.speaker)
        .collect()
}

#[test]
fn every_method_runs_end_to_end_and_writes_table_json_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let mut cfg = PateExperimentConfig::quick(&data(), &out);
    cfg.epochs = 1;
    let mut lines = Vec::new();
    let results = run_pate_experiment(&cfg, "test", &mut |l| lines.push(l.to_string())).unwrap();
    assert!(!results.corpus.generated, "the bundled corpus exists");
    let methods: Vec<&str> = results.runs.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(
        methods,
        [
            "non-private",
            "DP-SGD",
            "PATE-LNMax",
            "PATE-GNMax",
            "PATE-Confident-GNMax"
        ]
    );
    assert!(results.runs[0].epsilon.is_none());
    let [private, public, validation, test] = results.speakers;
    assert_eq!(private + public + validation + test, 40);
    for run in &results.runs[1..] {
        let eps = run.epsilon.unwrap();
        assert!(eps > 0.0 && eps.is_finite(), "{}: {eps}", run.method);
        if run.method.starts_with("PATE") {
            assert!(run.refused.is_none(), "{:?}", run.refused);
            assert!(run.test_accuracy.is_some());
            assert!(run.answered.unwrap() <= run.queries.unwrap());
            assert_eq!(run.queries.unwrap(), (public + validation) * 15);
        }
    }
    // Teachers, students and baselines never share a speaker they should not.
    let split = out.join("split");
    let (teachers, public_dir) = (
        speakers(&split.join("teachers-data")),
        speakers(&split.join("public")),
    );
    assert_eq!(teachers.len(), private);
    assert!(teachers.is_disjoint(&public_dir));
    assert!(teachers.is_subset(&speakers(&split.join("private"))));

    let json: PateResults =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json.runs.len(), results.runs.len());
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| PATE-GNMax | σ = 1 |"), "{md}");
    assert!(md.contains("| non-private |"), "{md}");
    let png = std::fs::read(out.join("accuracy_vs_epsilon.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    let err = run_pate_experiment(&cfg, "test", &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("choose a new --out"), "{err}");
}
