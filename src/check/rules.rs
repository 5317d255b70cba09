//! The shape rules of the ops built from others: reductions and what decomposes into
//! them (`mean`, `var`, `std`, `log_softmax`, the norms), and activations built from
//! elementwise primitives (`relu`, `silu`). Each builds its IR from primitives, so the
//! optimizer and the backends see only those.

use super::layout::{self, Layout};
use super::ops::{is_none, scalar, SliceRange};
use super::{Checker, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::{DimTable, Poly};
use crate::ir::{BinaryOp, CmpOp, DType, Op, ReduceOp, TensorType, UnaryOp, ValueId};
use crate::shape;
use crate::source::Span;

/// The argument at `i`, unless it is absent or `None`.
pub(super) fn given<'a>(args: &[&'a Expr], i: usize) -> Option<&'a Expr> {
    args.get(i).copied().filter(|e| !is_none(e))
}

impl Checker {
    // ---- building blocks ----------------------------------------------------------------

    pub(super) fn literal_id(&mut self, v: f64, span: Span) -> ValueId {
        self.push_id(Op::Literal(v), vec![], scalar(), span)
    }

    pub(super) fn dim_id(&mut self, p: Poly, span: Span) -> ValueId {
        self.push_id(Op::DimValue(p), vec![], scalar(), span)
    }

    pub(super) fn push_id(&mut self, op: Op, args: Vec<ValueId>, ty: TensorType, span: Span) -> ValueId {
        match self.push(op, args, ty, span) {
            Value::Tensor(id) => id,
            _ => unreachable!("push makes a tensor"),
        }
    }

    pub(super) fn unary_id(&mut self, op: UnaryOp, x: ValueId, span: Span) -> ValueId {
        match self.unary(op, &Value::Tensor(x), span, span) {
            Value::Tensor(id) => id,
            _ => unreachable!("a unary op of a tensor is a tensor"),
        }
    }

    /// `x` laid out as PyTorch lays out `rule`'s result: `x` itself where its strides are
    /// those for every size, else a `contiguous` step with them. Ops that attnc builds from
    /// elementwise steps need it where PyTorch's own kernel allocates the result
    /// (`log_softmax`, `layer_norm`) or copies its input first (`rms_norm`).
    fn relaid(
        &mut self,
        rule: impl Fn(&DimTable, &[&TensorType], &[Poly]) -> Layout,
        x: ValueId,
        span: Span,
    ) -> ValueId {
        let t = self.ty(x).clone();
        let ty = rule(&self.prog.dims, &[&t], &t.shape).with(t.shape.clone(), t.dtype);
        let dims = &self.prog.dims;
        let same =
            !t.varies() && !ty.varies() && t.strides.iter().zip(&ty.strides).all(|(a, b)| dims.equal(a, b));
        match same {
            true => x,
            false => self.push_id(Op::Contiguous, vec![x], ty, span),
        }
    }

    pub(super) fn bin(&mut self, op: BinaryOp, x: ValueId, y: ValueId, span: Span) -> Option<ValueId> {
        self.elementwise(Op::Binary(op), DType::F32, x, y, span)
    }

    /// `op` of `x` over `axes`; row-major, as PyTorch's reductions return. Several axes
    /// reduce one at a time (the last first, keeping each as size 1), so every backend
    /// needs only single-axis reductions; then a view drops them unless `keepdim`.
    fn reduce_id(&mut self, op: ReduceOp, x: ValueId, axes: &[usize], keepdim: bool, span: Span) -> ValueId {
        let [.., last] = axes else {
            return x;
        };
        if axes.len() == 1 {
            return self.reduce_axis(op, x, *last, keepdim, span);
        }
        let mut y = x;
        for &a in axes.iter().rev() {
            y = self.reduce_axis(op, y, a, true, span);
        }
        if keepdim {
            return y;
        }
        let shape: Vec<Poly> = (0..self.ty(x).rank())
            .filter(|a| !axes.contains(a))
            .map(|a| self.ty(x).shape[a].clone())
            .collect();
        let ty = TensorType::row_major(shape.clone(), self.ty(y).dtype);
        self.push_id(Op::View(shape), vec![y], ty, span)
    }

    pub(super) fn reduce_axis(
        &mut self,
        op: ReduceOp,
        x: ValueId,
        axis: usize,
        keepdim: bool,
        span: Span,
    ) -> ValueId {
        let axes = [axis];
        let shape = shape::reduced(&self.prog.dims, &self.ty(x).shape, &axes, keepdim);
        let node = Op::Reduce {
            op,
            axes: axes.to_vec(),
            keepdim,
        };
        let dtype = reduced_dtype(op, self.ty(x).dtype);
        self.push_id(node, vec![x], TensorType::row_major(shape, dtype), span)
    }

    /// Refuses a non-float `x` where PyTorch's `op` needs a floating-point input (`mean`,
    /// `var`, `softmax`, the norms): E0208 with PyTorch's reason and the conversion.
    pub(super) fn floating(&mut self, x: ValueId, op: &str, span: Span) -> Option<()> {
        let dtype = self.ty(x).dtype;
        if dtype == DType::F32 {
            return Some(());
        }
        let msg = format!("`{op}` needs a floating-point tensor, found {}", dtype.name());
        let d = Diagnostic::error(Code::E0208, span, msg)
            .with_hint("convert it first, as PyTorch asks: `x.float()`");
        self.report(d);
        None
    }

    /// The number of elements of `x` over `axes`, as a float scalar.
    fn count_id(&mut self, x: ValueId, axes: &[usize], span: Span) -> ValueId {
        let t = self.ty(x).clone();
        let n = axes.iter().fold(Poly::int(1), |acc, &a| acc.mul(&t.shape[a]));
        self.dim_id(n, span)
    }

    // ---- parameters ---------------------------------------------------------------------

    /// A float parameter: a number literal, `inf`, or either negated.
    pub(super) fn float_param(&mut self, e: &Expr, what: &str) -> Option<f64> {
        match &e.kind {
            ExprKind::Int(n) => Some(*n as f64),
            ExprKind::Float(x) => Some(f64::from(*x as f32)),
            ExprKind::Inf => Some(f64::INFINITY),
            ExprKind::Neg(x) => Some(-self.float_param(x, what)?),
            ExprKind::Error => None,
            _ => {
                self.error(Code::E0208, e.span, format!("{what} must be a number"));
                None
            }
        }
    }

    /// A boolean parameter: `True` or `False` only.
    pub(super) fn bool_param(&mut self, e: &Expr, what: &str) -> Option<bool> {
        match &e.kind {
            ExprKind::Bool(b) => Some(*b),
            ExprKind::Error => None,
            _ => {
                self.error(Code::E0208, e.span, format!("{what} must be `True` or `False`"));
                None
            }
        }
    }

    /// The axes of a reduction: `None` for all of them, one axis, or a list or tuple of
    /// axes; sorted, each once. An empty list is every axis, as in PyTorch.
    fn reduce_axes(&mut self, e: &Expr, rank: usize) -> Option<Vec<usize>> {
        let mut axes = match &e.kind {
            ExprKind::NoneLit => (0..rank).collect(),
            ExprKind::List(items) | ExprKind::Tuple(items) if items.is_empty() => (0..rank).collect(),
            ExprKind::List(items) | ExprKind::Tuple(items) => {
                let mut axes = Vec::new();
                for item in items {
                    axes.push(self.axis(item, rank, false)?);
                }
                axes
            }
            _ => vec![self.axis(e, rank, false)?],
        };
        axes.sort_unstable();
        if axes.windows(2).any(|w| w[0] == w[1]) {
            self.error(Code::E0204, e.span, "an axis appears twice in `dim`");
            return None;
        }
        Some(axes)
    }

    /// The input, axes and `keepdim` of a reduction `(input, dim, keepdim)`.
    fn reduce_args(&mut self, args: &[&Expr], keepdim_at: usize) -> Option<(ValueId, Vec<usize>, bool)> {
        let x = self.tensor_arg(args[0], "the input of a reduction")?;
        let rank = self.ty(x).rank();
        let axes = match args.get(1) {
            Some(e) => self.reduce_axes(e, rank)?,
            None => (0..rank).collect(),
        };
        let keepdim = match args.get(keepdim_at) {
            Some(e) => self.bool_param(e, "`keepdim`")?,
            None => false,
        };
        Some((x, axes, keepdim))
    }

    // ---- rules --------------------------------------------------------------------------

    /// `sum`, `amax`, `amin`: `(input, dim=None, keepdim=False)`.
    pub(super) fn reduction(&mut self, op: ReduceOp, args: &[&Expr], span: Span) -> Option<Value> {
        let (x, axes, keepdim) = self.reduce_args(args, 2)?;
        if op != ReduceOp::Sum {
            self.nonempty_axes(op, x, &axes, span)?;
        }
        Some(Value::Tensor(self.reduce_id(op, x, &axes, keepdim, span)))
    }

    /// `amax` and `amin` have no value over no elements: PyTorch raises, so each reduced
    /// axis must be proved non-empty (E0208 otherwise, with the `assert` that would prove it).
    fn nonempty_axes(&mut self, op: ReduceOp, x: ValueId, axes: &[usize], span: Span) -> Option<()> {
        let shape = self.ty(x).shape.clone();
        let axis = axes
            .iter()
            .find(|&&a| !self.prog.dims.provably_positive(&shape[a]));
        let Some(&axis) = axis else {
            return Some(());
        };
        let size = self.dim_text(&shape[axis]);
        let msg = format!(
            "`{}` over axis {axis} of {}, of size `{size}`, which may be empty",
            op.name(),
            self.shape_text(&shape)
        );
        let mut d = Diagnostic::error(Code::E0208, span, msg);
        if self.prog.dims.with_consts(&shape[axis]).as_const().is_none() {
            d = d.with_hint(format!(
                "add `assert {size} >= 1` above this line if it always holds"
            ));
        }
        self.report(d);
        None
    }

    /// `mean = sum / n`.
    pub(crate) fn mean(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let (x, axes, keepdim) = self.reduce_args(args, 2)?;
        self.floating(x, "mean", span)?;
        Some(Value::Tensor(self.mean_id(x, &axes, keepdim, span)?))
    }

    fn mean_id(&mut self, x: ValueId, axes: &[usize], keepdim: bool, span: Span) -> Option<ValueId> {
        let sum = self.reduce_id(ReduceOp::Sum, x, axes, keepdim, span);
        let n = self.count_id(x, axes, span);
        self.bin(BinaryOp::Div, sum, n, span)
    }

    /// `var(input, dim=None, unbiased=True, keepdim=False, correction=None)`: the sum of
    /// squared deviations from the mean, over `n - correction` (`correction` is 1 when
    /// `unbiased`, else 0, unless given), as `s * (s * q)` (see [`Checker::var_parts`]).
    pub(crate) fn var(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let (s, q) = self.var_parts(args, span)?;
        let sq = self.bin(BinaryOp::Mul, s, q, span)?;
        let var = self.bin(BinaryOp::Mul, s, sq, span)?;
        // PyTorch's kernel allocates the result, row-major on every axis.
        Some(Value::Tensor(self.relaid(layout::fresh_row_major, var, span)))
    }

    /// `std = sqrt(var)`, as `s * sqrt(q)`: finite wherever the standard deviation is,
    /// though the variance may not be (`[3e38, 0, 0]` has `std` 1.73e38).
    pub(crate) fn std(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let (s, q) = self.var_parts(args, span)?;
        let root = self.unary_id(UnaryOp::Sqrt, q, span);
        let std = self.bin(BinaryOp::Mul, s, root, span)?;
        Some(Value::Tensor(self.relaid(layout::fresh_row_major, std, span)))
    }

    /// The variance as a scale `s`, the largest deviation from the mean (at least the
    /// smallest normal float, so that equal values give 0, not NaN), and
    /// `q = sum((dev / s)^2) / max(n - correction, 0)`, the variance being `s * s * q`.
    /// PyTorch sums the squared deviations in double; in float32 they overflow from about
    /// 1.8e19, so they are summed scaled to at most 1. The divisor is clamped at 0 as
    /// PyTorch clamps it: `correction >= n` gives NaN or inf, never a negative variance.
    fn var_parts(&mut self, args: &[&Expr], span: Span) -> Option<(ValueId, ValueId)> {
        let (x, axes, keepdim) = self.reduce_args(args, 3)?;
        self.floating(x, "var", span)?;
        let unbiased = match given(args, 2) {
            Some(e) => self.bool_param(e, "`unbiased`")?,
            None => true,
        };
        let correction = match given(args, 4) {
            Some(e) => self.float_param(e, "`correction`")?,
            None => f64::from(u8::from(unbiased)),
        };
        let dev = self.deviation(x, &axes, span)?;
        // Row-major, as PyTorch's own kernel keeps nothing of the input's layout: where
        // the deviations may have several layouts (a slice whose size may be 0 or 1), the
        // steps below need not be proved for each of them (and each pair).
        let dev = self.relaid(layout::fresh_row_major, dev, span);
        let abs = self.unary_id(UnaryOp::Abs, dev, span);
        let largest = self.reduce_id(ReduceOp::Max, abs, &axes, true, span);
        let tiny = self.literal_id(f64::from(f32::MIN_POSITIVE), span);
        let scale = self.bin(BinaryOp::Maximum, largest, tiny, span)?;
        let scaled = self.bin(BinaryOp::Div, dev, scale, span)?;
        let scaled = self.relaid(layout::fresh_row_major, scaled, span);
        let sq = self.bin(BinaryOp::Mul, scaled, scaled, span)?;
        let ss = self.reduce_id(ReduceOp::Sum, sq, &axes, keepdim, span);
        let n = self.count_id(x, &axes, span);
        let c = self.literal_id(correction, span);
        let dof = self.bin(BinaryOp::Sub, n, c, span)?;
        let zero = self.literal_id(0.0, span);
        let dof = self.bin(BinaryOp::Maximum, dof, zero, span)?;
        let q = self.bin(BinaryOp::Div, ss, dof, span)?;
        let shape = self.ty(q).shape.clone();
        let scale = match keepdim || axes.is_empty() {
            true => scale,
            false => {
                let ty = TensorType::row_major(shape.clone(), DType::F32);
                self.push_id(Op::View(shape), vec![scale], ty, span)
            }
        };
        Some((scale, q))
    }

    /// `x - x.mean(axes, keepdim=True)`.
    fn deviation(&mut self, x: ValueId, axes: &[usize], span: Span) -> Option<ValueId> {
        let mean = self.mean_id(x, axes, true, span)?;
        self.bin(BinaryOp::Sub, x, mean, span)
    }

    /// `log_softmax(x, dim) = (x - max) - log(sum(exp(x - max)))`: a row with NaN or with
    /// every entry `-inf` is NaN, as in PyTorch.
    pub(crate) fn log_softmax(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `log_softmax`")?;
        self.floating(x, "log_softmax", span)?;
        let (x, axis, scalar) = self.along_axis(x, args[1], span)?;
        let axes = [axis];
        let max = self.reduce_id(ReduceOp::Max, x, &axes, true, span);
        let shifted = self.bin(BinaryOp::Sub, x, max, span)?;
        let exp = self.unary_id(UnaryOp::Exp, shifted, span);
        let sum = self.reduce_id(ReduceOp::Sum, exp, &axes, true, span);
        let log = self.unary_id(UnaryOp::Log, sum, span);
        let y = self.bin(BinaryOp::Sub, shifted, log, span)?;
        let y = self.relaid(layout::fresh_row_major, y, span);
        Some(self.unrow(y, scalar, span))
    }

    /// The trailing axes `normalized_shape` names: E0201 unless they equal `x`'s.
    fn normalized_axes(&mut self, x: ValueId, e: &Expr, op: &str) -> Option<Vec<usize>> {
        let items: Vec<&Expr> = match &e.kind {
            ExprKind::List(items) | ExprKind::Tuple(items) => items.iter().collect(),
            _ => vec![e],
        };
        let mut sizes = Vec::new();
        for item in &items {
            sizes.push(self.dim_expr(item)?);
        }
        let t = self.ty(x).clone();
        let fits = sizes.len() <= t.rank()
            && sizes
                .iter()
                .zip(&t.shape[t.rank() - sizes.len()..])
                .all(|(a, b)| self.prog.dims.equal(a, b));
        if !fits || sizes.is_empty() {
            let msg = format!(
                "`{op}` over {} needs the input's trailing axes to be that shape, found {}",
                self.shape_text(&sizes),
                self.shape_text(&t.shape)
            );
            self.error(Code::E0201, e.span, msg);
            return None;
        }
        Some((t.rank() - sizes.len()..t.rank()).collect())
    }

    /// An optional `weight` or `bias` of a norm: the normalized shape, or broadcast to it.
    fn affine(&mut self, args: &[&Expr], i: usize, what: &str) -> Option<Option<ValueId>> {
        match given(args, i) {
            Some(e) => Some(Some(self.tensor_arg(e, what)?)),
            None => Some(None),
        }
    }

    /// `layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05)`:
    /// `(x - mean) * rsqrt(var + eps) * weight + bias`, the variance biased.
    pub(crate) fn layer_norm(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `layer_norm`")?;
        self.floating(x, "layer_norm", span)?;
        let axes = self.normalized_axes(x, args[1], "layer_norm")?;
        let weight = self.affine(args, 2, "the weight of `layer_norm`")?;
        let bias = self.affine(args, 3, "the bias of `layer_norm`")?;
        let eps = match given(args, 4) {
            Some(e) => self.float_param(e, "`eps`")?,
            None => 1e-5,
        };
        let dev = self.deviation(x, &axes, span)?;
        let sq = self.bin(BinaryOp::Mul, dev, dev, span)?;
        let var = self.mean_id(sq, &axes, true, span)?;
        let y = self.scale_by_rsqrt(dev, var, eps, span)?;
        let y = self.weight_and_bias(y, weight, bias, span)?;
        Some(Value::Tensor(self.relaid(layout::fresh_row_major, y, span)))
    }

    /// `rms_norm(input, normalized_shape, weight=None, eps=None)`:
    /// `x * rsqrt(mean(x * x) + eps) * weight`, `eps=None` being float32's epsilon.
    pub(crate) fn rms_norm(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `rms_norm`")?;
        self.floating(x, "rms_norm", span)?;
        let axes = self.normalized_axes(x, args[1], "rms_norm")?;
        let weight = self.affine(args, 2, "the weight of `rms_norm`")?;
        let eps = match given(args, 3) {
            Some(e) => self.float_param(e, "`eps`")?,
            None => f64::from(f32::EPSILON),
        };
        let known = layout::strides_known_at_ones(&self.prog, x);
        let x = self.relaid(
            |dims, operands, shape| layout::contiguous_as_suggested(dims, operands[0], known, shape),
            x,
            span,
        );
        let sq = self.bin(BinaryOp::Mul, x, x, span)?;
        let ms = self.mean_id(sq, &axes, true, span)?;
        let y = self.scale_by_rsqrt(x, ms, eps, span)?;
        Some(Value::Tensor(self.weight_and_bias(y, weight, None, span)?))
    }

    /// `x * rsqrt(v + eps)`.
    fn scale_by_rsqrt(&mut self, x: ValueId, v: ValueId, eps: f64, span: Span) -> Option<ValueId> {
        let eps = self.literal_id(eps, span);
        let shifted = self.bin(BinaryOp::Add, v, eps, span)?;
        let r = self.unary_id(UnaryOp::Rsqrt, shifted, span);
        self.bin(BinaryOp::Mul, x, r, span)
    }

    fn weight_and_bias(
        &mut self,
        y: ValueId,
        w: Option<ValueId>,
        b: Option<ValueId>,
        span: Span,
    ) -> Option<ValueId> {
        let y = match w {
            Some(w) => self.bin(BinaryOp::Mul, y, w, span)?,
            None => y,
        };
        match b {
            Some(b) => self.bin(BinaryOp::Add, y, b, span),
            None => Some(y),
        }
    }

    /// `relu(x) = maximum(x, 0)`: NaN stays NaN.
    pub(crate) fn relu(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `relu`")?;
        let zero = self.literal_id(0.0, span);
        Some(Value::Tensor(self.bin(BinaryOp::Maximum, x, zero, span)?))
    }

    /// `gelu(x, approximate="none")`: `x * 0.5 * (1 + erf(x / sqrt(2)))`; with `"tanh"`,
    /// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`, both as ATen writes them.
    pub(crate) fn gelu(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `gelu`")?;
        let tanh = match args.get(1).map(|e| &e.kind) {
            None => false,
            Some(ExprKind::Str(s)) if s == "none" => false,
            Some(ExprKind::Str(s)) if s == "tanh" => true,
            Some(_) => {
                let msg = "`approximate` must be \"none\" or \"tanh\"";
                self.error(Code::E0208, args[1].span, msg);
                return None;
            }
        };
        let half = self.literal_id(0.5, span);
        let one = self.literal_id(1.0, span);
        let inner = match tanh {
            false => {
                let r = self.literal_id(std::f64::consts::FRAC_1_SQRT_2, span);
                let scaled = self.bin(BinaryOp::Mul, x, r, span)?;
                self.unary_id(UnaryOp::Erf, scaled, span)
            }
            true => {
                let beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
                let (beta, kappa) = (self.literal_id(beta, span), self.literal_id(0.044715, span));
                let x2 = self.bin(BinaryOp::Mul, x, x, span)?;
                let x3 = self.bin(BinaryOp::Mul, x2, x, span)?;
                let cubic = self.bin(BinaryOp::Mul, kappa, x3, span)?;
                let sum = self.bin(BinaryOp::Add, x, cubic, span)?;
                let arg = self.bin(BinaryOp::Mul, beta, sum, span)?;
                self.unary_id(UnaryOp::Tanh, arg, span)
            }
        };
        let one_plus = self.bin(BinaryOp::Add, one, inner, span)?;
        if tanh {
            let half_x = self.bin(BinaryOp::Mul, x, half, span)?;
            return Some(Value::Tensor(self.bin(BinaryOp::Mul, half_x, one_plus, span)?));
        }
        // PyTorch's vectorized CPU kernel: `x * (1 + erf) * 0.5` in that order (so above
        // `f32::MAX / 2` it overflows to inf), and NaN at +inf as at -inf.
        let scaled = self.bin(BinaryOp::Mul, x, one_plus, span)?;
        let value = self.bin(BinaryOp::Mul, scaled, half, span)?;
        let inf = self.literal_id(f64::INFINITY, span);
        let at_inf = self.elementwise(Op::Compare(CmpOp::Eq), DType::Bool, x, inf, span)?;
        let nan = self.literal_id(f64::NAN, span);
        let t = self.ty(value).clone();
        let ty = self.laid_out_elementwise(&[at_inf, nan, value], t.shape, t.dtype);
        Some(self.push(Op::Where, vec![at_inf, nan, value], ty, span))
    }

    /// `silu(x) = x * sigmoid(x)`.
    pub(crate) fn silu(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `silu`")?;
        let s = self.unary_id(UnaryOp::Sigmoid, x, span);
        Some(Value::Tensor(self.bin(BinaryOp::Mul, x, s, span)?))
    }

    /// `clamp(x, min=None, max=None) = minimum(maximum(x, min), max)`: NaN stays NaN.
    pub(crate) fn clamp(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let mut x = self.tensor_arg(args[0], "the input of `clamp`")?;
        if given(args, 1).is_none() && given(args, 2).is_none() {
            let d = Diagnostic::error(Code::E0206, span, "`clamp` with neither `min` nor `max`")
                .with_hint("give `min`, `max` or both, as PyTorch requires one");
            self.report(d);
            return None;
        }
        for (i, op) in [(1, BinaryOp::Maximum), (2, BinaryOp::Minimum)] {
            if let Some(e) = given(args, i) {
                let bound = self.tensor_arg(e, "a bound of `clamp`")?;
                x = self.bin(op, x, bound, span)?;
            }
        }
        Some(Value::Tensor(x))
    }

    /// `where(condition, input, other)`: `input` where the boolean `condition` holds,
    /// `other` elsewhere; the broadcast shape of all three.
    pub(crate) fn where_op(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let c = self.tensor_arg(args[0], "the condition of `where`");
        let a = self.tensor_arg(args[1], "the input of `where`");
        let b = self.tensor_arg(args[2], "the other of `where`");
        let (c, a, b) = (c?, a?, b?);
        if self.ty(c).dtype != DType::Bool {
            self.error(
                Code::E0208,
                args[0].span,
                "the condition of `where` is not boolean",
            );
            return None;
        }
        let ca = self.broadcast(c, a, span)?;
        let shape = self.broadcast_shapes(&ca, &self.ty(b).shape.clone(), span)?;
        let both_bool = self.ty(a).dtype == DType::Bool && self.ty(b).dtype == DType::Bool;
        let dtype = if both_bool { DType::Bool } else { DType::F32 };
        let ty = self.laid_out_elementwise(&[c, a, b], shape, dtype);
        Some(self.push(Op::Where, vec![c, a, b], ty, span))
    }

    /// `split(x, size, dim=0)` into parts of `size` (the count a constant the checker
    /// proves, E0205 otherwise), or `split(x, [a, b, ..], dim)` into those sections (their
    /// sum the axis, E0201 otherwise): a tuple of slices.
    pub(crate) fn split(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `split`")?;
        let t = self.ty(x).clone();
        let axis = self.axis(args.get(2).copied()?, t.rank(), false)?;
        let size = t.shape[axis].clone();
        let sections = match &args[1].kind {
            ExprKind::List(items) | ExprKind::Tuple(items) => {
                let mut sections = Vec::new();
                for e in items {
                    sections.push(self.dim_expr(e)?);
                }
                let total = sections.iter().fold(Poly::int(0), |acc, s| acc.add(s));
                if !self.prog.dims.equal(&total, &size) {
                    let msg = format!(
                        "sections summing to `{}` do not split an axis of `{}`",
                        self.dim_text(&total),
                        self.dim_text(&size)
                    );
                    self.error(Code::E0201, args[1].span, msg);
                    return None;
                }
                sections
            }
            _ => {
                let part = self.dim_expr(args[1])?;
                let n = self.part_count(&size, &part, args[1])?;
                vec![part; n]
            }
        };
        self.parts(x, axis, &sections, args[1].span, span)
    }

    /// `chunk(x, chunks, dim=0)`: `chunks` equal parts (proved exact, E0205 otherwise).
    pub(crate) fn chunk(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `chunk`")?;
        let t = self.ty(x).clone();
        let axis = self.axis(args.get(2).copied()?, t.rank(), false)?;
        let chunks = self.dim_expr(args[1])?;
        let Some(n) = self.prog.dims.with_consts(&chunks).as_int().filter(|&n| n > 0) else {
            self.error(
                Code::E0205,
                args[1].span,
                "the number of chunks must be a positive constant",
            );
            return None;
        };
        let part = match self.prog.dims.div(&t.shape[axis], &chunks) {
            Ok(q) => q,
            Err(err) => {
                let d = self.division_error(err, &t.shape[axis], &chunks, args[1]);
                self.report(d);
                return None;
            }
        };
        self.parts(x, axis, &vec![part; n as usize], args[1].span, span)
    }

    /// How many parts of `part` make `size`: a constant, or E0205.
    fn part_count(&mut self, size: &Poly, part: &Poly, e: &Expr) -> Option<usize> {
        let q = match self.prog.dims.div(size, part) {
            Ok(q) => q,
            Err(err) => {
                let d = self.division_error(err, size, part, e);
                self.report(d);
                return None;
            }
        };
        match self.prog.dims.with_consts(&q).as_int().filter(|&n| n > 0) {
            Some(n) => Some(n as usize),
            None => {
                let msg = format!(
                    "`{}` in parts of `{}` is `{}` parts: not a constant",
                    self.dim_text(size),
                    self.dim_text(part),
                    self.dim_text(&q)
                );
                self.error(Code::E0205, e.span, msg);
                None
            }
        }
    }

    /// Consecutive slices of `axis` of these sizes, as a tuple.
    fn parts(&mut self, x: ValueId, axis: usize, sizes: &[Poly], ixspan: Span, span: Span) -> Option<Value> {
        let mut start = Poly::int(0);
        let mut items = Vec::new();
        for s in sizes {
            let end = start.add(s);
            let range = SliceRange {
                start: Some(start.clone()),
                end: Some(end.clone()),
                step: 1,
            };
            let (id, _) = self.slice(x, axis, range, ixspan, span)?;
            items.push(Value::Tensor(id));
            start = end;
        }
        Some(Value::Tuple(items))
    }

    /// `x.size(d)` as a number; `x.size()` (a shape) is not a value here.
    pub(crate) fn size(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let Some(d) = args.get(1) else {
            self.error(
                Code::E0208,
                span,
                "`size()` without an axis is a shape, not a value: give the axis, `x.size(-1)`",
            );
            return None;
        };
        let p = self.size_of(args[0], d)?;
        Some(Value::Tensor(self.dim_id(p, span)))
    }
}

/// A reduction's dtype, as PyTorch's: a sum of integers or booleans is int64, a maximum or
/// minimum keeps its input's dtype.
fn reduced_dtype(op: ReduceOp, input: DType) -> DType {
    match (op, input) {
        (ReduceOp::Sum, DType::F32) => DType::F32,
        (ReduceOp::Sum, DType::I64 | DType::Bool) => DType::I64,
        (ReduceOp::Max | ReduceOp::Min, dtype) => dtype,
    }
}
