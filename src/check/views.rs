//! The rules of the ops that give a new view of a tensor's elements (`transpose`,
//! `permute`, `view`, `reshape`, `unsqueeze`, `squeeze`) or a row-major copy of them
//! (`contiguous`): shapes from the shape library, strides from `layout.rs`.

use super::layout::{self, view_strides, Layout};
use super::ops::is_minus_one;
use super::{Checker, Value};
use crate::ast::Expr;
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::ir::{Op, TensorType};
use crate::shape;
use crate::source::Span;

impl Checker {
    pub(crate) fn view_op(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        self.view(args, span, false)
    }

    pub(crate) fn reshape_op(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        self.view(args, span, true)
    }

    pub(crate) fn contiguous(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `contiguous`")?;
        let t = self.ty(x).clone();
        let ty = self.laid_out(layout::contiguous, &[x], t.shape, t.dtype);
        Some(self.push(Op::Contiguous, vec![x], ty, span))
    }

    pub(crate) fn transpose(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `transpose`")?;
        let t = self.ty(x).clone();
        let d0 = self.axis(args[1], t.rank(), false);
        let d1 = self.axis(args[2], t.rank(), false);
        let (d0, d1) = (d0?, d1?);
        let shape = shape::transposed(&t.shape, d0, d1).expect("`axis` checked both axes");
        let laid = Layout::moved(&self.prog.dims, &t, |s| {
            let mut s = s.to_vec();
            s.swap(d0, d1);
            s
        });
        let out = laid.with(shape, t.dtype);
        Some(self.push(Op::Transpose(d0.min(d1), d0.max(d1)), vec![x], out, span))
    }

    pub(crate) fn permute(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `permute`")?;
        let t = self.ty(x).clone();
        let axes: Option<Vec<usize>> = args[1..].iter().map(|a| self.axis(a, t.rank(), false)).collect();
        let axes = axes?;
        if !shape::is_permutation(&axes, t.rank()) {
            let list: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
            let msg = format!(
                "`permute({})` is not a permutation of the {} axes of {}",
                list.join(", "),
                t.rank(),
                self.shape_text(&t.shape)
            );
            self.error(Code::E0206, span, msg);
            return None;
        }
        let laid = Layout::moved(&self.prog.dims, &t, |s| {
            axes.iter().map(|&a| s[a].clone()).collect()
        });
        let out = laid.with(shape::permuted(&t.shape, &axes), t.dtype);
        Some(self.push(Op::Permute(axes), vec![x], out, span))
    }

    fn view(&mut self, args: &[&Expr], span: Span, reshape: bool) -> Option<Value> {
        let name = if reshape { "reshape" } else { "view" };
        let x = self.tensor_arg(args[0], &format!("the argument of `{name}`"))?;
        let t = self.ty(x).clone();
        let shape = self.view_shape(&t, &args[1..], span)?;
        let laid = match layout::view(&self.prog.dims, &t, &shape) {
            _ if reshape => layout::reshape(&self.prog.dims, &t, &shape),
            Some(laid) => laid,
            None => {
                self.report(self.view_error(&t, &shape, span));
                return None;
            }
        };
        let op = if reshape {
            Op::Reshape(shape.clone())
        } else {
            Op::View(shape.clone())
        };
        Some(self.push(op, vec![x], laid.with(shape, t.dtype), span))
    }

    /// The sizes of a view, with its `-1` solved and the element count proved equal.
    fn view_shape(&mut self, t: &TensorType, sizes: &[&Expr], span: Span) -> Option<Vec<Poly>> {
        let holes: Vec<usize> = (0..sizes.len()).filter(|&i| is_minus_one(sizes[i])).collect();
        if holes.len() > 1 {
            self.error(
                Code::E0202,
                sizes[holes[1]].span,
                "only one size of a view may be `-1`",
            );
            return None;
        }
        let mut shape = Vec::with_capacity(sizes.len());
        for (i, e) in sizes.iter().enumerate() {
            shape.push(if holes.contains(&i) {
                Poly::int(1)
            } else {
                self.dim_expr(e)?
            });
        }
        let numel = shape::numel(&self.prog.dims, &t.shape);
        let known = shape::numel(&self.prog.dims, &shape);
        if let Some(&h) = holes.first() {
            if !self.prog.dims.provably_positive(&known) {
                let msg = format!(
                    "cannot solve the `-1` of this view: the other sizes' product `{}` may be 0, and PyTorch refuses a `-1` beside a size of 0",
                    self.dim_text(&known)
                );
                let d = Diagnostic::error(Code::E0202, sizes[h].span, msg)
                    .with_hint("write the size in place of `-1`");
                self.report(d);
                return None;
            }
            match self.prog.dims.div(&numel, &known) {
                Ok(q) => shape[h] = self.prog.dims.simplify(&q),
                Err(_) => {
                    let msg = format!(
                        "cannot solve the `-1` of this view: `{}` elements do not split exactly into parts of `{}`",
                        self.dim_text(&numel),
                        self.dim_text(&known)
                    );
                    self.error(Code::E0202, sizes[h].span, msg);
                    return None;
                }
            }
        } else if !shape::keeps_count(&self.prog.dims, &t.shape, &shape) {
            let msg = format!(
                "a view of {} as {} changes the element count (`{}` vs `{}`)",
                self.shape_text(&t.shape),
                self.shape_text(&shape),
                self.dim_text(&numel),
                self.dim_text(&known)
            );
            self.error(Code::E0202, span, msg);
            return None;
        }
        Some(shape)
    }

    fn view_error(&self, t: &TensorType, shape: &[Poly], span: Span) -> Diagnostic {
        let dims = &self.prog.dims;
        let refusing = t.layouts().and_then(|all| {
            all.into_iter()
                .find(|s| view_strides(dims, &t.exact(s), shape).is_none())
        });
        let message = match (t.varies(), refusing) {
            (false, _) => format!(
                "cannot view {} with strides {} as {}: the view would merge axes that are not adjacent in memory",
                self.shape_text(&t.shape),
                self.shape_text(&t.strides),
                self.shape_text(shape)
            ),
            (true, Some(strides)) => format!(
                "cannot view {} as {}: its strides depend on the sizes ({}), and with strides {} the view would merge axes that are not adjacent in memory",
                self.shape_text(&t.shape),
                self.shape_text(shape),
                self.prog.strides_text(t),
                self.shape_text(strides)
            ),
            (true, None) => format!(
                "cannot view {} as {}: the view would merge axes, and this value may have any strides at some sizes (a `reshape` that is a view where sizes coincide, or more layouts than the checker follows)",
                self.shape_text(&t.shape),
                self.shape_text(shape)
            ),
        };
        Diagnostic::error(Code::E0203, span, message)
        .with_hint(format!(
            "call `.contiguous()` before `.view(..)` (it copies `{}` elements), or use `.reshape(..)`, which copies only when it must",
            self.dim_text(&t.numel())
        ))
    }

    pub(crate) fn unsqueeze(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `unsqueeze`")?;
        let t = self.ty(x).clone();
        let d = self.axis(args[1], t.rank(), true)?;
        let out = layout::unsqueezed(&self.prog.dims, &t, d);
        Some(self.push(Op::Unsqueeze(d), vec![x], out, span))
    }

    pub(crate) fn squeeze(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `squeeze`")?;
        let mut t = self.ty(x).clone();
        let axes: Vec<usize> = match args.get(1) {
            Some(e) => vec![self.axis(e, t.rank(), false)?],
            None => (0..t.rank()).collect(),
        };
        let mut value = Value::Tensor(x);
        for &a in axes.iter().rev() {
            let dims = &self.prog.dims;
            match shape::squeezes(dims, &t.shape[a]) {
                Some(true) => {
                    t = layout::without_axis(dims, &t, a);
                    let Value::Tensor(cur) = value else {
                        unreachable!("squeeze keeps a tensor")
                    };
                    value = self.push(Op::Squeeze(a), vec![cur], t.clone(), span);
                }
                Some(false) => {}
                None => {
                    let msg = format!(
                        "cannot squeeze axis {a} of {}: its size `{}` is 1 for some sizes only, where PyTorch's result would have another rank",
                        self.shape_text(&t.shape),
                        self.dim_text(&t.shape[a])
                    );
                    let hint = "squeeze only an axis proved 1; to drop the axis where it is 1, use `view` or `reshape` with the shape meant";
                    self.report(Diagnostic::error(Code::E0201, span, msg).with_hint(hint));
                    return None;
                }
            }
        }
        Some(value)
    }
}
