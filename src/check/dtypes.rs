//! Dtypes as PyTorch has them: promotion in arithmetic, the conversions (`.float()`,
//! `.long()`, `.bool()`, `.to(dtype)`, `.type_as(other)`), and the names a model's code
//! spells them with (`torch.float32`, `x.dtype`, `torch.finfo(torch.float32).min`).
//!
//! Both backends store every dtype as float32, so a conversion between float32 and the
//! exact integers int64 and bool hold is a retyping: `x * 1` typed as the new dtype (an
//! elementwise op, laid out as PyTorch lays out a conversion's result).

use super::rules::given;
use super::{Checker, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::{Code, Diagnostic};
use crate::ir::{BinaryOp, CmpOp, DType, Op, UnaryOp, ValueId};
use crate::source::Span;

/// The names a model's code puts before an op (`torch.matmul`, `F.softmax`,
/// `nn.functional.gelu`, `torch.nn.functional.gelu`, `math.sqrt`), which mean the op
/// itself: the name the prefix starts with, when `e` is one.
pub(super) fn module_root(e: &Expr) -> Option<&str> {
    match &e.kind {
        ExprKind::Name(n) if matches!(n.as_str(), "torch" | "F" | "math") => Some(n),
        ExprKind::Attribute { receiver, name } if name.name == "functional" => match &receiver.kind {
            ExprKind::Name(n) if n == "nn" => Some(n),
            ExprKind::Attribute { receiver, name } if name.name == "nn" => module_root(receiver),
            _ => None,
        },
        _ => None,
    }
}

impl Checker {
    /// The dtype of an operand of arithmetic, as PyTorch promotes it: a Python int (an
    /// integer literal, a dim) counts as int64.
    pub(super) fn operand_dtype(&self, e: &Expr, id: ValueId) -> DType {
        match (&e.kind, &self.prog.node(id).op) {
            (ExprKind::Int(_), _) | (_, Op::DimValue(_)) => DType::I64,
            _ => self.ty(id).dtype,
        }
    }

    /// The dtype of `a op b` (`+ - * **`): the higher of the two; two booleans give
    /// float32, as arithmetic on masks always has here.
    pub(super) fn arithmetic_dtype(&self, (a, x): (&Expr, ValueId), (b, y): (&Expr, ValueId)) -> DType {
        match self.operand_dtype(a, x).promote(self.operand_dtype(b, y)) {
            DType::Bool => DType::F32,
            d => d,
        }
    }

    /// `x.float()`.
    pub(crate) fn float_cast(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `float`")?;
        self.cast(x, DType::F32, span)
    }

    /// `x.long()` (and `x.int()`, widened to int64).
    pub(crate) fn long_cast(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `long`")?;
        self.cast(x, DType::I64, span)
    }

    /// `x.bool()`.
    pub(crate) fn bool_cast(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `bool`")?;
        self.cast(x, DType::Bool, span)
    }

    /// `x.to(dtype)`: `torch.float32`, `torch.long`, `other.dtype`, ...
    pub(crate) fn convert_to(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `to`")?;
        let dtype = self.dtype_arg(args[1])?;
        self.cast(x, dtype, span)
    }

    /// `x.type_as(other)`: `x` in `other`'s dtype.
    pub(crate) fn type_as(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `type_as`")?;
        let other = self.tensor_arg(args[1], "the other of `type_as`")?;
        let dtype = self.ty(other).dtype;
        self.cast(x, dtype, span)
    }

    /// A dtype written as `torch.NAME`, or as `t.dtype` of a tensor `t`.
    fn dtype_arg(&mut self, e: &Expr) -> Option<DType> {
        if let ExprKind::Attribute { receiver, name } = &e.kind {
            if name.name == "dtype" {
                let t = self.tensor_arg(receiver, "the owner of `.dtype`")?;
                return Some(self.ty(t).dtype);
            }
            if matches!(&receiver.kind, ExprKind::Name(n) if n == "torch") {
                if let Some(d) = DType::from_name(&name.name) {
                    return Some(d);
                }
            }
        }
        let d = Diagnostic::error(Code::E0208, e.span, "not a dtype")
            .with_hint("write `torch.float32`, `torch.int64` (`torch.long`), `torch.bool` or `x.dtype`");
        self.report(d);
        None
    }

    /// `x` converted to `dtype`: itself when it has it; `x != 0` to bool; float32 to int64
    /// the primitive `long` (toward zero, as PyTorch); `x * 1` retyped otherwise.
    fn cast(&mut self, x: ValueId, dtype: DType, span: Span) -> Option<Value> {
        let from = self.ty(x).dtype;
        if from == dtype {
            return Some(Value::Tensor(x));
        }
        let id = match (from, dtype) {
            (_, DType::Bool) => {
                let zero = self.literal_id(0.0, span);
                self.elementwise(Op::Compare(CmpOp::Ne), DType::Bool, x, zero, span)?
            }
            (DType::F32, DType::I64) => self.unary_id(UnaryOp::Long, x, span),
            _ => {
                let one = self.literal_id(1.0, span);
                self.elementwise(Op::Binary(BinaryOp::Mul), dtype, x, one, span)?
            }
        };
        Some(Value::Tensor(id))
    }

    /// `torch.finfo(torch.float32).min` (and `.max`, `.eps`, `.tiny`): the number.
    pub(super) fn finfo(&mut self, call: &Expr, field: &crate::ast::Ident, span: Span) -> Option<Value> {
        let ExprKind::Method { receiver, args, .. } = &call.kind else {
            return None;
        };
        if !matches!(&receiver.kind, ExprKind::Name(n) if n == "torch") {
            return None;
        }
        let dtype = match given(&args.iter().collect::<Vec<_>>(), 0) {
            Some(e) => self.dtype_arg(e)?,
            None => DType::F32,
        };
        if dtype != DType::F32 {
            self.error(Code::E0208, call.span, "`finfo` describes float32 only");
            return None;
        }
        let value = match field.name.as_str() {
            "min" => f32::MIN,
            "max" => f32::MAX,
            "eps" => f32::EPSILON,
            "tiny" => f32::MIN_POSITIVE,
            other => {
                let msg = format!("`finfo` has no field `{other}`: it has `min`, `max`, `eps` and `tiny`");
                self.error(Code::E0101, field.span, msg);
                return None;
            }
        };
        Some(Value::Tensor(self.literal_id(f64::from(value), span)))
    }
}
