//! The AVX-512 product of a few rows by a packed weight ([`crate::kernel::Gemm::packed`]).
//!
//! A product of few rows (a decode step's one token, a short sentence) does about one
//! multiply-add per weight it reads: its time is streaming `b` from memory. Packed, each
//! panel of [`PANEL`] columns is one run of memory read front to back, so every cache line
//! fetched is used whole and the prefetcher sees two sequential streams. A step of `k`
//! loads one row of two panels (32 columns) and multiplies it with a broadcast element of
//! each row of `a`; with few rows, `k` is split into interleaved partial sums so that
//! enough multiply-adds are in flight to keep up with the loads.

use crate::kernel::PANEL;
use std::arch::x86_64::*;

/// Rows of `c` per register block.
const MR: usize = 8;

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j]` for `i < m`, `j < n`, with `b` packed (from a
/// column that is a multiple of [`PANEL`]) and a unit column stride for `c`.
///
/// # Safety
/// The CPU has AVX-512F ([`super::tile::available`]); the `n·k` floats from `b` are inside
/// their allocation; for `i < m`, `j < n`, `p < k` the elements `c + i·c_rs + j` and
/// `a + i·a_rs + p·a_cs` are inside theirs.
#[target_feature(enable = "avx512f")]
pub unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    let mut j = 0;
    while j < n {
        let w0 = (n - j).min(PANEL);
        let w1 = (n - j - w0).min(PANEL);
        // The second panel starts `k · w0` after the first (with `w1 = 0` it is past the
        // block and never read: `wrapping_add`, which may leave the allocation).
        let panels = (b.wrapping_add(j * k), w0, b.wrapping_add((j + w0) * k), w1);
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(MR);
            // SAFETY: the rows and columns are a part of the product's (caller's contract),
            // and the panels of columns `j..j + w0 + w1` are the `k·(w0 + w1)` floats from
            // `b + j·k`, inside the `n·k` from `b`.
            unsafe {
                let (c, a) = (c.add(i * c_rs + j), a.add(i * a_rs));
                let args = (k, c, c_rs, a, a_rs, a_cs, panels, alpha);
                match rows {
                    8 => block::<8, 1>(args),
                    7 => block::<7, 1>(args),
                    6 => block::<6, 1>(args),
                    5 => block::<5, 1>(args),
                    4 => block::<4, 2>(args),
                    3 => block::<3, 2>(args),
                    2 => block::<2, 4>(args),
                    _ => block::<1, 4>(args),
                }
            }
            i += rows;
        }
        j += w0 + w1;
    }
}

/// Step `p` of `k`: row `p` of both panels times column `p` of `a`'s `R` rows, added to
/// `s`.
///
/// # Safety
/// The CPU has AVX-512F; `p < k`; row `p` of each panel (its `w` floats from `p·w`) is
/// inside its allocation where its mask is not 0; column `p` of `a`'s `R` rows is inside
/// `a`'s.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn step<const R: usize>(
    s: &mut [[__m512; 2]; R],
    p: usize,
    (b0, w0, b1, w1): (*const f32, usize, *const f32, usize),
    (m0, m1): (u16, u16),
    (a, a_rs, a_cs): (*const f32, usize, usize),
) {
    // SAFETY: the masked loads touch the lanes set only (a lane whose bit is clear is
    // neither read nor faulted on), inside row `p` of the panel; a panel of width 0 has a
    // mask of 0 and its pointer, formed with `wrapping_add`, is never dereferenced. The
    // elements of `a` are inside its tile (contract).
    unsafe {
        let x0 = _mm512_maskz_loadu_ps(m0, b0.wrapping_add(p * w0));
        let x1 = _mm512_maskz_loadu_ps(m1, b1.wrapping_add(p * w1));
        for (i, s) in s.iter_mut().enumerate() {
            let y = _mm512_set1_ps(*a.add(i * a_rs + p * a_cs));
            s[0] = _mm512_fmadd_ps(y, x0, s[0]);
            s[1] = _mm512_fmadd_ps(y, x1, s[1]);
        }
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

/// What [`block`] takes: `k`, `c` and its row stride, `a` and its strides, the two panels
/// (first row, width), `alpha`.
type Block = (
    usize,
    *mut f32,
    usize,
    *const f32,
    usize,
    usize,
    (*const f32, usize, *const f32, usize),
    f32,
);

/// `R` rows by the columns of two panels (widths `w0` and `w1`, at most [`PANEL`] each;
/// `w1` may be 0), with `U` interleaved partial sums over `k` (steps `p ≡ u mod U`), added
/// in order at the end.
///
/// # Safety
/// The CPU has AVX-512F; the panels' `k·w0` and `k·w1` floats are inside their allocation;
/// for `r < R`, `p < k`, `j < w0 + w1`, the elements `c + r·c_rs + j` and
/// `a + r·a_rs + p·a_cs` are inside theirs.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn block<const R: usize, const U: usize>((k, c, c_rs, a, a_rs, a_cs, (b0, w0, b1, w1), alpha): Block) {
    let masks = (lane_mask(w0), lane_mask(w1));
    let panels = (b0, w0, b1, w1);
    let mut s = [[[_mm512_setzero_ps(); 2]; R]; U];
    let whole = k / U * U;
    // SAFETY (both loops): `p < k`, and the panels and `a` are as `step` asks (this
    // function's contract).
    for p in (0..whole).step_by(U) {
        for (u, s) in s.iter_mut().enumerate() {
            unsafe { step(s, p + u, panels, masks, (a, a_rs, a_cs)) };
        }
    }
    for p in whole..k {
        unsafe { step(&mut s[0], p, panels, masks, (a, a_rs, a_cs)) };
    }
    let alpha = _mm512_set1_ps(alpha);
    for i in 0..R {
        let (mut r0, mut r1) = (s[0][i][0], s[0][i][1]);
        for s in &s[1..] {
            r0 = _mm512_add_ps(r0, s[i][0]);
            r1 = _mm512_add_ps(r1, s[i][1]);
        }
        // SAFETY: row `i` of the block of `c` is inside the tile for the lanes set; the
        // second half is formed with `wrapping_add`: with a mask of 0 it may point past the
        // allocation and is never dereferenced.
        unsafe {
            let row = c.add(i * c_rs);
            let high = row.wrapping_add(w0);
            _mm512_mask_storeu_ps(row, masks.0, _mm512_mul_ps(r0, alpha));
            _mm512_mask_storeu_ps(high, masks.1, _mm512_mul_ps(r1, alpha));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attnc_sgemm_packed;
    use crate::kernel::PANEL;

    /// `b [k, n]` row-major in the packed layout of [`crate::kernel::Gemm::packed`].
    fn pack(b: &[f32], k: usize, n: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(n * k);
        for j0 in (0..n).step_by(PANEL) {
            let w = (n - j0).min(PANEL);
            for p in 0..k {
                out.extend_from_slice(&b[p * n + j0..p * n + j0 + w]);
            }
        }
        out
    }

    /// Small integers: every product and sum is exact, whatever the order.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + seed * 13) % 11) as f32 - 5.0)
            .collect()
    }

    #[test]
    fn packed_products_equal_a_plain_loop_for_every_few_rows_and_tail() {
        // Every row count up to the lowering's threshold (16) and past it: row blocks of 8
        // and the tails of each.
        for m in 1..=20 {
            for (n, k) in [
                (1, 1),
                (15, 3),
                (16, 7),
                (17, 5),
                (33, 9),
                (50, 31),
                (64, 64),
                (97, 130),
            ] {
                let (a, b) = (values(m * k, m), values(k * n, n));
                let packed = pack(&b, k, n);
                let mut want = vec![0.0f32; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = 0.5 * (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum::<f32>();
                    }
                }
                // Row-major `c` (the AVX-512 product where the CPU has it), then `c` with
                // a column stride of 2 (the `gemm` crate, panel by panel).
                let mut c = vec![f32::NAN; m * n];
                let mut wide = vec![f32::NAN; 2 * m * n];
                // SAFETY: `a` is `m × k`, `packed` holds `n·k` floats, `c` is `m × n` and
                // `wide` `m × 2n`, all as the strides say.
                unsafe {
                    let (m, n, k) = (m as i64, n as i64, k as i64);
                    attnc_sgemm_packed(
                        m,
                        n,
                        k,
                        c.as_mut_ptr(),
                        n,
                        1,
                        a.as_ptr(),
                        k,
                        1,
                        packed.as_ptr(),
                        0.5,
                    );
                    attnc_sgemm_packed(
                        m,
                        n,
                        k,
                        wide.as_mut_ptr(),
                        2 * n,
                        2,
                        a.as_ptr(),
                        k,
                        1,
                        packed.as_ptr(),
                        0.5,
                    );
                }
                assert_eq!(c, want, "m {m}, n {n}, k {k}");
                let strided: Vec<f32> = wide.iter().step_by(2).copied().collect();
                assert_eq!(strided, want, "m {m}, n {n}, k {k}, strided c");
            }
        }
    }
}
