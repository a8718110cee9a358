//! The LibriSpeech layout: `<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac` with one
//! `<speaker>-<chapter>.trans.txt` per chapter holding `UTTERANCE-ID TRANSCRIPT` lines.
//!
//! Top-level folders named like LibriSpeech's subsets (`train-*`, `dev-*`, `test-*`)
//! decide the split; otherwise the speaker hash does.

use std::path::{Path, PathBuf};

use super::{io_err, DatasetError, Example, Split, Target};

/// Lists every utterance of a LibriSpeech-style tree (FLAC or WAV audio).
pub fn read_librispeech(root: &Path) -> Result<Vec<Example>, DatasetError> {
    let mut transcripts = Vec::new();
    collect_transcripts(root, 0, &mut transcripts)?;
    transcripts.sort();
    let mut examples = Vec::new();
    for trans in transcripts {
        let dir = trans.parent().unwrap_or(root);
        let split = subset_split(root, &trans);
        let text = std::fs::read_to_string(&trans).map_err(io_err(&trans))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let bad = |reason: String| DatasetError::BadLine {
                path: trans.clone(),
                line: i + 1,
                reason,
            };
            let Some((id, words)) = line.split_once(char::is_whitespace) else {
                return Err(bad("expected `<speaker>-<chapter>-<utt> TRANSCRIPT`".into()));
            };
            let Some((speaker, _)) = id.split_once('-') else {
                return Err(bad(format!(
                    "utterance id `{id}` is not <speaker>-<chapter>-<utt>"
                )));
            };
            let audio = ["flac", "wav"]
                .iter()
                .map(|ext| dir.join(format!("{id}.{ext}")))
                .find(|p| p.is_file())
                .ok_or_else(|| DatasetError::Missing {
                    path: dir.join(format!("{id}.flac")),
                    named_by: trans.clone(),
                })?;
            examples.push(Example {
                path: audio,
                speaker: speaker.to_string(),
                target: Target::Transcript(words.trim().to_string()),
                split: split.unwrap_or_else(|| super::split_of_speaker(speaker)),
            });
        }
    }
    if examples.is_empty() {
        return Err(DatasetError::NotACorpus {
            path: root.to_path_buf(),
            reason: "no utterances found in *.trans.txt files".into(),
        });
    }
    Ok(examples)
}

fn collect_transcripts(
    dir: &Path,
    depth: usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), DatasetError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = entry.map_err(io_err(dir))?.path();
        if p.is_dir() && depth < 4 {
            collect_transcripts(&p, depth + 1, out)?;
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".trans.txt"))
        {
            out.push(p);
        }
    }
    Ok(())
}

/// The split named by a LibriSpeech subset folder under `root`, if any.
fn subset_split(root: &Path, file: &Path) -> Option<Split> {
    let first = file.strip_prefix(root).ok()?.components().next()?;
    let name = first.as_os_str().to_str()?;
    if name.starts_with("train") {
        Some(Split::Train)
    } else if name.starts_with("dev") {
        Some(Split::Validation)
    } else if name.starts_with("test") {
        Some(Split::Test)
    } else {
        None
    }
}
