//! `hush-host export --model MODEL_DIR [--format onnx|nnef] [--out PATH]`: rewrites a
//! package's ONNX files, or writes their NNEF archives, from its weights
//! ([`hush_models::export::export_package`]); `--model FILE.onnx --format nnef` writes the
//! archive of one ONNX file, such as the bundled Silero VAD
//! ([`hush_models::export::export_onnx_file`]).

use std::path::PathBuf;

use anyhow::Context;
use hush_models::export::{export_onnx_file, export_package, ExportFormat};
use hush_models::package::Task;

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
    /// The model package (a directory with model.json and weights.safetensors), or one
    /// ONNX file to write the NNEF archive of (with `--format nnef`).
    #[arg(long)]
    pub model: PathBuf,
    /// Format to write.
    #[arg(long, value_enum, default_value = "onnx")]
    pub format: FormatArg,
    /// File to write, or a directory to write it into [default: the package's own
    /// model.onnx or model.nnef.tar; beside an ONNX file, its name with .nnef.tar]
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Exports and prints what was written.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let format = match args.format {
        FormatArg::Onnx => ExportFormat::Onnx,
        FormatArg::Nnef => ExportFormat::Nnef,
    };
    if args.model.is_file() {
        anyhow::ensure!(
            format == ExportFormat::Nnef,
            "--model {} is a file: only its NNEF archive can be written from it \
             (--format nnef); ONNX is written from a package's weights",
            args.model.display()
        );
        let (path, bytes) = export_onnx_file(&args.model, args.out.as_deref())
            .with_context(|| format!("writing the NNEF archive of {}", args.model.display()))?;
        println!(
            "export: {} → {} ({bytes} bytes)",
            args.model.display(),
            path.display()
        );
        return Ok(());
    }
    let done = export_package(&args.model, format, args.out.as_deref())
        .with_context(|| format!("exporting {} to {}", args.model.display(), format.name()))?;
    println!(
        "export: {} {} model → {} ({} bytes)",
        done.arch,
        done.task.name(),
        done.path.display(),
        done.bytes
    );
    for p in &done.stream {
        println!("export: streaming form → {}", p.display());
    }
    // The trunk pulsed as `listen` runs it, for devices built without tract-pulse.
    if format == ExportFormat::Nnef && args.out.is_none() && done.task == Task::Kws {
        if let Some(p) = hush_device::infer::write_listen_archive(&args.model)
            .with_context(|| format!("pulsing {}'s streaming form", args.model.display()))?
        {
            println!(
                "export: the trunk pulsed as listen runs it → {}",
                p.display()
            );
        }
    }
    Ok(())
}
