//! A GEMM tile's epilogue at the machine's width, called from the generated code after the
//! tile product where the epilogue is one of the forms of `codegen/tile_epilogue.rs`:
//! `c = act(c [+ bias] [+ pre]) [· second] [+ post]` over `rows × cols` of the tile, 16
//! columns at a time on 512-bit vectors ([`Avx512`]) or 8 on 256-bit ones ([`Avx2`]), the
//! last ones masked; `second` is a paired epilogue's second product (SwiGLU's up
//! projection beside its gate).
//!
//! Each activation is the 128-bit Cranelift code's (`codegen/math.rs`, `codegen/emit.rs`)
//! operation for operation: the same `exp`, `erf` and `sigmoid` polynomials and range
//! handling, the same fused multiply-adds, the same order of every sum and product. Lanes
//! are independent, so a lane of a 512- or 256-bit vector computes what a lane of a
//! 128-bit one does: the bits are those of the generated code (`tests/native_epilogue.rs`
//! compares the two paths' outputs).

mod avx2;
mod avx512;

pub use avx2::Avx2;
pub use avx512::Avx512;

use crate::codegen::Activation;

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

/// The epilogue at one instruction set's width.
pub trait Width {
    /// `c = act(c + bias + pre) · second + post` over the tile (each term where present), in
    /// place.
    ///
    /// # Safety
    /// The CPU runs the instruction set (as `Lanes` in `native.rs` checks); every element
    /// of the tile and of what it reads (for row `i < rows`, column `j < cols`) is inside
    /// its allocation, the tile's are written by no other thread during the call, and none
    /// of the tile's is one of the others'.
    unsafe fn apply(tile: &Tile, reads: &Reads, act: Activation);
}

/// `attnc_epilogue_tile(act, rows, cols, c, c_rs, bias, pre, pre_rs, second, post,
/// post_rs, k0, k1, k2)`: [`Width::apply`] for JIT code, `act` and `k0..k2` an [`Activation`]'s
/// code and constants, a null `bias`, `pre`, `second` or `post` one that is absent;
/// `second`'s rows are `c_rs` apart, as `c`'s. The code generator calls it only where
/// [`super::epilogue_shim`] gave its address.
///
/// # Safety
/// [`Width::apply`]'s: the CPU runs `W`, and the tile and what it reads are inside their
/// allocations, the tile this call's alone. The JIT code passes its task's own tile of `c`
/// and the same tile of each input, which `Plan::validate` proved inside their buffers,
/// with no input overlapping `c`; and, paired, the same tile of the pair's second product,
/// `c` at the next index of its last batch axis, which `Plan::validate` proved inside
/// `c`'s buffer as it proves every index the GEMM writes.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn attnc_epilogue_tile<W: Width>(
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
    // contract is `W::apply`'s.
    unsafe { W::apply(&tile, &reads, act) }
}
