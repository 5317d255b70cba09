//! Gathers (`embedding(ids, weight)`, `weight[ids]`, `cos_cache[position_ids]`) and the
//! pooling ops around a model (`normalize`).

use super::rules::given;
use super::{Checker, Entry, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::{Code, Diagnostic};
use crate::ir::{BinaryOp, DType, Op, ReduceOp, TensorType, UnaryOp, ValueId};
use crate::source::Span;

impl Checker {
    /// `embedding(input, weight, padding_idx=None)`: the rows of the 2-D `weight` that
    /// `input` names (`padding_idx` only changes gradients, so it is accepted and unused).
    pub(crate) fn embedding(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let ids = self.tensor_arg(args[0], "the input of `embedding`");
        let table = self.tensor_arg(args[1], "the weight of `embedding`");
        let (ids, table) = (ids?, table?);
        if self.ty(table).rank() != 2 {
            let msg = format!(
                "the weight of `embedding` must be 2-D, found {}",
                self.shape_text(&self.ty(table).shape.clone())
            );
            self.error(Code::E0201, args[1].span, msg);
            return None;
        }
        if let Some(p) = given(args, 2) {
            self.float_param(p, "`padding_idx`")?;
        }
        self.gather(table, ids, args[0].span, span).map(Value::Tensor)
    }

    /// Whether `x[ix]` indexes by a tensor (a name bound to one, or a call that makes one)
    /// rather than by a dim.
    pub(super) fn is_tensor_index(&self, ix: &Expr) -> bool {
        match &ix.kind {
            ExprKind::Name(n) => matches!(self.lookup(n), Some(Entry::Value(Value::Tensor(_)))),
            ExprKind::Method { method, .. } => method.name != "size",
            ExprKind::Call { func, .. } => func.name != "size",
            _ => false,
        }
    }

    /// `table[ids]`: axis 0 of `table` picked by the int64 tensor `ids`.
    pub(super) fn gather(
        &mut self,
        table: ValueId,
        ids: ValueId,
        ids_span: Span,
        span: Span,
    ) -> Option<ValueId> {
        let dtype = self.ty(ids).dtype;
        if dtype != DType::I64 {
            let msg = format!("indices must be int64, found {}", dtype.name());
            let d = Diagnostic::error(Code::E0208, ids_span, msg)
                .with_hint("declare the input `int64` (`input ids: [B, N] int64`)");
            self.report(d);
            return None;
        }
        let t = self.ty(table).clone();
        if t.rank() == 0 {
            self.error(Code::E0204, span, "a scalar cannot be indexed");
            return None;
        }
        let shape = [self.ty(ids).shape.as_slice(), &t.shape[1..]].concat();
        let ty = TensorType::row_major(shape, t.dtype);
        match self.push(Op::Gather, vec![table, ids], ty, span) {
            Value::Tensor(id) => Some(id),
            _ => None,
        }
    }

    /// `normalize(input, p=2.0, dim=1, eps=1e-12)`: `x / max(‖x‖_p, eps)` along `dim`, the
    /// norm kept as an axis of size 1 (p = 2 only).
    pub(crate) fn normalize(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `normalize`")?;
        self.floating(x, "normalize", span)?;
        let p = self.float_param(args[1], "`p`")?;
        if p != 2.0 {
            self.error(Code::E0208, args[1].span, "`normalize` supports `p=2` only");
            return None;
        }
        let rank = self.ty(x).rank();
        let axis = self.axis(args[2], rank, false)?;
        let eps = self.float_param(args[3], "`eps`")?;
        let squares = self.bin(BinaryOp::Mul, x, x, span)?;
        let sum = self.reduce_axis(ReduceOp::Sum, squares, axis, true, span);
        let norm = self.unary_id(UnaryOp::Sqrt, sum, span);
        let floor = self.literal_id(eps, span);
        let denom = self.bin(BinaryOp::Maximum, norm, floor, span)?;
        self.bin(BinaryOp::Div, x, denom, span).map(Value::Tensor)
    }

    /// `x[ids]` for a tensor index `ids` (see [`Checker::is_tensor_index`]).
    pub(super) fn tensor_index(&mut self, x: ValueId, ix: &Expr, span: Span) -> Value {
        let Some(ids) = self.tensor_arg(ix, "an index") else {
            return Value::Error;
        };
        self.gather(x, ids, ix.span, span)
            .map_or(Value::Error, Value::Tensor)
    }
}
