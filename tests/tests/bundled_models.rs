//! The models shipped in `models/` load as `hush-device classify` and `transcribe` load
//! them; the keyword spotters label the bundled corpus's clips mostly right and the
//! recogniser transcribes its utterances well below chance. Those speakers were never
//! trained on: the bundled models come from larger generated corpora with other seeds. The bars below are what the models reach (`docs/results/kws-quality/README.md`)
//! with a margin: raise them when the models are retrained.

#![allow(clippy::unwrap_used)] // test helpers: a failure should stop the test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hush_device::dataset::{read_corpus, Target};
use hush_device::infer::{AsrRecognizer, Decoder, KwsClassifier};
use hush_host::corpus::grammar::sentence;
use hush_models::asr::decode::Lexicon;
use hush_models::asr::normalize_transcript;
use hush_models::asr::wer::ErrorCounts;
use hush_tests::bundled_corpus;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The ten commands of the bundled corpus.
const COMMANDS: [&str; 10] = [
    "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
];

/// Fraction of the 440 clips (every command and `_silence_` clip of the bundled corpus)
/// kws-12 must get right: 0.9 (its streaming form gets 432 of 440; the same-padded model
/// before it 433, and the one before its sentence-crop stages 434).
const KWS_12_BAR: f64 = 0.9;
/// The same for kws-22 (chance: 1/22; its streaming form gets 416 of 440, the same-padded
/// model before it 413, the one before its sentence-crop stage 412).
const KWS_22_BAR: f64 = 0.85;
/// Greedy word error rate the bundled recogniser must stay under on the 200 utterances of
/// the bundled ASR corpus (20 speakers): issue 4's target, 0.15 (it gets 0.105; the models
/// before it 0.168, 0.339, 0.384 and 0.774).
const ASR_WER_BAR: f64 = 0.15;
/// The same with prefix beam search over the grammar's 91 words (`models/asr/lexicon.txt`),
/// width 64, `transcribe --lexicon`'s default (it gets 0.048; the model before the
/// first-word fix 0.117).
const ASR_LEXICON_WER_BAR: f64 = 0.1;

fn bundled_model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models")
        .join(name)
}

/// Every clip of every command and of `_silence_`, sorted by name within each.
fn clips() -> Vec<(String, PathBuf)> {
    let kws = bundled_corpus().join("kws");
    let mut out = Vec::new();
    for word in COMMANDS.iter().chain(&["_silence_"]) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(kws.join(word))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "flac"))
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|p| (word.to_string(), p)));
    }
    out
}

/// Fraction of `clips` the package `name` labels right; checks its labels first.
fn accuracy(name: &str, labels: usize, clips: &[(String, PathBuf)]) -> f64 {
    let clf = KwsClassifier::load(&bundled_model(name)).unwrap();
    let card = clf.card();
    assert_eq!(card.labels.len(), labels, "{:?}", card.labels);
    assert!(COMMANDS.iter().all(|w| card.labels.iter().any(|l| l == w)));
    let provenance = card.provenance.as_ref().unwrap();
    assert!(provenance.command.contains("hush-host"), "{provenance:?}");
    let right = clips
        .iter()
        .filter(|(word, path)| clf.classify_file(path).unwrap().label == *word)
        .count();
    right as f64 / clips.len() as f64
}

#[test]
fn kws_12_labels_bundled_clips_mostly_right() {
    let clips = clips();
    assert_eq!(clips.len(), 440);
    let acc = accuracy("kws-12", 12, &clips);
    assert!(
        acc > KWS_12_BAR,
        "kws-12: {acc:.3} of {} clips right",
        clips.len()
    );
}

#[test]
fn kws_22_labels_bundled_clips_mostly_right() {
    let clips = clips();
    let acc = accuracy("kws-22", 22, &clips);
    assert!(
        acc > KWS_22_BAR,
        "kws-22: {acc:.3} of {} clips right",
        clips.len()
    );
}

#[test]
fn the_asr_model_transcribes_the_bundled_utterances() {
    let asr = AsrRecognizer::load(&bundled_model("asr")).unwrap();
    let words = std::fs::read_to_string(bundled_model("asr").join("lexicon.txt")).unwrap();
    let lexicon = Decoder::Lexicon(64, Lexicon::from_text(&words, asr.vocabulary()).unwrap());
    let (_, utterances) = read_corpus(&bundled_corpus().join("asr")).unwrap();
    assert_eq!(utterances.len(), 200);
    let mut wer = Vec::new();
    for (name, decoder) in [("greedy", &Decoder::Greedy), ("lexicon", &lexicon)] {
        let (mut words, mut chars) = (ErrorCounts::default(), ErrorCounts::default());
        for u in &utterances {
            let Target::Transcript(reference) = &u.target else {
                panic!("{u:?} has no transcript")
            };
            let reference = normalize_transcript(reference);
            let text = asr.transcribe_file(&u.path, decoder).unwrap().text;
            words.add_words(&reference, &text);
            chars.add_chars(&reference, &text);
        }
        eprintln!(
            "asr: {name} WER {:.3} ({} errors / {} words), CER {:.3}",
            words.rate(),
            words.errors,
            words.reference,
            chars.rate()
        );
        wer.push(words.rate());
    }
    assert!(wer[0] < ASR_WER_BAR, "greedy WER {:.3}", wer[0]);
    assert!(wer[1] < ASR_LEXICON_WER_BAR, "lexicon WER {:.3}", wer[1]);
}

/// `models/asr/lexicon.txt` holds every word the ASR corpus grammar can say, and no other.
#[test]
fn the_bundled_lexicon_is_the_grammars_words() {
    let lexicon: BTreeSet<String> =
        std::fs::read_to_string(bundled_model("asr").join("lexicon.txt"))
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let said: BTreeSet<String> = (0..5000)
        .flat_map(|_| {
            sentence(&mut rng)
                .split(' ')
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(said, lexicon);
}
