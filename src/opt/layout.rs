//! Strides of a chosen term: the checker's layout rules, applied to the optimizer's ops.
//!
//! E-classes are values without layouts; once extraction has picked a node for each class,
//! these rules give every value its strides, exactly as the checker would for the same
//! ops. The one place where a layout decides anything is `reshape`: it is a free `view`
//! where the operand's strides allow one, and a copy (`contiguous`, then `view`) otherwise.

use super::analysis::{perm_of, Ctx, Data, Kind};
use super::lang::Tensor;
use crate::check::layout::{self, Layout};
use crate::dims::{DimTable, Poly};
use crate::hash::HashMap;
use crate::ir::TensorType;
use std::cell::RefCell;

/// Elementwise layouts by operand types and result shape. Working one out proves the order
/// at every size (each combination of free dims at 1, each stride it cannot know): about
/// a millisecond for a 4-d `add`, where everything else extraction does for a node takes
/// microseconds. The same operands come back in many classes (every head's `rope`, the
/// alternatives of one value) and in both extractions (the source's cost, then the
/// cheapest program), so each is worked out once per e-graph.
#[derive(Debug, Default)]
pub struct Memo(RefCell<HashMap<Operands, Layout>>);

/// An elementwise op's operand types and result shape.
type Operands = (Vec<TensorType>, Vec<Poly>);

impl Memo {
    /// `layout::elementwise_order`, remembered.
    fn elementwise_order(&self, dims: &DimTable, operands: &[&TensorType], shape: &[Poly]) -> Layout {
        let key = (operands.iter().map(|&t| t.clone()).collect(), shape.to_vec());
        if let Some(laid) = self.0.borrow().get(&key) {
            return laid.clone();
        }
        let laid = layout::elementwise_order(dims, operands, shape);
        self.0.borrow_mut().insert(key, laid.clone());
        laid
    }
}

/// The type (with strides) of `node`'s value given its operands' types, and whether a
/// `reshape` has to copy. `attrs` are the children's data (for axes), `kids` their
/// types where they are tensors. `None` for attributes.
pub fn lay_out(
    ctx: &Ctx,
    node: &Tensor,
    data: &Data,
    attrs: &[&Data],
    kids: &[Option<&TensorType>],
) -> Option<(TensorType, bool)> {
    let (shape, dtype) = match &data.kind {
        Kind::Value(t) => (t.shape.clone(), t.dtype),
        // A loop's value is its items: their type is the item's.
        Kind::Seq { .. } => return kids.get(3).copied().flatten().map(|t| (t.clone(), false)),
        _ => return None,
    };
    let kid = |i: usize| kids.get(i).copied().flatten();
    let operands: Vec<&TensorType> = kids.iter().copied().flatten().collect();
    let (dims, memo) = (&ctx.dims, &ctx.layouts);
    let mut copies = false;
    let laid = match node {
        Tensor::Transpose(_) => {
            let (a, b) = (attrs.get(1)?.axis()?, attrs.get(2)?.axis()?);
            Layout::moved(dims, kid(0)?, |s| {
                let mut s = s.to_vec();
                s.swap(a, b);
                s
            })
        }
        Tensor::Permute(_) => {
            let x = kid(0)?;
            let axes = perm_of(attrs.get(1)?.shape_attr()?, x.rank())?;
            Layout::moved(dims, x, |s| axes.iter().map(|&a| s[a].clone()).collect())
        }
        Tensor::Reshape(_) => {
            // The optimized program commits to one outcome: a view, or a copy then a view.
            let x = kid(0)?;
            match layout::view(dims, x, &shape) {
                Some(laid) => laid,
                None => {
                    copies = true;
                    layout::fresh_row_major(dims, &operands, &shape)
                }
            }
        }
        Tensor::Expand(_) => layout::expand(dims, kid(0)?, &shape),
        Tensor::Unsqueeze(_) => strides_of(layout::unsqueezed(dims, kid(0)?, attrs.get(1)?.axis()?)),
        Tensor::Squeeze(_) => {
            let x = kid(0)?;
            match x.rank() == shape.len() {
                true => Layout::moved(dims, x, <[Poly]>::to_vec),
                false => strides_of(layout::without_axis(dims, x, attrs.get(1)?.axis()?)),
            }
        }
        Tensor::Slice(_) => Layout::moved(dims, kid(0)?, <[Poly]>::to_vec),
        Tensor::StepSlice(_) => {
            let (axis, step) = (attrs.get(1)?.axis()?, Poly::int(attrs.get(3)?.int()?));
            Layout::moved(dims, kid(0)?, |old| {
                let mut strides = old.to_vec();
                strides[axis] = strides[axis].mul(&step);
                strides
            })
        }
        Tensor::Select(_) => strides_of(layout::without_axis(dims, kid(0)?, attrs.get(1)?.axis()?)),
        // `mul(x, literal)` for `Scale`: the literal, of rank 0, decides nothing.
        Tensor::Unary(..) | Tensor::Scale(_) => {
            memo.elementwise_order(dims, &operands[..1.min(operands.len())], &shape)
        }
        Tensor::Where(_) => memo.elementwise_order(dims, &[kid(0)?, kid(1)?, kid(2)?], &shape),
        Tensor::Binary(..)
        | Tensor::Eq(_)
        | Tensor::Ne(_)
        | Tensor::Lt(_)
        | Tensor::Le(_)
        | Tensor::Gt(_)
        | Tensor::Ge(_) => memo.elementwise_order(dims, &[kid(0)?, kid(1)?], &shape),
        // Fresh results: parameters, inputs, constants, GEMMs, softmax, masked_fill, fused
        // ops, copies, joins.
        _ => layout::fresh_row_major(dims, &operands, &shape),
    };
    Some((laid.with(shape, dtype), copies))
}

/// The layout of a type a view op gave.
fn strides_of(t: TensorType) -> Layout {
    Layout {
        strides: t.strides,
        others: t.others,
    }
}
