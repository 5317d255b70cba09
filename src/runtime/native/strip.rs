//! The product of many rows by a weight packed once in strips of [`STRIP`] columns
//! ([`crate::kernel::Gemm::packed`]), on the `gemm` crate's own microkernels.
//!
//! For a product whose `c` has contiguous rows the crate runs its microkernel on `cᵀ`: 64
//! columns of `c` (four 512-bit vectors) by 6 rows, each step loading 64 floats of `b` from
//! one strip it packed and broadcasting 6 elements of `a`. It packs those strips at every
//! call, which at a few hundred rows is a tenth of the product's time (seed S: 6 % of the
//! call). Here the prologue has packed them once, and the same microkernels read them in
//! place: the same multiply-adds in the same order per element of `c` (one chain over each
//! chunk of [`KC`] steps), with the packing left out. Each block of 6 rows sweeps
//! [`STRIPS_AT_ONCE`] strips before the next block, so that their chunk stays in L2 while
//! every block reads it and the 6 rows of `a` stay in L1.
//!
//! Without AVX-512 the crate's 256-bit microkernels read 16 columns at a time from the
//! same strips: the same layout on every CPU, so a plan never depends on the machine.

use super::finish::Finish;
use super::Lanes;
use crate::kernel::STRIP;
use gemm_f32::microkernel::{avx512f::f32 as sixteen, fma::f32 as eight};

/// A microkernel of the crate: `m`, `n`, `k`, `dst`, its packed left operand, its right
/// one, `dst`'s column and row strides, the left operand's step, the right one's row and
/// column strides, `alpha`, `beta`, how `dst` is updated, three conjugation flags (unused
/// for floats) and a pointer it may prefetch from.
type Kernel = unsafe fn(
    usize,
    usize,
    usize,
    *mut f32,
    *const f32,
    *const f32,
    isize,
    isize,
    isize,
    isize,
    isize,
    f32,
    f32,
    u8,
    bool,
    bool,
    bool,
    *const f32,
);

/// Rows of `a` (columns of the microkernel's `cᵀ`) per call: the microkernels' widest.
const NR: usize = 6;

/// Steps of `k` per chunk: a strip's chunk is then 128 KiB and [`STRIPS_AT_ONCE`] of them
/// half of a 1 MiB L2, 6 rows of `a` 12 KiB of L1.
const KC: usize = 512;

/// Strips every block of rows reads before the next strips (see [`KC`]).
const STRIPS_AT_ONCE: usize = 4;

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j]`, then `finish`, for `i < m`, `j < n`, with `b`
/// packed in strips of [`STRIP`] columns from the tile's first column (a multiple of
/// [`STRIP`]) and a unit column stride for `c`: for each chunk of [`KC`] steps, each group
/// of [`STRIPS_AT_ONCE`] strips, each block of up to [`NR`] rows ([`row_blocks`]), each
/// strip, one microkernel call. The first chunk writes `c` (with a bias, the block's rows
/// are first set to it and the sums added, one rounding for both), the others add to it;
/// after the last, the residual and ReLU go over the block while it is in L1.
///
/// # Safety
/// The CPU has AVX-512F for [`Lanes::Sixteen`], AVX2 and FMA for [`Lanes::Eight`]; the
/// `n·k` floats from `b` and the [`crate::kernel::PANEL`] after them are inside their
/// allocation; for `i < m`, `j < n`, `p < k` the elements `c + i·c_rs + j`,
/// `a + i·a_rs + p·a_cs` and those `finish` reads (as [`Finish::over`]'s contract says) are
/// inside theirs, and `c`'s are this call's alone.
pub unsafe fn sgemm(
    lanes: Lanes,
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    b: *const f32,
    alpha: f32,
    finish: &Finish,
) {
    let strips = n.div_ceil(STRIP);
    let mut p0 = 0;
    while p0 < k {
        let kc = (k - p0).min(KC);
        for first in (0..strips).step_by(STRIPS_AT_ONCE) {
            let group = first..(first + STRIPS_AT_ONCE).min(strips);
            // The group's bias, a row of each strip, read once for all its blocks of rows.
            let mut rows_of_bias = [[0.0f32; STRIP]; STRIPS_AT_ONCE];
            let bias = finish.bias.filter(|_| p0 == 0).map(|(bias, bias_cs)| {
                for (s, row) in group.clone().zip(&mut rows_of_bias) {
                    let j = s * STRIP;
                    for (q, x) in row.iter_mut().take((n - j).min(STRIP)).enumerate() {
                        // SAFETY: column `j + q < n` of the bias (contract).
                        *x = unsafe { *bias.add((j + q) * bias_cs) };
                    }
                }
                &rows_of_bias
            });
            for (i, rows) in row_blocks(m) {
                for (g, s) in group.clone().enumerate() {
                    let (j, width) = (s * STRIP, (n - s * STRIP).min(STRIP));
                    let call = Call {
                        dims: (width, rows, kc),
                        c: c.wrapping_add(i * c_rs + j),
                        c_rs,
                        // The strip of columns `j..j + width` is `k` rows of `width` floats
                        // from `b + j·k`; its chunk starts at row `p0`.
                        strip: b.wrapping_add(j * k + p0 * width),
                        a: (a.wrapping_add(i * a_rs + p0 * a_cs), a_rs, a_cs),
                        alpha,
                        start: match (p0, bias) {
                            (0, Some(rows)) => Start::Bias(&rows[g][..width]),
                            (0, None) => Start::Zero,
                            _ => Start::Sums,
                        },
                    };
                    // SAFETY: rows `i..i + rows` and columns `j..j + width` are the
                    // product's, steps `p0..p0 + kc` are `k`'s, and the strip's rows are
                    // inside the `n·k` floats from `b`, its last row's vectors inside the
                    // `PANEL` floats after them (this function's contract, which is what
                    // `Call::run` asks).
                    unsafe { call.run(lanes) };
                    if p0 + kc == k {
                        // SAFETY: the block's rows and columns are the product's, and
                        // `finish` reads its elements of the residual (contract).
                        unsafe { finish.after((c, c_rs), (i, j), (rows, width)) };
                    }
                }
            }
        }
        p0 += kc;
    }
}

/// The blocks of `m` rows, each its first row and its size: as few as blocks of [`NR`]
/// allow, as equal as they can be, so that no block runs a narrow microkernel (37 rows in
/// blocks of 6 left one row to a microkernel of one broadcast a step, a product of 37 rows
/// 14 % slower on two threads; in blocks of 5 and 6 it is not).
fn row_blocks(m: usize) -> impl Iterator<Item = (usize, usize)> {
    let blocks = m.div_ceil(NR);
    let (small, larger) = (m / blocks.max(1), m % blocks.max(1));
    (0..blocks).map(move |b| (b * small + b.min(larger), small + usize::from(b < larger)))
}

/// What a microkernel call adds its sums to: nothing (the first chunk of `k`), the bias of
/// the strip's columns (the first chunk, with a bias), or the sums `c` holds (a later
/// chunk).
enum Start<'a> {
    Zero,
    Bias(&'a [f32]),
    Sums,
}

/// One microkernel call: `width` columns of `c` (at most [`STRIP`]) by `rows` rows (at most
/// [`NR`]) over `kc` steps, the strip's rows `width` floats apart.
struct Call<'a> {
    dims: (usize, usize, usize),
    c: *mut f32,
    c_rs: usize,
    strip: *const f32,
    a: (*const f32, usize, usize),
    alpha: f32,
    start: Start<'a>,
}

impl Call<'_> {
    /// Runs the call on the microkernels of `lanes`: at 512 bits one call for the strip
    /// (64 columns in four vectors, or fewer vectors for a narrower strip), at 256 bits one
    /// per 16 columns.
    ///
    /// # Safety
    /// The CPU runs `lanes`; for `r < rows`, `q < width`, `p < kc`, `c + r·c_rs + q` and
    /// `a + r·a_rs + p·a_cs` are inside their allocations, and the floats from
    /// `strip + p·width` to `strip + p·width + ⌈width/16⌉·16` are inside the strip's.
    unsafe fn run(&self, lanes: Lanes) {
        let (width, rows, kc) = self.dims;
        let (a, a_rs, a_cs) = self.a;
        // The crate's microkernel computes `dst = beta · Σ` (status 0) or `dst + beta · Σ`
        // (status 1) for `dst` of `m × n` with strides `(dst_rs, dst_cs)`: here `cᵀ`, its
        // `m` the columns and `n` the rows, the strip its packed left operand and the rows
        // of `a` its right one.
        let status = match self.start {
            Start::Zero => 0,
            Start::Bias(row) => {
                for r in 0..rows {
                    // SAFETY: row `r < rows` of the block, its `width` columns, are this
                    // call's (contract); the bias row has `width` floats.
                    let dst = unsafe { std::slice::from_raw_parts_mut(self.c.add(r * self.c_rs), width) };
                    dst.copy_from_slice(row);
                }
                1
            }
            Start::Sums => 1,
        };
        let call = |kernel: Kernel, q: usize, cols: usize| {
            // SAFETY: the kernel reads `kc` steps of its `⌈cols/lanes⌉` vectors from
            // `strip + q`, `width` floats apart, which stay within the floats this
            // function's contract gives (`q + ⌈cols/lanes⌉·lanes ≤ ⌈width/16⌉·16`), the
            // `rows × kc` elements of `a`, and writes the `cols × rows` elements of `c`
            // from column `q`; the CPU runs the kernel's instructions (contract).
            unsafe {
                kernel(
                    cols,
                    rows,
                    kc,
                    self.c.add(q),
                    self.strip.add(q),
                    a,
                    self.c_rs as isize,
                    1,
                    width as isize,
                    a_cs as isize,
                    a_rs as isize,
                    1.0,
                    self.alpha,
                    status,
                    false,
                    false,
                    false,
                    self.strip,
                )
            }
        };
        match lanes {
            Lanes::Sixteen => call(sixteen::UKR[width.div_ceil(16) - 1][rows - 1], 0, width),
            Lanes::Eight => {
                for q in (0..width).step_by(16) {
                    let cols = (width - q).min(16);
                    call(eight::UKR[cols.div_ceil(8) - 1][rows - 1], q, cols);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{sgemm, Finish, Lanes, KC};
    use crate::kernel::{PANEL, STRIP};

    /// `b [k, n]` row-major in strips ([`crate::kernel::Gemm::packed`]), then the
    /// [`PANEL`] floats past them, NaN: a lane read from them must never reach `c`.
    fn pack(b: &[f32], k: usize, n: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(n * k + PANEL);
        for j0 in (0..n).step_by(STRIP) {
            let w = (n - j0).min(STRIP);
            for p in 0..k {
                out.extend_from_slice(&b[p * n + j0..p * n + j0 + w]);
            }
        }
        out.extend([f32::NAN; PANEL]);
        out
    }

    #[test]
    fn row_blocks_cover_the_rows_in_as_few_and_as_equal_blocks_as_can_be() {
        for m in 0..200 {
            let blocks: Vec<(usize, usize)> = super::row_blocks(m).collect();
            assert_eq!(blocks.len(), m.div_ceil(super::NR), "{m} rows");
            let mut next = 0;
            for &(i, rows) in &blocks {
                assert_eq!(i, next, "{m} rows: {blocks:?}");
                assert!(
                    rows <= super::NR && rows + 1 >= m / blocks.len().max(1),
                    "{m}: {blocks:?}"
                );
                next += rows;
            }
            assert_eq!(next, m, "{m} rows: {blocks:?}");
            let sizes = blocks.iter().map(|b| b.1);
            assert!(
                sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0) <= 1,
                "{m}: {blocks:?}"
            );
        }
    }

    /// Values whose sums round: the test sees the order of the additions.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 37 + seed * 11) % 101) as f32 / 7.0 - 7.0)
            .collect()
    }

    /// Each element of `c` is, per chunk of [`KC`] steps, one chain of fused multiply-adds
    /// in order from 0, scaled by `alpha` for the first chunk (and added to the bias by the
    /// same fused multiply-add, with one) and added to `c` by a fused multiply-add for the
    /// others, then the residual added and ReLU (NaN kept, -0 kept): the bits of that
    /// scalar loop on both vector widths, for every row count of a block and its tail, full
    /// and narrower strips, several strip groups and chunks, a strided bias, and `a` read
    /// through its transpose.
    #[test]
    fn strip_products_are_the_microkernels_chains_at_both_widths() {
        let widths: Vec<Lanes> = [Lanes::Sixteen, Lanes::Eight]
            .into_iter()
            .filter(|l| match l {
                Lanes::Sixteen => super::super::tile::available(),
                Lanes::Eight => super::super::avx2_fma(),
            })
            .collect();
        for m in [1, 5, 6, 7, 13, 40] {
            for (n, k) in [
                (1, 3),
                (16, 9),
                (40, 1),
                (64, 513),
                (65, 17),
                (300, 64),
                (130, 1100),
            ] {
                let (mut a, b) = (values(m * k, m), values(k * n, n));
                a[0] = f32::NAN; // row 0 all NaN: ReLU keeps it
                let (bias, residual) = (values(2 * n, 5), values(m * (n + 1), 6));
                let packed = pack(&b, k, n);
                let alpha = 0.75f32;
                let want = |(with_bias, with_residual, relu): (bool, bool, bool)| -> Vec<f32> {
                    (0..m * n)
                        .map(|x| {
                            let (i, j) = (x / n, x % n);
                            let mut c = 0.0f32;
                            for p0 in (0..k).step_by(KC) {
                                let chunk = p0..(p0 + KC).min(k);
                                let s = chunk.fold(0.0f32, |s, p| a[i * k + p].mul_add(b[p * n + j], s));
                                c = match (p0, with_bias) {
                                    (0, false) => alpha * s,
                                    (0, true) => alpha.mul_add(s, bias[2 * j]),
                                    _ => alpha.mul_add(s, c),
                                };
                            }
                            if with_residual {
                                c += residual[i * (n + 1) + j];
                            }
                            // `maximum(c, 0)` as `codegen/math.rs` has it.
                            match (relu, c.is_nan(), c >= 0.0) {
                                (false, _, _) => c,
                                (true, true, _) => c + 0.0,
                                (true, false, true) => c,
                                (true, false, false) => 0.0,
                            }
                        })
                        .collect()
                };
                let at = |t: &[f32]| t.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let cases = [
                    (false, (false, false, false)),
                    (true, (false, false, false)),
                    (false, (true, false, false)),
                    (false, (false, false, true)),
                    (true, (true, true, true)),
                ];
                for &lanes in &widths {
                    for (transposed, (with_bias, with_residual, relu)) in cases {
                        let (a, a_rs, a_cs) = match transposed {
                            false => (a.clone(), k, 1),
                            true => ((0..k * m).map(|x| a[(x % m) * k + x / m]).collect(), 1, m),
                        };
                        let finish = Finish {
                            bias: with_bias.then_some((bias.as_ptr(), 2)),
                            residual: with_residual.then_some((residual.as_ptr(), n + 1)),
                            relu,
                        };
                        let mut c = vec![f32::NAN; m * (n + 3)];
                        // SAFETY: the CPU runs `lanes` (filtered above); `packed` holds the
                        // `n·k` floats and `PANEL` more; `c` holds `m` rows of `n + 3`
                        // floats, `a` the `m × k` its strides reach, `bias` `2n` and
                        // `residual` `m` rows of `n + 1`.
                        unsafe {
                            sgemm(
                                lanes,
                                (m, n, k),
                                (c.as_mut_ptr(), n + 3),
                                (a.as_ptr(), a_rs, a_cs),
                                packed.as_ptr(),
                                alpha,
                                &finish,
                            )
                        };
                        let got: Vec<f32> = c.chunks(n + 3).flat_map(|row| row[..n].to_vec()).collect();
                        let what = format!(
                            "m {m}, n {n}, k {k}, transposed {transposed}, bias {with_bias}, \
                             residual {with_residual}, relu {relu}"
                        );
                        assert_eq!(at(&got), at(&want((with_bias, with_residual, relu))), "{what}");
                        assert!(c.chunks(n + 3).all(|row| row[n..].iter().all(|x| x.is_nan())));
                    }
                }
            }
        }
    }

    /// Where `c`'s columns are not contiguous the strips go to the `gemm` crate one by one
    /// and the bias, the residual and ReLU go after: with small integers every sum is exact
    /// in any order, so the result is the plain loop's.
    #[test]
    fn strips_into_a_strided_c_take_the_crate_and_the_rest_after() {
        let (m, n, k) = (9, 70, 600);
        let small = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7 + seed * 13) % 11) as f32 - 5.0)
                .collect()
        };
        let (a, b, bias, residual) = (small(m * k, 1), small(k * n, 2), small(n, 3), small(m * n, 4));
        let packed = pack(&b, k, n);
        let mut c = vec![f32::NAN; m * 2 * n];
        let i = |x: usize| x as i64;
        // SAFETY: `c` holds `m` rows of `2n` floats (column stride 2), `a` is `m × k`,
        // `packed` the `n·k` floats and `PANEL` more, `bias` `n` and `residual` `m × n`.
        unsafe {
            super::super::attnc_sgemm_packed(
                i(m),
                i(n),
                i(k),
                c.as_mut_ptr(),
                i(2 * n),
                2,
                a.as_ptr(),
                i(k),
                1,
                packed.as_ptr(),
                0.5,
                i(STRIP),
                bias.as_ptr(),
                1,
                residual.as_ptr(),
                i(n),
                1,
            )
        };
        for r in 0..m {
            for j in 0..n {
                let sum = 0.5 * (0..k).map(|p| a[r * k + p] * b[p * n + j]).sum::<f32>();
                let want = (sum + bias[j] + residual[r * n + j]).max(0.0);
                assert_eq!(c[r * 2 * n + 2 * j], want, "c[{r}, {j}]");
                assert!(c[r * 2 * n + 2 * j + 1].is_nan(), "c[{r}, {j}] and a half");
            }
        }
    }
}
