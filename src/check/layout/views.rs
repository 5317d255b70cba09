//! Views: where a `view` is legal (PyTorch's chunk rule, at every size and where some
//! dims are 1) and the strides it gives.

use super::*;

/// The strides of `x.view(shape)` where it succeeds for some sizes only, other than the
/// copy's on the axes not of size 1. Tried with each combination of free dims at 1 and the
/// others at 2 or more, where two axes that are apart in memory must stay apart for every
/// such size (in `z[:, :4]` of `z: [A, N]` they meet at `N = 4`) and the view must fail
/// or have strides for all those sizes (it may succeed where sizes coincide: see
/// `may_view`); an axis whose size may be 1 otherwise (`N - 1`) is not decided. `None`
/// where it cannot be decided.
pub(super) fn views_where_dims_are_one(
    dims: &DimTable,
    x: &TensorType,
    shape: &[Poly],
) -> Option<Vec<Vec<Poly>>> {
    let free = free_dims(dims, x.shape.iter().chain(&x.strides).chain(shape));
    let mut sets = subsets(&free);
    sets.push(Vec::new());
    let mut views = Vec::new();
    for ones in &sets {
        let shift = |p: &Poly, by: i64| with_ones(p, ones, &free, by);
        let subs = |ps: &[Poly]| ps.iter().map(|p| shift(p, 1)).collect::<Vec<_>>();
        let at = TensorType {
            shape: subs(&x.shape),
            strides: subs(&x.strides),
            ..x.clone()
        };
        let new_shape = subs(shape);
        let sized = at.shape.iter().all(|d| dims.is_one(d) || dims.never_one(d));
        if !sized || chunks_may_meet(dims, &at) {
            return None;
        }
        let copy = row_major_strides(&new_shape);
        match view_strides(dims, &at, &new_shape) {
            Some(view) => {
                let row_major = (0..new_shape.len())
                    .all(|i| dims.is_one(&new_shape[i]) || dims.equal(&view[i], &copy[i]));
                if !row_major {
                    views.push(view.iter().map(|p| shift(p, -1)).collect());
                }
            }
            // A view where sizes coincide (`[4, N]` in memory order `[N, 4]`, viewed as
            // `[N, 4]` at `N = 4`) could have any strides.
            None if may_view(dims, &chunk_sizes(dims, &at), &new_shape) => return None,
            None => {}
        }
    }
    Some(views)
}

/// The products of the chunks of `t` (runs of axes adjacent in memory), innermost first.
fn chunk_sizes(dims: &DimTable, t: &TensorType) -> Vec<Poly> {
    let axes: Vec<usize> = (0..t.rank()).filter(|&a| !dims.is_one(&t.shape[a])).collect();
    let mut chunks = Vec::new();
    let mut product = Poly::int(1);
    for (k, &a) in axes.iter().enumerate().rev() {
        product = product.mul(&t.shape[a]);
        let ends = k == 0 || {
            let prev = axes[k - 1];
            !dims.equal(&t.strides[prev], &t.shape[a].mul(&t.strides[a]))
        };
        if ends {
            chunks.push(std::mem::replace(&mut product, Poly::int(1)));
        }
    }
    chunks
}

/// Whether the sizes `new` can meet the `chunks` (innermost first) for some sizes: each
/// chunk's product equal to a run of new sizes, taken from the right.
fn may_view(dims: &DimTable, chunks: &[Poly], new: &[Poly]) -> bool {
    let new: Vec<&Poly> = new.iter().rev().filter(|d| !dims.is_one(d)).collect();
    fn runs(dims: &DimTable, chunks: &[Poly], new: &[&Poly]) -> bool {
        let Some((chunk, rest)) = chunks.split_first() else {
            return new.is_empty();
        };
        let mut product = Poly::int(1);
        (0..new.len()).any(|k| {
            product = product.mul(new[k]);
            let apart =
                dims.provably_positive(&product.sub(chunk)) || dims.provably_positive(&chunk.sub(&product));
            !apart && runs(dims, rest, &new[k + 1..])
        })
    }
    runs(dims, chunks, &new)
}

/// Whether two neighbouring axes (not of size 1) that are apart in memory in general meet,
/// `stride[i] == size[j] * stride[j]`, for some sizes.
fn chunks_may_meet(dims: &DimTable, t: &TensorType) -> bool {
    let axes: Vec<usize> = (0..t.rank()).filter(|&a| !dims.is_one(&t.shape[a])).collect();
    axes.windows(2).any(|w| {
        let gap = t.strides[w[0]].sub(&t.shape[w[1]].mul(&t.strides[w[1]]));
        !dims.with_consts(&gap).is_zero()
            && !dims.provably_positive(&gap)
            && !dims.provably_positive(&gap.neg())
    })
}

/// `x.view(new_shape)`, on each of the strides `x` may have, or `None` where PyTorch's
/// `view` would refuse on one of them for some value of the free dims. The caller has
/// already proved that the element counts are equal.
pub fn view(dims: &DimTable, x: &TensorType, new_shape: &[Poly]) -> Option<Layout> {
    match x.layouts() {
        Some(all) => {
            let views: Option<Vec<Vec<Poly>>> = all
                .iter()
                .map(|s| view_strides(dims, &x.exact(s), new_shape))
                .collect();
            Some(Layout::one_of(dims, views?))
        }
        None => view_strides(dims, x, new_shape).map(Layout::any),
    }
}

/// The strides of `x.view(new_shape)`, or `None` where PyTorch's `view` would refuse for
/// some value of the free dims. This is ATen's `computeStride`, run on normal forms; where
/// `x`'s strides vary, no two axes are known to share a chunk ([`view`] tries each of
/// them instead). The caller has already proved that the element counts are equal.
pub fn view_strides(dims: &DimTable, old: &TensorType, new_shape: &[Poly]) -> Option<Vec<Poly>> {
    let (old_shape, old_strides) = (&old.shape, &old.strides);
    let mut new_strides = vec![Poly::int(1); new_shape.len()];
    if old_shape.is_empty() {
        // A scalar views as any all-ones shape; the count check made sure that is what it is.
        return Some(row_major_strides(new_shape));
    }
    if old_shape.iter().any(|n| dims.equal(n, &Poly::int(0))) {
        // No elements: PyTorch views it as any shape of the same count ("stride is arbitrary
        // in the numel() == 0 case" in ATen's computeStride), keeping the strides where the
        // shape stays, else those of a fresh tensor.
        let same = old_shape.len() == new_shape.len()
            && old_shape.iter().zip(new_shape).all(|(a, b)| dims.equal(a, b));
        return Some(match same {
            true => old_strides.clone(),
            false => row_major_strides(new_shape),
        });
    }
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = old_strides[old_shape.len() - 1].clone();
    let mut tensor_numel = Poly::int(1);
    let mut view_numel = Poly::int(1);
    for tensor_d in (0..old_shape.len()).rev() {
        tensor_numel = tensor_numel.mul(&old_shape[tensor_d]);
        let chunk_ends = tensor_d == 0 || {
            let prev = tensor_d - 1;
            !dims.is_one(&old_shape[prev])
                && (old.varies() || !dims.equal(&old_strides[prev], &tensor_numel.mul(&chunk_base_stride)))
        };
        if !chunk_ends {
            continue;
        }
        while view_d >= 0 {
            let size = &new_shape[view_d as usize];
            if dims.equal(&view_numel, &tensor_numel) && !dims.is_one(size) {
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
