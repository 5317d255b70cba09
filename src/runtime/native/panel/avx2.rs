//! The product of a few rows by a packed weight on 256-bit vectors (AVX2 and FMA, for CPUs
//! without AVX-512): [`super::sgemm`]'s register blocks of up to [`super::MR`] rows, a panel at a
//! time, each panel row as two vectors of 8 columns. Each column sums what the AVX-512
//! block's lane does, with the same partial sums over `k` added in the same order, so the
//! bits are the same on either CPU.
//!
//! A decode step's products are one row: its time is streaming the weight, as on AVX-512.
//! Without this routine they went to the `gemm` crate a panel at a time.

use super::super::{lane_mask8, Part8};
use crate::kernel::PANEL;
use std::arch::x86_64::*;

/// `c[i, j] = alpha · Σ_p a[i, p] b[p, j]` for `i < m <= super::MR`, `j < n`, with `b` packed and
/// a unit column stride for `c`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `m <= MR`; the `n·k` floats from `b` are inside their
/// allocation; for `i < m`, `j < n`, `p < k` the elements `c + i·c_rs + j` and
/// `a + i·a_rs + p·a_cs` are inside theirs.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    let mut j = 0;
    while j < n {
        let w = (n - j).min(PANEL);
        // SAFETY: the panel of columns `j..j + w` is the `k·w` floats from `b + j·k`,
        // inside the `n·k` from `b`; its columns of `c` and the rows of `a` are the
        // product's (this function's contract).
        unsafe {
            let args = (k, c.add(j), c_rs, a, a_rs, a_cs, (b.add(j * k), w), alpha);
            // The partial sums of `super::sgemm`'s blocks, row count for row count.
            match m {
                8 => block::<8, 1>(args),
                7 => block::<7, 1>(args),
                6 => block::<6, 1>(args),
                5 => block::<5, 1>(args),
                4 => block::<4, 2>(args),
                3 => block::<3, 2>(args),
                2 => block::<2, 4>(args),
                1 => block::<1, 4>(args),
                _ => return,
            }
        }
        j += w;
    }
}

/// What [`block`] takes: `k`, `c` and its row stride, `a` and its strides, the panel (first
/// row, width), `alpha`.
type Block = (
    usize,
    *mut f32,
    usize,
    *const f32,
    usize,
    usize,
    (*const f32, usize),
    f32,
);

/// `R` rows by one panel of width `w <= PANEL`, with `U` interleaved partial sums over `k`
/// (steps `p ≡ u mod U`), added in order at the end.
///
/// # Safety
/// The CPU has AVX2 and FMA; the panel's `k·w` floats are inside their allocation; for
/// `r < R`, `p < k`, `j < w`, the elements `c + r·c_rs + j` and `a + r·a_rs + p·a_cs` are
/// inside theirs.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn block<const R: usize, const U: usize>((k, c, c_rs, a, a_rs, a_cs, (panel, w), alpha): Block) {
    let masks = (lane_mask8(w), lane_mask8(w.saturating_sub(8)));
    let parts = (Part8::of(w), Part8::of(w.saturating_sub(8)));
    let mut s = [[[_mm256_setzero_ps(); 2]; R]; U];
    let whole = k / U * U;
    for p in (0..whole).step_by(U) {
        for (u, s) in s.iter_mut().enumerate() {
            // SAFETY: `p + u < whole <= k`, and the panel and `a` are as `step` asks (this
            // function's contract).
            unsafe { step(s, p + u, (panel, w), masks, (a, a_rs, a_cs)) };
        }
    }
    for p in whole..k {
        // SAFETY: `p < k`, and the panel and `a` are as `step` asks (this function's
        // contract).
        unsafe { step(&mut s[0], p, (panel, w), masks, (a, a_rs, a_cs)) };
    }
    let alpha = _mm256_set1_ps(alpha);
    for i in 0..R {
        let (mut r0, mut r1) = (s[0][i][0], s[0][i][1]);
        for s in &s[1..] {
            r0 = _mm256_add_ps(r0, s[i][0]);
            r1 = _mm256_add_ps(r1, s[i][1]);
        }
        // SAFETY: row `i` of the block of `c` is inside the tile for the parts' lanes; the
        // second half is formed with `wrapping_add`: with no lanes (`w <= 8`) it may point
        // past the allocation and is never dereferenced.
        unsafe {
            let row = c.add(i * c_rs);
            parts.0.store(row, _mm256_mul_ps(r0, alpha));
            parts.1.store(row.wrapping_add(8), _mm256_mul_ps(r1, alpha));
        }
    }
}

/// Step `p` of `k`: row `p` of the panel times column `p` of `a`'s `R` rows, added to `s`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `p < k`; row `p` of the panel (its `w` floats from `p·w`) is
/// inside its allocation; column `p` of `a`'s `R` rows is inside `a`'s.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn step<const R: usize>(
    s: &mut [[__m256; 2]; R],
    p: usize,
    (panel, w): (*const f32, usize),
    (m0, m1): (__m256i, __m256i),
    (a, a_rs, a_cs): (*const f32, usize, usize),
) {
    // SAFETY: a whole panel's row is 16 floats from `p·w`; a narrower one is read by masked
    // loads, which touch the lanes set only (a lane whose bit is clear is neither read nor
    // faulted on), and its second half's pointer, formed with `wrapping_add`, has a mask of
    // 0 where it is past the row. The elements of `a` are inside its tile (contract).
    unsafe {
        let row = panel.add(p * w);
        let (x0, x1) = match w == PANEL {
            true => (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8))),
            false => (
                _mm256_maskload_ps(row, m0),
                _mm256_maskload_ps(row.wrapping_add(8), m1),
            ),
        };
        for (i, s) in s.iter_mut().enumerate() {
            let y = _mm256_set1_ps(*a.add(i * a_rs + p * a_cs));
            s[0] = _mm256_fmadd_ps(y, x0, s[0]);
            s[1] = _mm256_fmadd_ps(y, x1, s[1]);
        }
    }
}
