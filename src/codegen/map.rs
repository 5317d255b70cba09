//! The elementwise kernel: a fused expression over a strided iteration space, four lanes
//! at a time where every operand is contiguous (or broadcast) along the last axis.

use super::emit::{Emit, LANES};
use super::softmax::lanes;
use crate::ir::{BinaryOp, CmpOp, UnaryOp};
use crate::kernel::{Expr, Map, Operand};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// The float condition code of a comparison (`!=` is true for NaN, as in Rust).
pub fn float_cc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
    }
}

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
                    let v = eval(e, &m.expr, &vals, w);
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

/// The expression's value on `w` lanes, given each input's lanes.
pub fn eval(e: &mut Emit, expr: &[Expr], inputs: &[Value], w: usize) -> Value {
    let mut v: Vec<Value> = Vec::with_capacity(expr.len());
    for node in expr {
        let x = match *node {
            Expr::Input(i) => inputs[i],
            Expr::Const(c) => e.splat(c, w),
            Expr::Unary(UnaryOp::Neg, a) => e.b.ins().fneg(v[a]),
            Expr::Unary(UnaryOp::Sqrt, a) => e.b.ins().sqrt(v[a]),
            Expr::Unary(UnaryOp::Exp, a) => e.exp(v[a]),
            Expr::Unary(op, _) => unreachable!("the lowering refuses `{op}` (lower::NATIVE_UNARY)"),
            Expr::Binary(op, a, b) => {
                let (a, b) = (v[a], v[b]);
                match op {
                    BinaryOp::Add => e.b.ins().fadd(a, b),
                    BinaryOp::Sub => e.b.ins().fsub(a, b),
                    BinaryOp::Mul => e.b.ins().fmul(a, b),
                    BinaryOp::Div => e.b.ins().fdiv(a, b),
                    _ => unreachable!("the lowering refuses `{op}` (lower::NATIVE_BINARY)"),
                }
            }
            Expr::Compare(op, a, b) => e.cmp_value(float_cc(op), v[a], v[b]),
            Expr::Select(m, value, x) => {
                let zero = e.splat(0.0, w);
                let set = e.cmp(FloatCC::NotEqual, v[m], zero);
                e.pick(set, v[value], v[x])
            }
        };
        v.push(x);
    }
    *v.last().expect("a map has an expression")
}
