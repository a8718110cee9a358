//! PATE for ASR, the aggregator of the Amazon study: the teachers' per-frame output
//! posteriors on a public utterance are averaged and Gaussian noise is added to every
//! averaged entry; the noisy posteriors (decoded by the usual CTC decoders, which is
//! post-processing) label the utterance for the student. Also here: the CTC teachers
//! ([`train_asr_teachers`], speaker-disjoint and resumable through the same ensemble
//! trainer as the keyword teachers), the labelling run ([`label_asr`]: ledger first, then
//! the labels file) and the student ([`train_asr_student`]).
//!
//! # Sensitivity and cost
//!
//! One speaker trains one teacher, so adding or removing a speaker changes one teacher's
//! `frames × vocab` posterior matrix into any other. Each row is a probability vector and
//! two probability vectors are at most `√2` apart in L2, so the sum over teachers moves by
//! at most `√(2·frames)` in L2; the average divides by the number of teachers `n` (public,
//! fixed before the data is seen). Noise of std `σ` on each averaged entry is therefore
//! the Gaussian mechanism with noise multiplier `z = σ·n / √(2·frames)` per utterance.
//! Utterances compose; as Gaussian RDP and PLD are linear in `1/z²`, `U` utterances are
//! exactly `U` steps of one Gaussian with `1/z² = 2·mean(frames) / (σ·n)²`
//! ([`posterior_average_event`]) — the ledger's entry.
//!
//! # Voting over transcripts ([`AsrAggregator::TranscriptVote`])
//!
//! GNMax over the distinct teacher transcripts is not private by itself: the candidate
//! set depends on the data (a transcript that only one teacher produces exists only with
//! that teacher's speakers). It is released as a thresholded distinct histogram
//! (Korolova et al. 2009; Wilkins et al. 2024, the Gaussian sparse histogram mechanism):
//! count identical transcripts, add `N(0, σ²)` to every count, and release the arg-max
//! only if its noisy count reaches the threshold `T`. Changing one speaker changes one
//! teacher's transcript from `a` to `b`: the counts of candidates present on both sides
//! move by at most `(−1, +1)`, L2 sensitivity `√2` — the Gaussian mechanism with noise
//! multiplier `σ/√2` per utterance ([`transcript_vote_event`]; releasing only the
//! arg-max of the counts over `T` is post-processing). A candidate present on one side
//! only has count 1 there and is released with probability at most
//! `δ' = P[1 + σZ ≥ T] = Φ̄((T−1)/σ)` per utterance ([`transcript_vote_delta`]). The run
//! is therefore `(ε, δ_G + U·δ')`-DP over `U` utterances, `ε` being the Gaussian's at
//! `δ_G`. [`label_asr`] refuses a threshold for which `U·δ' > δ/2`, naming `--threshold`,
//! and records the Gaussian with `U·δ'` as δ spent outright (an
//! [`hush_privacy::accountant::AdditionalCost`]): the record's own ε is the Gaussian's at
//! `δ_G = δ − U·δ'`, and the ledger's composed total and every later budget check take
//! `U·δ'` off the budget's δ.

use std::path::{Path, PathBuf};

use hush_device::infer::asr::{utterance_features, AsrRecognizer};
use hush_models::asr::decode::greedy;
use hush_models::asr::Vocabulary;
use serde::{Deserialize, Serialize};

use super::label::{finished_teachers, ledger_error, open_ledger, write_atomically};
use super::teachers::{teacher_seed, Ensemble, Progress};
use hush_privacy::accountant::special::erfc;
use hush_privacy::accountant::{Accountant, AdditionalCost, Adjacency, PrivacyUnit};
use hush_privacy::ledger::{Mechanism, Release};
use hush_train::asr::{
    load_asr, load_asr_any_split, train_asr_on, AsrData, AsrTrainConfig, AsrTrainReport, Utterance,
};

use hush_models::dp::{GaussianNoise, NoiseSource};

use super::PateError;
use hush_privacy::accountant::SubsampledGaussian;

/// The noisy average of the teachers' posteriors on one utterance: `posteriors[t]` is
/// teacher `t`'s `frames × vocab` row-major matrix of per-frame probabilities (each row
/// summing to 1); returns the `frames × vocab` average plus `N(0, σ²)` on every entry.
pub fn noisy_average_posteriors(
    posteriors: &[Vec<f32>],
    frames: usize,
    vocab: usize,
    sigma: f64,
    noise: &mut NoiseSource,
) -> Result<Vec<f32>, PateError> {
    if posteriors.is_empty() {
        return Err(PateError::Option {
            option: "--teachers",
            reason: "no teacher posteriors to average".into(),
        });
    }
    let len = frames * vocab;
    if let Some((t, p)) = posteriors.iter().enumerate().find(|(_, p)| p.len() != len) {
        return Err(PateError::Option {
            option: "posteriors",
            reason: format!(
                "teacher {t} gave {} values; expected {frames} frames × {vocab} tokens = {len} \
                 (every teacher must share one vocabulary and frame rate)",
                p.len()
            ),
        });
    }
    let n = posteriors.len() as f64;
    let gauss = gaussian(sigma)?;
    Ok((0..len)
        .map(|i| {
            let mean = posteriors.iter().map(|p| f64::from(p[i])).sum::<f64>() / n;
            (mean + gauss.draw(noise)) as f32
        })
        .collect())
}

/// The Gaussian-mechanism event of averaging `teachers` teachers' posteriors with noise
/// `sigma` on utterances of `frames[u]` frames each (see the module docs).
pub fn posterior_average_event(
    frames: &[usize],
    teachers: usize,
    sigma: f64,
) -> Result<SubsampledGaussian, PateError> {
    gaussian(sigma)?;
    if frames.is_empty() || frames.contains(&0) || teachers == 0 {
        return Err(PateError::Option {
            option: "--public",
            reason: "at least one utterance of at least one frame, and one teacher".into(),
        });
    }
    let mean_frames = frames.iter().sum::<usize>() as f64 / frames.len() as f64;
    let z = sigma * teachers as f64 / (2.0 * mean_frames).sqrt();
    SubsampledGaussian::poisson(1.0, z, frames.len() as u64).map_err(|e| PateError::Option {
        option: "--sigma",
        reason: e.to_string(),
    })
}

/// The Gaussian part of [`AsrAggregator::TranscriptVote`] over `utterances` utterances:
/// noise multiplier `σ/√2` per utterance (see the module docs).
pub fn transcript_vote_event(
    utterances: usize,
    sigma: f64,
) -> Result<SubsampledGaussian, PateError> {
    gaussian(sigma)?;
    SubsampledGaussian::poisson(1.0, sigma / 2f64.sqrt(), utterances as u64).map_err(|e| {
        PateError::Option {
            option: "--sigma",
            reason: e.to_string(),
        }
    })
}

/// `δ' = Φ̄((T−1)/σ)`: the probability that a transcript proposed by one teacher passes
/// the threshold `T` (see the module docs).
pub fn transcript_vote_delta(threshold: f64, sigma: f64) -> f64 {
    0.5 * erfc((threshold - 1.0) / (sigma * 2f64.sqrt()))
}

/// One thresholded noisy vote over the teachers' transcripts: the most common transcript
/// if its count plus `N(0, σ²)` (noise on every distinct transcript's count) is the
/// largest and reaches `threshold`; `None` otherwise.
pub fn noisy_transcript_vote(
    transcripts: &[String],
    sigma: f64,
    threshold: f64,
    noise: &mut NoiseSource,
) -> Result<Option<String>, PateError> {
    let gauss = gaussian(sigma)?;
    let mut counts: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for t in transcripts {
        *counts.entry(t.as_str()).or_default() += 1.0;
    }
    Ok(counts
        .into_iter()
        .map(|(t, c)| (t, c + gauss.draw(noise)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|(_, c)| *c >= threshold)
        .map(|(t, _)| t.to_string()))
}

/// The ASR aggregators.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AsrAggregator {
    /// Noisy averaging of the frame posteriors, then a greedy CTC decode.
    PosteriorAverage {
        /// Noise std on every averaged posterior entry.
        sigma: f64,
    },
    /// Thresholded noisy vote over the teachers' greedy transcripts.
    TranscriptVote {
        /// Noise std on every transcript's count.
        sigma: f64,
        /// Threshold `T` on the winner's noisy count.
        threshold: f64,
    },
}

impl AsrAggregator {
    /// The CLI name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PosteriorAverage { .. } => "posterior-average",
            Self::TranscriptVote { .. } => "transcript-vote",
        }
    }
}

/// Trains `n` CTC teachers (`cfg.arch_name`, e.g. `ctc-gru-small`) on speaker-disjoint
/// parts of the private ASR corpus `cfg.data` (every split), resumable as the keyword
/// teachers ([`super::teachers`]); each teacher early-stops on its own speakers only.
pub fn train_asr_teachers(
    cfg: &AsrTrainConfig,
    n: usize,
    seed: u64,
    out: &Path,
    progress: &mut Progress<'_>,
) -> Result<Vec<PathBuf>, PateError> {
    train_asr_teachers_in_parallel(cfg, n, seed, 1, out, progress)
}

/// [`train_asr_teachers`] with up to `jobs` teachers training at once (see
/// [`super::teachers`] on what that does to seeded runs).
pub fn train_asr_teachers_in_parallel(
    cfg: &AsrTrainConfig,
    n: usize,
    seed: u64,
    jobs: usize,
    out: &Path,
    progress: &mut Progress<'_>,
) -> Result<Vec<PathBuf>, PateError> {
    let data = load_asr_any_split(&cfg.data, cfg.features.frame.sample_rate)?;
    if data.train.len() + data.validation.len() + data.test.len() == 0 {
        return Err(PateError::File {
            path: cfg.data.clone(),
            reason: "no utterance in the private ASR corpus".into(),
        });
    }
    let utts: Vec<&Utterance> = data
        .train
        .iter()
        .chain(&data.validation)
        .chain(&data.test)
        .collect();
    let ensemble = Ensemble {
        private: &cfg.data,
        n,
        seed,
        jobs,
        out,
    };
    ensemble.train_on(&utts, |u| &u.speaker, progress, &|t, own, scratch| {
        let teacher_data = AsrData {
            train: own.clone(),
            validation: own.clone(),
            test: own,
            noises: data.noises.clone(),
        };
        let mut teacher_cfg = cfg.clone();
        teacher_cfg.seed = teacher_seed(cfg.seed, t);
        let command = format!("hush-host pate train-teachers --task asr (teacher {t} of {n})");
        train_asr_on(&teacher_cfg, &teacher_data, scratch, &command, &mut |_| {})?;
        Ok(())
    })
}

/// Everything `hush-host pate label --task asr` decides.
#[derive(Debug, Clone, PartialEq)]
pub struct AsrLabelConfig {
    /// The teachers' directory (`train-teachers --task asr --out`).
    pub teachers: PathBuf,
    /// The public ASR corpus (its train and validation utterances are labelled; their
    /// transcripts are not read for labelling).
    pub public: PathBuf,
    /// The aggregator and its noise.
    pub aggregator: AsrAggregator,
    /// δ of the reported ε and of the ledger budget.
    pub delta: f64,
    /// The privacy ledger (SQLite; created if missing).
    pub ledger: PathBuf,
    /// The ledger's total ε budget.
    pub budget_epsilon: f64,
    /// The ledger's accountant.
    pub accountant: Accountant,
    /// Seeded noise (tests and reproducible experiments only); `None`: OS randomness.
    pub seed: Option<u64>,
}

/// One public utterance's transcript label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrPublicLabel {
    /// The audio file, relative to the public corpus.
    pub file: PathBuf,
    /// The aggregated transcript; `None` when refused or decoded to nothing.
    pub text: Option<String>,
}

/// The ASR labels file (`--out`, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrLabelFile {
    /// The teachers' directory.
    pub teachers: PathBuf,
    /// Number of teachers.
    pub num_teachers: usize,
    /// The public corpus.
    pub public: PathBuf,
    /// The aggregator.
    pub aggregator: AsrAggregator,
    /// δ of `epsilon` (including `U·δ'` for transcript-vote).
    pub delta: f64,
    /// ε of the whole labelling run (data-independent, RDP or PLD as the ledger's).
    pub epsilon: f64,
    /// Utterances labelled with a transcript.
    pub answered: usize,
    /// The ledger file.
    pub ledger: String,
    /// The ledger record's id.
    pub ledger_record: i64,
    /// Per utterance.
    pub labels: Vec<AsrPublicLabel>,
}

impl AsrLabelFile {
    /// Reads an ASR labels file, naming it in errors.
    pub fn read(path: &Path) -> Result<Self, PateError> {
        super::read_json_file(path, "an ASR PATE labels file")
    }
}

/// Labels the public ASR corpus with the teachers' noisy aggregate and writes the labels
/// file to `out` after recording the cost in the ledger. `progress` gets
/// `(teacher, teachers)`.
pub fn label_asr(
    cfg: &AsrLabelConfig,
    out: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<AsrLabelFile, PateError> {
    let teachers = finished_teachers(&cfg.teachers)?;
    let first = AsrRecognizer::load(&teachers[0])?;
    let features = first.features().clone();
    let data = load_asr(&cfg.public, features.frame.sample_rate)?;
    let queries: Vec<Utterance> = data.train.into_iter().chain(data.validation).collect();
    let vocab = Vocabulary::characters();
    let v = vocab.len();
    let feats = queries
        .iter()
        .map(|u| {
            utterance_features(&features, &u.samples).map_err(|source| {
                hush_device::infer::InferError::Features {
                    path: u.path.clone(),
                    source,
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // posteriors[u][t]: teacher t's `steps × vocab` probabilities on utterance u.
    let mut posteriors: Vec<Vec<Vec<f32>>> = vec![Vec::new(); queries.len()];
    for (t, dir) in teachers.iter().enumerate() {
        progress(t, teachers.len());
        let rec = AsrRecognizer::load(dir)?;
        if rec.features() != &features || rec.card().vocabulary.len() != v {
            return Err(PateError::File {
                path: dir.clone(),
                reason: "its features or vocabulary differ from the first teacher's".into(),
            });
        }
        for (u, f) in feats.iter().enumerate() {
            let lp = rec.log_probs(f, &queries[u].path)?;
            posteriors[u].push(lp.iter().map(|x| x.exp()).collect());
        }
    }
    let frames: Vec<usize> = posteriors.iter().map(|p| p[0].len() / v).collect();
    let n = teachers.len();
    let (event, delta_g, extra_delta) = match cfg.aggregator {
        AsrAggregator::PosteriorAverage { sigma } => {
            (posterior_average_event(&frames, n, sigma)?, cfg.delta, 0.0)
        }
        AsrAggregator::TranscriptVote { sigma, threshold } => {
            if threshold > n as f64 {
                return Err(PateError::Option {
                    option: "--threshold",
                    reason: format!(
                        "T = {threshold} is more than the {n} teachers: only noise could \
                         pass it"
                    ),
                });
            }
            let extra = queries.len() as f64 * transcript_vote_delta(threshold, sigma);
            if !(threshold.is_finite() && extra <= cfg.delta / 2.0) {
                return Err(PateError::Option {
                    option: "--threshold",
                    reason: format!(
                        "T = {threshold} with σ = {sigma} lets a transcript of one teacher \
                         through with probability {:.2e} over {} utterances, more than δ/2 = \
                         {:e}; raise T",
                        extra,
                        queries.len(),
                        cfg.delta / 2.0
                    ),
                });
            }
            (
                transcript_vote_event(queries.len(), sigma)?,
                cfg.delta - extra,
                extra,
            )
        }
    };
    let (mut ledger, speakers) = open_ledger(
        &cfg.teachers,
        &cfg.ledger,
        cfg.budget_epsilon,
        cfg.delta,
        cfg.accountant,
    )?;
    let privacy = ledger_error;
    let release = Release {
        mechanism: Mechanism::Pate,
        event,
        unit: PrivacyUnit::User,
        adjacency: Adjacency::AddRemove,
        population: Some(speakers as u64),
        delta: cfg.delta,
        released: format!(
            "PATE ASR {} transcripts of {} public utterances ({}); Gaussian part at δ = {:e}, \
             plus δ' = {:e} for transcripts of one teacher",
            cfg.aggregator.name(),
            queries.len(),
            out.display(),
            delta_g,
            extra_delta
        ),
        additional: AdditionalCost::delta_spent(extra_delta).map_err(|e| PateError::Option {
            option: "--threshold",
            reason: e.to_string(),
        })?,
    };
    // Up front, before any noise is drawn: the cost does not depend on the outcome.
    let authorization = ledger.authorize(&release).map_err(privacy)?;
    let epsilon = event
        .epsilon(cfg.accountant, Adjacency::AddRemove, delta_g)
        .map_err(|e| PateError::Option {
            option: "--sigma",
            reason: e.to_string(),
        })?
        .epsilon;
    let mut noise = match cfg.seed {
        Some(s) => NoiseSource::from_seed(s),
        None => NoiseSource::from_os(),
    };
    let mut labels = Vec::with_capacity(queries.len());
    for (u, q) in queries.iter().enumerate() {
        let text = match cfg.aggregator {
            AsrAggregator::PosteriorAverage { sigma } => {
                let avg =
                    noisy_average_posteriors(&posteriors[u], frames[u], v, sigma, &mut noise)?;
                Some(vocab.decode(&greedy(&avg, v)))
            }
            AsrAggregator::TranscriptVote { sigma, threshold } => {
                let transcripts: Vec<String> = posteriors[u]
                    .iter()
                    .map(|p| vocab.decode(&greedy(p, v)))
                    .collect();
                noisy_transcript_vote(&transcripts, sigma, threshold, &mut noise)?
            }
        };
        labels.push(AsrPublicLabel {
            file: q
                .path
                .strip_prefix(&cfg.public)
                .unwrap_or(&q.path)
                .to_path_buf(),
            // Words separated by single spaces, as the corpus transcripts; empty: no label.
            text: text
                .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|t| !t.is_empty()),
        });
    }
    // Recorded before the labels file exists (`Ledger::complete`).
    ledger.complete(
        authorization.release(),
        |store, sealed| Ok(sealed.append_to(store)?),
        |record| {
            let file = AsrLabelFile {
                teachers: cfg.teachers.clone(),
                num_teachers: n,
                public: cfg.public.clone(),
                aggregator: cfg.aggregator,
                delta: cfg.delta,
                epsilon,
                answered: labels.iter().filter(|l| l.text.is_some()).count(),
                ledger: cfg.ledger.display().to_string(),
                ledger_record: record.id,
                labels,
            };
            write_atomically(out, &file)?;
            Ok(file)
        },
    )
}

/// Trains the ASR student on the public corpus `cfg.data` with the transcripts of
/// `labels` (the answered utterances of its train and validation splits; every tenth for
/// early stopping, with its aggregated transcript too) and writes its package to `out`;
/// the public test split, with its true transcripts, only judges it.
pub fn train_asr_student(
    cfg: &AsrTrainConfig,
    labels: &AsrLabelFile,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&hush_train::asr::AsrEpochReport),
) -> Result<AsrTrainReport, PateError> {
    let by_file: std::collections::HashMap<&Path, &str> = labels
        .labels
        .iter()
        .filter_map(|l| l.text.as_deref().map(|t| (l.file.as_path(), t)))
        .collect();
    let public = load_asr(&cfg.data, cfg.features.frame.sample_rate)?;
    let vocab = Vocabulary::characters();
    let mut answered = Vec::new();
    for mut u in public.train.into_iter().chain(public.validation) {
        let relative = u.path.strip_prefix(&cfg.data).unwrap_or(&u.path);
        if let Some(text) = by_file.get(relative) {
            u.text = (*text).to_string();
            u.labels = vocab.encode(text)?;
            answered.push(u);
        }
    }
    if answered.len() < 2 {
        return Err(PateError::File {
            path: cfg.data.clone(),
            reason: format!(
                "only {} of its utterances carry an aggregated transcript; the student needs \
                 at least 2",
                answered.len()
            ),
        });
    }
    let (validation, train): (Vec<_>, Vec<_>) = answered
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 10 == 9);
    let mut train: Vec<Utterance> = train.into_iter().map(|(_, u)| u).collect();
    let mut validation: Vec<Utterance> = validation.into_iter().map(|(_, u)| u).collect();
    if validation.is_empty() {
        validation.push(train[train.len() - 1].clone());
        train.pop();
    }
    let data = AsrData {
        train,
        validation,
        test: public.test,
        noises: public.noises,
    };
    Ok(train_asr_on(cfg, &data, out, command, progress)?)
}

/// The Gaussian noise of `--sigma` (finite and > 0).
fn gaussian(sigma: f64) -> Result<GaussianNoise, PateError> {
    if sigma.is_finite() && sigma > 0.0 {
        GaussianNoise::new(sigma).map_err(|e| PateError::Option {
            option: "--sigma",
            reason: e.to_string(),
        })
    } else {
        Err(PateError::Option {
            option: "--sigma",
            reason: format!("{sigma} is not a positive number"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hush_privacy::accountant::Adjacency;

    #[test]
    fn the_noise_on_the_average_has_std_sigma() {
        // Three teachers, 50 frames × 4 tokens; the mean is [0.25; 4] per frame.
        let uniform = vec![0.25f32; 200];
        let teachers = vec![uniform.clone(); 3];
        let mut noise = NoiseSource::from_seed(4);
        let mut xs = Vec::new();
        for _ in 0..500 {
            let out = noisy_average_posteriors(&teachers, 50, 4, 0.3, &mut noise).unwrap();
            xs.extend(out.iter().map(|v| f64::from(*v) - 0.25));
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        // 100 000 draws: the sample std is within 1 % of 0.3 (about 4 standard errors).
        assert!(
            mean.abs() < 0.005 && (sd / 0.3 - 1.0).abs() < 0.01,
            "{mean} {sd}"
        );
    }

    #[test]
    fn one_teacher_moves_the_average_by_at_most_the_sensitivity_the_cost_assumes() {
        // The worst case: one teacher's one-hot rows all move to another token.
        let (frames, vocab, n) = (30, 5, 4);
        let one_hot = |k: usize| -> Vec<f32> {
            (0..frames * vocab)
                .map(|i| f32::from(u8::from(i % vocab == k)))
                .collect()
        };
        let mut a = vec![one_hot(0); n];
        let mut noise = NoiseSource::from_seed(1);
        let tiny = 1e-12;
        let before = noisy_average_posteriors(&a, frames, vocab, tiny, &mut noise).unwrap();
        a[2] = one_hot(3);
        let after = noisy_average_posteriors(&a, frames, vocab, tiny, &mut noise).unwrap();
        let moved = before
            .iter()
            .zip(&after)
            .map(|(x, y)| f64::from(x - y).powi(2))
            .sum::<f64>()
            .sqrt();
        let sensitivity = (2.0 * frames as f64).sqrt() / n as f64;
        assert!(
            (moved / sensitivity - 1.0).abs() < 1e-6,
            "{moved} {sensitivity}"
        );
        // The ledger event is that Gaussian: RDP α·Δ²/(2σ²) per utterance, composed.
        let sigma = 0.5;
        let ev = posterior_average_event(&[frames, frames, frames], n, sigma).unwrap();
        let orders = [2.0, 8.0, 32.0];
        let rdp = ev.rdp(Adjacency::AddRemove, &orders).unwrap();
        for (a, r) in orders.iter().zip(rdp) {
            let want = 3.0 * a * sensitivity * sensitivity / (2.0 * sigma * sigma);
            assert!((r / want - 1.0).abs() < 1e-9, "{a}: {r} vs {want}");
        }
        // Utterances of other lengths compose as their sum.
        let ev = posterior_average_event(&[10, 50], n, sigma).unwrap();
        let r = ev.rdp(Adjacency::AddRemove, &[2.0]).unwrap()[0];
        let want: f64 = [10.0, 50.0]
            .iter()
            .map(|t| 2.0 * (2.0 * t) / (n as f64 * n as f64) / (2.0 * sigma * sigma))
            .sum();
        assert!((r / want - 1.0).abs() < 1e-9, "{r} vs {want}");
    }

    #[test]
    fn transcript_vote_passes_the_threshold_at_the_gaussian_rates_and_costs_its_gaussian() {
        let mut noise = NoiseSource::from_seed(11);
        let rate =
            |transcripts: &[&str], threshold: f64, trials: usize, noise: &mut NoiseSource| {
                let t: Vec<String> = transcripts.iter().map(|s| s.to_string()).collect();
                (0..trials)
                    .filter(|_| {
                        noisy_transcript_vote(&t, 1.0, threshold, noise)
                            .unwrap()
                            .is_some()
                    })
                    .count() as f64
                    / trials as f64
            };
        // Five teachers agree: released when 5 + σZ ≥ 6, probability Φ̄(1) = 0.1587
        // (4 000 draws: standard error 0.006).
        let five = rate(&["turn on"; 5], 6.0, 4000, &mut noise);
        assert!((five - 0.158_655).abs() < 0.025, "{five}");
        // A transcript of one teacher passes T = 3 with probability δ' = Φ̄(2) = 0.02275
        // (20 000 draws: standard error 0.001).
        let delta = transcript_vote_delta(3.0, 1.0);
        assert!((delta - 0.022_750_1).abs() < 1e-6, "{delta}");
        let one = rate(&["stray"], 3.0, 20_000, &mut noise);
        assert!((one - delta).abs() < 0.005, "{one} vs {delta}");
        // The winner is the majority when the noise is small.
        let t: Vec<String> = ["a", "b", "a"].iter().map(|s| s.to_string()).collect();
        let won = noisy_transcript_vote(&t, 1e-6, 1.5, &mut noise).unwrap();
        assert_eq!(won.as_deref(), Some("a"));
        // Its Gaussian: sensitivity √2 on the counts, RDP α·2/(2σ²) per utterance.
        let ev = transcript_vote_event(10, 2.0).unwrap();
        let orders = [2.0, 16.0];
        let rdp = ev.rdp(Adjacency::AddRemove, &orders).unwrap();
        for (a, r) in orders.iter().zip(rdp) {
            let want = 10.0 * a * 2.0 / (2.0 * 4.0);
            assert!((r / want - 1.0).abs() < 1e-9, "{a}: {r} vs {want}");
        }
    }

    #[test]
    fn teachers_over_other_vocabularies_are_refused_by_name() {
        let mut noise = NoiseSource::from_seed(0);
        let e = noisy_average_posteriors(&[vec![0.5; 8], vec![0.5; 6]], 4, 2, 1.0, &mut noise)
            .unwrap_err();
        assert!(e.to_string().contains("teacher 1"), "{e}");
        assert!(posterior_average_event(&[3], 2, 0.0).is_err());
        assert!(posterior_average_event(&[], 2, 1.0).is_err());
    }
}
