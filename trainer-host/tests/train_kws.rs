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
use hush_host::train::train_kws;
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
