//! A few rows times a matrix read by its rows, on 256-bit vectors (AVX2 and FMA):
//! `c[i, j] = alpha · Σ_p a[i, p] b[j, p]`. A decode step's attention scores `q kᵀ` read
//! the key cache in place, each key's row of `dk` floats contiguous, so `kᵀ` has no unit
//! column stride: the `gemm` crate packed it first, for the one to four query heads that
//! use it. Here each key's row is read once, in place, as dot products.
//!
//! Eight keys at a time: eight sums, one per key, each over `k` in steps of 8 lanes, then
//! folded into one vector of the eight keys' scores by a tree of horizontal adds. A lane of
//! the result reads only its key's sum, so a key's score has the same bits wherever it
//! falls in a group of eight (a group of fewer keys leaves the others' sums at 0).

use super::lane_mask8;
use std::arch::x86_64::*;

/// The most rows `attnc_sgemm` sends here: each row reads the group's keys again, from
/// L1, where the `gemm` crate's packing pays for itself with more rows.
pub const MAX_M: usize = 4;

/// Keys per group: one sum per key, folded into one vector of scores.
const KEYS: usize = 8;

/// Steps of `k` per vector.
const LANES: usize = 8;

/// `c[i, j] = alpha · Σ_p a[i, p] b[j, p] (+ c[i, j] when acc)` for `i < m`, `j < n`,
/// `p < k`, with unit strides for `a`'s columns, `b`'s `p` and `c`'s columns.
///
/// # Safety
/// The CPU has AVX2 and FMA; for `i < m`, `j < n`, `p < k` the elements
/// `c + i·c_rs + j`, `a + i·a_rs + p` and `b + j·b_rs + p` are inside their allocations.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    (a, a_rs): (*const f32, usize),
    (b, b_rs): (*const f32, usize),
    alpha: f32,
    acc: bool,
) {
    let steps = Steps {
        k,
        whole: k / LANES * LANES,
        tail: lane_mask8(k % LANES),
    };
    let mut j = 0;
    while j < n {
        let keys = (n - j).min(KEYS);
        let mask = lane_mask8(keys);
        ask_ahead(b.wrapping_add((j + AHEAD) * b_rs), b_rs, k);
        for i in 0..m {
            let out = Out {
                at: c.wrapping_add(i * c_rs + j),
                mask,
                alpha,
                acc,
            };
            let (row, group) = (a.wrapping_add(i * a_rs), (b.wrapping_add(j * b_rs), b_rs));
            // SAFETY: row `i < m` of `a`, keys `j..j + keys <= n` of `b` and their scores
            // in `c` are inside their allocations (this function's contract).
            unsafe {
                match keys {
                    8 => group_of::<8>(&steps, row, group, &out),
                    7 => group_of::<7>(&steps, row, group, &out),
                    6 => group_of::<6>(&steps, row, group, &out),
                    5 => group_of::<5>(&steps, row, group, &out),
                    4 => group_of::<4>(&steps, row, group, &out),
                    3 => group_of::<3>(&steps, row, group, &out),
                    2 => group_of::<2>(&steps, row, group, &out),
                    _ => group_of::<1>(&steps, row, group, &out),
                }
            }
        }
        j += keys;
    }
}

/// Keys ahead of the group being scored whose rows are asked of the cache: the keys of a
/// decode step's tile stream from memory, each read once.
const AHEAD: usize = 4 * KEYS;

/// Asks the cache for the rows of `KEYS` keys from `first` (`b_rs` apart, `k` floats each),
/// a cache line at a time.
#[target_feature(enable = "sse")]
fn ask_ahead(first: *const f32, b_rs: usize, k: usize) {
    for t in 0..KEYS {
        for p in (0..k).step_by(16) {
            // A prefetch reads nothing and faults on nothing, so it may point past the keys.
            _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(t * b_rs + p).cast());
        }
    }
}

/// The inner dim: `k`, its whole steps of 8 and the mask of the last, partial one.
struct Steps {
    k: usize,
    whole: usize,
    tail: __m256i,
}

/// Where a group's scores go: the first, the lanes of its keys, `alpha`, and whether they
/// add to what `c` holds.
struct Out {
    at: *mut f32,
    mask: __m256i,
    alpha: f32,
    acc: bool,
}

/// The scores of one row of `a` with `N` keys of `b`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a`'s `k` floats, each of the `N` keys' `k` floats from
/// `b + t·b_rs`, and the `N` scores from `out.at` are inside their allocations.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn group_of<const N: usize>(steps: &Steps, a: *const f32, (b, b_rs): (*const f32, usize), out: &Out) {
    let mut s = [_mm256_setzero_ps(); KEYS];
    // SAFETY: steps `p..p + 8 <= whole <= k` of `a` and of each key (contract).
    for p in (0..steps.whole).step_by(LANES) {
        unsafe {
            let x = _mm256_loadu_ps(a.add(p));
            for (t, s) in s.iter_mut().enumerate().take(N) {
                *s = _mm256_fmadd_ps(x, _mm256_loadu_ps(b.add(t * b_rs + p)), *s);
            }
        }
    }
    if steps.whole < steps.k {
        // SAFETY: the masked loads touch steps `whole..k` only (a lane whose bit is clear
        // is neither read nor faulted on); masked lanes load 0, adding `0 · 0`.
        unsafe {
            let x = _mm256_maskload_ps(a.add(steps.whole), steps.tail);
            for (t, s) in s.iter_mut().enumerate().take(N) {
                let y = _mm256_maskload_ps(b.add(t * b_rs + steps.whole), steps.tail);
                *s = _mm256_fmadd_ps(x, y, *s);
            }
        }
    }
    let mut r = _mm256_mul_ps(fold(s), _mm256_set1_ps(out.alpha));
    // SAFETY: the lanes set are the group's `N` scores, inside `c` (contract); the others
    // are neither read nor written.
    unsafe {
        if out.acc {
            r = _mm256_add_ps(r, _mm256_maskload_ps(out.at, out.mask));
        }
        _mm256_maskstore_ps(out.at, out.mask, r);
    }
}

/// Lane `t` of the result: the sum of `s[t]`'s lanes, as `((0 + 1) + (2 + 3)) + ((4 + 5) +
/// (6 + 7))`, whatever the other vectors hold.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn fold(s: [__m256; KEYS]) -> __m256 {
    // Lanes 0..4 of each 128-bit half: pairs of `s[2u]` and `s[2u + 1]`, then quadruples.
    let pairs = [0, 2, 4, 6].map(|u| _mm256_hadd_ps(s[u], s[u + 1]));
    let low = _mm256_hadd_ps(pairs[0], pairs[1]);
    let high = _mm256_hadd_ps(pairs[2], pairs[3]);
    // `low` holds keys 0..4 (lanes 0..4 summed in its first half, 4..8 in its second),
    // `high` keys 4..8: the halves side by side, added.
    let first = _mm256_permute2f128_ps::<0x20>(low, high);
    let second = _mm256_permute2f128_ps::<0x31>(low, high);
    _mm256_add_ps(first, second)
}

#[cfg(test)]
mod tests {
    use super::{sgemm, MAX_M};

    /// The sum of one key's lanes in [`super::fold`]'s order.
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut lanes = [0.0f32; 8];
        for (p, (x, y)) in a.iter().zip(b).enumerate() {
            lanes[p % 8] = x.mul_add(*y, lanes[p % 8]);
        }
        let l = lanes;
        ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
    }

    /// Every row count, key count around a group and `k` around a step, `acc` or not:
    /// the bits of [`dot`] for each score, and nothing written outside the tile.
    #[test]
    fn scores_are_each_keys_lanes_summed_in_one_order() {
        if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")) {
            return;
        }
        // Full mantissas of both signs: products and sums that round, so that the order
        // and the fusing show in the bits.
        let value = |i: usize, s: usize| ((i * 37 + s) as f32 * 0.618_034).sin() * 2.0;
        for m in 1..=MAX_M {
            for n in [1, 5, 8, 9, 16, 23] {
                for k in [1, 7, 8, 13, 64] {
                    for acc in [false, true] {
                        let (a_rs, b_rs, c_rs) = (k + 3, k + 5, n + 7);
                        let a: Vec<f32> = (0..m * a_rs).map(|i| value(i, 1)).collect();
                        let b: Vec<f32> = (0..n * b_rs).map(|i| value(i, 2)).collect();
                        let c0: Vec<f32> = (0..m * c_rs).map(|i| value(i, 3)).collect();
                        let mut c = c0.clone();
                        // SAFETY: the CPU has AVX2 and FMA (checked), and the
                        // buffers hold every element the strides reach.
                        unsafe {
                            sgemm(
                                (m, n, k),
                                (c.as_mut_ptr(), c_rs),
                                (a.as_ptr(), a_rs),
                                (b.as_ptr(), b_rs),
                                0.7,
                                acc,
                            )
                        };
                        let sum =
                            |i: usize, j: usize| dot(&a[i * a_rs..i * a_rs + k], &b[j * b_rs..j * b_rs + k]);
                        let what = format!("{m}x{n}x{k}");
                        super::super::assert_tile((&c, &c0), (m, n, c_rs), (0.7, acc), sum, &what);
                    }
                }
            }
        }
    }
}
