//! `hush-device info FILE`: decode an audio file and describe it.

use std::path::PathBuf;

use anyhow::Context;
use hush_device::audio::read_audio;

/// Arguments of `hush-device info`.
#[derive(clap::Args)]
pub struct InfoArgs {
    /// WAV or FLAC file to describe.
    pub input: PathBuf,
}

/// Decodes the file and prints rate, duration, peak and RMS level.
pub fn run(args: InfoArgs) -> anyhow::Result<()> {
    let audio = read_audio(&args.input).with_context(|| "reading audio".to_string())?;
    let peak = audio.samples.iter().fold(0f32, |m, s| m.max(s.abs()));
    let rms = (audio
        .samples
        .iter()
        .map(|s| f64::from(*s).powi(2))
        .sum::<f64>()
        / audio.samples.len() as f64)
        .sqrt();
    println!(
        "{}: {} Hz, {} samples ({:.3} s), peak {:.4}, rms {:.4}",
        args.input.display(),
        audio.sample_rate,
        audio.samples.len(),
        audio.duration_s(),
        peak,
        rms
    );
    Ok(())
}
