//! Sizes taken one by one: each free dim at 1, at 2, or at 3 and above, so that a size
//! such as `N - 1` is empty, 1, or at least 2 in each scenario, and an elementwise order
//! followed there on every axis, those of size 1 included.
//!
//! The size-1 scenarios of `layout.rs` set free dims to 1 and keep the others at 2 or
//! more; a slice's size `N - 1` is then still 1 or more, and its axis is followed both
//! ways without knowing which `N` made it 1. Here it is decided by `N` itself.

use super::*;
use crate::dims::Context;

/// The scenarios of the free dims `free`: every assignment of 1, 2, or `s + 2` (at least
/// 3) to each, which together cover every size. `None` beyond
/// [`ONES_TRIED_EXHAUSTIVELY`] free dims.
pub(super) fn scenarios(free: &[Sym]) -> Option<Vec<Vec<Poly>>> {
    if free.len() > ONES_TRIED_EXHAUSTIVELY {
        return None;
    }
    let mut all = vec![Vec::new()];
    for &s in free {
        let values = [Poly::int(1), Poly::int(2), Poly::sym(s).add(&Poly::int(2))];
        all = all
            .into_iter()
            .flat_map(|values_so_far: Vec<Poly>| {
                values.iter().map(move |v| {
                    let mut next = values_so_far.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect();
    }
    Some(all)
}

/// `p` in the scenario giving `free[i]` the value `values[i]`.
pub(super) fn at_scenario(p: &Poly, free: &[Sym], values: &[Poly]) -> Poly {
    p.substitute(&|s| free.iter().position(|&f| f == s).map(|i| values[i].clone()))
}

/// Whether TensorIterator gives the elementwise `result` of `operands` exactly
/// `result.strides` on every axis, those of size 1 included, at every size where it is not
/// empty. Each operand's strides must be PyTorch's on every axis (the caller knows it:
/// `ones::strides_known_at_ones`), so the insertion sort can be run as PyTorch runs it,
/// in each scenario of [`scenarios`], with every comparison decided there. `false`
/// where a comparison depends on sizes within a scenario, where a size is neither 1 nor
/// provably at least 2 there, where the fast path for operands of one shape may apply
/// with operands that are not contiguous, or beyond the free dims tried.
pub fn order_is_exact(dims: &DimTable, operands: &[&TensorType], result: &TensorType) -> bool {
    if result.varies() || operands.iter().any(|t| t.varies()) {
        return false;
    }
    let sizes = operands.iter().flat_map(|t| t.shape.iter().chain(&t.strides));
    let context = dims.context(sizes.chain(&result.shape).chain(&result.strides));
    let key = (
        operands.iter().map(|&t| t.clone()).collect(),
        result.clone(),
        context,
    );
    EXACT.get_or_prove(key, || sorted_as_given(dims, operands, result))
}

/// [`order_is_exact`]'s answers by the operands' and the result's types and what the table
/// knows of their dims: every layer of a loop asks it again of the same types (each of
/// SmolLM2's 30 layers, of each elementwise value, when the next op asks whether its
/// strides are known; a sixth of that model's compile before).
static EXACT: memo::Answers<(Vec<TensorType>, TensorType, Context), bool> = memo::Answers::new();

/// [`order_is_exact`] of operands and a result of one layout each, worked out.
fn sorted_as_given(dims: &DimTable, operands: &[&TensorType], result: &TensorType) -> bool {
    let sizes = operands.iter().flat_map(|t| t.shape.iter().chain(&t.strides));
    let free = free_dims(dims, sizes.chain(&result.shape).chain(&result.strides));
    let Some(scenarios) = scenarios(&free) else {
        return false;
    };
    scenarios.iter().all(|values| {
        let at = |ps: &[Poly]| -> Vec<Poly> { ps.iter().map(|p| at_scenario(p, &free, values)).collect() };
        let shape = at(&result.shape);
        if shape.iter().any(|d| dims.with_consts(d).is_zero()) {
            return true;
        }
        let ops: Vec<TensorType> = operands
            .iter()
            .map(|t| TensorType {
                shape: at(&t.shape),
                strides: at(&t.strides),
                ..(*t).clone()
            })
            .collect();
        let sized = |d: &Poly| dims.is_one(d) || (dims.never_one(d) && dims.provably_positive(d));
        if !ops.iter().flat_map(|t| &t.shape).chain(&shape).all(sized) {
            return false;
        }
        let expected = at(&result.strides);
        match iterator_strides(dims, &ops, &shape) {
            Some(strides) => strides.iter().zip(&expected).all(|(a, b)| dims.equal(a, b)),
            None => false,
        }
    })
}

/// The strides TensorIterator gives a result of `shape` from `operands` at sizes where
/// each is 1 or at least 2, on every axis; `None` where a comparison is not decided or the
/// fast path may take the operands' strides.
fn iterator_strides(dims: &DimTable, operands: &[TensorType], shape: &[Poly]) -> Option<Vec<Poly>> {
    let same_shape = operands
        .iter()
        .all(|t| t.rank() == shape.len() && t.shape.iter().zip(shape).all(|(a, b)| dims.equal(a, b)));
    if same_shape {
        // `fast_set_up`: all contiguous gives the row-major formula; the other fast paths
        // keep an operand's strides, which are not followed here.
        let contiguous = operands.iter().all(|t| {
            let row_major = row_major_strides(&t.shape);
            (0..t.rank()).all(|i| dims.is_one(&t.shape[i]) || dims.equal(&t.strides[i], &row_major[i]))
        });
        return contiguous.then(|| row_major_strides(shape));
    }
    let strides: Vec<Vec<Option<Poly>>> = operands
        .iter()
        .map(|t| broadcast_strides(dims, t, shape))
        .collect();
    let mut perm: Vec<usize> = (0..shape.len()).rev().collect();
    for i in 1..perm.len() {
        let (mut dim1, mut left) = (i, i);
        while left > 0 {
            let dim0 = left - 1;
            let outcome = swaps(dims, &strides, shape, perm[dim0], perm[dim1])?;
            (dim1, left) = sort_step(outcome, &mut perm, dim0, dim1);
        }
    }
    Some(dense_in_order(shape, &perm))
}

/// TensorIterator's `should_swap(dim0, dim1)` where every comparison is decided: `Greater`
/// to swap, `Less` to stop, `Equal` when every operand abstains; `None` where a
/// comparison depends on the sizes.
fn swaps(
    dims: &DimTable,
    strides: &[Vec<Option<Poly>>],
    shape: &[Poly],
    dim0: usize,
    dim1: usize,
) -> Option<Ordering> {
    for s in strides {
        let (Some(s0), Some(s1)) = (&s[dim0], &s[dim1]) else {
            continue;
        };
        match strictly(dims, s0, s1)? {
            Ordering::Equal => {}
            decided => return Some(decided),
        }
        if strictly(dims, &shape[dim0], &shape[dim1])? == Ordering::Greater {
            return Some(Ordering::Greater);
        }
    }
    Some(Ordering::Equal)
}

/// The order of `a` and `b` where it is the same for every value of the free dims left,
/// equal included.
fn strictly(dims: &DimTable, a: &Poly, b: &Poly) -> Option<Ordering> {
    if dims.equal(a, b) {
        Some(Ordering::Equal)
    } else if dims.provably_positive(&b.sub(a)) {
        Some(Ordering::Less)
    } else if dims.provably_positive(&a.sub(b)) {
        Some(Ordering::Greater)
    } else {
        None
    }
}
