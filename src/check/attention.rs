//! `scaled_dot_product_attention`: its shape rule, with
//! `torch.nn.functional.scaled_dot_product_attention`'s parameters and errors (section 7.2).
//! The IR keeps it as one op ([`Op::Sdpa`]): the interpreter computes PyTorch's meaning,
//! and the native backend runs it as the flash-style attention kernel (the causal mask as a
//! mask of positions, grouped-query heads read in place, a row without keys 0).

use super::rules::given;
use super::{Checker, Value};
use crate::ast::Expr;
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::ir::{BinaryOp, DType, Op, Program, TensorType, UnaryOp, ValueId};
use crate::shape;
use crate::source::Span;

const SDPA: &str = "scaled_dot_product_attention";

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
            Some(e) => Some(self.scale(e)?),
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
        let heads_ok = match gqa {
            true => self.grouped_heads(q, k, v, args),
            false => self.heads_broadcast(q, k, span),
        };
        if !heads_ok {
            return None;
        }
        let (scores, out) = self.sdpa_shapes(q, k, v, gqa, args, span)?;
        if let Some((m, mspan)) = mask {
            let ms = self.ty(m).shape.clone();
            let b = self.broadcast_shapes(&ms, &scores, mspan)?;
            let fits =
                b.len() == scores.len() && b.iter().zip(&scores).all(|(x, y)| self.prog.dims.equal(x, y));
            if !fits {
                let msg = format!(
                    "the `attn_mask` {} does not broadcast to the scores {}",
                    self.shape_text(&ms),
                    self.shape_text(&scores)
                );
                self.error(Code::E0201, mspan, msg);
                return None;
            }
        }
        let scale = match scale {
            Some(c) => c,
            None => {
                // 1 / sqrt(E), as PyTorch's default.
                let e = self.ty(q).shape.last().cloned()?;
                let e = self.dim_id(e, span);
                let root = self.unary_id(UnaryOp::Sqrt, e, span);
                let one = self.literal_id(1.0, span);
                self.bin(BinaryOp::Div, one, root, span)?
            }
        };
        let mut operands = vec![q, k, v, scale];
        operands.extend(mask.map(|(m, _)| m));
        let ty = TensorType::row_major(out, DType::F32);
        Some(self.push(Op::Sdpa { causal, gqa }, operands, ty, span))
    }

    /// The scale: a number, or a formula of numbers and dims (`Dk ** -0.5`), so that every
    /// backend knows it before running.
    fn scale(&mut self, e: &Expr) -> Option<ValueId> {
        let s = self.expr(e);
        let id = self.expect_scalar(&s, e.span, "the `scale` of `scaled_dot_product_attention`")?;
        if !is_constant(&self.prog, id) {
            self.error(
                Code::E0208,
                e.span,
                "the `scale` of `scaled_dot_product_attention` must be a number or a formula of dims",
            );
            return None;
        }
        Some(id)
    }

    /// The shapes of the scores `[.., Hq, L, S]` and of the result `[.., Hq, L, Ev]`: the
    /// batch axes of all three broadcast (key and value heads read as the query heads with
    /// `enable_gqa`), `E` and `S` agree.
    fn sdpa_shapes(
        &mut self,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        gqa: bool,
        args: &[&Expr],
        span: Span,
    ) -> Option<(Vec<Poly>, Vec<Poly>)> {
        let (tq, tk, tv) = (
            self.ty(q).shape.clone(),
            self.ty(k).shape.clone(),
            self.ty(v).shape.clone(),
        );
        let (rq, rk, rv) = (tq.len(), tk.len(), tv.len());
        let agree = [
            (
                &tq,
                rq - 1,
                &tk,
                rk - 1,
                "the query and the key have different `E`",
                args[1].span,
            ),
            (
                &tk,
                rk - 2,
                &tv,
                rv - 2,
                "the key and the value have different lengths `S`",
                args[2].span,
            ),
        ];
        for (x, i, y, j, what, at) in agree {
            if !self.prog.dims.equal(&x[i], &y[j]) {
                let msg = format!(
                    "{what}: `{}` vs `{}` ({} and {})",
                    self.dim_text(&x[i]),
                    self.dim_text(&y[j]),
                    self.shape_text(x),
                    self.shape_text(y)
                );
                self.error(Code::E0201, at, msg);
                return None;
            }
        }
        // With `enable_gqa`, all three have heads (`grouped_heads`).
        let seen = |x: &[Poly]| shape::read_heads(&tq, x, gqa).expect("`q`, `k` and `v` have heads");
        let batch = self.broadcast_shapes(&tq[..rq - 2], &seen(&tk), span)?;
        let batch = self.broadcast_shapes(&batch, &seen(&tv), span)?;
        let scores = [batch.as_slice(), &[tq[rq - 2].clone(), tk[rk - 2].clone()]].concat();
        let out = [batch.as_slice(), &[tq[rq - 2].clone(), tv[rv - 1].clone()]].concat();
        Some((scores, out))
    }
    /// Without `enable_gqa`, query and key heads must broadcast (E0201, with the hint).
    fn heads_broadcast(&mut self, q: ValueId, k: ValueId, span: Span) -> bool {
        let (tq, tk) = (self.ty(q).shape.clone(), self.ty(k).shape.clone());
        if tq.len() < 3 || tk.len() < 3 {
            return true;
        }
        let (hq, hk) = (&tq[tq.len() - 3], &tk[tk.len() - 3]);
        let dims = &self.prog.dims;
        if shape::broadcasts_to(dims, hq, hk) || shape::broadcasts_to(dims, hk, hq) {
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

    /// `enable_gqa`: heads on all three, as many key as value heads, and `Hq` a proved
    /// multiple of them (E0205 otherwise).
    fn grouped_heads(&mut self, q: ValueId, k: ValueId, v: ValueId, args: &[&Expr]) -> bool {
        for (x, e) in [(q, args[0]), (k, args[1]), (v, args[2])] {
            if self.ty(x).rank() < 3 {
                let msg = format!(
                    "`enable_gqa` needs heads: [.., H, L, E], found {}",
                    self.shape_text(&self.ty(x).shape.clone())
                );
                self.error(Code::E0201, e.span, msg);
                return false;
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
            return false;
        }
        if let Err(err) = self.prog.dims.div(&hq, &hk) {
            let d = self.division_error(err, &hq, &hk, args[1]);
            self.report(d.with_hint("`enable_gqa` needs the query heads to be a multiple of the key heads"));
            return false;
        }
        true
    }
}

/// Whether a rank-0 value is computed from literals and dims alone.
fn is_constant(prog: &Program, id: ValueId) -> bool {
    let node = prog.node(id);
    match node.op {
        Op::Literal(_) | Op::DimValue(_) => true,
        Op::Unary(_) | Op::Binary(_) => node.args.iter().all(|&a| is_constant(prog, a)),
        _ => false,
    }
}
