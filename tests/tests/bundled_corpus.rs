//! The corpus shipped in `data/corpus` is complete, decodes, and splits by speaker.

#![allow(clippy::unwrap_used)] // test helpers: a failure should stop the test

use std::collections::{BTreeMap, BTreeSet};

use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, Layout, Split, Target};
use hush_tests::bundled_corpus;

#[test]
fn kws_corpus_has_40_speakers_in_disjoint_splits() {
    let (layout, ex) = read_corpus(&bundled_corpus().join("kws")).unwrap();
    assert_eq!(layout, Layout::SpeechCommands);
    let speakers: BTreeSet<&str> = ex.iter().map(|e| e.speaker.as_str()).collect();
    assert_eq!(speakers.len(), 40);
    let mut split_of: BTreeMap<&str, BTreeSet<Split>> = BTreeMap::new();
    let mut per_class: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &ex {
        split_of.entry(&e.speaker).or_default().insert(e.split);
        let Target::Label(l) = &e.target else {
            panic!("{e:?}")
        };
        *per_class.entry(l).or_default() += 1;
    }
    assert!(split_of.values().all(|s| s.len() == 1));
    for split in [Split::Train, Split::Validation, Split::Test] {
        assert!(
            split_of.values().any(|s| s.contains(&split)),
            "no {split:?} speaker"
        );
    }
    assert_eq!(per_class.len(), 12, "{per_class:?}");
    assert_eq!(per_class["yes"], 40);
    assert_eq!(per_class["_silence_"], 40);
    assert_eq!(per_class["_unknown_"], 160);
    // Every clip is a one-second 16 kHz clip; decode a spread of them.
    for e in ex.iter().step_by(7) {
        let a = read_audio(&e.path).unwrap();
        assert_eq!(
            (a.sample_rate, a.samples.len()),
            (16_000, 16_000),
            "{}",
            e.path.display()
        );
    }
}

#[test]
fn asr_corpus_has_transcripts_for_every_utterance() {
    let (layout, ex) = read_corpus(&bundled_corpus().join("asr")).unwrap();
    assert_eq!(layout, Layout::LibriSpeech);
    assert_eq!(ex.len(), 200);
    let speakers: BTreeSet<&str> = ex.iter().map(|e| e.speaker.as_str()).collect();
    assert_eq!(speakers.len(), 20);
    for e in ex.iter().step_by(9) {
        let Target::Transcript(t) = &e.target else {
            panic!("{e:?}")
        };
        assert!(!t.is_empty());
        let a = read_audio(&e.path).unwrap();
        assert_eq!(a.sample_rate, 16_000);
        assert!(a.duration_s() > 0.7, "{}", e.path.display());
    }
}
