//! `hush-device record`: capture from a microphone, resampled to the model rate, into a
//! 16-bit WAV (needs the `mic` feature).

use std::path::PathBuf;

/// Arguments of `hush-device record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// How long to record, in seconds.
    #[arg(long)]
    pub seconds: f64,
    /// WAV file to write.
    #[arg(long)]
    pub output: PathBuf,
    /// Input device name (see `hush-device devices`); default: the host's default input.
    #[arg(long)]
    pub device: Option<String>,
    /// Rate of the written file (the model rate).
    #[arg(long, default_value_t = 16_000)]
    pub rate: u32,
}

/// Records and writes the file; reports overruns.
#[cfg(feature = "mic")]
pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use hush_device::audio::capture::{record, CaptureConfig};
    use hush_device::audio::{write_wav_i16, Audio};

    anyhow::ensure!(
        args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 3600.0,
        "--seconds {}: expected a duration in (0, 3600]",
        args.seconds
    );
    let cfg = CaptureConfig {
        device: args.device.clone(),
        target_rate: args.rate,
    };
    let (samples, report) = record(&cfg, args.seconds).context("recording")?;
    let audio = Audio {
        samples,
        sample_rate: args.rate,
    };
    write_wav_i16(&args.output, &audio).context("writing the recording")?;
    eprintln!(
        "recorded {:.2} s from {:?} ({} Hz native, {} ch) -> {} at {} Hz; overruns: {} samples lost, stream errors: {}",
        audio.duration_s(),
        report.device,
        report.native_rate,
        report.channels,
        args.output.display(),
        args.rate,
        report.overruns,
        report.stream_errors
    );
    Ok(())
}

/// Without `mic`, a named error.
#[cfg(not(feature = "mic"))]
pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "hush-device was built without the `mic` feature: cannot record {}",
        args.output.display()
    )
}
