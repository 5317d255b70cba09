//! The ops that create a tensor from sizes and values rather than from an input: `ones`,
//! `zeros`, `full`, `arange`, and the triangles `tril` and `triu`.

use super::ops::ceil_div;
use super::rules::given;
use super::{Checker, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::ir::{DType, Op, TensorType};
use crate::source::Span;

impl Checker {
    /// Sizes given as separate dims or as one list or tuple.
    fn sizes(&mut self, args: &[&Expr]) -> Option<Vec<Poly>> {
        let items: Vec<&Expr> = match args {
            [one] => match &one.kind {
                ExprKind::List(items) | ExprKind::Tuple(items) => items.iter().collect(),
                _ => args.to_vec(),
            },
            _ => args.to_vec(),
        };
        let mut sizes = Vec::new();
        for e in items {
            let p = self.dim_expr(e)?;
            if !self.prog.dims.provably_nonneg(&p) {
                let msg = format!("size `{}` may be negative", self.dim_text(&p));
                self.error(Code::E0208, e.span, msg);
                return None;
            }
            sizes.push(p);
        }
        Some(sizes)
    }

    fn fill(&mut self, sizes: Vec<Poly>, value: f64, span: Span) -> Value {
        self.push(
            Op::Fill(value),
            vec![],
            TensorType::row_major(sizes, DType::F32),
            span,
        )
    }

    pub(crate) fn ones(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let sizes = self.sizes(args)?;
        Some(self.fill(sizes, 1.0, span))
    }

    pub(crate) fn zeros(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let sizes = self.sizes(args)?;
        Some(self.fill(sizes, 0.0, span))
    }

    /// `full(size, fill_value)`: `size` one list or tuple; `True` or `False` fills a
    /// boolean tensor.
    pub(crate) fn full(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let sizes = self.sizes(&args[..1])?;
        if let ExprKind::Bool(b) = args[1].kind {
            return Some(self.bool_literal(b, sizes, span));
        }
        let value = self.float_param(args[1], "the fill value of `full`")?;
        Some(self.fill(sizes, value, span))
    }

    /// `arange(end)` or `arange(start, end, step=1)`: the values `start + i * step`, int64
    /// as PyTorch's, or float32 where an argument is a float literal (`arange(0.0, N)`).
    /// Bounds and step are dim expressions (a float literal with an integer value counts);
    /// the step must be positive, `end - start` never negative, and the length PyTorch's
    /// `ceil((end - start) / step)`, as a slice's with a step (`arange(1, 10, 2)` is `[5]`,
    /// `arange(0, N, 2)` is `[ceil(N / 2)]`); a step that is a free dim must divide exactly
    /// (E0205). The result's size is then a dim like any other (`arange(N)` is `[N]`).
    pub(crate) fn arange(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let (start, end) = match (given(args, 0), given(args, 1)) {
            (Some(end), None) | (None, Some(end)) => (None, end),
            (Some(start), Some(end)) => (Some(start), end),
            (None, None) => {
                self.error(Code::E0206, span, "`arange` needs its `end`");
                return None;
            }
        };
        let step_expr = given(args, 2);
        let floats = [start, Some(end), step_expr]
            .into_iter()
            .flatten()
            .any(is_float_literal);
        let dtype = if floats { DType::F32 } else { DType::I64 };
        let start_dim = match start {
            Some(e) => self.arange_bound(e)?,
            None => Poly::int(0),
        };
        let end_dim = self.arange_bound(end)?;
        let step = match step_expr {
            Some(e) => self.arange_bound(e)?,
            None => Poly::int(1),
        };
        let step_span = step_expr.map_or(span, |e| e.span);
        if !self.prog.dims.provably_positive(&step) {
            let msg = format!(
                "the step of `arange` must be positive, found `{}`",
                self.dim_text(&step)
            );
            self.error(Code::E0208, step_span, msg);
            return None;
        }
        let diff = end_dim.sub(&start_dim);
        // PyTorch's length is `ceil(diff / step)`, a slice's length with that step.
        let constant_step = self.prog.dims.with_consts(&step).as_int();
        let len = match (self.prog.dims.div(&diff, &step), constant_step) {
            (Ok(len), _) => len,
            (Err(_), Some(k)) => ceil_div(&self.prog.dims, &diff, k),
            (Err(err), None) => {
                let at = step_expr.unwrap_or(end);
                let d = self.division_error(err, &diff, &step, at);
                self.report(d);
                return None;
            }
        };
        if !self.prog.dims.provably_nonneg(&diff) {
            let msg = format!(
                "`arange` from `{}` to `{}` may have a negative length",
                self.dim_text(&start_dim),
                self.dim_text(&end_dim)
            );
            self.error(Code::E0208, span, msg);
            return None;
        }
        let op = Op::Arange {
            start: start_dim,
            step,
        };
        Some(self.push(op, vec![], TensorType::row_major(vec![len], dtype), span))
    }

    /// A bound or step of `arange`: a dim expression, or a float literal with an integer
    /// value (which only makes the result float32).
    fn arange_bound(&mut self, e: &Expr) -> Option<Poly> {
        let value = match &e.kind {
            ExprKind::Float(x) => Some(*x),
            ExprKind::Neg(inner) => match inner.kind {
                ExprKind::Float(x) => Some(-x),
                _ => None,
            },
            _ => None,
        };
        let Some(x) = value else {
            return self.dim_expr(e);
        };
        if x.fract() != 0.0 || x.abs() > f64::from(1u32 << 24) {
            let msg = format!("`arange` takes integer bounds and steps here, found `{x}`");
            let d = Diagnostic::error(Code::E0208, e.span, msg)
                .with_hint("scale an integer `arange` instead (`arange(0, 2 * N) * 0.5`)");
            self.report(d);
            return None;
        }
        Some(Poly::int(x as i64))
    }

    pub(crate) fn tril(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        self.tri(args, false, span)
    }

    pub(crate) fn triu(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        self.tri(args, true, span)
    }

    /// `tril`/`triu` of the last two axes; `diagonal` a constant, negative below.
    fn tri(&mut self, args: &[&Expr], upper: bool, span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `tril`/`triu`")?;
        let t = self.ty(x).clone();
        if t.rank() < 2 {
            let msg = format!(
                "`tril`/`triu` need a tensor of rank 2 or more, found {}",
                self.shape_text(&t.shape)
            );
            self.error(Code::E0201, span, msg);
            return None;
        }
        let diagonal = match args.get(1) {
            Some(e) => {
                let p = self.dim_expr(e)?;
                let Some(d) = self.prog.dims.with_consts(&p).as_int() else {
                    self.error(Code::E0208, e.span, "`diagonal` must be a constant integer");
                    return None;
                };
                d
            }
            None => 0,
        };
        let ty = TensorType::row_major(t.shape, t.dtype);
        Some(self.push(Op::Tri { upper, diagonal }, vec![x], ty, span))
    }
}

/// Whether `e` is a float literal, or minus one (`arange(-1.0, N)`).
fn is_float_literal(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Float(_) => true,
        ExprKind::Neg(x) => matches!(x.kind, ExprKind::Float(_)),
        _ => false,
    }
}
