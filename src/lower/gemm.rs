//! GEMM kernels: `linear` (merged where the fusion pass grouped sibling projections),
//! `matmul`, and the optimizer's `gemm`, each a batched GEMM over strided views with its
//! epilogue.

use super::tiling::{fold_batch_into_rows, gemm_blocks};
use super::{internal, Lowerer, Val, View};
use crate::ir::{BinaryOp, ValueId};
use crate::kernel::{Expr, Gemm, KernelOp, Operand, PlanError};
use crate::shape::{self, Concrete};

/// `g` (a GEMM whose columns are two halves of `half` columns each, no bias, no epilogue
/// yet) as a GEMM over `half` columns with a last batch axis of 2 for the halves: the
/// shape a paired epilogue reads them in.
pub(super) fn pair(g: &Gemm, half: usize) -> Option<Gemm> {
    if g.n != 2 * half || g.bias.is_some() || g.epilogue.is_some() || !g.rope.is_empty() {
        return None;
    }
    let r = g.batch.len();
    let mut p = g.clone();
    p.batch.push(2);
    p.n = half;
    p.a.strides.insert(r, 0);
    p.b.strides.insert(r, half * g.b.strides[r + 1]);
    p.c.strides.insert(r, half * g.c.strides[r + 1]);
    // Tiles as for one half alone: a task computes both.
    let mut one = p.clone();
    one.batch.pop();
    for o in [&mut one.a, &mut one.b, &mut one.c] {
        o.strides.remove(r);
    }
    p.block = gemm_blocks(&one);
    Some(p)
}

impl Lowerer<'_> {
    /// The optimizer's `gemm`: `alpha * (op(a) @ op(b) + bias)`, a transposed operand read
    /// through its strides. The kernel adds the bias after scaling, so a bias under an
    /// alpha other than 1 is scaled first (a param's, once, by the prologue).
    pub(super) fn fused_gemm(
        &mut self,
        id: ValueId,
        args: &[ValueId],
        trans: [bool; 2],
        alpha: f32,
    ) -> Result<View, PlanError> {
        let bad = || internal(format!("node {id}: gemm operands do not fit"));
        let operand = |l: &mut Self, v: ValueId, t: bool| -> Result<View, PlanError> {
            let x = l.view(v)?;
            let r = x.shape.len();
            if !t {
                return Ok(x);
            }
            r.checked_sub(2)
                .and_then(|a| x.transpose(a, r - 1))
                .ok_or_else(bad)
        };
        let a = operand(self, args[0], trans[0])?;
        let mut b = operand(self, args[1], trans[1])?;
        // As for `linear`: a weight read transposed is copied once into `[in, out]` order.
        if self.param_derived(b.buf) && !b.is_contiguous() {
            b = self.copy(&b, format!("{} (weight layout)", self.label(id)));
        }
        let bias = match args.get(2) {
            None => None,
            Some(&bias) if alpha == 1.0 => Some(self.view(bias)?.operand()),
            Some(&bias) => {
                let v = self.view(bias)?;
                let scaled = self.temp(v.shape.clone());
                let expr = vec![
                    Expr::Input(0),
                    Expr::Const(alpha),
                    Expr::Binary(BinaryOp::Mul, 0, 1),
                ];
                self.map(
                    vec![v.operand()],
                    expr,
                    &scaled,
                    format!("{} (scaled bias)", self.label(id)),
                );
                Some(scaled.operand())
            }
        };
        let out = self.gemm(id, &a, &b, alpha, bias)?;
        out.reshape(&self.shape(id)?).ok_or_else(bad)
    }

    /// `linear(x, w, b)`: a GEMM reading `w [n, k]` transposed through its strides.
    pub(super) fn linear(&mut self, id: ValueId, args: &[ValueId]) -> Result<View, PlanError> {
        let x = self.view(args[0])?;
        let w = self.view(args[1])?;
        let bias = match args.get(2) {
            Some(&b) => Some(self.view(b)?.operand()),
            None => None,
        };
        let mut wt = w
            .transpose(0, 1)
            .ok_or_else(|| internal(format!("node {id}: the weight is not a matrix")))?;
        // A weight read transposed makes the `gemm` crate pack it on every call; a copy in
        // `[in, out]` order is made once per set of weights instead (the prologue).
        if self.param_derived(wt.buf) && !wt.is_contiguous() {
            wt = self.copy(&wt, format!("{} (weight layout)", self.label(id)));
        }
        let x2 = match x.shape.len() {
            1 => x.unsqueeze(0),
            _ => Some(x.clone()),
        }
        .ok_or_else(|| internal(format!("node {id}: bad input")))?;
        let out = self.gemm(id, &x2, &wt, 1.0, bias)?;
        let shape = self.shape(id)?;
        out.reshape(&shape)
            .ok_or_else(|| internal(format!("node {id}: result does not reshape")))
    }

    /// Sibling `linear`s (one input, weights of one shape) as one GEMM over their weights
    /// concatenated in `[in, out]` order (made by the prologue), each a column slice of the
    /// result; returns the first's value and records the others'.
    pub(super) fn linears(&mut self, group: &[ValueId]) -> Result<View, PlanError> {
        let first = self.program.node(group[0]).args.clone();
        let x = self.view(first[0])?;
        let x2 = match x.shape.len() {
            1 => x.unsqueeze(0),
            _ => Some(x.clone()),
        }
        .ok_or_else(|| internal(format!("node {}: bad input", group[0])))?;
        let w0 = self.view(first[1])?;
        let (n, k) = (w0.shape[0], w0.shape[1]);
        let total = n * group.len();
        let weights = self.temp(vec![k, total]);
        let bias = (first.len() == 3).then(|| self.temp(vec![total]));
        let label = format!("{} (weights of {} linears)", self.label(group[0]), group.len());
        let bad = |id: ValueId| internal(format!("node {id}: sibling linear does not fit"));
        for (i, &id) in group.iter().enumerate() {
            let args = self.program.node(id).args.clone();
            let wt = self.view(args[1])?.transpose(0, 1).ok_or_else(|| bad(id))?;
            let dest = weights.slice(1, i * n, (i + 1) * n).ok_or_else(|| bad(id))?;
            if wt.shape != dest.shape {
                return Err(bad(id));
            }
            self.map(vec![wt.operand()], vec![Expr::Input(0)], &dest, label.clone());
            if let (Some(b), Some(&arg)) = (&bias, args.get(2)) {
                let src = self.view(arg)?;
                let dest = b.slice(0, i * n, (i + 1) * n).ok_or_else(|| bad(id))?;
                self.map(vec![src.operand()], vec![Expr::Input(0)], &dest, label.clone());
            }
        }
        let out = self.gemm(group[0], &x2, &weights, 1.0, bias.map(|b| b.operand()))?;
        let last = out.shape.len() - 1;
        let mut first_view = None;
        for (i, &id) in group.iter().enumerate() {
            let shape = self.shape(id)?;
            let part = out.slice(last, i * n, (i + 1) * n).ok_or_else(|| bad(id))?;
            let part = part.reshape(&shape).ok_or_else(|| bad(id))?;
            match i {
                0 => first_view = Some(part),
                _ => {
                    self.vals.insert(id, Val::Tensor(part));
                }
            }
        }
        first_view.ok_or_else(|| bad(group[0]))
    }

    /// `a @ b` with PyTorch's vector and broadcasting rules, times `alpha`.
    pub(super) fn matmul(
        &mut self,
        id: ValueId,
        a: ValueId,
        b: ValueId,
        alpha: f32,
    ) -> Result<View, PlanError> {
        let (a, b) = (self.view(a)?, self.view(b)?);
        let bad = || internal(format!("node {id}: operands do not multiply"));
        let a2 = if a.shape.len() == 1 {
            a.unsqueeze(0).ok_or_else(bad)?
        } else {
            a
        };
        let b2 = if b.shape.len() == 1 {
            b.unsqueeze(1).ok_or_else(bad)?
        } else {
            b
        };
        let out = self.gemm(id, &a2, &b2, alpha, None)?;
        let shape = self.shape(id)?;
        out.reshape(&shape).ok_or_else(bad)
    }

    /// `alpha · a [.., m, k] @ b [.., k, n] (+ bias [n])` into a fresh `[batch.., m, n]`
    /// (batch axes broadcast): the entry point for a batched GEMM. A transposed operand is
    /// a transposed view; a batch that `b` is broadcast along is folded into the rows.
    pub(super) fn gemm(
        &mut self,
        id: ValueId,
        a: &View,
        b: &View,
        alpha: f32,
        bias: Option<Operand>,
    ) -> Result<View, PlanError> {
        let bad = || internal(format!("node {id}: operands do not multiply"));
        let (ra, rb) = (a.shape.len(), b.shape.len());
        let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
        if b.shape[rb - 2] != k {
            return Err(bad());
        }
        let batch = shape::broadcast(&Concrete, &a.shape[..ra - 2], &b.shape[..rb - 2]).map_err(|_| bad())?;
        let a = a.expand(&[batch.as_slice(), &[m, k]].concat()).ok_or_else(bad)?;
        let b = b.expand(&[batch.as_slice(), &[k, n]].concat()).ok_or_else(bad)?;
        let c = self.temp([batch.as_slice(), &[m, n]].concat());
        let mut g = Gemm {
            batch,
            m,
            n,
            k,
            a: a.operand(),
            b: b.operand(),
            c: c.operand(),
            alpha,
            bias,
            epilogue: None,
            rope: Vec::new(),
            block: (m, n),
            packed: None,
        };
        fold_batch_into_rows(&mut g);
        g.block = gemm_blocks(&g);
        self.kernel(self.label(id), KernelOp::Gemm(g));
        Ok(c)
    }
}
