//! The shape rules of the ops, written once: pure functions from the operands' shapes to
//! the result's shape, or a typed error that says what does not fit.
//!
//! The checker turns the errors into diagnostics (it alone knows spans and how to print a
//! dim); the optimizer's e-class analysis calls the same rules on symbolic shapes to
//! refuse a rewrite that would change one; lowering calls them on concrete sizes. What a
//! rule may assume about sizes is a [`Sizes`]: the checker's [`DimTable`] proves equalities
//! for every value of the free dims, the analysis proves them for hand-written terms too,
//! and [`Concrete`] compares numbers.
//!
//! The reference interpreter keeps its own concrete broadcasting (`runtime::tensor`) on
//! purpose: it is the oracle the compiled code is tested against, so it shares no rule
//! with the compiler.

use crate::dims::{DimTable, Poly};

/// What a shape rule needs to know of sizes: which two are equal and which are 1, for
/// every value of the free dims; and how to make one from others.
pub trait Sizes {
    type Size: Clone;

    /// Whether `a == b` for every value of the free dims.
    fn same(&self, a: &Self::Size, b: &Self::Size) -> bool;

    /// Whether `a` is 1 for every value of the free dims.
    fn is_one(&self, a: &Self::Size) -> bool;

    /// Whether `a` is 1 for no value of the free dims.
    fn never_one(&self, a: &Self::Size) -> bool;

    fn one(&self) -> Self::Size;

    fn add(&self, a: &Self::Size, b: &Self::Size) -> Self::Size;

    fn mul(&self, a: &Self::Size, b: &Self::Size) -> Self::Size;
}

impl Sizes for DimTable {
    type Size = Poly;

    fn same(&self, a: &Poly, b: &Poly) -> bool {
        self.equal(a, b)
    }

    fn is_one(&self, a: &Poly) -> bool {
        DimTable::is_one(self, a)
    }

    fn never_one(&self, a: &Poly) -> bool {
        DimTable::never_one(self, a)
    }

    fn one(&self) -> Poly {
        Poly::int(1)
    }

    fn add(&self, a: &Poly, b: &Poly) -> Poly {
        a.add(b)
    }

    fn mul(&self, a: &Poly, b: &Poly) -> Poly {
        a.mul(b)
    }
}

/// Sizes that are numbers: one set of dims, as lowering sees it.
pub struct Concrete;

impl Sizes for Concrete {
    type Size = usize;

    fn same(&self, a: &usize, b: &usize) -> bool {
        a == b
    }

    fn is_one(&self, a: &usize) -> bool {
        *a == 1
    }

    fn never_one(&self, a: &usize) -> bool {
        *a != 1
    }

    fn one(&self) -> usize {
        1
    }

    fn add(&self, a: &usize, b: &usize) -> usize {
        a + b
    }

    fn mul(&self, a: &usize, b: &usize) -> usize {
        a * b
    }
}

/// Two sizes that meet on `axis` of a result and neither fit the other.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch<S> {
    pub axis: usize,
    pub left: S,
    pub right: S,
}

/// Whether an axis of size `from` broadcasts to `to`: equal, or provably 1.
pub fn broadcasts_to<Z: Sizes + ?Sized>(z: &Z, from: &Z::Size, to: &Z::Size) -> bool {
    z.is_one(from) || z.same(from, to)
}

/// PyTorch broadcasting: axes aligned from the right, each pair equal or one of them 1.
pub fn broadcast<Z: Sizes + ?Sized>(
    z: &Z,
    a: &[Z::Size],
    b: &[Z::Size],
) -> Result<Vec<Z::Size>, Mismatch<Z::Size>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = (i + a.len()).checked_sub(n).map(|j| &a[j]);
            let db = (i + b.len()).checked_sub(n).map(|j| &b[j]);
            match (da, db) {
                (Some(p), None) | (None, Some(p)) => Ok(p.clone()),
                (Some(p), Some(q)) if broadcasts_to(z, q, p) => Ok(p.clone()),
                (Some(p), Some(q)) if broadcasts_to(z, p, q) => Ok(q.clone()),
                (Some(p), Some(q)) => Err(Mismatch {
                    axis: i,
                    left: p.clone(),
                    right: q.clone(),
                }),
                (None, None) => unreachable!("i < n"),
            }
        })
        .collect()
}

/// Why two operands do not multiply.
#[derive(Clone, Debug, PartialEq)]
pub enum MatmulError<S> {
    /// One is rank 0.
    Scalar,
    /// The left's last axis and the right's second-to-last differ.
    Inner { left: S, right: S },
    /// The batch axes do not broadcast.
    Batch(Mismatch<S>),
}

/// The shape of `torch.matmul(a, b)`: a vector is promoted to a matrix and its axis
/// dropped again, batch axes broadcast.
pub fn matmul<Z: Sizes + ?Sized>(
    z: &Z,
    a: &[Z::Size],
    b: &[Z::Size],
) -> Result<Vec<Z::Size>, MatmulError<Z::Size>> {
    if a.is_empty() || b.is_empty() {
        return Err(MatmulError::Scalar);
    }
    let pa = match a {
        [k] => vec![z.one(), k.clone()],
        _ => a.to_vec(),
    };
    let pb = match b {
        [k] => vec![k.clone(), z.one()],
        _ => b.to_vec(),
    };
    let (ra, rb) = (pa.len(), pb.len());
    let (k1, k2) = (&pa[ra - 1], &pb[rb - 2]);
    if !z.same(k1, k2) {
        return Err(MatmulError::Inner {
            left: k1.clone(),
            right: k2.clone(),
        });
    }
    let mut shape = broadcast(z, &pa[..ra - 2], &pb[..rb - 2]).map_err(MatmulError::Batch)?;
    if a.len() > 1 {
        shape.push(pa[ra - 2].clone());
    }
    if b.len() > 1 {
        shape.push(pb[rb - 1].clone());
    }
    Ok(shape)
}

/// The shape of a GEMM of `a` and `b` (rank 2 or more; `None` otherwise), each transposed
/// in its last two axes where its flag says so.
pub fn gemm<Z: Sizes + ?Sized>(
    z: &Z,
    a: &[Z::Size],
    b: &[Z::Size],
    ta: bool,
    tb: bool,
) -> Option<Vec<Z::Size>> {
    let flip = |s: &[Z::Size], t: bool| {
        let mut s = s.to_vec();
        let r = s.len();
        if t {
            s.swap(r - 2, r - 1);
        }
        s
    };
    (a.len() >= 2 && b.len() >= 2).then_some(())?;
    matmul(z, &flip(a, ta), &flip(b, tb)).ok()
}

/// Why `linear(x, w, b)` does not fit.
#[derive(Clone, Debug, PartialEq)]
pub enum LinearError {
    /// The weight is not `[out, in]`.
    WeightRank,
    /// The input is rank 0.
    ScalarInput,
    /// The input's last axis is not the weight's `in`.
    Features,
    /// The bias is not `[out]`.
    Bias,
}

/// The shape of `linear(x, w, b)`: `x`'s axes with the last (`in`) replaced by `w`'s
/// `out`, for a weight `[out, in]` in PyTorch's layout and a bias `[out]`.
pub fn linear<Z: Sizes + ?Sized>(
    z: &Z,
    x: &[Z::Size],
    w: &[Z::Size],
    bias: Option<&[Z::Size]>,
) -> Result<Vec<Z::Size>, LinearError> {
    let [out, inner] = w else {
        return Err(LinearError::WeightRank);
    };
    let Some((features, lead)) = x.split_last() else {
        return Err(LinearError::ScalarInput);
    };
    if !z.same(features, inner) {
        return Err(LinearError::Features);
    }
    if let Some(b) = bias {
        if !matches!(b, [n] if z.same(n, out)) {
            return Err(LinearError::Bias);
        }
    }
    Ok([lead, std::slice::from_ref(out)].concat())
}

/// Why `cat(parts, axis)` does not fit.
#[derive(Clone, Debug, PartialEq)]
pub enum CatError {
    /// There are no parts, or `axis` is not an axis of the first.
    Axis,
    /// Part `i` (from 0) differs from the first in rank or on an axis but `axis`.
    Part(usize),
}

/// The shape of `cat(parts, axis)`: the parts agree on every axis but `axis`, along which
/// their sizes add up.
pub fn cat<Z: Sizes + ?Sized>(z: &Z, axis: usize, parts: &[&[Z::Size]]) -> Result<Vec<Z::Size>, CatError> {
    let first = parts.first().ok_or(CatError::Axis)?;
    (axis < first.len()).then_some(()).ok_or(CatError::Axis)?;
    let mut shape = first.to_vec();
    for (i, s) in parts.iter().enumerate().skip(1) {
        let fits = s.len() == first.len() && (0..s.len()).all(|j| j == axis || z.same(&s[j], &first[j]));
        if !fits {
            return Err(CatError::Part(i));
        }
        shape[axis] = z.add(&shape[axis], &s[axis]);
    }
    Ok(shape)
}

/// The shape of a `for`'s `len` items of shape `item` joined along `axis`: `concat`
/// multiplies that axis by `len`, `stack` inserts a new axis of `len` there. `None` when
/// `axis` is out of range.
pub fn joined<Z: Sizes + ?Sized>(
    z: &Z,
    item: &[Z::Size],
    len: &Z::Size,
    axis: usize,
    stack: bool,
) -> Option<Vec<Z::Size>> {
    let mut shape = item.to_vec();
    match stack {
        true => (axis <= shape.len()).then(|| shape.insert(axis, len.clone()))?,
        false => shape[axis] = z.mul(shape.get(axis)?, len),
    }
    Some(shape)
}

/// The number of elements of a shape: the product of its sizes.
pub fn numel<Z: Sizes + ?Sized>(z: &Z, shape: &[Z::Size]) -> Z::Size {
    shape.iter().fold(z.one(), |acc, d| z.mul(&acc, d))
}

/// Whether a `view` or `reshape` from one shape to the other keeps the element count.
pub fn keeps_count<Z: Sizes + ?Sized>(z: &Z, from: &[Z::Size], to: &[Z::Size]) -> bool {
    z.same(&numel(z, from), &numel(z, to))
}

/// Whether two shapes are the same: one rank, each size equal.
pub fn same_shape<Z: Sizes + ?Sized>(z: &Z, a: &[Z::Size], b: &[Z::Size]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| z.same(x, y))
}

/// The shape of a slice of `axis` (with a step or without) whose length is `len`: `None`
/// when there is no such axis.
pub fn sliced<S: Clone>(shape: &[S], axis: usize, len: S) -> Option<Vec<S>> {
    let mut shape = shape.to_vec();
    *shape.get_mut(axis)? = len;
    Some(shape)
}

/// The shape with `axis` dropped (`x[.., i, ..]`, a `squeeze`); `None` when there is no
/// such axis.
pub fn dropped<S: Clone>(shape: &[S], axis: usize) -> Option<Vec<S>> {
    (axis < shape.len()).then_some(())?;
    let mut shape = shape.to_vec();
    shape.remove(axis);
    Some(shape)
}

/// Whether `squeeze` drops an axis of this size: where it is provably 1, and not where it
/// is provably never 1; `None` where it is 1 only for some values of the free dims (the
/// result's rank would depend on them).
pub fn squeezes<Z: Sizes + ?Sized>(z: &Z, size: &Z::Size) -> Option<bool> {
    match (z.is_one(size), z.never_one(size)) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    }
}

/// The batch axes of an attention's key or value `[.., Hk, S, E]` as its query
/// `[.., Hq, L, E]` reads them: as they are, or with grouped-query attention (`gqa`), with
/// the query's heads in place of the key's. `None` with `gqa` where one has no heads.
pub fn read_heads<S: Clone>(q: &[S], x: &[S], gqa: bool) -> Option<Vec<S>> {
    let mut batch = x.get(..x.len().checked_sub(2)?)?.to_vec();
    if gqa {
        *batch.last_mut()? = q.get(q.len().checked_sub(3)?)?.clone();
    }
    Some(batch)
}

/// `axes` when they are a permutation of `0..rank`, each once.
pub fn is_permutation(axes: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    for &a in axes {
        if a >= rank || std::mem::replace(&mut seen[a], true) {
            return false;
        }
    }
    axes.len() == rank
}

/// The shape with its axes in the order `axes` names (a permutation, see
/// [`is_permutation`]).
pub fn permuted<S: Clone>(shape: &[S], axes: &[usize]) -> Vec<S> {
    axes.iter().map(|&a| shape[a].clone()).collect()
}

/// The shape with axes `a` and `b` swapped; `None` when either is out of range.
pub fn transposed<S: Clone>(shape: &[S], a: usize, b: usize) -> Option<Vec<S>> {
    (a < shape.len() && b < shape.len()).then_some(())?;
    let mut shape = shape.to_vec();
    shape.swap(a, b);
    Some(shape)
}

/// The shape with a new axis of size 1 at `axis`; `None` past the end.
pub fn unsqueezed<Z: Sizes + ?Sized>(z: &Z, shape: &[Z::Size], axis: usize) -> Option<Vec<Z::Size>> {
    (axis <= shape.len()).then_some(())?;
    let mut shape = shape.to_vec();
    shape.insert(axis, z.one());
    Some(shape)
}

/// The shape of a reduction over `axes`: each kept as 1 with `keepdim`, dropped without.
pub fn reduced<Z: Sizes + ?Sized>(z: &Z, shape: &[Z::Size], axes: &[usize], keepdim: bool) -> Vec<Z::Size> {
    (0..shape.len())
        .filter_map(|a| match (axes.contains(&a), keepdim) {
            (false, _) => Some(shape[a].clone()),
            (true, true) => Some(z.one()),
            (true, false) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
