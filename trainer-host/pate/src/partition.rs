//! Splitting the private data among the teachers by speaker: the privacy unit of PATE here
//! is the speaker, so no speaker may train two teachers (one speaker then changes at most
//! one vote per query, which is what the aggregators' sensitivity assumes).

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::PateError;

/// For `n` teachers, which examples each trains on: `speakers[i]` is example `i`'s speaker.
/// Speakers are shuffled with `seed` and dealt out in turn, so the parts differ in size by
/// at most one speaker. Fails when there are fewer speakers than teachers.
pub fn partition_by_speaker(
    speakers: &[&str],
    n: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>, PateError> {
    let mut by_speaker: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in speakers.iter().enumerate() {
        by_speaker.entry(s).or_default().push(i);
    }
    if n == 0 || by_speaker.len() < n {
        return Err(PateError::Option {
            option: "--teachers",
            reason: format!(
                "{n} teachers need at least {n} private speakers (no speaker may train two \
                 teachers); the private data has {}",
                by_speaker.len()
            ),
        });
    }
    let mut groups: Vec<Vec<usize>> = by_speaker.into_values().collect();
    groups.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut parts = vec![Vec::new(); n];
    for (k, g) in groups.into_iter().enumerate() {
        parts[k % n].extend(g);
    }
    for p in &mut parts {
        p.sort_unstable();
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn parts_are_speaker_disjoint_and_cover_everything() {
        let speakers: Vec<String> = (0..200).map(|i| format!("s{}", (i * 7) % 23)).collect();
        let refs: Vec<&str> = speakers.iter().map(String::as_str).collect();
        let parts = partition_by_speaker(&refs, 5, 1).unwrap();
        assert_eq!(parts.len(), 5);
        let mut seen = BTreeSet::new();
        let mut owner = BTreeMap::new();
        for (t, p) in parts.iter().enumerate() {
            assert!(!p.is_empty());
            for &i in p {
                assert!(seen.insert(i), "example {i} in two parts");
                let prev = owner.insert(refs[i], t);
                assert!(prev.is_none_or(|o| o == t), "{} in two teachers", refs[i]);
            }
        }
        assert_eq!(seen.len(), 200);
        let sizes: Vec<usize> = (0..5)
            .map(|t| owner.values().filter(|&&o| o == t).count())
            .collect();
        assert!(sizes.iter().all(|&s| s == 4 || s == 5), "{sizes:?}");
        assert_eq!(partition_by_speaker(&refs, 5, 1).unwrap(), parts);
    }

    #[test]
    fn more_teachers_than_speakers_is_refused() {
        let e = partition_by_speaker(&["a", "b", "a"], 3, 0).unwrap_err();
        assert!(e.to_string().contains("--teachers"), "{e}");
        assert!(partition_by_speaker(&["a"], 0, 0).is_err());
    }
}
