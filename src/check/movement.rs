//! The shape rules of the movement ops that repeat or regroup elements: `expand` (a view
//! with stride-0 axes).

use super::ops::is_minus_one;
use super::{layout, Checker, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::Code;
use crate::ir::Op;
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
                if !dims.equal(&t.shape[j], &size) && !dims.is_one(&t.shape[j]) {
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
        let laid = layout::expand(&self.prog.dims, &t, &shape);
        Some(self.push(
            Op::Expand(shape.clone()),
            vec![x],
            laid.with(shape, t.dtype),
            span,
        ))
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
