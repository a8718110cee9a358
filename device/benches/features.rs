//! 80-bin Kaldi fbank over 60 s of speech: hush against the `mel_spec` crate, timed in
//! the same process, plus each one's max abs difference from the kaldi-native-fbank
//! fixture (tests/fixtures/features/kaldi_fbank80_25_10_povey_16k.npy).
//!
//! Run: `cargo bench -p hush-device --bench features`

use std::path::PathBuf;
use std::time::Instant;

use hush_device::audio::read_audio;
use hush_device::features::npy::read_npy_f32;
use hush_device::features::{compute, FeatureConfig, FeatureKind, FeatureStream};
use mel_spec::fbank::{Fbank, FbankConfig};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/features")
        .join(name)
}

/// Median of `reps` timings of `f`, in seconds.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() -> anyhow::Result<()> {
    let clip = read_audio(&fixture("speech_16k.wav"))?;
    let seconds = 60usize;
    let audio: Vec<f32> = clip
        .samples
        .iter()
        .cycle()
        .take(seconds * clip.sample_rate as usize)
        .copied()
        .collect();
    let scaled: Vec<f32> = audio.iter().map(|s| s * 32768.0).collect();
    let clip_scaled: Vec<f32> = clip.samples.iter().map(|s| s * 32768.0).collect();

    let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
    let mel_cfg = FbankConfig {
        num_mel_bins: 80,
        apply_cmn: false,
        ..FbankConfig::default()
    };
    let mel = Fbank::new(mel_cfg);

    // Agreement with kaldi-native-fbank on the 1 s clip.
    let (want, shape) = read_npy_f32(&fixture("kaldi_fbank80_25_10_povey_16k.npy"))?;
    let ours = compute(&cfg, &clip.samples)?;
    let theirs = mel.compute(&clip_scaled);
    anyhow::ensure!(shape == [ours.num_frames, ours.dim] && theirs.len() == want.len());
    let diff_hush = max_diff(&ours.data, &want);
    let diff_mel = max_diff(theirs.as_slice().unwrap_or(&[]), &want);

    let reps = 21;
    let mut frames = 0;
    let t_hush = time(reps, || {
        frames = compute(&cfg, &audio).map(|f| f.num_frames).unwrap_or(0);
    });
    let mut stream = FeatureStream::new(cfg.clone())?;
    let mut out = Vec::with_capacity(frames * 80);
    let t_stream = time(reps, || {
        stream.reset();
        out.clear();
        for chunk in audio.chunks(1600) {
            let _ = stream.push(chunk, &mut out);
        }
        let _ = stream.finish(&mut out);
    });
    let mut mel_frames = 0;
    let t_mel = time(reps, || {
        mel_frames = mel.compute(&scaled).nrows();
    });
    let per_s = |t: f64| t * 1e3 / seconds as f64;
    println!("80-bin kaldi fbank, {seconds} s of speech, median of {reps} runs");
    println!(
        "hush (whole)            {:.4} ms per s of audio  ({frames} frames)",
        per_s(t_hush)
    );
    println!(
        "hush (stream, 100 ms)   {:.4} ms per s of audio",
        per_s(t_stream)
    );
    println!(
        "mel_spec 0.5 Fbank      {:.4} ms per s of audio  ({mel_frames} frames)",
        per_s(t_mel)
    );
    println!("speed-up (mel_spec / hush whole) {:.2}x", t_mel / t_hush);
    println!("max abs diff vs kaldi-native-fbank: hush {diff_hush:.3e}, mel_spec {diff_mel:.3e}");
    Ok(())
}
