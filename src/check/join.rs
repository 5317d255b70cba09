//! The rules of the ops that join tensors: `cat` of a list or of a `for`'s items along an
//! axis, `stack` along a new one.

use super::layout;
use super::{Checker, Value};
use crate::ast::{Expr, ExprKind};
use crate::diagnostic::Code;
use crate::dims::Poly;
use crate::ir::{Op, TensorType, ValueId};
use crate::shape::{self, CatError};
use crate::source::Span;

impl Checker {
    pub(crate) fn concat(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        match &args[0].kind {
            ExprKind::List(items) | ExprKind::Tuple(items) => self.cat_list(items, args[1], span),
            _ => self.join("concat", args, span),
        }
    }

    /// `cat([a, b, ..], dim)`: tensors of one rank that agree on every axis but `dim`; laid
    /// out as `joined` says (row-major, or channels-last as PyTorch keeps it).
    fn cat_list(&mut self, items: &[Expr], dim: &Expr, span: Span) -> Option<Value> {
        let parts = self.list_parts("cat", items, span)?;
        let axis = self.axis(dim, self.ty(parts[0]).rank(), false)?;
        self.cat_ids(&parts, items, axis, span)
    }

    /// The tensors of a non-empty list argument of `op`.
    fn list_parts(&mut self, op: &str, items: &[Expr], span: Span) -> Option<Vec<ValueId>> {
        let mut parts = Vec::new();
        for e in items {
            parts.push(self.tensor_arg(e, &format!("a part of `{op}`")));
        }
        let parts: Vec<ValueId> = parts.into_iter().collect::<Option<_>>()?;
        if parts.is_empty() {
            self.error(Code::E0208, span, format!("`{op}` of an empty list"));
            return None;
        }
        Some(parts)
    }

    /// `parts` joined along `axis`, each written by `items`.
    fn cat_ids(&mut self, parts: &[ValueId], items: &[Expr], axis: usize, span: Span) -> Option<Value> {
        let t = self.ty(parts[0]).clone();
        let shapes: Vec<&[Poly]> = parts.iter().map(|&p| self.ty(p).shape.as_slice()).collect();
        let shape = match shape::cat(&self.prog.dims, axis, &shapes) {
            Ok(shape) => shape,
            Err(CatError::Part(i)) => {
                let msg = format!(
                    "`cat` along axis {axis} of {} and {}: the other axes differ",
                    self.shape_text(&t.shape),
                    self.shape_text(shapes[i])
                );
                self.error(Code::E0201, items[i].span, msg);
                return None;
            }
            Err(CatError::Axis) => unreachable!("`axis` is an axis of the first part"),
        };
        let types: Vec<&TensorType> = parts.iter().map(|&p| self.ty(p)).collect();
        let known: Vec<bool> = parts
            .iter()
            .map(|&p| layout::strides_known_at_ones(&self.prog, p))
            .collect();
        let ty = layout::joined(&self.prog.dims, &types, &known, &shape).with(shape, t.dtype);
        Some(self.push(Op::Cat(axis), parts.to_vec(), ty, span))
    }

    /// `stack(tensors, dim)`: a `for` sequence, or a list of tensors of one shape joined
    /// along a new axis `dim`: `cat` of each part unsqueezed at `dim` in the IR, laid out
    /// as ATen's `stack` lays it out ([`layout::stacked`]: `cat` along `dim` and a view that
    /// splits it, so 3-d parts never give a channels-last 4-d result).
    pub(crate) fn stack(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let (ExprKind::List(items) | ExprKind::Tuple(items)) = &args[0].kind else {
            return self.join("stack", args, span);
        };
        let parts = self.list_parts("stack", items, span)?;
        let t = self.ty(parts[0]).clone();
        for (&p, e) in parts.iter().zip(items).skip(1) {
            let s = self.ty(p).shape.clone();
            if !shape::same_shape(&self.prog.dims, &s, &t.shape) {
                let msg = format!(
                    "`stack` of {} and {}: every part has one shape",
                    self.shape_text(&t.shape),
                    self.shape_text(&s)
                );
                self.error(Code::E0201, e.span, msg);
                return None;
            }
        }
        let axis = self.axis(args[1], t.rank(), true)?;
        let mut unsqueezed = Vec::new();
        for &p in &parts {
            let out = layout::unsqueezed(&self.prog.dims, self.ty(p), axis);
            match self.push(Op::Unsqueeze(axis), vec![p], out, span) {
                Value::Tensor(id) => unsqueezed.push(id),
                _ => unreachable!("push makes a tensor"),
            }
        }
        let joined = self.cat_ids(&unsqueezed, items, axis, span)?;
        if let Value::Tensor(id) = joined {
            let types: Vec<&TensorType> = parts.iter().map(|&p| self.ty(p)).collect();
            let known: Vec<bool> = parts
                .iter()
                .map(|&p| layout::strides_known_at_ones(&self.prog, p))
                .collect();
            let shape = self.ty(id).shape.clone();
            let laid = layout::stacked(&self.prog.dims, &types, &known, axis, &shape);
            self.prog.nodes[id].ty = crate::ir::Type::Tensor(laid.with(shape, t.dtype));
        }
        Some(joined)
    }

    /// `concat(seq, d)` and `stack(seq, d)` over the items of a `for`.
    fn join(&mut self, name: &str, args: &[&Expr], span: Span) -> Option<Value> {
        let seq = match self.expr(args[0]) {
            Value::Seq(id) => id,
            Value::Error => return None,
            other => {
                let msg = format!(
                    "`{name}` needs a sequence (a `for` expression), found a {}",
                    other.kind_name()
                );
                self.error(Code::E0208, args[0].span, msg);
                return None;
            }
        };
        let crate::ir::Type::Seq { item, len } = self.prog.nodes[seq].ty.clone() else {
            unreachable!("a Seq value is a For node")
        };
        let stack = name == "stack";
        let d = self.axis(args[1], item.rank(), stack)?;
        let shape = shape::joined(&self.prog.dims, &item.shape, &len, d, stack)
            .expect("`axis` checked `d` against the item's rank");
        let op = if stack { Op::Stack(d) } else { Op::CatLoop(d) };
        let known = [layout::strides_known_at_ones(&self.prog, seq)];
        let laid = match stack {
            true => layout::stacked(&self.prog.dims, &[&item], &known, d, &shape),
            false => layout::joined(&self.prog.dims, &[&item], &known, &shape),
        };
        let ty = laid.with(shape, item.dtype);
        Some(self.push(op, vec![seq], ty, span))
    }
}
