//! The GEMM tile's epilogue on 512-bit vectors: 16 columns at a time, the last ones by a
//! lane mask.

use super::super::exp::{horner, reduced};
use super::super::lane_mask;
use super::{Reads, Tile, Width};
use crate::codegen::{Activation, ERF_LARGE, ERF_SMALL, EXP_MAGIC};
use std::arch::x86_64::*;

/// The epilogue on AVX-512F.
pub struct Avx512;

impl Width for Avx512 {
    #[target_feature(enable = "avx512f")]
    unsafe fn apply(tile: &Tile, reads: &Reads, act: Activation) {
        for i in 0..tile.rows {
            let mut j = 0;
            while j < tile.cols {
                let lanes = (tile.cols - j).min(16);
                let mask = lane_mask(lanes);
                // SAFETY: the lanes set in `mask` are columns `j..j + lanes` of row `i`, inside
                // the tile and what it reads (the contract); the others are not touched.
                unsafe {
                    let at = tile.c.add(i * tile.c_rs + j);
                    let mut x = _mm512_maskz_loadu_ps(mask, at);
                    if let Some(b) = reads.bias {
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, b.add(j)));
                    }
                    if let Some((p, rs)) = reads.pre {
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, p.add(i * rs + j)));
                    }
                    let mut y = activation(act, x);
                    if let Some((p, rs)) = reads.second {
                        y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(mask, p.add(i * rs + j)));
                    }
                    if let Some((p, rs)) = reads.post {
                        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.add(i * rs + j)));
                    }
                    _mm512_mask_storeu_ps(at, mask, y);
                }
                j += lanes;
            }
        }
    }
}

/// `act(x)` on each lane, as `codegen/math.rs` computes it.
#[target_feature(enable = "avx512f")]
fn activation(act: Activation, x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    match act {
        Activation::Sigmoid => sigmoid(x),
        Activation::Silu => _mm512_mul_ps(x, sigmoid(x)),
        Activation::GeluTanh { kappa, beta, limit } => {
            let cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            let sum = _mm512_add_ps(x, _mm512_mul_ps(cube, _mm512_set1_ps(kappa)));
            let u = _mm512_mul_ps(sum, _mm512_set1_ps(beta));
            let e = exp(_mm512_mul_ps(u, _mm512_set1_ps(-2.0)));
            let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(e, _mm512_set1_ps(limit));
            let e = _mm512_mask_blend_ps(over, e, _mm512_set1_ps(f32::INFINITY));
            _mm512_div_ps(x, _mm512_add_ps(one, e))
        }
        Activation::GeluErf { scale } => {
            let erf = erf(_mm512_mul_ps(x, _mm512_set1_ps(scale)));
            let value = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_add_ps(one, erf)), _mm512_set1_ps(0.5));
            let at_inf = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, _mm512_set1_ps(f32::INFINITY));
            _mm512_mask_blend_ps(at_inf, value, _mm512_set1_ps(f32::NAN))
        }
    }
}

/// `math.rs`'s `sigmoid4`: `1 / (1 + e^-x)`.
#[target_feature(enable = "avx512f")]
fn sigmoid(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(i32::MIN),
    ));
    _mm512_div_ps(one, _mm512_add_ps(exp(neg), one))
}

/// `math.rs`'s `erf4`: odd, on `|x|` clamped at 4; `a + a P(a²)` below 1, `1 - e^(-a²)
/// Q(1 / a)` above.
#[target_feature(enable = "avx512f")]
fn erf(x: __m512) -> __m512 {
    let sign_bit = _mm512_set1_epi32(i32::MIN);
    let bits = _mm512_castps_si512(x);
    let a = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, bits));
    let four = _mm512_set1_ps(4.0);
    let a = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, four), a, four);
    let z = _mm512_mul_ps(a, a);
    let small = _mm512_fmadd_ps(horner(z, &ERF_SMALL), a, a);
    let one = _mm512_set1_ps(1.0);
    let q = horner(_mm512_div_ps(one, a), &ERF_LARGE);
    let neg_z = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(z), sign_bit));
    let ex = exp(neg_z);
    let neg_ex = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(ex), sign_bit));
    let big = _mm512_fmadd_ps(neg_ex, q, one);
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, one);
    let r = _mm512_mask_blend_ps(below, big, small);
    let sign = _mm512_and_si512(bits, sign_bit);
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign))
}

/// `emit.rs`'s `exp4`: `x` clamped to 89 above (where the result is infinite) and to -104
/// below (where it is 0, set before the last product), Cephes' reduction and polynomial,
/// and `2^n` applied as two normal factors.
#[target_feature(enable = "avx512f")]
fn exp(x: __m512) -> __m512 {
    let hi = _mm512_set1_ps(89.0);
    let x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi), x, hi);
    let (y, under, t) = reduced(x);
    // `t`'s low mantissa bits hold `n`: its bits less the magic number's.
    let n = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(EXP_MAGIC.to_bits() as i32),
    );
    let n1 = _mm512_srai_epi32::<1>(n);
    let n2 = _mm512_sub_epi32(n, n1);
    let y = _mm512_mul_ps(y, pow2(n1));
    let y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
    _mm512_mul_ps(y, pow2(n2))
}

/// `2^n` for `n` in the normal exponents.
#[target_feature(enable = "avx512f")]
fn pow2(n: __m512i) -> __m512 {
    let e = _mm512_add_epi32(n, _mm512_set1_epi32(127));
    _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
}
