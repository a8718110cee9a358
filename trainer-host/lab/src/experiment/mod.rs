//! Experiments: runs of the library's training code over a grid of settings, each writing
//! `results.json`, `results.md` and a PNG plot to one folder (DESIGN.md, "Formats").
//!
//! An experiment only assembles: corpora come from [`hush_corpus`], training from
//! [`hush_train`], ε from [`hush_privacy::accountant`] (through the DP trainer's privacy
//! report), plots from [`hush_plot`].
//!
//! - [`dp_sgd`]: KWS accuracy against ε for flat and per-layer-dim clipping, with and
//!   without a public warm start and gradient-based layer freezing
//!   (`hush-host experiment dp-sgd`);
//! - [`pretrain`]: ASR word and character error rates of CTC from scratch against BEST-RQ
//!   pretraining (non-private and DP) then fine-tuning (`hush-host experiment pretrain`);
//! - [`pate`]: KWS accuracy against ε for PATE (LNMax, GNMax, Confident-GNMax) beside
//!   DP-SGD and a non-private model on one speaker-disjoint split
//!   (`hush-host experiment pate`);
//! - [`pate_asr`]: ASR WER against ε for PATE (posterior averaging, transcript voting)
//!   beside DP-SGD, non-private fine-tuning and the public warm-start model
//!   (`hush-host experiment pate --task asr`);
//! - [`kws_generalization`]: KWS accuracy on voices never heard — leave one engine or
//!   donor family out ([`holdout`]) — beside the speaker-disjoint test
//!   (`hush-host experiment kws-generalization`);
//! - [`asr_generalization`]: the same for CTC speech recognition, WER and CER
//!   (`hush-host experiment asr-generalization`).

pub mod asr_generalization;
pub mod dp_sgd;
pub mod holdout;
pub mod kws_generalization;
pub mod pate;
pub mod pate_asr;
pub mod pretrain;

use std::path::{Path, PathBuf};

use hush_train::TrainError;

/// Why the experiment stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A setting is out of range.
    #[error("experiment: {0}")]
    Config(String),
    /// The corpus could not be generated.
    #[error("generating the corpus: {0}")]
    Synth(#[from] hush_corpus::SynthError),
    /// The corpus could not be read.
    #[error(transparent)]
    Dataset(#[from] hush_device::dataset::DatasetError),
    /// A training run failed.
    #[error("run {run}: {source}")]
    Train {
        /// The run's setting and ε.
        run: String,
        /// The trainer's error.
        source: TrainError,
    },
    /// A PATE step failed.
    #[error(transparent)]
    Pate(#[from] hush_pate::PateError),
    /// The plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] hush_plot::PlotError),
    /// A result file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExperimentError + '_ {
    move |source| ExperimentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `out/runs`, created; refused when it already holds runs (their ledgers hold releases,
/// and their numbers would mix with this run's).
pub(crate) fn fresh_runs_dir(out: &Path) -> Result<PathBuf, ExperimentError> {
    let runs = out.join("runs");
    if !is_missing_or_empty(&runs)? {
        return Err(ExperimentError::Config(format!(
            "{} exists and is not empty (its ledgers hold earlier releases); choose a new --out",
            runs.display()
        )));
    }
    std::fs::create_dir_all(&runs).map_err(io_err(&runs))?;
    Ok(runs)
}

pub(crate) fn is_missing_or_empty(dir: &Path) -> Result<bool, ExperimentError> {
    if !dir.exists() {
        return Ok(true);
    }
    Ok(std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .next()
        .is_none())
}

/// Writes `out/name` whole or not at all (a `.partial` file renamed into place), so a
/// long experiment's results can be watched.
pub(crate) fn write_file(out: &Path, name: &str, text: String) -> Result<(), ExperimentError> {
    let path = out.join(name);
    let tmp = out.join(format!("{name}.partial"));
    std::fs::write(&tmp, text).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))
}

/// A number with `digits` decimals, or `—` for none (the results tables).
pub(crate) fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |x| format!("{x:.digits$}"))
}

/// An experiment's results so far: `results.json`, `results.md` and, when `series` has
/// something to draw, the line plot `out/png`.
pub(crate) fn write_results_and_plot<T: serde::Serialize>(
    out: &Path,
    results: &T,
    markdown: String,
    png: &str,
    [title, x_label, y_label]: [&str; 3],
    series: &[hush_plot::Series],
) -> Result<(), ExperimentError> {
    write_json(out, "results.json", results)?;
    write_file(out, "results.md", markdown)?;
    if !series.is_empty() {
        hush_plot::line_plot(&out.join(png), title, x_label, y_label, series)?;
    }
    Ok(())
}

/// [`write_file`] of `value` as pretty JSON.
pub(crate) fn write_json<T: serde::Serialize>(
    out: &Path,
    name: &str,
    value: &T,
) -> Result<(), ExperimentError> {
    let json = serde_json::to_string_pretty(value).map_err(|e| ExperimentError::Io {
        path: out.join(name),
        source: std::io::Error::other(e),
    })?;
    write_file(out, name, json)
}

/// One line per method through its `(method, ε, value)` points, sorted by ε; then each
/// of `baselines` (`(name, value)`, e.g. a non-private model) as a horizontal line over
/// the points' ε range (none when there are no points).
pub(crate) fn series_by_method(
    points: impl IntoIterator<Item = (String, f64, f64)>,
    baselines: &[(&str, f64)],
) -> Vec<hush_plot::Series> {
    let mut series: Vec<hush_plot::Series> = Vec::new();
    for (method, eps, value) in points {
        match series.iter_mut().find(|s| s.name == method) {
            Some(s) => s.points.push((eps, value)),
            None => series.push(hush_plot::Series {
                name: method,
                points: vec![(eps, value)],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(x), h.max(x)));
    if lo <= hi {
        for &(name, value) in baselines {
            series.push(hush_plot::Series {
                name: name.into(),
                points: vec![(lo, value), (hi, value)],
            });
        }
    }
    series
}
