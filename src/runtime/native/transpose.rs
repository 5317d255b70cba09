//! A 16 × 16 block of floats transposed in AVX-512 registers: the packed product's copy of
//! `a`'s rows step-major (`panel.rs`) and the attention tile's copy of the keys read in
//! place as `kᵀ` (`tile.rs`).

use std::arch::x86_64::*;

/// The transpose of a 16 × 16 block held as 16 rows: the result's vector `q` is column `q`.
/// Pairs of 32-bit, then 64-bit, lanes interleaved within each 128-bit lane, then 128-bit
/// lanes gathered across vectors in two rounds.
#[target_feature(enable = "avx512f")]
pub fn transpose(r: [__m512; 16]) -> [__m512; 16] {
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
