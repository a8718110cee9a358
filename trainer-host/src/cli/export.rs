//! `hush-host export --model MODEL_DIR [--format onnx|nnef] [--out PATH]`: rewrites a
//! package's ONNX file, or writes an NNEF archive, from its weights
//! ([`hush_models::export::export_package`]).

use std::path::PathBuf;

use anyhow::Context;
use hush_models::export::{export_package, ExportFormat};

/// Formats `hush-host export` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// ONNX, opset 17 (the package's `model.onnx`).
    Onnx,
    /// NNEF as a tar archive, written by tract (`model.nnef.tar`).
    Nnef,
}

/// Arguments of `hush-host export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// The model package (a directory with model.json and weights.safetensors).
    #[arg(long)]
    pub model: PathBuf,
    /// Format to write.
    #[arg(long, value_enum, default_value = "onnx")]
    pub format: FormatArg,
    /// File to write, or a directory to write it into [default: the package's own
    /// model.onnx or model.nnef.tar].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Exports and prints what was written.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let format = match args.format {
        FormatArg::Onnx => ExportFormat::Onnx,
        FormatArg::Nnef => ExportFormat::Nnef,
    };
    let done = export_package(&args.model, format, args.out.as_deref())
        .with_context(|| format!("exporting {} to {}", args.model.display(), format.name()))?;
    println!(
        "export: {} {} model → {} ({} bytes)",
        done.arch,
        done.task.name(),
        done.path.display(),
        done.bytes
    );
    Ok(())
}
