//! The fused scale + mask + softmax kernel, and the row passes it shares with attention.

use super::emit::{Emit, LANES};
use super::math::{eval, float_cc};
use crate::kernel::{Expr, MaskFill, Softmax};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, F32X4, I32};
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::Variable;

/// One row of scores being normalized: `len` elements at `src` (stride `src_stride`),
/// written to `dst` (stride `dst_stride`, may equal `src`).
pub struct Row<'a> {
    pub len: Value,
    pub src: Value,
    pub src_stride: usize,
    pub src_ro: bool,
    pub dst: Value,
    pub dst_stride: usize,
    pub scale: f32,
    /// The mask's row and stride, with what it does.
    pub mask: Option<(Value, usize, MaskFill)>,
    /// The attention kernel's score change, applied as pass 1 reads each score.
    pub change: Option<Change<'a>>,
}

/// A score change ([`crate::kernel::ScoreMod`]) on one row of scores: its formula, the
/// row `i`, the row's first key `j0`, and each input's pointer at key `j0` of the row with
/// its stride along the keys.
#[derive(Clone, Copy)]
pub struct Change<'a> {
    pub expr: &'a [Expr],
    pub i: Value,
    pub j0: Value,
    pub inputs: &'a [(Value, usize)],
}

impl Change<'_> {
    /// The changed score `s` at key `j0 + j`, on `w` lanes.
    pub fn apply(&self, e: &mut Emit, s: Value, j: Value, w: usize) -> Value {
        let i = e.iota(self.i, 1);
        let i = match w {
            1 => i,
            _ => e.b.ins().splat(F32X4, i),
        };
        let key = e.b.ins().iadd(self.j0, j);
        let key = e.iota(key, w);
        let mut leaves = vec![s, i, key];
        for &(p, stride) in self.inputs {
            let p = e.step(p, j, stride);
            leaves.push(e.load(p, w, stride, true));
        }
        eval(e, self.expr, &leaves, &[], w)
    }
}

impl Row<'_> {
    fn vector(&self) -> bool {
        self.src_stride == 1 && self.dst_stride == 1 && self.mask.as_ref().is_none_or(|m| m.1 <= 1)
    }
}

/// Calls `body(j, w)` for `j` in `0..len`, `w` = 4 lanes at a time where `vector`, then
/// one lane at a time for the rest.
pub fn lanes(e: &mut Emit, len: Value, vector: bool, mut body: impl FnMut(&mut Emit, Value, usize)) {
    let zero = e.int(0);
    let split = match vector {
        true => {
            // Two vectors per trip while eight lanes remain: half the loop overhead, and
            // two independent chains for the out-of-order core.
            let mask8 = e.int(-(2 * LANES as i64));
            let split8 = e.b.ins().band(len, mask8);
            e.for_range(zero, split8, 2 * LANES as i64, |e, j| {
                body(e, j, LANES);
                let j4 = e.b.ins().iadd_imm_s(j, LANES as i64);
                body(e, j4, LANES);
            });
            let mask = e.int(-(LANES as i64));
            let split = e.b.ins().band(len, mask);
            e.for_range(split8, split, LANES as i64, |e, j| body(e, j, LANES));
            split
        }
        false => zero,
    };
    e.for_range(split, len, 1, |e, j| body(e, j, 1));
}

/// Calls `body(j, w, slot)` for `j` in `0..len` in the order a row's maximum and sum take,
/// the native tile softmax's (`runtime/native/softmax.rs`): where `vector`, 16 keys a trip
/// as four vectors (`slot` 0 to 3: four accumulators, the shim's 16 lanes), then the whole
/// vectors left, each in the slot its keys would have in a trip (at most three: slots 0,
/// 1, 2), then one lane at a time (`w` = 1, `slot` 0).
fn sixteen(e: &mut Emit, len: Value, vector: bool, mut body: impl FnMut(&mut Emit, Value, usize, usize)) {
    let zero = e.int(0);
    let split = match vector {
        true => {
            let mask16 = e.int(-(4 * LANES as i64));
            let whole = e.b.ins().band(len, mask16);
            e.for_range(zero, whole, 4 * LANES as i64, |e, j| {
                for slot in 0..4 {
                    let at = offset(e, j, slot * LANES);
                    body(e, at, LANES, slot);
                }
            });
            let mask4 = e.int(-(LANES as i64));
            let quads = e.b.ins().band(len, mask4);
            for slot in 0..3 {
                let at = offset(e, whole, slot * LANES);
                let end = e.b.ins().iadd_imm_s(at, LANES as i64);
                let fits = e.b.ins().icmp(IntCC::SignedLessThanOrEqual, end, quads);
                e.when(fits, |e| body(e, at, LANES, slot));
            }
            quads
        }
        false => zero,
    };
    e.for_range(split, len, 1, |e, j| body(e, j, 1, 0));
}

/// `j + d`, or `j` itself where `d` is 0.
fn offset(e: &mut Emit, j: Value, d: usize) -> Value {
    match d {
        0 => j,
        d => e.b.ins().iadd_imm_s(j, d as i64),
    }
}

/// Four accumulators folded as the shim folds its 16 lanes: `f(v0, v2)` and `f(v1, v3)`,
/// then those two, each `f(first, second)`.
fn fold(e: &mut Emit, acc: [Variable; 4], mut f: impl FnMut(&mut Emit, Value, Value) -> Value) -> Value {
    let v = acc.map(|a| e.b.use_var(a));
    let a = f(e, v[0], v[2]);
    let b = f(e, v[1], v[3]);
    f(e, a, b)
}

/// The score at `j` on `w` lanes: `masked_fill(change(src) * scale)`.
fn score(e: &mut Emit, row: &Row, j: Value, w: usize) -> Value {
    let addr = e.step(row.src, j, row.src_stride);
    let mut y = e.load(addr, w, row.src_stride, row.src_ro);
    if let Some(change) = &row.change {
        y = change.apply(e, y, j, w);
    }
    if row.scale != 1.0 {
        let s = e.splat(row.scale, w);
        y = e.b.ins().fmul(y, s);
    }
    if let Some((mask, stride, m)) = &row.mask {
        let addr = e.step(*mask, j, *stride);
        let mv = e.load(addr, w, *stride, true);
        let rhs = e.splat(m.rhs, w);
        let hit = e.cmp(float_cc(m.op), mv, rhs);
        let fill = e.splat(m.fill, w);
        y = e.pick(hit, fill, y);
    }
    y
}

impl<'a> Row<'a> {
    /// Whether pass 1 stores the scores (changed, scaled or masked) for pass 2 to read: a
    /// store per element instead of computing them twice.
    fn stores_scores(&self) -> bool {
        self.mask.is_some() || self.scale != 1.0 || self.change.is_some()
    }

    /// The row pass 2 reads: the stored scores, or the source as it is.
    fn stored(&self) -> Row<'a> {
        match self.stores_scores() {
            true => Row {
                len: self.len,
                src: self.dst,
                src_stride: self.dst_stride,
                src_ro: false,
                dst: self.dst,
                dst_stride: self.dst_stride,
                scale: 1.0,
                mask: None,
                change: None,
            },
            false => Row {
                mask: None,
                change: None,
                ..*self
            },
        }
    }
}

/// Pass 1: the row's maximum score (`-inf` when empty); stores the scores in `dst` when
/// they are scaled or masked.
pub fn scale_mask_max(e: &mut Emit, row: &Row) -> Value {
    let vector = row.vector();
    let ninf = e.splat(f32::NEG_INFINITY, LANES);
    let vmax = [(); 4].map(|_| e.var(F32X4, ninf));
    let ninf1 = e.f32(f32::NEG_INFINITY);
    let smax = e.var(F32, ninf1);
    let store = row.stores_scores();
    sixteen(e, row.len, vector, |e, j, w, slot| {
        let y = score(e, row, j, w);
        if store {
            let addr = e.step(row.dst, j, row.dst_stride);
            e.store(y, addr);
        }
        let acc = if w == 1 { smax } else { vmax[slot] };
        let old = e.b.use_var(acc);
        let new = e.max(old, y);
        e.b.def_var(acc, new);
    });
    let v = fold(e, vmax, |e, a, b| e.max(a, b));
    let a = e.hmax(v);
    let s = e.b.use_var(smax);
    e.max(a, s)
}

/// Pass 2: `dst = exp(score - max)` (the scores as pass 1 left them), times `EXP_SCALE`
/// where `scaled`; returns the row's sum (scaled alike). `max` is at least every score, so
/// the exponent is never positive and `exp` needs no upper clamp. A caller that divides by
/// the sum takes the scaled values: they are never subnormal, and the division rounds them
/// once.
pub fn exp_sum(e: &mut Emit, row: &Row, max: Value, scaled: bool) -> Value {
    let row = &row.stored();
    let max = e.pin(max);
    let vector = row.vector();
    let zero = e.splat(0.0, LANES);
    let vsum = [(); 4].map(|_| e.var(F32X4, zero));
    let zero1 = e.f32(0.0);
    let ssum = e.var(F32, zero1);
    let vmax = e.b.ins().splat(F32X4, max);
    sixteen(e, row.len, vector, |e, j, w, slot| {
        let y = score(e, row, j, w);
        let m = if w == 1 { max } else { vmax };
        let d = e.b.ins().fsub(y, m);
        let p = match scaled {
            true => e.exp_nonpositive_scaled(d),
            false => e.exp_nonpositive(d),
        };
        let addr = e.step(row.dst, j, row.dst_stride);
        e.store(p, addr);
        let acc = if w == 1 { ssum } else { vsum[slot] };
        let old = e.b.use_var(acc);
        let new = e.b.ins().fadd(old, p);
        e.b.def_var(acc, new);
    });
    let v = fold(e, vsum, |e, a, b| e.b.ins().fadd(a, b));
    let a = e.hsum(v);
    let s = e.b.use_var(ssum);
    e.b.ins().fadd(a, s)
}

/// Pass 1 without the maximum, for [`tile_softmax`] to follow: the row's scores (changed,
/// scaled or masked) stored in `dst`; nothing where it has none to change.
pub fn store_scores(e: &mut Emit, row: &Row) {
    if !row.stores_scores() {
        return;
    }
    lanes(e, row.len, row.vector(), |e, j, w| {
        let y = score(e, row, j, w);
        let addr = e.step(row.dst, j, row.dst_stride);
        e.store(y, addr);
    });
}

/// The attention tile's online softmax in the native shim (`attnc_softmax_tile`, 512- or
/// 256-bit), on the scores as the generated code left them: per row of the `rows × cols` tile (row
/// stride `tile_rs`), its maximum, `exp` and sum, the running maximum and sum at `stats`,
/// and its output row (`out` with its row and column strides and `dv` columns) rescaled
/// where the maximum moved and `later` (an `i8`: a tile was visited before). Each score
/// changed as [`ShimChange`] says: the row's value of its `added` tensor added first, then
/// its key's value in `keys` as its [`KeyChange`] says. The bits are those of
/// [`scale_mask_max`], [`exp_sum`] and the update that follows them, the change in
/// [`scale_mask_max`]'s pass.
pub fn tile_softmax(
    e: &mut Emit,
    (rows, cols): (Value, Value),
    (tile, tile_rs): (Value, usize),
    (max, sum): (Value, Value),
    (out, out_rs, out_cs, dv): (Value, usize, usize, usize),
    later: Value,
    change: ShimChange,
) {
    let [tile_rs, out_rs, out_cs, dv] = [tile_rs, out_rs, out_cs, dv].map(|s| e.int(s as i64));
    let later = e.b.ins().uextend(I32, later);
    let (keys, (op, fill)) = match change.keys {
        Some((p, change)) => (p, change.abi()),
        None => (e.int(0), (0, 0.0)),
    };
    let (added, added_rs) = match change.added {
        Some((p, rs)) => (p, e.int(rs as i64)),
        None => (e.int(0), e.int(0)),
    };
    let op = e.b.ins().iconst(I32, i64::from(op));
    let fill = e.f32(fill);
    e.softmax_tile([
        rows, cols, tile, tile_rs, max, sum, out, out_rs, out_cs, dv, keys, added, added_rs, later, op, fill,
    ]);
}

/// What the native softmax changes in the tile's scores as it reads them: a row of values
/// per key (`cols` floats, computed once for the tile) that fills or is added, and a tensor
/// of values per row and key added before it (its pointer at the tile's first row and key,
/// with its row stride; unit stride along the keys).
#[derive(Clone, Copy, Default)]
pub struct ShimChange {
    pub keys: Option<(Value, KeyChange)>,
    pub added: Option<(Value, usize)>,
}

impl ShimChange {
    /// Whether it changes nothing: the generated code applies every change itself.
    pub fn is_none(&self) -> bool {
        self.keys.is_none() && self.added.is_none()
    }
}

/// What a row of values, one per key, does to every row's scores in the native softmax
/// (`runtime/native/softmax.rs`): a score whose key's value `v` is not 0 becomes the fill (a
/// padding mask, its keys marked 1.0), or `v` is added (an additive one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyChange {
    Fill(f32),
    Add,
}

impl KeyChange {
    /// The change as the shim's `op` and `fill` arguments: 1 and the fill, or 2 and 0.
    pub fn abi(self) -> (i32, f32) {
        match self {
            KeyChange::Fill(fill) => (1, fill),
            KeyChange::Add => (2, 0.0),
        }
    }

    /// The change [`KeyChange::abi`] gave `op` and `fill` for.
    pub fn from_abi(op: i32, fill: f32) -> KeyChange {
        match op {
            1 => KeyChange::Fill(fill),
            _ => KeyChange::Add,
        }
    }
}

/// `dst[j] *= factor` over `len` elements of stride `stride`.
pub fn scale_row(e: &mut Emit, dst: Value, len: Value, stride: usize, factor: Value) {
    let factor = e.pin(factor);
    let vf = e.b.ins().splat(F32X4, factor);
    lanes(e, len, stride == 1, |e, j, w| {
        let addr = e.step(dst, j, stride);
        let y = e.load(addr, w, stride, false);
        let f = if w == 1 { factor } else { vf };
        let y = e.b.ins().fmul(y, f);
        e.store(y, addr);
    });
}

pub fn translate(e: &mut Emit, s: &Softmax) {
    let (&len, outer) = s.shape.split_last().expect("softmax has an axis");
    let rows: usize = outer.iter().product();
    let last = s.shape.len() - 1;
    let x_ptr = e.arg(0);
    let out_ptr = e.arg(1);
    let mask_ptr = s.mask.as_ref().map(|_| e.arg(2));
    let rpt = s.rows_per_task as i64;
    let (begin, end) = (e.begin, e.end);
    e.for_range(begin, end, 1, |e, t| {
        let r0 = e.b.ins().imul_imm_s(t, rpt);
        let r1 = e.b.ins().iadd_imm_s(r0, rpt);
        let total = e.int(rows as i64);
        let r1 = e.min_usize(r1, total);
        e.for_range(r0, r1, 1, |e, r| {
            let idx = e.unflatten(r, outer);
            let xo = e.dot(&idx, &s.x.strides[..last]);
            let src = e.at(x_ptr, xo);
            let oo = e.dot(&idx, &s.out.strides[..last]);
            let dst = e.at(out_ptr, oo);
            let mask = match (&s.mask, mask_ptr) {
                (Some(m), Some(p)) => {
                    let mo = e.dot(&idx, &m.mask.strides[..last]);
                    Some((e.at(p, mo), m.mask.strides[last], m.clone()))
                }
                _ => None,
            };
            let len = e.int(len as i64);
            let row = Row {
                len,
                src,
                src_stride: s.x.strides[last],
                src_ro: true,
                dst,
                dst_stride: s.out.strides[last],
                scale: s.scale,
                mask,
                change: None,
            };
            let max = scale_mask_max(e, &row);
            let sum = exp_sum(e, &row, max, true);
            let one = e.f32(1.0);
            let inv = e.b.ins().fdiv(one, sum);
            scale_row(e, dst, len, row.dst_stride, inv);
        });
    });
}
