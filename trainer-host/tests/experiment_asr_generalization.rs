//! `hush-host experiment asr-generalization` at its smallest: `ctc-gru-small`, one epoch,
//! on the bundled ASR corpus with flite held out. Checks that the held-out engine's
//! speakers are exactly the test set and nobody's training or validation data, that the
//! error rates are error rates, and that the results files are written; and that the
//! CLI refuses an unknown holdout by name.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hush_host::corpus::synth::read_speakers;
use hush_host::experiment::asr_generalization::{run_asr_generalization, AsrGeneralizationConfig};
use hush_host::experiment::holdout::Holdout;
use hush_host::train::asr::{load_asr, AsrTrainConfig};
use hush_models::package::AsrCard;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr")
}

#[test]
fn held_out_engine_is_the_whole_test_set_and_no_training_data() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut train = AsrTrainConfig::new(&corpus(), "ctc-gru-small");
    train.epochs = 1;
    train.batch_size = 16;
    train.beam = 2;
    let mut cfg = AsrGeneralizationConfig::new(train, &out);
    cfg.holdouts = vec![Holdout::Engine("flite".into())];
    cfg.all_engines = false;
    let mut lines = Vec::new();
    let r = run_asr_generalization(
        &cfg,
        "test",
        &mut |l| lines.push(l.to_string()),
        &mut |_| {},
    )
    .unwrap();

    // What the corpus says: flite's speakers and their utterances.
    let speakers = read_speakers(&corpus()).unwrap();
    let flite: BTreeSet<&str> = speakers
        .iter()
        .filter(|(_, v)| v.engine == "flite")
        .map(|(s, _)| s.as_str())
        .collect();
    assert!(!flite.is_empty() && flite.len() < speakers.len());
    let data = load_asr(&corpus(), 16_000).unwrap();
    let all = || data.train.iter().chain(&data.validation).chain(&data.test);
    let flite_utts = all().filter(|u| flite.contains(u.speaker.as_str())).count();
    let trainable = |split: &[hush_host::train::asr::Utterance]| {
        split
            .iter()
            .filter(|u| !flite.contains(u.speaker.as_str()))
            .count()
    };

    assert_eq!(r.engines["flite"], flite.len());
    assert_eq!(r.runs.len(), 1);
    let run = &r.runs[0];
    assert_eq!(run.setting, "engine flite");
    assert_eq!(run.test_speakers, flite.len());
    assert_eq!(run.test.utterances, flite_utts);
    assert_eq!(run.train_utterances, trainable(&data.train));
    for v in [run.test.greedy_wer, run.test.greedy_cer, run.validation_wer]
        .into_iter()
        .chain(run.test.beam_wer)
    {
        assert!(v.is_finite() && v >= 0.0, "{v}");
    }
    assert_eq!(run.validation_curve.len(), run.epochs_run);

    // The run's package says what it trained and validated on: no flite speaker.
    let card = AsrCard::read(&run.model).unwrap();
    let summary = &card.provenance.unwrap().data_summary;
    assert_eq!(summary["train"], trainable(&data.train));
    assert_eq!(summary["validation"], trainable(&data.validation));
    assert_eq!(summary["test"], flite_utts);

    for name in ["results.json", "results.md", "validation_wer.png"] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| 1 | engine flite |"), "{md}");
    assert!(
        lines.iter().any(|l| l.contains("test greedy WER")),
        "{lines:?}"
    );
}

#[test]
fn cli_refuses_an_unknown_holdout_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["experiment", "asr-generalization", "--data"])
        .arg(corpus())
        .arg("--out")
        .arg(tmp.path().join("out"))
        .args(["--holdouts", "sapi"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`sapi` is neither an engine"), "{err}");
    assert!(!tmp.path().join("out").exists());
}
