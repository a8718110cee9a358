//! burn's CTC loss (what ASR training minimises) against a brute-force reference: the
//! negative log of the summed probability of every frame-level path that collapses to the
//! labels, enumerated outright on small cases, in batches of unequal lengths; on
//! utterance-sized cases, the forward algorithm in f64 (itself checked against the brute
//! force). Also the gradient through log-softmax, against central finite differences; and
//! hush's `ctc_loss` with leading blanks, against the forward algorithm over only the
//! paths that stay blank until the speech begins.

#![allow(clippy::unwrap_used)]

mod common;

use burn::nn::loss::CTCLossConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};
use hush_models::asr::{ctc_loss, log_probs as model_log_probs, CtcBatch, Vocabulary, BLANK};

/// `−log Σ_paths Π_t p(path_t)` over the paths of length `t` that collapse (merge repeats,
/// drop blanks 0) to `labels`; `lp` is `t × v` log-probabilities.
fn brute_force(lp: &[f64], t: usize, v: usize, labels: &[usize]) -> f64 {
    let mut total = 0.0f64;
    let mut path = vec![0usize; t];
    loop {
        let mut collapsed = Vec::new();
        let mut prev = usize::MAX;
        for &s in &path {
            if s != prev && s != 0 {
                collapsed.push(s);
            }
            prev = s;
        }
        if collapsed == labels {
            total += path
                .iter()
                .enumerate()
                .map(|(i, &s)| lp[i * v + s])
                .sum::<f64>()
                .exp();
        }
        // Next path, odometer order.
        let mut i = 0;
        loop {
            if i == t {
                return -total.ln();
            }
            path[i] += 1;
            if path[i] < v {
                break;
            }
            path[i] = 0;
            i += 1;
        }
    }
}

/// Utterance `i`'s first `len` rows of time-major `t × b × v` log-probabilities.
fn utterance_rows(lp: &[f64], i: usize, len: usize, b: usize, v: usize) -> Vec<f64> {
    (0..len)
        .flat_map(|s| lp[(s * b + i) * v..(s * b + i + 1) * v].to_vec())
        .collect()
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
    }
}

/// Random log-softmax rows, `t × b × v`, time-major as burn's loss takes them.
fn log_probs(t: usize, b: usize, v: usize, rng: &mut Lcg) -> Vec<f64> {
    let mut out = Vec::with_capacity(t * b * v);
    for _ in 0..t * b {
        let row: Vec<f64> = (0..v).map(|_| rng.next()).collect();
        let m = row.iter().cloned().fold(f64::MIN, f64::max);
        let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        out.extend(row.iter().map(|x| x - lse));
    }
    out
}

fn burn_losses(lp: &[f64], t: usize, v: usize, cases: &[(usize, Vec<usize>)]) -> Vec<f64> {
    let device = Device::flex();
    let b = cases.len();
    let max_len = cases.iter().map(|c| c.1.len()).max().unwrap();
    let mut targets = vec![0i64; b * max_len];
    for (i, (_, l)) in cases.iter().enumerate() {
        for (j, &s) in l.iter().enumerate() {
            targets[i * max_len + j] = s as i64;
        }
    }
    let x = Tensor::<3>::from_data(
        TensorData::new(lp.iter().map(|&x| x as f32).collect::<Vec<_>>(), [t, b, v]),
        &device,
    );
    let loss = CTCLossConfig::new().init().forward(
        x,
        Tensor::<2, Int>::from_data(TensorData::new(targets, [b, max_len]), &device),
        Tensor::<1, Int>::from_data(
            TensorData::new(cases.iter().map(|c| c.0 as i64).collect::<Vec<_>>(), [b]),
            &device,
        ),
        Tensor::<1, Int>::from_data(
            TensorData::new(
                cases.iter().map(|c| c.1.len() as i64).collect::<Vec<_>>(),
                [b],
            ),
            &device,
        ),
    );
    loss.into_data()
        .try_to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&x| f64::from(x))
        .collect()
}

#[test]
fn burn_ctc_loss_equals_brute_force() {
    let (t, v) = (6, 4);
    let cases = vec![
        (6, vec![1, 2]),
        (6, vec![1, 1]),
        (4, vec![3]),
        (5, vec![2, 3, 2]),
        (3, vec![1, 2]),
    ];
    let b = cases.len();
    let lp = log_probs(t, b, v, &mut Lcg(7));
    let got = burn_losses(&lp, t, v, &cases);
    for (i, (len, labels)) in cases.iter().enumerate() {
        let mine = utterance_rows(&lp, i, *len, b, v);
        let want = brute_force(&mine, *len, v, labels);
        // The forward algorithm (the long-utterance reference below) agrees too.
        let dp = forward_algorithm(&mine, *len, v, labels);
        assert!(
            (dp - want).abs() < 1e-9 * want.abs().max(1.0),
            "case {i}: {dp} vs {want}"
        );
        assert!(
            (got[i] - want).abs() < 1e-4 * want.abs().max(1.0),
            "case {i} {labels:?} over {len} steps: burn {} vs brute force {want}",
            got[i]
        );
    }
}

fn log_softmax_rows(x: &[f64], v: usize) -> Vec<f64> {
    x.chunks(v)
        .flat_map(|row| {
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            row.iter().map(move |x| x - lse).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn burn_ctc_gradient_equals_finite_differences() {
    // Logits → log-softmax → CTC, as in training; one utterance of 5 steps, labels [1, 2, 2]
    // padded in a batch beside a longer one, so padding steps must get no gradient.
    let (t, v) = (7, 3);
    let cases = [(5usize, vec![1usize, 2, 2]), (7, vec![2, 1])];
    let b = cases.len();
    let mut rng = Lcg(11);
    let logits: Vec<f64> = (0..t * b * v).map(|_| rng.next()).collect();
    let device = Device::flex().autodiff();
    let x = Tensor::<3>::from_data(
        TensorData::new(
            logits.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            [t, b, v],
        ),
        &device,
    )
    .require_grad();
    let lp = burn::tensor::activation::log_softmax(x.clone(), 2);
    let max_len = 3;
    let mut targets = vec![0i64; b * max_len];
    for (i, (_, l)) in cases.iter().enumerate() {
        for (j, &s) in l.iter().enumerate() {
            targets[i * max_len + j] = s as i64;
        }
    }
    let loss = CTCLossConfig::new().init().forward(
        lp,
        Tensor::<2, Int>::from_data(TensorData::new(targets, [b, max_len]), &device),
        Tensor::<1, Int>::from_data(TensorData::new(vec![5i64, 7], [b]), &device),
        Tensor::<1, Int>::from_data(TensorData::new(vec![3i64, 2], [b]), &device),
    );
    let grads = loss.sum().backward();
    let got: Vec<f32> = x.grad(&grads).unwrap().into_data().try_to_vec().unwrap();
    let reference = |z: &[f64]| -> f64 {
        let lp = log_softmax_rows(z, v);
        cases
            .iter()
            .enumerate()
            .map(|(i, (len, labels))| {
                let mine = utterance_rows(&lp, i, *len, b, v);
                brute_force(&mine, *len, v, labels)
            })
            .sum()
    };
    let h = 1e-5;
    for k in 0..logits.len() {
        let mut up = logits.clone();
        up[k] += h;
        let mut down = logits.clone();
        down[k] -= h;
        let want = (reference(&up) - reference(&down)) / (2.0 * h);
        assert!(
            (f64::from(got[k]) - want).abs() < 2e-3,
            "d loss / d logit {k} (step {}, utterance {}, symbol {}): burn {} vs {want}",
            k / (b * v),
            (k / v) % b,
            k % v,
            got[k]
        );
    }
}

/// The CTC forward algorithm in log space, f64: `−log p(labels | lp)` for `t × v` rows.
fn forward_algorithm(lp: &[f64], t: usize, v: usize, labels: &[usize]) -> f64 {
    let ext: Vec<usize> = std::iter::once(0)
        .chain(labels.iter().flat_map(|&l| [l, 0]))
        .collect();
    let s = ext.len();
    let lse = |a: f64, b: f64| {
        if a == f64::NEG_INFINITY {
            b
        } else if b == f64::NEG_INFINITY {
            a
        } else {
            a.max(b) + (-(a - b).abs()).exp().ln_1p()
        }
    };
    let mut alpha = vec![f64::NEG_INFINITY; s];
    alpha[0] = lp[ext[0]];
    if s > 1 {
        alpha[1] = lp[ext[1]];
    }
    for step in 1..t {
        let row = &lp[step * v..(step + 1) * v];
        let prev = alpha.clone();
        for k in 0..s {
            let mut a = prev[k];
            if k >= 1 {
                a = lse(a, prev[k - 1]);
            }
            if k >= 2 && ext[k] != 0 && ext[k] != ext[k - 2] {
                a = lse(a, prev[k - 2]);
            }
            alpha[k] = a + row[ext[k]];
        }
    }
    -lse(
        alpha[s - 1],
        if s > 1 {
            alpha[s - 2]
        } else {
            f64::NEG_INFINITY
        },
    )
}

#[test]
fn burn_ctc_loss_equals_the_forward_algorithm_on_utterance_lengths() {
    // Utterance-sized: up to 160 steps, 29 symbols, transcripts of 12–60 characters.
    let (t, v) = (160, 29);
    let mut rng = Lcg(3);
    let cases: Vec<(usize, Vec<usize>)> = [(160usize, 60usize), (120, 40), (64, 12), (150, 25)]
        .iter()
        .map(|&(len, n)| {
            (
                len,
                (0..n)
                    .map(|_| 1 + (rng.next().abs() * 14.0) as usize % 28)
                    .collect(),
            )
        })
        .collect();
    let b = cases.len();
    let lp = log_probs(t, b, v, &mut rng);
    let got = burn_losses(&lp, t, v, &cases);
    for (i, (len, labels)) in cases.iter().enumerate() {
        let mine = utterance_rows(&lp, i, *len, b, v);
        let want = forward_algorithm(&mine, *len, v, labels);
        assert!(
            (got[i] - want).abs() < 1e-3 * want.abs(),
            "case {i}: {} labels over {len} steps: burn {} vs forward algorithm {want}",
            labels.len(),
            got[i]
        );
    }
}

#[test]
fn leading_blanks_count_only_the_paths_silent_until_the_speech() {
    let device = Device::flex();
    let model = common::tiny_ctc_at(20, 2).init(&device).unwrap();
    let vocab = Vocabulary::characters();
    let labels = vocab.encode("go on").unwrap();
    let mut rng = Lcg(5);
    let frames = 40;
    let features: Vec<f32> = (0..frames * 20).map(|_| rng.next() as f32).collect();
    let lp = model_log_probs(&model, &features, 20, &device).unwrap();
    let v = 29;
    let steps = lp.len() / v;
    let loss_with = |lead: usize| -> f64 {
        let batch = CtcBatch {
            features: features.clone(),
            lengths: vec![frames],
            labels: vec![labels.clone()],
            frames,
            bins: 20,
            leading_blanks: vec![lead],
        };
        let loss = ctc_loss(&model, &batch, &device).unwrap();
        f64::from(loss.into_data().try_to_vec::<f32>().unwrap()[0])
    };
    let mut last = loss_with(0);
    for lead in [0, 3, 8, 14] {
        let rows: Vec<f64> = lp
            .iter()
            .enumerate()
            .map(|(k, &x)| {
                if k / v < lead && k % v != BLANK {
                    f64::NEG_INFINITY
                } else {
                    f64::from(x)
                }
            })
            .collect();
        let want = forward_algorithm(&rows, steps, v, &labels) / labels.len() as f64;
        let got = loss_with(lead);
        assert!(
            (got - want).abs() < 1e-4 * want,
            "lead {lead}: {got} vs {want}"
        );
        // Fewer paths, never a smaller loss.
        assert!(got >= last - 1e-6, "lead {lead}: {got} < {last}");
        last = got;
    }
    // No room left for the labels after the leading blanks: refused by name.
    let batch = CtcBatch {
        features,
        lengths: vec![frames],
        labels: vec![labels],
        frames,
        bins: 20,
        leading_blanks: vec![steps - 3],
    };
    let err = ctc_loss(&model, &batch, &device).unwrap_err().to_string();
    assert!(err.contains("output steps"), "{err}");
}
