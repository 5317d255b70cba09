//! The row passes of the tile's softmax on 512-bit vectors: a row's 16 lanes in one
//! vector, partial vectors by lane masks.

use super::super::lane_mask;
use super::{add, fold4, max, score, spans, Keys, Width, ADD, FILL, TILE};
use crate::codegen::{EXP_NORMAL_SCALED, EXP_SCALE_LOG2};
use std::arch::x86_64::*;

/// The passes on AVX-512F.
pub struct Avx512;

impl Width for Avx512 {
    #[target_feature(enable = "avx512f")]
    unsafe fn row_max<const OP: u8>(row: *const f32, cols: usize, keys: Keys) -> f32 {
        let (whole, quads) = spans(cols);
        let mut acc = _mm512_set1_ps(f32::NEG_INFINITY);
        for j in (0..whole).step_by(16) {
            // SAFETY: keys `j..j + 16 ≤ cols` are inside the tile and the key row.
            acc = _mm512_max_ps(acc, unsafe { scores::<OP>(row, j, u16::MAX, keys) });
        }
        if quads > whole {
            let m = lane_mask(quads - whole);
            // SAFETY: the lanes set are keys `whole..quads ≤ cols`.
            let v = unsafe { scores::<OP>(row, whole, m, keys) };
            acc = _mm512_mask_max_ps(acc, m, acc, v);
        }
        let mut rest = f32::NEG_INFINITY;
        for j in quads..cols {
            // SAFETY: key `j < cols` is inside the tile and the key row.
            rest = max(rest, unsafe { score::<OP>(row, j, keys) });
        }
        let (lo, hi) = halves(acc);
        max(fold4(_mm256_max_ps(lo, hi), max), rest)
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn exp_sum<const OP: u8>(row: *mut f32, cols: usize, base: f32, keys: Keys) -> f32 {
        let (whole, quads) = spans(cols);
        let b = _mm512_set1_ps(base);
        let mut acc = _mm512_setzero_ps();
        for j in (0..whole).step_by(16) {
            // SAFETY: keys `j..j + 16 ≤ cols` are inside the tile and the key row.
            unsafe {
                let p = exp_nonpositive(_mm512_sub_ps(scores::<OP>(row, j, u16::MAX, keys), b));
                _mm512_storeu_ps(row.add(j), p);
                acc = _mm512_add_ps(acc, p);
            }
        }
        if quads > whole {
            let m = lane_mask(quads - whole);
            // SAFETY: the lanes set are keys `whole..quads ≤ cols`; the others touch nothing.
            unsafe {
                let p = exp_nonpositive(_mm512_sub_ps(scores::<OP>(row, whole, m, keys), b));
                _mm512_mask_storeu_ps(row.add(whole), m, p);
                acc = _mm512_mask_add_ps(acc, m, acc, p);
            }
        }
        let mut rest = 0.0f32;
        for j in quads..cols {
            // SAFETY: key `j < cols` is inside the tile and the key row.
            unsafe {
                let p = Self::exp1(score::<OP>(row, j, keys) - base);
                *row.add(j) = p;
                rest += p;
            }
        }
        let (lo, hi) = halves(acc);
        fold4(_mm256_add_ps(lo, hi), add) + rest
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn exp1(x: f32) -> f32 {
        _mm_cvtss_f32(_mm512_castps512_ps128(exp_nonpositive(_mm512_set1_ps(x))))
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn scale(dst: *mut f32, len: usize, factor: f32) {
        let f = _mm512_set1_ps(factor);
        let mut c = 0;
        while c < len {
            let lanes = (len - c).min(16);
            let mask = lane_mask(lanes);
            // SAFETY: the lanes set in `mask` are elements `c..c + lanes ≤ len`; the others
            // are not touched.
            unsafe {
                let at = dst.add(c);
                let y = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, at), f);
                _mm512_mask_storeu_ps(at, mask, y);
            }
            c += lanes;
        }
    }
}

/// The 16 lanes as the JIT folds its four vectors: the upper 256 bits and the lower,
/// `(lower, upper)`, for the caller to combine; then it combines the upper 128 bits of that
/// with the lower in [`fold4`].
#[target_feature(enable = "avx512f")]
fn halves(v: __m512) -> (__m256, __m256) {
    let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v));
    (_mm512_castps512_ps256(v), _mm256_castpd_ps(hi))
}

/// The scores of keys `j..j + 16` whose lanes are set in `m` (the others 0), changed as
/// `OP` says by their row's added values and their keys' values.
///
/// # Safety
/// The lanes set in `m` are keys inside the tile, inside the key row where `OP` has
/// [`FILL`] or [`ADD`], and inside the row's added values where it has [`TILE`].
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scores<const OP: u8>(row: *const f32, j: usize, m: u16, keys: Keys) -> __m512 {
    // SAFETY: the lanes set are inside the tile, the key row and the added values; the
    // others touch nothing.
    unsafe {
        let load = |p: *const f32| _mm512_maskz_loadu_ps(m, p.add(j));
        let s = load(row);
        let s = match (OP & TILE != 0, OP & ADD != 0) {
            (true, true) => _mm512_add_ps(s, _mm512_add_ps(load(keys.added), load(keys.values))),
            (true, false) => _mm512_add_ps(s, load(keys.added)),
            (false, true) => _mm512_add_ps(s, load(keys.values)),
            (false, false) => s,
        };
        if OP & FILL == 0 {
            return s;
        }
        let hit = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(load(keys.values), _mm512_setzero_ps());
        _mm512_mask_blend_ps(hit, s, _mm512_set1_ps(keys.fill))
    }
}

/// `e^x` for `x ≤ 0`, each lane as the JIT's `exp_nonpositive` computes it
/// (`codegen/emit.rs`): Cephes' reduction and polynomial, the lanes below -104 set to 0
/// before the power of two, the power `2^(n + 25)` (normal), the lanes whose result would
/// be subnormal set to 0 (the JIT's reason: no microcode assist here or in `p v`), and then
/// `2^-25`, which rounds once. NaN passes through.
#[target_feature(enable = "avx512f")]
fn exp_nonpositive(x: __m512) -> __m512 {
    let (y, under, t) = super::super::exp::reduced(x);
    let y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
    let bias = _mm512_set1_epi32(((127 + EXP_SCALE_LOG2) << 23) as i32);
    let pow = _mm512_add_epi32(_mm512_slli_epi32::<23>(_mm512_castps_si512(t)), bias);
    let scaled = _mm512_mul_ps(y, _mm512_castsi512_ps(pow));
    // Not below the smallest normal result (NaN included): kept; the others become 0.
    let kept = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(scaled, _mm512_set1_ps(EXP_NORMAL_SCALED));
    _mm512_maskz_mul_ps(
        kept,
        scaled,
        _mm512_set1_ps(1.0 / (1u32 << EXP_SCALE_LOG2) as f32),
    )
}
