//! The keys a block of query rows can see under a tensor mask that fills with `-inf`, found
//! at run time by reading the mask. A mask computed from run-time positions (a cache's
//! filled length, `arange(C)[None, :] <= cache_position[:, None]`, padding) is known only
//! when the program runs, so the attention kernel reads it once per block of rows and
//! visits only the key tiles that meet the range any row keeps: the tiles it removes from
//! every row add nothing to the result, as with a mask of compile-time positions.
//!
//! A removed tile's values are still read, not multiplied: PyTorch's `softmax(s) @ v`
//! multiplies a removed key's values by 0, which gives NaN where they are inf or NaN, so
//! such a tile is visited as before and gives PyTorch's NaN.

use super::emit::Emit;
use super::math::float_cc;
use super::softmax::lanes;
use crate::kernel::MaskFill;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I64};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Variable;

/// The mask of a block of rows: a pointer at its first row, the strides between rows and
/// between keys, and what it does.
pub struct MaskRows<'a> {
    pub at: Value,
    pub row_stride: usize,
    pub key_stride: usize,
    pub fill: &'a MaskFill,
}

/// Keys one step of the vector scan tests: four 128-bit compares.
const CHUNK: i64 = 16;

/// `[lo, hi)`: from the first key of `keys` that any of the `rows` rows keeps to one past
/// the last (`lo >= hi` where none keeps one). Each row is read from both ends only up to
/// the range the rows before it found, so a block reads the elements outside its range and
/// few others. Where the keys are contiguous in the mask, the removed keys are passed over
/// [`CHUNK`] at a time, then the scalar scan finds the exact key in the last chunk: the
/// elements outside the range are most of what is read (a causal row block reads the
/// triangle above it once per row), and this reads them at a quarter of an instruction
/// each.
pub fn visible_keys(e: &mut Emit, mask: &MaskRows, rows: Value, keys: (Value, Value)) -> (Value, Value) {
    let (start, end) = keys;
    let lo = e.var(I64, end);
    let hi = e.var(I64, start);
    let zero = e.int(0);
    e.for_range(zero, rows, 1, |e, i| {
        let row = MaskRow::new(e, mask, i);
        let l = e.b.use_var(lo);
        let first = row.forward(e, (start, l), true);
        e.b.def_var(lo, first);
        // Backwards from the last key down to the range found so far, excluded.
        let h = e.b.use_var(hi);
        let (from, to) = (e.b.ins().iadd_imm_s(end, -1), e.b.ins().iadd_imm_s(h, -1));
        let last = row.backward(e, (from, to));
        let past = e.b.ins().iadd_imm_s(last, 1);
        e.b.def_var(hi, past);
    });
    (e.b.use_var(lo), e.b.use_var(hi))
}

/// `[a, b)` within `keys`: keys that every one of the `rows` rows keeps (empty where there
/// are none; not always the largest such range where a row keeps keys apart). A tile inside
/// it needs no mask test: the test would keep every score. Each row is read from `a` to its
/// first removed key before `b`, [`CHUNK`] keys at a time where they are contiguous.
pub fn kept_by_all(e: &mut Emit, mask: &MaskRows, rows: Value, keys: (Value, Value)) -> (Value, Value) {
    let a = e.var(I64, keys.0);
    let b = e.var(I64, keys.1);
    let zero = e.int(0);
    e.for_range(zero, rows, 1, |e, i| {
        let row = MaskRow::new(e, mask, i);
        let (a0, b0) = (e.b.use_var(a), e.b.use_var(b));
        let first = row.forward(e, (a0, b0), true);
        let stop = row.forward(e, (first, b0), false);
        e.b.def_var(a, first);
        e.b.def_var(b, stop);
    });
    (e.b.use_var(a), e.b.use_var(b))
}

/// Row `i` of a block's mask, read a key or a chunk of keys at a time.
struct MaskRow<'a> {
    at: Value,
    mask: &'a MaskRows<'a>,
    cc: FloatCC,
}

impl<'a> MaskRow<'a> {
    fn new(e: &mut Emit, mask: &'a MaskRows<'a>, i: Value) -> MaskRow<'a> {
        MaskRow {
            at: e.step(mask.at, i, mask.row_stride),
            mask,
            cc: float_cc(mask.fill.op),
        }
    }

    /// Whether key `j` is removed (or, with `removed` false, kept).
    fn is(&self, e: &mut Emit, j: Value, removed: bool) -> Value {
        let at = e.step(self.at, j, self.mask.key_stride);
        let x = e.b.ins().load(F32, readonly(), at, 0);
        let rhs = e.f32(self.mask.fill.rhs);
        let gone = e.cmp(self.cc, x, rhs);
        match removed {
            true => gone,
            false => e.b.ins().bxor_imm_u(gone, 1),
        }
    }

    /// Whether every key of the [`CHUNK`] from `first` is removed (or, with `removed`
    /// false, kept); the keys are contiguous.
    fn chunk_is(&self, e: &mut Emit, first: Value, removed: bool) -> Value {
        let at = e.step(self.at, first, 1);
        let rhs = e.splat(self.mask.fill.rhs, 4);
        let mut acc = None;
        for q in 0..CHUNK / 4 {
            let x = e.b.ins().load(F32X4, readonly(), at, (16 * q) as i32);
            let gone = e.b.ins().fcmp(self.cc, x, rhs);
            acc = Some(match (acc, removed) {
                (None, _) => gone,
                (Some(acc), true) => e.b.ins().band(acc, gone),
                (Some(acc), false) => e.b.ins().bor(acc, gone),
            });
        }
        let acc = acc.expect("a chunk holds keys");
        match removed {
            true => e.b.ins().vall_true(acc),
            false => {
                let any = e.b.ins().vany_true(acc);
                e.b.ins().bxor_imm_u(any, 1)
            }
        }
    }

    /// The first key of `[from, to)` that is not removed (or, with `removed` false, not
    /// kept), or `to`.
    fn forward(&self, e: &mut Emit, (from, to): (Value, Value), removed: bool) -> Value {
        let from = match self.mask.key_stride {
            1 => scan(e, from, CHUNK, below(to, CHUNK), |e, j| {
                self.chunk_is(e, j, removed)
            }),
            _ => from,
        };
        scan(e, from, 1, below(to, 1), |e, j| self.is(e, j, removed))
    }

    /// The last key from `from` down to `to` (excluded) that is kept, or `to`.
    fn backward(&self, e: &mut Emit, (from, to): (Value, Value)) -> Value {
        let from = match self.mask.key_stride {
            1 => scan(e, from, -CHUNK, above(to, CHUNK), |e, j| {
                let first = e.b.ins().iadd_imm_s(j, 1 - CHUNK);
                self.chunk_is(e, first, true)
            }),
            _ => from,
        };
        scan(e, from, -1, above(to, 1), |e, j| self.is(e, j, true))
    }
}

/// Whether `n` keys from `j` upwards lie below `to`: `j + n <= to`.
fn below(to: Value, n: i64) -> impl Fn(&mut Emit, Value) -> Value {
    move |e, j| {
        let last = e.b.ins().iadd_imm_s(j, n);
        e.b.ins().icmp(IntCC::SignedLessThanOrEqual, last, to)
    }
}

/// Whether `n` keys from `j` downwards lie above `to`: `j - n >= to`.
fn above(to: Value, n: i64) -> impl Fn(&mut Emit, Value) -> Value {
    move |e, j| {
        let first = e.b.ins().iadd_imm_s(j, -n);
        e.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, first, to)
    }
}

/// Memory the scan only reads.
fn readonly() -> MemFlagsData {
    MemFlagsData::new().with_notrap().with_readonly()
}

/// The first `j` from `from` by `step` where `inside` or `removed` does not hold
/// (`removed` is tested only where `inside` holds).
fn scan(
    e: &mut Emit,
    from: Value,
    step: i64,
    inside: impl Fn(&mut Emit, Value) -> Value,
    removed: impl Fn(&mut Emit, Value) -> Value,
) -> Value {
    let var = e.var(I64, from);
    let header = e.b.create_block();
    let test = e.b.create_block();
    let next = e.b.create_block();
    let exit = e.b.create_block();
    e.b.ins().jump(header, &[]);
    e.b.switch_to_block(header);
    let j = e.b.use_var(var);
    let more = inside(e, j);
    e.b.ins().brif(more, test, &[], exit, &[]);
    e.b.switch_to_block(test);
    // Only the header leads here.
    e.b.seal_block(test);
    let gone = removed(e, j);
    e.b.ins().brif(gone, next, &[], exit, &[]);
    e.b.switch_to_block(next);
    // Only the test leads here.
    e.b.seal_block(next);
    let j_next = e.b.ins().iadd_imm_s(j, step);
    e.b.def_var(var, j_next);
    e.b.ins().jump(header, &[]);
    // The entry jump and the back edge both exist now.
    e.b.seal_block(header);
    e.b.switch_to_block(exit);
    // The header and the test both branch here.
    e.b.seal_block(exit);
    e.b.use_var(var)
}

/// Whether every one of `dv` values of the `cols` keys at `v` (strided by `strides`: keys,
/// then values) is finite: `x * 0` is 0 for a finite `x` and NaN for inf and NaN.
pub fn values_finite(e: &mut Emit, v: Value, strides: (usize, usize), cols: Value, dv: usize) -> Value {
    if strides.1 == 1 && dv.is_multiple_of(4) && dv <= MAX_UNROLLED {
        return rows_finite(e, v, strides.0, cols, dv);
    }
    let zero_v = e.splat(0.0, 4);
    let zero_s = e.f32(0.0);
    let acc4 = e.var(F32X4, zero_v);
    let acc1 = e.var(F32, zero_s);
    let (zero, dv_v) = (e.int(0), e.int(dv as i64));
    e.for_range(zero, cols, 1, |e, key| {
        let row = e.step(v, key, strides.0);
        lanes(e, dv_v, strides.1 == 1, |e, j, w| {
            let at = e.step(row, j, strides.1);
            let x = e.load(at, w, strides.1, true);
            let z = e.splat(0.0, w);
            let x0 = e.b.ins().fmul(x, z);
            let acc = if w == 1 { acc1 } else { acc4 };
            let sum = e.b.use_var(acc);
            let sum = e.b.ins().fadd(sum, x0);
            e.b.def_var(acc, sum);
        });
    });
    let (a4, a1) = (e.b.use_var(acc4), e.b.use_var(acc1));
    let a4 = e.hsum(a4);
    let total = e.b.ins().fadd(a4, a1);
    e.cmp(FloatCC::Equal, total, zero_s)
}

/// The longest row of values [`rows_finite`] reads as one unrolled run of vectors.
const MAX_UNROLLED: usize = 256;

/// [`values_finite`] where each key's `dv` values are contiguous, `dv` a multiple of 4: the
/// row read as vectors at constant offsets from one pointer, into four sums (no carried
/// dependence from one vector to the next), so a skipped tile's check costs about one
/// vector instruction per four values.
fn rows_finite(e: &mut Emit, v: Value, key_stride: usize, cols: Value, dv: usize) -> Value {
    let z = e.splat(0.0, 4);
    let sums: Vec<Variable> = (0..4).map(|_| e.var(F32X4, z)).collect();
    let zero = e.int(0);
    e.for_range(zero, cols, 1, |e, key| {
        let row = e.step(v, key, key_stride);
        for q in 0..dv / 4 {
            let x = e.b.ins().load(F32X4, readonly(), row, (16 * q) as i32);
            let x0 = e.b.ins().fmul(x, z);
            let sum = e.b.use_var(sums[q % 4]);
            let sum = e.b.ins().fadd(sum, x0);
            e.b.def_var(sums[q % 4], sum);
        }
    });
    let s: Vec<Value> = sums.iter().map(|&s| e.b.use_var(s)).collect();
    let (a, b) = (e.b.ins().fadd(s[0], s[1]), e.b.ins().fadd(s[2], s[3]));
    let all = e.b.ins().fadd(a, b);
    let total = e.hsum(all);
    let zero_s = e.f32(0.0);
    e.cmp(FloatCC::Equal, total, zero_s)
}
