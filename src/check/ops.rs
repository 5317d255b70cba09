//! Expressions with PyTorch's semantics: names and literals, calls (applied by
//! `apply.rs`), arithmetic with broadcasting, indexing, and the rules of the ops of one
//! axis (`softmax`) or of a mask (`masked_fill`). Views, joins and contractions have
//! rooms of their own.

use super::dim_expr::size_query;
use super::dtypes::module_root;
use super::layout::{self, Layout};
use super::{Checker, Entry, Value};
use crate::ast::{BinOp, Expr, ExprKind, Ident, Kwarg};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::{DimTable, Poly, Ratio};
use crate::ir::{BinaryOp, CmpOp, DType, Op, TensorType, UnaryOp, ValueId};
use crate::ops::table;
use crate::shape::{self, Mismatch};
use crate::source::Span;

impl Checker {
    pub(super) fn expr(&mut self, e: &Expr) -> Value {
        match &e.kind {
            ExprKind::Int(n) => self.literal(*n as f64, e.span),
            ExprKind::Float(x) => self.literal(*x, e.span),
            ExprKind::Name(name) => self.name_value(name, e.span),
            ExprKind::Neg(x) => {
                let v = self.expr(x);
                self.unary(UnaryOp::Neg, &v, x.span, e.span)
            }
            ExprKind::Binary(BinOp::FloorDiv | BinOp::Rem, ..) if self.is_dim_only(e) => {
                match self.dim_expr(e) {
                    Some(p) => self.push(Op::DimValue(p), vec![], scalar(), e.span),
                    None => Value::Error,
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, e.span),
            ExprKind::Range(Some(a), Some(b), None) => match (self.dim_expr(a), self.dim_expr(b)) {
                (Some(a), Some(b)) => Value::Range(a, b),
                _ => Value::Error,
            },
            ExprKind::Range(..) => {
                self.error(Code::E0208, e.span, "a range needs both ends outside `[ ]`");
                Value::Error
            }
            ExprKind::Call { func, args, kwargs } => {
                let args: Vec<&Expr> = args.iter().collect();
                self.call(func, args, kwargs, e.span)
            }
            ExprKind::Method {
                receiver,
                method,
                args,
                kwargs,
            } if module_root(receiver).is_some_and(|n| self.lookup(n).is_none()) => {
                // `torch.matmul(a, b)`, `F.softmax(s, dim=-1)`: the op itself.
                let args: Vec<&Expr> = args.iter().collect();
                self.call(method, args, kwargs, e.span)
            }
            ExprKind::Method {
                receiver,
                method,
                args,
                kwargs,
            } => {
                let args: Vec<&Expr> = std::iter::once(&**receiver).chain(args).collect();
                // Point at `.view(..)`, not at the whole chain before it.
                self.call(method, args, kwargs, Span::new(method.span.start, e.span.end))
            }
            ExprKind::Inf => self.literal(f64::INFINITY, e.span),
            ExprKind::Not(x) => {
                let v = self.expr(x);
                self.unary(UnaryOp::Not, &v, x.span, e.span)
            }
            ExprKind::Bool(b) => self.bool_literal(*b, vec![], e.span),
            ExprKind::NoneLit | ExprKind::Ellipsis | ExprKind::Str(_) | ExprKind::List(_) => {
                let what = match &e.kind {
                    ExprKind::NoneLit => "`None` is an argument, or a new axis inside `[ ]`",
                    ExprKind::Ellipsis => "`...` stands for axes inside `[ ]` only",
                    ExprKind::Str(_) => "a string is an argument of a string parameter",
                    _ => "a list is an argument (`cat([a, b])`, `layer_norm(x, [D])`)",
                };
                self.error(Code::E0208, e.span, format!("not a value here: {what}"));
                Value::Error
            }
            ExprKind::Index { .. } if size_query(e).is_some() => match self.dim_expr(e) {
                Some(p) => self.push(Op::DimValue(p), vec![], scalar(), e.span),
                None => Value::Error,
            },
            ExprKind::Index { base, indices } => self.index(base, indices, e.span),
            ExprKind::Attribute { receiver, name } if receiver_is_finfo(receiver) => {
                self.finfo(receiver, name, e.span).unwrap_or(Value::Error)
            }
            ExprKind::Attribute { name, .. } => {
                let msg = match name.name.as_str() {
                    "shape" => "`x.shape` is a shape, not a value: index it, `x.shape[-1]`".to_string(),
                    other => {
                        let msg =
                            format!("no attribute `{other}`: the one attribute is `shape` (`x.shape[d]`)");
                        self.error(Code::E0101, name.span, msg);
                        return Value::Error;
                    }
                };
                self.error(Code::E0208, e.span, msg);
                Value::Error
            }
            ExprKind::Tuple(items) => Value::Tuple(items.iter().map(|x| self.expr(x)).collect()),
            ExprKind::For {
                var,
                start,
                end,
                body,
            } => self.for_loop(var, start, end, body, e.span),
            ExprKind::Error => Value::Error,
        }
    }

    fn literal(&mut self, x: f64, span: Span) -> Value {
        self.push(Op::Literal(x), vec![], scalar(), span)
    }

    /// `True` or `False` filling `shape` (a scalar when empty): a boolean tensor, built as
    /// the float `1.0` or `0.0` compared to zero, since booleans come from comparisons.
    pub(super) fn bool_literal(&mut self, b: bool, shape: Vec<Poly>, span: Span) -> Value {
        let fill = match shape.is_empty() {
            true => Op::Literal(f64::from(u8::from(b))),
            false => Op::Fill(f64::from(u8::from(b))),
        };
        let Value::Tensor(x) = self.push(
            fill,
            vec![],
            TensorType::row_major(shape.clone(), DType::F32),
            span,
        ) else {
            unreachable!("push makes a tensor")
        };
        let Value::Tensor(zero) = self.literal(0.0, span) else {
            unreachable!("push makes a tensor")
        };
        let ty = TensorType::row_major(shape, DType::Bool);
        self.push(Op::Compare(CmpOp::Ne), vec![x, zero], ty, span)
    }

    fn name_value(&mut self, name: &str, span: Span) -> Value {
        match self.lookup(name) {
            Some(Entry::Value(v)) => {
                let v = self.current_value(v.clone(), span);
                self.note_value(span, &v);
                v
            }
            Some(Entry::Dim(p)) => {
                let p = p.clone();
                self.note_dim(span, &p);
                self.push(Op::DimValue(p), vec![], scalar(), span)
            }
            Some(Entry::Fn(_)) => {
                self.error(
                    Code::E0208,
                    span,
                    format!("function `{name}` is not a value; call it"),
                );
                Value::Error
            }
            None => {
                let mut d = Diagnostic::error(Code::E0101, span, format!("unknown name `{name}`"));
                if let Some(close) = self.closest_name(name) {
                    d = d.with_hint(format!("did you mean `{close}`?"));
                }
                self.report(d);
                Value::Error
            }
        }
    }

    /// The value of `e`, which must be a tensor.
    pub(super) fn tensor_arg(&mut self, e: &Expr, what: &str) -> Option<ValueId> {
        let v = self.expr(e);
        self.expect_tensor(&v, e.span, what)
    }

    fn call(&mut self, func: &Ident, args: Vec<&Expr>, kwargs: &[Kwarg], span: Span) -> Value {
        if let Some(Entry::Fn(f)) = self.lookup(&func.name) {
            let f = f.clone();
            if let Some(k) = kwargs.first() {
                let msg = format!(
                    "`{}` is a function of this program: it takes no keyword arguments",
                    func.name
                );
                self.error(Code::E0206, k.name.span, msg);
                return Value::Error;
            }
            return self.call_fn(&f, func, &args, span);
        }
        // Python's `float("-inf")` is no conversion of a tensor.
        let python_float =
            func.name == "float" && args.first().is_some_and(|a| matches!(a.kind, ExprKind::Str(_)));
        let Some(def) = table::find(&func.name).filter(|_| !python_float) else {
            self.unknown_op(func);
            return Value::Error;
        };
        let Some(bound) = self.bind_args(def, &args, kwargs, span) else {
            return Value::Error;
        };
        let bound: Vec<&Expr> = bound.iter().collect();
        self.apply(def, &bound, span).unwrap_or(Value::Error)
    }

    /// E0101 for a call of no function or op, with the PyTorch habit it probably is
    /// (`float("-inf")` is one).
    fn unknown_op(&mut self, func: &Ident) {
        let mut d = Diagnostic::error(
            Code::E0101,
            func.span,
            format!("unknown function or op `{}`", func.name),
        );
        let hint = match func.name.as_str() {
            "max" => Some("`max` is not an op (PyTorch's returns indices too): use `amax(x, dim)` to reduce, `maximum(a, b)` elementwise".to_string()),
            "min" => Some("`min` is not an op (PyTorch's returns indices too): use `amin(x, dim)` to reduce, `minimum(a, b)` elementwise".to_string()),
            "float" => Some("write infinity as `inf` or `-inf`, a number as a literal".to_string()),
            _ => self.closest_callable(&func.name).map(|close| format!("did you mean `{close}`?")),
        };
        if let Some(hint) = hint {
            d = d.with_hint(hint);
        }
        self.report(d);
    }

    /// Identity: the compiler targets inference.
    pub(crate) fn dropout(&mut self, args: &[&Expr], _span: Span) -> Option<Value> {
        let x = self.expr(args[0]);
        if let Some(p) = args.get(1) {
            self.float_param(p, "the probability of `dropout`")?;
        }
        Some(x)
    }

    /// A unary primitive: `~` takes a boolean and gives one; `-` refuses a boolean (as
    /// PyTorch does); every other op reads a boolean as 0.0/1.0.
    pub(super) fn unary(&mut self, op: UnaryOp, x: &Value, xspan: Span, span: Span) -> Value {
        let Some(x) = self.expect_tensor(x, xspan, "an operand of arithmetic") else {
            return Value::Error;
        };
        let is_bool = self.ty(x).dtype == DType::Bool;
        if op.is_logical() && !is_bool {
            let d = Diagnostic::error(Code::E0208, span, "`~` applies to boolean tensors only")
                .with_hint("compare to make a boolean (`x == 0`), or write `1.0 - x` for a float");
            self.report(d);
            return Value::Error;
        }
        if op == UnaryOp::Neg && is_bool {
            let d = Diagnostic::error(Code::E0208, span, "`-` of a boolean tensor")
                .with_hint("use `~` to invert a boolean");
            self.report(d);
            return Value::Error;
        }
        let keeps_int = (matches!(op, UnaryOp::Neg | UnaryOp::Abs) && self.ty(x).dtype == DType::I64)
            || op == UnaryOp::Long;
        let dtype = match (op.is_logical(), keeps_int) {
            (true, _) => DType::Bool,
            (false, true) => DType::I64,
            (false, false) => DType::F32,
        };
        let shape = self.ty(x).shape.clone();
        let ty = self.laid_out_elementwise(&[x], shape, dtype);
        self.push(Op::Unary(op), vec![x], ty, span)
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, span: Span) -> Value {
        let (va, vb) = (self.expr(a), self.expr(b));
        if op == BinOp::MatMul {
            return self
                .matmul(&va, &vb, a.span, b.span, span)
                .unwrap_or(Value::Error);
        }
        let ta = self.expect_tensor(&va, a.span, "an operand of arithmetic");
        let tb = self.expect_tensor(&vb, b.span, "an operand of arithmetic");
        let (Some(x), Some(y)) = (ta, tb) else {
            return Value::Error;
        };
        let arithmetic = self.arithmetic_dtype((a, x), (b, y));
        let (op, dtype) = match op {
            BinOp::Add => (Op::Binary(BinaryOp::Add), arithmetic),
            BinOp::Sub => (Op::Binary(BinaryOp::Sub), arithmetic),
            BinOp::Mul => (Op::Binary(BinaryOp::Mul), arithmetic),
            BinOp::Div => (Op::Binary(BinaryOp::Div), DType::F32),
            BinOp::Pow => (Op::Binary(BinaryOp::Pow), arithmetic),
            BinOp::Eq => (Op::Compare(CmpOp::Eq), DType::Bool),
            BinOp::Ne => (Op::Compare(CmpOp::Ne), DType::Bool),
            BinOp::Lt => (Op::Compare(CmpOp::Lt), DType::Bool),
            BinOp::Le => (Op::Compare(CmpOp::Le), DType::Bool),
            BinOp::Gt => (Op::Compare(CmpOp::Gt), DType::Bool),
            BinOp::Ge => (Op::Compare(CmpOp::Ge), DType::Bool),
            BinOp::Rem | BinOp::FloorDiv | BinOp::MatMul => {
                let sym = op.symbol();
                self.error(
                    Code::E0208,
                    span,
                    format!("`{sym}` applies to dims only, not to tensors"),
                );
                return Value::Error;
            }
            BinOp::And | BinOp::Or => {
                let logical = if op == BinOp::And {
                    BinaryOp::And
                } else {
                    BinaryOp::Or
                };
                for (v, e) in [(x, a), (y, b)] {
                    if self.ty(v).dtype != DType::Bool {
                        let msg = format!("`{}` applies to boolean tensors only", op.symbol());
                        let d = Diagnostic::error(Code::E0208, e.span, msg)
                            .with_hint("compare to make a boolean (`j <= i`), and parenthesize comparisons: `(a > b) & (c > d)`");
                        self.report(d);
                        return Value::Error;
                    }
                }
                (Op::Binary(logical), DType::Bool)
            }
        };
        match self.elementwise(op, dtype, x, y, span) {
            Some(id) => Value::Tensor(id),
            None => Value::Error,
        }
    }

    /// An elementwise op of two tensors with PyTorch broadcasting, laid out as
    /// TensorIterator lays it out.
    pub(super) fn elementwise(
        &mut self,
        op: Op,
        dtype: DType,
        x: ValueId,
        y: ValueId,
        span: Span,
    ) -> Option<ValueId> {
        let shape = self.broadcast(x, y, span)?;
        let ty = self.laid_out_elementwise(&[x, y], shape, dtype);
        match self.push(op, vec![x, y], ty, span) {
            Value::Tensor(id) => Some(id),
            _ => None,
        }
    }

    /// The type of an elementwise result of `shape` from `operands`, laid out as
    /// TensorIterator lays it out, reading the operands' strides on axes of size 1 where
    /// they are PyTorch's.
    pub(super) fn laid_out_elementwise(
        &self,
        operands: &[ValueId],
        shape: Vec<Poly>,
        dtype: DType,
    ) -> TensorType {
        let types: Vec<&TensorType> = operands.iter().map(|&v| self.ty(v)).collect();
        let known = |i: usize| layout::strides_known_at_ones(&self.prog, operands[i]);
        layout::elementwise_known(&self.prog.dims, &types, &known, &shape).with(shape, dtype)
    }

    /// The type of a result of `shape` whose layout `rule` gives from `operands`.
    pub(super) fn laid_out(
        &self,
        rule: layout::Rule,
        operands: &[ValueId],
        shape: Vec<Poly>,
        dtype: DType,
    ) -> TensorType {
        let types: Vec<&TensorType> = operands.iter().map(|&v| self.ty(v)).collect();
        rule(&self.prog.dims, &types, &shape).with(shape, dtype)
    }

    /// The broadcast shape of two tensors: axes aligned from the right, equal or provably 1.
    pub(super) fn broadcast(&mut self, x: ValueId, y: ValueId, span: Span) -> Option<Vec<Poly>> {
        let (a, b) = (self.ty(x).shape.clone(), self.ty(y).shape.clone());
        self.broadcast_shapes(&a, &b, span)
    }

    /// The broadcast shape of two shapes.
    pub(super) fn broadcast_shapes(&mut self, a: &[Poly], b: &[Poly], span: Span) -> Option<Vec<Poly>> {
        match shape::broadcast(&self.prog.dims, a, b) {
            Ok(out) => Some(out),
            Err(Mismatch { axis, left, right }) => {
                let msg = format!(
                    "cannot broadcast {} with {}: `{}` vs `{}` on axis {axis} of the result",
                    self.shape_text(a),
                    self.shape_text(b),
                    self.dim_text(&left),
                    self.dim_text(&right)
                );
                self.error(Code::E0201, span, msg);
                None
            }
        }
    }

    pub(crate) fn softmax(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `softmax`")?;
        self.floating(x, "softmax", span)?;
        let (x, d, scalar) = self.along_axis(x, args[1], span)?;
        let shape = self.ty(x).shape.clone();
        let ty = self.laid_out(layout::fresh_row_major, &[x], shape, DType::F32);
        let Value::Tensor(y) = self.push(Op::Softmax(d), vec![x], ty, span) else {
            unreachable!("push makes a tensor")
        };
        Some(self.unrow(y, scalar, span))
    }

    /// `x` and the axis `e` names for an op along one axis. PyTorch reads a rank-0 `x` as a
    /// row of one (`e` is `0` or `-1`): then `x` as `[1]`, axis 0, and `true`, so that
    /// [`Checker::unrow`] gives the result rank 0 again.
    pub(super) fn along_axis(&mut self, x: ValueId, e: &Expr, span: Span) -> Option<(ValueId, usize, bool)> {
        let rank = self.ty(x).rank();
        if rank > 0 {
            return Some((x, self.axis(e, rank, false)?, false));
        }
        self.axis(e, 1, false)?;
        let row = layout::unsqueezed(&self.prog.dims, self.ty(x), 0);
        let Value::Tensor(row) = self.push(Op::Unsqueeze(0), vec![x], row, span) else {
            unreachable!("push makes a tensor")
        };
        Some((row, 0, true))
    }

    /// `y` as rank 0 again when [`Checker::along_axis`] made a scalar a row.
    pub(super) fn unrow(&mut self, y: ValueId, scalar: bool, span: Span) -> Value {
        if !scalar {
            return Value::Tensor(y);
        }
        let ty = TensorType::row_major(vec![], self.ty(y).dtype);
        self.push(Op::View(vec![]), vec![y], ty, span)
    }

    pub(crate) fn masked_fill(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `masked_fill`");
        let m = self.tensor_arg(args[1], "the mask of `masked_fill`");
        let v = self.expr(args[2]);
        let v = self.expect_scalar(&v, args[2].span, "the fill value of `masked_fill`");
        let (x, m, v) = (x?, m?, v?);
        if self.ty(m).dtype != DType::Bool {
            let d = Diagnostic::error(
                Code::E0208,
                args[1].span,
                "the mask of `masked_fill` is not boolean",
            )
            .with_hint("compare it to make it boolean, as in `mask == 0`");
            self.report(d);
            return None;
        }
        let shape = self.broadcast(x, m, span)?;
        let dtype = self.ty(x).dtype;
        let ty = self.laid_out(layout::fresh_row_major, &[x, m], shape, dtype);
        Some(self.push(Op::MaskedFill, vec![x, m, v], ty, span))
    }

    pub(super) fn expect_scalar(&mut self, v: &Value, span: Span, what: &str) -> Option<ValueId> {
        let id = self.expect_tensor(v, span, what)?;
        let rank = self.ty(id).rank();
        if rank != 0 {
            let msg = format!("{what} must be a scalar, found a tensor of rank {rank}");
            self.error(Code::E0208, span, msg);
            return None;
        }
        Some(id)
    }

    /// `x[i, a : b, :]`: each index selects (drops the axis) or slices.
    fn index(&mut self, base: &Expr, indices: &[Expr], span: Span) -> Value {
        let value = self.expr(base);
        if let Value::Tuple(items) = value {
            return self.tuple_item(items, indices, span);
        }
        let Some(mut x) = self.expect_tensor(&value, base.span, "an indexed value") else {
            return Value::Error;
        };
        if let [ix] = indices {
            if self.is_tensor_index(ix) {
                return self.tensor_index(x, ix, span);
            }
        }
        let rank = self.ty(x).rank();
        let is_axis = |ix: &&Expr| !matches!(ix.kind, ExprKind::NoneLit | ExprKind::Ellipsis);
        let real = indices.iter().filter(is_axis).count();
        let ellipses: Vec<&Expr> = indices
            .iter()
            .filter(|ix| matches!(ix.kind, ExprKind::Ellipsis))
            .collect();
        if let Some(second) = ellipses.get(1) {
            self.error(Code::E0208, second.span, "an index may hold one `...` only");
            return Value::Error;
        }
        if real > rank {
            let msg = format!("{real} indices for a tensor of rank {rank}");
            self.error(Code::E0204, span, msg);
            return Value::Error;
        }
        let mut axis = 0;
        for ix in indices {
            match ix.kind {
                // `...` stands for as many `:` as the other indices leave.
                ExprKind::Ellipsis => {
                    axis += rank - real;
                    continue;
                }
                ExprKind::NoneLit => {
                    x = self.new_axis(x, axis, span);
                    axis += 1;
                    continue;
                }
                _ => {}
            }
            let next = match self.index_kind(ix) {
                Some(IndexKind::Slice(a, b, step)) => {
                    let range = SliceRange {
                        start: a,
                        end: b,
                        step,
                    };
                    self.slice(x, axis, range, ix.span, span)
                }
                Some(IndexKind::Select(i)) => self.select(x, axis, i, ix.span, span),
                None => None,
            };
            let Some((id, kept)) = next else {
                return Value::Error;
            };
            x = id;
            axis += usize::from(kept);
        }
        Value::Tensor(x)
    }

    /// `x[.., None, ..]`: a new axis of size 1 at `axis`, as `unsqueeze`.
    fn new_axis(&mut self, x: ValueId, axis: usize, span: Span) -> ValueId {
        let t = layout::unsqueezed(&self.prog.dims, self.ty(x), axis);
        match self.push(Op::Unsqueeze(axis), vec![x], t, span) {
            Value::Tensor(id) => id,
            _ => unreachable!("push makes a tensor"),
        }
    }

    /// `t[i]` of a tuple (`x.chunk(2, dim=-1)[0]`): one integer, negative counting from the
    /// end, as Python indexes the tuple PyTorch returns.
    fn tuple_item(&mut self, items: Vec<Value>, indices: &[Expr], span: Span) -> Value {
        let [ix] = indices else {
            self.error(Code::E0208, span, "a tuple takes one integer index");
            return Value::Error;
        };
        let len = items.len() as i64;
        let i = match self.dim_expr(ix).map(|p| self.prog.dims.with_consts(&p).as_int()) {
            Some(Some(i)) => i,
            Some(None) => {
                self.error(Code::E0208, ix.span, "a tuple's index must be a constant integer");
                return Value::Error;
            }
            None => return Value::Error,
        };
        let at = if i < 0 { i + len } else { i };
        match usize::try_from(at).ok().and_then(|at| items.get(at)) {
            Some(v) => v.clone(),
            None => {
                let msg = format!("index {i} is out of range for a tuple of length {len}");
                self.error(Code::E0208, ix.span, msg);
                Value::Error
            }
        }
    }

    fn index_kind(&mut self, ix: &Expr) -> Option<IndexKind> {
        match &ix.kind {
            ExprKind::Range(a, b, step) => {
                let a = match a {
                    Some(a) => Some(self.dim_expr(a)?),
                    None => None,
                };
                let b = match b {
                    Some(b) => Some(self.dim_expr(b)?),
                    None => None,
                };
                let step = match step {
                    Some(step) => self.slice_step(step)?,
                    None => 1,
                };
                Some(IndexKind::Slice(a, b, step))
            }
            ExprKind::Name(n) => match self.lookup(n) {
                Some(Entry::Value(Value::Range(a, b))) => {
                    Some(IndexKind::Slice(Some(a.clone()), Some(b.clone()), 1))
                }
                _ => Some(IndexKind::Select(self.dim_expr(ix)?)),
            },
            _ => Some(IndexKind::Select(self.dim_expr(ix)?)),
        }
    }

    /// The step of `x[a : b : step]`: a constant positive integer, with PyTorch's messages
    /// for zero and negative steps.
    fn slice_step(&mut self, e: &Expr) -> Option<i64> {
        let p = self.dim_expr(e)?;
        let msg = match self.prog.dims.with_consts(&p).as_int() {
            Some(n) if n > 0 => return Some(n),
            Some(0) => "slice step cannot be zero",
            Some(_) => "step must be greater than zero",
            None => "a slice's step must be a constant integer",
        };
        self.error(Code::E0208, e.span, msg);
        None
    }

    /// Slice `axis` of `x`; the node and whether the axis is kept (always). A step above 1
    /// is a view with the axis's stride times the step, as in PyTorch.
    pub(super) fn slice(
        &mut self,
        x: ValueId,
        axis: usize,
        range: SliceRange,
        ixspan: Span,
        span: Span,
    ) -> Option<(ValueId, bool)> {
        let t = self.ty(x).clone();
        let size = t.shape[axis].clone();
        // A negative constant bound counts from the end, as in Python.
        let from_end = |p: Poly, dims: &crate::dims::DimTable| match dims.with_consts(&p).as_int() {
            Some(n) if n < 0 => size.add(&Poly::int(n)),
            _ => p,
        };
        let start = from_end(range.start.unwrap_or_else(|| Poly::int(0)), &self.prog.dims);
        let end = from_end(range.end.unwrap_or_else(|| size.clone()), &self.prog.dims);
        let dims = &self.prog.dims;
        let unproved = [
            (&start, Poly::int(0)),
            (&end, start.clone()),
            (&size, end.clone()),
        ]
        .into_iter()
        .find(|(hi, lo)| !dims.provably_nonneg(&hi.sub(lo)));
        if let Some((hi, lo)) = unproved {
            let msg = format!(
                "slice `{} : {}` may fall outside axis {axis} of {}, of size `{}`",
                self.dim_text(&start),
                self.dim_text(&end),
                self.shape_text(&t.shape),
                self.dim_text(&size)
            );
            let mut d = Diagnostic::error(Code::E0208, ixspan, msg);
            if dims.with_consts(&hi.sub(&lo)).as_const().is_none() {
                let (hi, lo) = (self.dim_text(hi), self.dim_text(&lo));
                d = d.with_hint(format!(
                    "add `assert {hi} >= {lo}` above this line if it always holds"
                ));
            }
            self.report(d);
            return None;
        }
        let len = self.prog.dims.simplify(&end.sub(&start));
        let (op, out) = match range.step {
            1 => {
                let mut out = t;
                out.shape = shape::sliced(&out.shape, axis, len).expect("`axis` is an axis of `x`");
                (Op::Slice { axis, start, end }, out)
            }
            step => {
                let len = self.prog.dims.simplify(&ceil_div(&self.prog.dims, &len, step));
                let laid = Layout::moved(&self.prog.dims, &t, |old| {
                    let mut strides = old.to_vec();
                    strides[axis] = strides[axis].mul(&Poly::int(step));
                    strides
                });
                let shape = shape::sliced(&t.shape, axis, len.clone()).expect("`axis` is an axis of `x`");
                let out = laid.with(shape, t.dtype);
                (
                    Op::StepSlice {
                        axis,
                        start,
                        step,
                        len,
                    },
                    out,
                )
            }
        };
        let Value::Tensor(id) = self.push(op, vec![x], out, span) else {
            unreachable!("push makes a tensor")
        };
        Some((id, true))
    }

    /// Select index `i` of `axis` (negative constants count from the end), dropping it.
    fn select(
        &mut self,
        x: ValueId,
        axis: usize,
        i: Poly,
        ixspan: Span,
        span: Span,
    ) -> Option<(ValueId, bool)> {
        let t = self.ty(x).clone();
        let size = t.shape[axis].clone();
        let i = match self.prog.dims.with_consts(&i).as_int() {
            Some(n) if n < 0 => size.add(&Poly::int(n)),
            _ => i,
        };
        let dims = &self.prog.dims;
        let fits = dims.provably_nonneg(&i) && dims.provably_nonneg(&size.sub(&i).sub(&Poly::int(1)));
        if !fits {
            let msg = format!(
                "index `{}` may fall outside axis {axis} of {}, of size `{}`",
                self.dim_text(&i),
                self.shape_text(&t.shape),
                self.dim_text(&size)
            );
            self.error(Code::E0208, ixspan, msg);
            return None;
        }
        let out = layout::without_axis(&self.prog.dims, &t, axis);
        let Value::Tensor(id) = self.push(Op::Select { axis, index: i }, vec![x], out, span) else {
            unreachable!("push makes a tensor")
        };
        Some((id, false))
    }
}

enum IndexKind {
    /// Start, end (either absent: the axis's own) and step.
    Slice(Option<Poly>, Option<Poly>, i64),
    Select(Poly),
}

/// The bounds of `x[start : end : step]` on one axis, as written.
pub(super) struct SliceRange {
    pub start: Option<Poly>,
    pub end: Option<Poly>,
    pub step: i64,
}

/// `ceil(len / step)`, the length of a slice with a step: the exact quotient where the dims
/// prove it (`D / 2` under `assert D % 2 == 0`), a constant where they are known, and
/// otherwise `(len + step - 1 - (len + step - 1) % step) / step`, evaluated once the dims
/// have values.
pub(super) fn ceil_div(dims: &DimTable, len: &Poly, step: i64) -> Poly {
    let by = Poly::int(step);
    if let Ok(q) = dims.div(len, &by) {
        return q;
    }
    // Exact after rounding up, the names kept (`x[1::2]` of `D = 64` is `D / 2`, not 32).
    let up = len.add(&Poly::int(step - 1));
    if let Ok(q) = dims.div(&up, &by) {
        return q;
    }
    if let Some(n) = dims.with_consts(len).as_int() {
        return Poly::int((n + step - 1).div_euclid(step));
    }
    let whole = match dims.rem(&up, &by) {
        Ok(r) => up.sub(&r),
        Err(_) => up.sub(&Poly::rem_atom(&up, &by)),
    };
    dims.div(&whole, &by)
        .unwrap_or_else(|_| whole.mul(&Poly::term(Ratio::new(1, i128::from(step)), &[])))
}

/// A rank-0 float: what numbers and dims are in value position.
/// Whether an argument is `None` (absent).
/// `torch.finfo(..)`, whose fields are numbers.
fn receiver_is_finfo(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Method { receiver, method, .. }
        if method.name == "finfo" && matches!(&receiver.kind, ExprKind::Name(n) if n == "torch"))
}

pub(super) fn is_none(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::NoneLit)
}

pub(super) fn scalar() -> TensorType {
    TensorType::row_major(Vec::new(), DType::F32)
}

/// The literal `-1` of a view's sizes.
pub(super) fn is_minus_one(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Neg(x) if matches!(x.kind, ExprKind::Int(1)))
}
