//! Virtual users: a population of many users built deterministically from the base
//! speakers of a generated corpus. Each user takes one base speaker, a voice of their own
//! ([`voice::UserVoice`]: pitch, rate, vocal-tract length, level, microphone, room,
//! background) and their own words — a few to a few dozen clips whose classes follow a
//! Dirichlet draw over the classes (non-IID). Every clip is rendered and turned into
//! features once and cached on disk ([`cache`]); a run maps the cache and reads a user's
//! clips when the user is drawn, so memory follows the cohort, not the population.
//!
//! Users inherit their base speaker's split ([`hush_device::dataset::split_of_speaker`]):
//! validation and test users are disjoint from training users *and* from their base voices.
//! Users made from the same base speaker are not independent people: they share the base
//! voice's timbre and each base take, under different transforms.

pub mod cache;
pub mod voice;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_device::dataset::{read_corpus, KwsLabels, Target};
use hush_device::features::FeatureConfig;
use hush_device::infer::clip_samples;
use hush_device::training::LocalData;
use hush_train::augment::MelAxis;
use hush_train::data::{read_kws, Clip};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::fleet::FleetUsers;
use crate::simulate::{io_err, SimulateError};
use cache::{FeatureMap, FeatureWriter, INDEX_FILE};
use voice::UserVoice;

/// Version of the cache's layout; a cache of another version is rebuilt.
const FORMAT: u32 = 1;

/// What population to build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PopulationSpec {
    /// Training users (the devices of the federation).
    pub users: usize,
    /// Validation users (tuning; the initial model's input statistics).
    pub validation_users: usize,
    /// Test users (scored once, at the end).
    pub test_users: usize,
    /// Fewest and most clips a user has (drawn log-uniformly between them).
    pub clips: [usize; 2],
    /// Concentration of each user's Dirichlet draw over the classes: small is skewed
    /// (a user says a few of the words), large is close to uniform.
    pub alpha: f64,
    /// Seed of every draw: the same seed and corpus give the same users, bit for bit.
    pub seed: u64,
}

impl Default for PopulationSpec {
    /// 10 000 training users, 300 validation and 500 test users, 4 to 40 clips each,
    /// Dirichlet(0.5) over the classes.
    fn default() -> Self {
        Self {
            users: 10_000,
            validation_users: 300,
            test_users: 500,
            clips: [4, 40],
            alpha: 0.5,
            seed: 0,
        }
    }
}

impl PopulationSpec {
    /// Refuses a spec that cannot be built, naming the field.
    pub fn validate(&self) -> Result<(), SimulateError> {
        let bad = |what: &str| Err(SimulateError::Unusable(format!("virtual users: {what}")));
        if self.users == 0 || self.validation_users == 0 || self.test_users == 0 {
            return bad("need at least one training, one validation and one test user");
        }
        if self.clips[0] == 0 || self.clips[0] > self.clips[1] {
            return bad(&format!(
                "clips per user {:?}: expected 1 <= fewest <= most",
                self.clips
            ));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return bad(&format!(
                "Dirichlet alpha {}: expected a finite number > 0",
                self.alpha
            ));
        }
        Ok(())
    }

    fn count(&self, split: UserSplit) -> usize {
        match split {
            UserSplit::Train => self.users,
            UserSplit::Validation => self.validation_users,
            UserSplit::Test => self.test_users,
        }
    }
}

/// Which part of the population a user belongs to (their base speaker's split).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UserSplit {
    /// A device of the federation.
    Train,
    /// Held out for tuning.
    Validation,
    /// Held out for the final score.
    Test,
}

impl UserSplit {
    const ALL: [UserSplit; 3] = [Self::Train, Self::Validation, Self::Test];

    fn tag(self) -> &'static str {
        match self {
            Self::Train => "u",
            Self::Validation => "v",
            Self::Test => "t",
        }
    }
}

/// One virtual user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VirtualUser {
    /// Name: split tag, number and base speaker (`u00042-fd2376f9`).
    pub name: String,
    /// The user's part of the population.
    pub split: UserSplit,
    /// The base speaker whose takes the user's clips are made from.
    pub base: String,
    /// The user's voice.
    pub voice: UserVoice,
    /// Index of the user's first clip in the features file.
    pub first_clip: u64,
    /// Class of each of the user's clips.
    pub classes: Vec<usize>,
}

/// What a cache was built from: a cache is reused only when all of it matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Recipe {
    format: u32,
    spec: PopulationSpec,
    features: FeatureConfig,
    frames: usize,
    labels: Vec<String>,
    /// The base corpus: the digest of [`corpus_listing`].
    corpus: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Index {
    recipe: Recipe,
    base_speakers: [usize; 3],
    users: Vec<VirtualUser>,
}

/// A built population, its features mapped from the cache.
#[derive(Debug)]
pub struct Population {
    index: Index,
    features: FeatureMap,
    bins: usize,
    frames: usize,
}

/// A population's users of one split, as the fleet sees them.
pub struct SplitUsers<'a> {
    population: &'a Population,
    users: Vec<usize>,
}

impl FleetUsers for SplitUsers<'_> {
    fn count(&self) -> usize {
        self.users.len()
    }
    fn name(&self, i: usize) -> String {
        self.population.index.users[self.users[i]].name.clone()
    }
    fn data(&self, i: usize) -> Result<Cow<'_, LocalData>, SimulateError> {
        self.population.user_data(self.users[i]).map(Cow::Owned)
    }
}

impl Population {
    /// The population `spec` describes over the base speakers of the Speech Commands
    /// corpus `corpus`, with `features` × `frames` per clip and classes `labels`: read
    /// from `cache` when it holds exactly this population, built and written there
    /// otherwise (every core renders; `log` sees progress).
    pub fn open_or_build(
        cache: &Path,
        corpus: &Path,
        spec: &PopulationSpec,
        features: &FeatureConfig,
        frames: usize,
        labels: &[String],
        log: &mut dyn FnMut(&str),
    ) -> Result<Self, SimulateError> {
        spec.validate()?;
        let kws_labels = KwsLabels {
            classes: labels.to_vec(),
        };
        let recipe = Recipe {
            format: FORMAT,
            spec: spec.clone(),
            features: features.clone(),
            frames,
            labels: labels.to_vec(),
            corpus: corpus_listing(corpus)?,
        };
        if let Some(index) = read_index(cache)? {
            if index.recipe == recipe {
                log(&format!(
                    "virtual users: {} from the cache {}",
                    index.users.len(),
                    cache.display()
                ));
                return Self::open(cache, index, features.dim(), frames);
            }
            log(&format!(
                "virtual users: the cache {} holds another population; rebuilding it",
                cache.display()
            ));
        }
        // The base clips are decoded only to build (they are not needed to run).
        let clip_len = clip_samples(features, frames);
        let data = read_kws(corpus, &kws_labels, features.frame.sample_rate, clip_len)
            .map_err(|e| SimulateError::Unusable(e.to_string()))?;
        let index = build(cache, recipe, &data, log)?;
        Self::open(cache, index, features.dim(), frames)
    }

    fn open(cache: &Path, index: Index, bins: usize, frames: usize) -> Result<Self, SimulateError> {
        let clips: usize = index.users.iter().map(|u| u.classes.len()).sum();
        let features = FeatureMap::open(cache, (clips * bins * frames) as u64)?;
        Ok(Self {
            index,
            features,
            bins,
            frames,
        })
    }

    /// Every user, training users first, then validation and test users.
    pub fn users(&self) -> &[VirtualUser] {
        &self.index.users
    }

    /// Base speakers behind the training, validation and test users.
    pub fn base_speakers(&self) -> [usize; 3] {
        self.index.base_speakers
    }

    /// The users of `split`, for the fleet.
    pub fn split(&self, split: UserSplit) -> SplitUsers<'_> {
        SplitUsers {
            population: self,
            users: (0..self.index.users.len())
                .filter(|&i| self.index.users[i].split == split)
                .collect(),
        }
    }

    /// User `i`'s clips, read from the cache.
    pub fn user_data(&self, i: usize) -> Result<LocalData, SimulateError> {
        let user = &self.index.users[i];
        let per_clip = self.bins * self.frames;
        let features = self.features.read(
            user.first_clip * per_clip as u64,
            user.classes.len() * per_clip,
        )?;
        Ok(LocalData {
            features,
            classes: user.classes.clone(),
            frames: self.frames,
            bins: self.bins,
        })
    }

    /// The clips of every user of `split`, pooled (validation and test sets).
    pub fn pooled(&self, split: UserSplit) -> Result<LocalData, SimulateError> {
        let mut all = LocalData {
            features: Vec::new(),
            classes: Vec::new(),
            frames: self.frames,
            bins: self.bins,
        };
        for (i, _) in self
            .index
            .users
            .iter()
            .enumerate()
            .filter(|(_, u)| u.split == split)
        {
            let d = self.user_data(i)?;
            all.features.extend(d.features);
            all.classes.extend(d.classes);
        }
        Ok(all)
    }
}

fn read_index(cache: &Path) -> Result<Option<Index>, SimulateError> {
    let path = cache.join(INDEX_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path, e)),
    }
}

/// The corpus as the cache's recipe names it: a digest of every labelled clip's speaker,
/// path, label and file size (a regenerated corpus with other audio is another corpus),
/// read from the listing without decoding any audio.
fn corpus_listing(corpus: &Path) -> Result<String, SimulateError> {
    let (_, examples) = read_corpus(corpus)?;
    let mut h = sha1_smol::Sha1::new();
    for e in examples {
        let Target::Label(word) = &e.target else {
            continue;
        };
        let size = std::fs::metadata(&e.path)
            .map_err(|err| io_err(&e.path, err))?
            .len();
        let rel = e.path.strip_prefix(corpus).unwrap_or(&e.path);
        h.update(format!("{}\t{}\t{word}\t{size}\n", e.speaker, rel.display()).as_bytes());
    }
    Ok(h.digest().to_string())
}

/// One base speaker's takes, by class.
struct BaseSpeaker<'a> {
    name: &'a str,
    by_class: Vec<Vec<&'a Clip>>,
}

/// Users are rendered this many at a time (all cores), then written in order.
const CHUNK: usize = 64;

fn build(
    cache: &Path,
    recipe: Recipe,
    data: &hush_train::data::KwsData,
    log: &mut dyn FnMut(&str),
) -> Result<Index, SimulateError> {
    let started = Instant::now();
    let spec = &recipe.spec;
    let classes = recipe.labels.len();
    let sample_rate = recipe.features.frame.sample_rate;
    let axis = MelAxis::of(&recipe.features);
    let mut bases: [Vec<BaseSpeaker<'_>>; 3] = Default::default();
    for (split, clips) in [
        (UserSplit::Train, &data.train),
        (UserSplit::Validation, &data.validation),
        (UserSplit::Test, &data.test),
    ] {
        let mut by_speaker: BTreeMap<&str, Vec<Vec<&Clip>>> = BTreeMap::new();
        for c in clips {
            by_speaker
                .entry(&c.speaker)
                .or_insert_with(|| vec![Vec::new(); classes])[c.class]
                .push(c);
        }
        if by_speaker.is_empty() {
            return Err(SimulateError::Unusable(format!(
                "virtual users: the corpus has no {split:?} speakers to base {split:?} users on"
            )));
        }
        bases[split as usize] = by_speaker
            .into_iter()
            .map(|(name, by_class)| BaseSpeaker { name, by_class })
            .collect();
    }
    let total: usize = UserSplit::ALL.iter().map(|&s| spec.count(s)).sum();
    log(&format!(
        "virtual users: building {total} ({} training, {} validation, {} test) from {} + {} + {} base speakers into {}",
        spec.users,
        spec.validation_users,
        spec.test_users,
        bases[0].len(),
        bases[1].len(),
        bases[2].len(),
        cache.display()
    ));
    let mut writer = FeatureWriter::create(cache)?;
    let mut users = Vec::with_capacity(total);
    let mut clips_written = 0u64;
    let mut next_report = total / 10;
    for split in UserSplit::ALL {
        let speakers = &bases[split as usize];
        // Users go round the base speakers in a seeded order: each base voice carries
        // users / bases of them, ±1.
        let mut order: Vec<usize> = (0..speakers.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(
            spec.seed ^ (split as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ));
        let n = spec.count(split);
        for chunk in (0..n).collect::<Vec<_>>().chunks(CHUNK) {
            let made = chunk
                .par_iter()
                .map(|&u| {
                    let base = &speakers[order[u % order.len()]];
                    let mut rng = user_rng(spec.seed, split, u);
                    make_user(
                        base,
                        &mut rng,
                        spec,
                        &data.noises,
                        sample_rate,
                        &recipe,
                        axis.as_ref(),
                    )
                    .map(|(voice, classes, feats)| {
                        let name = format!("{}{u:05}-{}", split.tag(), base.name);
                        (name, base.name.to_string(), voice, classes, feats)
                    })
                })
                .collect::<Result<Vec<_>, SimulateError>>()?;
            for (name, base, voice, classes, feats) in made {
                writer.append(&feats)?;
                users.push(VirtualUser {
                    name,
                    split,
                    base,
                    voice,
                    first_clip: clips_written,
                    classes: classes.clone(),
                });
                clips_written += classes.len() as u64;
            }
            if users.len() >= next_report {
                log(&format!(
                    "virtual users: {}/{total} ({clips_written} clips, {:.0} s)",
                    users.len(),
                    started.elapsed().as_secs_f64()
                ));
                next_report = users.len() + total / 10;
            }
        }
    }
    let index = Index {
        recipe,
        base_speakers: bases.map(|b| b.len()),
        users,
    };
    let json = serde_json::to_vec(&index).map_err(|e| io_err(cache, e))?;
    writer.finish(cache, &json)?;
    log(&format!(
        "virtual users: {total} users, {clips_written} clips in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(index)
}

/// User `u` of `split`'s own random stream.
fn user_rng(seed: u64, split: UserSplit, u: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((split as u64) << 40) | u as u64);
    rng
}

type MadeUser = (UserVoice, Vec<usize>, Vec<f32>);

/// One user of `base`: their voice, their clips' classes (Dirichlet proportions over the
/// classes the base speaker has takes of) and features.
fn make_user(
    base: &BaseSpeaker<'_>,
    rng: &mut ChaCha8Rng,
    spec: &PopulationSpec,
    noises: &[Vec<f32>],
    sample_rate: u32,
    recipe: &Recipe,
    axis: Option<&MelAxis>,
) -> Result<MadeUser, SimulateError> {
    let voice = UserVoice::draw(rng, noises.len(), sample_rate);
    let room = voice.room(sample_rate);
    let [lo, hi] = spec.clips.map(|c| (c as f64).ln());
    let count =
        (rng.random_range(lo..=hi).exp().round() as usize).clamp(spec.clips[0], spec.clips[1]);
    let gamma = Gamma::new(spec.alpha, 1.0)
        .map_err(|e| SimulateError::Unusable(format!("Dirichlet alpha {}: {e}", spec.alpha)))?;
    let weights: Vec<f64> = base
        .by_class
        .iter()
        .map(|takes| {
            let w = gamma.sample(rng);
            if takes.is_empty() {
                0.0
            } else {
                w
            }
        })
        .collect();
    let mut weights = weights;
    let have: Vec<usize> = (0..weights.len())
        .filter(|&c| !base.by_class[c].is_empty())
        .collect();
    if have.is_empty() {
        return Err(SimulateError::Unusable(format!(
            "base speaker {} has no labelled takes",
            base.name
        )));
    }
    if weights.iter().sum::<f64>() <= 0.0 {
        // Every draw underflowed (a tiny alpha): all the user's clips are of one class.
        weights[have[rng.random_range(0..have.len())]] = 1.0;
    }
    let sum: f64 = weights.iter().sum();
    let mut classes = Vec::with_capacity(count);
    let mut feats = Vec::with_capacity(count * recipe.frames * recipe.features.dim());
    for _ in 0..count {
        let class = pick(&weights, sum, rng);
        let takes = &base.by_class[class];
        let take = takes[rng.random_range(0..takes.len())];
        let rendered = voice.render(&take.samples, &room, noises, sample_rate, rng);
        let f = voice
            .features(&recipe.features, axis, &rendered, recipe.frames)
            .map_err(|e| SimulateError::Unusable(format!("{}: {e}", take.path.display())))?;
        feats.extend(f);
        classes.push(class);
    }
    Ok((voice, classes, feats))
}

/// An index drawn with probability proportional to `weights` (`sum` > 0 their sum).
fn pick(weights: &[f64], sum: f64, rng: &mut ChaCha8Rng) -> usize {
    let mut r = rng.random_range(0.0..sum);
    for (i, &w) in weights.iter().enumerate() {
        if r < w {
            return i;
        }
        r -= w;
    }
    // Rounding left r at the top: the last class with weight.
    weights.iter().rposition(|&w| w > 0.0).unwrap_or(0)
}

/// The cache folder's default place for a run writing to `out`.
pub fn default_cache(out: &Path) -> PathBuf {
    out.join("virtual-users")
}
