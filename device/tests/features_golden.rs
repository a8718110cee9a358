//! Features against golden fixtures from kaldi-native-fbank and librosa
//! (tests/fixtures/features/make_fixtures.py).
//!
//! On corpus speech every cell must be within 1e-3. The hand-made espeak clips have a few
//! near-empty low-frequency cells where kaldi-native-fbank's own FFT is only float-accurate
//! (the fixtures' docstring shows it); there only cells within 70 dB of their frame's peak
//! get 1e-3, and every cell a sanity bound.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

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

/// How a fixture is compared.
#[derive(Clone, Copy)]
enum Domain {
    /// Natural-log energies: cells more than 70 dB below their frame's loudest bin are
    /// below float32 rounding (see the fixtures README) and only get the loose bound.
    LogE,
    /// Decibels, same rule.
    Db,
    /// Cepstra: every cell.
    Cepstra,
}

/// Max abs difference between hush's features and a fixture over well-conditioned
/// cells, and over all cells.
fn max_diff(cfg: &FeatureConfig, rate: u32, name: &str, domain: Domain) -> (f32, f32) {
    max_diff_on(cfg, &clip(rate), name, domain)
}

fn max_diff_on(cfg: &FeatureConfig, x: &[f32], name: &str, domain: Domain) -> (f32, f32) {
    let f = compute(cfg, x).unwrap();
    let (want, shape) = read_npy_f32(&fixture(&format!("{name}.npy"))).unwrap();
    assert_eq!(shape, vec![f.num_frames, f.dim], "{name}: shape");
    let range = match domain {
        Domain::LogE => 7.0 * std::f32::consts::LN_10,
        Domain::Db => 70.0,
        Domain::Cepstra => f32::INFINITY,
    };
    let (mut cond, mut all, mut excluded) = (0.0f32, 0.0f32, 0);
    for (got, want) in f.data.chunks(f.dim).zip(want.chunks(f.dim)) {
        let peak = want.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for (a, b) in got.iter().zip(want) {
            let d = (a - b).abs();
            all = all.max(d);
            if *b >= peak - range {
                cond = cond.max(d);
            } else {
                excluded += 1;
            }
        }
    }
    eprintln!(
        "{name}: max abs diff {cond:.3e} over cells within 70 dB of their frame's peak \
         ({excluded} of {} cells below), {all:.3e} over all",
        f.data.len()
    );
    (cond, all)
}

/// The acceptance bound, and a sanity bound for cells below float32 rounding.
const TOL: f32 = 1e-3;
const TOL_ALL: f32 = 2e-2;

fn check(cfg: &FeatureConfig, rate: u32, name: &str, domain: Domain) {
    let (cond, all) = max_diff(cfg, rate, name, domain);
    assert!(cond <= TOL && all <= TOL_ALL, "{name}: {cond} / {all}");
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
        check(
            &kaldi_fbank(bins, len, shift, window, 16_000),
            16_000,
            name,
            Domain::LogE,
        );
    }
}

/// Corpus speech (a keyword clip and a spoken command from `data/corpus`, and the command
/// at 22.05 kHz): every configuration of the acceptance, every cell within 1e-3.
#[test]
fn kaldi_features_match_kaldi_native_fbank_on_corpus_speech_in_every_cell() {
    let mut worst = 0.0f32;
    for (clip, rate) in [
        ("corpus_kws_yes", 16_000),
        ("corpus_asr", 16_000),
        ("corpus_asr", 22_050),
    ] {
        let tag = if rate == 16_000 { "16k" } else { "22k" };
        let x = read_audio(&fixture(&format!("{clip}_{tag}.wav"))).unwrap();
        assert_eq!(x.sample_rate, rate);
        let mut cases = vec![(
            kaldi_fbank(80, 25.0, 10.0, WindowKind::Povey, rate),
            format!("{clip}_fbank80_25_10_povey_{tag}"),
            Domain::LogE,
        )];
        let mut mfcc = FeatureConfig::kaldi(FeatureKind::Mfcc);
        mfcc.frame.sample_rate = rate;
        cases.push((mfcc, format!("{clip}_mfcc13_23_{tag}"), Domain::Cepstra));
        if rate == 16_000 {
            for (bins, len, shift, window, geometry) in [
                (40, 25.0, 10.0, WindowKind::Povey, "25_10_povey"),
                (40, 30.0, 20.0, WindowKind::Hamming, "30_20_hamming"),
                (80, 30.0, 20.0, WindowKind::Hamming, "30_20_hamming"),
            ] {
                cases.push((
                    kaldi_fbank(bins, len, shift, window, rate),
                    format!("{clip}_fbank{bins}_{geometry}_{tag}"),
                    Domain::LogE,
                ));
            }
        }
        for (cfg, name, domain) in cases {
            let (_, all) = max_diff_on(&cfg, &x.samples, &name, domain);
            assert!(all <= TOL, "{name}: {all} over all cells");
            worst = worst.max(all);
        }
    }
    eprintln!("corpus speech: max abs diff {worst:.3e} over every cell of every fixture");
}

#[test]
fn kaldi_fbank_without_snip_edges_mirrors_like_kaldi() {
    let mut c = kaldi_fbank(80, 25.0, 10.0, WindowKind::Povey, 16_000);
    c.frame.padding = Padding::KaldiMirror;
    check(
        &c,
        16_000,
        "kaldi_fbank80_25_10_povey_nosnip_16k",
        Domain::LogE,
    );
}

#[test]
fn kaldi_features_at_22050_hz() {
    let c = kaldi_fbank(80, 25.0, 10.0, WindowKind::Povey, 22_050);
    check(&c, 22_050, "kaldi_fbank80_25_10_povey_22k", Domain::LogE);
    let mut m = FeatureConfig::kaldi(FeatureKind::Mfcc);
    m.frame.sample_rate = 22_050;
    check(&m, 22_050, "kaldi_mfcc13_23_22k", Domain::Cepstra);
}

#[test]
fn kaldi_mfcc_matches_kaldi_native_fbank() {
    check(
        &FeatureConfig::kaldi(FeatureKind::Mfcc),
        16_000,
        "kaldi_mfcc13_23_16k",
        Domain::Cepstra,
    );
}

#[test]
fn librosa_preset_matches_librosa() {
    let mut c = FeatureConfig::librosa(FeatureKind::Fbank);
    check(&c, 16_000, "librosa_logmel80_16k", Domain::Db);
    c.mel.num_bins = 40;
    c.frame.sample_rate = 22_050;
    check(&c, 22_050, "librosa_logmel40_22k", Domain::Db);
    let mut m = FeatureConfig::librosa(FeatureKind::Mfcc);
    check(&m, 16_000, "librosa_mfcc13_40_16k", Domain::Cepstra);
    m.frame.sample_rate = 22_050;
    check(&m, 22_050, "librosa_mfcc13_40_22k", Domain::Cepstra);
}

#[test]
fn kaldi_fbank_on_the_clip_without_noise_floor() {
    let a = read_audio(&fixture("speech_clean_16k.wav")).unwrap();
    let c = kaldi_fbank(80, 25.0, 10.0, WindowKind::Povey, 16_000);
    let (cond, all) = max_diff_on(
        &c,
        &a.samples,
        "kaldi_fbank80_25_10_povey_clean_16k",
        Domain::LogE,
    );
    assert!(cond <= TOL && all <= TOL_ALL, "{cond} / {all}");
}

#[test]
fn non_16k_input_resampled_to_16k_is_close_to_the_16k_features() {
    // The CLI path: a 22.05 kHz file resampled to the 16 kHz feature rate. The 16 kHz
    // fixture clip was resampled by sox from the same source, so only the two
    // resamplers differ; compare in the well-conditioned cells with a looser bound.
    let a = read_audio(&fixture("speech_22k.wav")).unwrap();
    let c = FeatureConfig::kaldi(FeatureKind::Fbank);
    let f = hush_device::features::compute_audio(&c, &a).unwrap();
    let (want, shape) = read_npy_f32(&fixture("kaldi_fbank80_25_10_povey_16k.npy")).unwrap();
    assert_eq!(shape, vec![f.num_frames, f.dim]);
    let mut worst = 0.0f32;
    let mut sum = 0.0f64;
    for (got, want) in f.data.chunks(80).zip(want.chunks(80)) {
        let peak = want.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for (j, (a, b)) in got.iter().zip(want).enumerate() {
            // Only bins within 40 dB of the peak and below 6.5 kHz (mel bin 72): the
            // resamplers differ in their transition bands.
            if j < 72 && *b >= peak - 4.0 * std::f32::consts::LN_10 {
                worst = worst.max((a - b).abs());
            }
            sum += f64::from((a - b).abs());
        }
    }
    let mean = sum / f.data.len() as f64;
    eprintln!(
        "22.05 kHz resampled vs sox 16 kHz: worst {worst:.3e} (within 40 dB), mean {mean:.3e}"
    );
    assert!(mean < 0.05, "{mean}");
}
