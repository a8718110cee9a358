//! Classification metrics: accuracy, balanced accuracy over the keyword classes, and
//! the confusion matrix.

use hush_device::dataset::{SILENCE, UNKNOWN};
use hush_models::package::SplitMetrics;

/// Scores predictions against truths (class indices into `labels`).
pub fn score(truth: &[usize], predicted: &[usize], labels: &[String]) -> SplitMetrics {
    let k = labels.len();
    let mut confusion = vec![vec![0usize; k]; k];
    for (&t, &p) in truth.iter().zip(predicted) {
        if t < k && p < k {
            confusion[t][p] += 1;
        }
    }
    let correct: usize = (0..k).map(|i| confusion[i][i]).sum();
    let n = truth.len();
    let recalls: Vec<f64> = (0..k)
        .filter(|&i| labels[i] != SILENCE && labels[i] != UNKNOWN)
        .filter_map(|i| {
            let total: usize = confusion[i].iter().sum();
            (total > 0).then(|| confusion[i][i] as f64 / total as f64)
        })
        .collect();
    SplitMetrics {
        examples: n,
        accuracy: if n == 0 {
            0.0
        } else {
            correct as f64 / n as f64
        },
        balanced_keyword_accuracy: if recalls.is_empty() {
            0.0
        } else {
            recalls.iter().sum::<f64>() / recalls.len() as f64
        },
        confusion,
    }
}

/// Index of the largest value.
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .copied()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |a, (i, x)| if x > a.1 { (i, x) } else { a },
        )
        .0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_accuracy_ignores_silence_and_unknown() {
        let labels: Vec<String> = ["yes", "no", SILENCE, UNKNOWN]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // yes: 2/2, no: 0/2, unknown: 4/4.
        let truth = [0, 0, 1, 1, 3, 3, 3, 3];
        let pred = [0, 0, 3, 3, 3, 3, 3, 3];
        let m = score(&truth, &pred, &labels);
        assert_eq!(m.accuracy, 0.75);
        assert_eq!(m.balanced_keyword_accuracy, 0.5);
        assert_eq!(m.confusion[1][3], 2);
    }
}
