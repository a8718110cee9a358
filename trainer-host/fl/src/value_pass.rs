//! One pass over an update's values, as they lie in the upload's body (little-endian
//! `f32`s): whether each is finite, the sum of their squares (for the norm re-check), and
//! — when given the sum — each value scaled, put on the fixed-point grid and added (or
//! subtracted, to take an update back out exactly).
//!
//! Every path gives the same bits: the SIMD ones (AVX-512, AVX2, picked at run time) and
//! the portable one. A value `v` goes onto the grid as `trunc(f64(v) · scale)` — or, when
//! the grid is `scaled`, `trunc(clamp(f64(v · factor) · scale))`, the clamp taking a NaN to
//! the lower limit (`maxpd` and `f64::max` both do). The first pass over an update needs
//! no clamp: a value of an update within its bound is within the limit, and one that is
//! not is taken back out by the same instructions, whatever they made of it (a conversion
//! out of range gives the same integer both times), so no path must agree with another
//! there. Squares are summed in 16 `f64` lanes, lane `j` holding the values whose index is
//! `j` modulo 16, and the lanes added in order at the end: the square of an `f32` is exact
//! in `f64`, so a fused multiply-add and a multiply then an add round alike, and the norm
//! does not depend on the instruction set either.
//!
//! Measured against the four passes it replaced in BENCHMARKS.md ("Federated aggregation").

// The SIMD kernels read the values with unaligned loads from the body and write the sum
// through raw pointers, within the bounds checked in `pass`.
#![allow(unsafe_code)]

#[cfg(not(target_endian = "little"))]
compile_error!(
    "the pass reads little-endian f32s in place; a big-endian host would need a byte swap"
);

/// Lanes of the sum of squares.
pub(crate) const LANES: usize = 16;

/// What a pass found out about the values it read, accumulated over the calls for one
/// layer (each call starting at a multiple of [`LANES`] values into the layer).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Moments {
    lanes: [f64; LANES],
    /// Whether any value was NaN or infinite.
    pub non_finite: bool,
}

impl Moments {
    /// The L2 norm of the values seen, as [`hush_models::dp::clip::l2_norm`] rounds it
    /// (to `f32`), summing the lanes in order.
    pub fn norm(&self) -> f32 {
        self.lanes.iter().sum::<f64>().sqrt() as f32
    }
}

/// How values go onto the grid: `q = trunc(f64(v) · scale)`, or when `scaled`
/// `trunc(clamp(f64(v · factor) · scale, ±limit))`; added to the sum, or subtracted when
/// `subtract`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub scale: f64,
    pub scaled: bool,
    pub factor: f32,
    pub limit: f64,
    pub subtract: bool,
}

/// Reads `bytes` (whole little-endian `f32`s, the first at a multiple of [`LANES`] into
/// its layer), updating `moments`, and adds each value onto `sum` (one `i64` per value) when
/// given. Picks the widest instruction set the CPU has.
pub(crate) fn pass(bytes: &[u8], sum: Option<&mut [i64]>, grid: Grid, moments: &mut Moments) {
    assert!(
        bytes.len().is_multiple_of(4) && sum.as_ref().is_none_or(|s| s.len() == bytes.len() / 4),
        "a pass reads whole values, one per sum entry"
    );
    #[cfg(target_arch = "x86_64")]
    {
        let mode = (sum.is_some(), grid.scaled, grid.subtract);
        // Each mode is compiled on its own, so that the loop holds no branch.
        macro_rules! dispatch {
            ($f:ident) => {
                // SAFETY: the CPU has the features the function is compiled for, and the
                // lengths were checked above.
                unsafe {
                    match mode {
                        (false, _, _) => x86::$f::<false, false, false>(bytes, sum, grid, moments),
                        (true, false, false) => {
                            x86::$f::<true, false, false>(bytes, sum, grid, moments)
                        }
                        (true, true, false) => {
                            x86::$f::<true, true, false>(bytes, sum, grid, moments)
                        }
                        (true, false, true) => {
                            x86::$f::<true, false, true>(bytes, sum, grid, moments)
                        }
                        (true, true, true) => {
                            x86::$f::<true, true, true>(bytes, sum, grid, moments)
                        }
                    }
                }
            };
        }
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
        {
            return dispatch!(pass_avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return dispatch!(pass_avx2);
        }
    }
    portable(bytes, sum, grid, moments, 0);
}

/// The portable pass over values `from..` of `bytes` (the SIMD paths finish their tail
/// with it).
fn portable(bytes: &[u8], sum: Option<&mut [i64]>, grid: Grid, m: &mut Moments, from: usize) {
    let n = bytes.len() / 4;
    let mut sum = sum;
    for i in from..n {
        let b = &bytes[4 * i..4 * i + 4];
        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        m.non_finite |= !v.is_finite();
        let w = f64::from(v);
        m.lanes[i % LANES] += w * w;
        if let Some(s) = sum.as_deref_mut() {
            let q = if grid.scaled {
                let x = f64::from(v * grid.factor) * grid.scale;
                // `max` first: a NaN becomes the lower limit, as `maxpd` makes it.
                x.max(-grid.limit).min(grid.limit) as i64
            } else {
                (w * grid.scale) as i64
            };
            s[i] = if grid.subtract {
                s[i].wrapping_sub(q)
            } else {
                s[i].wrapping_add(q)
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{portable, Grid, Moments, LANES};

    // Loads and stores go through masked (or `lddqu`) instructions with every lane on: the
    // plain unaligned ones are `ptr::read_unaligned`/`write_unaligned`, which carry a
    // precondition check per call in a build with debug assertions (the dev and test
    // profiles), and that check made the whole pass half again as slow.
    const ALL16: __mmask16 = 0xffff;
    const ALL8: __mmask8 = 0xff;

    /// Where the sum's values start (null without a sum: the kernels then write nothing).
    fn sum_ptr(sum: &mut Option<&mut [i64]>) -> *mut i64 {
        sum.as_deref_mut()
            .map_or(std::ptr::null_mut(), <[i64]>::as_mut_ptr)
    }

    /// Sixteen values per step: squares into two 8-lane accumulators, each half converted
    /// with `vcvttpd2qq` (truncation, exact below 2^63).
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn pass_avx512<const WRITE: bool, const SCALED: bool, const SUB: bool>(
        bytes: &[u8],
        sum: Option<&mut [i64]>,
        grid: Grid,
        m: &mut Moments,
    ) {
        let (n, p, mut sum) = (bytes.len() / 4, bytes.as_ptr().cast::<f32>(), sum);
        let s = sum_ptr(&mut sum);
        let scale = _mm512_set1_pd(grid.scale);
        let factor = _mm512_set1_ps(grid.factor);
        let (lo, hi) = (_mm512_set1_pd(-grid.limit), _mm512_set1_pd(grid.limit));
        let inf = _mm512_set1_ps(f32::INFINITY);
        let abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fff_ffff));
        let mut a0 = _mm512_loadu_pd(m.lanes.as_ptr());
        let mut a1 = _mm512_loadu_pd(m.lanes.as_ptr().add(8));
        let mut bad: __mmask16 = 0;
        let mut i = 0;
        while i + LANES <= n {
            let v = _mm512_maskz_loadu_ps(ALL16, p.add(i));
            // |v| not below infinity, or unordered (NaN).
            bad |= _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(_mm512_and_ps(v, abs), inf);
            let v0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let v1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(v),
            )));
            a0 = _mm512_fmadd_pd(v0, v0, a0);
            a1 = _mm512_fmadd_pd(v1, v1, a1);
            if WRITE {
                let (w0, w1) = if SCALED {
                    let w = _mm512_mul_ps(v, factor);
                    (
                        _mm512_cvtps_pd(_mm512_castps512_ps256(w)),
                        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                            _mm512_castps_pd(w),
                        ))),
                    )
                } else {
                    (v0, v1)
                };
                for (k, w) in [(0, w0), (8, w1)] {
                    let x = _mm512_mul_pd(w, scale);
                    let x = if SCALED {
                        _mm512_min_pd(_mm512_max_pd(x, lo), hi)
                    } else {
                        x
                    };
                    let q = _mm512_cvttpd_epi64(x);
                    let at = s.add(i + k).cast::<__m512i>();
                    let old = _mm512_maskz_loadu_epi64(ALL8, at.cast());
                    let new = if SUB {
                        _mm512_sub_epi64(old, q)
                    } else {
                        _mm512_add_epi64(old, q)
                    };
                    _mm512_mask_storeu_epi64(at.cast(), ALL8, new);
                }
            }
            i += LANES;
        }
        _mm512_storeu_pd(m.lanes.as_mut_ptr(), a0);
        _mm512_storeu_pd(m.lanes.as_mut_ptr().add(8), a1);
        m.non_finite |= bad != 0;
        portable(bytes, sum, grid, m, i);
    }

    /// Sixteen values per step in four 4-lane accumulators; the conversion truncates with
    /// `vroundpd` and moves the integer into the low bits with a magic constant (exact for
    /// magnitudes below 2^51, and the grid's limit is about 2^40; beyond, in the first pass
    /// over an update that will be refused, it is still the same integer every time).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn pass_avx2<const WRITE: bool, const SCALED: bool, const SUB: bool>(
        bytes: &[u8],
        sum: Option<&mut [i64]>,
        grid: Grid,
        m: &mut Moments,
    ) {
        const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 · 2^52
        let (n, p, mut sum) = (bytes.len() / 4, bytes.as_ptr().cast::<f32>(), sum);
        let s = sum_ptr(&mut sum);
        let scale = _mm256_set1_pd(grid.scale);
        let factor = _mm256_set1_ps(grid.factor);
        let (lo, hi) = (_mm256_set1_pd(-grid.limit), _mm256_set1_pd(grid.limit));
        let magic = _mm256_set1_pd(MAGIC);
        let magic_bits = _mm256_castpd_si256(magic);
        let all = _mm256_set1_epi64x(-1);
        let inf = _mm256_set1_ps(f32::INFINITY);
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut acc = [_mm256_setzero_pd(); 4];
        for (k, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_pd(m.lanes.as_ptr().add(4 * k));
        }
        let mut bad = _mm256_setzero_ps();
        let mut i = 0;
        while i + LANES <= n {
            for h in 0..2 {
                let v = _mm256_castsi256_ps(_mm256_lddqu_si256(p.add(i + 8 * h).cast()));
                bad = _mm256_or_ps(
                    bad,
                    _mm256_cmp_ps::<_CMP_NLT_UQ>(_mm256_and_ps(v, abs), inf),
                );
                let v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
                let v1 = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
                acc[2 * h] = _mm256_fmadd_pd(v0, v0, acc[2 * h]);
                acc[2 * h + 1] = _mm256_fmadd_pd(v1, v1, acc[2 * h + 1]);
                if WRITE {
                    let (w0, w1) = if SCALED {
                        let w = _mm256_mul_ps(v, factor);
                        (
                            _mm256_cvtps_pd(_mm256_castps256_ps128(w)),
                            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(w)),
                        )
                    } else {
                        (v0, v1)
                    };
                    for (k, w) in [(0, w0), (4, w1)] {
                        let x = _mm256_mul_pd(w, scale);
                        let x = if SCALED {
                            _mm256_min_pd(_mm256_max_pd(x, lo), hi)
                        } else {
                            x
                        };
                        let t = _mm256_round_pd::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
                        let q = _mm256_sub_epi64(
                            _mm256_castpd_si256(_mm256_add_pd(t, magic)),
                            magic_bits,
                        );
                        let at = s.add(i + 8 * h + k).cast::<__m256i>();
                        let old = _mm256_lddqu_si256(at);
                        let new = if SUB {
                            _mm256_sub_epi64(old, q)
                        } else {
                            _mm256_add_epi64(old, q)
                        };
                        _mm256_maskstore_epi64(at.cast(), all, new);
                    }
                }
            }
            i += LANES;
        }
        for (k, a) in acc.iter().enumerate() {
            _mm256_storeu_pd(m.lanes.as_mut_ptr().add(4 * k), *a);
        }
        m.non_finite |= _mm256_movemask_ps(bad) != 0;
        portable(bytes, sum, grid, m, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn grid(factor: f32, subtract: bool) -> Grid {
        Grid {
            scale: (1u64 << 40) as f64 / 0.7,
            scaled: factor != 1.0,
            factor,
            limit: ((1i64 << 40) + (1i64 << 36)) as f64,
            subtract,
        }
    }

    /// Values that exercise every case: tiny, large, negative, over the limit, and a tail
    /// that is not a whole step of 16.
    fn values(n: usize) -> Vec<f32> {
        let mut x = 0x2545_f491_u32;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let u = x as f32 / u32::MAX as f32 - 0.5;
                match i % 7 {
                    0 => u * 1e-9,
                    1 => u * 3.0,
                    _ => u * 1e-3,
                }
            })
            .collect()
    }

    #[test]
    fn every_instruction_set_gives_the_portable_bits() {
        let v = values(16 * 37 + 5);
        let b = bytes(&v);
        for factor in [1.0, 0.37] {
            let mut want_sum = vec![7i64; v.len()];
            let mut want = Moments::default();
            portable(&b, Some(&mut want_sum), grid(factor, false), &mut want, 0);
            let mut got_sum = vec![7i64; v.len()];
            let mut got = Moments::default();
            pass(&b, Some(&mut got_sum), grid(factor, false), &mut got);
            assert_eq!(got_sum, want_sum, "factor {factor}");
            assert_eq!(got.norm().to_bits(), want.norm().to_bits());
            assert!(!got.non_finite);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                let mut avx2_sum = vec![7i64; v.len()];
                let mut avx2 = Moments::default();
                // SAFETY: the CPU has AVX2; the lengths match.
                unsafe {
                    let g = grid(factor, false);
                    if factor == 1.0 {
                        x86::pass_avx2::<true, false, false>(&b, Some(&mut avx2_sum), g, &mut avx2)
                    } else {
                        x86::pass_avx2::<true, true, false>(&b, Some(&mut avx2_sum), g, &mut avx2)
                    }
                };
                assert_eq!(avx2_sum, want_sum);
                assert_eq!(avx2.norm().to_bits(), want.norm().to_bits());
            }
        }
    }

    #[test]
    fn the_norm_is_the_l2_norm_and_a_subtraction_undoes_an_addition() {
        let v = values(1000);
        let b = bytes(&v);
        let mut m = Moments::default();
        let mut sum = vec![0i64; v.len()];
        // Split as the body walk splits it: every call starts at a multiple of 16.
        for (k, chunk) in b.chunks(64 * 5).enumerate() {
            let s = &mut sum[k * 80..k * 80 + chunk.len() / 4];
            pass(chunk, Some(s), grid(1.0, false), &mut m);
        }
        let exact = hush_models::dp::clip::l2_norm(&v);
        assert!(
            (m.norm() - exact).abs() <= exact * 1e-6,
            "{} {exact}",
            m.norm()
        );
        assert!(sum.iter().any(|&q| q != 0));
        pass(&b, Some(&mut sum), grid(1.0, true), &mut Moments::default());
        assert!(sum.iter().all(|&q| q == 0), "the subtraction is exact");
    }

    #[test]
    fn any_value_added_unclamped_is_taken_out_exactly() {
        // What a refused update may hold: values far past the limit, NaN, infinities.
        let mut v = values(16 * 3 + 7);
        for (i, bad) in [1e30, -1e30, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9]
            .into_iter()
            .enumerate()
        {
            v[i * 9] = bad;
        }
        let b = bytes(&v);
        /// A pass over `b` adding (or, when `true`, subtracting) into a sum.
        type Path<'a> = Box<dyn Fn(&mut [i64], bool) + 'a>;
        let mut paths: Vec<Path> = vec![
            Box::new(|s, sub| pass(&b, Some(s), grid(1.0, sub), &mut Moments::default())),
            Box::new(|s, sub| portable(&b, Some(s), grid(1.0, sub), &mut Moments::default(), 0)),
        ];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            paths.push(Box::new(|s, sub| {
                let mut m = Moments::default();
                // SAFETY: the CPU has AVX2 and FMA; the lengths match.
                unsafe {
                    if sub {
                        x86::pass_avx2::<true, false, true>(&b, Some(s), grid(1.0, true), &mut m)
                    } else {
                        x86::pass_avx2::<true, false, false>(&b, Some(s), grid(1.0, false), &mut m)
                    }
                }
            }));
        }
        for path in &paths {
            let mut sum: Vec<i64> = (0..v.len() as i64).collect();
            let before = sum.clone();
            path(&mut sum, false);
            assert_ne!(sum, before);
            path(&mut sum, true);
            assert_eq!(sum, before);
        }
    }

    #[test]
    fn non_finite_values_are_seen_wherever_they_are() {
        for at in [0, 15, 16, 40] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut v = values(45);
                v[at] = bad;
                let mut m = Moments::default();
                pass(&bytes(&v), None, grid(1.0, false), &mut m);
                assert!(m.non_finite, "{bad} at {at}");
            }
        }
    }
}
