//! The product of a few rows by a packed weight on 256-bit vectors (AVX2 and FMA, for CPUs
//! without AVX-512): [`super::sgemm`]'s register blocks of up to [`super::MR`] rows, a panel at a
//! time, each panel row as two vectors of 8 columns, and for more rows [`many`]. Each column
//! sums what the AVX-512 block's lane does, with the same partial sums over `k` added in the
//! same order, so the bits are the same on either CPU.
//!
//! A decode step's products are one row: its time is streaming the weight, as on AVX-512.
//! Without this routine they went to the `gemm` crate a panel at a time, and so did a short
//! sentence's 9 to 32 rows until [`many`].

use super::super::Part8;
use super::{AHEAD, MR};
use crate::kernel::PANEL;
use std::arch::x86_64::*;

/// `c[i, j] = alpha · Σ_p a[i, p] b[p, j]` for `i < m`, `j < n`, with `b` packed and a unit
/// column stride for `c`. Up to [`MR`] rows, register blocks of one panel; more go to
/// [`many`].
///
/// # Safety
/// The CPU has AVX2 and FMA; the `n·k` floats from `b` are inside their allocation; for
/// `i < m`, `j < n`, `p < k` the elements `c + i·c_rs + j` and `a + i·a_rs + p·a_cs` are
/// inside theirs.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    if m > MR {
        // SAFETY: this function's contract is `many`'s.
        return unsafe { many((m, n, k), (c, c_rs), (a, a_rs, a_cs), b, alpha) };
    }
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
    let parts = (Part8::of(w), Part8::of(w.saturating_sub(8)));
    let mut s = [[[_mm256_setzero_ps(); 2]; R]; U];
    let whole = k / U * U;
    for p in (0..whole).step_by(U) {
        for (u, s) in s.iter_mut().enumerate() {
            // SAFETY: `p + u < whole <= k`, and the panel and `a` are as `step` asks (this
            // function's contract).
            unsafe { step(s, p + u, (panel, w), parts, (a, a_rs, a_cs)) };
        }
    }
    for p in whole..k {
        // SAFETY: `p < k`, and the panel and `a` are as `step` asks (this function's
        // contract).
        unsafe { step(&mut s[0], p, (panel, w), parts, (a, a_rs, a_cs)) };
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
    parts: (Part8, Part8),
    (a, a_rs, a_cs): (*const f32, usize, usize),
) {
    // SAFETY: the parts' lanes are the row's `w` floats from `p·w` (the first 8 and the
    // rest); the second half's pointer, formed with `wrapping_add`, may be past the row
    // where that part has no lanes, and is then not read. The elements of `a` are inside
    // its tile (contract).
    unsafe {
        let row = panel.add(p * w);
        let (x0, x1) = (parts.0.load(row), parts.1.load(row.wrapping_add(8)));
        for (i, s) in s.iter_mut().enumerate() {
            let y = _mm256_set1_ps(*a.add(i * a_rs + p * a_cs));
            s[0] = _mm256_fmadd_ps(y, x0, s[0]);
            s[1] = _mm256_fmadd_ps(y, x1, s[1]);
        }
    }
}

/// Rows of `c` per register block in [`many`]: two vectors of sums a row, twelve in all,
/// leave the panel's row and a broadcast their registers of the sixteen.
const MR_MANY: usize = 6;

/// [`sgemm`] for more rows than [`MR`], with the sums of the AVX-512 `many`: each element
/// one chain of fused multiply-adds over `k` in order, then `alpha`. A panel at a time, its
/// rows cut into blocks of at most [`MR_MANY`] as even as they go; the first block streams
/// the panel from memory and the others read it again from the cache (16 columns by a `k`
/// of 384, a short sentence's width, are 24 KiB), so that each float of `b` comes from
/// memory once for all the rows, as on AVX-512.
///
/// # Safety
/// [`sgemm`]'s.
#[target_feature(enable = "avx2,fma")]
unsafe fn many(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    let rows = m.div_ceil(m.div_ceil(MR_MANY));
    let mut j = 0;
    while j < n {
        let w = (n - j).min(PANEL);
        let mut i = 0;
        while i < m {
            let r = (m - i).min(rows);
            // SAFETY: rows `i..i + r` and columns `j..j + w` are the product's, and the
            // panel of columns `j..j + w` is the `k·w` floats from `b + j·k` (contract).
            unsafe {
                let args = (
                    k,
                    c.add(i * c_rs + j),
                    c_rs,
                    a.add(i * a_rs),
                    a_rs,
                    a_cs,
                    (b.add(j * k), w),
                    alpha,
                );
                match r {
                    6 => chain::<6>(args),
                    5 => chain::<5>(args),
                    4 => chain::<4>(args),
                    3 => chain::<3>(args),
                    2 => chain::<2>(args),
                    _ => chain::<1>(args),
                }
            }
            i += r;
        }
        j += w;
    }
}

/// `R` rows by one panel, each sum one chain over `k` in order, scaled by `alpha` at the end.
///
/// # Safety
/// As for [`block`].
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn chain<const R: usize>((k, c, c_rs, a, a_rs, a_cs, (panel, w), alpha): Block) {
    let parts = (Part8::of(w), Part8::of(w.saturating_sub(8)));
    let mut s = [[_mm256_setzero_ps(); 2]; R];
    for p in 0..k {
        // SAFETY: `p < k`, and the panel and `a` are as `step` asks (this function's
        // contract); a prefetch reads nothing and may point anywhere.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(panel.wrapping_add((p + AHEAD) * w).cast());
            step(&mut s, p, (panel, w), parts, (a, a_rs, a_cs));
        }
    }
    let alpha = _mm256_set1_ps(alpha);
    for (i, [r0, r1]) in s.into_iter().enumerate() {
        // SAFETY: as in `block`.
        unsafe {
            let row = c.add(i * c_rs);
            parts.0.store(row, _mm256_mul_ps(r0, alpha));
            parts.1.store(row.wrapping_add(8), _mm256_mul_ps(r1, alpha));
        }
    }
}
