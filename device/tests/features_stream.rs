//! Streaming features equal whole-signal features, bit for bit, for any chunking and
//! any batching of the frames.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use hush_device::features::{
    compute, CmvnOptions, FeatureConfig, FeatureKind, FeatureStream, Padding,
};
use proptest::prelude::*;

fn configs() -> Vec<FeatureConfig> {
    let mut out = vec![
        FeatureConfig::kaldi(FeatureKind::Fbank),
        FeatureConfig::kaldi(FeatureKind::Mfcc),
        FeatureConfig::librosa(FeatureKind::Fbank),
        FeatureConfig::librosa(FeatureKind::Mfcc),
        FeatureConfig::kaldi(FeatureKind::Spectrogram),
    ];
    let mut mirror = FeatureConfig::kaldi(FeatureKind::Fbank);
    mirror.frame.padding = Padding::KaldiMirror;
    mirror.frame.dither = 1.0;
    mirror.frame.dither_seed = 42;
    out.push(mirror);
    let mut zero = FeatureConfig::librosa(FeatureKind::Fbank);
    zero.frame.padding = Padding::CenterZero;
    zero.cmvn = CmvnOptions::Sliding {
        window: 7,
        norm_vars: true,
    };
    out.push(zero);
    let mut utt = FeatureConfig::kaldi(FeatureKind::Mfcc);
    utt.cmvn = CmvnOptions::Utterance { norm_vars: false };
    utt.frame.frame_shift_ms = 7.5;
    out.push(utt);
    out
}

fn signal(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..len)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let noise = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            0.3 * (i as f32 * 0.031).sin() + 0.05 * noise
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn stream_equals_whole(
        len in 400usize..9_000,
        seed in any::<u64>(),
        chunks in prop::collection::vec(1usize..3_000, 1..40),
        which in 0usize..8,
        at_least in 1usize..12,
    ) {
        let cfg = configs()[which].clone();
        let x = signal(len, seed);
        let whole = compute(&cfg, &x).unwrap();
        let mut stream = FeatureStream::new(cfg).unwrap();
        let mut out = Vec::new();
        let mut i = 0;
        let mut k = 0;
        while i < x.len() {
            let j = (i + chunks[k % chunks.len()]).min(x.len());
            stream.push_batched(&x[i..j], at_least, &mut out).unwrap();
            i = j;
            k += 1;
        }
        stream.finish(&mut out).unwrap();
        prop_assert_eq!(out.len(), whole.data.len());
        prop_assert!(out.iter().zip(&whole.data).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn frames_come_out_as_soon_as_they_are_complete() {
    let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
    let mut s = FeatureStream::new(cfg).unwrap();
    let mut out = Vec::new();
    assert_eq!(s.push(&[0.1; 399], &mut out).unwrap(), 0);
    assert_eq!(s.push(&[0.1; 1], &mut out).unwrap(), 1);
    assert_eq!(s.push(&[0.1; 159], &mut out).unwrap(), 0);
    assert_eq!(s.push(&[0.1; 1], &mut out).unwrap(), 1);
    assert_eq!(s.finish(&mut out).unwrap(), 0);
    assert_eq!(out.len(), 2 * 80);
}

#[test]
fn batched_frames_wait_until_enough_are_complete() {
    let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
    let mut s = FeatureStream::new(cfg).unwrap();
    let mut out = Vec::new();
    // 25 ms frames every 10 ms: frame k is complete at 400 + 160 k samples.
    assert_eq!(s.push_batched(&[0.1; 400], 3, &mut out).unwrap(), 0);
    assert_eq!(s.push_batched(&[0.1; 319], 3, &mut out).unwrap(), 0);
    assert_eq!(s.push_batched(&[0.1; 1], 3, &mut out).unwrap(), 3);
    assert_eq!(s.push_batched(&[0.1; 160], 3, &mut out).unwrap(), 0);
    assert_eq!(s.push_batched(&[0.1; 160], 1, &mut out).unwrap(), 2);
    assert_eq!(s.frames_done(), 5);
    assert_eq!(out.len(), 5 * 80);
}
