//! The batched GEMM kernel: Cranelift walks the (batch, row block, column block) tasks,
//! computes the tile's pointers, calls the microkernel shim for the tile product, then adds
//! the bias and applies the epilogue to the tile it just wrote, in one pass. (The bias used
//! to be a prologue the product accumulated onto: one more pass over the tile, 4–7 % of
//! encoder_M's GEMMs with an epilogue; `BENCHMARKS.md`.)

use super::emit::Emit;
use super::math::eval;
use super::softmax::lanes;
use crate::kernel::{Gemm, Operand};
use cranelift_codegen::ir::types::I32;
use cranelift_codegen::ir::{InstBuilder, Value};

pub fn translate(e: &mut Emit, g: &Gemm) {
    let r = g.batch.len();
    let (a_ptr, b_ptr, c_ptr) = (e.arg(0), e.arg(1), e.arg(2));
    let bias_ptr = g.bias.as_ref().map(|_| e.arg(3));
    let first_input = 3 + usize::from(g.bias.is_some());
    let epilogue_ptrs: Vec<Value> = g
        .epilogue
        .iter()
        .flat_map(|ep| 0..ep.inputs.len())
        .map(|i| e.arg(first_input + i))
        .collect();
    let (rb, cb) = g.block;
    let (nrb, ncb) = (g.m.div_ceil(rb), g.n.div_ceil(cb));
    let (begin, end) = (e.begin, e.end);
    e.for_range(begin, end, 1, |e, t| {
        // t = ((batch index) * nrb + row block) * ncb + column block
        let col = e.b.ins().urem_imm_u(t, ncb as i64);
        let rest = e.b.ins().udiv_imm_u(t, ncb as i64);
        let row = e.b.ins().urem_imm_u(rest, nrb as i64);
        let bi = e.b.ins().udiv_imm_u(rest, nrb as i64);
        // A paired epilogue's task does both products of the last batch axis (index 0 here,
        // 1 after the first product).
        let idx = match g.paired() {
            true => {
                let mut idx = e.unflatten(bi, &g.batch[..r - 1]);
                idx.push(e.int(0));
                idx
            }
            false => e.unflatten(bi, &g.batch),
        };
        let i0 = e.b.ins().imul_imm_s(row, rb as i64);
        let j0 = e.b.ins().imul_imm_s(col, cb as i64);
        let m_all = e.int(g.m as i64);
        let m_left = e.b.ins().isub(m_all, i0);
        let rb_v = e.int(rb as i64);
        let rows = e.min_usize(rb_v, m_left);
        let n_all = e.int(g.n as i64);
        let n_left = e.b.ins().isub(n_all, j0);
        let cb_v = e.int(cb as i64);
        let cols = e.min_usize(cb_v, n_left);
        tile(
            e,
            g,
            (&idx, i0, j0, rows, cols),
            (a_ptr, b_ptr, c_ptr, bias_ptr),
            &epilogue_ptrs,
        );
    });
}

/// One task's tile: `rows × cols` of `c` from row `i0`, column `j0` of the batch element
/// `idx`: the product (both, paired), then the bias and the epilogue in one pass.
fn tile(
    e: &mut Emit,
    g: &Gemm,
    (idx, i0, j0, rows, cols): (&[Value], Value, Value, Value, Value),
    (a_ptr, b_ptr, c_ptr, bias_ptr): (Value, Value, Value, Option<Value>),
    epilogue_ptrs: &[Value],
) {
    let r = g.batch.len();
    let (a_s, b_s, c_s) = (&g.a.strides, &g.b.strides, &g.c.strides);
    let ao = e.dot(idx, &a_s[..r]);
    let a = e.at(a_ptr, ao);
    let a = e.step(a, i0, a_s[r]);
    let bo = e.dot(idx, &b_s[..r]);
    let b = e.at(b_ptr, bo);
    let b = e.step(b, j0, b_s[r + 1]);
    let co = e.dot(idx, &c_s[..r]);
    let c = e.at(c_ptr, co);
    let c = e.step(c, i0, c_s[r]);
    let c = e.step(c, j0, c_s[r + 1]);
    let bias = match (&g.bias, bias_ptr) {
        (Some(bias), Some(p)) => Some((e.step(p, j0, bias.strides[0]), bias.strides[0])),
        _ => None,
    };
    let k = e.int(g.k as i64);
    let ints = [c_s[r], c_s[r + 1], a_s[r], a_s[r + 1], b_s[r], b_s[r + 1]].map(|s| e.int(s as i64));
    let alpha = e.f32(g.alpha);
    let acc = e.b.ins().iconst(I32, 0);
    e.sgemm([
        rows, cols, k, c, ints[0], ints[1], a, ints[2], ints[3], b, ints[4], ints[5], alpha, acc,
    ]);
    let second = g.paired().then(|| {
        let one = e.int(1);
        let (a1, b1, c1) = (
            e.step(a, one, a_s[r - 1]),
            e.step(b, one, b_s[r - 1]),
            e.step(c, one, c_s[r - 1]),
        );
        e.sgemm([
            rows, cols, k, c1, ints[0], ints[1], a1, ints[2], ints[3], b1, ints[4], ints[5], alpha, acc,
        ]);
        c1
    });
    if g.epilogue.is_none() && bias.is_none() {
        return;
    }
    let inputs = g.epilogue.iter().flat_map(|ep| &ep.inputs);
    let bases: Vec<Value> = inputs
        .zip(epilogue_ptrs)
        .map(|(o, &p)| {
            let off = e.dot(idx, &o.strides[..r]);
            let p = e.at(p, off);
            let p = e.step(p, i0, o.strides[r]);
            e.step(p, j0, o.strides[r + 1])
        })
        .collect();
    epilogue(e, g, (c, second, rows, cols), &bases, bias);
}

/// `c[i, j] = expr(c[i, j] + bias[j], inputs[..][i, j])` over the tile at `c` (and at
/// `bases`, the inputs' elements of the tile's first row and column; at `second`, a paired
/// epilogue's second product), four lanes at a time where `c` is contiguous along the row.
/// Without an epilogue, `c[i, j] += bias[j]`.
fn epilogue(
    e: &mut Emit,
    g: &Gemm,
    (c, second, rows, cols): (Value, Option<Value>, Value, Value),
    bases: &[Value],
    bias: Option<(Value, usize)>,
) {
    let r = g.batch.len();
    let (c_rs, c_cs) = (g.c.strides[r], g.c.strides[r + 1]);
    let inputs: &[Operand] = g.epilogue.as_ref().map_or(&[], |ep| &ep.inputs);
    let vector = c_cs == 1;
    let zero = e.int(0);
    e.for_range(zero, rows, 1, |e, i| {
        let row = e.step(c, i, c_rs);
        let second_row = second.map(|p| e.step(p, i, c_rs));
        let starts: Vec<Value> = inputs
            .iter()
            .zip(bases)
            .map(|(o, &b)| e.step(b, i, o.strides[r]))
            .collect();
        lanes(e, cols, vector, |e, j, w| {
            let dst = e.step(row, j, c_cs);
            let mut first = e.load(dst, w, c_cs, false);
            if let Some((p, s)) = bias {
                let addr = e.step(p, j, s);
                let b = e.load(addr, w, s, true);
                first = e.b.ins().fadd(first, b);
            }
            let mut vals = vec![first];
            if let Some(p) = second_row {
                let addr = e.step(p, j, c_cs);
                vals.push(e.load(addr, w, c_cs, false));
            }
            for (o, &start) in inputs.iter().zip(&starts) {
                let s = o.strides[r + 1];
                let addr = e.step(start, j, s);
                vals.push(e.load(addr, w, s, true));
            }
            let v = match &g.epilogue {
                Some(ep) => eval(e, &ep.expr, &vals, &[], w),
                None => first,
            };
            e.store(v, dst);
        });
    });
}
