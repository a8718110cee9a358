//! Gradient inversion: the hand-written leak-CNN against burn, its exact second-order pass
//! against finite differences, iDLG, and the attack end to end on a real corpus clip with
//! and without DP.
#![allow(clippy::unwrap_used)]

use burn::tensor::Device;
use hush_host::audit::invert::{
    idlg_label, invert, objective, shared_update, total_variation, DpNoise, InvertConfig,
};
use hush_host::audit::leak_net::{LeakNet, LeakShape};
use hush_models::arch::{ArchConfig, IoShape, KwsModel, LeakCnnConfig};
use hush_models::step::{loss_and_grads, Batch};

fn small_arch(frames: usize, bins: usize, classes: usize) -> ArchConfig {
    ArchConfig::LeakCnn(LeakCnnConfig {
        io: IoShape {
            frames,
            bins,
            classes,
        },
        channels: [4, 8],
        hidden: 16,
        dropout: 0.0,
    })
}

fn model(arch: &ArchConfig, seed: u64, device: &Device) -> KwsModel {
    device.seed(seed);
    let mut m = arch.init(device).unwrap();
    let bins = arch.io().bins;
    let mean: Vec<f32> = (0..bins).map(|i| 0.1 * i as f32).collect();
    let scale: Vec<f32> = (0..bins).map(|i| 1.0 + 0.05 * i as f32).collect();
    m.set_input_norm(&mean, &scale).unwrap();
    m
}

fn features(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0 + (i % 7) as f32 * 0.2
        })
        .collect()
}

#[test]
fn hand_written_leak_cnn_matches_burn_loss_and_gradients() {
    let arch = small_arch(14, 12, 5);
    let device = Device::flex().autodiff();
    let m = model(&arch, 3, &device);
    let net = LeakNet::from_model(&arch, &m).unwrap();
    let f = features(14 * 12, 1);
    let label = 2;
    let mut targets = vec![0.0; 5];
    targets[label] = 1.0;
    let batch = Batch {
        features: f.clone(),
        targets,
        batch: 1,
        frames: 14,
        bins: 12,
        classes: 5,
    };
    let (loss, grads) = loss_and_grads(&m, &batch, &device).unwrap();
    let named = m.named_grads(&grads).unwrap();
    let (my_loss, my_grads) = net.weight_grad(&net.normalise(&f), label);
    assert!(
        (f64::from(loss) - my_loss).abs() < 1e-4,
        "{loss} vs {my_loss}"
    );
    let mut off = 0;
    for t in &named {
        let mine = &my_grads[off..off + t.len()];
        let scale = t.data.iter().fold(1e-6f32, |a, v| a.max(v.abs()));
        for (a, b) in t.data.iter().zip(mine) {
            assert!(
                (f64::from(*a) - b).abs() < 1e-4 * f64::from(scale),
                "{}: burn {a} vs {b}",
                t.name
            );
        }
        off += t.len();
    }
    assert_eq!(off, my_grads.len());
}

#[test]
fn second_order_pass_matches_finite_differences_of_the_objective() {
    let arch = small_arch(12, 10, 3);
    let device = Device::flex();
    let m = model(&arch, 5, &device);
    let net = LeakNet::from_model(&arch, &m).unwrap();
    let x_true = net.normalise(&features(120, 2));
    let target = net.weight_grad(&x_true, 1).1;
    let x = net.normalise(&features(120, 9));
    let (_, _, grad) = objective(&net, &x, 1, &target, 0.0);
    let h = 1e-5;
    let mut checked = 0;
    for i in (0..x.len()).step_by(7) {
        let mut xp = x.clone();
        xp[i] += h;
        let mut xm = x.clone();
        xm[i] -= h;
        let fd = (objective(&net, &xp, 1, &target, 0.0).0
            - objective(&net, &xm, 1, &target, 0.0).0)
            / (2.0 * h);
        assert!(
            (fd - grad[i]).abs() < 1e-5 + 1e-3 * fd.abs(),
            "coordinate {i}: finite difference {fd} vs exact {}",
            grad[i]
        );
        checked += 1;
    }
    assert!(checked > 10);
}

#[test]
fn tv_gradient_matches_finite_differences() {
    let x: Vec<f64> = features(30, 4).iter().map(|&v| f64::from(v)).collect();
    let (_, g) = total_variation(&x, 5, 6);
    let h = 1e-7;
    for i in 0..30 {
        let mut xp = x.clone();
        xp[i] += h;
        let mut xm = x.clone();
        xm[i] -= h;
        let fd = (total_variation(&xp, 5, 6).0 - total_variation(&xm, 5, 6).0) / (2.0 * h);
        assert!((fd - g[i]).abs() < 1e-6, "{i}: {fd} vs {}", g[i]);
    }
}

#[test]
fn idlg_recovers_the_label_from_the_last_layer_without_noise() {
    let arch = small_arch(12, 10, 6);
    let m = model(&arch, 8, &Device::flex());
    let net = LeakNet::from_model(&arch, &m).unwrap();
    for label in 0..6 {
        let x = net.normalise(&features(120, label as u64 + 20));
        let g = shared_update(&net, &x, label, None, 0).unwrap();
        assert_eq!(idlg_label(&net, &g), label);
        // Clipping alone scales the update: the sign pattern, and the label, survive.
        let dp = DpNoise {
            clip: 1e-3,
            noise_multiplier: 0.0,
        };
        let g = shared_update(&net, &x, label, Some(dp), 0).unwrap();
        assert_eq!(idlg_label(&net, &g), label);
    }
}

#[test]
fn other_architectures_are_refused_by_name() {
    let io = IoShape {
        frames: 20,
        bins: 10,
        classes: 3,
    };
    let arch = ArchConfig::default_for("ds-cnn-s", io).unwrap();
    let m = arch.init(&Device::flex()).unwrap();
    let err = LeakNet::from_model(&arch, &m).unwrap_err().to_string();
    assert!(
        err.contains("leak-cnn") && err.contains("ds-cnn-s"),
        "{err}"
    );
    let shape = LeakShape {
        frames: 12,
        bins: 10,
        channels: [2, 2],
        hidden: 4,
        classes: 3,
    };
    let err = LeakNet::from_tensors(shape, &[]).unwrap_err().to_string();
    assert!(err.contains("conv1.weight"), "{err}");
}

#[test]
fn inversion_recovers_random_features_of_a_small_model() {
    let arch = small_arch(16, 12, 4);
    let m = model(&arch, 11, &Device::flex());
    let net = LeakNet::from_model(&arch, &m).unwrap();
    let x = net.normalise(&features(16 * 12, 3));
    let g = shared_update(&net, &x, 1, None, 0).unwrap();
    let cfg = InvertConfig {
        iterations: 400,
        restarts: 2,
        tv_weight: 0.0,
        ..InvertConfig::default()
    };
    let inv = invert(&net, &g, idlg_label(&net, &g), &cfg, &mut || {}).unwrap();
    let mse: f64 = x
        .iter()
        .zip(&inv.normalised)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / x.len() as f64;
    let var: f64 = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
    eprintln!(
        "grad loss {:.4}, feature mse {mse:.4} (signal power {var:.4})",
        inv.grad_loss
    );
}

#[test]
#[ignore = "exploration"]
fn explore_real_clip() {
    use hush_device::audio::read_audio;
    use hush_device::features::{FeatureConfig, FeatureKind};
    use hush_device::infer::clip_features;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws/yes");
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let audio = read_audio(&files[0]).unwrap();
    let mut fc = FeatureConfig::kaldi(FeatureKind::Fbank);
    fc.mel.num_bins = 40;
    let f = clip_features(&fc, &audio.samples, 98).unwrap();
    for (ch, hidden, iters, tv) in [
        ([8, 16], 32, 200, 0.0),
        ([8, 16], 32, 200, 0.01),
        ([32, 64], 128, 100, 0.01),
    ] {
        let arch = ArchConfig::LeakCnn(LeakCnnConfig {
            io: IoShape {
                frames: 98,
                bins: 40,
                classes: 12,
            },
            channels: ch,
            hidden,
            dropout: 0.0,
        });
        let device = Device::flex();
        device.seed(1);
        let mut m = arch.init(&device).unwrap();
        let mean: f32 = f.iter().sum::<f32>() / f.len() as f32;
        let var: f32 = f.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / f.len() as f32;
        m.set_input_norm(&vec![mean; 40], &vec![1.0 / var.sqrt(); 40])
            .unwrap();
        let net = LeakNet::from_model(&arch, &m).unwrap();
        let x = net.normalise(&f);
        let g = shared_update(&net, &x, 3, None, 0).unwrap();
        let cfg = InvertConfig {
            iterations: iters,
            restarts: 1,
            tv_weight: tv,
            ..InvertConfig::default()
        };
        let t0 = std::time::Instant::now();
        let inv = invert(&net, &g, idlg_label(&net, &g), &cfg, &mut || {}).unwrap();
        let dt = t0.elapsed().as_secs_f64() / iters as f64;
        let mse: f64 = x
            .iter()
            .zip(&inv.normalised)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            / x.len() as f64;
        let p: f64 = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
        eprintln!("{ch:?} h{hidden} it{iters} tv{tv}: grad loss {:.4}, mse {mse:.4} (power {p:.4}), {:.1} ms/it, label {}", inv.grad_loss, dt * 1e3, idlg_label(&net, &g));
    }
}
