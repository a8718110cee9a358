//! Dataset readers on small corpora written here, well-formed and malformed.

#![allow(clippy::unwrap_used)] // test helpers: a failure should stop the test

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hush_device::audio::{write_wav_i16, Audio};
use hush_device::dataset::{
    detect_layout, read_corpus, read_librispeech, read_manifest, read_speech_commands,
    DatasetError, Layout, Split, Target,
};

fn clip(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_wav_i16(
        path,
        &Audio {
            samples: vec![0.01; 1600],
            sample_rate: 16000,
        },
    )
    .unwrap();
}

fn speech_commands(root: &Path, speakers: usize) {
    for w in ["yes", "no", "_unknown_", "_silence_"] {
        for s in 0..speakers {
            for k in 0..2 {
                clip(&root.join(format!("{w}/spk{s:02}_nohash_{k}.wav")));
            }
        }
    }
    clip(&root.join("_background_noise_/white_noise.wav"));
}

#[test]
fn speech_commands_hash_split_keeps_speakers_apart() {
    let dir = tempfile::tempdir().unwrap();
    speech_commands(dir.path(), 30);
    assert_eq!(detect_layout(dir.path()).unwrap(), Layout::SpeechCommands);
    let ex = read_speech_commands(dir.path()).unwrap();
    assert_eq!(ex.len(), 4 * 30 * 2, "background noise is not a class");
    let mut split_of: BTreeMap<&str, BTreeSet<Split>> = BTreeMap::new();
    for e in &ex {
        split_of.entry(&e.speaker).or_default().insert(e.split);
    }
    assert!(
        split_of.values().all(|s| s.len() == 1),
        "a speaker crosses splits"
    );
    let splits: BTreeSet<Split> = split_of.values().flatten().copied().collect();
    assert!(splits.contains(&Split::Train));
    assert!(
        splits.len() >= 2,
        "30 speakers should not all hash to one split"
    );
    assert!(ex
        .iter()
        .any(|e| e.target == Target::Label("_silence_".into())));
}

#[test]
fn speech_commands_list_files_decide_the_split() {
    let dir = tempfile::tempdir().unwrap();
    speech_commands(dir.path(), 3);
    std::fs::write(
        dir.path().join("validation_list.txt"),
        "yes/spk00_nohash_0.wav\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("testing_list.txt"),
        "no/spk01_nohash_1.wav\n\n",
    )
    .unwrap();
    let ex = read_speech_commands(dir.path()).unwrap();
    let split = |rel: &str| ex.iter().find(|e| e.path.ends_with(rel)).unwrap().split;
    assert_eq!(split("yes/spk00_nohash_0.wav"), Split::Validation);
    assert_eq!(split("no/spk01_nohash_1.wav"), Split::Test);
    assert_eq!(split("yes/spk00_nohash_1.wav"), Split::Train);
    assert_eq!(ex.iter().filter(|e| e.split != Split::Train).count(), 2);
}

#[test]
fn speech_commands_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    speech_commands(dir.path(), 1);
    std::fs::write(
        dir.path().join("testing_list.txt"),
        "yes/ghost_nohash_0.wav\n",
    )
    .unwrap();
    let e = read_speech_commands(dir.path()).unwrap_err();
    assert!(matches!(e, DatasetError::Missing { .. }), "{e}");
    assert!(
        e.to_string().contains("ghost_nohash_0.wav") && e.to_string().contains("testing_list.txt")
    );

    let dir = tempfile::tempdir().unwrap();
    speech_commands(dir.path(), 1);
    clip(&dir.path().join("yes/badname.wav"));
    let e = read_speech_commands(dir.path()).unwrap_err();
    assert!(e.to_string().contains("badname.wav"), "{e}");

    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        detect_layout(empty.path()),
        Err(DatasetError::NotACorpus { .. })
    ));
    assert!(read_corpus(&empty.path().join("missing")).is_err());
}

fn librispeech(root: &Path, trans: &str) {
    let chapter = root.join("train-clean-5/19/198");
    for u in 0..2 {
        clip(&chapter.join(format!("19-198-000{u}.wav")));
    }
    std::fs::write(chapter.join("19-198.trans.txt"), trans).unwrap();
}

#[test]
fn librispeech_reads_transcripts_and_subset_splits() {
    let dir = tempfile::tempdir().unwrap();
    librispeech(
        dir.path(),
        "19-198-0000 TURN ON THE LIGHT\n19-198-0001 STOP\n",
    );
    assert_eq!(detect_layout(dir.path()).unwrap(), Layout::LibriSpeech);
    let ex = read_librispeech(dir.path()).unwrap();
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].target, Target::Transcript("TURN ON THE LIGHT".into()));
    assert_eq!(ex[0].speaker, "19");
    assert!(ex.iter().all(|e| e.split == Split::Train));
}

#[test]
fn librispeech_malformed_lines_and_missing_audio_are_named() {
    let dir = tempfile::tempdir().unwrap();
    librispeech(dir.path(), "19-198-0000 OK\nJUSTONEWORD\n");
    let e = read_librispeech(dir.path()).unwrap_err();
    assert!(
        matches!(&e, DatasetError::BadLine { line: 2, path, .. } if path.ends_with("19-198.trans.txt")),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    librispeech(dir.path(), "19-198-0000 OK\n19-198-0007 WHERE IS IT\n");
    let e = read_librispeech(dir.path()).unwrap_err();
    assert!(e.to_string().contains("19-198-0007"), "{e}");
}

#[test]
fn manifest_reads_labels_and_texts_relative_to_itself() {
    let dir = tempfile::tempdir().unwrap();
    clip(&dir.path().join("clips/a.wav"));
    clip(&dir.path().join("clips/b.wav"));
    let m = dir.path().join("train.jsonl");
    std::fs::write(
        &m,
        "{\"path\": \"clips/a.wav\", \"speaker\": \"s1\", \"label\": \"yes\"}\n\
         {\"path\": \"clips/b.wav\", \"speaker\": \"s2\", \"text\": \"play jazz\", \"split\": \"test\"}\n",
    )
    .unwrap();
    assert_eq!(detect_layout(&m).unwrap(), Layout::Manifest);
    let ex = read_manifest(&m).unwrap();
    assert_eq!(ex[0].target, Target::Label("yes".into()));
    assert_eq!(ex[1].target, Target::Transcript("play jazz".into()));
    assert_eq!(ex[1].split, Split::Test);
    assert!(ex[0].path.is_file());
}

#[test]
fn manifest_errors_give_the_line() {
    let dir = tempfile::tempdir().unwrap();
    clip(&dir.path().join("a.wav"));
    let m = dir.path().join("m.jsonl");
    for (body, needle) in [
        ("{\"path\": \"a.wav\", \"speaker\": \"s\"}", "exactly one"),
        (
            "{\"path\": \"a.wav\", \"speaker\": \"s\", \"label\": \"x\", \"split\": \"dev2\"}",
            "dev2",
        ),
        ("not json", "m.jsonl:1"),
        (
            "{\"path\": \"nope.wav\", \"speaker\": \"s\", \"label\": \"x\"}",
            "nope.wav",
        ),
        ("", "no entries"),
    ] {
        std::fs::write(&m, body).unwrap();
        let e = read_manifest(&m).unwrap_err().to_string();
        assert!(e.contains(needle), "{body:?} -> {e}");
    }
}
