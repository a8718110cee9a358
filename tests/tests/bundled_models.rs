//! The keyword spotters shipped in `models/` load as `hush-device classify` loads them
//! and label clips of the bundled corpus better than chance by far. Those speakers were
//! never trained on: the bundled models come from a larger generated corpus with another
//! seed. Both models are under-trained so far (`docs/results/kws-quality/README.md`), so
//! the bars below are what they reach with a margin, not the targets: raise them
//! when the models are retrained.

#![allow(clippy::unwrap_used)] // test helpers: a failure should stop the test

use std::path::{Path, PathBuf};

use hush_device::infer::KwsClassifier;
use hush_tests::bundled_corpus;

/// The ten commands of the bundled corpus.
const COMMANDS: [&str; 10] = [
    "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
];

/// Fraction of the 44 clips kws-12 must get right: 0.6 (it gets 34 of 44).
const KWS_12_BAR: f64 = 0.6;
/// The same for kws-22 (chance: 1/22; it gets 20 of 44).
const KWS_22_BAR: f64 = 0.3;

fn bundled_model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models")
        .join(name)
}

/// The first `per_word` clips (by name) of every command and of `_silence_`.
fn clips(per_word: usize) -> Vec<(String, PathBuf)> {
    let kws = bundled_corpus().join("kws");
    let mut out = Vec::new();
    for word in COMMANDS.iter().chain(&["_silence_"]) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(kws.join(word))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "flac"))
            .collect();
        files.sort();
        out.extend(
            files
                .into_iter()
                .take(per_word)
                .map(|p| (word.to_string(), p)),
        );
    }
    out
}

/// Fraction of `clips` the package `name` labels right; checks its labels first.
fn accuracy(name: &str, labels: usize, clips: &[(String, PathBuf)]) -> f64 {
    let clf = KwsClassifier::load(&bundled_model(name)).unwrap();
    let card = clf.card();
    assert_eq!(card.labels.len(), labels, "{:?}", card.labels);
    assert!(COMMANDS.iter().all(|w| card.labels.iter().any(|l| l == w)));
    let provenance = card.provenance.as_ref().unwrap();
    assert!(provenance.command.contains("hush-host"), "{provenance:?}");
    let right = clips
        .iter()
        .filter(|(word, path)| clf.classify_file(path).unwrap().label == *word)
        .count();
    right as f64 / clips.len() as f64
}

#[test]
fn kws_12_labels_bundled_clips_mostly_right() {
    let clips = clips(4);
    assert_eq!(clips.len(), 44);
    let acc = accuracy("kws-12", 12, &clips);
    assert!(
        acc > KWS_12_BAR,
        "kws-12: {acc:.3} of {} clips right",
        clips.len()
    );
}

#[test]
fn kws_22_labels_bundled_clips_well_above_chance() {
    let clips = clips(4);
    let acc = accuracy("kws-22", 22, &clips);
    assert!(
        acc > KWS_22_BAR,
        "kws-22: {acc:.3} of {} clips right",
        clips.len()
    );
}
