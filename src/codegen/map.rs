//! The elementwise kernel: a fused expression over a strided iteration space, four lanes
//! at a time where every operand is contiguous (or broadcast) along the last axis.

use super::emit::{Emit, LANES};
use super::math::eval;
use super::softmax::lanes;
use crate::kernel::{Expr, Map, Operand};
use cranelift_codegen::ir::types::F32X4;
use cranelift_codegen::ir::{InstBuilder, Value};

/// A rank-0 iteration space as one element.
fn normalized(m: &Map) -> (Vec<usize>, Vec<Operand>, Operand) {
    if !m.shape.is_empty() {
        return (m.shape.clone(), m.inputs.clone(), m.out.clone());
    }
    let one = |o: &Operand| Operand {
        strides: vec![0],
        ..o.clone()
    };
    (vec![1], m.inputs.iter().map(one).collect(), one(&m.out))
}

pub fn translate(e: &mut Emit, m: &Map) {
    let (shape, inputs, out) = normalized(m);
    let (&len, outer) = shape.split_last().expect("rank at least 1");
    let rows: usize = outer.iter().product();
    let last = shape.len() - 1;
    // Four lanes at a time wherever the output row is contiguous; an input strided along
    // the row (a transposing copy) is gathered four scalars at a time.
    let vector = len >= LANES && out.strides[last] == 1;
    let transposing = inputs.iter().any(|i| i.strides[last] > 1);
    let in_ptrs: Vec<Value> = (0..inputs.len()).map(|i| e.arg(i)).collect();
    let out_ptr = e.arg(inputs.len());
    let rpt = m.rows_per_task as i64;
    // A transposing copy (an input strided along the row) reads each cache line once per
    // row; walking the rows of a task a chunk of columns at a time reuses the lines.
    let chunk = match transposing && len > CHUNK && m.rows_per_task > 1 {
        true => CHUNK,
        false => len,
    };
    let (begin, end) = (e.begin, e.end);
    e.for_range(begin, end, 1, |e, t| {
        let r0 = e.b.ins().imul_imm_s(t, rpt);
        let r1 = e.b.ins().iadd_imm_s(r0, rpt);
        let total = e.int(rows as i64);
        let r1 = e.min_usize(r1, total);
        let (zero, len_v) = (e.int(0), e.int(len as i64));
        e.for_range(zero, len_v, chunk as i64, |e, c0| {
            let c1 = e.b.ins().iadd_imm_s(c0, chunk as i64);
            let c1 = e.min_usize(c1, len_v);
            let width = e.b.ins().isub(c1, c0);
            e.for_range(r0, r1, 1, |e, r| {
                let idx = e.unflatten(r, outer);
                let bases: Vec<Value> = inputs
                    .iter()
                    .zip(&in_ptrs)
                    .map(|(o, &p)| {
                        let off = e.dot(&idx, &o.strides[..last]);
                        let p = e.at(p, off);
                        e.step(p, c0, o.strides[last])
                    })
                    .collect();
                let off = e.dot(&idx, &out.strides[..last]);
                let dst = e.at(out_ptr, off);
                let dst = e.step(dst, c0, out.strides[last]);
                let mut body = |e: &mut Emit, j: Value, w: usize| {
                    let vals: Vec<Value> = inputs
                        .iter()
                        .zip(&bases)
                        .map(|(o, &base)| {
                            let s = o.strides[last];
                            let addr = e.step(base, j, s);
                            e.load(addr, w, s, true)
                        })
                        .collect();
                    let known = indices(e, &m.expr, &idx, (c0, j), w);
                    let v = eval(e, &m.expr, &vals, &known, w);
                    let addr = e.step(dst, j, out.strides[last]);
                    e.store(v, addr);
                };
                lanes(e, width, vector, &mut body);
            });
        });
    });
}

/// Columns per chunk of a transposing copy.
const CHUNK: usize = 64;

/// The value of each [`Expr::Index`] node at this element, on `w` lanes: the column
/// `c0 + j` (one per lane) for the last axis, the row's index along an outer one.
fn indices(
    e: &mut Emit,
    expr: &[Expr],
    outer: &[Value],
    (c0, j): (Value, Value),
    w: usize,
) -> Vec<Option<Value>> {
    expr.iter()
        .map(|n| match *n {
            Expr::Index(a) if a == outer.len() => {
                let col = e.b.ins().iadd(c0, j);
                Some(e.iota(col, w))
            }
            Expr::Index(a) => {
                let x = e.iota(outer[a], 1);
                Some(if w == 1 { x } else { e.b.ins().splat(F32X4, x) })
            }
            _ => None,
        })
        .collect()
}
