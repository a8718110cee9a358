//! `hush-device listen --model MODEL_DIR (--input FILE.wav | --mic)`: streaming keyword
//! detection. Audio goes through the library's [`KeywordSpotter`] chunk by chunk, as a
//! microphone delivers it: the model window by window, window posteriors smoothed,
//! thresholded and held off for a refractory period; one JSON line per detection,
//! `{"time_s","label","score"}`. `--windows` prints every window's verdict instead.
//! `--vad MODEL.onnx` runs the spotter only on windows around speech (Silero VAD).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{ensure, Context};
use hush_device::audio::WavBlocks;
use hush_device::infer::{
    Detection, KeywordSpotter, KwsClassifier, SileroVad, SpotterOptions, VoiceGate,
};

/// Arguments of `hush-device listen`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["input", "mic"])))]
pub struct ListenArgs {
    /// Model package directory (model.json, model.onnx).
    #[arg(long)]
    pub model: PathBuf,
    /// A PCM or float WAV file at the model's sample rate (channels are averaged), read
    /// in chunks as a microphone would deliver it; any length.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Listen to a microphone instead (needs the `mic` feature), resampled to the
    /// model's rate; until `--seconds` have been heard or the process is interrupted.
    #[arg(long)]
    pub mic: bool,
    /// With `--mic`: input device name (see `hush-device devices`); default: the host's
    /// default input.
    #[arg(long, requires = "mic")]
    pub device: Option<String>,
    /// With `--mic`: stop after this many seconds of audio.
    #[arg(long, requires = "mic")]
    pub seconds: Option<f64>,
    /// Run the model every this many milliseconds of audio (rounded to whole frames; for a
    /// model with a streaming form, to whole multiples of its time stride, which lets its
    /// trunk run pulsed: 100 ms becomes 120 at a 20 ms shift and a stride of 2).
    #[arg(long, default_value_t = SpotterOptions::HOP_MS)]
    pub hop_ms: u32,
    /// Average each class's posterior over the windows of the last this many
    /// milliseconds (at least one window).
    #[arg(long, default_value_t = SpotterOptions::SMOOTH_MS)]
    pub smooth_ms: u32,
    /// Detect a keyword when its smoothed posterior reaches this probability.
    #[arg(long, default_value_t = SpotterOptions::THRESHOLD)]
    pub threshold: f32,
    /// After a detection, report nothing for this many milliseconds.
    #[arg(long, default_value_t = SpotterOptions::REFRACTORY_MS)]
    pub refractory_ms: u32,
    /// Samples read and pushed at a time, in milliseconds (file input).
    #[arg(long, default_value_t = 20)]
    pub chunk_ms: u32,
    /// Print every window's verdict (`{"end_s","label","score"}`, unsmoothed) instead of
    /// detections.
    #[arg(long)]
    pub windows: bool,
    /// Run the keyword model only on windows that hold speech, as this voice-activity
    /// model says: Silero VAD's 16 kHz sequence export (models/vad/silero_vad_16k_sequence.onnx).
    #[arg(long, value_name = "VAD.onnx")]
    pub vad: Option<PathBuf>,
    /// With `--vad`: a 32 ms frame is speech when its probability reaches this (0.05:
    /// Silero's usual 0.5 misses many of the synthetic voices hush's models are trained
    /// on; chosen on a validation recording, BENCHMARKS.md "Voice-activity gate").
    #[arg(long, default_value_t = 0.05, requires = "vad")]
    pub vad_threshold: f32,
}

/// The library's spotter, fed chunk by chunk, and what it printed.
struct Listener {
    spotter: KeywordSpotter,
    windows_only: bool,
    detections: Vec<Detection>,
    printed: u64,
}

impl Listener {
    fn new(clf: &KwsClassifier, args: &ListenArgs) -> anyhow::Result<Self> {
        ensure!(
            args.hop_ms > 0,
            "--hop-ms 0: expected a positive number of milliseconds"
        );
        let opts = SpotterOptions {
            hop_ms: args.hop_ms,
            smooth_ms: args.smooth_ms,
            threshold: args.threshold,
            refractory_ms: args.refractory_ms,
        };
        let mut spotter = KeywordSpotter::new(clf, &opts)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.model.display()))?;
        if let Some(vad) = &args.vad {
            let gate = VoiceGate::new(SileroVad::load(vad)?, args.vad_threshold)?;
            spotter = spotter.with_voice_gate(gate)?;
        }
        Ok(Self {
            spotter,
            windows_only: args.windows,
            detections: Vec::new(),
            printed: 0,
        })
    }

    /// Pushes mono samples; writes a line for each detection (or window) now due.
    fn feed(&mut self, mono: &[f32], out: &mut impl Write) -> anyhow::Result<()> {
        self.detections.clear();
        let verdicts = self.spotter.push(mono, &mut self.detections)?;
        if self.windows_only {
            for v in verdicts {
                writeln!(out, "{}", serde_json::to_string(v)?)?;
            }
            self.printed += verdicts.len() as u64;
        } else {
            for d in &self.detections {
                writeln!(out, "{}", serde_json::to_string(d)?)?;
            }
            self.printed += self.detections.len() as u64;
        }
        out.flush()?;
        Ok(())
    }

    fn summary(&self, rate: u32, args: &ListenArgs) -> String {
        let what = if self.windows_only {
            "window verdicts".to_string()
        } else {
            format!(
                "detections (threshold {}, smoothing {} ms, refractory {} ms)",
                args.threshold, args.smooth_ms, args.refractory_ms
            )
        };
        let skipped = match self.spotter.windows_skipped() {
            0 => String::new(),
            n => format!(" ({n} more skipped: no speech)"),
        };
        format!(
            "listen: {:.1} s of audio, {} windows{skipped}, {} {what}",
            self.spotter.samples_pushed() as f64 / f64::from(rate),
            self.spotter.windows_scored(),
            self.printed
        )
    }
}

/// Streams the file or the microphone through the spotter; prints detections, and a
/// summary on stderr.
pub fn run(args: ListenArgs) -> anyhow::Result<()> {
    let clf = KwsClassifier::load_for_streams(&args.model)
        .with_context(|| format!("loading model {}", args.model.display()))?;
    let rate = clf.features().frame.sample_rate;
    let mut listener = Listener::new(&clf, &args)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &args.input {
        Some(input) => listen_file(input, rate, args.chunk_ms, &mut listener, &mut out)?,
        None => listen_mic(&args, rate, &mut listener, &mut out)?,
    }
    eprintln!("{}", listener.summary(rate, &args));
    Ok(())
}

/// A WAV file, read `chunk_ms` at a time.
fn listen_file(
    input: &std::path::Path,
    rate: u32,
    chunk_ms: u32,
    listener: &mut Listener,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut wav = WavBlocks::open(input)?;
    ensure!(
        wav.sample_rate() == rate,
        "{}: {} Hz; the model's features need {} Hz (resample first, e.g. `sox IN -r {} OUT.wav`)",
        input.display(),
        wav.sample_rate(),
        rate,
        rate
    );
    let chunk = (rate as usize * chunk_ms.max(1) as usize / 1000).max(1);
    let mut mono = Vec::with_capacity(chunk);
    loop {
        mono.clear();
        if wav.read_mono(chunk, &mut mono)? == 0 {
            return Ok(());
        }
        listener.feed(&mono, out)?;
    }
}

/// The microphone, until `--seconds` or an interruption.
#[cfg(feature = "mic")]
fn listen_mic(
    args: &ListenArgs,
    rate: u32,
    listener: &mut Listener,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use hush_device::audio::capture::{Capture, CaptureConfig};
    use std::time::{Duration, Instant};

    let wanted = match args.seconds {
        Some(s) if s.is_finite() && s > 0.0 => Some((s * f64::from(rate)).round() as u64),
        Some(s) => anyhow::bail!("--seconds {s}: expected a positive duration"),
        None => None,
    };
    let mut mic = Capture::start(&CaptureConfig {
        device: args.device.clone(),
        target_rate: rate,
    })?;
    eprintln!(
        "listening on {:?} ({} Hz native, {} ch){}",
        mic.device(),
        mic.native_rate(),
        mic.channels(),
        if wanted.is_some() {
            ""
        } else {
            "; Ctrl-C to stop"
        }
    );
    const STALL: Duration = Duration::from_secs(5);
    let (mut buf, mut heard, mut last_sound) = (Vec::new(), 0u64, Instant::now());
    while wanted.is_none_or(|w| heard < w) {
        buf.clear();
        if mic.read(&mut buf)? == 0 {
            if last_sound.elapsed() > STALL {
                anyhow::bail!(
                    "input device {:?} delivered nothing for {:.0} s (after {:.1} s of audio)",
                    mic.device(),
                    STALL.as_secs_f64(),
                    heard as f64 / f64::from(rate)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        last_sound = Instant::now();
        if let Some(w) = wanted {
            buf.truncate((w - heard) as usize);
        }
        heard += buf.len() as u64;
        listener.feed(&buf, out)?;
    }
    eprintln!(
        "microphone: {} samples lost to overruns, {} stream errors",
        mic.overruns(),
        mic.stream_errors()
    );
    Ok(())
}

/// Without `mic`, a named error.
#[cfg(not(feature = "mic"))]
fn listen_mic(
    args: &ListenArgs,
    _rate: u32,
    _listener: &mut Listener,
    _out: &mut impl Write,
) -> anyhow::Result<()> {
    anyhow::bail!(
        "hush-device was built without the `mic` feature: cannot listen to {}; use --input FILE.wav",
        args.device.as_deref().unwrap_or("the default input")
    )
}
