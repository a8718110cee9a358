//! `hush-host experiment pretrain` on the bundled ASR corpus (unlabeled: five utterances
//! per speaker; labeled: two), one epoch per phase and ε = 10 only: every
//! setting lands in results.json, results.md and the plot, each DP run with its ε and own
//! ledger; a used output folder is refused.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use hush_host::experiment::pretrain::{
    run_pretrain_experiment, write_results, PretrainExperimentConfig, PretrainResults, Pretraining,
    Setting,
};

mod common;
use common::slice_corpus;

#[test]
fn every_setting_runs_and_lands_in_the_table_and_plot() {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr");
    let speakers: Vec<String> = std::fs::read_dir(&bundled)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let speakers: Vec<&str> = speakers.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let labeled = dir.path().join("labeled");
    slice_corpus(&bundled, &labeled, &speakers, 2);
    let unlabeled = dir.path().join("unlabeled");
    slice_corpus(&bundled, &unlabeled, &speakers, 5);
    let out = dir.path().join("out");
    let mut cfg = PretrainExperimentConfig::quick(&out);
    cfg.labeled = labeled;
    cfg.unlabeled = unlabeled;
    cfg.pretrain_epochs = 1;
    cfg.finetune_epochs = 1;
    cfg.epsilons = vec![10.0];
    // Known to make some of the bundled training speakers public.
    cfg.warm_start_public = 0.3;
    let mut lines = Vec::new();
    let r = run_pretrain_experiment(&cfg, "test", &mut |l| lines.push(l.to_string())).unwrap();
    let settings = Setting::all(&[10.0]);
    assert_eq!(r.runs.len(), settings.len());
    assert_eq!(r.runs.len(), 6);
    for run in &r.runs {
        assert!(run.refused.is_none(), "{}: {:?}", run.name, run.refused);
        assert!(run.test_cer.is_some_and(f64::is_finite), "{}", run.name);
        match run.setting.pretraining {
            Pretraining::Dp { .. } => {
                let e = run.epsilon_rdp.as_ref().unwrap();
                assert!(e.epsilon <= 10.0 * 1.01, "{e}");
                assert!(run.dir.join("ledger.sqlite").is_file());
                assert!(run.dir.join("encoder/privacy.json").is_file());
            }
            Pretraining::Plain => assert!(run.pretrain_val_loss.is_some()),
            Pretraining::None => assert!(run.pretrain_val_loss.is_none()),
        }
    }
    for f in ["results.json", "results.md", "wer.png"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("CTC from scratch") && md.contains("per-layer-dim"));
    // The runs folder holds ledgers: a second run into it is refused.
    let again = run_pretrain_experiment(&cfg, "test", &mut |_| {});
    assert!(again.unwrap_err().to_string().contains("not empty"));
}

#[test]
fn committed_results_parse_and_redraw() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results/pretrain");
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let r: PretrainResults = serde_json::from_str(&text).unwrap();
    assert_eq!(r.runs.len(), Setting::all(&r.config.epsilons).len());
    let out = tempfile::tempdir().unwrap();
    write_results(out.path(), &r).unwrap();
    let md = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert_eq!(md, std::fs::read_to_string(dir.join("results.md")).unwrap());
    assert!(out.path().join("wer.png").is_file());
}
