//! CTC decoding, shared by the host (validation, test report) and the device
//! (`hush-device transcribe`): greedy (best path) and prefix beam search without a
//! language model (Hannun et al., "First-Pass Large Vocabulary Continuous Speech
//! Recognition using Bi-Directional Recurrent DNNs", 2014, Algorithm 1, with no LM
//! term).
//!
//! Both take per-frame log-probabilities, `frames × vocab` row-major, blank at
//! [`BLANK`], and return label indices (no blanks, repeats merged).
//!
//! [`beam_search_lexicon`] is the prefix beam search for a small vocabulary: only words of
//! a [`Lexicon`] can be spelled, so a hypothesis that leaves every word of it is dropped
//! as soon as it does, and the text comes out as words of the lexicon.
//!
//! ```
//! use hush_models::asr::decode::{beam_search, greedy};
//! // Two frames over {blank, a}: blank is each frame's best, yet "a" is the likelier text.
//! let lp: Vec<f32> = [0.6f32, 0.4, 0.6, 0.4].iter().map(|p| p.ln()).collect();
//! assert_eq!(greedy(&lp, 2), Vec::<usize>::new());
//! assert_eq!(beam_search(&lp, 2, 4), vec![1]);
//! ```

use std::collections::{HashMap, HashSet};

use super::vocab::{normalize_transcript, Vocabulary, BLANK};
use crate::ModelError;

/// Best path: the most probable symbol per frame, repeats merged, blanks dropped.
/// A trailing partial row (`log_probs.len()` not a multiple of `vocab`) is ignored.
pub fn greedy(log_probs: &[f32], vocab: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut prev = BLANK;
    for row in log_probs.chunks_exact(vocab.max(1)) {
        let best = row
            .iter()
            .enumerate()
            .fold(
                (BLANK, f32::NEG_INFINITY),
                |a, (i, &v)| {
                    if v > a.1 {
                        (i, v)
                    } else {
                        a
                    }
                },
            )
            .0;
        if best != BLANK && best != prev {
            out.push(best);
        }
        prev = best;
    }
    out
}

fn log_add(a: f32, b: f32) -> f32 {
    if a == f32::NEG_INFINITY {
        return b;
    }
    if b == f32::NEG_INFINITY {
        return a;
    }
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    hi + (lo - hi).exp().ln_1p()
}

/// A prefix's probability of ending in blank and in its last symbol (log domain).
#[derive(Debug, Clone, Copy)]
struct Ends {
    blank: f32,
    symbol: f32,
}

impl Ends {
    const ZERO: Ends = Ends {
        blank: f32::NEG_INFINITY,
        symbol: f32::NEG_INFINITY,
    };
    fn total(self) -> f32 {
        log_add(self.blank, self.symbol)
    }
}

/// Prefix beam search keeping the `beam` most probable prefixes per frame (at least 1);
/// returns the most probable label sequence found (summed over its alignments). With a
/// beam as wide as the number of reachable prefixes it is exact.
pub fn beam_search(log_probs: &[f32], vocab: usize, beam: usize) -> Vec<usize> {
    prefix_beam_search(log_probs, vocab, beam, &|_, _| true, &|_| true)
}

/// The words a small-vocabulary recogniser may output, as label sequences over the
/// model's vocabulary, with every prefix of every word (the search's constraint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lexicon {
    words: HashSet<Vec<usize>>,
    prefixes: HashSet<Vec<usize>>,
    space: usize,
}

impl Lexicon {
    /// The words of `text` (whitespace-separated, normalised like transcripts: lower
    /// case, `a`–`z` and apostrophes) over `vocab`, whose word separator is `" "`. Errors:
    /// no words, or a vocabulary without a space.
    pub fn from_text(text: &str, vocab: &Vocabulary) -> Result<Self, ModelError> {
        let bad = |reason: &str| ModelError::BadLexicon {
            reason: reason.to_string(),
        };
        let space = vocab
            .symbols()
            .iter()
            .position(|s| s == " ")
            .ok_or_else(|| bad("the model's vocabulary has no space to separate words"))?;
        let mut words = HashSet::new();
        for word in normalize_transcript(text)
            .split(' ')
            .filter(|w| !w.is_empty())
        {
            words.insert(vocab.encode(word)?);
        }
        if words.is_empty() {
            return Err(bad(
                "no words (one or more per line, separated by white space)",
            ));
        }
        let prefixes = words
            .iter()
            .flat_map(|w| (1..=w.len()).map(move |n| w[..n].to_vec()))
            .collect();
        Ok(Self {
            words,
            prefixes,
            space,
        })
    }

    /// How many words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether there are no words (never, for a lexicon from [`Lexicon::from_text`]).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The word being spelled at the end of `prefix` (after its last space).
    fn last_word<'a>(&self, prefix: &'a [usize]) -> &'a [usize] {
        let start = prefix
            .iter()
            .rposition(|&c| c == self.space)
            .map_or(0, |i| i + 1);
        &prefix[start..]
    }

    /// Whether `prefix` may be followed by `c`: a space ends a whole word, any other
    /// symbol keeps the word a prefix of one.
    fn allows(&self, prefix: &[usize], c: usize) -> bool {
        let word = self.last_word(prefix);
        if c == self.space {
            return self.words.contains(word);
        }
        let mut longer = word.to_vec();
        longer.push(c);
        self.prefixes.contains(&longer)
    }

    /// Whether `labels` is whole words of the lexicon (or nothing).
    fn complete(&self, labels: &[usize]) -> bool {
        let word = self.last_word(labels);
        labels.is_empty() || self.words.contains(word)
    }
}

/// [`beam_search`] spelling only words of `lexicon`, separated by single spaces: the
/// most probable such text found, or nothing when no hypothesis ended on a whole word.
pub fn beam_search_lexicon(
    log_probs: &[f32],
    vocab: usize,
    beam: usize,
    lexicon: &Lexicon,
) -> Vec<usize> {
    prefix_beam_search(
        log_probs,
        vocab,
        beam,
        &|prefix, c| lexicon.allows(prefix, c),
        &|labels| lexicon.complete(labels),
    )
}

/// Prefix beam search extending a prefix by `c` only where `allows(prefix, c)`, and
/// answering with the most probable final prefix that is `complete`.
fn prefix_beam_search(
    log_probs: &[f32],
    vocab: usize,
    beam: usize,
    allows: &dyn Fn(&[usize], usize) -> bool,
    complete: &dyn Fn(&[usize]) -> bool,
) -> Vec<usize> {
    let beam = beam.max(1);
    let mut beams: Vec<(Vec<usize>, Ends)> = vec![(
        Vec::new(),
        Ends {
            blank: 0.0,
            symbol: f32::NEG_INFINITY,
        },
    )];
    for row in log_probs.chunks_exact(vocab.max(1)) {
        let mut next: HashMap<Vec<usize>, Ends> = HashMap::new();
        for (prefix, ends) in &beams {
            let total = ends.total();
            let e = next.entry(prefix.clone()).or_insert(Ends::ZERO);
            e.blank = log_add(e.blank, total + row[BLANK]);
            for (c, &p) in row.iter().enumerate() {
                if c == BLANK || p == f32::NEG_INFINITY {
                    continue;
                }
                if prefix.last() == Some(&c) {
                    // The same symbol again without a blank between: the same prefix.
                    let e = next.entry(prefix.clone()).or_insert(Ends::ZERO);
                    e.symbol = log_add(e.symbol, ends.symbol + p);
                }
                if !allows(prefix, c) {
                    continue;
                }
                let mut longer = prefix.clone();
                longer.push(c);
                // After a blank a repeated symbol starts a new one; otherwise any path.
                let from = if prefix.last() == Some(&c) {
                    ends.blank
                } else {
                    total
                };
                let e = next.entry(longer).or_insert(Ends::ZERO);
                e.symbol = log_add(e.symbol, from + p);
            }
        }
        let mut ranked: Vec<(Vec<usize>, Ends)> = next.into_iter().collect();
        // Most probable first; ties broken by the prefix so the result is deterministic.
        ranked.sort_by(|a, b| {
            b.1.total()
                .total_cmp(&a.1.total())
                .then_with(|| a.0.cmp(&b.0))
        });
        ranked.truncate(beam);
        beams = ranked;
    }
    beams
        .into_iter()
        .find(|b| complete(&b.0))
        .map(|b| b.0)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ln(rows: &[&[f32]]) -> Vec<f32> {
        rows.iter().flat_map(|r| r.iter().map(|p| p.ln())).collect()
    }

    /// Every labelling's probability, summed over all alignments (brute force over
    /// `vocab^frames` paths): the reference the beam search must match.
    fn brute_force_best(lp: &[f32], vocab: usize) -> Vec<usize> {
        let every: Vec<usize> = (0..vocab).collect();
        brute_force_best_of(lp, vocab, &every, &|_| true)
    }

    /// `frames` rows of pseudo-random log-posteriors over `vocab` symbols, finite only at
    /// `symbols` (a linear congruential stream from `state`).
    fn posteriors(state: &mut u64, frames: usize, vocab: usize, symbols: &[usize]) -> Vec<f32> {
        let mut rows = Vec::new();
        for _ in 0..frames {
            let mut r = vec![f32::NEG_INFINITY; vocab];
            let p: Vec<f32> = symbols
                .iter()
                .map(|_| {
                    *state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((*state >> 33) as f32 / (1u64 << 31) as f32) + 0.05
                })
                .collect();
            let z: f32 = p.iter().sum();
            for (&sym, &q) in symbols.iter().zip(&p) {
                r[sym] = (q / z).ln();
            }
            rows.extend(r);
        }
        rows
    }

    #[test]
    fn greedy_merges_repeats_and_drops_blanks() {
        // a a _ a b b _ → a a b
        let lp = ln(&[
            &[0.1, 0.8, 0.1],
            &[0.1, 0.8, 0.1],
            &[0.8, 0.1, 0.1],
            &[0.1, 0.8, 0.1],
            &[0.1, 0.1, 0.8],
            &[0.1, 0.1, 0.8],
            &[0.8, 0.1, 0.1],
        ]);
        assert_eq!(greedy(&lp, 3), vec![1, 1, 2]);
        assert_eq!(beam_search(&lp, 3, 8), vec![1, 1, 2]);
    }

    #[test]
    fn beam_beats_greedy_where_alignments_add_up() {
        // Blank wins every frame (p = 0.6), so the best path is empty (0.36), but "a"
        // collects 0.4·0.6 + 0.6·0.4 + 0.4·0.4 = 0.64 over its three alignments.
        let lp = ln(&[&[0.6, 0.4], &[0.6, 0.4]]);
        assert_eq!(greedy(&lp, 2), Vec::<usize>::new());
        assert_eq!(beam_search(&lp, 2, 4), vec![1]);
        assert_eq!(brute_force_best(&lp, 2), vec![1]);
    }

    #[test]
    fn wide_beam_is_exact_against_brute_force() {
        // Pseudo-random posteriors over 4 symbols and 6 frames (4^6 paths).
        let mut s = 12345u64;
        for _ in 0..20 {
            let rows = posteriors(&mut s, 6, 4, &[0, 1, 2, 3]);
            assert_eq!(beam_search(&rows, 4, 4096), brute_force_best(&rows, 4));
        }
    }

    /// The most probable labelling among those `keep` accepts (brute force over the
    /// paths through `symbols`, the only symbols of finite log-probability).
    fn brute_force_best_of(
        lp: &[f32],
        vocab: usize,
        symbols: &[usize],
        keep: &dyn Fn(&[usize]) -> bool,
    ) -> Vec<usize> {
        let frames = lp.len() / vocab;
        let mut probs: HashMap<Vec<usize>, f64> = HashMap::new();
        for code in 0..symbols.len().pow(frames as u32) {
            let (mut c, mut p, mut label, mut prev) = (code, 0f64, Vec::new(), BLANK);
            for t in 0..frames {
                let s = symbols[c % symbols.len()];
                c /= symbols.len();
                p += f64::from(lp[t * vocab + s]);
                if s != BLANK && s != prev {
                    label.push(s);
                }
                prev = s;
            }
            *probs.entry(label).or_insert(0.0) += p.exp();
        }
        probs
            .into_iter()
            .filter(|(l, _)| keep(l))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|x| x.0)
            .unwrap_or_default()
    }

    #[test]
    fn lexicon_search_spells_only_its_words_and_is_exact_when_wide() {
        // Words "ab" and "b"; only blank, space, a and b have any probability.
        let vocab = Vocabulary::characters();
        let v = vocab.len();
        let symbols = [
            BLANK,
            vocab.encode(" ").unwrap()[0],
            vocab.encode("a").unwrap()[0],
            vocab.encode("b").unwrap()[0],
        ];
        let lex = Lexicon::from_text("ab\nb B", &vocab).unwrap();
        assert_eq!(lex.len(), 2);
        // Whole words of the lexicon, single spaces between, nothing else.
        let in_lexicon = |l: &[usize]| {
            let text = vocab.decode(l);
            l.is_empty() || text.split(' ').all(|w| w == "ab" || w == "b")
        };
        let mut s = 99u64;
        let mut differs = 0;
        for _ in 0..30 {
            let rows = posteriors(&mut s, 6, v, &symbols);
            let got = beam_search_lexicon(&rows, v, 4096, &lex);
            assert!(in_lexicon(&got), "{:?}", vocab.decode(&got));
            assert_eq!(got, brute_force_best_of(&rows, v, &symbols, &in_lexicon));
            differs += usize::from(got != beam_search(&rows, v, 4096));
        }
        // Non-vacuous: the constraint changed some answers.
        assert!(differs > 0);
    }

    #[test]
    fn a_lexicon_needs_words() {
        let chars = Vocabulary::characters();
        let err = Lexicon::from_text("  \n 123 ", &chars)
            .unwrap_err()
            .to_string();
        assert!(err.contains("lexicon: no words"), "{err}");
        let lex = Lexicon::from_text("Turn ON the light\nlight", &chars).unwrap();
        assert_eq!(lex.len(), 4);
    }

    #[test]
    fn empty_input_decodes_to_nothing() {
        assert!(greedy(&[], 29).is_empty());
        assert!(beam_search(&[], 29, 8).is_empty());
    }
}
