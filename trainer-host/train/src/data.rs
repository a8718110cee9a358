//! The KWS training data in memory: every clip decoded once, fitted to the model's
//! window, with its class and split; the background noises of `_background_noise_/`.

use std::path::{Path, PathBuf};

use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, KwsLabels, Layout, Split, Target};
use hush_device::infer::fit_clip;
use rayon::prelude::*;

use super::TrainError;

/// One decoded clip.
#[derive(Debug, Clone)]
pub struct Clip {
    /// The file.
    pub path: PathBuf,
    /// Speaker id.
    pub speaker: String,
    /// Class index.
    pub class: usize,
    /// Samples, fitted to the model's window.
    pub samples: Vec<f32>,
}

/// The corpus split three ways, plus noises.
#[derive(Debug, Default)]
pub struct KwsData {
    /// Training clips.
    pub train: Vec<Clip>,
    /// Validation clips (early stopping, best epoch).
    pub validation: Vec<Clip>,
    /// Test clips (the final report only).
    pub test: Vec<Clip>,
    /// Background noise recordings (whole files).
    pub noises: Vec<Vec<f32>>,
}

/// Reads a Speech Commands corpus: every clip at `sample_rate`, fitted to `clip_len`
/// samples, labelled by `labels`. Fails when a split is empty.
pub fn load_kws(
    dir: &Path,
    labels: &KwsLabels,
    sample_rate: u32,
    clip_len: usize,
) -> Result<KwsData, TrainError> {
    let data = read_kws(dir, labels, sample_rate, clip_len)?;
    require_splits(&data, dir)?;
    Ok(data)
}

/// Fails, naming `dir`, when a split of `data` is empty.
pub fn require_splits(data: &KwsData, dir: &Path) -> Result<(), TrainError> {
    for (name, split) in [
        ("train", &data.train),
        ("validation", &data.validation),
        ("test", &data.test),
    ] {
        if split.is_empty() {
            return Err(TrainError::Data {
                path: dir.to_path_buf(),
                reason: format!("the {name} split is empty (splits follow speaker ids)"),
            });
        }
    }
    Ok(())
}

/// [`load_kws`] without requiring every split: for corpora used whole (PATE's private
/// data) or only in part.
pub fn read_kws(
    dir: &Path,
    labels: &KwsLabels,
    sample_rate: u32,
    clip_len: usize,
) -> Result<KwsData, TrainError> {
    let (layout, examples) = read_corpus(dir)?;
    if layout != Layout::SpeechCommands {
        return Err(TrainError::Data {
            path: dir.to_path_buf(),
            reason: format!("KWS training needs a Speech Commands corpus, found {layout:?}"),
        });
    }
    // Decoding is most of a large corpus's start-up: every core takes a share, and the
    // order (and so every seeded run) stays that of `read_corpus`.
    let labelled: Vec<_> = examples
        .into_iter()
        .filter_map(|ex| match &ex.target {
            Target::Label(word) => Some((labels.class_of(word), ex)),
            _ => None,
        })
        .collect();
    let clips = labelled
        .into_par_iter()
        .map(|(class, ex)| {
            let audio = read_audio(&ex.path)?;
            if audio.sample_rate != sample_rate {
                return Err(TrainError::Data {
                    path: ex.path.clone(),
                    reason: format!(
                        "{} Hz; the feature config expects {sample_rate} Hz",
                        audio.sample_rate
                    ),
                });
            }
            let clip = Clip {
                class,
                speaker: ex.speaker,
                samples: fit_clip(&audio.samples, clip_len),
                path: ex.path,
            };
            Ok((ex.split, clip))
        })
        .collect::<Result<Vec<_>, TrainError>>()?;
    let mut data = KwsData::default();
    for (split, clip) in clips {
        match split {
            Split::Train => data.train.push(clip),
            Split::Validation => data.validation.push(clip),
            Split::Test => data.test.push(clip),
        }
    }
    data.noises = read_noises(dir, sample_rate, clip_len)?;
    Ok(data)
}

/// The background noises of `dir/_background_noise_/` (WAV/FLAC, sorted by name) at
/// `sample_rate` and at least `min_len` samples long; others are skipped. No folder, no
/// noises.
pub fn read_noises(
    dir: &Path,
    sample_rate: u32,
    min_len: usize,
) -> Result<Vec<Vec<f32>>, TrainError> {
    let noise_dir = dir.join("_background_noise_");
    let mut noises = Vec::new();
    if noise_dir.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&noise_dir)
            .map_err(|source| TrainError::Io {
                path: noise_dir.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("wav" | "flac" | "WAV" | "FLAC")
                )
            })
            .collect();
        files.sort();
        for f in files {
            let audio = read_audio(&f)?;
            if audio.sample_rate == sample_rate && audio.samples.len() >= min_len {
                noises.push(audio.samples);
            }
        }
    }
    Ok(noises)
}
