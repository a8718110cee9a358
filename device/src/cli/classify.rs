//! `hush-device classify --model MODEL_DIR PATH...`: one JSON line per audio file.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use hush_device::infer::kws::audio_files;
use hush_device::infer::KwsClassifier;

/// Arguments of `hush-device classify`.
#[derive(clap::Args)]
pub struct ClassifyArgs {
    /// Model package directory (model.json, model.onnx).
    #[arg(long)]
    pub model: PathBuf,
    /// Audio files, or directories searched recursively for .wav/.flac.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// Loads the model and prints `{"file","label","score","scores"}` per file.
pub fn run(args: ClassifyArgs) -> anyhow::Result<()> {
    let clf = KwsClassifier::load(&args.model)
        .with_context(|| format!("loading model {}", args.model.display()))?;
    let files = audio_files(&args.paths).context("listing audio files")?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for f in files {
        let c = clf
            .classify_file(&f)
            .with_context(|| format!("classifying {}", f.display()))?;
        writeln!(out, "{}", serde_json::to_string(&c)?)?;
    }
    Ok(())
}
