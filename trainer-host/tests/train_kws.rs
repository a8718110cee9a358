//! End to end on the bundled corpus: train a tiny 2-conv + 2-FC CNN for a few epochs, check it is
//! clearly above chance on speaker-disjoint test speakers, then classify the test clips
//! with tract (the device path) and check it agrees with burn on every clip.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, KwsLabels, Split, Target};
use hush_device::infer::{clip_features, KwsClassifier};
use hush_host::demo::small_kws_config;
use hush_host::train::{train_kws, Augment, KwsTrainConfig};
use hush_models::arch::IoShape;
use hush_models::package::load_package;
use hush_models::step::predict;

#[test]
fn tiny_cnn_learns_and_tract_agrees_with_burn() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let out = tempfile::tempdir().unwrap();
    let cfg = small_kws_config(&data, 12, 3);
    let io = IoShape {
        frames: cfg.frames,
        bins: 20,
        classes: 12,
    };
    let report = train_kws(&cfg, out.path(), "test", &mut |e| {
        eprintln!(
            "epoch {} loss {:.3} val {:.3}",
            e.epoch, e.train_loss, e.val_accuracy
        )
    })
    .unwrap();
    let metrics = report.card.metrics.as_ref().unwrap();
    let test = &metrics.splits["test"];
    eprintln!(
        "test accuracy {:.3}, balanced keyword accuracy {:.3} over {} clips",
        test.accuracy, test.balanced_keyword_accuracy, test.examples
    );
    // Chance is 1/12; the majority class (_unknown_) is 4/15 of a speaker's clips.
    assert!(test.accuracy > 0.4, "test accuracy {}", test.accuracy);

    // The device path (tract on model.onnx, features from model.json) against burn on
    // the weights the package holds.
    let clf = KwsClassifier::load(out.path()).unwrap();
    let (card, model) = load_package(out.path(), &Device::flex()).unwrap();
    let model = model.valid();
    let labels = KwsLabels::new(&cfg.keywords);
    let (_, examples) = read_corpus(&data).unwrap();
    let mut n = 0;
    let mut max_diff = 0f32;
    for ex in examples.iter().filter(|e| e.split == Split::Test) {
        let Target::Label(_) = &ex.target else {
            continue;
        };
        let audio = read_audio(&ex.path).unwrap();
        let tract = clf.classify_audio(&audio, &ex.path).unwrap();
        let feats = clip_features(clf.features(), &audio.samples, io.frames).unwrap();
        let burn = predict(&model, &feats, 1, io.frames, io.bins, &Device::flex()).unwrap();
        let best = burn[0]
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |a, (i, &p)| if p > a.1 { (i, p) } else { a });
        assert_eq!(tract.label, card.labels[best.0], "{}", ex.path.display());
        for (i, l) in labels.classes.iter().enumerate() {
            max_diff = max_diff.max((tract.scores[l] - burn[0][i]).abs());
        }
        n += 1;
    }
    eprintln!("tract vs burn on {n} test clips: same labels, max |Δp| = {max_diff:.2e}");
    assert!(n >= 40);
    assert!(max_diff < 1e-4, "max prob difference {max_diff}");
}

/// Weight averaging (`--swa-epochs`) on a DS-CNN (batch norms): every epoch runs even with
/// patience 1, the package holds the average of every step of the last two epochs, and
/// that model still classifies (its batch norms re-estimated) and exports exactly.
#[test]
fn weight_averaging_keeps_the_mean_of_the_last_epochs() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let out = tempfile::tempdir().unwrap();
    let mut cfg = KwsTrainConfig::new(&data, "ds-cnn-s");
    cfg.set_fbank(40.0, 20.0, 20);
    cfg.augment = Augment::none();
    cfg.epochs = 14;
    cfg.swa_epochs = 2;
    cfg.patience = 1;
    cfg.batch_size = 16;
    cfg.balance_classes = true;
    cfg.seed = 2;
    let report = train_kws(&cfg, out.path(), "test", &mut |e| {
        eprintln!("epoch {} val {:.3}", e.epoch, e.val_accuracy)
    })
    .unwrap();
    let p = report.card.provenance.as_ref().unwrap();
    assert_eq!(p.epochs_run, 14);
    assert_eq!(
        p.best_epoch, 14,
        "the kept weights are the average ending at the last epoch"
    );
    let steps = p.data_summary["train"].div_ceil(16);
    assert_eq!(p.options["swa"]["steps_averaged"], 2 * steps);
    let test = &report.card.metrics.as_ref().unwrap().splits["test"];
    eprintln!("averaged model: test accuracy {:.3}", test.accuracy);
    assert!(test.accuracy > 0.4, "test accuracy {}", test.accuracy);

    // The package (averaged weights, re-estimated statistics) runs the same on tract.
    let clf = KwsClassifier::load(out.path()).unwrap();
    let (_, model) = load_package(out.path(), &Device::flex()).unwrap();
    let model = model.valid();
    let (_, examples) = read_corpus(&data).unwrap();
    let mut max_diff = 0f32;
    for ex in examples.iter().filter(|e| e.split == Split::Test).take(20) {
        let audio = read_audio(&ex.path).unwrap();
        let tract = clf.classify_audio(&audio, &ex.path).unwrap();
        let feats = clip_features(clf.features(), &audio.samples, cfg.frames).unwrap();
        let burn = predict(&model, &feats, 1, cfg.frames, 20, &Device::flex()).unwrap();
        for (i, l) in report.card.labels.iter().enumerate() {
            max_diff = max_diff.max((tract.scores[l] - burn[0][i]).abs());
        }
    }
    assert!(max_diff < 1e-4, "max prob difference {max_diff}");
}

/// `streaming` with `init_from` a same-padded DS-CNN-S (`hush-host train --streaming
/// --init-from`): the run starts from that package's weights (time padding is not a weight)
/// and writes the streaming form; without `streaming` a streaming package is refused as a
/// starting point for the same-padded model.
#[test]
fn a_streaming_run_starts_from_a_same_padded_package() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let same = tempfile::tempdir().unwrap();
    let mut cfg = KwsTrainConfig::new(&data, "ds-cnn-s");
    cfg.set_fbank(40.0, 20.0, 20);
    cfg.augment = Augment::none();
    cfg.epochs = 1;
    train_kws(&cfg, same.path(), "test", &mut |_| {}).unwrap();

    let streaming = tempfile::tempdir().unwrap();
    let mut tune = cfg.clone();
    tune.streaming = true;
    tune.init_from = Some(same.path().to_path_buf());
    // So small a rate leaves the weights where they started.
    tune.lr = 1e-12;
    let report = train_kws(&tune, streaming.path(), "test", &mut |_| {}).unwrap();
    assert!(report.card.arch.stream_geometry().is_some());
    assert!(streaming.path().join("frames.onnx").is_file());
    let weights = |dir: &Path| {
        let (_, model) = load_package(dir, &Device::flex()).unwrap();
        model.named_tensors().unwrap()
    };
    let (start, tuned) = (weights(same.path()), weights(streaming.path()));
    let mut compared = 0;
    for (a, b) in start.iter().zip(&tuned) {
        assert_eq!((&a.name, &a.shape), (&b.name, &b.shape));
        if !hush_models::arch::is_trainable(&a.name) {
            continue;
        }
        let diff = a.data.iter().zip(&b.data).map(|(x, y)| (x - y).abs());
        let diff = diff.fold(0f32, f32::max);
        assert!(diff < 1e-6, "{}: moved {diff}", a.name);
        compared += 1;
    }
    assert!(compared >= 10, "{compared} trainable tensors compared");

    let mut back = cfg.clone();
    back.init_from = Some(streaming.path().to_path_buf());
    let err = train_kws(
        &back,
        tempfile::tempdir().unwrap().path(),
        "test",
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--init-from"), "{err}");
}
