//! Strides of a chosen term: the checker's layout rules, applied to the optimizer's ops.
//!
//! E-classes are values without layouts; once extraction has picked a node for each class,
//! these rules give every value its strides, exactly as the checker would for the same
//! ops. The one place where a layout decides anything is `reshape`: it is a free `view`
//! where the operand's strides allow one, and a copy (`contiguous`, then `view`) otherwise.

use super::analysis::{perm_of, Ctx, Data, Kind};
use super::lang::Tensor;
use crate::check::layout::{elementwise_strides, view_strides};
use crate::dims::Poly;
use crate::ir::{row_major_strides, TensorType};

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
    let rm = || row_major_strides(&shape);
    let kid = |i: usize| kids.get(i).copied().flatten();
    let like = |t: Option<&TensorType>| elementwise_strides(&ctx.dims, t, &shape);
    let mut copies = false;
    let strides = match node {
        Tensor::Transpose(_) => {
            let x = kid(0)?;
            let mut s = x.strides.clone();
            let (a, b) = (attrs.get(1)?.axis()?, attrs.get(2)?.axis()?);
            s.swap(a, b);
            s
        }
        Tensor::Permute(_) => {
            let x = kid(0)?;
            let axes = perm_of(attrs.get(1)?.shape_attr()?, x.rank())?;
            axes.iter().map(|&a| x.strides[a].clone()).collect()
        }
        Tensor::Reshape(_) => {
            let x = kid(0)?;
            match view_strides(&ctx.dims, x, &shape) {
                Some(s) => s,
                None => {
                    copies = true;
                    rm()
                }
            }
        }
        Tensor::Unsqueeze(_) => {
            let x = kid(0)?;
            let d = attrs.get(1)?.axis()?;
            let mut s = x.strides.clone();
            let stride = match d < x.rank() {
                true => x.strides[d].mul(&x.shape[d]),
                false => Poly::int(1),
            };
            s.insert(d, stride);
            s
        }
        Tensor::Squeeze(_) => {
            let x = kid(0)?;
            let mut s = x.strides.clone();
            if s.len() != shape.len() {
                s.remove(attrs.get(1)?.axis()?);
            }
            s
        }
        Tensor::Slice(_) => kid(0)?.strides.clone(),
        Tensor::Select(_) => {
            let mut s = kid(0)?.strides.clone();
            s.remove(attrs.get(1)?.axis()?);
            s
        }
        Tensor::Softmax(_) | Tensor::Unary(..) | Tensor::MaskedFill(_) => like(kid(0)),
        // Lowered as `mul(x, literal)`: like the operand of full rank, as the checker does.
        Tensor::Scale(_) => like(kid(0)),
        Tensor::Where(_)
        | Tensor::Binary(..)
        | Tensor::Eq(_)
        | Tensor::Ne(_)
        | Tensor::Lt(_)
        | Tensor::Le(_)
        | Tensor::Gt(_)
        | Tensor::Ge(_) => {
            let full = [kid(0), kid(1), kid(2)]
                .into_iter()
                .flatten()
                .find(|t| t.rank() == shape.len());
            like(full)
        }
        // Fresh results: parameters, inputs, constants, GEMMs, fused ops, copies, joins.
        _ => rm(),
    };
    Some((
        TensorType {
            shape,
            strides,
            dtype,
        },
        copies,
    ))
}
