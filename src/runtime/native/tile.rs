//! An AVX-512 tile product for tiles the `gemm` crate would have to pack: the attention
//! kernel's `scale · q kᵀ` (with `kᵀ` laid out key-contiguous) and `p · v`. Both have a
//! right operand whose rows are contiguous, so no packing is needed: each step broadcasts
//! one element of `a` and multiplies it with 32 lanes of a row of `b`, into 8 × 2
//! accumulators. Partial tiles use masked loads and stores, so nothing outside the tile is
//! touched.

use std::arch::x86_64::*;

/// Rows of `c` per register block.
const MR: usize = 8;

/// Whether [`sgemm`] can run here.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j] (+ c[i, j] when acc)`, with unit column strides
/// for `b` and `c`.
///
/// # Safety
/// The CPU has AVX-512F ([`available`]), and every element the strides reach for
/// `i < m`, `j < n`, `p < k` is inside its allocation.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs): (*const f32, usize),
    alpha: f32,
    acc: bool,
) {
    let mut j = 0;
    while j < n {
        let cols = (n - j).min(32);
        let masks = (lane_mask(cols), lane_mask(cols.saturating_sub(16)));
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(MR);
            // SAFETY: the block's elements are a subset of the tile's (caller's contract).
            unsafe {
                let (c, a, b) = (c.add(i * c_rs + j), a.add(i * a_rs), b.add(j));
                match rows {
                    8 => block::<8>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    7 => block::<7>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    6 => block::<6>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    5 => block::<5>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    4 => block::<4>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    3 => block::<3>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    2 => block::<2>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                    _ => block::<1>(k, c, c_rs, a, a_rs, a_cs, b, b_rs, alpha, acc, masks),
                }
            }
            i += rows;
        }
        j += cols;
    }
}

/// The low `lanes` bits set (at most 16).
fn lane_mask(lanes: usize) -> u16 {
    match lanes {
        0 => 0,
        l if l >= 16 => u16::MAX,
        l => (1u16 << l) - 1,
    }
}

/// One `R × 32` block (fewer columns where the masks say so).
///
/// # Safety
/// The CPU has AVX-512F; for `r < R`, `p < k` and every column `j` whose lane is set in the
/// masks (`m0` for `j < 16`, `m1` for `16 ≤ j < 32`), the elements `c + r·c_rs + j`,
/// `a + r·a_rs + p·a_cs` and `b + p·b_rs + j` are inside their allocations: [`sgemm`] passes
/// a block of its tile, whose contract says so.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const R: usize>(
    k: usize,
    c: *mut f32,
    c_rs: usize,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    b_rs: usize,
    alpha: f32,
    acc: bool,
    (m0, m1): (u16, u16),
) {
    let mut s0 = [_mm512_setzero_ps(); R];
    let mut s1 = [_mm512_setzero_ps(); R];
    for p in 0..k {
        // SAFETY: row `p` of the block of `b` and column `p` of `a` are inside the tile.
        // The second half of a row may start past the allocation when the block has 16
        // columns or fewer; its mask is then 0, the load touches no memory, and the pointer
        // is formed with `wrapping_add`, which (unlike `add`) may leave the allocation.
        unsafe {
            let row = b.add(p * b_rs);
            let b0 = _mm512_maskz_loadu_ps(m0, row);
            let b1 = _mm512_maskz_loadu_ps(m1, row.wrapping_add(16));
            for i in 0..R {
                let x = _mm512_set1_ps(*a.add(i * a_rs + p * a_cs));
                s0[i] = _mm512_fmadd_ps(x, b0, s0[i]);
                s1[i] = _mm512_fmadd_ps(x, b1, s1[i]);
            }
        }
    }
    let alpha = _mm512_set1_ps(alpha);
    for i in 0..R {
        // SAFETY: row `i` of the block of `c` is inside the tile; masked lanes are not
        // touched. As for `b`, the second half is formed with `wrapping_add`: with a mask
        // of 0 it may point past the allocation and is never dereferenced.
        unsafe {
            let row = c.add(i * c_rs);
            let high = row.wrapping_add(16);
            let (mut r0, mut r1) = (_mm512_mul_ps(s0[i], alpha), _mm512_mul_ps(s1[i], alpha));
            if acc {
                r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, row));
                r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, high));
            }
            _mm512_mask_storeu_ps(row, m0, r0);
            _mm512_mask_storeu_ps(high, m1, r1);
        }
    }
}
