//! BEST-RQ pretraining end to end on a slice of the bundled ASR corpus (20-bin features,
//! `ctc-gru-small`): the loss falls, the encoder folder is complete, CTC fine-tuning from
//! it loads the encoder exactly, DP pretraining records one release in the ledger, and bad
//! flags are refused with errors that name them (the corpus given does not exist, so an
//! error about it would mean the flags were let through).

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::Device;
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::{LedgerStore, Mechanism};
use hush_host::train::asr::{train_asr, AsrTrainConfig};
use hush_host::train::pretrain::{pretrain, PretrainConfig};
use hush_host::train::{Augment, DpConfig};
use hush_models::asr::ctc_gru::is_encoder_tensor;
use hush_models::dp::ClipStrategy;
use hush_models::package::load_asr_package;
use hush_models::pretrained::{load_encoder_into, read_encoder};

mod common;
use common::slice_corpus;

const SPEAKERS: [&str; 20] = [
    "01fddb35", "30487587", "40cb36e1", "49da0ba1", "535258af", "80ef2029", "82f4fdb2", "83283e23",
    "98889645", "b4330125", "c8759670", "c8946917", "d1b04f5c", "d5e80b13", "d71e25f7", "dd792486",
    "deffdd43", "e487158a", "e601eb96", "f08efda2",
];

/// Every bundled speaker's first `k` utterances in a temporary folder.
fn corpus(k: usize) -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr");
    let dir = tempfile::tempdir().unwrap();
    slice_corpus(&src, dir.path(), &SPEAKERS, k);
    dir
}

fn small_config(data: &Path) -> PretrainConfig {
    let mut cfg = PretrainConfig::new(data, "ctc-gru-small");
    cfg.features.mel.num_bins = 20;
    cfg.bestrq.codebook_size = 32;
    cfg.epochs = 4;
    cfg.batch_size = 8;
    cfg.lr = 3e-3;
    cfg
}

#[test]
fn pretraining_loss_falls_and_fine_tuning_loads_the_encoder() {
    let data = corpus(4);
    let out = tempfile::tempdir().unwrap();
    let enc = out.path().join("encoder");
    let cfg = small_config(data.path());
    let report = pretrain(&cfg, None, &enc, "test", &mut |e| {
        eprintln!(
            "epoch {} loss {:.3} val {:.3}",
            e.epoch, e.train_loss, e.val_loss
        )
    })
    .unwrap();
    let curve = &report.card.loss_curve;
    assert_eq!(curve.len(), 4);
    assert!(curve.iter().all(|e| e.train_loss.is_finite()));
    assert!(
        curve[3].train_loss < 0.85 * curve[0].train_loss,
        "BEST-RQ loss did not fall: {curve:?}"
    );
    assert!(curve[3].val_loss < curve[0].val_loss, "{curve:?}");
    assert!(report.privacy.is_none() && report.record.is_none());
    for f in ["encoder.json", "weights.safetensors"] {
        assert!(enc.join(f).is_file(), "{f} missing");
    }
    let (card, tensors) = read_encoder(&enc).unwrap();
    assert_eq!(card.bestrq, cfg.bestrq);
    assert_eq!(card.loss_curve.len(), curve.len());
    assert_eq!(card.loss_curve[3].train_loss, curve[3].train_loss);
    assert!(tensors.iter().all(|t| is_encoder_tensor(&t.name)));
    assert!(tensors.iter().any(|t| t.name == "gru.0.new.hidden.weight"));

    // Loading into a fresh recogniser: every encoder tensor equal, the output layer fresh.
    let device = Device::flex();
    let fresh = card.arch.init(&device).unwrap();
    let fresh_out: Vec<_> = fresh
        .named_tensors()
        .unwrap()
        .into_iter()
        .filter(|t| !is_encoder_tensor(&t.name))
        .collect();
    let loaded = load_encoder_into(fresh, tensors.clone(), card.arch.name(), &enc).unwrap();
    let after = loaded.named_tensors().unwrap();
    for t in &tensors {
        assert_eq!(
            after.iter().find(|a| a.name == t.name),
            Some(t),
            "{}",
            t.name
        );
    }
    for t in &fresh_out {
        assert_eq!(
            after.iter().find(|a| a.name == t.name),
            Some(t),
            "{}",
            t.name
        );
    }

    // Fine-tuning with the encoder frozen: the released model keeps it exactly.
    let model_dir = out.path().join("model");
    let mut ft = AsrTrainConfig::new(data.path(), "ctc-gru-small");
    ft.features = cfg.features.clone();
    ft.epochs = 1;
    ft.batch_size = 8;
    ft.beam = 1;
    ft.augment = Augment::none();
    ft.init = Some(enc.clone());
    ft.freeze_encoder = true;
    train_asr(&ft, &model_dir, "test", &mut |_| {}).unwrap();
    let (_, model) = load_asr_package(&model_dir, &device).unwrap();
    let released = model.named_tensors().unwrap();
    for t in &tensors {
        assert_eq!(
            released.iter().find(|a| a.name == t.name),
            Some(t),
            "{}",
            t.name
        );
    }
    let trained_out = released.iter().find(|t| t.name == "out.weight").unwrap();
    let fresh_w = fresh_out.iter().find(|t| t.name == "out.weight").unwrap();
    assert_ne!(trained_out, fresh_w, "the output layer was trained");

    // An encoder of other features is refused, naming --init.
    let mut other = ft.clone();
    other.features.mel.num_bins = 24;
    let err = train_asr(&other, &out.path().join("m2"), "test", &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("--init"), "{err}");
}

#[test]
fn dp_pretraining_records_one_release() {
    let data = corpus(3);
    let out = tempfile::tempdir().unwrap();
    let enc = out.path().join("encoder");
    let mut cfg = small_config(data.path());
    cfg.epochs = 1;
    cfg.batch_size = 12;
    let mut dp = DpConfig::new(10.0, 1e-3, 1.0);
    dp.clipping = ClipStrategy::PerLayerDim;
    dp.warm_start_public = 0.3;
    dp.warm_start_epochs = 1;
    dp.freeze_fraction = 0.25;
    dp.ledger = out.path().join("ledger.sqlite");
    dp.reproducible = true;
    let report = pretrain(&cfg, Some(&dp), &enc, "test", &mut |e| {
        eprintln!("epoch {} loss {:.3}", e.epoch, e.train_loss)
    })
    .unwrap();
    let records = SqliteLedgerStore::open(&dp.ledger)
        .unwrap()
        .records()
        .unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.release.mechanism, Mechanism::DpSgd);
    assert!(r.release.released.starts_with("asr encoder"));
    let p = report.privacy.as_ref().unwrap();
    assert_eq!(report.record.as_ref().unwrap().id, r.id);
    assert_eq!(p.steps, r.release.event.steps);
    assert!(p.epsilon_rdp.epsilon <= 10.0 * 1.01, "{}", p.epsilon_rdp);
    assert!(p.public_examples > 0 && p.population > 0);
    // A quarter of the trainable tensors (encoder and head) frozen after the warm start.
    assert!(!p.frozen_layers.is_empty());
    assert!(enc.join("privacy.json").is_file());
    assert!(report.card.privacy.is_some());
    assert_eq!(report.card.loss_curve.first().map(|e| e.epoch), Some(0));
}

fn hush_host(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_are_refused_before_any_data_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let missing: PathBuf = dir.path().join("no-such-corpus");
    let missing = missing.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let pretrain = |extra: &[&str]| {
        let mut args = vec!["pretrain", "--data", missing, "--out", out];
        args.extend(extra);
        hush_host(&args)
    };
    let refused = |(ok, err): (bool, String), needle: &str| {
        assert!(!ok, "accepted; expected an error naming {needle}");
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    };
    refused(pretrain(&["--dp"]), "--target-epsilon");
    refused(pretrain(&["--target-epsilon", "4"]), "--dp");
    refused(
        pretrain(&["--dp", "--target-epsilon", "4", "--freeze-fraction", "0.5"]),
        "--freeze-fraction",
    );
    refused(
        pretrain(&["--dp", "--target-epsilon", "4", "--clipping", "sideways"]),
        "clipping",
    );
    refused(
        pretrain(&["--dp", "--target-epsilon", "4", "--delta", "2"]),
        "--delta",
    );
    refused(pretrain(&["--mask-fraction", "1.5"]), "mask_fraction");
    refused(
        pretrain(&["--arch", "conformer"]),
        "unknown ASR architecture",
    );
    refused(pretrain(&["--epochs", "0"]), "--epochs");

    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--data", missing, "--out", out];
        args.extend(extra);
        hush_host(&args)
    };
    refused(train(&["--task", "asr", "--freeze-encoder"]), "--init");
    let encoder = dir.path().join("no-such-encoder");
    let encoder = encoder.to_str().unwrap();
    refused(
        train(&["--task", "asr", "--init", encoder]),
        "not a directory",
    );
    refused(train(&["--task", "kws", "--init", encoder]), "--task asr");
    assert!(!Path::new(out).exists(), "nothing written");
}
