//! `hush-device listen` end to end: the bundled keyword spotter (`models/kws-12`) listens
//! to a recording made of bundled-corpus clips (three keywords and one other word, with
//! pauses, over quiet noise) and reports each keyword once, in order, near where it was
//! said, and never the other word; without smoothing and refractory period the same
//! stream gives repeated detections. Bad flags, wrong-rate audio and a missing model are
//! refused with errors that say what is wrong.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use hush_device::audio::{write_wav_i16, Audio};

/// Where each word starts (s) and what it is, in the recording [`recording`] writes.
const SCRIPT: [(f64, &str, &str); 4] = [
    (1.0, "yes", "yes/01fddb35_nohash_0.flac"),
    (3.5, "_unknown_", "_unknown_/01fddb35_nohash_0.flac"),
    (6.0, "stop", "stop/01fddb35_nohash_0.flac"),
    (8.5, "no", "no/01fddb35_nohash_0.flac"),
];

/// 11 s: the [`SCRIPT`]'s one-second clips over pink noise 40 dB down, as a 16-bit WAV.
fn recording(dir: &Path) -> PathBuf {
    let clips: Vec<(f64, &str)> = SCRIPT.iter().map(|(t, _, clip)| (*t, *clip)).collect();
    common::corpus_recording(dir, "stream.wav", 11, &clips)
}

fn listen(args: &[&str]) -> (bool, String, String) {
    let model = common::repo("models/kws-12");
    let mut all = vec!["--model", model.to_str().unwrap()];
    all.extend_from_slice(args);
    common::run("listen", &all)
}

fn lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn each_keyword_is_detected_once_near_where_it_was_said() {
    let dir = tempfile::tempdir().unwrap();
    let wav = recording(dir.path());
    let (ok, stdout, stderr) = listen(&["--input", wav.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    eprintln!("{stdout}{stderr}");
    let found = lines(&stdout);
    let labels: Vec<&str> = found.iter().map(|d| d["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["yes", "stop", "no"], "{stdout}");
    for (d, (start, word, _)) in found
        .iter()
        .zip(SCRIPT.iter().filter(|s| !s.1.starts_with('_')))
    {
        assert_eq!(d["label"], *word);
        // A detection comes once the word is in view and before the next one starts.
        let t = d["time_s"].as_f64().unwrap();
        assert!(t > start + 0.2 && t < start + 2.0, "{word} at {t} s");
        assert!(d["score"].as_f64().unwrap() >= 0.8);
    }
    assert!(stderr.contains("11.0 s of audio"), "{stderr}");
    assert!(stderr.contains("3 detections"), "{stderr}");

    // Every window, unsmoothed: one line per window once the first second is in view (49
    // frames of 20 ms shift, 40 ms long: the first ends at 1.0 s). The package is in its
    // streaming form, whose trunk steps 2 frames at a time, so the default 100 ms hop
    // becomes 3 strides: a window every 120 ms.
    let (ok, stdout, stderr) = listen(&["--input", wav.to_str().unwrap(), "--windows"]);
    assert!(ok, "{stderr}");
    let windows = lines(&stdout);
    assert_eq!(windows.len(), 84, "{stderr}");
    for (k, w) in windows.iter().enumerate() {
        let end = w["end_s"].as_f64().unwrap();
        assert!(
            (end - (1.0 + 0.12 * k as f64)).abs() < 1e-6,
            "window {k} ends {end}"
        );
    }

    // Without smoothing or refractory period, a keyword in view for several windows is
    // reported again and again (and a single stray window can raise another word: what
    // the smoothing is for; the keywords said still come in order).
    let (ok, stdout, stderr) = listen(&[
        "--input",
        wav.to_str().unwrap(),
        "--smooth-ms",
        "0",
        "--refractory-ms",
        "0",
    ]);
    assert!(ok, "{stderr}");
    let raw = lines(&stdout);
    assert!(raw.len() > 3, "{stdout}");
    let mut said: Vec<&str> = raw
        .iter()
        .map(|d| d["label"].as_str().unwrap())
        .filter(|l| ["yes", "stop", "no"].contains(l))
        .collect();
    for word in ["yes", "stop", "no"] {
        let n = said.iter().filter(|l| **l == word).count();
        assert!(
            n > 1,
            "{word} reported {n} time(s) without smoothing: {stdout}"
        );
    }
    said.dedup();
    assert_eq!(said, ["yes", "stop", "no"], "{stdout}");
}

#[test]
fn bad_flags_audio_and_models_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let wav = recording(dir.path());
    let wav = wav.to_str().unwrap();

    let (ok, _, stderr) = listen(&[]);
    assert!(!ok);
    assert!(
        stderr.contains("--input") && stderr.contains("--mic"),
        "{stderr}"
    );
    let (ok, _, stderr) = listen(&["--input", wav, "--mic"]);
    assert!(!ok);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let (ok, _, stderr) = listen(&["--input", wav, "--threshold", "1.5"]);
    assert!(!ok);
    assert!(stderr.contains("threshold 1.5"), "{stderr}");
    let (ok, _, stderr) = listen(&["--input", wav, "--hop-ms", "0"]);
    assert!(!ok);
    assert!(stderr.contains("--hop-ms 0"), "{stderr}");

    // 8 kHz audio for a 16 kHz model.
    let slow = dir.path().join("8k.wav");
    write_wav_i16(
        &slow,
        &Audio {
            samples: vec![0.0; 8_000],
            sample_rate: 8_000,
        },
    )
    .unwrap();
    let (ok, _, stderr) = listen(&["--input", slow.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("8000 Hz") && stderr.contains("16000 Hz"),
        "{stderr}"
    );

    let not_wav = dir.path().join("notes.wav");
    std::fs::write(&not_wav, "not audio").unwrap();
    let (ok, _, stderr) = listen(&["--input", not_wav.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("not a WAV file"), "{stderr}");

    let (ok, _, stderr) = common::run(
        "listen",
        &["--model", dir.path().to_str().unwrap(), "--input", wav],
    );
    assert!(!ok);
    assert!(stderr.contains("model.json"), "{stderr}");

    // A microphone that is not there is named.
    let (ok, _, stderr) = listen(&["--mic", "--device", "no-such-mic", "--seconds", "1"]);
    assert!(!ok);
    assert!(stderr.contains("no-such-mic"), "{stderr}");
}
