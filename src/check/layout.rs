//! Strides: which views are legal, and which layout each op's result has.
//!
//! All decisions hold for every value of the free dims: two axes belong to one chunk only
//! when PyTorch's stride equation holds as an identity of dim expressions, and an axis counts
//! as size 1 only when its size is the constant 1 (see `shared/notes/VIEW.md`).

use crate::dims::{DimTable, Poly};
use crate::ir::{row_major_strides, TensorType};

/// The strides of `x.view(new_shape)`, or `None` where PyTorch's `view` would refuse for
/// some value of the free dims. This is ATen's `computeStride`, run on normal forms.
/// The caller has already proved that the element counts are equal.
pub fn view_strides(dims: &DimTable, old: &TensorType, new_shape: &[Poly]) -> Option<Vec<Poly>> {
    let (old_shape, old_strides) = (&old.shape, &old.strides);
    let mut new_strides = vec![Poly::int(1); new_shape.len()];
    if old_shape.is_empty() {
        // A scalar views as any all-ones shape; the count check made sure that is what it is.
        return Some(row_major_strides(new_shape));
    }
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = old_strides[old_shape.len() - 1].clone();
    let mut tensor_numel = Poly::int(1);
    let mut view_numel = Poly::int(1);
    for tensor_d in (0..old_shape.len()).rev() {
        tensor_numel = tensor_numel.mul(&old_shape[tensor_d]);
        let chunk_ends = tensor_d == 0 || {
            let prev = tensor_d - 1;
            !old_shape[prev].is_one()
                && !dims.equal(&old_strides[prev], &tensor_numel.mul(&chunk_base_stride))
        };
        if !chunk_ends {
            continue;
        }
        while view_d >= 0 {
            let size = &new_shape[view_d as usize];
            if dims.equal(&view_numel, &tensor_numel) && !size.is_one() {
                break;
            }
            new_strides[view_d as usize] = view_numel.mul(&chunk_base_stride);
            view_numel = view_numel.mul(size);
            view_d -= 1;
            // A partial product that does not divide the chunk can never meet it exactly.
            if dims.div(&tensor_numel, &view_numel).is_err() {
                return None;
            }
        }
        if !dims.equal(&view_numel, &tensor_numel) {
            return None;
        }
        if tensor_d > 0 {
            chunk_base_stride = old_strides[tensor_d - 1].clone();
            tensor_numel = Poly::int(1);
            view_numel = Poly::int(1);
        }
    }
    (view_d == -1).then_some(new_strides)
}

/// The axes of `t` from the outermost to the innermost in memory, when `t` is dense (its
/// strides are a permutation of a row-major layout); `None` otherwise.
fn dense_order(dims: &DimTable, t: &TensorType) -> Option<Vec<usize>> {
    let axes: Vec<usize> = (0..t.rank()).filter(|&a| !t.shape[a].is_one()).collect();
    let mut order = Vec::with_capacity(axes.len());
    let mut expected = Poly::int(1);
    while order.len() < axes.len() {
        let next = axes
            .iter()
            .copied()
            .find(|a| !order.contains(a) && dims.equal(&t.strides[*a], &expected))?;
        expected = expected.mul(&t.shape[next]);
        order.push(next);
    }
    order.reverse();
    Some(order)
}

/// The strides of an elementwise result of shape `shape` whose operand `like` has the same
/// shape: PyTorch keeps a dense operand's memory order (so `x.transpose(1, 2) * 2` is still
/// transposed), and makes anything else row-major.
pub fn elementwise_strides(dims: &DimTable, like: Option<&TensorType>, shape: &[Poly]) -> Vec<Poly> {
    let Some(like) = like else {
        return row_major_strides(shape);
    };
    let same_shape =
        like.rank() == shape.len() && like.shape.iter().zip(shape).all(|(a, b)| dims.equal(a, b));
    let order = same_shape.then(|| dense_order(dims, like)).flatten();
    let Some(order) = order else {
        return row_major_strides(shape);
    };
    let mut strides = like.strides.clone();
    let mut acc = Poly::int(1);
    for &a in order.iter().rev() {
        strides[a] = acc.clone();
        acc = acc.mul(&shape[a]);
    }
    strides
}

#[cfg(test)]
mod tests;
