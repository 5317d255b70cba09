//! The part of `e^x` that the softmax and the epilogue shims share, on 512-bit vectors and
//! (for CPUs without AVX-512) on 256-bit ones: the JIT's reduction and
//! polynomial (`codegen/emit.rs`), operation for operation, so that both give the 128-bit
//! code's bits. Each applies its own power of two, as its JIT counterpart does.

use crate::codegen::{EXP_LN2, EXP_LO, EXP_MAGIC, EXP_POLY};
use std::arch::x86_64::*;

/// `e^x` before its power of two, for `x` not above 89: `x` clamped to -104 below, `n` the
/// nearest integer to `x log2 e` and `r = x - n ln 2` (in two parts), and `1 + r + r² P(r)`.
/// Returns that value, the lanes that were below -104 (where `e^x` is 0), and `t`, whose
/// low mantissa bits hold `n` (its bits less `EXP_MAGIC`'s).
#[target_feature(enable = "avx512f")]
pub fn reduced(x: __m512) -> (__m512, __mmask16, __m512) {
    let lo = _mm512_set1_ps(EXP_LO);
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
    let x = _mm512_mask_blend_ps(under, x, lo);
    let magic = _mm512_set1_ps(EXP_MAGIC);
    let t = _mm512_fmadd_ps(_mm512_set1_ps(std::f32::consts::LOG2_E), x, magic);
    let n = _mm512_sub_ps(t, magic);
    let r = _mm512_fmadd_ps(_mm512_set1_ps(EXP_LN2[0]), n, x);
    let r = _mm512_fmadd_ps(_mm512_set1_ps(EXP_LN2[1]), n, r);
    let p = horner(r, &EXP_POLY);
    let y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
    (y, under, t)
}

/// `p[0] z^k + .. + p[k]` by Horner's rule, one fused multiply-add a step.
#[target_feature(enable = "avx512f")]
pub fn horner(z: __m512, p: &[f32]) -> __m512 {
    let mut acc = _mm512_set1_ps(p[0]);
    for &c in &p[1..] {
        acc = _mm512_fmadd_ps(acc, z, _mm512_set1_ps(c));
    }
    acc
}

/// [`reduced`] on 256-bit vectors (AVX2 and FMA), lane for lane the same: the lanes below
/// -104 are the ones whose every bit is set in the second vector.
#[target_feature(enable = "avx2,fma")]
pub fn reduced8(x: __m256) -> (__m256, __m256, __m256) {
    let lo = _mm256_set1_ps(EXP_LO);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo);
    let x = _mm256_blendv_ps(x, lo, under);
    let magic = _mm256_set1_ps(EXP_MAGIC);
    let t = _mm256_fmadd_ps(_mm256_set1_ps(std::f32::consts::LOG2_E), x, magic);
    let n = _mm256_sub_ps(t, magic);
    let r = _mm256_fmadd_ps(_mm256_set1_ps(EXP_LN2[0]), n, x);
    let r = _mm256_fmadd_ps(_mm256_set1_ps(EXP_LN2[1]), n, r);
    let p = horner8(r, &EXP_POLY);
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
    (y, under, t)
}

/// [`horner`] on 256-bit vectors.
#[target_feature(enable = "avx2,fma")]
pub fn horner8(z: __m256, p: &[f32]) -> __m256 {
    let mut acc = _mm256_set1_ps(p[0]);
    for &c in &p[1..] {
        acc = _mm256_fmadd_ps(acc, z, _mm256_set1_ps(c));
    }
    acc
}
