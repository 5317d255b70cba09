//! An AVX-512 tile product for tiles the `gemm` crate would have to pack: the attention
//! kernel's `scale · q kᵀ` and `p · v`. `v` and a `kᵀ` laid out key-contiguous have
//! contiguous rows; keys read where the projection wrote them have contiguous columns
//! ([`Right::Columns`]), and their panel is copied through 16 × 16 transposes in registers.
//! Partial tiles use masked loads and stores, so nothing outside the tile is touched.
//!
//! The rows of `b` lie far apart in memory (`kᵀ` at a stride of the sequence, `v` at the
//! fused projection's `3·D`): a multiple of 4 KiB, so every row of a panel falls in the same
//! few sets of the L1 cache, and the panel, which every block of rows reads again, came
//! from L2 at each read. So each panel is first copied to a contiguous buffer on the stack,
//! where it stays in L1 for all of the panel's row blocks; the copy costs one read of the
//! panel. A panel is 64 columns wide where `k <= 128` (32 KiB at most), else 32.
//!
//! A step of `k` then loads the panel's row (4 vectors) and broadcasts one element of each
//! of 6 rows of `a`: 24 multiply-adds for 10 loads, where 8 rows by 32 columns did 16 for
//! 10. A panel of 32 columns or fewer takes 12 rows by 2 vectors instead. Each sum still
//! runs over `k` in order, so the bits are those of a plain loop of fused multiply-adds
//! (`BENCHMARKS.md`, session 13).
//!
//! Where all of `a`'s rows are one register block (a decode step's `p · v`: the query
//! heads of one key/value head), each row of the panel is read once, so a copy would only
//! add a pass: the block reads `b` where it lies, 64 columns wide (`BENCHMARKS.md`, session
//! 26).

use super::lane_mask;
use super::transpose::transpose;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Whether [`sgemm`] can run here.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// The longest inner dim [`sgemm`] takes (the caller sends longer ones to the `gemm` crate).
pub const MAX_K: usize = 256;

/// The widest panel of `b`: four vectors of 16 lanes.
const MAX_NR: usize = 64;

/// A panel of `b`, `k` rows of its width, aligned to a cache line (so is every row).
#[repr(align(64))]
struct Panel([MaybeUninit<f32>; MAX_K * MAX_NR]);

/// The right operand of a tile product: its first element and how its elements lie.
#[derive(Clone, Copy)]
pub enum Right {
    /// `b[p, j]` at `p·rs + j`: rows contiguous (`kᵀ` laid out key-contiguous, `v`).
    Rows(*const f32, usize),
    /// `b[p, j]` at `j·cs + p`: columns contiguous (the keys read in place as `kᵀ`, each
    /// key's row its column), copied to the panel through 16 × 16 transposes.
    Columns(*const f32, usize),
}

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j] (+ c[i, j] when acc)`, with a unit column stride
/// for `c`.
///
/// # Safety
/// The CPU has AVX-512F ([`available`]), `k <= MAX_K`, and every element the strides reach
/// for `i < m`, `j < n`, `p < k` is inside its allocation.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: Right,
    alpha: f32,
    acc: bool,
) {
    // Uninitialized: only the rows `copy_panel` writes are read.
    let mut panel = Panel([MaybeUninit::uninit(); MAX_K * MAX_NR]);
    let buf = panel.0.as_mut_ptr().cast::<f32>();
    // One block of rows reads each panel once, where it lies; more read a copy, which
    // stays in L1 (48 KiB here) while every row block reads it: 64 columns up to `k = 128`
    // (32 KiB), 32 beyond. Columns are always copied: the copy is their transpose.
    let direct = m <= WIDE_ROWS && matches!(b, Right::Rows(..));
    let widest = if k <= 128 || direct { MAX_NR } else { MAX_NR / 2 };
    let mut j = 0;
    while j < n {
        let cols = (n - j).min(widest);
        let masks = std::array::from_fn(|v| lane_mask(cols.saturating_sub(16 * v)));
        // SAFETY: the panel's columns are inside the tile for the lanes set (caller's
        // contract), and `k <= MAX_K` rows of at most `MAX_NR` fit the buffer.
        // `(b + j, a + 0·a_rs, c + j)` are the first elements of the panel's blocks (`b +
        // j·cs` with columns contiguous).
        unsafe {
            let c = c.add(j);
            let tile = |b| Tile {
                k,
                c: (c, c_rs),
                a: (a, a_rs, a_cs),
                b,
                alpha,
                acc,
                masks,
            };
            match (cols, direct, b) {
                (33.., true, Right::Rows(b, rs)) => blocks::<4, WIDE_ROWS, true>(m, &tile((b.add(j), rs))),
                (_, true, Right::Rows(b, rs)) => blocks::<2, WIDE_ROWS, true>(m, &tile((b.add(j), rs))),
                (33.., ..) => {
                    let panel = copy::<4>(k, (b, j, cols), &masks, buf);
                    blocks::<4, WIDE_ROWS, false>(m, &tile(panel));
                }
                _ => {
                    let panel = copy::<2>(k, (b, j, cols), &masks, buf);
                    blocks::<2, 12, false>(m, &tile(panel));
                }
            }
        }
        j += cols;
    }
}

/// The rows of a register block 4 vectors wide.
const WIDE_ROWS: usize = 6;

/// Rows ahead of the step being multiplied whose panel row is asked of the cache where the
/// panel is read in place.
const AHEAD: usize = 16;

/// One panel's product: the rows of `a` with the panel of `b` (its first element and row
/// stride: in place, or its copy), `c`'s and `a`'s pointers at the panel's first row, and
/// the lanes of the panel's columns.
struct Tile {
    k: usize,
    c: (*mut f32, usize),
    a: (*const f32, usize, usize),
    b: (*const f32, usize),
    alpha: f32,
    acc: bool,
    masks: [u16; 4],
}

/// The `m` rows of one panel in register blocks of `MR` rows (the last one fewer), the
/// panel in place where `DIRECT`, else a copy.
///
/// # Safety
/// The CPU has AVX-512F; for `p < k` and the columns `j` whose lane is set in `t.masks`,
/// `t.b`'s element `p·b_rs + j` is inside its allocation, and a copy (not `DIRECT`) holds
/// `t.k` rows of `16·V` floats, 64-byte aligned; for `i < m`, `p < k` and those columns,
/// `c + i·c_rs + j` and `a + i·a_rs + p·a_cs` are inside their allocations.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn blocks<const V: usize, const MR: usize, const DIRECT: bool>(m: usize, t: &Tile) {
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(MR);
        // SAFETY: the block's rows are rows `i..i + rows < m` of the tile (contract).
        unsafe {
            let (c, a) = (t.c.0.add(i * t.c.1), t.a.0.add(i * t.a.1));
            match rows {
                12 if MR >= 12 => block::<12, V, DIRECT>(t, c, a),
                11 if MR >= 11 => block::<11, V, DIRECT>(t, c, a),
                10 if MR >= 10 => block::<10, V, DIRECT>(t, c, a),
                9 if MR >= 9 => block::<9, V, DIRECT>(t, c, a),
                8 if MR >= 8 => block::<8, V, DIRECT>(t, c, a),
                7 if MR >= 7 => block::<7, V, DIRECT>(t, c, a),
                6 => block::<6, V, DIRECT>(t, c, a),
                5 => block::<5, V, DIRECT>(t, c, a),
                4 => block::<4, V, DIRECT>(t, c, a),
                3 => block::<3, V, DIRECT>(t, c, a),
                2 => block::<2, V, DIRECT>(t, c, a),
                _ => block::<1, V, DIRECT>(t, c, a),
            }
        }
        i += rows;
    }
}

/// Copies the panel of `b` from column `j`, `cols` wide (at most `16·V`), to `panel`, by
/// [`copy_panel`] or [`copy_columns`]; returns the copy as [`Tile::b`] reads it.
///
/// # Safety
/// As for [`copy_panel`] or [`copy_columns`], whichever `b` calls for: the panel's
/// columns `j..j + cols` are the tile's, and the masks set the lanes of its `cols`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn copy<const V: usize>(
    k: usize,
    (b, j, cols): (Right, usize, usize),
    masks: &[u16; 4],
    panel: *mut f32,
) -> (*const f32, usize) {
    // SAFETY: this function's contract, the panel's first element `b + j` (rows
    // contiguous) or `b + j·cs` (columns contiguous).
    unsafe {
        match b {
            Right::Rows(b, rs) => copy_panel::<V>(k, (b.add(j), rs), masks, panel),
            Right::Columns(b, cs) => copy_columns::<V>(k, (b.add(j * cs), cs), cols, panel),
        }
    }
}

/// Copies `k` rows of one panel of `b`, `V` vectors wide (the lanes set in the masks; the
/// others are zero) to `panel`, row after row; returns the copy as [`Tile::b`] reads it
/// (its first element and row stride).
///
/// # Safety
/// The CPU has AVX-512F; `panel` is a [`Panel`]'s buffer, `k <= MAX_K` and `V <= 4`; for
/// `p < k` and every column `j` whose lane is set in the masks (`masks[v]` for
/// `16v ≤ j < 16(v + 1)`), `b + p·b_rs + j` is inside its allocation.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn copy_panel<const V: usize>(
    k: usize,
    (b, b_rs): (*const f32, usize),
    masks: &[u16; 4],
    panel: *mut f32,
) -> (*const f32, usize) {
    for p in 0..k {
        for (v, &mask) in masks.iter().take(V).enumerate() {
            // SAFETY: row `p` of the panel is inside `b` for the lanes set (contract); a
            // vector of the row may start past the allocation when the panel is narrower:
            // its mask is then 0, the load touches no memory, and the pointer is formed
            // with `wrapping_add`. Row `p < MAX_K` of the buffer is `16·V <= MAX_NR` floats
            // from `16·V·p`, 64-byte aligned.
            unsafe {
                let src = b.add(p * b_rs).wrapping_add(16 * v);
                let dst = panel.add((p * V + v) * 16);
                _mm512_store_ps(dst, _mm512_maskz_loadu_ps(mask, src));
            }
        }
    }
    (panel.cast_const(), 16 * V)
}

/// [`copy_panel`] for `b` with contiguous columns ([`Right::Columns`]: column `j`, a key,
/// is `k` floats from `b + j·cs`): 16 columns by 16 rows at a time, loaded as 16 runs,
/// transposed in registers and stored as 16 rows of the panel, columns past `cols` zero.
///
/// # Safety
/// The CPU has AVX-512F; `panel` is a [`Panel`]'s buffer, `k <= MAX_K`, `V <= 4` and
/// `cols <= 16·V`; for `j < cols` and `p < k`, `b + j·cs + p` is inside its
/// allocation.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn copy_columns<const V: usize>(
    k: usize,
    (b, cs): (*const f32, usize),
    cols: usize,
    panel: *mut f32,
) -> (*const f32, usize) {
    for v in 0..V {
        let here = cols.saturating_sub(16 * v).min(16);
        for p0 in (0..k).step_by(16) {
            let lanes = (k - p0).min(16);
            let mask = lane_mask(lanes);
            // SAFETY: column `16v + r < cols` is inside `b` for steps `p0..p0 + lanes < k`
            // (contract), the lanes the mask sets; columns past `cols` are zeros, never read.
            let runs: [__m512; 16] = std::array::from_fn(|r| match r < here {
                true => unsafe { _mm512_maskz_loadu_ps(mask, b.add((16 * v + r) * cs + p0)) },
                false => _mm512_setzero_ps(),
            });
            for (q, row) in transpose(runs).into_iter().take(lanes).enumerate() {
                // SAFETY: row `p0 + q < k <= MAX_K` of the buffer holds `16·V <= MAX_NR`
                // floats, 64-byte aligned; vector `v < V` of it.
                unsafe { _mm512_store_ps(panel.add(((p0 + q) * V + v) * 16), row) };
            }
        }
    }
    (panel.cast_const(), 16 * V)
}

/// One block of `R` rows by the panel's `16·V` columns (fewer where the masks say so):
/// `R × V` sums, and per step of `k`, `V` loads of the panel's row and `R` broadcasts.
///
/// # Safety
/// [`blocks`]' contract for `t`, and for `r < R`, `p < k` and every column `j` whose lane
/// is set in `t.masks`, the elements `c + r·c_rs + j` and `a + r·a_rs + p·a_cs` are inside
/// their allocations: [`blocks`] passes a block of its tile, whose contract says so.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn block<const R: usize, const V: usize, const DIRECT: bool>(t: &Tile, c: *mut f32, a: *const f32) {
    let ((_, a_rs, a_cs), c_rs, (b, b_rs)) = (t.a, t.c.1, t.b);
    let mut s = [[_mm512_setzero_ps(); V]; R];
    for p in 0..t.k {
        // SAFETY: in place, the lanes set of row `p` of the panel are inside `b` (contract);
        // a vector past a narrower panel's columns has mask 0, touches no memory, and is
        // formed with `wrapping_add`. A copy's row `p` holds `16·V` floats, aligned. Column
        // `p` of `a` is inside the tile.
        unsafe {
            let row = b.wrapping_add(p * b_rs);
            if DIRECT {
                // In place, `b` streams from memory, each row read once; a prefetch reads
                // nothing and faults on nothing, so it may point past the panel.
                for v in 0..V {
                    _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(AHEAD * b_rs + 16 * v).cast());
                }
            }
            let b: [__m512; V] = std::array::from_fn(|v| match DIRECT {
                true => _mm512_maskz_loadu_ps(t.masks[v], row.wrapping_add(16 * v)),
                false => _mm512_load_ps(row.add(16 * v)),
            });
            for (i, s) in s.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a.add(i * a_rs + p * a_cs));
                for (s, &b) in s.iter_mut().zip(&b) {
                    *s = _mm512_fmadd_ps(x, b, *s);
                }
            }
        }
    }
    let alpha = _mm512_set1_ps(t.alpha);
    for (i, s) in s.iter().enumerate() {
        for (v, &s) in s.iter().enumerate() {
            // SAFETY: row `i` of the block of `c` is inside the tile for the lanes set;
            // masked lanes are not touched. As for `b`, a vector of a narrower panel may be
            // formed past the allocation with `wrapping_add`: its mask is then 0 and it is
            // never dereferenced.
            unsafe {
                let (at, mask) = (c.add(i * c_rs).wrapping_add(16 * v), t.masks[v]);
                let mut r = _mm512_mul_ps(s, alpha);
                if t.acc {
                    r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, at));
                }
                _mm512_mask_storeu_ps(at, mask, r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{available, sgemm, Right, MAX_K};

    /// `m × n × k` with padded strides, `acc` or not, `b`'s rows contiguous or its columns
    /// (`columns`), against the same sums in a plain loop (one fused multiply-add per step,
    /// in order: the same bits), and nothing written outside the tile.
    fn check((m, n, k): (usize, usize, usize), acc: bool, columns: bool) {
        let (a_rs, c_rs) = (k + 3, n + 7);
        // `b[p, j]` at `p·b_rs + j·b_cs`.
        let (b_rs, b_cs) = match columns {
            false => (n + 5, 1),
            true => (1, k + 5),
        };
        let value = |i: usize, s: usize| ((i * 37 + s) % 23) as f32 * 0.25 - 2.5;
        let a: Vec<f32> = (0..m * a_rs).map(|i| value(i, 1)).collect();
        let b: Vec<f32> = (0..(k + 5) * (n + 5)).map(|i| value(i, 2)).collect();
        let c0: Vec<f32> = (0..m * c_rs).map(|i| value(i, 3)).collect();
        let alpha = 0.5;
        let mut c = c0.clone();
        let right = match columns {
            false => Right::Rows(b.as_ptr(), b_rs),
            true => Right::Columns(b.as_ptr(), b_cs),
        };
        // SAFETY: the test's CPU has AVX-512F (checked by the caller), `k <= MAX_K`, and the
        // buffers hold every element the strides reach for `i < m`, `j < n`, `p < k`
        // (`b`'s `(k + 5)·(n + 5)` floats either way).
        unsafe {
            sgemm(
                (m, n, k),
                (c.as_mut_ptr(), c_rs),
                (a.as_ptr(), a_rs, 1),
                right,
                alpha,
                acc,
            )
        };
        let sum = |i: usize, j: usize| {
            (0..k).fold(0.0f32, |s, p| a[i * a_rs + p].mul_add(b[p * b_rs + j * b_cs], s))
        };
        let what = format!("{m}x{n}x{k} columns {columns}");
        super::super::assert_tile((&c, &c0), (m, n, c_rs), (alpha, acc), sum, &what);
    }

    #[test]
    fn tiles_of_every_block_and_panel_width_match_a_plain_loop() {
        if !available() {
            return;
        }
        for m in [1, 5, 6, 7, 11, 12, 13, 64] {
            for n in [1, 16, 17, 32, 33, 48, 64, 65, 100] {
                for k in [1, 9, 17, 64, MAX_K] {
                    for columns in [false, true] {
                        check((m, n, k), false, columns);
                        check((m, n, k), true, columns);
                    }
                }
            }
        }
    }
}
