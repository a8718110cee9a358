//! From window posteriors to keyword detections: smoothing, a threshold and a refractory
//! period, so that one spoken keyword gives one detection.
//!
//! A stream scores a window every hop (100 ms by default), and a keyword stays in view
//! for several windows, at different offsets. One window's posterior is noisy: a window
//! that holds the end of one word and the start of the next can look like a keyword for
//! one hop. Following Chen, Parada & Heigold (2014, "Small-footprint keyword spotting
//! using deep neural networks"), each class's posterior is averaged over the last
//! `smooth_windows` windows; a keyword is detected when its smoothed posterior reaches
//! the threshold, and nothing more is reported for `refractory_s` after it.
//!
//! Memory is fixed when the detector is made (`smooth_windows × classes` floats).
//!
//! ```
//! use hush_device::infer::{DetectorOptions, KeywordDetector};
//! let labels = ["yes", "no", "_silence_", "_unknown_"].map(String::from);
//! let opts = DetectorOptions { smooth_windows: 2, threshold: 0.8, refractory_s: 1.0 };
//! let mut det = KeywordDetector::new(&labels, opts).unwrap();
//! assert!(det.push(0.1, &[0.9, 0.0, 0.1, 0.0]).is_none()); // smoothed with nothing: 0.45
//! let hit = det.push(0.2, &[0.9, 0.0, 0.1, 0.0]).unwrap(); // 0.9 ≥ 0.8
//! assert_eq!((hit.label.as_str(), hit.time_s), ("yes", 0.2));
//! assert!(det.push(0.3, &[0.9, 0.0, 0.1, 0.0]).is_none()); // refractory
//! ```

use serde::Serialize;

/// How window posteriors become detections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DetectorOptions {
    /// Windows whose posteriors are averaged (≥ 1; 1 = no smoothing).
    pub smooth_windows: usize,
    /// Smoothed keyword posterior needed for a detection, in (0, 1].
    pub threshold: f32,
    /// Seconds after a detection during which no other is reported (≥ 0).
    pub refractory_s: f64,
}

impl DetectorOptions {
    /// Checks every option; the error names the first bad one and what it must be.
    pub fn validate(&self) -> Result<(), String> {
        if self.smooth_windows == 0 {
            return Err("smoothing: expected at least one window".into());
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(format!(
                "threshold {}: expected a probability in (0, 1]",
                self.threshold
            ));
        }
        if !(self.refractory_s.is_finite() && self.refractory_s >= 0.0) {
            return Err(format!(
                "refractory period {} s: expected a duration ≥ 0",
                self.refractory_s
            ));
        }
        Ok(())
    }
}

/// One detected keyword.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// End of the window that triggered it, in seconds from the start of the stream.
    pub time_s: f64,
    /// The keyword.
    pub label: String,
    /// Its smoothed posterior.
    pub score: f32,
}

/// Smooths window posteriors and reports keywords, one detection per refractory period.
/// Keywords are the labels that do not start with `_` (`_silence_` and `_unknown_` are
/// never reported, as in Speech Commands).
#[derive(Debug, Clone)]
pub struct KeywordDetector {
    labels: Vec<String>,
    keywords: Vec<usize>,
    opts: DetectorOptions,
    /// The last `smooth_windows` posteriors, a ring of `classes`-long rows.
    history: Vec<f32>,
    next: usize,
    last: Option<f64>,
}

impl KeywordDetector {
    /// A detector for a model with `labels` (in its output order).
    pub fn new(labels: &[String], opts: DetectorOptions) -> Result<Self, String> {
        opts.validate()?;
        let keywords: Vec<usize> = (0..labels.len())
            .filter(|&i| !labels[i].starts_with('_'))
            .collect();
        if keywords.is_empty() {
            return Err(format!(
                "labels {labels:?}: expected at least one keyword (a label not starting with `_`)"
            ));
        }
        Ok(Self {
            labels: labels.to_vec(),
            keywords,
            opts,
            history: vec![0.0; opts.smooth_windows * labels.len()],
            next: 0,
            last: None,
        })
    }

    /// Forgets the windows seen (as at the start of a stream; the refractory period
    /// stays): after a stretch the model did not score, smoothing starts again.
    pub fn forget(&mut self) {
        self.history.fill(0.0);
        self.next = 0;
    }

    /// Takes the posteriors of the window ending at `end_s` (one per label); returns a
    /// detection when a keyword's smoothed posterior reaches the threshold outside the
    /// refractory period. Until `smooth_windows` windows have been seen, the missing ones
    /// count as zero, so a stream cannot fire on its first window alone.
    ///
    /// # Panics
    /// When `probs` does not hold one value per label (a caller's bug).
    pub fn push(&mut self, end_s: f64, probs: &[f32]) -> Option<Detection> {
        let classes = self.labels.len();
        assert_eq!(probs.len(), classes, "one posterior per label");
        let row = self.next * classes;
        self.history[row..row + classes].copy_from_slice(probs);
        self.next = (self.next + 1) % self.opts.smooth_windows;
        let n = self.opts.smooth_windows as f32;
        let (best, score) = self
            .keywords
            .iter()
            .map(|&k| {
                let sum: f32 = self.history.chunks_exact(classes).map(|r| r[k]).sum();
                (k, sum / n)
            })
            .fold(
                (self.keywords[0], f32::MIN),
                |a, b| if b.1 > a.1 { b } else { a },
            );
        let quiet = self
            .last
            .is_none_or(|t| end_s - t >= self.opts.refractory_s);
        if score >= self.opts.threshold && quiet {
            self.last = Some(end_s);
            return Some(Detection {
                time_s: end_s,
                label: self.labels[best].clone(),
                score,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        ["yes", "no", "_silence_", "_unknown_"]
            .map(String::from)
            .to_vec()
    }

    fn opts(smooth: usize, threshold: f32, refractory_s: f64) -> DetectorOptions {
        DetectorOptions {
            smooth_windows: smooth,
            threshold,
            refractory_s,
        }
    }

    const YES: [f32; 4] = [0.95, 0.0, 0.0, 0.05];
    const NO: [f32; 4] = [0.0, 0.95, 0.0, 0.05];
    const QUIET: [f32; 4] = [0.0, 0.0, 0.9, 0.1];

    #[test]
    fn a_one_window_spike_is_smoothed_away_and_a_held_keyword_fires_once() {
        let mut det = KeywordDetector::new(&labels(), opts(3, 0.8, 1.0)).unwrap();
        let mut fired = Vec::new();
        // quiet, one spike of "no", quiet, then "yes" held for five windows.
        let stream = [
            QUIET, QUIET, NO, QUIET, QUIET, YES, YES, YES, YES, YES, QUIET,
        ];
        for (i, p) in stream.iter().enumerate() {
            if let Some(d) = det.push(0.1 * i as f64, p) {
                fired.push(d);
            }
        }
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert_eq!(fired[0].label, "yes");
        // The third "yes" window is the first whose mean over 3 reaches 0.8.
        assert!((fired[0].time_s - 0.7).abs() < 1e-9);
        assert!((fired[0].score - 0.95).abs() < 1e-6);
    }

    #[test]
    fn without_smoothing_the_spike_fires() {
        let mut det = KeywordDetector::new(&labels(), opts(1, 0.8, 1.0)).unwrap();
        assert_eq!(det.push(0.0, &NO).unwrap().label, "no");
    }

    #[test]
    fn the_refractory_period_holds_then_releases() {
        let mut det = KeywordDetector::new(&labels(), opts(1, 0.8, 0.5)).unwrap();
        assert!(det.push(1.0, &YES).is_some());
        assert!(det.push(1.2, &NO).is_none());
        assert!(det.push(1.4, &YES).is_none());
        let again = det.push(1.5, &NO).unwrap();
        assert_eq!((again.label.as_str(), again.time_s), ("no", 1.5));
    }

    #[test]
    fn catch_all_classes_are_never_reported() {
        let mut det = KeywordDetector::new(&labels(), opts(1, 0.5, 0.0)).unwrap();
        for t in 0..5 {
            assert!(det.push(f64::from(t), &QUIET).is_none());
            assert!(det.push(f64::from(t), &[0.0, 0.0, 0.0, 1.0]).is_none());
        }
    }

    #[test]
    fn bad_options_and_labels_are_named() {
        let bad = [
            (opts(0, 0.8, 1.0), "smoothing"),
            (opts(1, 0.0, 1.0), "threshold 0"),
            (opts(1, 1.5, 1.0), "threshold 1.5"),
            (opts(1, f32::NAN, 1.0), "threshold NaN"),
            (opts(1, 0.8, -1.0), "refractory period -1"),
        ];
        for (o, what) in bad {
            let e = KeywordDetector::new(&labels(), o).unwrap_err();
            assert!(e.starts_with(what), "{e}");
        }
        let e = KeywordDetector::new(&["_silence_".to_string()], opts(1, 0.8, 1.0)).unwrap_err();
        assert!(e.contains("at least one keyword"), "{e}");
    }
}
