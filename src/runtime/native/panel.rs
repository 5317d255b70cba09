//! The AVX-512 product of a few rows by a packed weight ([`crate::kernel::Gemm::packed`]).
//!
//! A product of few rows (a decode step's one token, a short sentence) does about one
//! multiply-add per weight it reads: its time is streaming `b` from memory. Packed, each
//! panel of [`PANEL`] columns is one run of memory read front to back, so every cache line
//! fetched is used whole and the prefetcher sees two sequential streams. Up to 8 rows, a
//! step of `k` loads one row of two panels (32 columns) and multiplies it with a broadcast
//! element of each row of `a`; with fewer than 5 rows, `k` is split into interleaved
//! partial sums so that enough multiply-adds are in flight to keep up with the loads. More
//! rows are blocks of up to 16 by one panel ([`many`]). [`avx2`] computes the same sums on
//! CPUs without AVX-512.

use super::lane_mask;
use super::transpose::transpose;
use crate::kernel::PANEL;

pub mod avx2;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Rows of `c` per register block over two panels.
pub const MR: usize = 8;

/// Rows of `c` per register block over one panel, where there are more rows than [`MR`].
const MR_MANY: usize = 16;

/// Steps of `k` ahead of the one it multiplies that [`step`] and [`one_panel`] ask the cache
/// for.
const AHEAD: usize = 32;

/// Steps of `k` whose columns of `a` [`many`] copies at a time: 32 KiB of stack.
const KC: usize = 512;

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j]` for `i < m`, `j < n`, with `b` packed (from a
/// column that is a multiple of [`PANEL`]) and a unit column stride for `c`. Up to [`MR`]
/// rows, register blocks of two panels; more rows go to [`many`].
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
    if m > MR {
        // SAFETY: this function's contract is `many`'s.
        return unsafe { many((m, n, k), (c, c_rs), (a, a_rs, a_cs), b, alpha) };
    }
    if m == 0 {
        return;
    }
    let mut j = 0;
    while j < n {
        let w0 = (n - j).min(PANEL);
        let w1 = (n - j - w0).min(PANEL);
        // The second panel starts `k · w0` after the first (with `w1 = 0` it is past the
        // block and never read: `wrapping_add`, which may leave the allocation).
        let panels = (b.wrapping_add(j * k), w0, b.wrapping_add((j + w0) * k), w1);
        // SAFETY: the `1..=MR` rows and the columns are the product's (caller's contract),
        // and the panels of columns `j..j + w0 + w1` are the `k·(w0 + w1)` floats from
        // `b + j·k`, inside the `n·k` from `b`.
        unsafe {
            let args = (k, c.add(j), c_rs, a, a_rs, a_cs, panels, alpha);
            match m {
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
    // elements of `a` are inside its tile (contract). A prefetch reads nothing and faults
    // on nothing, so it may point past the panels: each asks for the row `AHEAD` steps on,
    // which the hardware prefetcher alone left late (a decode step 1.3× slower on Zen 5).
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(b0.wrapping_add((p + AHEAD) * w0).cast());
        _mm_prefetch::<_MM_HINT_T0>(b1.wrapping_add((p + AHEAD) * w1).cast());
        let x0 = _mm512_maskz_loadu_ps(m0, b0.wrapping_add(p * w0));
        let x1 = _mm512_maskz_loadu_ps(m1, b1.wrapping_add(p * w1));
        for (i, s) in s.iter_mut().enumerate() {
            let y = _mm512_set1_ps(*a.add(i * a_rs + p * a_cs));
            s[0] = _mm512_fmadd_ps(y, x0, s[0]);
            s[1] = _mm512_fmadd_ps(y, x1, s[1]);
        }
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
    for p in (0..whole).step_by(U) {
        for (u, s) in s.iter_mut().enumerate() {
            // SAFETY: `p + u < whole <= k`, and the panels and `a` are as `step` asks (this
            // function's contract).
            unsafe { step(s, p + u, panels, masks, (a, a_rs, a_cs)) };
        }
    }
    for p in whole..k {
        // SAFETY: `p < k`, and the panels and `a` are as `step` asks (this function's
        // contract).
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

/// [`sgemm`] for more rows than [`MR`]: blocks of up to [`MR_MANY`] rows by one panel, so
/// that every float of `b` is read once for all of them (blocks of 8 rows by two panels read
/// each panel again for every block). The block's rows of `a` are first copied step-major,
/// `KC` steps at a time, so that each multiply-add takes its element of `a` as a broadcast
/// from one pointer at a fixed offset, with no address arithmetic per row (which, 16 rows
/// apart in `a`, took the ports the multiply-adds need). Between chunks of `k` a block keeps
/// its sums in `c`, unscaled, and picks them up again: the same sums in the same order as
/// one pass, so the chunking changes no bit; `alpha` is applied after the last chunk.
///
/// # Safety
/// [`sgemm`]'s.
#[target_feature(enable = "avx512f")]
unsafe fn many(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
) {
    // Uninitialized: a chunk reads only the steps and rows `copy_steps` wrote for it.
    let mut steps = Steps([MaybeUninit::uninit(); KC * MR_MANY]);
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(MR_MANY);
        // At least one chunk, empty where `k = 0`: it writes the sums, 0.
        let mut p0 = 0;
        loop {
            let kc = (k - p0).min(KC);
            // SAFETY: rows `i..i + rows` and steps `p0..p0 + kc` are inside `a` (contract).
            unsafe { copy_steps(&mut steps, (a.add(i * a_rs + p0 * a_cs), a_rs, a_cs), rows, kc) };
            let chunk = Chunk {
                steps: steps.0.as_ptr().cast(),
                kc,
                first: p0 == 0,
                alpha: (p0 + kc == k).then_some(alpha),
            };
            let mut j = 0;
            while j < n {
                let w = (n - j).min(PANEL);
                // SAFETY: rows `i..i + rows` and columns `j..j + w` are the product's
                // (contract); the panel of columns `j..j + w` is the `k·w` floats from
                // `b + j·k`, and its rows `p0..p0 + kc` the `kc·w` from `p0·w` on.
                unsafe {
                    let (c, panel) = (c.add(i * c_rs + j), b.add(j * k + p0 * w));
                    let args = (c, c_rs, panel, w);
                    match rows {
                        16 => one_panel::<16>(&chunk, args),
                        15 => one_panel::<15>(&chunk, args),
                        14 => one_panel::<14>(&chunk, args),
                        13 => one_panel::<13>(&chunk, args),
                        12 => one_panel::<12>(&chunk, args),
                        11 => one_panel::<11>(&chunk, args),
                        10 => one_panel::<10>(&chunk, args),
                        9 => one_panel::<9>(&chunk, args),
                        8 => one_panel::<8>(&chunk, args),
                        7 => one_panel::<7>(&chunk, args),
                        6 => one_panel::<6>(&chunk, args),
                        5 => one_panel::<5>(&chunk, args),
                        4 => one_panel::<4>(&chunk, args),
                        3 => one_panel::<3>(&chunk, args),
                        2 => one_panel::<2>(&chunk, args),
                        _ => one_panel::<1>(&chunk, args),
                    }
                }
                j += w;
            }
            p0 += kc;
            if p0 >= k {
                break;
            }
        }
        i += rows;
    }
}

/// A chunk's rows of `a`, step-major: [`MR_MANY`] floats a step, each step a cache line.
#[repr(align(64))]
struct Steps([MaybeUninit<f32>; KC * MR_MANY]);

/// Copies `kc` steps of `rows` rows of `a` into `steps`, step-major. With rows contiguous
/// (`a_cs = 1`), 16 steps of 16 rows at a time: 16 loads, a transpose in registers and 16
/// stores, where one element at a time took a load and a store each (and every task of a
/// product copies its rows again).
///
/// # Safety
/// The CPU has AVX-512F; `rows <= MR_MANY`, `kc <= KC`, and for `r < rows`, `p < kc`,
/// `a + r·a_rs + p·a_cs` is inside its allocation.
#[target_feature(enable = "avx512f")]
unsafe fn copy_steps(steps: &mut Steps, (a, a_rs, a_cs): (*const f32, usize, usize), rows: usize, kc: usize) {
    let out = steps.0.as_mut_ptr().cast::<f32>();
    if a_cs != 1 {
        for p in 0..kc {
            for r in 0..rows {
                // SAFETY: `r < rows`, `p < kc` (contract); step `p` of `steps` holds
                // `MR_MANY > r` floats.
                unsafe { *out.add(p * MR_MANY + r) = *a.add(r * a_rs + p * a_cs) };
            }
        }
        return;
    }
    for p in (0..kc).step_by(16) {
        let lanes = (kc - p).min(16);
        let mask = lane_mask(lanes);
        // SAFETY: the lanes set are steps `p..p + lanes < kc` of row `r < rows`, inside `a`
        // (contract); rows past `rows` are zeros, never read from `a`.
        let r: [__m512; 16] = std::array::from_fn(|r| match r < rows {
            true => unsafe { _mm512_maskz_loadu_ps(mask, a.add(r * a_rs + p)) },
            false => _mm512_setzero_ps(),
        });
        for (q, w) in transpose(r).into_iter().take(lanes).enumerate() {
            // SAFETY: step `p + q < kc <= KC` of `steps`, 64-byte aligned.
            unsafe { _mm512_store_ps(out.add((p + q) * MR_MANY), w) };
        }
    }
}

/// A chunk of `k` for [`one_panel`]: `kc` steps of the block's rows of `a`, step-major
/// (`MR_MANY` floats a step); whether it is the first chunk (the sums start at 0, else at
/// what `c` holds) and, for the last, `alpha`.
struct Chunk {
    steps: *const f32,
    kc: usize,
    first: bool,
    alpha: Option<f32>,
}

/// `R` rows by one panel over one chunk of `k`: `R` sums, each step one load of the panel's
/// row and `R` multiply-adds with broadcasts from the chunk's step.
///
/// # Safety
/// The CPU has AVX-512F; `chunk.steps` holds `chunk.kc` steps of `MR_MANY` floats;
/// `panel` holds `chunk.kc` rows of its width `w <= PANEL`; for `r < R` and `j < w`,
/// `c + r·c_rs + j` is inside its allocation.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn one_panel<const R: usize>(
    chunk: &Chunk,
    (c, c_rs, panel, w): (*mut f32, usize, *const f32, usize),
) {
    let mask = lane_mask(w);
    let mut s = [_mm512_setzero_ps(); R];
    if !chunk.first {
        for (r, s) in s.iter_mut().enumerate() {
            // SAFETY: row `r` of the block of `c`, the lanes set (contract).
            *s = unsafe { _mm512_maskz_loadu_ps(mask, c.add(r * c_rs)) };
        }
    }
    for p in 0..chunk.kc {
        // SAFETY: row `p < kc` of the panel and step `p` of the chunk (contract).
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, panel.add(p * w));
            _mm_prefetch::<_MM_HINT_T0>(panel.wrapping_add((p + AHEAD) * w).cast());
            let step = chunk.steps.add(p * MR_MANY);
            for (r, s) in s.iter_mut().enumerate() {
                *s = _mm512_fmadd_ps(_mm512_set1_ps(*step.add(r)), x, *s);
            }
        }
    }
    let alpha = chunk.alpha.map(|alpha| _mm512_set1_ps(alpha));
    for (r, &s) in s.iter().enumerate() {
        let s = alpha.map_or(s, |alpha| _mm512_mul_ps(s, alpha));
        // SAFETY: row `r` of the block of `c`, the lanes set (contract).
        unsafe { _mm512_mask_storeu_ps(c.add(r * c_rs), mask, s) };
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

    /// `c = alpha a b` through `attnc_sgemm_packed`, `c` with the strides `(c_rs, c_cs)` and
    /// `a` with its own, `b` packed: `c`'s elements of the product, row-major.
    fn product(
        (m, n, k): (usize, usize, usize),
        (c_rs, c_cs): (usize, usize),
        (a, a_rs, a_cs): (&[f32], usize, usize),
        packed: &[f32],
        alpha: f32,
    ) -> Vec<f32> {
        assert!(c_rs >= n * c_cs && a.len() >= m * k && packed.len() >= n * k);
        let mut c = vec![f32::NAN; m * c_rs];
        let i = |x: usize| x as i64;
        // SAFETY: `c` holds `m` rows of `c_rs >= n·c_cs` floats, `a` is `m × k` as its
        // strides say, and `packed` holds `n·k` floats (asserted).
        unsafe {
            attnc_sgemm_packed(
                i(m),
                i(n),
                i(k),
                c.as_mut_ptr(),
                i(c_rs),
                i(c_cs),
                a.as_ptr(),
                i(a_rs),
                i(a_cs),
                packed.as_ptr(),
                alpha,
                i(PANEL),
                std::ptr::null(),
                0,
                std::ptr::null(),
                0,
                0,
            )
        };
        c.into_iter().step_by(c_cs).collect()
    }

    /// Small integers: every product and sum is exact, whatever the order.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + seed * 13) % 11) as f32 - 5.0)
            .collect()
    }

    /// Up to [`super::MR`] rows, each column of `c` is `U` partial sums over `k` (steps
    /// `p ≡ u mod U`, `U` by the row count as the blocks have it), each a chain of fused
    /// multiply-adds, added in order and scaled: the bits of a scalar loop in that order, on
    /// every vector width (the AVX-512 block's lanes and the AVX2 one's), with values whose
    /// products and sums round.
    #[test]
    fn few_row_products_sum_in_the_blocks_order_at_every_width() {
        let partial_sums = |m: usize| match m {
            1 | 2 => 4,
            3 | 4 => 2,
            _ => 1,
        };
        for m in 1..=super::MR {
            for (n, k) in [(16, 37), (23, 64), (7, 5), (40, 130)] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
                let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 3.0).collect();
                let packed = pack(&b, k, n);
                let u = partial_sums(m);
                let mut want = vec![0.0f32; m * n];
                for i in 0..m {
                    for j in 0..n {
                        let mut s = vec![0.0f32; u];
                        for p in 0..k {
                            // The steps past the last whole round of `u` go to the first sum.
                            let which = if p < k / u * u { p % u } else { 0 };
                            s[which] = a[i * k + p].mul_add(b[p * n + j], s[which]);
                        }
                        want[i * n + j] = s.iter().skip(1).fold(s[0], |acc, x| acc + x) * 0.75;
                    }
                }
                let c = product((m, n, k), (n, 1), (&a, k, 1), &packed, 0.75);
                if super::super::lanes().is_some() {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&c), bits(&want), "m {m}, n {n}, k {k}");
                }
            }
        }
    }

    /// Past [`super::MR`] rows, each element of `c` is one chain of fused multiply-adds over
    /// `k` in order, then scaled: the bits of that scalar loop on every vector width, with
    /// values whose products and sums round, and `k` past a chunk of steps (`KC`).
    #[test]
    fn many_row_products_sum_each_element_in_one_chain_at_every_width() {
        for m in super::MR + 1..=33 {
            for (n, k) in [(16, 37), (23, 64), (7, 5), (40, 600)] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
                let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 3.0).collect();
                let packed = pack(&b, k, n);
                let want: Vec<f32> = (0..m * n)
                    .map(|x| {
                        let (i, j) = (x / n, x % n);
                        (0..k).fold(0.0f32, |s, p| a[i * k + p].mul_add(b[p * n + j], s)) * 0.75
                    })
                    .collect();
                let c = product((m, n, k), (n, 1), (&a, k, 1), &packed, 0.75);
                if super::super::lanes().is_some() {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&c), bits(&want), "m {m}, n {n}, k {k}");
                }
            }
        }
    }

    #[test]
    fn packed_products_equal_a_plain_loop_for_every_few_rows_and_tail() {
        // Every row count up to the lowering's threshold (32) and past it: blocks of two
        // panels up to 8 rows, of one panel and up to 16 rows past it, and the tails of
        // each; `k` past a chunk of steps (`KC`), and `a` with rows or columns contiguous.
        for m in 1..=40 {
            for (n, k) in [
                (1, 1),
                (15, 3),
                (16, 7),
                (17, 5),
                (33, 9),
                (50, 31),
                (64, 64),
                (97, 130),
                (40, 1100),
                (20, 0),
            ] {
                let (a, b) = (values(m * k, m), values(k * n, n));
                let packed = pack(&b, k, n);
                let mut want = vec![0.0f32; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = 0.5 * (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum::<f32>();
                    }
                }
                // `c = 0.5 a b` with `c`'s and `a`'s strides as given.
                let product = |c_strides, a_strided| product((m, n, k), c_strides, a_strided, &packed, 0.5);
                // Row-major `c` (the streaming product where the CPU has AVX2); `c` with a
                // column stride of 2 (the `gemm` crate, panel by panel); `a` read through
                // its transpose (column-major: rows 1 apart).
                assert_eq!(product((n, 1), (&a, k, 1)), want, "m {m}, n {n}, k {k}");
                assert_eq!(
                    product((2 * n, 2), (&a, k, 1)),
                    want,
                    "m {m}, n {n}, k {k}, strided c"
                );
                let at: Vec<f32> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
                assert_eq!(
                    product((n, 1), (&at, 1, m)),
                    want,
                    "m {m}, n {n}, k {k}, a by columns"
                );
            }
        }
    }
}
