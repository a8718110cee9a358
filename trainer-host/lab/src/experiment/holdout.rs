//! Groups of voices held out of training: one engine, or one donor family.
//!
//! Held-out synthetic speakers of the engines a model trained on overstate its quality:
//! the voices of one engine share their synthesis, whoever the "speaker" is. The
//! generalization experiments ([`super::kws_generalization`], [`super::asr_generalization`])
//! therefore train once per held-out group on the training and validation speakers of the
//! other groups and test on every example of the group's speakers ([`split_out`]). Engines
//! and voices come from the corpus's `speakers.tsv` ([`hush_corpus::synth::read_speakers`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ExperimentError;
use hush_corpus::synth::SpeakerVoice;
use hush_corpus::voices::Engine;

/// A group of speakers held out of training and tested on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Holdout {
    /// Every speaker of one engine (`espeak-ng`, `flite`, `festival`, `pico`, `piper`).
    Engine(String),
    /// Every speaker whose voice is built from one recorded donor (`kal`, `slt`, `ked`,
    /// `awb`, `rms`; Pico's `lh0`, `kh0`; Piper's `joe`): the voice name contains the
    /// donor's name, whatever the engine.
    Donor(String),
}

impl Holdout {
    /// Parses an engine (`espeak-ng`, `flite`, `festival`, `pico`, `piper`) or
    /// `donor:NAME`.
    pub fn parse(s: &str) -> Result<Self, ExperimentError> {
        match s.split_once(':') {
            Some(("donor", name)) if !name.is_empty() => Ok(Self::Donor(name.to_string())),
            None if Engine::parse(s).is_some() => Ok(Self::Engine(s.to_string())),
            _ => Err(ExperimentError::Config(format!(
                "--holdouts: `{s}` is neither an engine ({}) nor donor:NAME",
                Engine::all_names()
            ))),
        }
    }

    /// Every engine, one holdout each: the experiments' default.
    pub fn engines() -> Vec<Self> {
        ["espeak-ng", "flite", "festival"]
            .iter()
            .map(|e| Self::Engine(e.to_string()))
            .collect()
    }

    /// Whether `voice`'s speaker belongs to the group.
    pub fn contains(&self, voice: &SpeakerVoice) -> bool {
        match self {
            Self::Engine(e) => voice.engine == *e,
            Self::Donor(d) => voice.engine != "espeak-ng" && voice.voice.contains(d.as_str()),
        }
    }

    /// `engine espeak-ng`, `donor slt`.
    pub fn name(&self) -> String {
        match self {
            Self::Engine(e) => format!("engine {e}"),
            Self::Donor(d) => format!("donor {d}"),
        }
    }

    /// The run's folder name: `without-espeak-ng`, `without-donor-slt`.
    pub fn slug(&self) -> String {
        match self {
            Self::Engine(e) => format!("without-{e}"),
            Self::Donor(d) => format!("without-donor-{d}"),
        }
    }
}

/// One run of a generalization experiment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRun<'a> {
    /// `all engines (speaker-disjoint test)` or the held-out group's name.
    pub setting: String,
    /// The run's folder under `runs/`: `all` or the group's slug.
    pub slug: String,
    /// The held-out group (None: every engine, tested on the speaker-disjoint test split).
    pub holdout: Option<&'a Holdout>,
}

/// The runs of a generalization experiment: the all-engines run first when `all_engines`,
/// then one per holdout; an error when that is nothing.
pub fn plan(
    holdouts: &[Holdout],
    all_engines: bool,
) -> Result<Vec<PlannedRun<'_>>, ExperimentError> {
    if holdouts.is_empty() && !all_engines {
        return Err(ExperimentError::Config(
            "nothing to run: no --holdouts and the all-engines run is off".into(),
        ));
    }
    let all = all_engines.then(|| PlannedRun {
        setting: "all engines (speaker-disjoint test)".into(),
        slug: "all".into(),
        holdout: None,
    });
    Ok(all
        .into_iter()
        .chain(holdouts.iter().map(|h| PlannedRun {
            setting: h.name(),
            slug: h.slug(),
            holdout: Some(h),
        }))
        .collect())
}

/// The data of a run holding `holdout` out of a corpus split `[train, validation, test]`
/// by speaker: the training and validation examples of every other speaker, and every
/// example of the group's speakers (all three splits, in that order) as the test set.
/// `speaker` names an example's speaker; speakers missing from `speakers` are not in
/// any group.
pub fn split_out<T: Clone>(
    [train, validation, test]: [&[T]; 3],
    speakers: &BTreeMap<String, SpeakerVoice>,
    holdout: &Holdout,
    speaker: impl Fn(&T) -> &str,
) -> [Vec<T>; 3] {
    let in_group = |x: &T| {
        speakers
            .get(speaker(x))
            .is_some_and(|v| holdout.contains(v))
    };
    let keep = |xs: &[T], held: bool| -> Vec<T> {
        xs.iter().filter(|x| in_group(x) == held).cloned().collect()
    };
    let mut held = keep(train, true);
    held.extend(keep(validation, true));
    held.extend(keep(test, true));
    [keep(train, false), keep(validation, false), held]
}

/// Distinct speakers among `xs`.
pub fn speaker_count<T>(xs: &[T], speaker: impl Fn(&T) -> &str) -> usize {
    xs.iter().map(speaker).collect::<BTreeSet<_>>().len()
}

/// Speakers per engine in `speakers.tsv`.
pub fn engine_counts(speakers: &BTreeMap<String, SpeakerVoice>) -> BTreeMap<String, usize> {
    let mut engines = BTreeMap::new();
    for v in speakers.values() {
        *engines.entry(v.engine.clone()).or_insert(0) += 1;
    }
    engines
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn voice(engine: &str, voice: &str) -> SpeakerVoice {
        SpeakerVoice {
            engine: engine.to_string(),
            voice: voice.to_string(),
        }
    }

    /// Four speakers: espeak-ng, flite slt, festival slt, festival ked.
    pub(crate) fn speakers() -> BTreeMap<String, SpeakerVoice> {
        [
            ("a".to_string(), voice("espeak-ng", "en-us+m1")),
            ("b".to_string(), voice("flite", "slt")),
            (
                "c".to_string(),
                voice("festival", "voice_cmu_us_slt_arctic_hts"),
            ),
            ("d".to_string(), voice("festival", "voice_ked_diphone")),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn holdout_moves_every_example_of_the_group_to_test() {
        let speakers = speakers();
        let (train, validation, test) = (["a", "b", "c"], ["d", "a"], ["b", "c"]);
        let split =
            |h: &Holdout| split_out([&train, &validation, &test], &speakers, h, |s: &&str| *s);
        let [tr, va, te] = split(&Holdout::Engine("festival".into()));
        assert_eq!(tr, ["a", "b"]);
        assert_eq!(va, ["a"]);
        assert_eq!(te, ["c", "d", "c"]);
        let [tr, va, te] = split(&Holdout::Donor("slt".into()));
        assert_eq!(tr, ["a"]);
        assert_eq!(va, ["d", "a"]);
        assert_eq!(te, ["b", "c", "b", "c"]);
        // A speaker missing from speakers.tsv is in no group: it stays in training.
        let [tr, _, te] = split_out(
            [&["z"][..], &[], &[]],
            &speakers,
            &Holdout::engines()[0],
            |s: &&str| *s,
        );
        assert_eq!((tr, te), (vec!["z"], vec![]));
        assert_eq!(speaker_count(&["a", "b", "a"], |s: &&str| *s), 2);
        assert_eq!(engine_counts(&speakers)["festival"], 2);
    }

    #[test]
    fn the_plan_puts_every_engine_first_and_refuses_nothing() {
        let holdouts = Holdout::engines();
        let runs = plan(&holdouts, true).unwrap();
        let slugs: Vec<&str> = runs.iter().map(|r| r.slug.as_str()).collect();
        assert_eq!(
            slugs,
            [
                "all",
                "without-espeak-ng",
                "without-flite",
                "without-festival"
            ]
        );
        assert_eq!(runs[0].holdout, None);
        assert_eq!(runs[2].holdout, Some(&holdouts[1]));
        assert_eq!(plan(&holdouts[..1], false).unwrap().len(), 1);
        let err = plan(&[], false).unwrap_err().to_string();
        assert!(err.contains("nothing to run"), "{err}");
    }

    #[test]
    fn holdouts_parse_and_name_themselves() {
        assert_eq!(
            Holdout::parse("flite").unwrap(),
            Holdout::Engine("flite".into())
        );
        assert_eq!(
            Holdout::parse("donor:kal").unwrap(),
            Holdout::Donor("kal".into())
        );
        assert!(Holdout::parse("sapi").is_err());
        assert!(Holdout::parse("donor:").is_err());
        assert_eq!(Holdout::Donor("kal".into()).slug(), "without-donor-kal");
        assert_eq!(Holdout::engines().len(), 3);
        // espeak-ng voices are formant voices: no donor.
        assert!(!Holdout::Donor("m1".into()).contains(&voice("espeak-ng", "en-us+m1")));
    }
}
