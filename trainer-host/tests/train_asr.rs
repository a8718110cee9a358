//! ASR end to end on a slice of the bundled corpus: train `ctc-gru-small` for a few
//! epochs on a few utterances, check the CTC loss falls, that the package is complete and
//! loads, and that the device path (tract on model.onnx, features from model.json)
//! agrees with burn on a held-out clip and transcribes it.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use hush_device::audio::read_audio;
use hush_device::infer::{utterance_features, AsrRecognizer, Decoder, KwsClassifier};
use hush_host::train::asr::{train_asr, AsrTrainConfig};
use hush_host::train::Augment;
use hush_models::asr::log_probs;
use hush_models::package::load_asr_package;

mod common;
use common::slice_corpus;

#[test]
fn tiny_ctc_model_learns_and_the_device_path_agrees() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr");
    let data = tempfile::tempdir().unwrap();
    // Speaker splits follow the id hash: 01fddb35 is validation, c8946917 test, the
    // others train.
    slice_corpus(
        &corpus,
        data.path(),
        &["30487587", "49da0ba1", "01fddb35", "c8946917"],
        4,
    );
    let out = tempfile::tempdir().unwrap();
    let mut cfg = AsrTrainConfig::new(data.path(), "ctc-gru-small");
    cfg.features.mel.num_bins = 20;
    cfg.epochs = 6;
    cfg.batch_size = 4;
    cfg.lr = 3e-3;
    cfg.patience = 100;
    cfg.beam = 4;
    cfg.augment = Augment::none();
    let report = train_asr(&cfg, out.path(), "test", &mut |e| {
        eprintln!(
            "epoch {} loss {:.3} val WER {:.3}",
            e.epoch, e.train_loss, e.val_wer
        )
    })
    .unwrap();
    let losses: Vec<f64> = report.epochs.iter().map(|e| e.train_loss).collect();
    assert_eq!(losses.len(), 6);
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!(
        losses[5] < 0.8 * losses[0],
        "CTC loss did not fall: {losses:?}"
    );

    // The package is complete and loads; its card says what it is.
    for f in ["model.json", "weights.safetensors", "model.onnx"] {
        assert!(out.path().join(f).is_file(), "{f} missing");
    }
    let (card, model) = load_asr_package(out.path(), &Device::flex()).unwrap();
    // (The feature config's f32 fields go through JSON's f64, so compare the rest.)
    assert_eq!(card.parameters, report.card.parameters);
    assert_eq!(card.metrics, report.card.metrics);
    assert_eq!(card.arch.name(), "ctc-gru");
    assert_eq!(card.vocabulary.len(), 29);
    let p = card.provenance.as_ref().unwrap();
    assert_eq!(p.data_summary["train"], 8);
    assert_eq!(p.data_summary["test_speakers"], 1);
    let m = card.metrics.as_ref().unwrap();
    let test = &m.splits["test"];
    assert_eq!(test.utterances, 4);
    assert!(test.beam_wer.is_some() && test.greedy_wer.is_finite());

    // Device path against burn on a test clip.
    let asr = AsrRecognizer::load(out.path()).unwrap();
    let clip = data.path().join("c8946917/0/c8946917-0-0000.flac");
    let audio = read_audio(&clip).unwrap();
    let feats = utterance_features(asr.features(), &audio.samples).unwrap();
    let tract = asr.log_probs(&feats, &clip).unwrap();
    let burn = log_probs(&model.valid(), &feats, 20, &Device::flex()).unwrap();
    assert_eq!(tract.len(), burn.len());
    let diff = tract
        .iter()
        .zip(&burn)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!("tract vs burn on {}: max abs {diff:.2e}", clip.display());
    assert!(diff <= 1e-4, "{diff}");
    let t = asr.transcribe_file(&clip, &Decoder::Beam(4)).unwrap();
    assert!(t.file.ends_with("c8946917-0-0000.flac"));
    assert!(t
        .text
        .chars()
        .all(|c| c == ' ' || c == '\'' || c.is_ascii_lowercase()));

    // A keyword-spotter reader refuses the ASR package by task.
    let e = KwsClassifier::load(out.path()).unwrap_err().to_string();
    assert!(e.contains("`asr` model"), "{e}");
}

#[test]
fn joined_utterances_and_blank_before_speech_train_and_are_recorded() {
    // The first-word options, with the default augmentation (speed and shift move the
    // tracked speech onset): training runs, the loss stays finite, the card says so.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr");
    let data = tempfile::tempdir().unwrap();
    slice_corpus(
        &corpus,
        data.path(),
        &["30487587", "49da0ba1", "01fddb35", "c8946917"],
        4,
    );
    let out = tempfile::tempdir().unwrap();
    let mut cfg = AsrTrainConfig::new(data.path(), "ctc-gru-small");
    cfg.features.mel.num_bins = 20;
    cfg.epochs = 2;
    cfg.batch_size = 4;
    cfg.patience = 100;
    cfg.beam = 2;
    cfg.concat = 1.0;
    cfg.blank_before_speech = true;
    let report = train_asr(&cfg, out.path(), "test", &mut |_| {}).unwrap();
    assert_eq!(report.epochs.len(), 2);
    assert!(report.epochs.iter().all(|e| e.train_loss.is_finite()));
    let options = &report.card.provenance.as_ref().unwrap().options;
    assert_eq!(options["concat"], 1.0);
    assert_eq!(options["blank_before_speech"], true);
}
