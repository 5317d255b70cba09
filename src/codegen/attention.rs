//! The flash-style attention kernel. One task is a block of query rows of one batch index;
//! it walks the keys in blocks: the scores tile `scale · q kᵀ` (microkernel) goes to
//! scratch, each row is changed (the score change, in the pass that finds its maximum) and
//! masked, its running maximum and sum updated and the tile turned into `exp(s - max)`; the output rows are rescaled by `exp(old max - new max)` and the tile
//! times the value block is accumulated onto them (microkernel). At the end each row is
//! divided by its sum. Memory: `rows · (keys per block + 2) + keys per block` floats of
//! scratch.
//!
//! A mask of positions is decided per tile from the tile's corners: a tile it removes is
//! not visited (where the kernel may skip), a tile it keeps whole tests no element, and only
//! a tile it keeps in part evaluates the formula per element. A row whose maximum is still
//! `-inf` (every key so far removed) subtracts 0 instead, so `-inf - -inf` never makes NaN.
//!
//! A tensor mask that fills with `-inf` is read once per block of rows for the keys any row
//! keeps (`visible.rs`), and a tile outside them is not visited unless its values are not
//! all finite; a block that visits no tile writes its rows as a visited one whose every
//! score was removed would (0, then normalized as such a row is). Where the mask is
//! broadcast over heads, a key ranges kernel has read it once before (`key_ranges.rs`) and
//! the task loads its block's ranges from that kernel's table instead.

use super::emit::Emit;
use super::key_ranges::read_entry;
use super::math::{eval, float_cc};
use super::place::{place, Place};
use super::softmax::{
    exp_sum, lanes, scale_mask_max, scale_row, store_scores, tile_softmax, Change, KeyChange, Row, ShimChange,
};
use super::visible::{kept_by_all, values_finite, visible_keys, MaskRows};
use crate::ir::BinaryOp;
use crate::kernel::{Attention, Expr, Keep, MaskFill, ScoreMod, POSITION_CHUNK};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, I32, I64, I8};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Variable;

pub fn translate(e: &mut Emit, a: &Attention) {
    let args = Args::new(e, a);
    let out_strides = OutStrides::new(a);
    let scratch = Scratch::new(e, a.block);
    let (begin, end) = (e.begin, e.end);
    e.for_range(begin, end, 1, |e, t| task(e, a, &args, &out_strides, &scratch, t));
}

/// The kernel's arguments: `q`, `k`, `v` and the output, then the mask, the score inputs,
/// the tail's keys and values and the table of key ranges, where the kernel has them.
struct Args {
    q: Value,
    k: Value,
    v: Value,
    out: Value,
    mask: Option<Value>,
    score: Vec<Value>,
    tail: Option<(Value, Value)>,
    ranges: Option<Value>,
}

impl Args {
    fn new(e: &mut Emit, a: &Attention) -> Args {
        let mask = a.mask.as_ref().map(|_| e.arg(4));
        let first_score_arg = 4 + a.mask.is_some() as usize;
        let score_inputs = a.score.as_ref().map_or(0, |s| s.inputs.len());
        let score = (0..score_inputs).map(|k| e.arg(first_score_arg + k)).collect();
        let first_tail_arg = first_score_arg + score_inputs;
        let tail = a
            .tail
            .as_ref()
            .map(|_| (e.arg(first_tail_arg), e.arg(first_tail_arg + 1)));
        let ranges_arg = first_tail_arg + 2 * a.tail.is_some() as usize;
        let ranges = a.ranges.as_ref().map(|_| e.arg(ranges_arg));
        let (q, k, v, out) = (e.arg(0), e.arg(1), e.arg(2), e.arg(3));
        Args {
            q,
            k,
            v,
            out,
            mask,
            score,
            tail,
            ranges,
        }
    }
}

/// The output's strides over the batch, then its rows and columns, and the stride of a
/// split's chunks: with a split, the chunk's axis sits between them.
struct OutStrides {
    strides: Vec<usize>,
    chunk: usize,
}

impl OutStrides {
    fn new(a: &Attention) -> OutStrides {
        let r = a.batch.len();
        match a.split {
            Some(_) => {
                let s = &a.out.strides;
                OutStrides {
                    strides: [&s[..r], &s[r + 1..]].concat(),
                    chunk: s[r],
                }
            }
            None => OutStrides {
                strides: a.out.strides.clone(),
                chunk: 0,
            },
        }
    }
}

/// Scratch: the running maximum and sum of each row, the scores tile `[br, bc]`, then a
/// value per key of the tile for the native softmax ([`key_row`]).
struct Scratch {
    max_row: Value,
    sum_row: Value,
    tile: Value,
    keys: Value,
}

impl Scratch {
    fn new(e: &mut Emit, (br, bc): (usize, usize)) -> Scratch {
        let [off1, off2, off3] = [br, 2 * br, 2 * br + br * bc].map(|o| e.int(o as i64));
        Scratch {
            max_row: e.scratch,
            sum_row: e.at(e.scratch, off1),
            tile: e.at(e.scratch, off2),
            keys: e.at(e.scratch, off3),
        }
    }
}

/// One task's rows: the first and how many, and the pointers at them of `q`, the output,
/// the mask and each score input; `started` says whether a tile was visited yet (the first
/// one writes the output rows, later ones rescale and add to them); `visible`, the keys any
/// of the rows keeps where the kernel skips the tiles a tensor mask removes, and `whole`,
/// keys every row keeps (a tile inside them is not tested against the mask).
struct Rows<'a> {
    i0: Value,
    rows: Value,
    q: Value,
    out: Value,
    mask: Option<(Value, &'a MaskFill)>,
    score: Vec<Value>,
    started: Variable,
    visible: Option<(Value, Value)>,
    whole: Option<(Value, Value)>,
}

/// One segment of the keys (`k` and `v`, then the tail's): its pointers at this task's
/// key/value head, their strides, its first key among all the keys and how many it holds.
struct Segment<'a> {
    k: Value,
    v: Value,
    ks: &'a [usize],
    vs: &'a [usize],
    start: usize,
    len: usize,
}

/// Task `t`: a block of query rows of one batch index (with a split, one chunk of its
/// keys), walked over its key segments block by block, then normalized (or, with a split,
/// left for the merge).
fn task(e: &mut Emit, a: &Attention, args: &Args, os: &OutStrides, scratch: &Scratch, t: Value) {
    let r = a.batch.len();
    let Place {
        idx,
        i0,
        rows,
        chunk,
        keys,
    } = place(e, t, &a.batch, (a.n, a.block.0, a.m), a.split);
    let qs = &a.q.strides;
    let q = {
        let o = e.dot(&idx, &qs[..r]);
        let p = e.at(args.q, o);
        e.step(p, i0, qs[r])
    };
    let segments = segments(e, a, args, &idx);
    let (out, mask, score) = rows_at(e, a, args, os, (&idx, chunk, i0));
    let zero = e.int(0);
    e.for_range(zero, rows, 1, |e, i| {
        let ninf = e.f32(f32::NEG_INFINITY);
        let at = e.step(scratch.max_row, i, 1);
        e.store(ninf, at);
        let z = e.f32(0.0);
        let at = e.step(scratch.sum_row, i, 1);
        e.store(z, at);
    });
    let no = e.b.ins().iconst(I8, 0);
    let started = e.var(I8, no);
    let ranges = mask.filter(|_| a.skips_masked_tiles()).map(|(at, m)| {
        if let (Some(table), Some(o)) = (args.ranges, &a.ranges) {
            return read_entry(e, (table, &o.strides), t, &idx, a.row_tasks());
        }
        let mask = MaskRows {
            at,
            row_stride: m.mask.strides[r],
            key_stride: m.mask.strides[r + 1],
            fill: m,
        };
        let all = (zero, e.int(a.m as i64));
        let visible = visible_keys(e, &mask, rows, keys.unwrap_or(all));
        (visible, kept_by_all(e, &mask, rows, visible))
    });
    let (visible, whole) = (ranges.map(|r| r.0), ranges.map(|r| r.1));
    let task = Rows {
        i0,
        rows,
        q,
        out,
        mask,
        score,
        started,
        visible,
        whole,
    };
    for segment in &segments {
        walk_segment(e, a, (&task, segment), (keys, zero), &os.strides, scratch);
    }
    if a.split.is_some() {
        let visited = e.b.use_var(started);
        let (max_row, sum_row) = (scratch.max_row, scratch.sum_row);
        finish_chunk(
            e,
            (out, &os.strides[r..]),
            a.dv,
            rows,
            (max_row, sum_row),
            visited,
        );
        return;
    }
    if visible.is_some() {
        // No tile visited: the rows are those of a visited tile that removed every score.
        let visited = e.b.use_var(started);
        let none = e.b.ins().bxor_imm_u(visited, 1);
        e.when(none, |e| {
            e.for_range(zero, rows, 1, |e, i| {
                let orow = e.step(out, i, os.strides[r]);
                zero_row(e, orow, a.dv, os.strides[r + 1]);
            });
        });
    }
    normalize(e, a, (out, &os.strides[r..]), (zero, rows), scratch.sum_row);
}

/// The pointers at the task's first row (row `i0` of batch index `idx`, chunk `chunk`) of
/// the output, the mask and each score input.
fn rows_at<'a>(
    e: &mut Emit,
    a: &'a Attention,
    args: &Args,
    os: &OutStrides,
    (idx, chunk, i0): (&[Value], Value, Value),
) -> (Value, Option<(Value, &'a MaskFill)>, Vec<Value>) {
    let r = a.batch.len();
    let out = {
        let o = e.dot(idx, &os.strides[..r]);
        let p = e.at(args.out, o);
        let p = e.step(p, chunk, os.chunk);
        e.step(p, i0, os.strides[r])
    };
    let mask = match (&a.mask, args.mask) {
        (Some(m), Some(p)) => {
            let o = e.dot(idx, &m.mask.strides[..r]);
            let p = e.at(p, o);
            Some((e.step(p, i0, m.mask.strides[r]), m))
        }
        _ => None,
    };
    // Each score input at this task's batch index and first row.
    let score = a
        .score
        .iter()
        .flat_map(|s| &s.inputs)
        .zip(&args.score)
        .map(|(o, &p)| {
            let off = e.dot(idx, &o.strides[..r]);
            let p = e.at(p, off);
            e.step(p, i0, o.strides[r])
        })
        .collect();
    (out, mask, score)
}

/// The keys and values of the task's key/value head: `k`, `v`, then the tail's.
fn segments<'a>(e: &mut Emit, a: &'a Attention, args: &Args, idx: &[Value]) -> Vec<Segment<'a>> {
    let r = a.batch.len();
    let kv_idx = kv_index(e, idx, a.kv_group);
    let head_len = a.m - a.tail.as_ref().map_or(0, |t| t.len);
    let mut parts = vec![(
        args.k,
        args.v,
        a.k.strides.as_slice(),
        a.v.strides.as_slice(),
        head_len,
    )];
    if let (Some(t), Some((tk, tv))) = (&a.tail, args.tail) {
        parts.push((tk, tv, t.k.strides.as_slice(), t.v.strides.as_slice(), t.len));
    }
    let mut segments = Vec::new();
    let mut start = 0;
    for (k_ptr, v_ptr, ks, vs, len) in parts {
        let k = {
            let o = e.dot(&kv_idx, &ks[..r]);
            e.at(k_ptr, o)
        };
        let v = {
            let o = e.dot(&kv_idx, &vs[..r]);
            e.at(v_ptr, o)
        };
        if len > 0 {
            segments.push(Segment {
                k,
                v,
                ks,
                vs,
                start,
                len,
            });
        }
        start += len;
    }
    segments
}

/// One tile of keys: its first key within the segment (`jl`) and among all the keys
/// (`j0`), how many keys it has, and (with a mask of positions) the keys `[ta, tb)` among
/// all the keys on which the mask must be tested (empty where it keeps the whole tile).
struct Keys {
    jl: Value,
    j0: Value,
    cols: Value,
    tested: Option<(Value, Value)>,
}

impl Keys {
    /// The keys with the tested ones limited to the tile's.
    fn clipped(self, e: &mut Emit) -> Keys {
        let end = e.b.ins().iadd(self.j0, self.cols);
        let tested = self
            .tested
            .map(|(ta, tb)| (e.max_usize(ta, self.j0), e.min_usize(tb, end)));
        Keys { tested, ..self }
    }
}

/// The segment's keys within the task's `[c0, c1)` (all of them without a split; `zero` is
/// the task's constant 0), a tile of `bc` keys at a time; where the kernel skips tiles, a
/// tile is cut to the chunks the mask of positions keeps ([`chunked`]), and not visited
/// where it keeps none.
fn walk_segment(
    e: &mut Emit,
    a: &Attention,
    (task, seg): (&Rows, &Segment),
    (keys, zero): (Option<(Value, Value)>, Value),
    os: &[usize],
    scratch: &Scratch,
) {
    let bc = a.block.1;
    // The segment's keys within [c0, c1), counted from its start.
    let len_v = e.int(seg.len as i64);
    let (lo, hi) = match keys {
        Some((c0, c1)) => {
            let clamp = |e: &mut Emit, c: Value| {
                let x = e.b.ins().iadd_imm_s(c, -(seg.start as i64));
                let x = e.b.ins().smax(x, zero);
                e.min_usize(x, len_v)
            };
            (clamp(e, c0), clamp(e, c1))
        }
        None => (zero, len_v),
    };
    let skip = a.skips_tiles();
    e.for_range(lo, hi, bc as i64, |e, jl| {
        // jl counts keys within the segment, j0 within all the keys.
        let j0 = e.b.ins().iadd_imm_s(jl, seg.start as i64);
        let left = e.b.ins().isub(hi, jl);
        let bc_v = e.int(bc as i64);
        let cols = e.min_usize(bc_v, left);
        let whole = (jl, j0, cols);
        let (tile, some) = match &a.positions {
            Some(p) => chunked(e, &p.keep, task, whole, skip),
            None => (
                Keys {
                    jl,
                    j0,
                    cols,
                    tested: None,
                },
                None,
            ),
        };
        let mut visit = |e: &mut Emit| match task.visible {
            Some(range) => visit_if_seen(e, a, (task, seg, &tile), range, os, scratch),
            None => visit(e, a, (task, seg, &tile), os, scratch),
        };
        match some {
            Some(some) => e.when(some, &mut visit),
            None => visit(e),
        }
    });
}

/// A tile of keys `(jl, j0, cols)` under a mask of positions, decided a chunk of
/// [`POSITION_CHUNK`] keys at a time: cut to the chunks some row of the task keeps (where
/// the kernel skips tiles; with whether any is left), and tested on the chunks it keeps in
/// part. A causal block of rows visits the keys up to its last row in tiles of 256, and
/// tests only the chunk on its diagonal.
fn chunked(
    e: &mut Emit,
    keep: &Keep,
    task: &Rows,
    (jl, j0, cols): (Value, Value, Value),
    skip: bool,
) -> (Keys, Option<Value>) {
    let end = e.b.ins().iadd(j0, cols);
    let last_i = e.b.ins().iadd(task.i0, task.rows);
    let last_i = e.b.ins().iadd_imm_s(last_i, -1);
    // [lo, hi): the chunks some row keeps; [ta, tb): those that not every row keeps whole.
    let (lo, hi) = match skip {
        true => (end, j0),
        false => (j0, end),
    };
    let [lo, hi, ta, tb] = [lo, hi, end, j0].map(|x| e.var(I64, x));
    // A loop over the chunks, not one copy of the test per chunk: a tile of 256 keys
    // unrolled doubled the attention kernel's compile.
    e.for_range(j0, end, POSITION_CHUNK as i64, |e, cs| {
        let ce = e.b.ins().iadd_imm_s(cs, POSITION_CHUNK as i64);
        let ce = e.min_usize(ce, end);
        let last_j = e.b.ins().iadd_imm_s(ce, -1);
        let (all, none) = truth(e, keep, (task.i0, last_i), (cs, last_j));
        if skip {
            let kept = e.b.ins().bxor_imm_u(none, 1);
            widen(e, kept, (lo, hi), (cs, ce));
        }
        let tested = e.b.ins().bxor_imm_u(all, 1);
        widen(e, tested, (ta, tb), (cs, ce));
    });
    let [lo, hi, ta, tb] = [lo, hi, ta, tb].map(|v| e.b.use_var(v));
    let head = e.b.ins().isub(lo, j0);
    let keys = Keys {
        jl: e.b.ins().iadd(jl, head),
        j0: lo,
        cols: e.b.ins().isub(hi, lo),
        tested: Some((ta, tb)),
    };
    let some = skip.then(|| e.b.ins().icmp(IntCC::SignedLessThan, lo, hi));
    (keys.clipped(e), some)
}

/// The range in `(lo, hi)` widened to cover `[cs, ce)` where `cond`.
fn widen(e: &mut Emit, cond: Value, (lo, hi): (Variable, Variable), (cs, ce): (Value, Value)) {
    let (old_lo, old_hi) = (e.b.use_var(lo), e.b.use_var(hi));
    let (lo2, hi2) = (e.min_usize(old_lo, cs), e.max_usize(old_hi, ce));
    let new_lo = e.b.ins().select(cond, lo2, old_lo);
    let new_hi = e.b.ins().select(cond, hi2, old_hi);
    e.b.def_var(lo, new_lo);
    e.b.def_var(hi, new_hi);
}

/// The tile's keys within the keys `range` the task's rows keep, visited where there are
/// any; the whole tile where a value of a key outside the range is not finite (PyTorch's
/// `0 · v` then gives NaN, which visiting it gives too).
///
/// A key outside the range scores `-inf` in every row: it adds 0 to each row's sum and
/// `0 · v` to its output, which changes no value where `v` is finite. So a tile that meets the
/// range only in part is cut to the keys in it: under a causal mask read from a tensor, a
/// block of rows visits keys up to its last row, not up to the end of the tile that holds it.
fn visit_if_seen(
    e: &mut Emit,
    a: &Attention,
    (task, seg, keys): (&Rows, &Segment, &Keys),
    (lo, hi): (Value, Value),
    os: &[usize],
    scratch: &Scratch,
) {
    let r = a.batch.len();
    let end = e.b.ins().iadd(keys.j0, keys.cols);
    // The tile's keys in the range, [from, to): empty (from == to) where it meets none.
    let from = e.max_usize(lo, keys.j0);
    let from = e.min_usize(from, end);
    let to = e.max_usize(hi, from);
    let to = e.min_usize(to, end);
    // The keys outside it: [j0, from) and [to, end).
    let strides = (seg.vs[r], seg.vs[r + 1]);
    let head = e.b.ins().isub(from, keys.j0);
    let vb = e.step(seg.v, keys.jl, strides.0);
    let finite_before = values_finite(e, vb, strides, head, a.dv);
    let tail = e.b.ins().isub(end, to);
    let after = e.b.ins().isub(to, keys.j0);
    let after = e.b.ins().iadd(keys.jl, after);
    let vb = e.step(seg.v, after, strides.0);
    let finite_after = values_finite(e, vb, strides, tail, a.dv);
    let finite = e.b.ins().band(finite_before, finite_after);
    let (jl, cols) = (e.b.ins().iadd(keys.jl, head), e.b.ins().isub(to, from));
    let tile = Keys {
        jl: e.b.ins().select(finite, jl, keys.jl),
        j0: e.b.ins().select(finite, from, keys.j0),
        cols: e.b.ins().select(finite, cols, keys.cols),
        tested: keys.tested,
    }
    .clipped(e);
    let seen = e.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, tile.cols, 0);
    e.when(seen, |e| visit(e, a, (task, seg, &tile), os, scratch));
}

/// One tile: the scores `scale · q kᵀ` into scratch, each row's update, then the tile
/// times the values onto the output rows.
fn visit(
    e: &mut Emit,
    a: &Attention,
    (task, seg, keys): (&Rows, &Segment, &Keys),
    os: &[usize],
    scratch: &Scratch,
) {
    let r = a.batch.len();
    let (bc, qs, ks, vs) = (a.block.1, &a.q.strides, seg.ks, seg.vs);
    // tile[i, j] = scale * Σ_p q[i, p] k[j0 + j, p]
    let kb = e.step(seg.k, keys.jl, ks[r]);
    let dk = e.int(a.dk as i64);
    let [t_rs, t_cs, q_rs, q_cs, k_rs, k_cs] =
        [bc, 1, qs[r], qs[r + 1], ks[r + 1], ks[r]].map(|s| e.int(s as i64));
    let scale = e.f32(a.scale);
    let no = e.b.ins().iconst(I32, 0);
    let (rows, cols, tile, q) = (task.rows, keys.cols, scratch.tile, task.q);
    e.sgemm([
        rows, cols, dk, tile, t_rs, t_cs, q, q_rs, q_cs, kb, k_rs, k_cs, scale, no,
    ]);
    let later = e.b.use_var(task.started);
    let zero = e.int(0);
    let rows_pass = |e: &mut Emit, masked: bool| match e.has_softmax_tile() {
        true => {
            // A change the same for every row goes to the shim as a row of keys, a tensor
            // added to the scores as its rows; any other is applied to the tile here.
            let shim = shim_change(e, a, (task, keys), masked, scratch.keys);
            let masked = masked && shim.keys.is_none();
            let changed = a.score.is_some() && shim.is_none();
            if changed || masked || a.positions.is_some() {
                e.for_range(zero, rows, 1, |e, i| {
                    scored_row(e, a, (task, keys), (i, masked), scratch, store_scores)
                });
            }
            let out = (task.out, os[r], os[r + 1], a.dv);
            let stats = (scratch.max_row, scratch.sum_row);
            tile_softmax(e, (rows, cols), (tile, bc), stats, out, later, shim);
        }
        false => e.for_range(zero, rows, 1, |e, i| {
            update_row(e, a, (task, keys), (i, masked), later, os, scratch)
        }),
    };
    match task.whole {
        // A tile of keys every row keeps: the mask test would keep every score.
        Some((lo, hi)) => {
            let end = e.b.ins().iadd(keys.j0, cols);
            let from = e.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, keys.j0, lo);
            let to = e.b.ins().icmp(IntCC::SignedLessThanOrEqual, end, hi);
            let inside = e.b.ins().band(from, to);
            let outside = e.b.ins().bxor_imm_u(inside, 1);
            e.when(inside, |e| rows_pass(e, false));
            e.when(outside, |e| rows_pass(e, true));
        }
        None => rows_pass(e, a.mask.is_some()),
    }
    // out[i, :] (+)= Σ_j tile[i, j] v[j0 + j, :]
    let vb = e.step(seg.v, keys.jl, vs[r]);
    let dv = e.int(a.dv as i64);
    let [o_rs, o_cs, t_rs, t_cs, v_rs, v_cs] =
        [os[r], os[r + 1], bc, 1, vs[r], vs[r + 1]].map(|s| e.int(s as i64));
    let one = e.f32(1.0);
    let acc = e.b.ins().uextend(I32, later);
    let out = task.out;
    e.sgemm([
        rows, dv, cols, out, o_rs, o_cs, tile, t_rs, t_cs, vb, v_rs, v_cs, one, acc,
    ]);
    let yes = e.b.ins().iconst(I8, 1);
    e.b.def_var(task.started, yes);
}

/// Where nothing must come before the tile's score changes, the changes the native softmax
/// applies as it reads the scores ([`ShimChange`]): a tensor mask broadcast over the rows
/// (tested in this tile: `masked`) with no score change, as a row of keys computed once for
/// the tile at `dst`; or, where no mask is tested, a score change `s + x` whose `x` is the
/// same for every row (an additive padding mask: a row of keys), a tensor read by row and
/// key (T5's position bias: added as the shim reads it), or such a tensor plus a row of
/// keys. Nothing otherwise: the changes are applied to the tile row by row.
fn shim_change(
    e: &mut Emit,
    a: &Attention,
    (task, keys): (&Rows, &Keys),
    masked: bool,
    dst: Value,
) -> ShimChange {
    let none = ShimChange::default();
    if a.positions.is_some() {
        return none;
    }
    let r = a.batch.len();
    let score = match (&a.score, task.mask.filter(|_| masked)) {
        (None, Some(mask)) if mask.1.mask.strides[r] == 0 => {
            let keys = Some(mask_hits(e, a, mask, keys, dst));
            return ShimChange { keys, added: None };
        }
        (Some(score), None) => score,
        _ => return none,
    };
    if let Some(x) = added_per_key(score, r) {
        let keys = Some(key_addend(e, a, (score, x), (task, keys), dst));
        return ShimChange { keys, added: None };
    }
    let Some((input, x)) = added_per_row(score, r) else {
        return none;
    };
    ShimChange {
        keys: x.map(|x| key_addend(e, a, (score, x), (task, keys), dst)),
        added: Some((
            e.step(task.score[input], keys.j0, 1),
            score.inputs[input].strides[r],
        )),
    }
}

/// Which nodes of a score change are the same for every row: they read the key index,
/// constants and inputs broadcast over the rows, never the score or the row index. The
/// nodes are taken in evaluation order, so no walk recurses.
fn per_key(score: &ScoreMod, r: usize) -> Vec<bool> {
    let mut per_key: Vec<bool> = Vec::with_capacity(score.expr.len());
    for n in &score.expr {
        let of = |k: usize| per_key.get(k).copied().unwrap_or(false);
        let yes = match *n {
            // The score and the row index; the key index.
            Expr::Input(0 | 1) => false,
            Expr::Input(2) => true,
            Expr::Input(k) => (score.inputs.get(k - ScoreMod::LEAVES)).is_some_and(|o| o.strides[r] == 0),
            Expr::Const(_) => true,
            Expr::Reduced(_) | Expr::Index(_) => false,
            Expr::Unary(_, x) => of(x),
            Expr::Binary(_, x, y) | Expr::Compare(_, x, y) => of(x) && of(y),
            Expr::Select(c, x, y) => of(c) && of(x) && of(y),
        };
        per_key.push(yes);
    }
    per_key
}

/// Where a score change is `s + x` (or `x + s`), `x`'s node.
fn added_to_score(expr: &[Expr]) -> Option<usize> {
    match *expr.last()? {
        Expr::Binary(BinaryOp::Add, s, x) if expr.get(s) == Some(&Expr::Input(0)) => Some(x),
        Expr::Binary(BinaryOp::Add, x, s) if expr.get(s) == Some(&Expr::Input(0)) => Some(x),
        _ => None,
    }
}

/// Where a score change is `s + x` with `x` the same for every row (see [`per_key`]),
/// `x`'s node.
fn added_per_key(score: &ScoreMod, r: usize) -> Option<usize> {
    let x = added_to_score(&score.expr)?;
    per_key(score, r).get(x).copied().unwrap_or(false).then_some(x)
}

/// Where a score change is `s + t` or `s + (t + y)` (either order of each sum: IEEE
/// addition commutes, bit for bit) with `t` an input read by row and key (unit stride
/// along the keys) and `y` the same for every row: `t`'s index among the inputs, and `y`'s
/// node.
fn added_per_row(score: &ScoreMod, r: usize) -> Option<(usize, Option<usize>)> {
    let expr = &score.expr;
    let by_row = |n: usize| match expr.get(n) {
        Some(&Expr::Input(k)) if k >= ScoreMod::LEAVES => {
            let o = score.inputs.get(k - ScoreMod::LEAVES)?;
            (o.strides[r] != 0 && o.strides[r + 1] == 1).then_some(k - ScoreMod::LEAVES)
        }
        _ => None,
    };
    let x = added_to_score(expr)?;
    if let Some(t) = by_row(x) {
        return Some((t, None));
    }
    let Some(&Expr::Binary(BinaryOp::Add, p, q)) = expr.get(x) else {
        return None;
    };
    let per_key = per_key(score, r);
    let keyed = |n: usize| per_key.get(n).copied().unwrap_or(false);
    match (by_row(p), by_row(q)) {
        (Some(t), _) if keyed(q) => Some((t, Some(q))),
        (_, Some(t)) if keyed(p) => Some((t, Some(p))),
        _ => None,
    }
}

/// `x` of the score change `s + x` (its node `x`, the same for every row: see
/// [`added_per_key`]) at each of the tile's keys, computed as the row pass would, at `dst`.
fn key_addend(
    e: &mut Emit,
    a: &Attention,
    (score, x): (&ScoreMod, usize),
    (task, keys): (&Rows, &Keys),
    dst: Value,
) -> (Value, KeyChange) {
    let r = a.batch.len();
    let inputs: Vec<(Value, usize)> = (score.inputs.iter().zip(&task.score))
        .map(|(o, &base)| (e.step(base, keys.j0, o.strides[r + 1]), o.strides[r + 1]))
        .collect();
    // The nodes up to `x` are a formula whose result is `x`; the score and the row index
    // it does not read are 0.
    let expr = &score.expr[..=x];
    lanes(e, keys.cols, true, |e, j, w| {
        let zero = e.splat(0.0, w);
        let key = e.b.ins().iadd(keys.j0, j);
        let mut leaves = vec![zero, zero, e.iota(key, w)];
        for &(p, stride) in &inputs {
            let p = e.step(p, j, stride);
            leaves.push(e.load(p, w, stride, true));
        }
        let v = eval(e, expr, &leaves, &[], w);
        let at = e.step(dst, j, 1);
        e.store(v, at);
    });
    (dst, KeyChange::Add)
}

/// The tile's keys the mask (the same for every row) fills, as 1.0 (filled) or 0.0 at
/// `hits`, read once for the tile; with the fill, for the native softmax.
fn mask_hits(
    e: &mut Emit,
    a: &Attention,
    (p, m): (Value, &MaskFill),
    keys: &Keys,
    hits: Value,
) -> (Value, KeyChange) {
    let stride = m.mask.strides[a.batch.len() + 1];
    let p = e.step(p, keys.j0, stride);
    lanes(e, keys.cols, stride <= 1, |e, j, w| {
        let at = e.step(p, j, stride);
        let mv = e.load(at, w, stride, true);
        let rhs = e.splat(m.rhs, w);
        let hit = e.cmp_value(float_cc(m.op), mv, rhs);
        let dst = e.step(hits, j, 1);
        e.store(hit, dst);
    });
    (hits, KeyChange::Fill(m.fill))
}

/// Row `i` of a visited tile: the score change and both masks, then the row's running
/// maximum and sum, and its output rescaled where the maximum moved (`later`: a tile was
/// visited before this one).
fn update_row(
    e: &mut Emit,
    a: &Attention,
    (task, keys): (&Rows, &Keys),
    (i, masked): (Value, bool),
    later: Value,
    os: &[usize],
    scratch: &Scratch,
) {
    scored_row(e, a, (task, keys), (i, masked), scratch, |e, row| {
        online_update(e, a, task, (i, later), os, scratch, row)
    });
}

/// Row `i` of a visited tile as [`Row`] for `then`: a mask of positions and the score
/// change it must follow applied in place, and the tensor mask (where `masked`: not in a
/// tile every row keeps whole) and any other score change left to the row's first pass.
fn scored_row(
    e: &mut Emit,
    a: &Attention,
    (task, keys): (&Rows, &Keys),
    (i, masked): (Value, bool),
    scratch: &Scratch,
    then: impl FnOnce(&mut Emit, &Row),
) {
    let r = a.batch.len();
    let (j0, cols) = (keys.j0, keys.cols);
    let trow = e.step(scratch.tile, i, a.block.1);
    let inputs: Vec<(Value, usize)> = (a.score.iter().flat_map(|s| &s.inputs).zip(&task.score))
        .map(|(o, &base)| {
            let p = e.step(base, i, o.strides[r]);
            (e.step(p, j0, o.strides[r + 1]), o.strides[r + 1])
        })
        .collect();
    let change = a.score.as_ref().map(|score| Change {
        expr: &score.expr,
        i: e.b.ins().iadd(task.i0, i),
        j0,
        inputs: &inputs,
    });
    // The score change goes into the row's first pass (one read and write of the tile
    // fewer), unless a mask of positions must fill the changed scores before it.
    let change = match (change, &a.positions) {
        (Some(change), Some(_)) => {
            modify_scores(e, &change, trow, cols);
            None
        }
        (change, _) => change,
    };
    if let (Some(p), Some((ta, tb))) = (&a.positions, keys.tested) {
        let partial = e.b.ins().icmp(IntCC::SignedLessThan, ta, tb);
        let row_i = e.b.ins().iadd(task.i0, i);
        e.when(partial, |e| {
            let from = e.b.ins().isub(ta, j0);
            let row = e.step(trow, from, 1);
            let len = e.b.ins().isub(tb, ta);
            fill_removed(e, &p.keep, p.fill, row, row_i, ta, len)
        });
    }
    let mrow = task.mask.as_ref().filter(|_| masked).map(|&(p, m)| {
        let p = e.step(p, i, m.mask.strides[r]);
        let p = e.step(p, j0, m.mask.strides[r + 1]);
        (p, m.mask.strides[r + 1], m.clone())
    });
    let row = Row {
        len: cols,
        src: trow,
        src_stride: 1,
        src_ro: false,
        dst: trow,
        dst_stride: 1,
        scale: 1.0,
        mask: mrow,
        change,
    };
    then(e, &row);
}

/// The online softmax's update of row `i` on Cranelift's vectors: its running maximum and
/// sum, `exp` of its scores, and its outputs rescaled where the maximum moved.
fn online_update(
    e: &mut Emit,
    a: &Attention,
    task: &Rows,
    (i, later): (Value, Value),
    os: &[usize],
    scratch: &Scratch,
    row: &Row,
) {
    let r = a.batch.len();
    let row_max = scale_mask_max(e, row);
    let m_at = e.step(scratch.max_row, i, 1);
    let s_at = e.step(scratch.sum_row, i, 1);
    let m_old = e.b.ins().load(F32, MemFlagsData::new().with_notrap(), m_at, 0);
    let m_new = e.max(m_old, row_max);
    let ninf = e.f32(f32::NEG_INFINITY);
    let none_yet = e.cmp(FloatCC::Equal, m_new, ninf);
    let z = e.f32(0.0);
    let base = e.pick(none_yet, z, m_new);
    let sum = exp_sum(e, row, base, false);
    // `base` is at least `m_old`: the exponent is never positive, and a maximum that
    // moved by more than 104 gives exactly 0 without an underflowing product.
    let d = e.b.ins().fsub(m_old, base);
    let corr = e.exp_nonpositive(d);
    let l_old = e.b.ins().load(F32, MemFlagsData::new().with_notrap(), s_at, 0);
    let l_new = e.b.ins().fma(l_old, corr, sum);
    e.store(l_new, s_at);
    e.store(m_new, m_at);
    // A row whose maximum did not move keeps its outputs as they are: a product by
    // exactly 1 changes no bit, and most tiles after the first few of a row do not raise
    // its maximum.
    let one = e.f32(1.0);
    let moved = e.cmp(FloatCC::NotEqual, corr, one);
    let rescale = e.b.ins().band(later, moved);
    e.when(rescale, |e| {
        let orow = e.step(task.out, i, os[r]);
        let dv = e.int(a.dv as i64);
        scale_row(e, orow, dv, os[r + 1], corr);
    });
}

/// Each of the task's rows divided by its sum (at `out`, with its row and column strides
/// `os`); a row whose every score was `-inf` is 0 where the kernel says so, not NaN.
fn normalize(
    e: &mut Emit,
    a: &Attention,
    (out, os): (Value, &[usize]),
    (zero, rows): (Value, Value),
    sum_row: Value,
) {
    e.for_range(zero, rows, 1, |e, i| {
        let s_at = e.step(sum_row, i, 1);
        let l = e.b.ins().load(F32, MemFlagsData::new().with_notrap(), s_at, 0);
        let one = e.f32(1.0);
        let mut inv = e.b.ins().fdiv(one, l);
        if a.zero_empty_rows {
            // Every score was -inf: the sum is exactly 0, and the row is 0, not NaN.
            let z = e.f32(0.0);
            let empty = e.cmp(FloatCC::Equal, l, z);
            inv = e.pick(empty, z, inv);
        }
        let orow = e.step(out, i, os[0]);
        let dv = e.int(a.dv as i64);
        scale_row(e, orow, dv, os[1], inv);
    });
}

/// The end of a chunk's task: each row's running maximum and sum after its `dv` outputs,
/// which stay un-normalized for the merge, and are 0 where the chunk visited no tile (it
/// never wrote them; the merge gives them the weight 0, and 0 × garbage could be NaN).
fn finish_chunk(
    e: &mut Emit,
    (out, os): (Value, &[usize]),
    dv: usize,
    rows: Value,
    (max_row, sum_row): (Value, Value),
    visited: Value,
) {
    let zero = e.int(0);
    e.for_range(zero, rows, 1, |e, i| {
        let orow = e.step(out, i, os[0]);
        let none = e.b.ins().bxor_imm_u(visited, 1);
        e.when(none, |e| zero_row(e, orow, dv, os[1]));
        for (k, stat) in [max_row, sum_row].into_iter().enumerate() {
            let from = e.step(stat, i, 1);
            let x = e.b.ins().load(F32, MemFlagsData::new().with_notrap(), from, 0);
            let col = e.int((dv + k) as i64);
            let to = e.step(orow, col, os[1]);
            e.store(x, to);
        }
    });
}

/// `row[j] = 0` for the `dv` outputs of a row, `stride` apart.
fn zero_row(e: &mut Emit, row: Value, dv: usize, stride: usize) {
    let (zero, z, dv) = (e.int(0), e.f32(0.0), e.int(dv as i64));
    e.for_range(zero, dv, 1, |e, j| {
        let at = e.step(row, j, stride);
        e.store(z, at);
    });
}

/// The batch index of `k` and `v`: the head (the last batch axis) divided by the group.
fn kv_index(e: &mut Emit, idx: &[Value], group: usize) -> Vec<Value> {
    let mut kv = idx.to_vec();
    if let Some(head) = kv.last_mut().filter(|_| group > 1) {
        *head = e.b.ins().udiv_imm_u(*head, group as i64);
    }
    kv
}

/// Whether `keep` holds on all, and on none, of rows `i.0..=i.1` and keys `j.0..=j.1`, as
/// two booleans ([`Keep::truth`] in code: each comparison at the corners its signs pick).
fn truth(e: &mut Emit, keep: &Keep, i: (Value, Value), j: (Value, Value)) -> (Value, Value) {
    match keep {
        Keep::Atom(a) => {
            let lo = affine(
                e,
                a,
                if a.ci >= 0 { i.0 } else { i.1 },
                if a.cj >= 0 { j.0 } else { j.1 },
            );
            let hi = affine(
                e,
                a,
                if a.ci >= 0 { i.1 } else { i.0 },
                if a.cj >= 0 { j.1 } else { j.0 },
            );
            let all = e.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, lo, 0);
            let none = e.b.ins().icmp_imm_s(IntCC::SignedLessThan, hi, 0);
            (all, none)
        }
        Keep::And(a, b) => {
            let ((a_all, a_none), (b_all, b_none)) = (truth(e, a, i, j), truth(e, b, i, j));
            (e.b.ins().band(a_all, b_all), e.b.ins().bor(a_none, b_none))
        }
        Keep::Or(a, b) => {
            let ((a_all, a_none), (b_all, b_none)) = (truth(e, a, i, j), truth(e, b, i, j));
            (e.b.ins().bor(a_all, b_all), e.b.ins().band(a_none, b_none))
        }
        Keep::Not(a) => {
            let (all, none) = truth(e, a, i, j);
            (none, all)
        }
    }
}

/// `ci * i + cj * j + c`.
fn affine(e: &mut Emit, a: &crate::kernel::Affine, i: Value, j: Value) -> Value {
    let ti = e.b.ins().imul_imm_s(i, a.ci);
    let tj = e.b.ins().imul_imm_s(j, a.cj);
    let sum = e.b.ins().iadd(ti, tj);
    e.b.ins().iadd_imm_s(sum, a.c)
}

/// Whether `keep` holds at row `i`, key `j`.
fn holds(e: &mut Emit, keep: &Keep, i: Value, j: Value) -> Value {
    match keep {
        Keep::Atom(a) => {
            let x = affine(e, a, i, j);
            e.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, x, 0)
        }
        Keep::And(a, b) => {
            let (a, b) = (holds(e, a, i, j), holds(e, b, i, j));
            e.b.ins().band(a, b)
        }
        Keep::Or(a, b) => {
            let (a, b) = (holds(e, a, i, j), holds(e, b, i, j));
            e.b.ins().bor(a, b)
        }
        Keep::Not(a) => {
            let a = holds(e, a, i, j);
            e.b.ins().bxor_imm_u(a, 1)
        }
    }
}

/// `row[j] = fill` for the keys `j0 + j` (`j < cols`) that `keep` removes from row `i`.
fn fill_removed(e: &mut Emit, keep: &Keep, fill: f32, row: Value, i: Value, j0: Value, cols: Value) {
    let zero = e.int(0);
    e.for_range(zero, cols, 1, |e, j| {
        let key = e.b.ins().iadd(j0, j);
        let kept = holds(e, keep, i, key);
        let at = e.step(row, j, 1);
        let x = e.b.ins().load(F32, MemFlagsData::new().with_notrap(), at, 0);
        let f = e.f32(fill);
        let y = e.b.ins().select(kept, x, f);
        e.store(y, at);
    });
}

/// `row[j] = change(row[j])` for `j < cols`, four keys at a time: the score change,
/// before a mask of positions fills the scores it removes.
fn modify_scores(e: &mut Emit, change: &Change, row: Value, cols: Value) {
    lanes(e, cols, true, |e, j, w| {
        let at = e.step(row, j, 1);
        let s = e.load(at, w, 1, false);
        let v = change.apply(e, s, j, w);
        e.store(v, at);
    });
}
