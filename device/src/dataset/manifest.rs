//! JSONL manifests: one JSON object per line with `path` (relative to the manifest's
//! folder, or absolute), `speaker`, and either `label` (KWS) or `text` (ASR); an optional
//! `split` (`train`, `validation`, `test`) overrides the speaker hash.

use std::path::Path;

use serde::Deserialize;

use super::{io_err, DatasetError, Example, Split, Target};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    path: String,
    speaker: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    split: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    duration: Option<f64>,
}

/// Reads a JSONL manifest, checking every line and that every audio file exists.
pub fn read_manifest(manifest: &Path) -> Result<Vec<Example>, DatasetError> {
    let base = manifest.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(manifest).map_err(io_err(manifest))?;
    let mut examples = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| DatasetError::BadLine {
            path: manifest.to_path_buf(),
            line: i + 1,
            reason,
        };
        let line: Line = serde_json::from_str(raw).map_err(|e| {
            bad(format!(
                "{e}; expected {{\"path\": …, \"speaker\": …, \"label\" or \"text\": …}}"
            ))
        })?;
        let target = match (line.label, line.text) {
            (Some(l), None) => Target::Label(l),
            (None, Some(t)) => Target::Transcript(t),
            _ => return Err(bad("give exactly one of \"label\" and \"text\"".into())),
        };
        let split = match line.split.as_deref() {
            None => super::split_of_speaker(&line.speaker),
            Some("train") => Split::Train,
            Some("validation" | "dev") => Split::Validation,
            Some("test") => Split::Test,
            Some(other) => {
                return Err(bad(format!(
                    "split `{other}`; expected train, validation or test"
                )))
            }
        };
        let path = base.join(&line.path);
        if !path.is_file() {
            return Err(DatasetError::Missing {
                path,
                named_by: manifest.to_path_buf(),
            });
        }
        examples.push(Example {
            path,
            speaker: line.speaker,
            target,
            split,
        });
    }
    if examples.is_empty() {
        return Err(DatasetError::NotACorpus {
            path: manifest.to_path_buf(),
            reason: "the manifest has no entries".into(),
        });
    }
    Ok(examples)
}
