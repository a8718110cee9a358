//! Dataset readers shared by every trainer: the Speech Commands layout (keyword
//! spotting), the LibriSpeech layout and JSONL manifests (ASR).
//!
//! Each reader lists [`Example`]s — an audio path, a speaker and a target — and assigns
//! each to a [`Split`] so that no speaker crosses splits. Audio is decoded later, on
//! demand, with [`crate::audio::read_audio`]; a reader only checks that the layout is
//! what it claims to be and names the file and line when it is not.

mod librispeech;
mod manifest;
mod speech_commands;
mod split;

use std::path::{Path, PathBuf};

pub use librispeech::read_librispeech;
pub use manifest::read_manifest;
pub use speech_commands::{read_speech_commands, KwsLabels, SILENCE, UNKNOWN};
pub use split::{split_of_speaker, Split};

/// What an example should be recognised as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A class name (keyword spotting): the word folder, `_silence_` or `_unknown_`.
    Label(String),
    /// A transcript (ASR), as written in the corpus.
    Transcript(String),
}

/// One utterance of a corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// Audio file (WAV or FLAC).
    pub path: PathBuf,
    /// Speaker id; splits and the natural federated partition follow it.
    pub speaker: String,
    /// The label or transcript.
    pub target: Target,
    /// Which split the example belongs to.
    pub split: Split,
}

impl Example {
    /// The label of a keyword-spotting example, or the transcript of an ASR one.
    pub fn target_text(&self) -> &str {
        match &self.target {
            Target::Label(s) | Target::Transcript(s) => s,
        }
    }
}

/// Which layout a corpus directory (or file) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `<word>/<speaker>_nohash_<k>.wav`.
    SpeechCommands,
    /// `<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac` with `.trans.txt`.
    LibriSpeech,
    /// A JSONL manifest file.
    Manifest,
}

/// Why a corpus could not be read. Every variant names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line of a list, transcript or manifest file is malformed.
    #[error("{path}:{line}: {reason}")]
    BadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// A file named by the corpus does not exist.
    #[error("{path}: missing (named by {named_by})")]
    Missing {
        /// The missing file.
        path: PathBuf,
        /// The file that names it.
        named_by: PathBuf,
    },
    /// The directory does not look like the layout asked for.
    #[error("{path}: {reason}")]
    NotACorpus {
        /// The directory.
        path: PathBuf,
        /// What was expected.
        reason: String,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Is this an audio file hush reads (by extension)?
pub(crate) fn is_audio(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("wav" | "flac")
    )
}

/// Finds the layout of `path`: a `.jsonl` file is a manifest; a directory holding
/// `*.trans.txt` files is LibriSpeech; one holding `*_nohash_*` clips in word folders is
/// Speech Commands.
pub fn detect_layout(path: &Path) -> Result<Layout, DatasetError> {
    if path.is_file() {
        return if path.extension().is_some_and(|e| e == "jsonl") {
            Ok(Layout::Manifest)
        } else {
            Err(DatasetError::NotACorpus {
                path: path.to_path_buf(),
                reason: "a file corpus must be a .jsonl manifest".into(),
            })
        };
    }
    let mut stack = vec![(path.to_path_buf(), 0)];
    let mut saw_nohash = false;
    while let Some((dir, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let p = entry.map_err(io_err(&dir))?.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.ends_with(".trans.txt") {
                return Ok(Layout::LibriSpeech);
            }
            if name.contains("_nohash_") && is_audio(&p) {
                saw_nohash = true;
            }
            if p.is_dir() && depth < 3 {
                stack.push((p, depth + 1));
            }
        }
    }
    if saw_nohash {
        Ok(Layout::SpeechCommands)
    } else {
        Err(DatasetError::NotACorpus {
            path: path.to_path_buf(),
            reason: "expected a Speech Commands tree (<word>/<speaker>_nohash_<k>.wav), a \
                     LibriSpeech tree (*.trans.txt beside FLAC files) or a .jsonl manifest"
                .into(),
        })
    }
}

/// Reads a corpus in whatever layout [`detect_layout`] finds.
pub fn read_corpus(path: &Path) -> Result<(Layout, Vec<Example>), DatasetError> {
    let layout = detect_layout(path)?;
    let examples = match layout {
        Layout::SpeechCommands => read_speech_commands(path)?,
        Layout::LibriSpeech => read_librispeech(path)?,
        Layout::Manifest => read_manifest(path)?,
    };
    Ok((layout, examples))
}
