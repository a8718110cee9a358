//! Features against golden fixtures from kaldi-native-fbank and librosa
//! (tests/fixtures/features/make_fixtures.py).

use std::path::PathBuf;

use hush_device::audio::read_audio;
use hush_device::features::npy::read_npy_f32;
use hush_device::features::{compute, FeatureConfig, FeatureKind, Padding, WindowKind};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/features")
        .join(name)
}

fn clip(rate: u32) -> Vec<f32> {
    let name = if rate == 16_000 {
        "speech_16k.wav"
    } else {
        "speech_22k.wav"
    };
    let a = read_audio(&fixture(name)).unwrap();
    assert_eq!(a.sample_rate, rate);
    a.samples
}

/// Max abs difference between hush's features and a fixture.
fn max_diff(cfg: &FeatureConfig, rate: u32, name: &str) -> f32 {
    let f = compute(cfg, &clip(rate)).unwrap();
    let (want, shape) = read_npy_f32(&fixture(&format!("{name}.npy"))).unwrap();
    assert_eq!(shape, vec![f.num_frames, f.dim], "{name}: shape");
    let d = f
        .data
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    let at = f
        .data
        .iter()
        .zip(&want)
        .position(|(a, b)| (a - b).abs() == d)
        .unwrap_or(0);
    eprintln!(
        "{name}: max abs diff {d:e} at frame {} bin {} (hush {}, ref {})",
        at / f.dim,
        at % f.dim,
        f.data[at],
        want[at]
    );
    d
}

fn kaldi_fbank(bins: usize, len: f32, shift: f32, window: WindowKind, rate: u32) -> FeatureConfig {
    let mut c = FeatureConfig::kaldi(FeatureKind::Fbank);
    c.mel.num_bins = bins;
    c.frame.frame_length_ms = len;
    c.frame.frame_shift_ms = shift;
    c.frame.window = window;
    c.frame.sample_rate = rate;
    c
}

const TOL: f32 = 1e-3;

#[test]
fn kaldi_fbank_matches_kaldi_native_fbank() {
    let cases = [
        (
            40,
            25.0,
            10.0,
            WindowKind::Povey,
            "kaldi_fbank40_25_10_povey_16k",
        ),
        (
            80,
            25.0,
            10.0,
            WindowKind::Povey,
            "kaldi_fbank80_25_10_povey_16k",
        ),
        (
            40,
            30.0,
            20.0,
            WindowKind::Hamming,
            "kaldi_fbank40_30_20_hamming_16k",
        ),
        (
            80,
            30.0,
            20.0,
            WindowKind::Hamming,
            "kaldi_fbank80_30_20_hamming_16k",
        ),
    ];
    for (bins, len, shift, window, name) in cases {
        let d = max_diff(&kaldi_fbank(bins, len, shift, window, 16_000), 16_000, name);
        assert!(d <= TOL, "{name}: {d}");
    }
}

#[test]
fn kaldi_fbank_without_snip_edges_mirrors_like_kaldi() {
    let mut c = kaldi_fbank(80, 25.0, 10.0, WindowKind::Povey, 16_000);
    c.frame.padding = Padding::KaldiMirror;
    let d = max_diff(&c, 16_000, "kaldi_fbank80_25_10_povey_nosnip_16k");
    assert!(d <= TOL, "{d}");
}

#[test]
fn kaldi_features_at_22050_hz() {
    let c = kaldi_fbank(80, 25.0, 10.0, WindowKind::Povey, 22_050);
    let d = max_diff(&c, 22_050, "kaldi_fbank80_25_10_povey_22k");
    assert!(d <= TOL, "{d}");
    let mut m = FeatureConfig::kaldi(FeatureKind::Mfcc);
    m.frame.sample_rate = 22_050;
    let d = max_diff(&m, 22_050, "kaldi_mfcc13_23_22k");
    assert!(d <= TOL, "{d}");
}

#[test]
fn kaldi_mfcc_matches_kaldi_native_fbank() {
    let d = max_diff(
        &FeatureConfig::kaldi(FeatureKind::Mfcc),
        16_000,
        "kaldi_mfcc13_23_16k",
    );
    assert!(d <= TOL, "{d}");
}

#[test]
fn librosa_preset_matches_librosa() {
    let mut c = FeatureConfig::librosa(FeatureKind::Fbank);
    let d = max_diff(&c, 16_000, "librosa_logmel80_16k");
    assert!(d <= TOL, "{d}");
    c.mel.num_bins = 40;
    c.frame.sample_rate = 22_050;
    let d = max_diff(&c, 22_050, "librosa_logmel40_22k");
    assert!(d <= TOL, "{d}");
    let mut m = FeatureConfig::librosa(FeatureKind::Mfcc);
    let d = max_diff(&m, 16_000, "librosa_mfcc13_40_16k");
    assert!(d <= TOL, "{d}");
    m.frame.sample_rate = 22_050;
    let d = max_diff(&m, 22_050, "librosa_mfcc13_40_22k");
    assert!(d <= TOL, "{d}");
}
