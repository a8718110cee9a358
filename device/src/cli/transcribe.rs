//! `hush-device transcribe --model MODEL_DIR FILE...`: one JSON line per audio file,
//! `{"file": …, "text": …}`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use hush_device::infer::kws::audio_files;
use hush_device::infer::{AsrRecognizer, Decoder};
use hush_models::asr::decode::Lexicon;

/// Arguments of `hush-device transcribe`.
#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// ASR model package directory (model.json with task `asr`, model.onnx).
    #[arg(long)]
    pub model: PathBuf,
    /// Prefix beam search keeping N prefixes instead of greedy decoding.
    #[arg(long, value_name = "N")]
    pub beam: Option<usize>,
    /// Spell only the words of this file (white-space separated, e.g. one per line; the
    /// bundled model's command words are in models/asr/lexicon.txt): prefix beam search
    /// over them, with --beam prefixes (default 64).
    #[arg(long, value_name = "FILE")]
    pub lexicon: Option<PathBuf>,
    /// Audio files, or directories searched recursively for .wav/.flac.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// Loads the model and prints `{"file","text"}` per file.
pub fn run(args: TranscribeArgs) -> anyhow::Result<()> {
    if args.beam == Some(0) {
        anyhow::bail!("--beam must be at least 1");
    }
    let asr = AsrRecognizer::load(&args.model)
        .with_context(|| format!("loading model {}", args.model.display()))?;
    let decoder = match (&args.lexicon, args.beam) {
        (None, None) => Decoder::Greedy,
        (None, Some(n)) => Decoder::Beam(n),
        (Some(path), n) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--lexicon {}: cannot read it", path.display()))?;
            let lexicon = Lexicon::from_text(&text, asr.vocabulary())
                .with_context(|| format!("--lexicon {}", path.display()))?;
            Decoder::Lexicon(n.unwrap_or(64), lexicon)
        }
    };
    let files = audio_files(&args.paths).context("listing audio files")?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for f in files {
        let t = asr
            .transcribe_file(&f, &decoder)
            .with_context(|| format!("transcribing {}", f.display()))?;
        writeln!(out, "{}", serde_json::to_string(&t)?)?;
    }
    Ok(())
}
