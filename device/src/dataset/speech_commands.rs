//! The Speech Commands layout: `<word>/<speaker>_nohash_<k>.wav` (or `.flac`).
//!
//! `_background_noise_/` holds long noise recordings and is not a class. Clips under
//! `_unknown_/` may carry their spoken word in `_unknown_/words.tsv`; their label stays
//! `_unknown_`. When `validation_list.txt` and `testing_list.txt` exist at the root they
//! decide the split (paths relative to the root, one per line); otherwise the speaker
//! hash of [`super::split_of_speaker`] does, so no speaker crosses splits.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::{io_err, is_audio, DatasetError, Example, Split, Target};

/// Label of clips that hold no speech.
pub const SILENCE: &str = "_silence_";
/// Label of clips that hold a word outside the keyword set.
pub const UNKNOWN: &str = "_unknown_";
const BACKGROUND: &str = "_background_noise_";

/// Lists every clip of a Speech Commands tree, labelled by its folder.
pub fn read_speech_commands(root: &Path) -> Result<Vec<Example>, DatasetError> {
    let lists = [
        (Split::Validation, root.join("validation_list.txt")),
        (Split::Test, root.join("testing_list.txt")),
    ];
    let mut listed: HashMap<String, Split> = HashMap::new();
    let have_lists = lists.iter().any(|(_, p)| p.exists());
    for (split, path) in &lists {
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        for (i, line) in text.lines().enumerate() {
            let rel = line.trim();
            if rel.is_empty() {
                continue;
            }
            if !root.join(rel).is_file() {
                return Err(DatasetError::Missing {
                    path: root.join(rel),
                    named_by: path.clone(),
                });
            }
            if listed.insert(rel.to_string(), *split).is_some() {
                return Err(DatasetError::BadLine {
                    path: path.clone(),
                    line: i + 1,
                    reason: format!("{rel} is listed twice"),
                });
            }
        }
    }

    let mut words: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(root).map_err(io_err(root))? {
        let p = entry.map_err(io_err(root))?.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != BACKGROUND) {
            words.push(p);
        }
    }
    words.sort();

    let mut examples = Vec::new();
    for dir in words {
        let word = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let mut clips: Vec<PathBuf> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let p = entry.map_err(io_err(&dir))?.path();
            if p.is_file() && is_audio(&p) {
                clips.push(p);
            }
        }
        clips.sort();
        for path in clips {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            let Some((speaker, _)) = name.split_once("_nohash_") else {
                return Err(DatasetError::NotACorpus {
                    path,
                    reason: "clip name must be <speaker>_nohash_<k>.wav".into(),
                });
            };
            let rel = format!("{word}/{name}");
            let split = if have_lists {
                listed.get(&rel).copied().unwrap_or(Split::Train)
            } else {
                super::split_of_speaker(speaker)
            };
            examples.push(Example {
                speaker: speaker.to_string(),
                path,
                target: Target::Label(word.clone()),
                split,
            });
        }
    }
    if examples.is_empty() {
        return Err(DatasetError::NotACorpus {
            path: root.to_path_buf(),
            reason: "no <word>/<speaker>_nohash_<k>.wav clips found".into(),
        });
    }
    Ok(examples)
}

/// The class set of a keyword spotter: chosen keywords, then `_silence_` and
/// `_unknown_`. Every other word folder maps to `_unknown_`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KwsLabels {
    /// Class names in output order.
    pub classes: Vec<String>,
}

impl KwsLabels {
    /// Keywords followed by `_silence_` and `_unknown_`. Duplicates are dropped.
    pub fn new<S: AsRef<str>>(keywords: &[S]) -> Self {
        let mut seen = HashSet::new();
        let mut classes: Vec<String> = keywords
            .iter()
            .map(|k| k.as_ref().to_string())
            .filter(|k| k != SILENCE && k != UNKNOWN && seen.insert(k.clone()))
            .collect();
        classes.push(SILENCE.to_string());
        classes.push(UNKNOWN.to_string());
        KwsLabels { classes }
    }

    /// The class index of a word folder.
    pub fn class_of(&self, word: &str) -> usize {
        self.classes
            .iter()
            .position(|c| c == word)
            .unwrap_or(self.classes.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_keywords_map_to_unknown() {
        let l = KwsLabels::new(&["yes", "no", "yes"]);
        assert_eq!(l.classes, ["yes", "no", SILENCE, UNKNOWN]);
        assert_eq!(l.class_of("no"), 1);
        assert_eq!(l.class_of(SILENCE), 2);
        assert_eq!(l.class_of("marvin"), 3);
        assert_eq!(l.class_of(UNKNOWN), 3);
    }
}
