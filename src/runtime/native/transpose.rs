//! Transposes on 512-bit vectors: a 16 × 16 block in registers, and a transposing copy.
//!
//! The copy is what a layout copy that transposes (the attention kernel's `kᵀ` layout,
//! `x.transpose(-1, -2).contiguous()`) does: the generated 128-bit code gathers such a row
//! four scalars at a time (at about 8 GB/s); here each block of 16 × 16 is 16 aligned-width
//! loads, the register transpose and 16 stores. A copy moves bits, so both give the same
//! result, NaN payloads included.

use super::lane_mask;
use std::arch::x86_64::*;

/// The transpose of a 16 × 16 block held as 16 rows: the result's vector `q` is column `q`.
/// Pairs of 32-bit, then 64-bit, lanes interleaved within each 128-bit lane, then 128-bit
/// lanes gathered across vectors in two rounds.
#[target_feature(enable = "avx512f")]
pub fn block(r: [__m512; 16]) -> [__m512; 16] {
    let pd = _mm512_castps_pd;
    let ps = _mm512_castpd_ps;
    // `t[2j]`, `t[2j + 1]`: rows `2j` and `2j + 1` interleaved, columns 4L, 4L + 1 and
    // 4L + 2, 4L + 3 in 128-bit lane L.
    let t: [__m512; 16] = std::array::from_fn(|x| match x % 2 {
        0 => _mm512_unpacklo_ps(r[x], r[x + 1]),
        _ => _mm512_unpackhi_ps(r[x - 1], r[x]),
    });
    // `u[4g + c]`: rows `4g..4g + 4` of column 4L + c in lane L.
    let u: [__m512; 16] = std::array::from_fn(|x| {
        let (g, c) = (x / 4, x % 4);
        let (lo, hi) = (t[4 * g + c / 2], t[4 * g + 2 + c / 2]);
        match c % 2 {
            0 => ps(_mm512_unpacklo_pd(pd(lo), pd(hi))),
            _ => ps(_mm512_unpackhi_pd(pd(lo), pd(hi))),
        }
    });
    // `v[8h + 2c + e]`: groups `2h` and `2h + 1` of column c's lanes `e` and `e + 2`.
    let v: [__m512; 16] = std::array::from_fn(|x| {
        let (h, c, e) = (x / 8, (x % 8) / 2, x % 2);
        let (a, b) = (u[8 * h + c], u[8 * h + 4 + c]);
        match e {
            0 => _mm512_shuffle_f32x4::<0x88>(a, b),
            _ => _mm512_shuffle_f32x4::<0xdd>(a, b),
        }
    });
    // Column `4L + c`: from `v` of both halves, lanes `L % 2` of the pair `L / 2`.
    std::array::from_fn(|q| {
        let (l, c) = (q / 4, q % 4);
        let (a, b) = (v[2 * c + l % 2], v[8 + 2 * c + l % 2]);
        match l / 2 {
            0 => _mm512_shuffle_f32x4::<0x88>(a, b),
            _ => _mm512_shuffle_f32x4::<0xdd>(a, b),
        }
    })
}

/// `dst[r·dst_rs + c] = src[r + c·src_cs]` for `r < rows`, `c < cols`: `src`'s rows are
/// contiguous along `r`, `dst`'s along `c`. Blocks of 16 × 16; partial ones with masked
/// loads and stores, so nothing outside the two matrices is touched.
///
/// # Safety
/// The CPU has AVX-512F; for `r < rows`, `c < cols`, `src + r + c·src_cs` and
/// `dst + r·dst_rs + c` are inside their allocations, and no element of `dst` is one of
/// `src`'s or written by another thread during the call.
#[target_feature(enable = "avx512f")]
pub unsafe fn copy(
    rows: usize,
    cols: usize,
    (src, src_cs): (*const f32, usize),
    (dst, dst_rs): (*mut f32, usize),
) {
    for r0 in (0..rows).step_by(16) {
        let rr = (rows - r0).min(16);
        let row_mask = lane_mask(rr);
        for c0 in (0..cols).step_by(16) {
            let cc = (cols - c0).min(16);
            let col_mask = lane_mask(cc);
            // SAFETY: the lanes set are rows `r0..r0 + rr < rows` of column `c0 + c < cols`
            // (contract); the columns past `cols` are zeros, never read.
            let v: [__m512; 16] = std::array::from_fn(|c| match c < cc {
                true => unsafe { _mm512_maskz_loadu_ps(row_mask, src.add(r0 + (c0 + c) * src_cs)) },
                false => _mm512_setzero_ps(),
            });
            for (r, w) in block(v).into_iter().take(rr).enumerate() {
                // SAFETY: the lanes set are columns `c0..c0 + cc <= cols` of row
                // `r0 + r < rows` of `dst` (contract).
                unsafe { _mm512_mask_storeu_ps(dst.add((r0 + r) * dst_rs + c0), col_mask, w) };
            }
        }
    }
}

/// `attnc_transpose(rows, cols, src, src_cs, dst, dst_rs)`: [`copy`] for JIT code. The code
/// generator calls it only where [`super::use_tile`] holds (the shim is bound to no symbol
/// otherwise).
///
/// # Safety
/// [`copy`]'s: the CPU has AVX-512F, and every element reached is inside its allocation,
/// `dst`'s this call's alone. The JIT code calls it for a block of a layout copy's rows
/// (`codegen/map.rs`), whose iteration space `Plan::validate` proved inside both buffers,
/// each task writing its own rows, the input not overlapping the output.
pub unsafe extern "C" fn attnc_transpose(
    rows: i64,
    cols: i64,
    src: *const f32,
    src_cs: i64,
    dst: *mut f32,
    dst_rs: i64,
) {
    if rows <= 0 || cols <= 0 || src_cs < 0 || dst_rs < 0 {
        return;
    }
    let u = |x: i64| x as usize;
    // SAFETY: the sizes and strides are not negative (checked), and this function's
    // contract is `copy`'s.
    unsafe { copy(u(rows), u(cols), (src, u(src_cs)), (dst, u(dst_rs))) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposing_copy_moves_every_element_and_no_other() {
        if !super::super::tile::available() {
            return;
        }
        const SENTINEL: f32 = -7.5;
        for (rows, cols) in [(1, 1), (3, 5), (16, 16), (17, 33), (64, 20), (5, 100)] {
            let (src_cs, dst_rs) = (rows + 2, cols + 3);
            let src: Vec<f32> = (0..cols * src_cs).map(|x| x as f32 * 0.5).collect();
            let mut dst = vec![SENTINEL; rows * dst_rs];
            // SAFETY: the CPU has AVX-512F (checked), `src` holds `cols` columns of
            // `src_cs >= rows` floats, `dst` `rows` rows of `dst_rs >= cols`.
            unsafe { copy(rows, cols, (src.as_ptr(), src_cs), (dst.as_mut_ptr(), dst_rs)) };
            for r in 0..rows {
                for c in 0..dst_rs {
                    let want = match c < cols {
                        true => src[r + c * src_cs],
                        false => SENTINEL,
                    };
                    assert_eq!(dst[r * dst_rs + c], want, "{rows} x {cols}: row {r} column {c}");
                }
            }
        }
    }
}
