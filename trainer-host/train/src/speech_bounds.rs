//! Where the speech of a clip begins and ends: the first and last 10 ms windows within
//! 20 dB of the loudest one. Simple and level-independent, which is what augmentation
//! and the CTC onset constraint need on clean synthetic speech.

/// Level, relative to the loudest 10 ms of a clip, above which a window counts as speech.
const SPEECH_DB: f32 = -20.0;

/// Mean power of each 10 ms window of `samples`.
fn window_power(samples: &[f32], sample_rate: u32) -> (usize, Vec<f32>) {
    let w = (sample_rate as usize / 100).max(1);
    let power = samples
        .chunks(w)
        .map(|c| c.iter().map(|v| v * v).sum::<f32>() / c.len() as f32)
        .collect();
    (w, power)
}

/// The windows of `samples` loud enough to be speech: (window length, the first and last
/// such window's index); None for silence.
fn speech_windows(samples: &[f32], sample_rate: u32) -> Option<(usize, usize, usize)> {
    let (w, power) = window_power(samples, sample_rate);
    let peak = power.iter().copied().fold(0.0f32, f32::max);
    if peak <= 0.0 {
        return None;
    }
    let level = peak * 10f32.powf(SPEECH_DB / 10.0);
    let first = power.iter().position(|&e| e >= level)?;
    let last = power.iter().rposition(|&e| e >= level)?;
    Some((w, first, last))
}

/// The first sample of the first 10 ms window of `samples` within 20 dB of the loudest
/// one: where the speech begins (0 for silence).
pub fn speech_onset(samples: &[f32], sample_rate: u32) -> usize {
    speech_windows(samples, sample_rate).map_or(0, |(w, first, _)| first * w)
}

/// One past the last sample of the last 10 ms window of `samples` within 20 dB of the
/// loudest one: where the speech ends (None for silence).
pub fn speech_end(samples: &[f32], sample_rate: u32) -> Option<usize> {
    speech_windows(samples, sample_rate).map(|(w, _, last)| ((last + 1) * w).min(samples.len()))
}

/// The mean power of the loudest 10 ms window of `samples` (0 for silence).
pub fn peak_window_power(samples: &[f32], sample_rate: u32) -> f32 {
    let (_, power) = window_power(samples, sample_rate);
    power.into_iter().fold(0.0f32, f32::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_of_a_tone_between_faint_floors_and_of_silence() {
        let sr = 16_000u32;
        let mut x = vec![0.0005f32; 4_800];
        x.extend((0..8_000).map(|i| 0.3 * (i as f32 * 0.05).sin()));
        x.extend(vec![0.0005f32; 3_200]);
        assert_eq!(speech_onset(&x, sr), 4_800);
        assert_eq!(speech_end(&x, sr), Some(12_800));
        let peak = peak_window_power(&x, sr); // 0.3² / 2, over windows of 1.3 periods
        assert!((0.040..0.055).contains(&peak), "{peak}");
        let silence = vec![0.0; 1_000];
        assert_eq!(speech_onset(&silence, sr), 0);
        assert_eq!(speech_end(&silence, sr), None);
        assert_eq!(speech_end(&[], sr), None);
        // Speech running to the last, partial window ends at the clip's end.
        let to_end: Vec<f32> = (0..1_650).map(|i| (i as f32 * 0.1).sin()).collect();
        assert_eq!(speech_end(&to_end, sr), Some(1_650));
    }
}
