//! Bad input gives a named error, never a panic.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use hush_device::features::{
    compute, FeatureConfig, FeatureError, FeatureKind, FeatureStream, WindowKind,
};

fn option_of(r: Result<hush_device::features::Features, FeatureError>) -> &'static str {
    match r {
        Err(FeatureError::InvalidOption { option, .. }) => option,
        other => panic!("expected an option error, got {other:?}"),
    }
}

fn tone() -> Vec<f32> {
    (0..16_000).map(|i| (i as f32 * 0.1).sin() * 0.1).collect()
}

#[test]
fn absurd_options_name_the_option() {
    let x = tone();
    let base = FeatureConfig::kaldi(FeatureKind::Fbank);

    let mut c = base.clone();
    c.frame.frame_shift_ms = 0.0;
    assert_eq!(option_of(compute(&c, &x)), "frame_shift_ms");

    let mut c = base.clone();
    c.frame.frame_shift_ms = 0.01; // rounds to 0 samples
    assert_eq!(option_of(compute(&c, &x)), "frame_shift_ms");

    let mut c = base.clone();
    c.frame.frame_length_ms = 0.0;
    assert_eq!(option_of(compute(&c, &x)), "frame_length_ms");

    let mut c = base.clone();
    c.frame.frame_length_ms = f32::NAN;
    assert_eq!(option_of(compute(&c, &x)), "frame_length_ms");

    let mut c = base.clone();
    c.mel.num_bins = 300; // 256 FFT bins at 512 points
    let err = compute(&c, &x).unwrap_err().to_string();
    assert!(
        err.contains("num_mel_bins = 300") && err.contains("256"),
        "{err}"
    );

    let mut c = base.clone();
    c.mel.low_freq = 4000.0;
    c.mel.high_freq = 3000.0;
    assert_eq!(option_of(compute(&c, &x)), "high_freq");

    let mut c = base.clone();
    c.mel.low_freq = 9000.0;
    assert_eq!(option_of(compute(&c, &x)), "low_freq");

    let mut c = base.clone();
    c.frame.fft_size = Some(128);
    assert_eq!(option_of(compute(&c, &x)), "fft_size");

    let mut c = base.clone();
    c.frame.sample_rate = 0;
    assert_eq!(option_of(compute(&c, &x)), "sample_rate");

    let mut c = base.clone();
    c.frame.dither = -1.0;
    assert_eq!(option_of(compute(&c, &x)), "dither");

    let mut c = FeatureConfig::kaldi(FeatureKind::Mfcc);
    c.mfcc.num_ceps = 40;
    assert_eq!(option_of(compute(&c, &x)), "num_ceps");

    assert!(WindowKind::parse("blackman").is_err());
}

#[test]
fn bad_samples_are_refused() {
    let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
    assert_eq!(compute(&cfg, &[]), Err(FeatureError::EmptyInput));
    assert_eq!(
        compute(&cfg, &[0.0; 100]),
        Err(FeatureError::TooShort {
            samples: 100,
            needed: 400
        })
    );
    let mut x = tone();
    x[1234] = f32::NAN;
    assert!(matches!(
        compute(&cfg, &x),
        Err(FeatureError::NonFiniteSample { index: 1234, .. })
    ));
    x[1234] = f32::INFINITY;
    assert!(matches!(
        compute(&cfg, &x),
        Err(FeatureError::NonFiniteSample { index: 1234, .. })
    ));
    let mut s = FeatureStream::new(cfg).unwrap();
    let mut out = Vec::new();
    s.push(&[0.0; 500], &mut out).unwrap();
    assert!(matches!(
        s.push(&[0.0, f32::NEG_INFINITY], &mut out),
        Err(FeatureError::NonFiniteSample { index: 501, .. })
    ));
    s.finish(&mut out).unwrap();
    assert_eq!(s.push(&[0.0], &mut out), Err(FeatureError::Finished));
}

#[test]
fn silence_gives_finite_floored_features() {
    for kind in [
        FeatureKind::Fbank,
        FeatureKind::Mfcc,
        FeatureKind::Spectrogram,
    ] {
        for cfg in [FeatureConfig::kaldi(kind), FeatureConfig::librosa(kind)] {
            let f = compute(&cfg, &[0.0; 4000]).unwrap();
            assert!(f.data.iter().all(|v| v.is_finite()), "{kind:?}");
        }
    }
}

#[test]
fn config_round_trips_through_json() {
    for kind in [
        FeatureKind::Fbank,
        FeatureKind::Mfcc,
        FeatureKind::Spectrogram,
    ] {
        for cfg in [FeatureConfig::kaldi(kind), FeatureConfig::librosa(kind)] {
            let json = serde_json::to_string(&cfg).unwrap();
            let back: FeatureConfig = serde_json::from_str(&json).unwrap();
            assert_eq!(back, cfg);
        }
    }
}
