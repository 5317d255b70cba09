//! `scaled_dot_product_attention`, built from the ops a program could write itself, with
//! `torch.nn.functional.scaled_dot_product_attention`'s meaning (section 7.2):
//!
//! ```text
//! scores = q @ kᵀ * scale                      (scale=None: / sqrt(E))
//! scores = scores.masked_fill(j > i, -inf)     (is_causal: top-left aligned)
//! scores = scores.masked_fill(~mask, -inf)     (a boolean mask keeps where True)
//! scores = scores + mask                       (a float mask is added)
//! p = softmax(scores, -1), and 0 on a row whose every score is -inf
//! out = p @ v
//! ```
//!
//! With `enable_gqa`, the `G = Hq / Hkv` query heads that share a key/value head become an
//! axis of their own (`q` viewed as `[.., Hkv, G, L, E]`, `k` and `v` given a unit axis
//! there), so query head `h` reads key/value head `h / G` without repeating them; the
//! result is viewed back as `[.., Hq, L, Ev]`.

use super::layout;
use super::rules::given;
use super::{Checker, Value};
use crate::ast::Expr;
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::ir::{BinaryOp, CmpOp, DType, Op, ReduceOp, TensorType, UnaryOp, ValueId};
use crate::source::Span;

const SDPA: &str = "scaled_dot_product_attention";

/// The query, key and value after grouping the query heads (or as given).
struct Operands {
    q: ValueId,
    k: ValueId,
    v: ValueId,
    mask: Option<ValueId>,
    /// `Hq` when the heads were grouped, to view the result back.
    grouped: Option<Poly>,
}

impl Checker {
    pub(crate) fn scaled_dot_product_attention(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let q = self.tensor_arg(args[0], "the query of `scaled_dot_product_attention`");
        let k = self.tensor_arg(args[1], "the key of `scaled_dot_product_attention`");
        let v = self.tensor_arg(args[2], "the value of `scaled_dot_product_attention`");
        let mask = match given(args, 3) {
            Some(e) => Some((
                self.tensor_arg(e, "the `attn_mask` of `scaled_dot_product_attention`")?,
                e.span,
            )),
            None => None,
        };
        if let Some(e) = given(args, 4) {
            self.float_param(e, "`dropout_p`")?;
        }
        let causal = match given(args, 5) {
            Some(e) => self.bool_param(e, "`is_causal`")?,
            None => false,
        };
        let scale = match given(args, 6) {
            Some(e) => {
                let s = self.expr(e);
                Some(self.expect_scalar(&s, e.span, "the `scale` of `scaled_dot_product_attention`")?)
            }
            None => None,
        };
        let gqa = match given(args, 7) {
            Some(e) => self.bool_param(e, "`enable_gqa`")?,
            None => false,
        };
        let (q, k, v) = (q?, k?, v?);
        for (x, e) in [(q, args[0]), (k, args[1]), (v, args[2])] {
            if self.ty(x).rank() < 2 {
                let msg = format!(
                    "the operands of `{SDPA}` are [.., L, E], found {}",
                    self.shape_text(&self.ty(x).shape.clone())
                );
                self.error(Code::E0201, e.span, msg);
                return None;
            }
        }
        if let (Some((_, mspan)), true) = (mask, causal) {
            let d = Diagnostic::error(
                Code::E0208,
                mspan,
                "`attn_mask` and `is_causal=True` together: PyTorch refuses both",
            )
            .with_hint("fold the causal mask into `attn_mask` (`mask & (j <= i)`), or drop `attn_mask`");
            self.report(d);
            return None;
        }
        let mask = mask.map(|(m, _)| m);
        let ops = match gqa {
            true => self.group_heads(q, k, v, mask, args, span)?,
            false if !self.heads_broadcast(q, k, span) => return None,
            false => Operands {
                q,
                k,
                v,
                mask,
                grouped: None,
            },
        };
        let out = self.attend(&ops, causal, scale, span)?;
        match ops.grouped {
            Some(hq) => {
                let mut shape = self.ty(out).shape.clone();
                let r = shape.len();
                shape.splice(r - 4..r - 2, [hq]);
                Some(Value::Tensor(self.reshape_id(out, shape, span)))
            }
            None => Some(Value::Tensor(out)),
        }
    }

    /// `softmax(masked scores) @ v` on operands whose heads already broadcast.
    fn attend(
        &mut self,
        ops: &Operands,
        causal: bool,
        scale: Option<ValueId>,
        span: Span,
    ) -> Option<ValueId> {
        let kt = self.transpose_last(ops.k, span);
        let scores = self.matmul(&Value::Tensor(ops.q), &Value::Tensor(kt), span, span, span)?;
        let Value::Tensor(scores) = scores else {
            return None;
        };
        let mut s = match scale {
            Some(c) => self.bin(BinaryOp::Mul, scores, c, span)?,
            None => {
                let e = self.ty(ops.q).shape.last().cloned()?;
                let e = self.dim_id(e, span);
                let root = self.unary_id(UnaryOp::Sqrt, e, span);
                self.bin(BinaryOp::Div, scores, root, span)?
            }
        };
        let neg_inf = self.literal_id(f64::NEG_INFINITY, span);
        if causal {
            let shape = self.ty(s).shape.clone();
            let (l, m) = (shape[shape.len() - 2].clone(), shape[shape.len() - 1].clone());
            let above = self.above_diagonal(l, m, span)?;
            s = self.masked_fill_id(s, above, neg_inf, span)?;
        }
        if let Some(m) = ops.mask {
            s = match self.ty(m).dtype {
                DType::Bool => {
                    let removed = self.unary_id(UnaryOp::Not, m, span);
                    self.masked_fill_id(s, removed, neg_inf, span)?
                }
                DType::F32 => self.bin(BinaryOp::Add, s, m, span)?,
            };
        }
        let p = self.softmax_last(s, span);
        let p = self.zero_removed_rows(s, p, neg_inf, span)?;
        match self.matmul(&Value::Tensor(p), &Value::Tensor(ops.v), span, span, span)? {
            Value::Tensor(out) => Some(out),
            _ => None,
        }
    }

    /// Without `enable_gqa`, query and key heads must broadcast (E0201, with the hint).
    fn heads_broadcast(&mut self, q: ValueId, k: ValueId, span: Span) -> bool {
        let (tq, tk) = (self.ty(q).shape.clone(), self.ty(k).shape.clone());
        if tq.len() < 3 || tk.len() < 3 {
            return true;
        }
        let (hq, hk) = (&tq[tq.len() - 3], &tk[tk.len() - 3]);
        let dims = &self.prog.dims;
        if dims.equal(hq, hk) || dims.is_one(hq) || dims.is_one(hk) {
            return true;
        }
        let msg = format!(
            "`{SDPA}` of `{}` query heads and `{}` key heads",
            self.dim_text(hq),
            self.dim_text(hk)
        );
        let d = Diagnostic::error(Code::E0201, span, msg).with_hint(
            "pass `enable_gqa=True` for grouped-query attention (query head h reads key head h / (Hq / Hkv))",
        );
        self.report(d);
        false
    }

    /// `j > i` over `[l, m]`: the keys a causal mask removes (top-left aligned).
    fn above_diagonal(&mut self, l: Poly, m: Poly, span: Span) -> Option<ValueId> {
        let arange = |c: &mut Checker, n: Poly| {
            let op = Op::Arange {
                start: Poly::int(0),
                step: Poly::int(1),
            };
            c.push_id(op, vec![], TensorType::row_major(vec![n], DType::F32), span)
        };
        let i = arange(self, l);
        let i = self.new_axis(i, 1, span);
        let j = arange(self, m);
        let j = self.new_axis(j, 0, span);
        self.elementwise(Op::Compare(CmpOp::Gt), DType::Bool, j, i, span)
    }

    /// PyTorch's safe softmax: where every score of a row is `-inf`, 0 rather than NaN.
    fn zero_removed_rows(&mut self, s: ValueId, p: ValueId, neg_inf: ValueId, span: Span) -> Option<ValueId> {
        let last = self.ty(s).rank() - 1;
        let top = self.reduce_id(ReduceOp::Max, s, &[last], true, span);
        let removed = self.elementwise(Op::Compare(CmpOp::Eq), DType::Bool, top, neg_inf, span)?;
        let zero = self.literal_id(0.0, span);
        let shape = self.ty(p).shape.clone();
        let ty = self.laid_out(layout::elementwise_order, &[removed, zero, p], shape, DType::F32);
        Some(self.push_id(Op::Where, vec![removed, zero, p], ty, span))
    }

    /// `enable_gqa`: `Hq` a proved multiple of `Hkv` (E0205 otherwise); the query heads of
    /// one key/value head become an axis `G`, and the key, value and mask get a unit axis
    /// (or, for a mask over every query head, the same split).
    fn group_heads(
        &mut self,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        mask: Option<ValueId>,
        args: &[&Expr],
        span: Span,
    ) -> Option<Operands> {
        for (x, e) in [(q, args[0]), (k, args[1]), (v, args[2])] {
            if self.ty(x).rank() < 3 {
                let msg = format!(
                    "`enable_gqa` needs heads: [.., H, L, E], found {}",
                    self.shape_text(&self.ty(x).shape.clone())
                );
                self.error(Code::E0201, e.span, msg);
                return None;
            }
        }
        let heads = |c: &Checker, x: ValueId| {
            let s = &c.ty(x).shape;
            s[s.len() - 3].clone()
        };
        let (hq, hk, hv) = (heads(self, q), heads(self, k), heads(self, v));
        if !self.prog.dims.equal(&hk, &hv) {
            let msg = format!(
                "`enable_gqa` with `{}` key heads and `{}` value heads",
                self.dim_text(&hk),
                self.dim_text(&hv)
            );
            self.error(Code::E0201, args[2].span, msg);
            return None;
        }
        let g = match self.prog.dims.div(&hq, &hk) {
            Ok(g) => g,
            Err(err) => {
                let d = self.division_error(err, &hq, &hk, args[1]);
                self.report(
                    d.with_hint("`enable_gqa` needs the query heads to be a multiple of the key heads"),
                );
                return None;
            }
        };
        let split = |c: &mut Checker, x: ValueId| {
            let mut shape = c.ty(x).shape.clone();
            let r = shape.len();
            shape.splice(r - 3..r - 2, [hk.clone(), g.clone()]);
            c.reshape_id(x, shape, span)
        };
        let unit = |c: &mut Checker, x: ValueId| {
            let r = c.ty(x).rank();
            c.new_axis(x, r - 2, span)
        };
        let grouped_q = split(self, q);
        let (gk, gv) = (unit(self, k), unit(self, v));
        let mask = match mask {
            Some(m) if self.ty(m).rank() >= 3 => {
                let mh = heads(self, m);
                if self.prog.dims.is_one(&mh) {
                    Some(unit(self, m))
                } else if self.prog.dims.equal(&mh, &hq) {
                    Some(split(self, m))
                } else {
                    let msg = format!(
                        "the `attn_mask` has `{}` heads, the query `{}`",
                        self.dim_text(&mh),
                        self.dim_text(&hq)
                    );
                    self.error(Code::E0201, span, msg);
                    return None;
                }
            }
            other => other,
        };
        Some(Operands {
            q: grouped_q,
            k: gk,
            v: gv,
            mask,
            grouped: Some(hq),
        })
    }

    // ---- layout ops on values -----------------------------------------------------------

    fn transpose_last(&mut self, x: ValueId, span: Span) -> ValueId {
        let mut t = self.ty(x).clone();
        let r = t.rank();
        t.shape.swap(r - 2, r - 1);
        t.strides.swap(r - 2, r - 1);
        self.push_id(Op::Transpose(r - 2, r - 1), vec![x], t, span)
    }

    /// `x.reshape(shape)`: a view where the strides allow one, a copy otherwise.
    fn reshape_id(&mut self, x: ValueId, shape: Vec<Poly>, span: Span) -> ValueId {
        let t = self.ty(x).clone();
        let laid = layout::reshape(&self.prog.dims, &t, &shape);
        let ty = laid.with(shape.clone(), t.dtype);
        self.push_id(Op::Reshape(shape), vec![x], ty, span)
    }

    fn masked_fill_id(&mut self, x: ValueId, mask: ValueId, value: ValueId, span: Span) -> Option<ValueId> {
        let shape = self.broadcast(x, mask, span)?;
        let ty = self.laid_out(layout::fresh_row_major, &[x, mask], shape, DType::F32);
        Some(self.push_id(Op::MaskedFill, vec![x, mask, value], ty, span))
    }

    fn softmax_last(&mut self, x: ValueId, span: Span) -> ValueId {
        let shape = self.ty(x).shape.clone();
        let axis = shape.len() - 1;
        let ty = self.laid_out(layout::fresh_row_major, &[x], shape, DType::F32);
        self.push_id(Op::Softmax(axis), vec![x], ty, span)
    }
}
