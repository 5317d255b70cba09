//! A GEMM tile's epilogue on 512-bit vectors, called from the generated code after the
//! tile product where the epilogue is one of the forms of `codegen/tile_epilogue.rs`:
//! `c = act(c [+ bias] [+ pre]) [· second] [+ post]` over `rows × cols` of the tile, 16
//! columns at a time (the last ones masked); `second` is a paired epilogue's second
//! product (SwiGLU's up projection beside its gate).
//!
//! Each activation is the 128-bit Cranelift code's (`codegen/math.rs`, `codegen/emit.rs`)
//! operation for operation: the same `exp`, `erf` and `sigmoid` polynomials and range
//! handling, the same fused multiply-adds, the same order of every sum and product. Lanes
//! are independent, so a lane of a 512-bit vector computes what a lane of a 128-bit one
//! does: the bits are those of the generated code (`tests/native_epilogue.rs` compares the
//! two paths' outputs).

use super::exp::{horner, reduced};
use crate::codegen::{Activation, ERF_LARGE, ERF_SMALL, EXP_MAGIC};
use std::arch::x86_64::*;

/// The tile: `rows × cols` floats from `c`, rows `c_rs` apart, columns contiguous.
pub struct Tile {
    pub c: *mut f32,
    pub c_rs: usize,
    pub rows: usize,
    pub cols: usize,
}

/// What the tile reads besides itself: the bias (`cols` floats), `pre`, `second` and
/// `post` (`rows × cols` each, rows at their own stride, columns contiguous), each where
/// present.
pub struct Reads {
    pub bias: Option<*const f32>,
    pub pre: Option<(*const f32, usize)>,
    pub second: Option<(*const f32, usize)>,
    pub post: Option<(*const f32, usize)>,
}

/// `c = act(c + bias + pre) · second + post` over the tile (each term where present), in
/// place.
///
/// # Safety
/// The CPU has AVX-512F ([`super::tile::available`]); every element of the tile and of
/// what it reads (for row `i < rows`, column `j < cols`) is inside its allocation, the
/// tile's are written by no other thread during the call, and none of the tile's is one
/// of the others'.
#[target_feature(enable = "avx512f")]
pub unsafe fn apply(tile: &Tile, reads: &Reads, act: Activation) {
    for i in 0..tile.rows {
        let mut j = 0;
        while j < tile.cols {
            let lanes = (tile.cols - j).min(16);
            let mask = if lanes == 16 {
                u16::MAX
            } else {
                (1u16 << lanes) - 1
            };
            // SAFETY: the lanes set in `mask` are columns `j..j + lanes` of row `i`, inside
            // the tile and what it reads (the contract); the others are not touched.
            unsafe {
                let at = tile.c.add(i * tile.c_rs + j);
                let mut x = _mm512_maskz_loadu_ps(mask, at);
                if let Some(b) = reads.bias {
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, b.add(j)));
                }
                if let Some((p, rs)) = reads.pre {
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, p.add(i * rs + j)));
                }
                let mut y = activation(act, x);
                if let Some((p, rs)) = reads.second {
                    y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(mask, p.add(i * rs + j)));
                }
                if let Some((p, rs)) = reads.post {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.add(i * rs + j)));
                }
                _mm512_mask_storeu_ps(at, mask, y);
            }
            j += lanes;
        }
    }
}

/// `act(x)` on each lane, as `codegen/math.rs` computes it.
#[target_feature(enable = "avx512f")]
fn activation(act: Activation, x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    match act {
        Activation::Sigmoid => sigmoid(x),
        Activation::Silu => _mm512_mul_ps(x, sigmoid(x)),
        Activation::GeluTanh { kappa, beta, limit } => {
            let cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            let sum = _mm512_add_ps(x, _mm512_mul_ps(cube, _mm512_set1_ps(kappa)));
            let u = _mm512_mul_ps(sum, _mm512_set1_ps(beta));
            let e = exp(_mm512_mul_ps(u, _mm512_set1_ps(-2.0)));
            let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(e, _mm512_set1_ps(limit));
            let e = _mm512_mask_blend_ps(over, e, _mm512_set1_ps(f32::INFINITY));
            _mm512_div_ps(x, _mm512_add_ps(one, e))
        }
        Activation::GeluErf { scale } => {
            let erf = erf(_mm512_mul_ps(x, _mm512_set1_ps(scale)));
            let value = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_add_ps(one, erf)), _mm512_set1_ps(0.5));
            let at_inf = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, _mm512_set1_ps(f32::INFINITY));
            _mm512_mask_blend_ps(at_inf, value, _mm512_set1_ps(f32::NAN))
        }
    }
}

/// `math.rs`'s `sigmoid4`: `1 / (1 + e^-x)`.
#[target_feature(enable = "avx512f")]
fn sigmoid(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(i32::MIN),
    ));
    _mm512_div_ps(one, _mm512_add_ps(exp(neg), one))
}

/// `math.rs`'s `erf4`: odd, on `|x|` clamped at 4; `a + a P(a²)` below 1, `1 - e^(-a²)
/// Q(1 / a)` above.
#[target_feature(enable = "avx512f")]
fn erf(x: __m512) -> __m512 {
    let sign_bit = _mm512_set1_epi32(i32::MIN);
    let bits = _mm512_castps_si512(x);
    let a = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, bits));
    let four = _mm512_set1_ps(4.0);
    let a = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, four), a, four);
    let z = _mm512_mul_ps(a, a);
    let small = _mm512_fmadd_ps(horner(z, &ERF_SMALL), a, a);
    let one = _mm512_set1_ps(1.0);
    let q = horner(_mm512_div_ps(one, a), &ERF_LARGE);
    let neg_z = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(z), sign_bit));
    let ex = exp(neg_z);
    let neg_ex = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(ex), sign_bit));
    let big = _mm512_fmadd_ps(neg_ex, q, one);
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, one);
    let r = _mm512_mask_blend_ps(below, big, small);
    let sign = _mm512_and_si512(bits, sign_bit);
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign))
}

/// `emit.rs`'s `exp4`: `x` clamped to 89 above (where the result is infinite) and to -104
/// below (where it is 0, set before the last product), Cephes' reduction and polynomial,
/// and `2^n` applied as two normal factors.
#[target_feature(enable = "avx512f")]
fn exp(x: __m512) -> __m512 {
    let hi = _mm512_set1_ps(89.0);
    let x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi), x, hi);
    let (y, under, t) = reduced(x);
    // `t`'s low mantissa bits hold `n`: its bits less the magic number's.
    let n = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(EXP_MAGIC.to_bits() as i32),
    );
    let n1 = _mm512_srai_epi32::<1>(n);
    let n2 = _mm512_sub_epi32(n, n1);
    let y = _mm512_mul_ps(y, pow2(n1));
    let y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
    _mm512_mul_ps(y, pow2(n2))
}

/// `2^n` for `n` in the normal exponents.
#[target_feature(enable = "avx512f")]
fn pow2(n: __m512i) -> __m512 {
    let e = _mm512_add_epi32(n, _mm512_set1_epi32(127));
    _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
}

/// `attnc_epilogue_tile(act, rows, cols, c, c_rs, bias, pre, pre_rs, second, post,
/// post_rs, k0, k1, k2)`: [`apply`] for JIT code, `act` and `k0..k2` an [`Activation`]'s
/// code and constants, a null `bias`, `pre`, `second` or `post` one that is absent;
/// `second`'s rows are `c_rs` apart, as `c`'s. The code generator calls it only where
/// [`super::epilogue_shim`] gave its address.
///
/// # Safety
/// [`apply`]'s: the CPU has AVX-512F, and the tile and what it reads are inside their
/// allocations, the tile this call's alone. The JIT code passes its task's own tile of `c`
/// and the same tile of each input, which `Plan::validate` proved inside their buffers,
/// with no input overlapping `c`; and, paired, the same tile of the pair's second product,
/// `c` at the next index of its last batch axis, which `Plan::validate` proved inside
/// `c`'s buffer as it proves every index the GEMM writes.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn attnc_epilogue_tile(
    act: i64,
    rows: i64,
    cols: i64,
    c: *mut f32,
    c_rs: i64,
    bias: *const f32,
    pre: *const f32,
    pre_rs: i64,
    second: *const f32,
    post: *const f32,
    post_rs: i64,
    k0: f32,
    k1: f32,
    k2: f32,
) {
    let Some(act) = Activation::from_code(act, [k0, k1, k2]) else {
        return;
    };
    if rows <= 0 || cols <= 0 || c_rs < 0 || pre_rs < 0 || post_rs < 0 {
        return;
    }
    let u = |x: i64| x as usize;
    let tile = Tile {
        c,
        c_rs: u(c_rs),
        rows: u(rows),
        cols: u(cols),
    };
    let reads = Reads {
        bias: (!bias.is_null()).then_some(bias),
        pre: (!pre.is_null()).then_some((pre, u(pre_rs))),
        second: (!second.is_null()).then_some((second, u(c_rs))),
        post: (!post.is_null()).then_some((post, u(post_rs))),
    };
    // SAFETY: the sizes and strides are not negative (checked), and this function's
    // contract is `apply`'s.
    unsafe { apply(&tile, &reads, act) }
}
