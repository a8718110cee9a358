//! Federated partitioners: which examples each simulated client (device) holds.
//!
//! - [`natural`]: one client per speaker — what a real fleet looks like.
//! - [`iid`]: examples shuffled and dealt evenly, the usual optimistic baseline.
//! - [`dirichlet`]: label skew; each label's examples are split over clients in
//!   proportions drawn from Dirichlet(α) (Hsu et al. 2019). Small α gives clients few
//!   labels each; large α approaches IID.

use std::collections::BTreeMap;

use hush_device::dataset::Example;
use rand::seq::SliceRandom;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};

/// One simulated device and the examples it holds (indices into the example list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// Client id: the speaker for [`natural`], `client-<n>` otherwise.
    pub id: String,
    /// Indices into the examples given to the partitioner.
    pub examples: Vec<usize>,
}

/// Why a partition could not be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PartitionError {
    /// A setting is out of range.
    #[error("{name} = {value}: expected {expected}")]
    BadParameter {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
}

/// One client per speaker, in speaker order.
pub fn natural(examples: &[Example]) -> Vec<Client> {
    let mut by_speaker: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in examples.iter().enumerate() {
        by_speaker.entry(&e.speaker).or_default().push(i);
    }
    by_speaker
        .into_iter()
        .map(|(s, examples)| Client {
            id: s.to_string(),
            examples,
        })
        .collect()
}

fn check_clients(n: usize, examples: usize) -> Result<(), PartitionError> {
    if n == 0 || n > examples {
        return Err(PartitionError::BadParameter {
            name: "clients",
            value: n.to_string(),
            expected: "between 1 and the number of examples",
        });
    }
    Ok(())
}

fn numbered(parts: Vec<Vec<usize>>) -> Vec<Client> {
    parts
        .into_iter()
        .enumerate()
        .map(|(i, mut examples)| {
            examples.sort_unstable();
            Client {
                id: format!("client-{i}"),
                examples,
            }
        })
        .collect()
}

/// `n` clients of (nearly) equal size holding a uniform random shuffle of the examples.
pub fn iid(examples: &[Example], n: usize, seed: u64) -> Result<Vec<Client>, PartitionError> {
    check_clients(n, examples.len())?;
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut parts = vec![Vec::new(); n];
    for (k, i) in order.into_iter().enumerate() {
        parts[k % n].push(i);
    }
    Ok(numbered(parts))
}

/// `n` clients with label skew: each label's examples go to clients in proportions
/// drawn from Dirichlet(`alpha`). Clients may end up empty when α is small.
pub fn dirichlet(
    examples: &[Example],
    n: usize,
    alpha: f64,
    seed: u64,
) -> Result<Vec<Client>, PartitionError> {
    check_clients(n, examples.len())?;
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(PartitionError::BadParameter {
            name: "alpha",
            value: alpha.to_string(),
            expected: "a finite number > 0",
        });
    }
    let gamma = Gamma::new(alpha, 1.0).map_err(|_| PartitionError::BadParameter {
        name: "alpha",
        value: alpha.to_string(),
        expected: "a finite number > 0",
    })?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut by_label: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in examples.iter().enumerate() {
        by_label.entry(e.target_text()).or_default().push(i);
    }
    let mut parts = vec![Vec::new(); n];
    for (_, mut idx) in by_label {
        idx.shuffle(&mut rng);
        let draws: Vec<f64> = (0..n).map(|_| gamma.sample(&mut rng)).collect();
        let total: f64 = draws.iter().sum();
        let mut cum = 0.0;
        let mut start = 0;
        for (c, d) in draws.iter().enumerate() {
            cum += if total > 0.0 {
                d / total
            } else {
                1.0 / n as f64
            };
            let end = if c + 1 == n {
                idx.len()
            } else {
                ((cum * idx.len() as f64).round() as usize).clamp(start, idx.len())
            };
            parts[c].extend_from_slice(&idx[start..end]);
            start = end;
        }
    }
    Ok(numbered(parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hush_device::dataset::{Split, Target};
    use proptest::prelude::*;

    fn corpus(speakers: usize, labels: usize, per: usize) -> Vec<Example> {
        let mut v = Vec::new();
        for s in 0..speakers {
            for l in 0..labels {
                for k in 0..per {
                    v.push(Example {
                        path: format!("{l}/{s}_nohash_{k}.wav").into(),
                        speaker: format!("spk{s}"),
                        target: Target::Label(format!("w{l}")),
                        split: Split::Train,
                    });
                }
            }
        }
        v
    }

    fn assert_exact_cover(clients: &[Client], n: usize) {
        let mut all: Vec<usize> = clients.iter().flat_map(|c| c.examples.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn natural_gives_one_speaker_per_client() {
        let ex = corpus(5, 3, 2);
        let clients = natural(&ex);
        assert_eq!(clients.len(), 5);
        assert_exact_cover(&clients, ex.len());
        for c in &clients {
            assert!(c.examples.iter().all(|&i| ex[i].speaker == c.id));
        }
    }

    /// Mean over clients of the entropy (nats) of the client's label distribution.
    fn mean_label_entropy(ex: &[Example], clients: &[Client]) -> f64 {
        let mut total = 0.0;
        let mut counted = 0;
        for c in clients.iter().filter(|c| !c.examples.is_empty()) {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for &i in &c.examples {
                *counts.entry(ex[i].target_text()).or_default() += 1;
            }
            let n = c.examples.len() as f64;
            total -= counts
                .values()
                .map(|&k| (k as f64 / n) * (k as f64 / n).ln())
                .sum::<f64>();
            counted += 1;
        }
        total / counted as f64
    }

    #[test]
    fn small_alpha_skews_labels_more_than_large_alpha() {
        let ex = corpus(20, 10, 5);
        let skewed = dirichlet(&ex, 20, 0.1, 1).unwrap();
        let mild = dirichlet(&ex, 20, 100.0, 1).unwrap();
        let h_skewed = mean_label_entropy(&ex, &skewed);
        let h_mild = mean_label_entropy(&ex, &mild);
        // Uniform over 10 labels is ln 10 = 2.30.
        assert!(h_mild > 2.1, "alpha 100: {h_mild}");
        assert!(h_skewed < 1.2, "alpha 0.1: {h_skewed}");
    }

    #[test]
    fn bad_parameters_are_named() {
        let ex = corpus(2, 2, 1);
        assert!(iid(&ex, 0, 1)
            .unwrap_err()
            .to_string()
            .contains("clients = 0"));
        assert!(dirichlet(&ex, 2, 0.0, 1)
            .unwrap_err()
            .to_string()
            .contains("alpha"));
        assert!(dirichlet(&ex, 2, f64::NAN, 1).is_err());
    }

    proptest! {
        #[test]
        fn iid_covers_exactly_with_balanced_sizes(speakers in 1usize..8, labels in 1usize..5,
                                                  n in 1usize..10, seed in any::<u64>()) {
            let ex = corpus(speakers, labels, 2);
            prop_assume!(n <= ex.len());
            let clients = iid(&ex, n, seed).unwrap();
            prop_assert_eq!(clients.len(), n);
            assert_exact_cover(&clients, ex.len());
            let sizes: Vec<usize> = clients.iter().map(|c| c.examples.len()).collect();
            prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
            prop_assert_eq!(clients, iid(&ex, n, seed).unwrap());
        }

        #[test]
        fn dirichlet_covers_exactly(speakers in 1usize..8, labels in 1usize..6, n in 1usize..10,
                                    alpha in 0.05f64..50.0, seed in any::<u64>()) {
            let ex = corpus(speakers, labels, 3);
            prop_assume!(n <= ex.len());
            let clients = dirichlet(&ex, n, alpha, seed).unwrap();
            prop_assert_eq!(clients.len(), n);
            assert_exact_cover(&clients, ex.len());
        }
    }
}
