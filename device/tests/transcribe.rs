//! `hush-device transcribe` end to end: a CTC package written by hush-models (small,
//! seeded weights) transcribes a corpus clip through the binary, one JSON line per file,
//! greedy and with `--beam`, agreeing with the library; a keyword spotter's package,
//! wrong-rate audio and a foreign ONNX file are refused with errors that say why. The
//! bundled recogniser (`models/asr/`) runs out of the box.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hush_device::audio::{read_audio, resample, write_wav_i16, Audio};
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{AsrRecognizer, Decoder};
use hush_models::arch::{ArchConfig, IoShape};
use hush_models::asr::decode::Lexicon;
use hush_models::asr::{AsrArchConfig, Vocabulary};
use hush_models::package::{write_asr_package, write_package, AsrCard, ModelCard};

fn features() -> FeatureConfig {
    let mut f = FeatureConfig::kaldi(FeatureKind::Fbank);
    f.mel.num_bins = 20;
    f
}

fn asr_package(dir: &Path) {
    let arch = AsrArchConfig::default_for("ctc-gru-small", 20, 29).unwrap();
    let device = Device::flex();
    let _rng = hush_models::rng::hold_backend_rng(); // until write_asr_package draws every weight
    device.seed(4);
    let model = arch.init(&device).unwrap();
    let features = serde_json::to_value(features()).unwrap();
    let card = AsrCard::new(arch, features, &Vocabulary::characters(), &model).unwrap();
    write_asr_package(dir, &card, &model).unwrap();
}

fn clip() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr/c8946917/0/c8946917-0-0000.flac")
}

fn transcribe(args: &[&str]) -> (bool, String, String) {
    common::run("transcribe", args)
}

#[test]
fn transcribe_prints_one_json_line_per_file_as_the_library_decodes() {
    let dir = tempfile::tempdir().unwrap();
    asr_package(dir.path());
    let model = dir.path().to_str().unwrap();
    let clip = clip();
    let asr = AsrRecognizer::load(dir.path()).unwrap();
    let words = dir.path().join("lexicon.txt");
    std::fs::write(&words, "yes\nno stop\n").unwrap();
    let lexicon = Lexicon::from_text("yes no stop", asr.vocabulary()).unwrap();
    for (extra, decoder) in [
        (vec![], Decoder::Greedy),
        (vec!["--beam", "4"], Decoder::Beam(4)),
        (
            vec!["--lexicon", words.to_str().unwrap()],
            Decoder::Lexicon(64, lexicon.clone()),
        ),
    ] {
        let mut args = vec!["--model", model];
        args.extend(extra);
        args.push(clip.to_str().unwrap());
        args.push(clip.to_str().unwrap());
        let (ok, stdout, stderr) = transcribe(&args);
        assert!(ok, "{stderr}");
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        let expected = asr.transcribe_file(&clip, &decoder).unwrap();
        assert_eq!(lines[0]["file"], clip.display().to_string());
        assert_eq!(lines[0]["text"], expected.text);
        assert_eq!(lines[0], lines[1]);
        if let Decoder::Lexicon(..) = decoder {
            let text = expected.text;
            assert!(
                text.split_whitespace()
                    .all(|w| ["yes", "no", "stop"].contains(&w)),
                "{text:?}"
            );
        }
    }
    // A lexicon that is missing, or holds no words, is named.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, " 42 \n").unwrap();
    for (bad, why) in [
        (dir.path().join("missing.txt"), "cannot read it"),
        (empty, "no words"),
    ] {
        let (ok, _, stderr) = transcribe(&[
            "--model",
            model,
            "--lexicon",
            bad.to_str().unwrap(),
            clip.to_str().unwrap(),
        ]);
        assert!(!ok);
        assert!(
            stderr.contains("--lexicon") && stderr.contains(why),
            "{stderr}"
        );
        assert!(
            stderr.contains(bad.file_name().unwrap().to_str().unwrap()),
            "{stderr}"
        );
    }
}

#[test]
fn wrong_task_wrong_rate_and_foreign_onnx_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A keyword spotter's package.
    let kws = dir.path().join("kws");
    let io = IoShape {
        frames: 98,
        bins: 20,
        classes: 3,
    };
    let arch = ArchConfig::default_for("leak-cnn", io).unwrap();
    let m = arch.init_seeded(&Device::flex(), 2).unwrap();
    let labels = ["yes", "_silence_", "_unknown_"].map(String::from).to_vec();
    let card = ModelCard::new(arch, serde_json::to_value(features()).unwrap(), labels, &m).unwrap();
    write_package(&kws, &card, &m).unwrap();
    let clip = clip();
    let (ok, _, stderr) = transcribe(&["--model", kws.to_str().unwrap(), clip.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("this is a `kws` model") && stderr.contains("needs a `asr` model"),
        "{stderr}"
    );

    // Audio at 8 kHz for a 16 kHz model.
    let asr = dir.path().join("asr");
    asr_package(&asr);
    let audio = read_audio(&clip).unwrap();
    let low = dir.path().join("low.wav");
    let samples = resample(&audio.samples, 16_000, 8_000).unwrap();
    write_wav_i16(
        &low,
        &Audio {
            samples,
            sample_rate: 8_000,
        },
    )
    .unwrap();
    let (ok, _, stderr) = transcribe(&["--model", asr.to_str().unwrap(), low.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("8000 Hz") && stderr.contains("16000 Hz"),
        "{stderr}"
    );

    // An ASR card beside a keyword spotter's ONNX file.
    std::fs::copy(kws.join("model.onnx"), asr.join("model.onnx")).unwrap();
    let e = AsrRecognizer::load(&asr).unwrap_err().to_string();
    assert!(
        e.contains("not the model model.json describes") && e.contains("log_probs"),
        "{e}"
    );
}

#[test]
fn a_missing_or_mismatched_model_json_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let asr = dir.path().join("asr");
    asr_package(&asr);
    // model.json's architecture has 30 outputs, its vocabulary 29 symbols.
    let mut card = AsrCard::read(&asr).unwrap();
    let AsrArchConfig::CtcGru(c) = &mut card.arch;
    c.vocab = 30;
    card.write(&asr).unwrap();
    let e = AsrRecognizer::load(&asr).unwrap_err().to_string();
    assert!(
        e.contains("model.json") && e.contains("29 vocabulary symbols") && e.contains("30 outputs"),
        "{e}"
    );
    std::fs::remove_file(asr.join("model.json")).unwrap();
    let clip = clip();
    let (ok, _, stderr) = transcribe(&["--model", asr.to_str().unwrap(), clip.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("model.json"), "{stderr}");
}

#[test]
fn the_bundled_asr_model_transcribes_a_corpus_clip() {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/asr");
    let clip = clip();
    let (ok, stdout, stderr) =
        transcribe(&["--model", bundled.to_str().unwrap(), clip.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(line["file"], clip.display().to_string());
    // It runs and writes text; how good the text is, is checked over the whole bundled
    // corpus in `tests/tests/bundled_models.rs` (greedy WER 0.384).
    let text = line["text"].as_str().unwrap();
    assert!(!text.trim().is_empty(), "{stdout}");
}
