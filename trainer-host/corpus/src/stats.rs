//! `corpus stats`: clips per class and split, speakers and total duration of a corpus in
//! any layout the readers know.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hush_device::audio::{read_audio, AudioError};
use hush_device::dataset::{read_corpus, DatasetError, Layout, Target};

/// What a corpus holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CorpusStats {
    /// `speech-commands`, `librispeech` or `manifest`.
    pub layout: &'static str,
    /// Number of clips or utterances.
    pub clips: usize,
    /// Clips per class (KWS) — empty for ASR.
    pub per_class: BTreeMap<String, usize>,
    /// Clips per split.
    pub per_split: BTreeMap<String, usize>,
    /// Distinct speakers.
    pub speakers: usize,
    /// Speakers per split (no speaker may be in two).
    pub speakers_per_split: BTreeMap<String, usize>,
    /// Total audio duration in seconds.
    pub seconds: f64,
    /// Sample rates found, with clip counts.
    pub sample_rates: BTreeMap<u32, usize>,
}

/// Why statistics could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The corpus layout is wrong.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// A clip could not be decoded.
    #[error(transparent)]
    Audio(#[from] AudioError),
}

/// Reads the corpus at `path` and decodes every clip to measure it.
pub fn corpus_stats(path: &Path) -> Result<CorpusStats, StatsError> {
    let (layout, examples) = read_corpus(path)?;
    let mut stats = CorpusStats {
        layout: match layout {
            Layout::SpeechCommands => "speech-commands",
            Layout::LibriSpeech => "librispeech",
            Layout::Manifest => "manifest",
        },
        clips: examples.len(),
        per_class: BTreeMap::new(),
        per_split: BTreeMap::new(),
        speakers: 0,
        speakers_per_split: BTreeMap::new(),
        seconds: 0.0,
        sample_rates: BTreeMap::new(),
    };
    let mut speakers = BTreeSet::new();
    let mut split_speakers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in &examples {
        if let Target::Label(l) = &e.target {
            *stats.per_class.entry(l.clone()).or_default() += 1;
        }
        *stats.per_split.entry(e.split.name().into()).or_default() += 1;
        speakers.insert(e.speaker.as_str());
        split_speakers
            .entry(e.split.name())
            .or_default()
            .insert(&e.speaker);
        let audio = read_audio(&e.path)?;
        stats.seconds += audio.duration_s();
        *stats.sample_rates.entry(audio.sample_rate).or_default() += 1;
    }
    stats.speakers = speakers.len();
    stats.speakers_per_split = split_speakers
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.len()))
        .collect();
    Ok(stats)
}

impl std::fmt::Display for CorpusStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "layout: {}", self.layout)?;
        writeln!(
            f,
            "clips: {}   speakers: {}   duration: {:.1} s ({:.2} h)",
            self.clips,
            self.speakers,
            self.seconds,
            self.seconds / 3600.0
        )?;
        let rates: Vec<String> = self
            .sample_rates
            .iter()
            .map(|(r, n)| format!("{r} Hz × {n}"))
            .collect();
        writeln!(f, "sample rates: {}", rates.join(", "))?;
        for (split, n) in &self.per_split {
            let s = self.speakers_per_split.get(split).copied().unwrap_or(0);
            writeln!(f, "split {split:<10} {n:>6} clips  {s:>4} speakers")?;
        }
        if !self.per_class.is_empty() {
            writeln!(f, "clips per class:")?;
            for (class, n) in &self.per_class {
                writeln!(f, "  {class:<12} {n:>6}")?;
            }
        }
        Ok(())
    }
}
