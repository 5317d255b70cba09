//! The row passes of the tile's softmax on 256-bit vectors (AVX2 and FMA, for CPUs without
//! AVX-512): a row's 16 lanes as two vectors, keys `j..j + 8` and `j + 8..j + 16`, partial
//! vectors by masked loads and stores. Each lane computes what [`super::Avx512`]'s does, so
//! the bits are the same on either CPU and the JIT's.

use super::super::{lane_mask8, Part8};
use super::{add, fold4, max, score, spans, Keys, Width, ADD, FILL, TILE};
use crate::codegen::{EXP_NORMAL_SCALED, EXP_SCALE_LOG2};
use std::arch::x86_64::*;

/// The passes on AVX2 with FMA.
pub struct Avx2;

impl Width for Avx2 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_max<const OP: u8>(row: *const f32, cols: usize, keys: Keys) -> f32 {
        let (whole, quads) = spans(cols);
        let all = first16(16);
        let lowest = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut acc = (lowest, lowest);
        let max8 = |a, b| _mm256_max_ps(a, b);
        for j in (0..whole).step_by(16) {
            // SAFETY: keys `j..j + 16 ≤ cols` are inside the tile and the key row.
            acc = both(acc, unsafe { scores::<OP>(row, j, all, keys) }, max8);
        }
        if quads > whole {
            let m = first16(quads - whole);
            // SAFETY: the lanes set are keys `whole..quads ≤ cols`.
            let v = unsafe { scores::<OP>(row, whole, m, keys) };
            acc = merge(acc, both(acc, v, max8), m);
        }
        let mut rest = f32::NEG_INFINITY;
        for j in quads..cols {
            // SAFETY: key `j < cols` is inside the tile and the key row.
            rest = max(rest, unsafe { score::<OP>(row, j, keys) });
        }
        max(fold4(_mm256_max_ps(acc.0, acc.1), max), rest)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp_sum<const OP: u8>(row: *mut f32, cols: usize, base: f32, keys: Keys) -> f32 {
        let (whole, quads) = spans(cols);
        let b = _mm256_set1_ps(base);
        let all = first16(16);
        let mut acc = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let add8 = |a, b| _mm256_add_ps(a, b);
        let exp = |s: Lanes| {
            (
                exp_nonpositive(_mm256_sub_ps(s.0, b)),
                exp_nonpositive(_mm256_sub_ps(s.1, b)),
            )
        };
        for j in (0..whole).step_by(16) {
            // SAFETY: keys `j..j + 16 ≤ cols` are inside the tile and the key row.
            unsafe {
                let p = exp(scores::<OP>(row, j, all, keys));
                _mm256_storeu_ps(row.add(j), p.0);
                _mm256_storeu_ps(row.add(j + 8), p.1);
                acc = both(acc, p, add8);
            }
        }
        if quads > whole {
            let m = first16(quads - whole);
            // SAFETY: the lanes set are keys `whole..quads ≤ cols`; the others touch nothing.
            unsafe {
                let p = exp(scores::<OP>(row, whole, m, keys));
                _mm256_maskstore_ps(row.add(whole), m.0, p.0);
                _mm256_maskstore_ps(row.add(whole + 8), m.1, p.1);
                acc = merge(acc, both(acc, p, add8), m);
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
        fold4(_mm256_add_ps(acc.0, acc.1), add) + rest
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp1(x: f32) -> f32 {
        _mm256_cvtss_f32(exp_nonpositive(_mm256_set1_ps(x)))
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn scale(dst: *mut f32, len: usize, factor: f32) {
        let f = _mm256_set1_ps(factor);
        for c in (0..len).step_by(8) {
            let part = Part8::of(len - c);
            // SAFETY: the part's lanes are elements `c..min(c + 8, len)`; the others are not
            // touched.
            unsafe {
                let at = dst.add(c);
                part.store(at, _mm256_mul_ps(part.load(at), f));
            }
        }
    }
}

/// Sixteen lanes: keys `j..j + 8`, then `j + 8..j + 16`.
type Lanes = (__m256, __m256);

/// The masks of the first `n` of 16 lanes, in the two halves.
#[target_feature(enable = "avx2")]
fn first16(n: usize) -> (__m256i, __m256i) {
    (lane_mask8(n), lane_mask8(n.saturating_sub(8)))
}

/// `f` on each half of two sets of lanes.
#[target_feature(enable = "avx2")]
fn both(a: Lanes, b: Lanes, f: impl Fn(__m256, __m256) -> __m256) -> Lanes {
    (f(a.0, b.0), f(a.1, b.1))
}

/// `new` in the lanes set in `m`, `old` in the others (`_mm512_mask_*`'s merge).
#[target_feature(enable = "avx2")]
fn merge(old: Lanes, new: Lanes, m: (__m256i, __m256i)) -> Lanes {
    (
        _mm256_blendv_ps(old.0, new.0, _mm256_castsi256_ps(m.0)),
        _mm256_blendv_ps(old.1, new.1, _mm256_castsi256_ps(m.1)),
    )
}

/// The floats of `at..at + 16` whose lanes are set in `m` (the others 0).
///
/// # Safety
/// The lanes set are inside the allocation.
#[target_feature(enable = "avx2")]
unsafe fn load(at: *const f32, m: (__m256i, __m256i)) -> Lanes {
    // SAFETY: masked loads read only the lanes set (the contract).
    unsafe { (_mm256_maskload_ps(at, m.0), _mm256_maskload_ps(at.add(8), m.1)) }
}

/// The scores of keys `j..j + 16` whose lanes are set in `m` (the others 0), changed as
/// `OP` says by their row's added values and their keys' values.
///
/// # Safety
/// The lanes set in `m` are keys inside the tile, inside the key row where `OP` has
/// [`FILL`] or [`ADD`], and inside the row's added values where it has [`TILE`].
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn scores<const OP: u8>(row: *const f32, j: usize, m: (__m256i, __m256i), keys: Keys) -> Lanes {
    let add8 = |a, b| _mm256_add_ps(a, b);
    // SAFETY: the lanes set are inside the tile, the key row and the added values.
    unsafe {
        let s = load(row.add(j), m);
        let s = match (OP & TILE != 0, OP & ADD != 0) {
            (true, true) => {
                let t = both(load(keys.added.add(j), m), load(keys.values.add(j), m), add8);
                both(s, t, add8)
            }
            (true, false) => both(s, load(keys.added.add(j), m), add8),
            (false, true) => both(s, load(keys.values.add(j), m), add8),
            (false, false) => s,
        };
        if OP & FILL == 0 {
            return s;
        }
        let v = load(keys.values.add(j), m);
        let fill = _mm256_set1_ps(keys.fill);
        both(s, v, |s, v| {
            let hit = _mm256_cmp_ps::<_CMP_NEQ_UQ>(v, _mm256_setzero_ps());
            _mm256_blendv_ps(s, fill, hit)
        })
    }
}

/// `e^x` for `x ≤ 0`, each lane as [`super::Avx512`]'s `exp_nonpositive` (and the JIT's)
/// computes it: the lanes below -104 set to 0 before the power of two, the power
/// `2^(n + 25)`, the lanes whose result would be subnormal set to 0, then `2^-25`. NaN
/// passes through.
#[target_feature(enable = "avx2,fma")]
fn exp_nonpositive(x: __m256) -> __m256 {
    let (y, under, t) = super::super::exp::reduced8(x);
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    let bias = _mm256_set1_epi32(((127 + EXP_SCALE_LOG2) << 23) as i32);
    let pow = _mm256_add_epi32(_mm256_slli_epi32::<23>(_mm256_castps_si256(t)), bias);
    let scaled = _mm256_mul_ps(y, _mm256_castsi256_ps(pow));
    // Not below the smallest normal result (NaN included): kept; the others become 0.
    let kept = _mm256_cmp_ps::<_CMP_NLT_UQ>(scaled, _mm256_set1_ps(EXP_NORMAL_SCALED));
    let down = _mm256_mul_ps(scaled, _mm256_set1_ps(1.0 / (1u32 << EXP_SCALE_LOG2) as f32));
    _mm256_and_ps(down, kept)
}
