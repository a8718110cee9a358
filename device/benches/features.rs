//! 80-bin Kaldi fbank over 60 s of speech: hush against the `mel_spec` crate, timed in
//! the same process, plus each one's max abs difference from the kaldi-native-fbank
//! fixture (tests/fixtures/features/kaldi_fbank80_25_10_povey_16k.npy).
//!
//! Run: `cargo bench -p hush-device --bench features --features fbank-reference`

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

/// Median timings of each of `fs`, in seconds, over `reps` rounds; each round runs every
/// function once, one after another, so a change in machine load hits them all alike.
fn time_interleaved(reps: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    for f in fs.iter_mut() {
        f();
    }
    let mut t = vec![Vec::with_capacity(reps); fs.len()];
    for _ in 0..reps {
        for (f, ts) in fs.iter_mut().zip(&mut t) {
            let s = Instant::now();
            f();
            ts.push(s.elapsed().as_secs_f64());
        }
    }
    t.into_iter()
        .map(|mut ts| {
            ts.sort_by(f64::total_cmp);
            ts[reps / 2]
        })
        .collect()
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

    let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
    let mel_cfg = FbankConfig {
        num_mel_bins: 80,
        apply_cmn: false,
        ..FbankConfig::default()
    };
    let mel = Fbank::new(mel_cfg);

    // Agreement with kaldi-native-fbank: on the 1 s fixture clip, and on two clips of
    // corpus speech.
    let agreement = |wav: &str, npy: &str| -> anyhow::Result<(f32, f32)> {
        let x = read_audio(&fixture(wav))?;
        let (want, shape) = read_npy_f32(&fixture(npy))?;
        let ours = compute(&cfg, &x.samples)?;
        let x_scaled: Vec<f32> = x.samples.iter().map(|s| s * 32768.0).collect();
        let theirs = mel.compute(&x_scaled);
        anyhow::ensure!(shape == [ours.num_frames, ours.dim] && theirs.len() == want.len());
        Ok((
            max_diff(&ours.data, &want),
            max_diff(theirs.as_slice().unwrap_or(&[]), &want),
        ))
    };
    let (diff_hush, diff_mel) = agreement("speech_16k.wav", "kaldi_fbank80_25_10_povey_16k.npy")?;
    let mut corpus_hush = 0.0f32;
    let mut corpus_mel = 0.0f32;
    for clip in ["corpus_kws_yes", "corpus_asr"] {
        let (h, m) = agreement(
            &format!("{clip}_16k.wav"),
            &format!("{clip}_fbank80_25_10_povey_16k.npy"),
        )?;
        corpus_hush = corpus_hush.max(h);
        corpus_mel = corpus_mel.max(m);
    }

    let reps = 21;
    let mut frames = 0;
    let mut stream = FeatureStream::new(cfg.clone())?;
    let mut out = Vec::new();
    let mut mel_frames = 0;
    let t = time_interleaved(
        reps,
        &mut [
            &mut || frames = compute(&cfg, &audio).map(|f| f.num_frames).unwrap_or(0),
            &mut || {
                stream.reset();
                out.clear();
                for chunk in audio.chunks(1600) {
                    let _ = stream.push(chunk, &mut out);
                }
                let _ = stream.finish(&mut out);
            },
            &mut || mel_frames = mel.compute(&scaled).nrows(),
        ],
    );
    let (t_hush, t_stream, t_mel) = (t[0], t[1], t[2]);
    let per_s = |t: f64| t * 1e3 / seconds as f64;
    println!("80-bin kaldi fbank, {seconds} s of speech, median of {reps} interleaved runs");
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
    println!(
        "max abs diff vs kaldi-native-fbank, 1 s fixture clip: hush {diff_hush:.3e}, mel_spec {diff_mel:.3e}"
    );
    println!(
        "max abs diff vs kaldi-native-fbank, corpus speech: hush {corpus_hush:.3e}, mel_spec {corpus_mel:.3e}"
    );
    Ok(())
}
