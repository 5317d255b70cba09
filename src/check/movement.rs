//! The shape rules of the movement ops that repeat or regroup elements: `expand` (a view
//! with stride-0 axes), `flatten` (a `reshape`) and `repeat_interleave` (built as ATen
//! builds it: `unsqueeze`, `expand`, a row-major copy, then a view).

use super::ops::{is_minus_one, is_none};
use super::{layout, Checker, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::Code;
use crate::dims::Poly;
use crate::ir::{Op, ValueId};
use crate::shape;
use crate::source::Span;

impl Checker {
    /// `expand(x, *size)`: sizes aligned to `x`'s axes from the right; `-1` keeps an axis,
    /// an axis of size 1 repeats, new leading axes are added in front (never `-1`).
    pub(crate) fn expand(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `expand`")?;
        let t = self.ty(x).clone();
        let sizes = size_list(&args[1..]);
        if sizes.len() < t.rank() {
            let msg = format!(
                "`expand` to {} sizes of a tensor of rank {}: it can add axes, never remove them",
                sizes.len(),
                t.rank()
            );
            self.error(Code::E0201, span, msg);
            return None;
        }
        let pad = sizes.len() - t.rank();
        let mut shape = Vec::with_capacity(sizes.len());
        for (i, e) in sizes.iter().enumerate() {
            let size = match (is_minus_one(e), i.checked_sub(pad)) {
                (true, Some(j)) => t.shape[j].clone(),
                (true, None) => {
                    let msg = "`-1` in `expand` keeps an existing axis; a new leading axis needs its size";
                    self.error(Code::E0201, e.span, msg);
                    return None;
                }
                (false, _) => self.dim_expr(e)?,
            };
            if !self.prog.dims.provably_nonneg(&size) {
                let msg = format!("size `{}` may be negative", self.dim_text(&size));
                self.error(Code::E0208, e.span, msg);
                return None;
            }
            if let Some(j) = i.checked_sub(pad) {
                let dims = &self.prog.dims;
                if !shape::broadcasts_to(dims, &t.shape[j], &size) {
                    let msg = format!(
                        "cannot expand axis {j} of {} from `{}` to `{}`: only an axis of size 1 repeats, and `{}` is not provably 1 nor provably `{}`",
                        self.shape_text(&t.shape),
                        self.dim_text(&t.shape[j]),
                        self.dim_text(&size),
                        self.dim_text(&t.shape[j]),
                        self.dim_text(&size)
                    );
                    self.error(Code::E0201, e.span, msg);
                    return None;
                }
            }
            shape.push(size);
        }
        Some(Value::Tensor(self.expanded(x, shape, span)))
    }

    fn expanded(&mut self, x: ValueId, shape: Vec<Poly>, span: Span) -> ValueId {
        let t = self.ty(x).clone();
        let laid = layout::expand(&self.prog.dims, &t, &shape);
        let ty = laid.with(shape.clone(), t.dtype);
        tensor_id(self.push(Op::Expand(shape), vec![x], ty, span))
    }

    /// `flatten(x, start_dim=0, end_dim=-1)`: the axes from `start_dim` to `end_dim` merged
    /// into one, as `reshape` does (a view where the strides allow one, else a copy); a
    /// rank-0 tensor becomes `[1]`, and one axis alone is the input itself.
    pub(crate) fn flatten(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `flatten`")?;
        let rank = self.ty(x).rank();
        // PyTorch wraps a rank-0 tensor's axes as those of rank 1.
        let start = self.axis(args[1], rank.max(1), false);
        let end = self.axis(args[2], rank.max(1), false);
        let (start, end) = (start?, end?);
        if start > end {
            let msg =
                format!("`flatten` from axis {start} to axis {end}: `start_dim` cannot come after `end_dim`");
            self.error(Code::E0204, span, msg);
            return None;
        }
        Some(Value::Tensor(self.flattened(x, start, end, span)))
    }

    /// `x` with axes `start..=end` (`end` capped at the last axis) merged, through
    /// `reshape`.
    fn flattened(&mut self, x: ValueId, start: usize, end: usize, span: Span) -> ValueId {
        let t = self.ty(x).clone();
        let shape = match t.rank() {
            0 => vec![Poly::int(1)],
            rank => {
                let end = end.min(rank - 1);
                if start == end {
                    return x;
                }
                let merged = t.shape[start..=end]
                    .iter()
                    .fold(Poly::int(1), |acc, d| acc.mul(d));
                let mut shape = t.shape[..start].to_vec();
                shape.push(self.prog.dims.simplify(&merged));
                shape.extend_from_slice(&t.shape[end + 1..]);
                shape
            }
        };
        let laid = layout::reshape(&self.prog.dims, &t, &shape);
        let ty = laid.with(shape.clone(), t.dtype);
        tensor_id(self.push(Op::Reshape(shape), vec![x], ty, span))
    }

    /// `repeat_interleave(x, repeats, dim=None)`: each element along `dim` repeated
    /// `repeats` times in place; without `dim`, of the flattened input. Built as ATen
    /// builds it: `x.unsqueeze(dim + 1).expand(.., repeats, ..)`, a row-major copy, then
    /// `flatten(dim, dim + 1)`.
    pub(crate) fn repeat_interleave(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the argument of `repeat_interleave`")?;
        let repeats = self.dim_expr(args[1])?;
        if !self.prog.dims.provably_nonneg(&repeats) {
            let msg = format!("`repeats` `{}` may be negative", self.dim_text(&repeats));
            self.error(Code::E0208, args[1].span, msg);
            return None;
        }
        let rank = self.ty(x).rank();
        let (x, dim) = match args.get(2).filter(|e| !is_none(e)) {
            Some(e) => (x, self.axis(e, rank.max(1), false)?),
            None => (self.flattened(x, 0, usize::MAX, span), 0),
        };
        // A rank-0 tensor repeats as `[1]`.
        let x = self.flattened(x, 0, 0, span);
        let one = layout::unsqueezed(&self.prog.dims, self.ty(x), dim + 1);
        let unsqueezed = tensor_id(self.push(Op::Unsqueeze(dim + 1), vec![x], one.clone(), span));
        let mut wide = one.shape;
        wide[dim + 1] = repeats;
        let expanded = self.expanded(unsqueezed, wide, span);
        let et = self.ty(expanded).clone();
        let ty = self.laid_out(layout::contiguous, &[expanded], et.shape, et.dtype);
        let copy = tensor_id(self.push(Op::Contiguous, vec![expanded], ty, span));
        Some(Value::Tensor(self.flattened(copy, dim, dim + 1, span)))
    }
}

/// Sizes given one by one, or as one list or tuple (`x.expand((B, H, N))`).
fn size_list<'a>(args: &[&'a Expr]) -> Vec<&'a Expr> {
    match args {
        [one] => match &one.kind {
            ExprKind::List(items) | ExprKind::Tuple(items) => items.iter().collect(),
            _ => args.to_vec(),
        },
        _ => args.to_vec(),
    }
}

fn tensor_id(v: Value) -> ValueId {
    match v {
        Value::Tensor(id) => id,
        _ => unreachable!("push makes a tensor"),
    }
}
