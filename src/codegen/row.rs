//! The row kernel: for each row, every reduction stage in order, then the write.
//!
//! A stage walks the row four lanes at a time into two vector accumulators (eight lanes a
//! trip, two independent chains), then the last lanes one at a time; the accumulators are
//! combined in a fixed order, so a row's result never depends on the task it falls in.
//! Nodes of a formula that read no input (`1 / n`, `rsqrt(var + eps)`, `log(sum)`) are
//! computed once per row, not once per element.

use super::emit::{Emit, LANES};
use super::math::{binary, eval, node};
use super::softmax::lanes;
use crate::kernel::{BinaryOp, Expr, ReduceOp, Row, Stage};
use cranelift_codegen::ir::types::{F32, F32X4};
use cranelift_codegen::ir::{InstBuilder, Value};

/// An input's row: its first element and its stride along the row.
#[derive(Clone, Copy)]
struct Line {
    base: Value,
    stride: usize,
}

pub fn translate(e: &mut Emit, r: &Row) {
    let depth = r.rows.len();
    let total: usize = r.rows.iter().product();
    let in_ptrs: Vec<Value> = (0..r.inputs.len()).map(|i| e.arg(i)).collect();
    let out_ptr = e.arg(r.inputs.len());
    let rpt = r.rows_per_task as i64;
    let (begin, end) = (e.begin, e.end);
    e.for_range(begin, end, 1, |e, t| {
        let r0 = e.b.ins().imul_imm_s(t, rpt);
        let r1 = e.b.ins().iadd_imm_s(r0, rpt);
        let total = e.int(total as i64);
        let r1 = e.min_usize(r1, total);
        e.for_range(r0, r1, 1, |e, row| {
            let idx = e.unflatten(row, &r.rows);
            let lines: Vec<Line> = r
                .inputs
                .iter()
                .zip(&in_ptrs)
                .map(|(o, &p)| {
                    let off = e.dot(&idx, &o.strides[..depth]);
                    Line {
                        base: e.at(p, off),
                        stride: o.strides[depth],
                    }
                })
                .collect();
            let mut reduced = Vec::new();
            for stage in &r.stages {
                let v = reduce(e, stage, &lines, &reduced, r.n);
                reduced.push(e.pin(v));
            }
            let off = e.dot(&idx, &r.out.strides[..depth]);
            let dst = e.at(out_ptr, off);
            let (one, four) = per_row(e, &r.write, &reduced);
            if r.per_row() {
                let v = eval(e, &r.write, &[], &one, 1);
                e.store(v, dst);
                return;
            }
            let stride = r.out.strides[depth];
            let n = e.int(r.n as i64);
            lanes(e, n, r.n >= LANES && stride == 1, |e, j, w| {
                let vals = load(e, &r.write, &lines, j, w);
                let known = if w == 1 { &one } else { &four };
                let v = eval(e, &r.write, &vals, known, w);
                let addr = e.step(dst, j, stride);
                e.store(v, addr);
            });
        });
    });
}

/// The lanes `j..j + w` of every input `expr` reads (a zero in place of the others).
fn load(e: &mut Emit, expr: &[Expr], lines: &[Line], j: Value, w: usize) -> Vec<Value> {
    let used = |i: usize| expr.contains(&Expr::Input(i));
    (0..lines.len())
        .map(|i| match used(i) {
            true => {
                let Line { base, stride } = lines[i];
                let addr = e.step(base, j, stride);
                e.load(addr, w, stride, true)
            }
            false => e.splat(0.0, w),
        })
        .collect()
}

/// The nodes a node reads.
fn args(n: &Expr) -> Vec<usize> {
    match *n {
        Expr::Input(_) | Expr::Const(_) | Expr::Reduced(_) | Expr::Index(_) => vec![],
        Expr::Unary(_, a) => vec![a],
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => vec![a, b],
        Expr::Select(c, a, b) => vec![c, a, b],
    }
}

/// The nodes of `expr` that read no input, computed once for the row: their values on one
/// lane and splatted to four (`None` for the nodes that vary along the row).
fn per_row(e: &mut Emit, expr: &[Expr], reduced: &[Value]) -> (Vec<Option<Value>>, Vec<Option<Value>>) {
    let mut one: Vec<Option<Value>> = Vec::with_capacity(expr.len());
    for n in expr {
        let uniform = !matches!(n, Expr::Input(_)) && args(n).iter().all(|&a| one[a].is_some());
        let v = match (uniform, n) {
            (false, _) => None,
            (true, &Expr::Reduced(k)) => Some(reduced[k]),
            (true, n) => Some(node(e, expr, n, &|a| one[a].expect("uniform"), &[], 1)),
        };
        one.push(v);
    }
    // What the loop over the row reads is computed here, once per row: the mid-end would
    // otherwise place it next to its use, inside the loop.
    let mut pinned = vec![false; expr.len()];
    for (i, n) in expr.iter().enumerate() {
        if one[i].is_some() {
            continue;
        }
        for a in args(n) {
            let computed = !matches!(expr[a], Expr::Const(_) | Expr::Reduced(_));
            if let (Some(v), true, false) = (one[a], computed, pinned[a]) {
                one[a] = Some(e.pin(v));
                pinned[a] = true;
            }
        }
    }
    let four = one.iter().map(|v| v.map(|x| e.b.ins().splat(F32X4, x))).collect();
    (one, four)
}

/// `stage.reduce` over the row of `stage.expr`.
fn reduce(e: &mut Emit, stage: &Stage, lines: &[Line], reduced: &[Value], n: usize) -> Value {
    let (one, four) = per_row(e, &stage.expr, reduced);
    let identity = stage.reduce.identity();
    let value = |e: &mut Emit, j: Value, w: usize| {
        let vals = load(e, &stage.expr, lines, j, w);
        let known = if w == 1 { &one } else { &four };
        eval(e, &stage.expr, &vals, known, w)
    };
    let (n8, n4) = (n / (2 * LANES) * 2 * LANES, n / LANES * LANES);
    let init = e.f32(identity);
    let scalar = e.var(F32, init);
    let lanes_acc = (n4 > 0).then(|| {
        let init = e.splat(identity, LANES);
        let (a0, a1) = (e.var(F32X4, init), e.var(F32X4, init));
        let (zero, end8) = (e.int(0), e.int(n8 as i64));
        e.for_range(zero, end8, 2 * LANES as i64, |e, j| {
            for (acc, at) in [(a0, j), (a1, e.b.ins().iadd_imm_s(j, LANES as i64))] {
                let x = value(e, at, LANES);
                let old = e.b.use_var(acc);
                let new = combine(e, stage.reduce, old, x);
                e.b.def_var(acc, new);
            }
        });
        if n4 > n8 {
            let at = e.int(n8 as i64);
            let x = value(e, at, LANES);
            let old = e.b.use_var(a0);
            let new = combine(e, stage.reduce, old, x);
            e.b.def_var(a0, new);
        }
        let (x0, x1) = (e.b.use_var(a0), e.b.use_var(a1));
        let v = combine(e, stage.reduce, x0, x1);
        let lane: Vec<Value> = (0..4u8).map(|i| e.b.ins().extractlane(v, i)).collect();
        let lo = combine(e, stage.reduce, lane[0], lane[1]);
        let hi = combine(e, stage.reduce, lane[2], lane[3]);
        combine(e, stage.reduce, lo, hi)
    });
    if n > n4 {
        let (from, to) = (e.int(n4 as i64), e.int(n as i64));
        e.for_range(from, to, 1, |e, j| {
            let x = value(e, j, 1);
            let old = e.b.use_var(scalar);
            let new = combine(e, stage.reduce, old, x);
            e.b.def_var(scalar, new);
        });
    }
    let tail = e.b.use_var(scalar);
    match lanes_acc {
        Some(v) => combine(e, stage.reduce, v, tail),
        None => tail,
    }
}

/// One step of a reduction: NaN-propagating for `Max` and `Min`, as `amax` and `amin`.
fn combine(e: &mut Emit, reduce: ReduceOp, acc: Value, x: Value) -> Value {
    match reduce {
        ReduceOp::Sum => e.b.ins().fadd(acc, x),
        ReduceOp::Max => binary(e, BinaryOp::Maximum, acc, x),
        ReduceOp::Min => binary(e, BinaryOp::Minimum, acc, x),
    }
}
