//! The AVX-512 product of rows by a packed weight ([`crate::kernel::Gemm::packed`]).
//!
//! A product of few rows (a decode step's one token, a short sentence) does about one
//! multiply-add per weight it reads: its time is streaming `b` from memory. Packed, each
//! panel of [`PANEL`] columns is one run of memory read front to back, so every cache line
//! fetched is used whole and the prefetcher sees two sequential streams. A step of `k`
//! loads one row of two panels (32 columns) and multiplies it with a broadcast element of
//! each row of `a`; with few rows, `k` is split into interleaved partial sums so that
//! enough multiply-adds are in flight to keep up with the loads.
//!
//! A product of many rows (a prompt, a batch of sentences) is bound by its multiply-adds:
//! register blocks of 8 rows by three panels (24 sums, three loads of `b` and eight
//! broadcasts of `a` per 24 multiply-adds), `k` in blocks whose three panels stay in L1
//! while every row block of the tile reads them. The weights were packed once, by the
//! prologue: unlike the `gemm` crate, no call packs them again.

use crate::kernel::PANEL;
use std::arch::x86_64::*;

/// Rows of `c` per register block.
const MR: usize = 8;

/// Rows from which a product runs as the many-row product of [`wide`] rather than the
/// streaming one of [`few`]: past the lowering's `PACKED_ROWS` (16), so that what the
/// lowering packs runs as it was measured. `benches/gemm_bar.rs -- packed` measures
/// [`wide`] at the models' shapes against the `gemm` crate (0.5-0.9x its speed so far).
const WIDE_ROWS: usize = 2 * MR + 1;

/// Steps of `k` per pass of [`wide`]: three panels of `KC` rows (48 KiB) stay in L1 while
/// every row block of the tile multiplies them, and the tile's rows of `a` over `KC`
/// columns (512 KiB at 512 rows) in L2.
const KC: usize = 256;

/// The first row of a panel, its width (0: no panel, never read) and its row stride.
type Panel = (*const f32, usize);

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
    c: (*mut f32, usize),
    a: (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    // SAFETY: this function's contract is both's.
    unsafe {
        match m >= WIDE_ROWS {
            true => wide((m, n, k), c, a, b, alpha),
            false => few((m, n, k), c, a, b, alpha),
        }
    }
}

/// The panels of columns `j..j + P·PANEL` (narrower or absent past `n`), from `k`-row `p0`
/// on: panel `q` starts at `b + (j + q·PANEL)·k`, its row `p` `w` floats further. A panel
/// past `n` has width 0 and a pointer formed with `wrapping_add` that is never read.
fn panels<const P: usize>(b: *const f32, (n, k): (usize, usize), j: usize, p0: usize) -> [Panel; P] {
    std::array::from_fn(|q| {
        let first = (j + q * PANEL).min(n);
        let w = (n - first).min(PANEL);
        (b.wrapping_add(first * k + p0 * w), w)
    })
}

/// Many rows: blocks of `k` of [`KC`] steps, in each the columns three panels at a time
/// and under them the rows [`MR`] at a time, each block of `c` written by the first pass
/// and added to by the others.
///
/// # Safety
/// As [`sgemm`].
#[target_feature(enable = "avx512f")]
unsafe fn wide(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    for p0 in (0..k.max(1)).step_by(KC) {
        let kc = (k - p0).min(KC);
        for j in (0..n).step_by(3 * PANEL) {
            let panels = panels::<3>(b, (n, k), j, p0);
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows `i..i + rows`, columns `j..` of the panels' widths and steps
                // `p0..p0 + kc` are a part of the product (the contract); the panels start
                // at their row `p0`, inside the `n·k` floats from `b`.
                unsafe {
                    let (c, a) = (c.add(i * c_rs + j), a.add(i * a_rs + p0 * a_cs));
                    let args = (kc, (c, c_rs), (a, a_rs, a_cs), panels, alpha, p0 > 0);
                    match rows {
                        8 => block::<8, 3, 1>(args),
                        7 => block::<7, 3, 1>(args),
                        6 => block::<6, 3, 1>(args),
                        5 => block::<5, 3, 1>(args),
                        4 => block::<4, 3, 1>(args),
                        3 => block::<3, 3, 1>(args),
                        2 => block::<2, 3, 1>(args),
                        _ => block::<1, 3, 1>(args),
                    }
                }
                i += rows;
            }
        }
    }
}

/// Few rows, whose time is streaming `b`: the columns two panels at a time, each read
/// once, front to back, for all rows; with fewer than 5 rows, `k` split into interleaved
/// partial sums so that enough multiply-adds are in flight to keep up with the loads.
///
/// # Safety
/// As [`sgemm`].
#[target_feature(enable = "avx512f")]
unsafe fn few(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    for j in (0..n).step_by(2 * PANEL) {
        let panels = panels::<2>(b, (n, k), j, 0);
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(MR);
            // SAFETY: the rows and columns are a part of the product (caller's contract),
            // and the panels of columns `j..j + 2·PANEL` are `k` rows of their widths from
            // `b + j·k`, inside the `n·k` from `b`.
            unsafe {
                let (c, a) = (c.add(i * c_rs + j), a.add(i * a_rs));
                let args = (k, (c, c_rs), (a, a_rs, a_cs), panels, alpha, false);
                match rows {
                    8 => block::<8, 2, 1>(args),
                    7 => block::<7, 2, 1>(args),
                    6 => block::<6, 2, 1>(args),
                    5 => block::<5, 2, 1>(args),
                    4 => block::<4, 2, 2>(args),
                    3 => block::<3, 2, 2>(args),
                    2 => block::<2, 2, 4>(args),
                    _ => block::<1, 2, 4>(args),
                }
            }
            i += rows;
        }
    }
}

/// Step `p` of `k`: row `p` of the `P` panels times column `p` of `a`'s `R` rows, added
/// to `s`.
///
/// # Safety
/// The CPU has AVX-512F; `p < k`; row `p` of each panel (its `w` floats from `p·w`) is
/// inside its allocation where its mask is not 0; column `p` of `a`'s `R` rows is inside
/// `a`'s.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn step<const R: usize, const P: usize>(
    s: &mut [[__m512; P]; R],
    p: usize,
    panels: &[Panel; P],
    masks: &[u16; P],
    (a, a_rs, a_cs): (*const f32, usize, usize),
) {
    // SAFETY: the masked loads touch the lanes set only (a lane whose bit is clear is
    // neither read nor faulted on), inside row `p` of the panel; a panel of width 0 has a
    // mask of 0 and its pointer, formed with `wrapping_add`, is never dereferenced. The
    // elements of `a` are inside its tile (contract).
    unsafe {
        // A loop, not `array::from_fn`: a closure would not inherit AVX-512 and its loads
        // would not be inlined.
        let mut x = [_mm512_setzero_ps(); P];
        for (x, (&(panel, w), &mask)) in x.iter_mut().zip(panels.iter().zip(masks)) {
            *x = _mm512_maskz_loadu_ps(mask, panel.wrapping_add(p * w));
        }
        for (i, s) in s.iter_mut().enumerate() {
            let y = _mm512_set1_ps(*a.add(i * a_rs + p * a_cs));
            for (s, &x) in s.iter_mut().zip(&x) {
                *s = _mm512_fmadd_ps(y, x, *s);
            }
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

/// What [`block`] takes: `k`, `c` and its row stride, `a` and its strides, the panels,
/// `alpha`, and whether to add to `c` rather than write it.
type Block<const P: usize> = (
    usize,
    (*mut f32, usize),
    (*const f32, usize, usize),
    [Panel; P],
    f32,
    bool,
);

/// `R` rows by the columns of `P` panels (each at most [`PANEL`] wide, possibly 0), with
/// `U` interleaved partial sums over `k` (steps `p ≡ u mod U`), added in order at the end;
/// `c = alpha · Σ`, or with `acc`, `c + alpha · Σ`.
///
/// # Safety
/// The CPU has AVX-512F; the panels' `k·w` floats are inside their allocation; for
/// `r < R`, `p < k`, `j <` the panels' widths, the elements `c + r·c_rs + j` and
/// `a + r·a_rs + p·a_cs` are inside theirs.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn block<const R: usize, const P: usize, const U: usize>(
    (k, (c, c_rs), a, panels, alpha, acc): Block<P>,
) {
    let masks: [u16; P] = std::array::from_fn(|q| lane_mask(panels[q].1));
    let mut s = [[[_mm512_setzero_ps(); P]; R]; U];
    let whole = k / U * U;
    // SAFETY (both loops): `p < k`, and the panels and `a` are as `step` asks (this
    // function's contract).
    for p in (0..whole).step_by(U) {
        for (u, s) in s.iter_mut().enumerate() {
            unsafe { step(s, p + u, &panels, &masks, a) };
        }
    }
    for p in whole..k {
        unsafe { step(&mut s[0], p, &panels, &masks, a) };
    }
    let alpha = _mm512_set1_ps(alpha);
    for i in 0..R {
        let mut offset = 0;
        for (q, (&mask, &(_, w))) in masks.iter().zip(&panels).enumerate() {
            let mut r = s[0][i][q];
            for s in &s[1..] {
                r = _mm512_add_ps(r, s[i][q]);
            }
            // SAFETY: row `i` of the block of `c` is inside the tile for the lanes set;
            // a panel's part is formed with `wrapping_add`: with a mask of 0 it may point
            // past the allocation and is never dereferenced.
            unsafe {
                let out = c.add(i * c_rs).wrapping_add(offset);
                let r = match acc {
                    true => _mm512_fmadd_ps(r, alpha, _mm512_maskz_loadu_ps(mask, out)),
                    false => _mm512_mul_ps(r, alpha),
                };
                _mm512_mask_storeu_ps(out, mask, r);
            }
            offset += w;
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
    fn packed_products_equal_a_plain_loop_for_every_row_count_and_tail() {
        // Every row count across the streaming product's and the many-row product's
        // (`WIDE_ROWS`): row blocks of 8 and the tails of each; columns in one, two and three
        // panels and their tails; `k` in one block, and past one (`KC` = 256) where the
        // later blocks add to `c`.
        for m in (1..=26).chain([33, 47]) {
            for (n, k) in [
                (1, 1),
                (15, 3),
                (16, 7),
                (17, 5),
                (33, 9),
                (50, 31),
                (64, 64),
                (97, 130),
                (48, 256),
                (49, 257),
                (113, 600),
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
