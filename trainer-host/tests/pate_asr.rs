//! PATE for ASR end to end on the bundled corpus: speaker-disjoint CTC teachers, public
//! utterances labelled by the noisy average of their frame posteriors (cost equal to the
//! Gaussian mechanism's, one ledger record), a student trained on those transcripts and
//! judged on held-out speakers; transcript voting refuses a threshold that lets one
//! teacher's transcript through.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use hush_device::infer::asr::{utterance_features, AsrRecognizer};
use hush_host::accountant::{Accountant, Adjacency, PrivacyUnit};
use hush_host::ledger::compose_records;
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::LedgerStore;
use hush_host::pate::asr::{
    label_asr, posterior_average_event, train_asr_student, train_asr_teachers,
    transcript_vote_delta, transcript_vote_event, AsrAggregator, AsrLabelConfig, AsrLabelFile,
};
use hush_host::pate::{Partition, PARTITION_JSON};
use hush_host::train::asr::{load_asr, AsrTrainConfig};
use hush_host::train::Augment;
use hush_models::asr::decode::greedy;
use hush_models::asr::Vocabulary;

/// Four private speakers (all train-split ids); the public ones include the corpus's
/// validation speakers 01fddb35 and 40cb36e1 and its only test speaker c8946917.
const PRIVATE: [&str; 4] = ["30487587", "49da0ba1", "535258af", "80ef2029"];
const PUBLIC: [&str; 5] = ["01fddb35", "40cb36e1", "c8946917", "83283e23", "98889645"];

fn config(data: &Path, epochs: usize) -> AsrTrainConfig {
    let mut cfg = AsrTrainConfig::new(data, "ctc-gru-small");
    cfg.features.mel.num_bins = 20;
    cfg.epochs = epochs;
    cfg.batch_size = 4;
    cfg.lr = 3e-3;
    cfg.patience = 100;
    cfg.beam = 1;
    cfg.augment = Augment::none();
    cfg
}

#[test]
fn asr_pate_teachers_posterior_average_and_student_on_held_out_speakers() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/asr");
    let tmp = tempfile::tempdir().unwrap();
    let private = tmp.path().join("private");
    let public = tmp.path().join("public");
    common::slice_corpus(&corpus, &private, &PRIVATE, 6);
    common::slice_corpus(&corpus, &public, &PUBLIC, 6);

    // Teachers: two, each on its own two speakers, none of them public.
    let teachers = tmp.path().join("teachers");
    let dirs =
        train_asr_teachers(&config(&private, 4), 2, 3, &teachers, &mut |_, _, _| {}).unwrap();
    assert_eq!(dirs.len(), 2);
    let partition = Partition::read(&teachers.join(PARTITION_JSON)).unwrap();
    let mut seen = BTreeSet::new();
    for speakers in &partition.teachers {
        assert_eq!(speakers.len(), 2);
        for s in speakers {
            assert!(seen.insert(s.clone()), "{s} trains two teachers");
            assert!(!PUBLIC.contains(&s.as_str()), "{s} is public");
        }
    }
    assert_eq!(seen.len(), PRIVATE.len());

    // Labels: the noisy average of the posteriors; its cost is the Gaussian mechanism's
    // for the public utterances' frame counts, recorded once in the ledger.
    let ledger = tmp.path().join("ledger.sqlite");
    let sigma = 0.05;
    let label_cfg = AsrLabelConfig {
        teachers: teachers.clone(),
        public: public.clone(),
        aggregator: AsrAggregator::PosteriorAverage { sigma },
        delta: 1e-5,
        ledger: ledger.clone(),
        budget_epsilon: 1e9,
        accountant: Accountant::Rdp,
        seed: Some(9),
    };
    let labels_path = tmp.path().join("labels.json");
    let file = label_asr(&label_cfg, &labels_path, &mut |_, _| {}).unwrap();
    assert_eq!(AsrLabelFile::read(&labels_path).unwrap(), file);
    let data = load_asr(&public, 16_000).unwrap();
    let queries: Vec<_> = data.train.iter().chain(&data.validation).collect();
    assert_eq!(file.labels.len(), queries.len());
    let recs: Vec<AsrRecognizer> = dirs
        .iter()
        .map(|d| AsrRecognizer::load(d).unwrap())
        .collect();
    // Per utterance, the teachers' mean posterior (f64, as the aggregator sums).
    let means: Vec<Vec<f32>> = queries
        .iter()
        .map(|u| {
            let f = utterance_features(recs[0].features(), &u.samples).unwrap();
            let p: Vec<Vec<f32>> = recs
                .iter()
                .map(|r| r.log_probs(&f, &u.path).unwrap())
                .collect();
            (0..p[0].len())
                .map(|i| (p.iter().map(|t| f64::from(t[i].exp())).sum::<f64>() / 2.0) as f32)
                .collect()
        })
        .collect();
    let frames: Vec<usize> = means.iter().map(|m| m.len() / 29).collect();
    let want = posterior_average_event(&frames, 2, sigma).unwrap();
    let eps = want
        .epsilon(Accountant::Rdp, Adjacency::AddRemove, 1e-5)
        .unwrap()
        .epsilon;
    assert!(
        (file.epsilon / eps - 1.0).abs() < 1e-12,
        "{} {eps}",
        file.epsilon
    );
    let records = SqliteLedgerStore::open(&ledger).unwrap().records().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].id, file.ledger_record);
    assert_eq!(records[0].release.event, want);

    // With negligible noise the label is the greedy decode of the teachers' mean posterior.
    let quiet = AsrLabelConfig {
        aggregator: AsrAggregator::PosteriorAverage { sigma: 1e-12 },
        budget_epsilon: 1e30,
        ledger: tmp.path().join("quiet.sqlite"),
        ..label_cfg.clone()
    };
    let clean = label_asr(&quiet, &tmp.path().join("quiet.json"), &mut |_, _| {}).unwrap();
    let vocab = Vocabulary::characters();
    for (l, m) in clean.labels.iter().zip(&means) {
        let decoded = vocab.decode(&greedy(m, 29));
        let want = decoded.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            l.text.clone().unwrap_or_default(),
            want.trim(),
            "{}",
            l.file.display()
        );
    }

    // The student learns from those transcripts and is judged on the held-out test
    // speaker, whom neither teachers nor student heard. (Four epochs of teachers on 12
    // utterances each barely leave the uniform posterior, so the labels are close to
    // noise and no WER or CER bound is robust here: 30 epochs at lr 1e-2 — 24 s — made
    // both teachers and student emit one letter, CER 1.0. Only the pipeline is checked.)
    let out = tmp.path().join("student");
    let student_cfg = config(&public, 4);
    let report = train_asr_student(&student_cfg, &file, &out, "test", &mut |_| {}).unwrap();
    let losses: Vec<f64> = report.epochs.iter().map(|e| e.train_loss).collect();
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(losses[losses.len() - 1] < losses[0], "{losses:?}");
    let m = report.card.metrics.as_ref().unwrap();
    let test = &m.splits["test"];
    eprintln!(
        "student on held-out speakers: WER {:.3}, CER {:.3} ({} utterances); losses {losses:?}",
        test.greedy_wer, test.greedy_cer, test.utterances
    );
    assert_eq!(test.utterances, 6);
    assert!(test.greedy_cer.is_finite() && test.greedy_wer.is_finite());

    // Transcript voting with a threshold that one teacher's transcript could pass with
    // more than δ/2 probability is refused by name, before the ledger is touched.
    let vote = AsrLabelConfig {
        aggregator: AsrAggregator::TranscriptVote {
            sigma: 1.0,
            threshold: 2.0,
        },
        ..label_cfg
    };
    let e = label_asr(&vote, &tmp.path().join("vote.json"), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("--threshold"), "{e}");
    assert_eq!(
        SqliteLedgerStore::open(&ledger)
            .unwrap()
            .records()
            .unwrap()
            .len(),
        1
    );

    // A threshold both teachers must reach: its δ' per utterance is spent outright, in the
    // ledger beside the Gaussian, so the record's ε is the Gaussian's at δ − U·δ' and the
    // ledger's total takes U·δ' off the budget's δ.
    let (sigma, threshold) = (0.15, 2.0);
    let vote = AsrLabelConfig {
        aggregator: AsrAggregator::TranscriptVote { sigma, threshold },
        ..vote
    };
    let voted = label_asr(&vote, &tmp.path().join("vote.json"), &mut |_, _| {}).unwrap();
    let records = SqliteLedgerStore::open(&ledger).unwrap().records().unwrap();
    assert_eq!(records.len(), 2);
    let r = &records[1];
    assert_eq!(r.id, voted.ledger_record);
    let spent = queries.len() as f64 * transcript_vote_delta(threshold, sigma);
    assert!(spent > 0.0 && spent <= 5e-6, "{spent}");
    assert_eq!(r.release.additional.delta, spent);
    assert!(r.release.additional.rdp.is_empty());
    assert_eq!(r.release.delta, 1e-5);
    let gaussian = transcript_vote_event(queries.len(), sigma).unwrap();
    assert_eq!(r.release.event, gaussian);
    let at_rest = gaussian
        .epsilon(Accountant::Rdp, Adjacency::AddRemove, 1e-5 - spent)
        .unwrap()
        .epsilon;
    assert_eq!(r.epsilon_rdp, Some(at_rest));
    assert_eq!(voted.epsilon, at_rest);
    let alone = compose_records(
        &records[1..],
        Accountant::Rdp,
        Adjacency::AddRemove,
        PrivacyUnit::User,
        1e-5,
    )
    .unwrap();
    assert_eq!(alone.epsilon, at_rest);

    // A keyword corpus given as ASR data is refused, naming the corpus.
    let kws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let e = train_asr_teachers(
        &config(&kws, 1),
        2,
        0,
        &tmp.path().join("t2"),
        &mut |_, _, _| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("Speech Commands"), "{e}");
}
