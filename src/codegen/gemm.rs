//! The batched GEMM kernel: Cranelift walks the (batch, row block, column block) tasks,
//! computes the tile's pointers, calls the microkernel shim for the tile product, then adds
//! the bias and applies the epilogue to the tile it just wrote, in one pass, then the
//! rotary embeddings. (The bias used to be a prologue the product accumulated onto: one
//! more pass over the tile, 4–7 % of encoder_M's GEMMs with an epilogue; `BENCHMARKS.md`.)
//! A product of weights packed in strips applies the bias, a residual add or ReLU itself
//! as it stores each block ([`Finish`]), and the pass goes without them.
//! Where the CPU has AVX-512 and the bias and epilogue are one of the forms of
//! `tile_epilogue.rs`, one call of the native shim applies them at 512 bits instead.

use super::emit::Emit;
use super::math::eval;
use super::softmax::lanes;
use super::tile_epilogue::{form, Form};
use crate::kernel::formula::{binary, either, is_const};
use crate::kernel::{BinaryOp, Expr, Gemm, Operand, Rope, STRIP};
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
    let first_table = first_input + epilogue_ptrs.len();
    let tables: Vec<(Value, Value)> = (0..g.rope.len())
        .map(|i| (e.arg(first_table + 2 * i), e.arg(first_table + 2 * i + 1)))
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
        let c = tile(
            e,
            g,
            (&idx, i0, j0, rows, cols),
            (a_ptr, b_ptr, c_ptr, bias_ptr),
            &epilogue_ptrs,
        );
        for (r, &ptrs) in g.rope.iter().zip(&tables) {
            rope(e, g, r, (c, i0, j0, rows, cols), ptrs);
        }
    });
}

/// One task's tile: `rows × cols` of `c` from row `i0`, column `j0` of the batch element
/// `idx`: the product (both, paired), then the bias and the epilogue in one pass; returns
/// the tile's first element.
fn tile(
    e: &mut Emit,
    g: &Gemm,
    (idx, i0, j0, rows, cols): (&[Value], Value, Value, Value, Value),
    (a_ptr, b_ptr, c_ptr, bias_ptr): (Value, Value, Value, Option<Value>),
    epilogue_ptrs: &[Value],
) -> Value {
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
    // A product of strips adds the bias as it stores its sums and applies a residual add
    // or ReLU after them ([`Finish`]), and the pass after it goes without them.
    let finish = finish(g);
    let (fused, bias) = match finish {
        Some(_) => (bias, None),
        None => (None, bias),
    };
    // With a packed `b`, the tile's columns start at a panel, `k` times `j0` in (the step
    // above, by the stride `k`).
    let product = |e: &mut Emit, (c, a, b): (Value, Value, Value)| match g.packed {
        Some(width) => {
            let width = e.int(width as i64);
            let null = e.int(0);
            let (bias, bias_cs) = match fused {
                Some((p, s)) => (p, e.int(s as i64)),
                None => (null, null),
            };
            let (residual, residual_rs) = match finish {
                Some(Finish::Residual(k)) => {
                    let o = &g.epilogue.as_ref().expect("a residual is an epilogue's").inputs[k];
                    let off = e.dot(idx, &o.strides[..r]);
                    let p = e.at(epilogue_ptrs[k], off);
                    let p = e.step(p, i0, o.strides[r]);
                    (e.step(p, j0, 1), e.int(o.strides[r] as i64))
                }
                _ => (null, null),
            };
            let relu = e.int(i64::from(finish == Some(Finish::Relu)));
            e.sgemm_packed([
                rows,
                cols,
                k,
                c,
                ints[0],
                ints[1],
                a,
                ints[2],
                ints[3],
                b,
                alpha,
                width,
                bias,
                bias_cs,
                residual,
                residual_rs,
                relu,
            ])
        }
        None => e.sgemm([
            rows, cols, k, c, ints[0], ints[1], a, ints[2], ints[3], b, ints[4], ints[5], alpha, acc,
        ]),
    };
    product(e, (c, a, b));
    let second = g.paired().then(|| {
        let one = e.int(1);
        let (a1, b1, c1) = (
            e.step(a, one, a_s[r - 1]),
            e.step(b, one, b_s[r - 1]),
            e.step(c, one, c_s[r - 1]),
        );
        product(e, (c1, a1, b1));
        c1
    });
    if (g.epilogue.is_none() || finish.is_some()) && bias.is_none() {
        return c;
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
    let native = e.has_epilogue_tile().then(|| form(g)).flatten();
    match native {
        Some(form) => epilogue_tile(e, g, form, (c, second, rows, cols), &bases, bias),
        None => epilogue(e, g, (c, second, rows, cols), &bases, bias),
    }
    c
}

/// What a product of weights packed in strips applies itself after its sums and the bias
/// (`attnc_sgemm_packed`), as it stores each block of the tile: no epilogue, a residual add
/// `c + inputs[k]` (the input's columns contiguous), or ReLU `maximum(c, 0)`. A pair's
/// products keep their bias and epilogue for the pass after both.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Finish {
    Bias,
    Residual(usize),
    Relu,
}

/// The [`Finish`] of `g`'s bias and epilogue, where its product is one of strips.
fn finish(g: &Gemm) -> Option<Finish> {
    if g.packed != Some(STRIP) || g.paired() {
        return None;
    }
    let Some(ep) = &g.epilogue else {
        return Some(Finish::Bias);
    };
    let (x, root) = (&ep.expr, ep.expr.len().checked_sub(1)?);
    let r = g.batch.len();
    let leaf = |n: usize| match x[n] {
        Expr::Input(i) => Some(i),
        _ => None,
    };
    let residual = either(x, root, BinaryOp::Add, |a, b| match (leaf(a)?, leaf(b)?) {
        (0, i) if i > 0 && ep.inputs[i - 1].strides[r + 1] == 1 => Some(Finish::Residual(i - 1)),
        _ => None,
    });
    let relu = binary(x, root, BinaryOp::Maximum)
        .filter(|&(a, b)| leaf(a) == Some(0) && is_const(x, b, 0.0))
        .map(|_| Finish::Relu);
    residual.or(relu).filter(|_| !ep.pair)
}

/// The bias and the epilogue over the tile at `c` by the native shim, in one call (the
/// inputs at `bases` and a pair's second product at `second`, as for [`epilogue`]).
fn epilogue_tile(
    e: &mut Emit,
    g: &Gemm,
    form: Form,
    (c, second, rows, cols): (Value, Option<Value>, Value, Value),
    bases: &[Value],
    bias: Option<(Value, usize)>,
) {
    let r = g.batch.len();
    let inputs: &[Operand] = g.epilogue.as_ref().map_or(&[], |ep| &ep.inputs);
    let null = e.int(0);
    let mut read = |k: Option<usize>| match k {
        Some(k) => (bases[k], e.int(inputs[k].strides[r] as i64)),
        None => (null, null),
    };
    let ((pre, pre_rs), (post, post_rs)) = (read(form.pre), read(form.post));
    let (code, [k0, k1, k2]) = form.act.code();
    let args = [
        e.int(code),
        rows,
        cols,
        c,
        e.int(g.c.strides[r] as i64),
        bias.map_or(null, |(p, _)| p),
        pre,
        pre_rs,
        second.unwrap_or(null),
        post,
        post_rs,
        e.f32(k0),
        e.f32(k1),
        e.f32(k2),
    ];
    e.epilogue_tile(args);
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

/// The rotary embeddings `r` over the heads of the tile at `c` (rows `i0..i0 + rows`,
/// columns `j0..j0 + cols` of the result) that lie in its column range, each pair of
/// partners rotated together from their un-rotated values. The tile holds whole heads
/// ([`Rope::fits`]), so the range's part in it is a whole number of heads.
fn rope(
    e: &mut Emit,
    g: &Gemm,
    r: &Rope,
    (c, i0, j0, rows, cols): (Value, Value, Value, Value, Value),
    (cos, sin): (Value, Value),
) {
    let (c_rs, c_cs) = (g.c.strides[0], g.c.strides[1]);
    let half = r.dim / 2;
    // The range's columns within the tile, relative to its first column.
    let start = e.int(r.start as i64);
    let end = e.int(r.end() as i64);
    let tile_end = e.b.ins().iadd(j0, cols);
    let lo = e.max_usize(j0, start);
    let lo = e.b.ins().isub(lo, j0);
    let hi = e.min_usize(tile_end, end);
    let hi = e.b.ins().isub(hi, j0);
    let [cos_s, sin_s] = [&r.cos.strides, &r.sin.strides];
    let vector = c_cs == 1;
    let zero = e.int(0);
    let half_v = e.int(half as i64);
    e.for_range(zero, rows, 1, |e, i| {
        let row = e.step(c, i, c_rs);
        let at = e.b.ins().iadd(i0, i);
        let seq = e.b.ins().udiv_imm_u(at, r.period as i64);
        let pos = e.b.ins().urem_imm_u(at, r.period as i64);
        let tables = [(cos, cos_s), (sin, sin_s)].map(|(p, s)| {
            let p = e.step(p, seq, s[0]);
            e.step(p, pos, s[1])
        });
        e.for_range(lo, hi, r.dim as i64, |e, h| {
            let first = e.step(row, h, c_cs);
            let second = e.b.ins().iadd_imm_s(first, (half * c_cs * 4) as i64);
            lanes(e, half_v, vector, |e, d, w| {
                let (a1, a2) = (e.step(first, d, c_cs), e.step(second, d, c_cs));
                let (x1, x2) = (e.load(a1, w, c_cs, false), e.load(a2, w, c_cs, false));
                let [(cos1, cos2), (sin1, sin2)] = [0, 1].map(|t| {
                    let (p, s) = (tables[t], [cos_s, sin_s][t][2]);
                    let p1 = e.step(p, d, s);
                    let p2 = e.b.ins().iadd_imm_s(p1, (half * s * 4) as i64);
                    (e.load(p1, w, s, true), e.load(p2, w, s, true))
                });
                // x1 * cos + (-x2) * sin, as PyTorch rounds it; then x2 * cos + x1 * sin.
                let (p, q) = (e.b.ins().fmul(x1, cos1), e.b.ins().fmul(x2, sin1));
                let y1 = e.b.ins().fsub(p, q);
                let (p, q) = (e.b.ins().fmul(x2, cos2), e.b.ins().fmul(x1, sin2));
                let y2 = e.b.ins().fadd(p, q);
                e.store(y1, a1);
                e.store(y2, a2);
            });
        });
    });
}
