//! Word and character error rates: Levenshtein distance (substitutions, insertions,
//! deletions, each cost 1) between reference and hypothesis, summed over a corpus and
//! divided by the reference length.
//!
//! ```
//! use hush_models::asr::wer::ErrorCounts;
//! let mut w = ErrorCounts::default();
//! w.add_words("set a timer", "set the timer");
//! assert_eq!((w.errors, w.reference), (1, 3));
//! ```

use serde::{Deserialize, Serialize};

/// Levenshtein distance between two sequences.
pub fn edit_distance<T: PartialEq>(reference: &[T], hypothesis: &[T]) -> usize {
    let mut prev: Vec<usize> = (0..=hypothesis.len()).collect();
    let mut cur = vec![0; hypothesis.len() + 1];
    for (i, r) in reference.iter().enumerate() {
        cur[0] = i + 1;
        for (j, h) in hypothesis.iter().enumerate() {
            let sub = prev[j] + usize::from(r != h);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[hypothesis.len()]
}

/// Errors and reference length accumulated over utterances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// Edit operations.
    pub errors: usize,
    /// Reference tokens.
    pub reference: usize,
}

impl ErrorCounts {
    /// Adds one utterance's word errors (whitespace-separated words).
    pub fn add_words(&mut self, reference: &str, hypothesis: &str) {
        let r: Vec<&str> = reference.split_whitespace().collect();
        let h: Vec<&str> = hypothesis.split_whitespace().collect();
        self.errors += edit_distance(&r, &h);
        self.reference += r.len();
    }

    /// Adds one utterance's character errors (every character, spaces included).
    pub fn add_chars(&mut self, reference: &str, hypothesis: &str) {
        let r: Vec<char> = reference.chars().collect();
        let h: Vec<char> = hypothesis.chars().collect();
        self.errors += edit_distance(&r, &h);
        self.reference += r.len();
    }

    /// `errors / reference` (0 for an empty reference with no errors, 1 per error
    /// otherwise).
    pub fn rate(&self) -> f64 {
        if self.reference == 0 {
            self.errors as f64
        } else {
            self.errors as f64 / self.reference as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_each_kind() {
        assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
        assert_eq!(edit_distance::<u8>(b"", b"abc"), 3);
        assert_eq!(edit_distance::<u8>(b"abc", b""), 3);
        assert_eq!(edit_distance(b"abc", b"abc"), 0);
    }

    #[test]
    fn rates_sum_over_a_corpus() {
        let mut w = ErrorCounts::default();
        w.add_words("play a podcast", "play podcast"); // 1 deletion
        w.add_words("call john", "call john now"); // 1 insertion
        assert_eq!(
            w,
            ErrorCounts {
                errors: 2,
                reference: 5
            }
        );
        assert!((w.rate() - 0.4).abs() < 1e-12);
        let mut c = ErrorCounts::default();
        c.add_chars("call", "cull");
        assert_eq!((c.errors, c.reference), (1, 4));
        assert_eq!(ErrorCounts::default().rate(), 0.0);
    }
}
