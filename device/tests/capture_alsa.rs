//! Capture without sound hardware: cpal's ALSA backend reads a test-local ALSA `file`
//! PCM (a `null` slave whose captured data is replaced by a raw file) behind `plug`. The
//! raw file is already in the format cpal negotiates (f32, stereo, 48 kHz), so ALSA
//! converts nothing: with an S16 mono file, the file plugin under cpal's access mode read
//! the infile at the wrong stride (the tone came out 1.5x too high), which `arecord` does
//! not show. The real path runs: cpal callback -> lock-free ring
//! -> resampler -> streaming features.
//!
//! `ALSA_CONFIG_PATH` points ALSA at the config this test writes, so the machine's own
//! ALSA setup is neither read nor changed. Everything is in one test function: ALSA
//! reads its config once per process.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure
#![cfg(all(feature = "mic", target_os = "linux"))]

use std::time::Duration;

use hush_device::audio::capture::{list_input_devices, Capture, CaptureConfig};
use hush_device::audio::RING_SLOTS;
use hush_device::features::{FeatureConfig, FeatureKind, FeatureStream};

const NATIVE: u32 = 48_000;
const TONE_HZ: f64 = 440.0;

/// Power of `x` at `freq` (Goertzel), normalised by length.
fn goertzel(x: &[f32], freq: f64, rate: f64) -> f64 {
    let w = 2.0 * std::f64::consts::PI * freq / rate;
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &v in x {
        let s = f64::from(v) + 2.0 * w.cos() * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    (s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2) / (x.len() as f64).powi(2)
}

#[test]
fn alsa_file_pcm_to_features() {
    let dir = tempfile::tempdir().unwrap();
    // 3 s of a 440 Hz tone, FLOAT_LE stereo at 48 kHz (what cpal asks the plug for, so
    // no conversion happens in ALSA).
    let raw = dir.path().join("in.raw");
    let bytes: Vec<u8> = (0..3 * NATIVE)
        .flat_map(|i| {
            let t = f64::from(i) / f64::from(NATIVE);
            let v = (0.5 * (2.0 * std::f64::consts::PI * TONE_HZ * t).sin()) as f32;
            let b = v.to_le_bytes();
            [b[0], b[1], b[2], b[3], b[0], b[1], b[2], b[3]]
        })
        .collect();
    std::fs::write(&raw, bytes).unwrap();
    let conf = dir.path().join("asound.conf");
    std::fs::write(
        &conf,
        format!(
            r#"pcm.hushfile {{
    type file
    slave {{ pcm {{ type null }} }}
    file "/dev/null"
    infile "{}"
    format "raw"
}}
pcm.!default {{
    type plug
    slave {{ pcm "hushfile"; format FLOAT_LE; rate {NATIVE}; channels 2; }}
    hint {{ show on description "hush test capture" }}
}}
"#,
            raw.display()
        ),
    )
    .unwrap();
    std::env::set_var("ALSA_CONFIG_PATH", &conf);

    let devices = list_input_devices().unwrap();
    eprintln!("devices: {devices:?}");
    assert!(devices.iter().any(|d| d.is_default));

    let mut mic = Capture::start(&CaptureConfig {
        device: None,
        target_rate: 16_000,
    })
    .unwrap();
    eprintln!(
        "capturing from {:?} at {} Hz, {} ch",
        mic.device(),
        mic.native_rate(),
        mic.channels()
    );
    // The null PCM under the file plugin is not paced: the source outruns any reader.
    // Read nothing for 2 s (more than the ring's 65535 samples arrive even at a paced
    // 48 kHz): the ring keeps the first 65535 samples, contiguous, and counts the rest
    // as lost instead of hiding them. Under emulation (qemu-user, scripts/test) the
    // source is far slower, so keep not reading until the ring has overflowed (at most
    // a minute), rather than trusting a fixed time.
    std::thread::sleep(Duration::from_millis(2_000));
    let mut waited = 0;
    while mic.overruns() == 0 && waited < 600 {
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    eprintln!(
        "captured {} native samples; {} lost to overruns in {} callbacks, first loss after {:?}; {} stream errors",
        mic.samples_captured(),
        mic.overruns(),
        mic.overrun_events(),
        mic.first_overrun_at(),
        mic.stream_errors()
    );
    assert!(mic.overruns() > 0 && mic.overrun_events() > 0);
    assert_eq!(mic.first_overrun_at(), Some((RING_SLOTS - 1) as u64));
    let mut samples = Vec::new();
    mic.read(&mut samples).unwrap();
    // The resampler holds back its last few taps' worth until more input arrives.
    let contiguous = (RING_SLOTS - 1) * 16_000 / mic.native_rate() as usize;
    assert!(
        samples.len() >= contiguous - 200,
        "{} samples",
        samples.len()
    );
    let contiguous = samples.len().min(contiguous);
    let first = &samples[1_000..contiguous - 1_000];
    let at_tone = goertzel(first, TONE_HZ, 16_000.0);
    let off_tone = goertzel(first, 1_000.0, 16_000.0);
    eprintln!("tone power {at_tone:e}, 1 kHz power {off_tone:e}");
    assert!(at_tone > 1e-2 && at_tone > 1e4 * off_tone);

    // Streaming features over what was captured.
    let mut stream = FeatureStream::new(FeatureConfig::kaldi(FeatureKind::Fbank)).unwrap();
    let mut feats = Vec::new();
    for chunk in samples[..16_000].chunks(321) {
        stream.push(chunk, &mut feats).unwrap();
    }
    stream.finish(&mut feats).unwrap();
    assert_eq!(feats.len(), 98 * 80);
    // The loudest mel bin of a middle frame holds 440 Hz (HTK mel 20 Hz..8 kHz, 80 bins:
    // bin centres near 440 Hz are around index 14).
    let frame = &feats[40 * 80..41 * 80];
    let peak = (0..80)
        .max_by(|&a, &b| frame[a].total_cmp(&frame[b]))
        .unwrap();
    assert!((12..=17).contains(&peak), "peak bin {peak}");
}
