//! `hush-host experiment pate --task asr` end to end at its smallest: every model
//! fine-tuned from the bundled public model `models/asr` on a few utterances of the
//! bundled ASR corpus, one epoch. Checks the table's rows, that every private row's ε is
//! its ledger record's, that the error rates are error rates, and that the test speakers
//! are nobody's training data. Also: `--init` refuses a missing or mismatched model by
//! name.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hush_host::accountant::{Accountant, Adjacency};
use hush_host::experiment::pate_asr::{run_pate_asr_experiment, PateAsrExperimentConfig};
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::LedgerStore;
use hush_host::train::asr::{train_asr, AsrTrainConfig};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn asr_pate_experiment_has_every_row_with_ledgered_epsilons_on_held_out_speakers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let cfg = PateAsrExperimentConfig::quick(
        &repo().join("data/corpus/asr"),
        &repo().join("models/asr"),
        &out,
    );
    let r = run_pate_asr_experiment(&cfg, "test", &mut |_| {}).unwrap();

    // Every row, in order.
    let methods: Vec<&str> = r.runs.iter().map(|run| run.method.as_str()).collect();
    let mut want = vec!["warm start", "non-private"];
    want.extend(cfg.dp_epsilons.iter().map(|_| "DP-SGD"));
    want.extend(
        cfg.posterior_sigmas
            .iter()
            .map(|_| "PATE-posterior-average"),
    );
    want.extend(cfg.votes.iter().map(|_| "PATE-transcript-vote"));
    assert_eq!(methods, want);

    for run in &r.runs {
        for v in [run.test_wer, run.test_cer, run.label_wer]
            .into_iter()
            .flatten()
        {
            assert!(v.is_finite() && v >= 0.0, "{}: {v}", run.method);
        }
        // Teachers of one epoch rarely agree on a whole transcript: the vote may leave
        // its student too few labels (the release, and its ledger record, stand).
        match &run.refused {
            Some(why) if run.method == "PATE-transcript-vote" => {
                assert!(why.starts_with("student:"), "{why}");
                assert!(run.test_wer.is_none());
            }
            Some(why) => panic!("{} refused: {why}", run.method),
            None => assert!(run.test_wer.is_some(), "{} has no test WER", run.method),
        }
        let private = run.method == "DP-SGD" || run.method.starts_with("PATE-");
        assert_eq!(run.epsilon.is_some(), private, "{}", run.method);
        if !private {
            assert!(run.ledger.is_none());
            continue;
        }
        // Its ε is the release its ledger recorded (at the record's δ, with the record's
        // additional cost: transcript voting spends the one-teacher term of δ outright).
        let ledger = SqliteLedgerStore::open(run.ledger.as_ref().unwrap()).unwrap();
        let records = ledger.records().unwrap();
        let record = records
            .iter()
            .find(|rec| Some(rec.id) == run.ledger_record)
            .unwrap_or_else(|| panic!("{}: no ledger record {:?}", run.method, run.ledger_record));
        let eps = record.release.epsilon(Accountant::Rdp).unwrap().epsilon;
        assert_eq!(record.release.adjacency, Adjacency::AddRemove);
        let reported = run.epsilon.unwrap();
        assert!(
            (eps / reported - 1.0).abs() < 1e-6,
            "{}: ledger ε {eps} vs reported {reported}",
            run.method
        );
        let unit = if run.method == "DP-SGD" {
            "utterance"
        } else {
            "speaker"
        };
        assert_eq!(run.unit, unit);
        if run.method.starts_with("PATE-") {
            assert!(run.answered.unwrap() <= run.queries.unwrap());
        }
    }

    // The test speakers trained and validated nothing.
    let s = &r.speakers;
    let test: BTreeSet<&String> = s.test.iter().collect();
    assert_eq!(test.len(), cfg.test_speakers);
    assert_eq!(s.teachers.len(), cfg.teachers);
    let teachers: BTreeSet<&String> = s.teachers.iter().flatten().collect();
    assert_eq!(teachers, s.private.iter().collect::<BTreeSet<_>>());
    for (name, group) in [
        ("private", &s.private),
        ("public", &s.public),
        ("validation", &s.validation),
    ]
    .into_iter()
    .chain(s.teachers.iter().map(|t| ("a teacher's", t)))
    {
        for speaker in group {
            assert!(!test.contains(speaker), "test speaker {speaker} is {name}");
        }
    }
    assert!(s.public.iter().all(|p| !s.private.contains(p)));
    assert!(r.test_utterances > 0 && r.test_words > 0);

    // The files, the plot among them.
    for f in ["results.json", "results.md", "wer_vs_epsilon.png"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert_eq!(md.matches("\n| ").count(), r.runs.len() + 1, "{md}");
}

#[test]
fn init_refuses_a_missing_or_mismatched_model_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let data = repo().join("data/corpus/asr");
    // Another architecture than the package's.
    let mut cfg = AsrTrainConfig::new(&data, "ctc-gru-small");
    cfg.init = Some(repo().join("models/asr"));
    let e = train_asr(&cfg, &tmp.path().join("a"), "test", &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--init") && e.contains("models/asr") && e.contains("--arch"),
        "{e}"
    );
    // Other features.
    let mut cfg = AsrTrainConfig::new(&data, "ctc-gru");
    cfg.init = Some(repo().join("models/asr"));
    cfg.features.mel.num_bins = 40;
    let e = train_asr(&cfg, &tmp.path().join("b"), "test", &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("models/asr"), "{e}");
    // Not a model at all.
    let mut cfg = AsrTrainConfig::new(&data, "ctc-gru");
    cfg.init = Some(tmp.path().join("nothing-here"));
    let e = train_asr(&cfg, &tmp.path().join("c"), "test", &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("nothing-here"), "{e}");
    // The experiment names a missing or non-ASR --init before any work.
    for bad in [
        tmp.path().join("nothing-here"),
        repo().join("models/kws-12"),
    ] {
        let cfg = PateAsrExperimentConfig::quick(&data, &bad, &tmp.path().join("out"));
        let e = run_pate_asr_experiment(&cfg, "test", &mut |_| {})
            .unwrap_err()
            .to_string();
        let name = bad.file_name().unwrap().to_str().unwrap();
        assert!(e.contains("--init") && e.contains(name), "{e}");
        assert!(!tmp.path().join("out/runs").exists());
    }
}
