//! `hush-device spot --model MODEL_DIR FILE.wav`: keyword spotting over a long recording,
//! read in small chunks as a microphone would deliver it; one JSON line per detection.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;

use anyhow::{ensure, Context};
use hush_device::infer::{KwsClassifier, KwsStream};

/// Arguments of `hush-device spot`.
#[derive(clap::Args)]
pub struct SpotArgs {
    /// Model package directory (model.json, model.onnx).
    #[arg(long)]
    pub model: PathBuf,
    /// A PCM or float WAV file at the model's sample rate (channels are averaged).
    pub input: PathBuf,
    /// Run the model every this many milliseconds of audio (rounded to whole frames).
    #[arg(long, default_value_t = 100)]
    pub hop_ms: u32,
    /// Report a window whose most probable class is a keyword at least this probable.
    #[arg(long, default_value_t = 0.8)]
    pub threshold: f32,
    /// Samples read and pushed at a time, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub chunk_ms: u32,
}

/// Streams the file through the spotter; prints detections as
/// `{"end_s","label","score"}` and a summary on stderr.
pub fn run(args: SpotArgs) -> anyhow::Result<()> {
    let clf = KwsClassifier::load(&args.model)
        .with_context(|| format!("loading model {}", args.model.display()))?;
    let frame = clf.features().frame.clone();
    let input = &args.input;
    let file = File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let reader = hound::WavReader::new(BufReader::new(file))
        .with_context(|| format!("{}: not a WAV file hound reads", input.display()))?;
    let spec = reader.spec();
    ensure!(
        spec.sample_rate == frame.sample_rate && spec.channels > 0,
        "{}: {} Hz, {} channel(s); the model's features need {} Hz (resample first, e.g. `sox IN -r {} OUT.wav`)",
        input.display(),
        spec.sample_rate,
        spec.channels,
        frame.sample_rate,
        frame.sample_rate
    );
    let shift_ms = 1000.0 * frame.window_shift() as f64 / f64::from(frame.sample_rate);
    let hop = ((f64::from(args.hop_ms) / shift_ms).round() as usize).max(1);
    let mut spot = KwsStream::new(&clf, hop)?;
    let channels = usize::from(spec.channels);
    let chunk =
        (spec.sample_rate as usize * args.chunk_ms.max(1) as usize / 1000).max(1) * channels;
    let mut samples: Box<dyn Iterator<Item = hound::Result<f32>>> =
        match (spec.sample_format, spec.bits_per_sample) {
            (hound::SampleFormat::Float, 32) => Box::new(reader.into_samples::<f32>()),
            (hound::SampleFormat::Int, bits @ 1..=32) => {
                let scale = 1.0 / (1u64 << (bits - 1)) as f32;
                Box::new(
                    reader
                        .into_samples::<i32>()
                        .map(move |s| s.map(|v| v as f32 * scale)),
                )
            }
            (format, bits) => anyhow::bail!(
                "{}: {bits}-bit {format:?} WAV; expected PCM 8–32-bit or float 32-bit",
                input.display()
            ),
        };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (mut buf, mut mono, mut verdicts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut pushed, mut windows, mut detections) = (0u64, 0u64, 0u64);
    loop {
        buf.clear();
        for s in samples.by_ref().take(chunk) {
            buf.push(s.with_context(|| format!("reading {}", input.display()))?);
        }
        if buf.is_empty() {
            break;
        }
        mono.clear();
        mono.extend(
            buf.chunks(channels)
                .map(|c| c.iter().sum::<f32>() / c.len() as f32),
        );
        pushed += mono.len() as u64;
        verdicts.clear();
        spot.push(&mono, &mut verdicts)?;
        windows += verdicts.len() as u64;
        for v in verdicts
            .iter()
            .filter(|v| v.score >= args.threshold && !v.label.starts_with('_'))
        {
            detections += 1;
            writeln!(out, "{}", serde_json::to_string(v)?)?;
        }
    }
    eprintln!(
        "spot: {:.1} s of audio, {windows} windows, {detections} detections at threshold {}",
        pushed as f64 / f64::from(spec.sample_rate),
        args.threshold
    );
    Ok(())
}
