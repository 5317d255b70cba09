//! The rules of the contractions, `linear` and `matmul` (`@`): shapes from the shape
//! library, its errors as diagnostics.

use super::{Checker, Value};
use crate::ast::Expr;
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::ir::{DType, Op, TensorType};
use crate::shape::{self, LinearError, MatmulError, Mismatch};
use crate::source::Span;

impl Checker {
    pub(crate) fn matmul_op(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let (a, b) = (self.expr(args[0]), self.expr(args[1]));
        self.matmul(&a, &b, args[0].span, args[1].span, span)
    }

    pub(crate) fn linear(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `linear`");
        let w = self.tensor_arg(args[1], "the weight of `linear`");
        let b = match args.get(2) {
            Some(e) => Some(self.tensor_arg(e, "the bias of `linear`")?),
            None => None,
        };
        let (x, w) = (x?, w?);
        let (tx, tw) = (self.ty(x).shape.clone(), self.ty(w).shape.clone());
        let tb = b.map(|b| self.ty(b).shape.clone());
        let shape = match shape::linear(&self.prog.dims, &tx, &tw, tb.as_deref()) {
            Ok(shape) => shape,
            Err(e) => {
                self.report(self.linear_error(e, args, &tx, &tw, tb.as_deref().unwrap_or_default(), span));
                return None;
            }
        };
        let ins = [Some(x), Some(w), b].into_iter().flatten().collect();
        Some(self.push(Op::Linear, ins, TensorType::row_major(shape, DType::F32), span))
    }

    fn linear_error(
        &self,
        e: LinearError,
        args: &[&Expr],
        tx: &[Poly],
        tw: &[Poly],
        tb: &[Poly],
        span: Span,
    ) -> Diagnostic {
        match e {
            LinearError::WeightRank => {
                let msg = format!(
                    "the weight of `linear` must be [out, in], found {}",
                    self.shape_text(tw)
                );
                Diagnostic::error(Code::E0201, args[1].span, msg)
            }
            LinearError::ScalarInput => {
                Diagnostic::error(Code::E0201, args[0].span, "the input of `linear` is a scalar")
            }
            LinearError::Features => {
                let msg = format!(
                    "`linear` of {} by a weight {}: the input has `{}` features, the weight takes `{}`",
                    self.shape_text(tx),
                    self.shape_text(tw),
                    self.dim_text(&tx[tx.len() - 1]),
                    self.dim_text(&tw[1])
                );
                Diagnostic::error(Code::E0201, span, msg)
                    .with_hint("weights are in PyTorch's [out, in] layout: `y = x W^T + b`")
            }
            LinearError::Bias => {
                let msg = format!(
                    "the bias of `linear` is {}, but the weight {} has `{}` outputs",
                    self.shape_text(tb),
                    self.shape_text(tw),
                    self.dim_text(&tw[0])
                );
                Diagnostic::error(Code::E0201, args[2].span, msg)
            }
        }
    }

    /// `torch.matmul`: vectors are promoted and their axis removed again, batch dims
    /// broadcast.
    pub(super) fn matmul(
        &mut self,
        a: &Value,
        b: &Value,
        aspan: Span,
        bspan: Span,
        span: Span,
    ) -> Option<Value> {
        let x = self.expect_tensor(a, aspan, "an operand of `@`");
        let y = self.expect_tensor(b, bspan, "an operand of `@`");
        let (x, y) = (x?, y?);
        let (ta, tb) = (self.ty(x).shape.clone(), self.ty(y).shape.clone());
        let shape = match shape::matmul(&self.prog.dims, &ta, &tb) {
            Ok(shape) => shape,
            Err(e) => {
                self.report(self.matmul_error(e, &ta, &tb, span));
                return None;
            }
        };
        Some(self.push(
            Op::MatMul,
            vec![x, y],
            TensorType::row_major(shape, DType::F32),
            span,
        ))
    }

    fn matmul_error(&self, e: MatmulError<Poly>, ta: &[Poly], tb: &[Poly], span: Span) -> Diagnostic {
        match e {
            MatmulError::Scalar => Diagnostic::error(
                Code::E0201,
                span,
                "`@` needs tensors of rank 1 or more, found a scalar",
            ),
            MatmulError::Inner { left, right } => {
                let msg = format!(
                    "matmul inner dims differ: {} @ {} (`{}` vs `{}`)",
                    self.shape_text(ta),
                    self.shape_text(tb),
                    self.dim_text(&left),
                    self.dim_text(&right)
                );
                Diagnostic::error(Code::E0201, span, msg).with_hint(
                    "the last axis of the left operand must equal the second-to-last of the right; a `.transpose(-2, -1)` may be missing",
                )
            }
            MatmulError::Batch(Mismatch { left, right, .. }) => {
                let msg = format!(
                    "matmul batch dims do not broadcast: {} @ {} (`{}` vs `{}`)",
                    self.shape_text(ta),
                    self.shape_text(tb),
                    self.dim_text(&left),
                    self.dim_text(&right)
                );
                Diagnostic::error(Code::E0201, span, msg)
            }
        }
    }
}
