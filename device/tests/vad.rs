//! The voice-activity gate: Silero VAD (`models/vad/`) run by tract gives onnxruntime's
//! speech probabilities (a committed reference, `fixtures/vad/`), whatever the chunking;
//! `hush-device listen --vad` finds the same keywords as without it while skipping the
//! windows with no speech, scores nothing on noise alone, and refuses a missing or
//! foreign VAD model and a bad threshold with errors that name them.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use hush_device::infer::SileroVad;

use common::repo;

fn vad_model() -> PathBuf {
    repo("models/vad/silero_vad_16k_sequence.onnx")
}

#[test]
fn tract_gives_onnxruntimes_speech_probabilities_in_any_chunking() {
    let (signal, expected) = common::vad_reference();
    for chunk in [signal.len(), 512, 320, 7] {
        let mut vad = SileroVad::load(&vad_model()).unwrap();
        let mut probs = Vec::new();
        for piece in signal.chunks(chunk) {
            vad.push(piece, &mut probs).unwrap();
        }
        assert_eq!(probs.len(), expected.len(), "chunks of {chunk}");
        for (k, (got, want)) in probs.iter().zip(&expected).enumerate() {
            assert!(
                (f64::from(*got) - want).abs() < 1e-4,
                "chunks of {chunk}, frame {k}: tract {got}, onnxruntime {want}"
            );
        }
    }
    // The clip is heard as speech, the noise after it is not.
    assert!(expected[12..22].iter().all(|p| *p > 0.5), "{expected:?}");
    assert!(expected[35..].iter().all(|p| *p < 0.1), "{expected:?}");
}

fn listen(wav: &Path, extra: &[&str]) -> (bool, String, String) {
    let model = repo("models/kws-12");
    let mut args = vec![
        "--model",
        model.to_str().unwrap(),
        "--input",
        wav.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    common::run("listen", &args)
}

fn labels(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["label"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The number in "N more skipped" of listen's summary (0 when absent).
fn skipped(stderr: &str) -> u64 {
    stderr
        .split('(')
        .find_map(|s| {
            s.split_once(" more skipped")
                .map(|(n, _)| n.trim().parse().unwrap())
        })
        .unwrap_or(0)
}

#[test]
fn the_gate_keeps_the_keywords_and_skips_the_silence() {
    let dir = tempfile::tempdir().unwrap();
    let vad = vad_model();
    let vad = vad.to_str().unwrap();
    // Three keywords and another word, far apart over quiet noise.
    let talk = common::corpus_recording(
        dir.path(),
        "talk.wav",
        20,
        &[
            (1.0, "yes/01fddb35_nohash_0.flac"),
            (6.0, "_unknown_/01fddb35_nohash_0.flac"),
            (11.0, "stop/01fddb35_nohash_0.flac"),
            (16.0, "no/01fddb35_nohash_0.flac"),
        ],
    );
    let (ok, plain, stderr) = listen(&talk, &[]);
    assert!(ok, "{stderr}");
    assert_eq!(labels(&plain), ["yes", "stop", "no"], "{plain}");
    assert_eq!(skipped(&stderr), 0, "{stderr}");
    let (ok, gated, stderr) = listen(&talk, &["--vad", vad]);
    assert!(ok, "{stderr}");
    assert_eq!(labels(&gated), ["yes", "stop", "no"], "{gated}");
    // 159 windows are due in 20 s (one every 120 ms, the streaming package's hop from 1 s
    // on); the gate scores those within a second of speech.
    let skip = skipped(&stderr);
    assert!(skip > 80 && skip < 159, "{stderr}");

    // Noise alone: nothing scored, nothing reported.
    let quiet = common::corpus_recording(dir.path(), "quiet.wav", 10, &[]);
    let (ok, stdout, stderr) = listen(&quiet, &["--vad", vad]);
    assert!(ok, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains(" 0 windows (76 more skipped"), "{stderr}");
}

#[test]
fn a_missing_or_foreign_vad_model_and_a_bad_threshold_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = common::corpus_recording(dir.path(), "quiet.wav", 2, &[]);
    let missing = dir.path().join("no-vad.onnx");
    let (ok, _, stderr) = listen(&quiet, &["--vad", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("no-vad.onnx") && stderr.contains("missing file"),
        "{stderr}"
    );
    let kws = repo("models/kws-12/model.onnx");
    let (ok, _, stderr) = listen(&quiet, &["--vad", kws.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("Silero VAD"), "{stderr}");
    let vad = vad_model();
    let (ok, _, stderr) = listen(
        &quiet,
        &["--vad", vad.to_str().unwrap(), "--vad-threshold", "1.5"],
    );
    assert!(!ok);
    assert!(stderr.contains("VAD threshold 1.5"), "{stderr}");
    let (ok, _, stderr) = listen(&quiet, &["--vad-threshold", "0.4"]);
    assert!(!ok);
    assert!(stderr.contains("--vad"), "{stderr}");
}
