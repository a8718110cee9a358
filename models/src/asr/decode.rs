//! CTC decoding, shared by the host (validation, test report) and the device
//! (`hush-device transcribe`): greedy (best path) and prefix beam search without a
//! language model (Hannun et al., "First-Pass Large Vocabulary Continuous Speech
//! Recognition using Bi-Directional Recurrent DNNs", 2014, Algorithm 1, with no LM
//! term).
//!
//! Both take per-frame log-probabilities, `frames × vocab` row-major, blank at
//! [`BLANK`], and return label indices (no blanks, repeats merged).
//!
//! ```
//! use hush_models::asr::decode::{beam_search, greedy};
//! // Two frames over {blank, a}: blank is each frame's best, yet "a" is the likelier text.
//! let lp: Vec<f32> = [0.6f32, 0.4, 0.6, 0.4].iter().map(|p| p.ln()).collect();
//! assert_eq!(greedy(&lp, 2), Vec::<usize>::new());
//! assert_eq!(beam_search(&lp, 2, 4), vec![1]);
//! ```

use std::collections::HashMap;

use super::vocab::BLANK;

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
                let mut longer = prefix.clone();
                longer.push(c);
                if prefix.last() == Some(&c) {
                    // The same symbol again without a blank between: the same prefix.
                    let e = next.entry(prefix.clone()).or_insert(Ends::ZERO);
                    e.symbol = log_add(e.symbol, ends.symbol + p);
                    // After a blank it starts a new symbol.
                    let e = next.entry(longer).or_insert(Ends::ZERO);
                    e.symbol = log_add(e.symbol, ends.blank + p);
                } else {
                    let e = next.entry(longer).or_insert(Ends::ZERO);
                    e.symbol = log_add(e.symbol, total + p);
                }
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
    beams.into_iter().next().map(|b| b.0).unwrap_or_default()
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
        let frames = lp.len() / vocab;
        let mut probs: HashMap<Vec<usize>, f64> = HashMap::new();
        for code in 0..vocab.pow(frames as u32) {
            let mut c = code;
            let mut path = Vec::new();
            let mut p = 0f64;
            for t in 0..frames {
                let s = c % vocab;
                c /= vocab;
                p += f64::from(lp[t * vocab + s]);
                path.push(s);
            }
            let mut label = Vec::new();
            let mut prev = BLANK;
            for &s in &path {
                if s != BLANK && s != prev {
                    label.push(s);
                }
                prev = s;
            }
            *probs.entry(label).or_insert(0.0) += p.exp();
        }
        probs
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|x| x.0)
            .unwrap_or_default()
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
            let mut rows = Vec::new();
            for _ in 0..6 {
                let mut r: Vec<f32> = (0..4)
                    .map(|_| {
                        s = s
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        ((s >> 33) as f32 / (1u64 << 31) as f32) + 0.05
                    })
                    .collect();
                let z: f32 = r.iter().sum();
                r.iter_mut().for_each(|v| *v = (*v / z).ln());
                rows.extend(r);
            }
            assert_eq!(beam_search(&rows, 4, 4096), brute_force_best(&rows, 4));
        }
    }

    #[test]
    fn empty_input_decodes_to_nothing() {
        assert!(greedy(&[], 29).is_empty());
        assert!(beam_search(&[], 29, 8).is_empty());
    }
}
