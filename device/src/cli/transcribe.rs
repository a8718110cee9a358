//! `hush-device transcribe --model MODEL_DIR FILE...`: one JSON line per audio file,
//! `{"file": …, "text": …}`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use hush_device::infer::kws::audio_files;
use hush_device::infer::{AsrRecognizer, Decoder};

/// Arguments of `hush-device transcribe`.
#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// ASR model package directory (model.json with task `asr`, model.onnx).
    #[arg(long)]
    pub model: PathBuf,
    /// Prefix beam search keeping N prefixes instead of greedy decoding.
    #[arg(long, value_name = "N")]
    pub beam: Option<usize>,
    /// Audio files, or directories searched recursively for .wav/.flac.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// Loads the model and prints `{"file","text"}` per file.
pub fn run(args: TranscribeArgs) -> anyhow::Result<()> {
    let decoder = match args.beam {
        None => Decoder::Greedy,
        Some(0) => anyhow::bail!("--beam must be at least 1"),
        Some(n) => Decoder::Beam(n),
    };
    let asr = AsrRecognizer::load(&args.model)
        .with_context(|| format!("loading model {}", args.model.display()))?;
    let files = audio_files(&args.paths).context("listing audio files")?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for f in files {
        let t = asr
            .transcribe_file(&f, decoder)
            .with_context(|| format!("transcribing {}", f.display()))?;
        writeln!(out, "{}", serde_json::to_string(&t)?)?;
    }
    Ok(())
}
