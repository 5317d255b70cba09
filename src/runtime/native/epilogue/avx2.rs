//! The GEMM tile's epilogue on 256-bit vectors (AVX2 and FMA, for CPUs without AVX-512): 8
//! columns at a time, the last ones by masked loads and stores ([`Part8`]). Each step is
//! [`super::Avx512`]'s on half the lanes, so the bits are the same.

use super::super::exp::{horner8, reduced8};
use super::super::Part8;
use super::{Reads, Tile, Width};
use crate::codegen::{Activation, ERF_LARGE, ERF_SMALL, EXP_MAGIC};
use std::arch::x86_64::*;

/// The epilogue on AVX2 with FMA.
pub struct Avx2;

impl Width for Avx2 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply(tile: &Tile, reads: &Reads, act: Activation) {
        for i in 0..tile.rows {
            for j in (0..tile.cols).step_by(8) {
                let part = Part8::of(tile.cols - j);
                // SAFETY: the part's lanes are columns `j..j + lanes` of row `i`, inside the
                // tile and what it reads (the contract); the others are not touched.
                unsafe {
                    let at = tile.c.add(i * tile.c_rs + j);
                    let load = |p: *const f32| part.load(p);
                    let mut x = load(at);
                    if let Some(b) = reads.bias {
                        x = _mm256_add_ps(x, load(b.add(j)));
                    }
                    if let Some((p, rs)) = reads.pre {
                        x = _mm256_add_ps(x, load(p.add(i * rs + j)));
                    }
                    let mut y = activation(act, x);
                    if let Some((p, rs)) = reads.second {
                        y = _mm256_mul_ps(y, load(p.add(i * rs + j)));
                    }
                    if let Some((p, rs)) = reads.post {
                        y = _mm256_add_ps(y, load(p.add(i * rs + j)));
                    }
                    part.store(at, y);
                }
            }
        }
    }
}

/// `new` where `pick` is set, else `old`.
#[target_feature(enable = "avx2")]
fn pick(pick: __m256, old: __m256, new: __m256) -> __m256 {
    _mm256_blendv_ps(old, new, pick)
}

/// `x` with its sign bit flipped.
#[target_feature(enable = "avx2")]
fn negate(x: __m256) -> __m256 {
    _mm256_xor_ps(x, _mm256_set1_ps(-0.0))
}

/// `act(x)` on each lane, as `codegen/math.rs` computes it.
#[target_feature(enable = "avx2,fma")]
fn activation(act: Activation, x: __m256) -> __m256 {
    let one = _mm256_set1_ps(1.0);
    match act {
        Activation::Sigmoid => sigmoid(x),
        Activation::Silu => _mm256_mul_ps(x, sigmoid(x)),
        Activation::GeluTanh { kappa, beta, limit } => {
            let cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
            let sum = _mm256_add_ps(x, _mm256_mul_ps(cube, _mm256_set1_ps(kappa)));
            let u = _mm256_mul_ps(sum, _mm256_set1_ps(beta));
            let e = exp(_mm256_mul_ps(u, _mm256_set1_ps(-2.0)));
            let over = _mm256_cmp_ps::<_CMP_GT_OQ>(e, _mm256_set1_ps(limit));
            let e = pick(over, e, _mm256_set1_ps(f32::INFINITY));
            _mm256_div_ps(x, _mm256_add_ps(one, e))
        }
        Activation::GeluErf { scale } => {
            let erf = erf(_mm256_mul_ps(x, _mm256_set1_ps(scale)));
            let value = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_add_ps(one, erf)), _mm256_set1_ps(0.5));
            let at_inf = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, _mm256_set1_ps(f32::INFINITY));
            pick(at_inf, value, _mm256_set1_ps(f32::NAN))
        }
    }
}

/// `math.rs`'s `sigmoid4`: `1 / (1 + e^-x)`.
#[target_feature(enable = "avx2,fma")]
fn sigmoid(x: __m256) -> __m256 {
    let one = _mm256_set1_ps(1.0);
    _mm256_div_ps(one, _mm256_add_ps(exp(negate(x)), one))
}

/// `math.rs`'s `erf4`: odd, on `|x|` clamped at 4; `a + a P(a²)` below 1, `1 - e^(-a²)
/// Q(1 / a)` above.
#[target_feature(enable = "avx2,fma")]
fn erf(x: __m256) -> __m256 {
    let sign_bit = _mm256_set1_ps(-0.0);
    let a = _mm256_andnot_ps(sign_bit, x);
    let four = _mm256_set1_ps(4.0);
    let a = pick(_mm256_cmp_ps::<_CMP_GT_OQ>(a, four), a, four);
    let z = _mm256_mul_ps(a, a);
    let small = _mm256_fmadd_ps(horner8(z, &ERF_SMALL), a, a);
    let one = _mm256_set1_ps(1.0);
    let q = horner8(_mm256_div_ps(one, a), &ERF_LARGE);
    let big = _mm256_fmadd_ps(negate(exp(negate(z))), q, one);
    let r = pick(_mm256_cmp_ps::<_CMP_LT_OQ>(a, one), big, small);
    _mm256_or_ps(r, _mm256_and_ps(x, sign_bit))
}

/// `emit.rs`'s `exp4`: `x` clamped to 89 above (where the result is infinite) and to -104
/// below (where it is 0, set before the last product), Cephes' reduction and polynomial,
/// and `2^n` applied as two normal factors.
#[target_feature(enable = "avx2,fma")]
fn exp(x: __m256) -> __m256 {
    let hi = _mm256_set1_ps(89.0);
    let x = pick(_mm256_cmp_ps::<_CMP_GT_OQ>(x, hi), x, hi);
    let (y, under, t) = reduced8(x);
    // `t`'s low mantissa bits hold `n`: its bits less the magic number's.
    let n = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(EXP_MAGIC.to_bits() as i32),
    );
    let n1 = _mm256_srai_epi32::<1>(n);
    let n2 = _mm256_sub_epi32(n, n1);
    let y = _mm256_mul_ps(y, pow2(n1));
    let y = pick(under, y, _mm256_setzero_ps());
    _mm256_mul_ps(y, pow2(n2))
}

/// `2^n` for `n` in the normal exponents.
#[target_feature(enable = "avx2")]
fn pow2(n: __m256i) -> __m256 {
    let e = _mm256_add_epi32(n, _mm256_set1_epi32(127));
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
}
