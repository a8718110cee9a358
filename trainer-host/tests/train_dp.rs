//! DP-SGD end to end on the bundled corpus (tiny 2-conv + 2-FC CNN): it trains, writes a
//! model package with `privacy.json`, records the release in the ledger before publishing,
//! and beats chance at a generous ε; bad configurations fail before any training.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use hush_host::accountant::{Accountant, Adjacency, PrivacyUnit};
use hush_host::demo::small_kws_config;
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::{LedgerStore, Mechanism};
use hush_host::train::dp::is_public_speaker;
use hush_host::train::{kws_initial_weights, train_kws_dp, DpConfig, NoiseTarget, PrivacyReport};
use hush_models::dp::ClipStrategy;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws")
}

#[test]
fn dp_sgd_trains_records_the_release_and_beats_chance() {
    let _one = common::one_training_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let ledger = dir.path().join("ledger.sqlite");
    let mut cfg = small_kws_config(&data(), 8, 2);
    cfg.patience = 100;
    let mut dp = DpConfig::new(30.0, 1e-3, 1.0);
    dp.clipping = ClipStrategy::PerLayerDim;
    dp.warm_start_public = 0.3;
    dp.warm_start_epochs = 10;
    dp.freeze_fraction = 0.25;
    dp.ledger = ledger.clone();
    dp.reproducible = true;
    let report = train_kws_dp(&cfg, &dp, &out, "test", &mut |e| {
        eprintln!(
            "epoch {} loss {:.3} val {:.3}",
            e.epoch, e.train_loss, e.val_accuracy
        )
    })
    .unwrap();
    let p = &report.privacy;
    eprintln!(
        "σ {:.3}, q {:.4}, {} steps, n {}, public {} speakers / {} clips, frozen {:?}",
        p.noise_multiplier,
        p.sampling_rate,
        p.steps,
        p.population,
        p.public_speakers,
        p.public_examples,
        p.frozen_layers
    );
    eprintln!("{}", p.epsilon_rdp);
    // The claim names δ, unit, adjacency and accountant, and meets the target.
    assert!(p.epsilon_rdp.epsilon <= 30.0 + 1e-6);
    assert_eq!(p.epsilon_rdp.accountant, Accountant::Rdp);
    assert_eq!(p.epsilon_rdp.unit, PrivacyUnit::Example);
    assert_eq!(p.epsilon_rdp.adjacency, Adjacency::AddRemove);
    let pld = p.epsilon_pld.unwrap();
    assert_eq!(pld.accountant, Accountant::Pld);
    assert!(pld.epsilon <= p.epsilon_rdp.epsilon * 1.05);
    assert!(p.public_examples > 0 && p.population > 0);
    // 8 trainable tensors, a quarter frozen; clip bounds cover the rest only.
    assert_eq!(p.frozen_layers.len(), 2);
    // The package, privacy.json and the card's copy of it.
    assert!(out.join("model.json").is_file());
    assert!(out.join("model.onnx").is_file());
    let written: PrivacyReport =
        serde_json::from_str(&std::fs::read_to_string(out.join("privacy.json")).unwrap()).unwrap();
    assert_eq!(&written, p);
    let options = &report.card.provenance.as_ref().unwrap().options;
    assert!(options["privacy"]["epsilon_rdp"]["epsilon"].is_number());
    // The ledger holds the release.
    let records = SqliteLedgerStore::open(&ledger).unwrap().records().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].release.mechanism, Mechanism::DpSgd);
    assert_eq!(records[0].release.event.steps, p.steps);
    assert_eq!(records[0].id, p.ledger_record);
    // Better than chance (1/12) on held-out speakers
    let test = &report.card.metrics.as_ref().unwrap().splits["test"];
    eprintln!("test accuracy {:.3} over {}", test.accuracy, test.examples);
    // (and above the majority class, `_unknown_`, at 4/15 of a speaker's clips).
    assert!(test.accuracy > 0.3, "test accuracy {}", test.accuracy);
}

fn refused(dp: &DpConfig, option: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let mut dp = dp.clone();
    dp.ledger = dir.path().join("ledger.sqlite");
    let cfg = small_kws_config(&data(), 3, 1);
    let mut epochs = 0;
    let err = train_kws_dp(&cfg, &dp, &out, "test", &mut |_| epochs += 1).unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(msg.contains(option), "{option}: {msg}");
    assert_eq!(epochs, 0, "{option}: trained before refusing");
    assert!(!out.exists(), "{option}: wrote a model");
    if dp.ledger.exists() {
        let n = SqliteLedgerStore::open(&dp.ledger)
            .unwrap()
            .records()
            .unwrap()
            .len();
        assert_eq!(n, 0);
    }
}

#[test]
fn bad_configurations_fail_before_training() {
    let ok = DpConfig::new(8.0, 1e-4, 1.0);
    refused(
        &DpConfig {
            clip: 0.0,
            ..ok.clone()
        },
        "--clip",
    );
    refused(
        &DpConfig {
            clip: -1.0,
            ..ok.clone()
        },
        "--clip",
    );
    refused(
        &DpConfig {
            sampling_rate: Some(0.0),
            ..ok.clone()
        },
        "--sampling-rate",
    );
    refused(
        &DpConfig {
            sampling_rate: Some(1.5),
            ..ok.clone()
        },
        "--sampling-rate",
    );
    refused(
        &DpConfig {
            freeze_fraction: 1.0,
            warm_start_public: 0.3,
            ..ok.clone()
        },
        "--freeze-fraction",
    );
    refused(
        &DpConfig {
            per_example_threads: 0,
            ..ok.clone()
        },
        "--per-example-threads",
    );
    // Without a warm start there is nothing to rank layers on.
    refused(
        &DpConfig {
            freeze_fraction: 0.5,
            ..ok.clone()
        },
        "--freeze-fraction",
    );
    refused(
        &DpConfig {
            noise: NoiseTarget::Epsilon(-1.0),
            ..ok.clone()
        },
        "--target-epsilon",
    );
    // ε = 0.01 over 3 epochs at q = 16/n needs σ ≈ 65, over the expected batch of 16.
    refused(
        &DpConfig {
            noise: NoiseTarget::Epsilon(0.01),
            ..ok.clone()
        },
        "--target-epsilon",
    );
    // δ must be below 1/n.
    refused(
        &DpConfig {
            delta: 0.1,
            ..ok.clone()
        },
        "--delta",
    );
    // Adaptive clipping: a quantile outside (0, 1), combined with layer normalisation, or a
    // count noise too small to leave the gradient any of σ.
    refused(
        &DpConfig {
            adaptive_clip_quantile: Some(1.5),
            ..ok.clone()
        },
        "--adaptive-clip-quantile",
    );
    refused(
        &DpConfig {
            adaptive_clip_quantile: Some(0.5),
            normalize_layers: true,
            ..ok.clone()
        },
        "--adaptive-clip-quantile",
    );
    refused(
        &DpConfig {
            adaptive_clip_quantile: Some(0.5),
            adaptive_clip_count_noise: Some(0.01),
            ..ok.clone()
        },
        "--adaptive-clip-quantile",
    );
    refused(
        &DpConfig {
            adaptive_clip_quantile: Some(0.5),
            adaptive_clip_lr: 0.0,
            ..ok.clone()
        },
        "--adaptive-clip-lr",
    );
    refused(
        &DpConfig {
            max_grad_memory_mb: 0,
            ..ok.clone()
        },
        "--max-grad-memory-mb",
    );
    // A budget below the planned release is refused up front by the ledger.
    refused(
        &DpConfig {
            budget_epsilon: Some(1.0),
            ..ok.clone()
        },
        "budget exceeded",
    );
}

#[test]
fn adaptive_clipping_moves_the_bound_and_accounts_the_count() {
    let _one = common::one_training_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let cfg = small_kws_config(&data(), 2, 3);
    let mut dp = DpConfig::new(30.0, 1e-3, 10.0);
    dp.ledger = dir.path().join("ledger.sqlite");
    dp.reproducible = true;
    dp.adaptive_clip_quantile = Some(0.5);
    // A small physical-batch budget: steps run as several physical batches.
    dp.max_grad_memory_mb = 1;
    let report = train_kws_dp(&cfg, &dp, &out, "test", &mut |_| {}).unwrap();
    let p = &report.privacy;
    let a = p.adaptive_clip.as_ref().unwrap();
    eprintln!(
        "σ {:.4}, z_Δ {:.4}, σ_b {:.3}, clip {} → {:.4}, {} steps",
        p.noise_multiplier,
        a.gradient_noise_multiplier,
        a.count_noise_std,
        p.clip,
        a.final_clip,
        p.steps
    );
    // The gradient gets z_Δ = (z⁻² − (2σ_b)⁻²)^(-1/2) > z; z is what the ledger accounts.
    let z = p.noise_multiplier;
    let zd = a.gradient_noise_multiplier;
    assert!(zd > z);
    let combined = (zd.powi(-2) + (2.0 * a.count_noise_std).powi(-2)).powf(-0.5);
    assert!((combined - z).abs() < 1e-9 * z);
    assert!((a.count_noise_std - p.expected_batch / 20.0).abs() < 1e-12);
    assert!(p.epsilon_rdp.epsilon <= 30.0 + 1e-6);
    // A bound of 10 clips almost nothing, so it shrinks toward the median norm.
    assert!(a.final_clip < 10.0, "{}", a.final_clip);
    let written: PrivacyReport =
        serde_json::from_str(&std::fs::read_to_string(out.join("privacy.json")).unwrap()).unwrap();
    assert_eq!(&written, p);
}

/// The privacy audit scores its canaries by how far each weight moved from
/// `kws_initial_weights`: those must be the weights DP-SGD starts from. With a learning
/// rate of 1e-9 (AdamW moves a weight at most about lr a step) the released weights are
/// the initial ones to 1e-6, and a different seed's are not.
/// (Each training test here holds `one_training_at_a_time`: burn's CPU backend draws
/// dropout masks and initial weights from one process-wide generator, and another test's
/// training at the same moment once changed the weights drawn from this test's seed.)
#[test]
fn dp_sgd_starts_from_the_public_initial_weights() {
    let _one = common::one_training_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let mut cfg = small_kws_config(&data(), 1, 7);
    cfg.lr = 1e-9;
    cfg.keep_last_epoch = true;
    let mut dp = DpConfig::new(8.0, 1e-4, 1.0);
    dp.ledger = dir.path().join("ledger.sqlite");
    dp.reproducible = true;
    train_kws_dp(&cfg, &dp, &out, "test", &mut |_| {}).unwrap();
    let released =
        hush_models::checkpoint::load_safetensors(&out.join(hush_models::package::WEIGHTS))
            .unwrap();
    let max_diff = |init: &[hush_models::checkpoint::NamedTensor]| {
        let mut worst = 0f32;
        let mut compared = 0;
        for t in init
            .iter()
            .filter(|t| hush_models::arch::is_trainable(&t.name))
        {
            let r = released.iter().find(|r| r.name == t.name).unwrap();
            for (a, b) in t.data.iter().zip(&r.data) {
                worst = worst.max((a - b).abs());
                compared += 1;
            }
        }
        assert!(compared > 1000, "{compared}");
        worst
    };
    let same = max_diff(&kws_initial_weights(&cfg).unwrap());
    assert!(same < 1e-6, "{same}");
    cfg.seed = 8;
    let other = max_diff(&kws_initial_weights(&cfg).unwrap());
    assert!(other > 1e-2, "{other}");
}

#[test]
fn public_speakers_are_a_deterministic_fraction() {
    let ids: Vec<String> = (0..4000).map(|i| format!("{i:08x}")).collect();
    let public = ids.iter().filter(|s| is_public_speaker(s, 0.25)).count();
    assert!((900..1100).contains(&public), "{public}");
    assert!(ids.iter().all(|s| !is_public_speaker(s, 0.0)));
    let again = ids.iter().filter(|s| is_public_speaker(s, 0.25)).count();
    assert_eq!(public, again);
    // Nested: a speaker public at 0.1 is public at 0.25.
    assert!(ids
        .iter()
        .filter(|s| is_public_speaker(s, 0.1))
        .all(|s| is_public_speaker(s, 0.25)));
}

#[test]
fn cli_refuses_bad_dp_flags() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--data"];
        let d = data();
        let d = d.to_str().unwrap().to_string();
        args.push(&d);
        let out = dir.path().join("m");
        let out = out.to_str().unwrap().to_string();
        args.extend(["--out", &out]);
        args.extend(extra);
        Command::new(env!("CARGO_BIN_EXE_hush-host"))
            .args(&args)
            .output()
            .unwrap()
    };
    let o = run(&["--dp", "--clip", "1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--target-epsilon"));
    let o = run(&["--dp", "--target-epsilon", "8", "--clipping", "sideways"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("clipping"));
    let o = run(&[
        "--dp",
        "--target-epsilon",
        "8",
        "--adaptive-clip-quantile",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--adaptive-clip-quantile"));
    // Adaptive-clipping options need the quantile.
    let o = run(&["--dp", "--target-epsilon", "8", "--adaptive-clip-lr", "0.1"]);
    assert!(!o.status.success());
    // DP flags without --dp.
    let o = run(&["--target-epsilon", "8"]);
    assert!(!o.status.success());
    assert!(!dir.path().join("m").exists());
}

#[test]
fn class_weights_and_weight_averaging_are_refused_under_dp() {
    // --balance-classes would weight the loss by the private clips' class counts, which no
    // noise covers: refused before any training or ledger record.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let mut dp = DpConfig::new(8.0, 1e-4, 1.0);
    dp.ledger = dir.path().join("ledger.sqlite");
    let mut cfg = small_kws_config(&data(), 3, 1);
    cfg.balance_classes = true;
    let mut epochs = 0;
    let err = train_kws_dp(&cfg, &dp, &out, "test", &mut |_| epochs += 1).unwrap_err();
    assert!(err.to_string().contains("--balance-classes"), "{err}");
    assert_eq!(epochs, 0);
    assert!(!out.exists());
    assert!(!dp.ledger.exists());

    // Weight averaging would re-estimate batch norms on the private clips outside the
    // noise: refused the same way.
    cfg.balance_classes = false;
    cfg.swa_epochs = 1;
    let err = train_kws_dp(&cfg, &dp, &out, "test", &mut |_| epochs += 1).unwrap_err();
    assert!(err.to_string().contains("--swa-epochs"), "{err}");
    assert_eq!(epochs, 0);
    assert!(!out.exists());
    assert!(!dp.ledger.exists());
}
