//! Scoring federated canaries from the model every round released, for runs where a
//! canary takes part in a round only when it is sampled.
//!
//! With Poisson sampling at rate `q`, a planted canary moves round `r`'s released delta
//! `Δ_r = w_r − w_{r−1}` by `a · c_i` (`a = C / n`, its clipped norm over the host's
//! divisor, at FedAvg's server learning rate 1) in the rounds it is drawn and not
//! otherwise. The real users' updates move the same weights far more, but smoothly from
//! round to round: the data's *drift*. The total delta `w_T − w_0` adds the drift of every
//! round and, in a large population, hides the canaries under it. Here each round's
//! delta is first stripped of what its neighbours predict ([`drift_residual`]: the
//! least-squares fit by the deltas of [`DRIFT_NEIGHBOURS`] rounds on each side), which
//! removes the drift but not a canary that comes and goes; each canary is then scored by
//! the likelihood ratio of "took part in each round with probability `q`" against "never"
//! ([`participation_llr`]).
//!
//! Under full participation (`q = 1`) a planted canary is in every round, so its share is
//! as predictable from the neighbours as the drift and the residuals lose it; there the
//! total delta is the statistic. [`mixed_scores`] weighs the two, each standardised over
//! the canaries, by the share of a planted canary's signal energy that is constant across
//! rounds (`q`) and that comes and goes (`1 − q`); at `q = 1` it is the total delta alone.
//!
//! Every step is a function of the released models and the canaries' directions only
//! (never of which canaries were planted), so the one-run bound stays valid whatever the
//! statistic.

/// Rounds on each side whose deltas predict a round's drift ([`drift_residual`]).
pub const DRIFT_NEIGHBOURS: usize = 4;

/// The consistency constant that makes the median absolute deviation estimate a normal
/// distribution's standard deviation.
const MAD_TO_SD: f64 = 1.482_6;

/// `Δ_r = w_r − w_{r−1}` for each pair of consecutive released models (flat weights).
pub fn round_deltas(models: &[Vec<f32>]) -> Vec<Vec<f32>> {
    models
        .windows(2)
        .map(|w| w[1].iter().zip(&w[0]).map(|(b, a)| b - a).collect())
        .collect()
}

/// Round `r`'s delta less its least-squares fit by the deltas of up to `neighbours` rounds
/// on either side (modified Gram–Schmidt over the neighbours; one that adds no new
/// direction is skipped).
pub fn drift_residual(deltas: &[Vec<f32>], r: usize, neighbours: usize) -> Vec<f64> {
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let lo = r.saturating_sub(neighbours);
    let hi = (r + neighbours).min(deltas.len().saturating_sub(1));
    let mut basis: Vec<Vec<f64>> = Vec::new();
    for j in (lo..=hi).filter(|&j| j != r) {
        let mut v = widen(&deltas[j]);
        let before = norm(&v);
        for e in &basis {
            let p = dot(&v, e);
            v.iter_mut().zip(e).for_each(|(x, y)| *x -= p * y);
        }
        let after = norm(&v);
        if after > 1e-9 * before && after > 0.0 {
            v.iter_mut().for_each(|x| *x /= after);
            basis.push(v);
        }
    }
    let mut residual = widen(&deltas[r]);
    for e in &basis {
        let p = dot(&residual, e);
        residual.iter_mut().zip(e).for_each(|(x, y)| *x -= p * y);
    }
    residual
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Per canary, `Σ_r ln(1 − q + q · exp((a·x_ir − a²/2) / σ_r²))`: the log-likelihood ratio
/// of a canary that adds `amplitude` (`a`) along its direction to each round with
/// probability `q` against one that never does, under Gaussian noise of the round's
/// spread. `projections[r][i]` is round `r`'s residual projected on canary `i`; `σ_r` is
/// the median absolute deviation of round `r`'s projections over all canaries (robust to
/// the few planted ones in it). A round without spread adds nothing.
pub fn participation_llr(projections: &[Vec<f64>], amplitude: f64, q: f64) -> Vec<f64> {
    let m = projections.first().map_or(0, Vec::len);
    let mut llr = vec![0.0; m];
    let (absent, present) = ((1.0 - q).ln(), q.ln());
    for round in projections {
        let sigma = MAD_TO_SD * median_absolute_deviation(round);
        if !(sigma > 0.0 && sigma.is_finite()) {
            continue;
        }
        let var = sigma * sigma;
        for (l, &x) in llr.iter_mut().zip(round) {
            *l += log_add_exp(
                absent,
                present + (amplitude * x - 0.5 * amplitude * amplitude) / var,
            );
        }
    }
    llr
}

fn log_add_exp(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn median_absolute_deviation(x: &[f64]) -> f64 {
    let mid = median(x.to_vec());
    median(x.iter().map(|v| (v - mid).abs()).collect())
}

/// `q · z(total) + (1 − q) · z(llr)`, each standardised over the canaries (a constant
/// statistic standardises to 0); at `q ≥ 1`, `total` itself.
pub fn mixed_scores(total: &[f64], llr: &[f64], q: f64) -> Vec<f64> {
    if q >= 1.0 {
        return total.to_vec();
    }
    let (zt, zl) = (standardise(total), standardise(llr));
    zt.iter()
        .zip(&zl)
        .map(|(t, l)| q * t + (1.0 - q) * l)
        .collect()
}

fn standardise(x: &[f64]) -> Vec<f64> {
    let n = x.len().max(1) as f64;
    let mean = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    x.iter()
        .map(|v| if sd > 0.0 { (v - mean) / sd } else { 0.0 })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;
    use rand_distr::{Distribution, StandardNormal};

    fn gaussian(rng: &mut ChaCha20Rng, n: usize) -> Vec<f64> {
        (0..n).map(|_| StandardNormal.sample(&mut *rng)).collect()
    }

    #[test]
    fn a_residual_is_orthogonal_to_its_neighbours_and_keeps_a_new_direction() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let to32 = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
        let mut deltas: Vec<Vec<f32>> = (0..6).map(|_| to32(gaussian(&mut rng, 50))).collect();
        // Round 5 repeats round 4 (no new direction: skipped, not divided by zero).
        deltas[5] = deltas[4].clone();
        let r = drift_residual(&deltas, 2, 2);
        for j in [0, 1, 3, 4] {
            let nb: Vec<f64> = deltas[j].iter().map(|&x| f64::from(x)).collect();
            assert!(dot(&r, &nb).abs() < 1e-9, "round {j}: {}", dot(&r, &nb));
        }
        assert!(norm(&r) > 1.0);
        // A round that is a combination of its neighbours leaves (almost) nothing.
        deltas[2] = deltas[1]
            .iter()
            .zip(&deltas[3])
            .map(|(a, b)| 2.0 * a - 0.5 * b)
            .collect();
        assert!(norm(&drift_residual(&deltas, 2, 2)) < 1e-5);
        assert!(norm(&drift_residual(&deltas, 5, 2)) < 1e-5);
    }

    /// Drift much larger than the canaries, smooth over rounds (a slowly turning
    /// direction on a few coordinates): the total delta cannot tell planted from held-back
    /// canaries; the residuals' likelihood ratio can. Canaries are ±1 on single
    /// coordinates here, so a projection is a coordinate.
    #[test]
    fn the_participation_ratio_sees_sampled_canaries_that_the_drift_hides() {
        let (d, rounds, q, a) = (400, 60, 0.1, 1.0);
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let planted: Vec<bool> = (0..d).map(|_| rng.random_bool(0.5)).collect();
        let (u, v) = (gaussian(&mut rng, d), gaussian(&mut rng, d));
        let deltas: Vec<Vec<f32>> = (0..rounds)
            .map(|r| {
                let t = r as f64 / rounds as f64;
                let noise = gaussian(&mut rng, d);
                (0..d)
                    .map(|i| {
                        let drift = 40.0 * (t.cos() * u[i] + t.sin() * v[i]);
                        let canary = if planted[i] && rng.random_bool(q) {
                            a
                        } else {
                            0.0
                        };
                        (drift + canary + 0.2 * noise[i]) as f32
                    })
                    .collect()
            })
            .collect();
        let accuracy = |scores: &[f64]| {
            let mut order: Vec<usize> = (0..d).collect();
            order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
            order[..d / 10].iter().filter(|&&i| planted[i]).count() as f64 / (d / 10) as f64
        };
        let total: Vec<f64> = (0..d)
            .map(|i| deltas.iter().map(|r| f64::from(r[i])).sum())
            .collect();
        let projections: Vec<Vec<f64>> = (0..rounds)
            .map(|r| drift_residual(&deltas, r, DRIFT_NEIGHBOURS))
            .collect();
        let llr = participation_llr(&projections, a, q);
        let mixed = mixed_scores(&total, &llr, q);
        assert!(accuracy(&total) < 0.75, "{}", accuracy(&total));
        assert!(accuracy(&llr) > 0.95, "{}", accuracy(&llr));
        assert!(accuracy(&mixed) > 0.95, "{}", accuracy(&mixed));
    }

    #[test]
    fn full_participation_scores_by_the_total_delta() {
        let total = [3.0, -1.0, 0.5];
        assert_eq!(mixed_scores(&total, &[9.0, 9.0, 9.0], 1.0), total.to_vec());
        let half = mixed_scores(&total, &[1.0, 1.0, 1.0], 0.5);
        // A constant statistic standardises to 0 and keeps the other's order.
        assert!(half[0] > half[2] && half[2] > half[1]);
    }

    #[test]
    fn the_likelihood_ratio_grows_with_a_spike_and_ignores_flat_rounds() {
        let flat = vec![vec![1.0; 5]];
        assert_eq!(participation_llr(&flat, 1.0, 0.1), vec![0.0; 5]);
        let round = vec![vec![0.1, -0.2, 0.05, 3.0, -0.1, 0.2, 0.0]];
        let llr = participation_llr(&round, 1.0, 0.1);
        let top = llr
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i);
        assert_eq!(top, Some(3));
        // q = 1 is the linear statistic (a·x − a²/2)/σ² (ln(1 − q) = −∞ is handled).
        let linear = participation_llr(&round, 1.0, 1.0);
        assert!(linear.iter().all(|l| l.is_finite()));
        assert!((linear[3] - linear[0] - (3.0 - 0.1) / (1.4826f64 * 0.15).powi(2)).abs() < 1e-6);
    }
}
