//! The leak-CNN ([`hush_models::arch::LeakCnn`]) written out by hand in plain Rust, with
//! the exact second-order pass that gradient inversion needs and burn lacks.
//!
//! Gradient inversion minimises a loss on the *weight* gradient `g(x) = ∇_W L(x, W)` over
//! the input `x`, so it needs `∇_x ⟨g(x), u⟩` for a fixed direction `u` — double backprop,
//! which burn 0.22 does not have. By the symmetry of mixed partials,
//!
//! ```text
//! ∇_x ⟨∇_W L(x, W), u⟩ = ∂/∂ε ∇_x L(x, W + εu) |_(ε=0)
//! ```
//!
//! so running the ordinary forward and input-backward pass in **dual numbers**
//! (`W + εu`, ε² = 0) gives it exactly, in one pass (forward-over-reverse). That is why
//! this module exists instead of finite differences through burn
//! (`[∇_x L(W+εu) − ∇_x L(W−εu)] / 2ε`): the central difference is only accurate to
//! O(ε²) and breaks wherever `W ± εu` moves a ReLU or max-pool decision — which, with
//! 1.5 M weights moved at once, happens at every step — while the dual pass is exact
//! almost everywhere (ReLU and max pool are piecewise linear; their second derivative is
//! zero off a null set) and costs about three float passes. The model is small (two
//! 3×3 convs, two 2×2 max pools, two FC layers), so writing it out is short; the test
//! suite checks it against burn's forward and gradients and the second-order pass
//! against finite differences of the whole objective.
//!
//! The input here is the *normalised* feature matrix (after the model's fixed
//! `input_norm`); dropout is off (an attacker inverts the deterministic network, and a
//! device computing a single-example update for the audit uses the same).
//!
//! It owns no attack logic: that is [`super::invert`].

use std::ops::{Add, AddAssign, Mul, Sub};

use hush_models::arch::{ArchConfig, KwsModel};
use hush_models::checkpoint::NamedTensor;

use super::AuditError;

/// A number the network can run on: `f64`, or a dual number carrying a tangent.
pub trait Scalar:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + AddAssign
{
    /// 0.
    fn zero() -> Self;
    /// A constant (no tangent).
    fn constant(v: f64) -> Self;
    /// The real part (decisions — ReLU, max — are taken on it).
    fn re(self) -> f64;
    /// `e^x`.
    fn exp(self) -> Self;
    /// `1 / x`.
    fn recip(self) -> Self;
    /// `ln x`.
    fn ln(self) -> Self;
}

impl Scalar for f64 {
    fn zero() -> Self {
        0.0
    }
    fn constant(v: f64) -> Self {
        v
    }
    fn re(self) -> f64 {
        self
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn recip(self) -> Self {
        1.0 / self
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
}

/// `v + t·ε` with `ε² = 0`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Dual {
    /// Value.
    pub v: f64,
    /// Tangent.
    pub t: f64,
}

impl Add for Dual {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            v: self.v + o.v,
            t: self.t + o.t,
        }
    }
}

impl Sub for Dual {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            v: self.v - o.v,
            t: self.t - o.t,
        }
    }
}

impl Mul for Dual {
    type Output = Self;
    fn mul(self, o: Self) -> Self {
        Self {
            v: self.v * o.v,
            t: self.v * o.t + self.t * o.v,
        }
    }
}

impl AddAssign for Dual {
    fn add_assign(&mut self, o: Self) {
        self.v += o.v;
        self.t += o.t;
    }
}

impl Scalar for Dual {
    fn zero() -> Self {
        Self::default()
    }
    fn constant(v: f64) -> Self {
        Self { v, t: 0.0 }
    }
    fn re(self) -> f64 {
        self.v
    }
    fn exp(self) -> Self {
        let e = self.v.exp();
        Self {
            v: e,
            t: self.t * e,
        }
    }
    fn recip(self) -> Self {
        Self {
            v: 1.0 / self.v,
            t: -self.t / (self.v * self.v),
        }
    }
    fn ln(self) -> Self {
        Self {
            v: self.v.ln(),
            t: self.t / self.v,
        }
    }
}

/// Sizes of the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakShape {
    /// Input frames (rows).
    pub frames: usize,
    /// Input bins (columns).
    pub bins: usize,
    /// Channels of conv1 and conv2.
    pub channels: [usize; 2],
    /// Hidden FC width.
    pub hidden: usize,
    /// Classes.
    pub classes: usize,
}

impl LeakShape {
    fn conv1_out(&self) -> (usize, usize) {
        (self.frames - 2, self.bins - 2)
    }
    fn pool1_out(&self) -> (usize, usize) {
        let (h, w) = self.conv1_out();
        (h / 2, w / 2)
    }
    fn conv2_out(&self) -> (usize, usize) {
        let (h, w) = self.pool1_out();
        (h - 2, w - 2)
    }
    fn pool2_out(&self) -> (usize, usize) {
        let (h, w) = self.conv2_out();
        (h / 2, w / 2)
    }
    /// Inputs of fc1.
    pub fn flat(&self) -> usize {
        let (h, w) = self.pool2_out();
        self.channels[1] * h * w
    }
    /// The trainable tensors in `weights.safetensors` order, with their shapes.
    pub fn layout(&self) -> Vec<(&'static str, Vec<usize>)> {
        let [c1, c2] = self.channels;
        vec![
            ("conv1.weight", vec![c1, 1, 3, 3]),
            ("conv1.bias", vec![c1]),
            ("conv2.weight", vec![c2, c1, 3, 3]),
            ("conv2.bias", vec![c2]),
            ("fc1.weight", vec![self.flat(), self.hidden]),
            ("fc1.bias", vec![self.hidden]),
            ("fc2.weight", vec![self.hidden, self.classes]),
            ("fc2.bias", vec![self.classes]),
        ]
    }
    /// Trainable parameters in all.
    pub fn num_params(&self) -> usize {
        self.layout()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum()
    }
}

/// All trainable parameters, flat, in [`LeakShape::layout`] order.
#[derive(Debug, Clone)]
struct Params<'a, S> {
    c1w: &'a [S],
    c1b: &'a [S],
    c2w: &'a [S],
    c2b: &'a [S],
    f1w: &'a [S],
    f1b: &'a [S],
    f2w: &'a [S],
    f2b: &'a [S],
}

impl<'a, S> Params<'a, S> {
    fn split(shape: &LeakShape, flat: &'a [S]) -> Self {
        let sizes: Vec<usize> = shape
            .layout()
            .iter()
            .map(|(_, s)| s.iter().product())
            .collect();
        let mut rest = flat;
        let mut take = |n: usize| {
            let (a, b) = rest.split_at(n);
            rest = b;
            a
        };
        Self {
            c1w: take(sizes[0]),
            c1b: take(sizes[1]),
            c2w: take(sizes[2]),
            c2b: take(sizes[3]),
            f1w: take(sizes[4]),
            f1b: take(sizes[5]),
            f2w: take(sizes[6]),
            f2b: take(sizes[7]),
        }
    }
}

/// The leak-CNN with its weights as `f64`, and the model's input normalisation.
#[derive(Debug, Clone)]
pub struct LeakNet {
    /// Sizes.
    pub shape: LeakShape,
    /// Trainable parameters, flat, in [`LeakShape::layout`] order.
    pub weights: Vec<f64>,
    /// Per-bin mean of the fixed input normalisation.
    pub norm_mean: Vec<f32>,
    /// Per-bin inverse standard deviation of the input normalisation.
    pub norm_scale: Vec<f32>,
}

/// What one forward pass keeps for the backward pass.
struct Cache<S> {
    x: Vec<S>,
    c1: Vec<S>,
    p1: Vec<S>,
    i1: Vec<usize>,
    c2: Vec<S>,
    p2: Vec<S>,
    i2: Vec<usize>,
    z1: Vec<S>,
    h: Vec<S>,
    probs: Vec<S>,
    loss: S,
}

/// `[cin, h, w]` → `[cout, h−2, w−2]`, 3×3 valid convolution plus bias.
fn conv3<S: Scalar>(x: &[S], cin: usize, h: usize, w: usize, wt: &[S], b: &[S]) -> Vec<S> {
    let cout = b.len();
    let (oh, ow) = (h - 2, w - 2);
    let mut out = vec![S::zero(); cout * oh * ow];
    for o in 0..cout {
        let plane = &mut out[o * oh * ow..(o + 1) * oh * ow];
        plane.iter_mut().for_each(|v| *v = b[o]);
        for i in 0..cin {
            let src = &x[i * h * w..(i + 1) * h * w];
            for ky in 0..3 {
                for kx in 0..3 {
                    let k = wt[((o * cin + i) * 3 + ky) * 3 + kx];
                    for y in 0..oh {
                        let row = &src[(y + ky) * w + kx..(y + ky) * w + kx + ow];
                        let dst = &mut plane[y * ow..(y + 1) * ow];
                        for (d, &s) in dst.iter_mut().zip(row) {
                            *d += k * s;
                        }
                    }
                }
            }
        }
    }
    out
}

/// Backward of [`conv3`]: `dx` always, `dw`/`db` when given.
#[allow(clippy::too_many_arguments)]
fn conv3_back<S: Scalar>(
    x: &[S],
    cin: usize,
    h: usize,
    w: usize,
    wt: &[S],
    dy: &[S],
    cout: usize,
    mut dwb: Option<(&mut [S], &mut [S])>,
    want_dx: bool,
) -> Vec<S> {
    let (oh, ow) = (h - 2, w - 2);
    let mut dx = vec![S::zero(); if want_dx { cin * h * w } else { 0 }];
    for o in 0..cout {
        let g = &dy[o * oh * ow..(o + 1) * oh * ow];
        if g.iter().all(|v| v.re() == 0.0) && dwb.is_none() {
            continue;
        }
        if let Some((_, db)) = dwb.as_mut() {
            let mut s = S::zero();
            for &v in g {
                s += v;
            }
            db[o] += s;
        }
        for i in 0..cin {
            let src = &x[i * h * w..(i + 1) * h * w];
            for ky in 0..3 {
                for kx in 0..3 {
                    let widx = ((o * cin + i) * 3 + ky) * 3 + kx;
                    if let Some((dw, _)) = dwb.as_mut() {
                        let mut s = S::zero();
                        for y in 0..oh {
                            let row = &src[(y + ky) * w + kx..(y + ky) * w + kx + ow];
                            for (&a, &b) in row.iter().zip(&g[y * ow..(y + 1) * ow]) {
                                s += a * b;
                            }
                        }
                        dw[widx] += s;
                    }
                    if want_dx {
                        let k = wt[widx];
                        let dplane = &mut dx[i * h * w..(i + 1) * h * w];
                        for y in 0..oh {
                            let dst = &mut dplane[(y + ky) * w + kx..(y + ky) * w + kx + ow];
                            for (d, &v) in dst.iter_mut().zip(&g[y * ow..(y + 1) * ow]) {
                                *d += k * v;
                            }
                        }
                    }
                }
            }
        }
    }
    dx
}

/// ReLU then 2×2/2 max pool over `[c, h, w]`: the pooled values and, per output, the
/// flat index of the winner (`usize::MAX` when the winner was clipped to 0 by the ReLU).
fn relu_pool<S: Scalar>(x: &[S], c: usize, h: usize, w: usize) -> (Vec<S>, Vec<usize>) {
    let (ph, pw) = (h / 2, w / 2);
    let mut out = vec![S::zero(); c * ph * pw];
    let mut idx = vec![usize::MAX; c * ph * pw];
    for ch in 0..c {
        for y in 0..ph {
            for xx in 0..pw {
                let mut best = usize::MAX;
                let mut best_v = 0.0;
                for dy in 0..2 {
                    for dx in 0..2 {
                        let k = ch * h * w + (2 * y + dy) * w + 2 * xx + dx;
                        let v = x[k].re();
                        if v > best_v {
                            best_v = v;
                            best = k;
                        }
                    }
                }
                let o = ch * ph * pw + y * pw + xx;
                if best != usize::MAX {
                    out[o] = x[best];
                    idx[o] = best;
                }
            }
        }
    }
    (out, idx)
}

fn unpool<S: Scalar>(d: &[S], idx: &[usize], len: usize) -> Vec<S> {
    let mut out = vec![S::zero(); len];
    for (&g, &k) in d.iter().zip(idx) {
        if k != usize::MAX {
            out[k] += g;
        }
    }
    out
}

impl LeakNet {
    /// The hand-written twin of a leak-CNN model (its trainable weights and input
    /// normalisation). Any other architecture is an error naming it.
    pub fn from_model(arch: &ArchConfig, model: &KwsModel) -> Result<Self, AuditError> {
        let ArchConfig::LeakCnn(cfg) = arch else {
            return Err(AuditError::UnsupportedModel {
                reason: format!(
                    "the gradient-inversion attack is written for the leak-cnn architecture \
                     (2 conv + 2 FC), not `{}`; train one with `hush-host train --arch leak-cnn`",
                    arch.name()
                ),
            });
        };
        let shape = LeakShape {
            frames: cfg.io.frames,
            bins: cfg.io.bins,
            channels: cfg.channels,
            hidden: cfg.hidden,
            classes: cfg.io.classes,
        };
        let tensors = model.named_tensors()?;
        Self::from_tensors(shape, &tensors)
    }

    /// From named tensors (as `weights.safetensors` holds them): every trainable tensor of
    /// [`LeakShape::layout`] and `input_norm.mean`/`input_norm.scale`, shapes checked.
    pub fn from_tensors(shape: LeakShape, tensors: &[NamedTensor]) -> Result<Self, AuditError> {
        let find = |name: &str, want: &[usize]| -> Result<&NamedTensor, AuditError> {
            let t = tensors.iter().find(|t| t.name == name).ok_or_else(|| {
                AuditError::UnsupportedModel {
                    reason: format!("the model has no `{name}` layer, which the attack needs"),
                }
            })?;
            if t.shape != want {
                return Err(AuditError::UnsupportedModel {
                    reason: format!("`{name}` has shape {:?}, expected {want:?}", t.shape),
                });
            }
            Ok(t)
        };
        if shape.frames < 10 || shape.bins < 10 {
            return Err(AuditError::UnsupportedModel {
                reason: format!(
                    "input {}×{} is too small for the leak-cnn",
                    shape.frames, shape.bins
                ),
            });
        }
        let mut weights = Vec::with_capacity(shape.num_params());
        for (name, dims) in shape.layout() {
            weights.extend(find(name, &dims)?.data.iter().map(|&v| f64::from(v)));
        }
        let mean = find("input_norm.mean", &[shape.bins])?.data.clone();
        let scale = find("input_norm.scale", &[shape.bins])?.data.clone();
        Ok(Self {
            shape,
            weights,
            norm_mean: mean,
            norm_scale: scale,
        })
    }

    /// Model features (`frames × bins`) → normalised network input.
    pub fn normalise(&self, features: &[f32]) -> Vec<f64> {
        let b = self.shape.bins;
        features
            .iter()
            .enumerate()
            .map(|(i, &v)| f64::from(v - self.norm_mean[i % b]) * f64::from(self.norm_scale[i % b]))
            .collect()
    }

    /// Normalised network input → model features.
    pub fn denormalise(&self, x: &[f64]) -> Vec<f32> {
        let b = self.shape.bins;
        x.iter()
            .enumerate()
            .map(|(i, &v)| {
                let s = f64::from(self.norm_scale[i % b]);
                let s = if s.abs() < 1e-12 { 1.0 } else { s };
                (v / s) as f32 + self.norm_mean[i % b]
            })
            .collect()
    }

    fn forward<S: Scalar>(&self, p: &Params<S>, x: Vec<S>, label: usize) -> Cache<S> {
        let sh = &self.shape;
        let [c1, c2] = sh.channels;
        let conv1 = conv3(&x, 1, sh.frames, sh.bins, p.c1w, p.c1b);
        let (h1, w1) = sh.conv1_out();
        let (p1, i1) = relu_pool(&conv1, c1, h1, w1);
        let (ph1, pw1) = sh.pool1_out();
        let conv2 = conv3(&p1, c1, ph1, pw1, p.c2w, p.c2b);
        let (h2, w2) = sh.conv2_out();
        let (p2, i2) = relu_pool(&conv2, c2, h2, w2);
        let hidden = sh.hidden;
        let mut z1: Vec<S> = p.f1b.to_vec();
        for (i, &a) in p2.iter().enumerate() {
            if a.re() == 0.0 {
                // A unit pruned by the ReLU or the pool: exactly zero, tangent included.
                continue;
            }
            let row = &p.f1w[i * hidden..(i + 1) * hidden];
            for (z, &wv) in z1.iter_mut().zip(row) {
                *z += a * wv;
            }
        }
        let h: Vec<S> = z1
            .iter()
            .map(|&z| if z.re() > 0.0 { z } else { S::zero() })
            .collect();
        let k = sh.classes;
        let mut z2: Vec<S> = p.f2b.to_vec();
        for (j, &hv) in h.iter().enumerate() {
            let row = &p.f2w[j * k..(j + 1) * k];
            for (z, &wv) in z2.iter_mut().zip(row) {
                *z += hv * wv;
            }
        }
        let max = z2.iter().map(|z| z.re()).fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<S> = z2.iter().map(|&z| (z - S::constant(max)).exp()).collect();
        let mut sum = S::zero();
        for &v in &e {
            sum += v;
        }
        let inv = sum.recip();
        let probs: Vec<S> = e.iter().map(|&v| v * inv).collect();
        let loss = S::zero() - (z2[label] - S::constant(max) - sum.ln());
        Cache {
            x,
            c1: conv1,
            p1,
            i1,
            c2: conv2,
            p2,
            i2,
            z1,
            h,
            probs,
            loss,
        }
    }

    /// Backward pass: `∂L/∂x` and, when `dw` is given, every weight gradient into it.
    fn backward<S: Scalar>(
        &self,
        p: &Params<S>,
        c: &Cache<S>,
        label: usize,
        dw: Option<&mut [S]>,
    ) -> Vec<S> {
        let sh = &self.shape;
        let [c1, c2] = sh.channels;
        let (k, hidden) = (sh.classes, sh.hidden);
        let mut dz2 = c.probs.clone();
        dz2[label] = dz2[label] - S::constant(1.0);
        let mut dh = vec![S::zero(); hidden];
        for (j, d) in dh.iter_mut().enumerate() {
            let row = &p.f2w[j * k..(j + 1) * k];
            let mut s = S::zero();
            for (&wv, &g) in row.iter().zip(&dz2) {
                s += wv * g;
            }
            *d = if c.z1[j].re() > 0.0 { s } else { S::zero() };
        }
        let dz1 = dh;
        let mut da = vec![S::zero(); c.p2.len()];
        for (i, d) in da.iter_mut().enumerate() {
            let row = &p.f1w[i * hidden..(i + 1) * hidden];
            let mut s = S::zero();
            for (&wv, &g) in row.iter().zip(&dz1) {
                s += wv * g;
            }
            *d = s;
        }
        let (ph1, pw1) = sh.pool1_out();
        let dc2 = unpool(&da, &c.i2, c.c2.len());
        let dc1;
        let dx;
        match dw {
            Some(dw) => {
                let n: Vec<usize> = sh
                    .layout()
                    .iter()
                    .map(|(_, s)| s.iter().product())
                    .collect();
                let (g_c1w, rest) = dw.split_at_mut(n[0]);
                let (g_c1b, rest) = rest.split_at_mut(n[1]);
                let (g_c2w, rest) = rest.split_at_mut(n[2]);
                let (g_c2b, rest) = rest.split_at_mut(n[3]);
                let (g_f1w, rest) = rest.split_at_mut(n[4]);
                let (g_f1b, rest) = rest.split_at_mut(n[5]);
                let (g_f2w, g_f2b) = rest.split_at_mut(n[6]);
                for (j, &hv) in c.h.iter().enumerate() {
                    for (g, &d) in g_f2w[j * k..(j + 1) * k].iter_mut().zip(&dz2) {
                        *g += hv * d;
                    }
                }
                for (g, &d) in g_f2b.iter_mut().zip(&dz2) {
                    *g += d;
                }
                for (i, &a) in c.p2.iter().enumerate() {
                    for (g, &d) in g_f1w[i * hidden..(i + 1) * hidden].iter_mut().zip(&dz1) {
                        *g += a * d;
                    }
                }
                for (g, &d) in g_f1b.iter_mut().zip(&dz1) {
                    *g += d;
                }
                let dp1 = conv3_back(
                    &c.p1,
                    c1,
                    ph1,
                    pw1,
                    p.c2w,
                    &dc2,
                    c2,
                    Some((g_c2w, g_c2b)),
                    true,
                );
                dc1 = unpool(&dp1, &c.i1, c.c1.len());
                dx = conv3_back(
                    &c.x,
                    1,
                    sh.frames,
                    sh.bins,
                    p.c1w,
                    &dc1,
                    c1,
                    Some((g_c1w, g_c1b)),
                    true,
                );
            }
            None => {
                let dp1 = conv3_back(&c.p1, c1, ph1, pw1, p.c2w, &dc2, c2, None, true);
                dc1 = unpool(&dp1, &c.i1, c.c1.len());
                dx = conv3_back(&c.x, 1, sh.frames, sh.bins, p.c1w, &dc1, c1, None, true);
            }
        }
        dx
    }

    fn check_input(&self, x: &[f64], label: usize) {
        assert_eq!(x.len(), self.shape.frames * self.shape.bins, "input size");
        assert!(label < self.shape.classes, "label out of range");
    }

    /// The loss and the gradient of every trainable weight (flat, [`LeakShape::layout`]
    /// order) for one normalised example `x` with class `label`.
    ///
    /// # Panics
    /// When `x` or `label` do not fit the shape (callers check first).
    pub fn weight_grad(&self, x: &[f64], label: usize) -> (f64, Vec<f64>) {
        self.weight_grad_at(&self.weights, x, label)
    }

    /// [`LeakNet::weight_grad`] at other weights `w` (same layout), e.g. after local steps.
    ///
    /// # Panics
    /// As [`LeakNet::weight_grad`], and when `w` has the wrong length.
    pub fn weight_grad_at(&self, w: &[f64], x: &[f64], label: usize) -> (f64, Vec<f64>) {
        self.check_input(x, label);
        assert_eq!(w.len(), self.weights.len(), "weights size");
        let p = Params::split(&self.shape, w);
        let c = self.forward(&p, x.to_vec(), label);
        let mut g = vec![0.0; w.len()];
        self.backward(&p, &c, label, Some(&mut g));
        (c.loss, g)
    }

    /// `(L, ∇_x L)` for one normalised example.
    ///
    /// # Panics
    /// As [`LeakNet::weight_grad`].
    pub fn input_grad(&self, x: &[f64], label: usize) -> (f64, Vec<f64>) {
        self.check_input(x, label);
        let p = Params::split(&self.shape, &self.weights);
        let c = self.forward(&p, x.to_vec(), label);
        (c.loss, self.backward(&p, &c, label, None))
    }

    /// `∇_x ⟨∇_W L(x, W), u⟩`, exactly, by one dual-number pass at `W + εu` (see the
    /// module docs). `u` is flat in [`LeakShape::layout`] order.
    ///
    /// # Panics
    /// As [`LeakNet::weight_grad`], and when `u` has the wrong length.
    pub fn grad_dot_input_grad(&self, x: &[f64], label: usize, u: &[f64]) -> Vec<f64> {
        self.grad_dot_input_grad_at(&self.weights, x, label, u)
    }

    /// [`LeakNet::grad_dot_input_grad`] at other weights `w` (same layout).
    ///
    /// # Panics
    /// As [`LeakNet::weight_grad_at`], and when `u` has the wrong length.
    pub fn grad_dot_input_grad_at(
        &self,
        w: &[f64],
        x: &[f64],
        label: usize,
        u: &[f64],
    ) -> Vec<f64> {
        self.dual_pass(w, x, label, u, false).0
    }

    /// Both second-order products of the loss at weights `w` with a weight-space direction
    /// `u`, exactly, from one dual-number pass at `w + εu`: `(∇_x ⟨∇_W L, u⟩, ∇_W ⟨∇_W
    /// L, u⟩)` — the mixed product and the Hessian-vector product `H_WW u`, which
    /// differentiating through local SGD steps needs.
    ///
    /// # Panics
    /// As [`LeakNet::weight_grad_at`], and when `u` has the wrong length.
    pub fn second_order_at(
        &self,
        w: &[f64],
        x: &[f64],
        label: usize,
        u: &[f64],
    ) -> (Vec<f64>, Vec<f64>) {
        self.dual_pass(w, x, label, u, true)
    }

    fn dual_pass(
        &self,
        w: &[f64],
        x: &[f64],
        label: usize,
        u: &[f64],
        want_hwu: bool,
    ) -> (Vec<f64>, Vec<f64>) {
        self.check_input(x, label);
        assert_eq!(w.len(), self.weights.len(), "weights size");
        assert_eq!(u.len(), self.weights.len(), "direction size");
        let wd: Vec<Dual> = w.iter().zip(u).map(|(&v, &t)| Dual { v, t }).collect();
        let p = Params::split(&self.shape, &wd);
        let xd = x.iter().map(|&v| Dual::constant(v)).collect();
        let c = self.forward(&p, xd, label);
        let mut dw = vec![Dual::zero(); if want_hwu { w.len() } else { 0 }];
        let dx = self.backward(&p, &c, label, want_hwu.then_some(dw.as_mut_slice()));
        (
            dx.into_iter().map(|d| d.t).collect(),
            dw.into_iter().map(|d| d.t).collect(),
        )
    }
}
