//! Strides: which views are legal, and which layout each op's result has.
//!
//! Every op's result has the strides PyTorch gives it; `LAYOUT.md` beside this file states
//! each rule and the PyTorch behaviour it was established from. An op names its rule, one
//! of the [`Rule`] functions below; view ops (`transpose`, `view`, slices, ..) move the
//! operand's strides instead ([`Layout::moved`]).
//!
//! All decisions hold for every value of the free dims: two axes belong to one chunk only
//! when PyTorch's stride equation holds as an identity of dim expressions, and an axis counts
//! as size 1 only when it is 1 given the constant dims' values (see `shared/notes/VIEW.md`).
//! Where the layout depends on the sizes, a value carries every list of strides it may
//! have ([`OtherStrides`]): each op maps each of them, and a later `view` must be legal on
//! every one. Beyond [`LAYOUTS_KEPT`] of them, any strides are possible, and a `view` may
//! only split axes and add or drop axes of size 1.

use crate::dims::{Atom, DimKind, DimTable, Poly, Ratio, Sym};
use crate::ir::{row_major_strides, DType, OtherStrides, TensorType};
use std::cmp::Ordering;

mod channels_last;
mod exact;
mod memo;
mod ones;
mod views;

pub use channels_last::contiguous_as_suggested;
use channels_last::*;
pub use ones::strides_known_at_ones;
use views::*;
pub use views::{view, view_strides};

/// At most this many lists of strides are kept for one value; beyond it, any strides.
pub const LAYOUTS_KEPT: usize = 64;

/// A result's strides: the general case, and those other sizes give it.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub strides: Vec<Poly>,
    pub others: OtherStrides,
}

impl Layout {
    /// The tensor type of a result of `shape` laid out this way.
    pub fn with(self, shape: Vec<Poly>, dtype: DType) -> TensorType {
        TensorType {
            shape,
            strides: self.strides,
            dtype,
            others: self.others,
        }
    }

    fn exact(strides: Vec<Poly>) -> Layout {
        Layout {
            strides,
            others: OtherStrides::None,
        }
    }

    /// Strides known in general only: some sizes give any others.
    fn any(strides: Vec<Poly>) -> Layout {
        Layout {
            strides,
            others: OtherStrides::Any,
        }
    }

    /// One of `alternatives` (the general case first), each kept once; any strides beyond
    /// [`LAYOUTS_KEPT`].
    fn one_of(dims: &DimTable, alternatives: impl IntoIterator<Item = Vec<Poly>>) -> Layout {
        let mut kept: Vec<Vec<Poly>> = Vec::new();
        for strides in alternatives {
            let seen = kept
                .iter()
                .any(|k| k.iter().zip(&strides).all(|(a, b)| dims.equal(a, b)));
            if !seen {
                kept.push(strides);
            }
        }
        let general = kept.remove(0);
        match kept.len() {
            0 => Layout::exact(general),
            n if n < LAYOUTS_KEPT => Layout {
                strides: general,
                others: OtherStrides::Listed(kept),
            },
            _ => Layout::any(general),
        }
    }

    /// Any one of `layouts`, the first one's general case first.
    fn union(dims: &DimTable, layouts: impl IntoIterator<Item = Layout>) -> Layout {
        let mut all = Vec::new();
        let mut any = false;
        for laid in layouts {
            all.push(laid.strides);
            match laid.others {
                OtherStrides::None => {}
                OtherStrides::Listed(others) => all.extend(others),
                OtherStrides::Any => any = true,
            }
        }
        match any {
            true => Layout::any(all.swap_remove(0)),
            false => Layout::one_of(dims, all),
        }
    }

    /// `x`'s strides moved by a view op, each of them: `moved` gives the result's strides
    /// from one list of `x`'s.
    pub fn moved(dims: &DimTable, x: &TensorType, moved: impl Fn(&[Poly]) -> Vec<Poly>) -> Layout {
        match x.layouts() {
            Some(all) => Layout::one_of(dims, all.into_iter().map(moved)),
            None => Layout::any(moved(&x.strides)),
        }
    }
}

/// A layout rule: the layout of an op's result of `shape`, from its tensor operands in
/// PyTorch's argument order. An op's entry names one of the functions of this type.
pub type Rule = fn(&DimTable, &[&TensorType], &[Poly]) -> Layout;

/// A fresh row-major result (`contiguous`, `softmax`, `log_softmax`, `masked_fill`,
/// `tril`, `triu`, `layer_norm`, reductions, `matmul`, `linear`, `repeat_interleave`,
/// creation ops): PyTorch allocates it with `at::empty(shape)` or a contiguous clone.
pub fn fresh_row_major(_: &DimTable, _: &[&TensorType], shape: &[Poly]) -> Layout {
    Layout::exact(row_major_strides(shape))
}

/// `contiguous()`: the operand itself where it is contiguous for every size and in each of
/// its layouts (keeping the strides of its axes of size 1, which a later elementwise order
/// can depend on), else a row-major copy, which is what PyTorch's is wherever it copies.
pub fn contiguous(dims: &DimTable, operands: &[&TensorType], shape: &[Poly]) -> Layout {
    match operands.first() {
        Some(x) if x.is_contiguous(dims) => Layout::moved(dims, x, <[Poly]>::to_vec),
        _ => Layout::exact(row_major_strides(shape)),
    }
}

/// `rule` on every combination of the operands' possible strides, which `rule` then sees
/// as exact; every result is possible. Any strides where an operand may have any, or
/// beyond [`LAYOUTS_KEPT`] combinations.
fn each_combination(
    dims: &DimTable,
    operands: &[&TensorType],
    shape: &[Poly],
    rule: impl Fn(&DimTable, &[&TensorType], &[Poly]) -> Layout,
) -> Layout {
    if operands.iter().all(|t| !t.varies()) {
        return rule(dims, operands, shape);
    }
    let per: Option<Vec<Vec<&[Poly]>>> = operands.iter().map(|t| t.layouts()).collect();
    let count = per.as_ref().map_or(usize::MAX, |per| {
        per.iter().fold(1usize, |n, ls| n.saturating_mul(ls.len()))
    });
    let Some(per) = per.filter(|_| count <= LAYOUTS_KEPT) else {
        let general: Vec<TensorType> = operands.iter().map(|t| t.exact(&t.strides)).collect();
        let general: Vec<&TensorType> = general.iter().collect();
        return Layout::any(rule(dims, &general, shape).strides);
    };
    // Combination `k` takes its digits, in the mixed radix of the counts, as choices.
    let combination = |mut k: usize| -> Vec<TensorType> {
        operands
            .iter()
            .zip(&per)
            .map(|(t, layouts)| {
                let strides = layouts[k % layouts.len()];
                k /= layouts.len();
                t.exact(strides)
            })
            .collect()
    };
    Layout::union(
        dims,
        (0..count).map(|k| {
            let types = combination(k);
            rule(dims, &types.iter().collect::<Vec<_>>(), shape)
        }),
    )
}

/// An elementwise result (arithmetic, comparisons, unary functions, `where`, `clamp`,
/// `pow`, `maximum`): dense, in the order TensorIterator gives its axes from the operands'
/// strides, broadcast operands included (`reorder_dimensions` in ATen's
/// `TensorIterator.cpp`). Operands of rank 0 never decide anything.
pub fn elementwise_order(dims: &DimTable, operands: &[&TensorType], shape: &[Poly]) -> Layout {
    elementwise_known(dims, operands, &|_| false, shape)
}

/// [`elementwise_order`] where `known(i)` says whether operand `i`'s strides are PyTorch's
/// on its axes of size 1 too ([`strides_known_at_ones`]): the orders where some sizes are
/// 1 then follow those strides instead of every choice PyTorch could have left there.
/// `known` is asked only where such a choice arises, each operand at most once.
pub fn elementwise_known(
    dims: &DimTable,
    operands: &[&TensorType],
    known: &dyn Fn(usize) -> bool,
    shape: &[Poly],
) -> Layout {
    // The common case costs less than the memo's key: the proof's own shortcut, first.
    let exact = operands.iter().all(|t| !t.varies());
    if let Some(laid) = exact.then(|| over_one_row_major(dims, operands, shape)).flatten() {
        return laid;
    }
    memo::remembered(dims, operands, shape, known, |known| {
        each_combination(dims, operands, shape, |dims, operands, shape| {
            elementwise_of_exact(dims, operands, known, shape)
        })
    })
}

/// [`elementwise_known`] of operands whose strides are known: dense in every order
/// TensorIterator may take, in general and where some sizes are 1.
fn elementwise_of_exact(
    dims: &DimTable,
    operands: &[&TensorType],
    known: &dyn Fn(usize) -> bool,
    shape: &[Poly],
) -> Layout {
    if let Some(laid) = over_one_row_major(dims, operands, shape) {
        return laid;
    }
    let general: Vec<usize> = (0..shape.len()).rev().collect();
    let (operands, within) = where_not_empty(dims, operands, shape);
    // The orders are found on sizes and strides with the constant dims' values put in, and
    // the answer's strides are written over `shape` as it is.
    let operands: Vec<TensorType> = operands.iter().map(|t| with_consts(dims, t)).collect();
    let within: Vec<Poly> = within.iter().map(|p| dims.with_consts(p)).collect();
    let operands: Vec<&TensorType> = operands.iter().collect();
    let Some(orders) = iterator_orders(dims, &operands, &within) else {
        return Layout::any(dense_in_order(shape, &general));
    };
    let perm = &orders[0];
    let Some(at_ones) = orders_where_dims_are_one(dims, &operands, known, &within, perm) else {
        return Layout::any(dense_in_order(shape, perm));
    };
    Layout::one_of(
        dims,
        orders.iter().chain(&at_ones).map(|o| dense_in_order(shape, o)),
    )
}

/// The operands and the result's `shape` where the result is not empty: a free dim `s` of
/// an axis `c * s - k` (`N - 1`, `3 * N - 3`) is at least `m = ceil((k + 1) / c)` there, so
/// it is written `s + m - 1` with `s >= 1`. An empty result has no order to give (and every
/// view of it is legal), while these sizes decide the comparisons the general form leaves
/// open: `3 * N - 3` against `1` is at least 3 against 1, and `N - 1` at 1 is the scenario
/// `N = 2`, where the strides `3 * N - 3` and `3` are equal. Not above [`SHIFTED_RANK`],
/// for the cost of expanding powers.
fn where_not_empty(
    dims: &DimTable,
    operands: &[&TensorType],
    shape: &[Poly],
) -> (Vec<TensorType>, Vec<Poly>) {
    let mut least: Vec<(Sym, i64)> = Vec::new();
    let sizes: &[Poly] = if shape.len() <= SHIFTED_RANK { shape } else { &[] };
    for (s, m) in sizes
        .iter()
        .filter_map(|size| free_dim_at_least(dims, &dims.with_consts(size)))
    {
        match least.iter_mut().find(|(t, _)| *t == s) {
            Some((_, n)) => *n = (*n).max(m),
            None => least.push((s, m)),
        }
    }
    let shift = |p: &Poly| {
        p.substitute(&|s| {
            let &(_, m) = least.iter().find(|(t, _)| *t == s)?;
            Some(Poly::sym(s).add(&Poly::int(m - 1)))
        })
    };
    let shifted = |ps: &[Poly]| ps.iter().map(shift).collect::<Vec<_>>();
    let operands = operands
        .iter()
        .map(|t| match least.is_empty() {
            true => (*t).clone(),
            false => TensorType {
                shape: shifted(&t.shape),
                strides: shifted(&t.strides),
                ..(*t).clone()
            },
        })
        .collect();
    (operands, shifted(shape))
}

/// `t` with every constant dim's value put in. The order proof reads sizes and strides
/// only through the table's comparisons, each of which puts the values in again (for
/// `D / H * N` a product per term, a map per product): put in once, those find none left.
fn with_consts(dims: &DimTable, t: &TensorType) -> TensorType {
    let put_in = |ps: &[Poly]| ps.iter().map(|p| dims.with_consts(p)).collect();
    TensorType {
        shape: put_in(&t.shape),
        strides: put_in(&t.strides),
        dtype: t.dtype,
        others: t.others.clone(),
    }
}

/// `(s, m)` where `size` is `c * s - k` of a free dim `s` (`c, k >= 1`) and is at least 1
/// exactly where `s >= m`, with `m >= 2`.
fn free_dim_at_least(dims: &DimTable, size: &Poly) -> Option<(Sym, i64)> {
    let (mut sym, mut c, mut k) = (None, 0i128, 0i128);
    for (mono, coeff) in size.terms() {
        let mut atoms = mono.atoms();
        match (atoms.next(), atoms.next(), coeff.as_int()) {
            (None, _, Some(n)) if n < 0 => k = -n,
            (Some((&Atom::Sym(s), 1)), None, Some(n)) if n > 0 && sym.is_none() => (sym, c) = (Some(s), n),
            _ => return None,
        }
    }
    let s = sym.filter(|&s| k > 0 && matches!(dims.info(s).kind, DimKind::Free { .. }))?;
    // `c * s - k >= 1` where `s >= ceil((k + 1) / c)`.
    let m = i64::try_from((k + c) / c).ok()?;
    (m >= 2).then_some((s, m))
}

/// The common case quickly: one tensor operand, of the result's shape and row-major for
/// every size, beside scalars. TensorIterator keeps its order, which holds at every size
/// (row-major strides stay row-major wherever dims are 1, and a lone operand has no
/// broadcast axes to reorder), so the result is row-major too. This skips the size-1
/// scenarios, which a chain of 10,000 `x * 1.0 + 0.0` statements otherwise pays for twice
/// (checking, and laying out the optimizer's choices).
fn over_one_row_major(dims: &DimTable, operands: &[&TensorType], shape: &[Poly]) -> Option<Layout> {
    let mut tensors = operands.iter().filter(|t| t.rank() > 0);
    let (Some(t), None) = (tensors.next(), tensors.next()) else {
        return None;
    };
    let row_major = row_major_strides(shape);
    let same = t.rank() == shape.len()
        && !t.varies()
        && (0..shape.len())
            .all(|i| dims.equal(&t.shape[i], &shape[i]) && dims.equal(&t.strides[i], &row_major[i]));
    same.then(|| Layout::exact(row_major))
}

/// At most this many orders are followed when comparisons depend on the sizes.
const ORDERS_TRIED: usize = 64;

/// Every order TensorIterator may give the axes, innermost first: one for each outcome of
/// the comparisons that depend on the sizes, the first taking the smaller stride inside
/// wherever it has a choice. TensorIterator starts from the reversed order and
/// insertion-sorts with a comparison that may abstain (broadcast axes, equal strides), so
/// an undecided comparison of an axis of size 1, whose position does not matter, can still
/// stop or let through the comparisons of the others. `None` beyond [`ORDERS_TRIED`].
fn iterator_orders(dims: &DimTable, operands: &[&TensorType], shape: &[Poly]) -> Option<Vec<Vec<usize>>> {
    let strides: Vec<Vec<Option<Poly>>> = operands
        .iter()
        .map(|t| broadcast_strides(dims, t, shape))
        .collect();
    let mut orders = Vec::new();
    // An insertion sort in progress: the order, the axis being inserted (`i`, now at
    // `dim1`), and how many positions before `dim1` remain to compare with.
    let mut sorts = vec![(Vec::from_iter((0..shape.len()).rev()), 0, 0, 0)];
    while let Some((mut perm, mut i, mut dim1, mut left)) = sorts.pop() {
        loop {
            if left == 0 {
                i += 1;
                if i >= perm.len() {
                    orders.push(perm);
                    break;
                }
                (dim1, left) = (i, i);
                continue;
            }
            let dim0 = left - 1;
            let outcomes = should_swap(dims, &strides, shape, perm[dim0], perm[dim1]);
            for &outcome in &outcomes[1..] {
                let mut perm = perm.clone();
                let (dim1, left) = sort_step(outcome, &mut perm, dim0, dim1);
                sorts.push((perm, i, dim1, left));
            }
            (dim1, left) = sort_step(outcomes[0], &mut perm, dim0, dim1);
            if orders.len() + sorts.len() > ORDERS_TRIED {
                return None;
            }
        }
    }
    Some(orders)
}

/// One step of TensorIterator's insertion sort after `should_swap(perm[dim0], perm[dim1])`
/// answered `outcome`: the inserted axis's new position and how many positions remain
/// before it to compare with.
fn sort_step(outcome: Ordering, perm: &mut [usize], dim0: usize, dim1: usize) -> (usize, usize) {
    match outcome {
        Ordering::Greater => {
            perm.swap(dim0, dim1);
            (dim0, dim0)
        }
        Ordering::Less => (dim1, 0),
        Ordering::Equal => (dim1, dim0),
    }
}

/// At most this many free dims, and then this many other axes that may be 1, are set to 1
/// in every combination; beyond it, one at a time and all together.
const ONES_TRIED_EXHAUSTIVELY: usize = 4;

/// The orders TensorIterator may take where some sizes are 1 that lay out the axes not of
/// size 1 otherwise than `perm` does; `None` where they cannot be followed. They exist
/// because an operand's axis of size 1 stops broadcasting where the result's axis is 1
/// too, and its stride then takes part in the order (`y: [B, 1, 4]` plus `x: [B, N, 4]`
/// is row-major, but at `N = 1` it follows `y`). Sizes are set to 1 through the free dims
/// (each scenario substituted everywhere) and then through the other axes that may be 1
/// (`B - 1`), whose strides keep their general form. An order found there, dense over the
/// general shape, has the strides PyTorch gives at those sizes.
fn orders_where_dims_are_one(
    dims: &DimTable,
    operands: &[&TensorType],
    known: &dyn Fn(usize) -> bool,
    shape: &[Poly],
    perm: &[usize],
) -> Option<Vec<Vec<usize>>> {
    let sizes = operands.iter().flat_map(|t| t.shape.iter().chain(&t.strides));
    let free = free_dims(dims, sizes.chain(shape));
    let mut dims_sets = subsets(&free);
    dims_sets.push(Vec::new());
    let mut found = Vec::new();
    for ones in &dims_sets {
        let sub = |p: &Poly| p.substitute(&|s| ones.contains(&s).then(|| Poly::int(1)));
        let subs = |ps: &[Poly]| ps.iter().map(sub).collect::<Vec<_>>();
        let shape_at = subs(shape);
        if shape_at.iter().filter(|d| !dims.is_one(d)).count() < 2 {
            // One axis not of size 1 has stride 1 in every order.
            continue;
        }
        let at_ones: Vec<TensorType> = operands
            .iter()
            .map(|t| TensorType {
                shape: subs(&t.shape),
                strides: subs(&t.strides),
                ..(*t).clone()
            })
            .collect();
        // Where every combination of free dims at 1 is a scenario of its own, the free dims
        // not at 1 here are at least 2.
        let exhaustive = free.len() <= ONES_TRIED_EXHAUSTIVELY && shape.len() <= SHIFTED_RANK;
        let apart = |p: &Poly| match exhaustive {
            true => with_ones(p, ones, &free, 1),
            false => p.clone(),
        };
        if keeps_row_major(dims, &at_ones, &shape_at, apart) {
            let row_major: Vec<usize> = (0..shape.len()).rev().collect();
            if lays_out_otherwise(dims, &shape_at, perm, &row_major) && !found.contains(&row_major) {
                found.push(row_major);
            }
            continue;
        }
        // A product of free dims is 1 only where they are: the scenarios above cover it.
        let maybe_one: Vec<usize> = (0..shape.len())
            .filter(|&i| !dims.is_one(&shape_at[i]) && !dims.never_one(&shape_at[i]))
            .filter(|&i| !product_of_free_dims(dims, &shape_at[i]))
            .collect();
        let mut axes_sets = subsets(&maybe_one);
        axes_sets.push(Vec::new());
        for ops in unknown_strides(operands, known, &at_ones, &shape_at, dims)? {
            for axes in &axes_sets {
                for order in other_orders(dims, &ops, &shape_at, perm, axes)? {
                    if !found.contains(&order) {
                        found.push(order);
                    }
                }
            }
        }
        if found.len() > LAYOUTS_KEPT {
            return None;
        }
    }
    Some(found)
}

/// At most this many choices of the strides `unknown_strides` cannot know are tried.
const STRIDE_CHOICES: usize = 256;

/// The operands at sizes where some free dims are 1, with every choice that matters for
/// the strides of the axes that are 1 only there (and in the result): PyTorch keeps those
/// strides, which its `view` sets by the chunks at those sizes, not as in general. A stride
/// only takes part in comparisons with its operand's other strides, so below, equal to and
/// between them are all the choices there are; and with one tensor operand the comparison
/// is an order, in which such an axis cannot move the others. An operand whose strides
/// are `known` on such axes keeps them. `None` when there are too many choices.
fn unknown_strides(
    general: &[&TensorType],
    known: &dyn Fn(usize) -> bool,
    at_ones: &[TensorType],
    shape: &[Poly],
    dims: &DimTable,
) -> Option<Vec<Vec<TensorType>>> {
    let half = Poly::term(Ratio::new(1, 2), &[]);
    let mut variants: Vec<Vec<TensorType>> = vec![at_ones.to_vec()];
    if at_ones.iter().filter(|t| t.rank() > 0).count() < 2 {
        return Some(variants);
    }
    for (o, t) in at_ones.iter().enumerate() {
        let pad = shape.len() - t.rank().min(shape.len());
        let unknown: Vec<usize> = (0..t.rank())
            .filter(|&j| dims.is_one(&t.shape[j]) && !dims.is_one(&general[o].shape[j]))
            .filter(|&j| dims.is_one(&shape[j + pad]))
            .collect();
        if unknown.is_empty() || known(o) {
            continue;
        }
        for &j in &unknown {
            let others = (0..t.rank())
                .filter(|k| !unknown.contains(k))
                .map(|k| &t.strides[k]);
            let mut choices = vec![half.clone()];
            for v in others {
                choices.push(v.clone());
                choices.push(v.add(&half));
            }
            if variants.len() * choices.len() > STRIDE_CHOICES {
                return None;
            }
            variants = variants
                .iter()
                .flat_map(|ops| {
                    choices.iter().map(move |c| {
                        let mut ops = ops.clone();
                        ops[o].strides[j] = c.clone();
                        ops
                    })
                })
                .collect();
        }
    }
    Some(variants)
}

/// The orders TensorIterator may take, with the result's `axes` (and the operands' axes
/// aligned to them) of size 1, that lay out the axes not of size 1 otherwise than `perm`
/// does; `None` beyond [`ORDERS_TRIED`].
fn other_orders(
    dims: &DimTable,
    operands: &[TensorType],
    shape: &[Poly],
    perm: &[usize],
    axes: &[usize],
) -> Option<Vec<Vec<usize>>> {
    let one = |i: usize, p: &Poly| match axes.contains(&i) {
        true => Poly::int(1),
        false => p.clone(),
    };
    let shape: Vec<Poly> = shape.iter().enumerate().map(|(i, p)| one(i, p)).collect();
    let operands: Vec<TensorType> = operands
        .iter()
        .map(|t| {
            let pad = shape.len() - t.rank().min(shape.len());
            TensorType {
                shape: t.shape.iter().enumerate().map(|(j, p)| one(j + pad, p)).collect(),
                ..t.clone()
            }
        })
        .collect();
    let refs: Vec<&TensorType> = operands.iter().collect();
    let orders = iterator_orders(dims, &refs, &shape)?;
    let differs = |order: &Vec<usize>| lays_out_otherwise(dims, &shape, perm, order);
    Some(orders.into_iter().filter(differs).collect())
}

/// Whether `order` lays out an axis of `shape` not of size 1 otherwise than `perm` does.
fn lays_out_otherwise(dims: &DimTable, shape: &[Poly], perm: &[usize], order: &[usize]) -> bool {
    let (general, there) = (dense_in_order(shape, perm), dense_in_order(shape, order));
    (0..shape.len()).any(|i| !dims.is_one(&shape[i]) && !dims.equal(&there[i], &general[i]))
}

/// Whether TensorIterator keeps the axes of `shape` not of size 1 in row-major order,
/// whatever strides the operands have on the axes of size 1: where every operand's
/// strides over those axes (broadcast ones left out) fall strictly from the outside in,
/// each comparison of two of them says "keep" or abstains, so the insertion sort, which
/// starts from row-major order, only ever moves an axis past axes of size 1. Those may
/// stop it anywhere; none of them takes a place in memory. This holds for the operands
/// of `(x + m).view(-1)` with `x: [B, 2, N, 4]`, `m: [B, 2, N, 1]` at `B = N = 1`, whose
/// four strides on axes of size 1 the exhaustive search cannot follow. The strides are
/// compared as `apart` gives them: with the free dims not at 1 shifted where they are at
/// least 2 (`3 * E` and `E` stay apart there; at `E = 1`, another scenario, `E`'s axis is
/// of size 1).
fn keeps_row_major(
    dims: &DimTable,
    operands: &[TensorType],
    shape: &[Poly],
    apart: impl Fn(&Poly) -> Poly,
) -> bool {
    let axes: Vec<usize> = (0..shape.len()).filter(|&i| !dims.is_one(&shape[i])).collect();
    let per: Vec<Vec<Option<Poly>>> = operands
        .iter()
        .map(|t| {
            broadcast_strides(dims, t, shape)
                .iter()
                .map(|s| s.as_ref().map(&apart))
                .collect()
        })
        .collect();
    let falling = per.iter().all(|strides| {
        let known: Vec<&Poly> = axes.iter().filter_map(|&i| strides[i].as_ref()).collect();
        known.windows(2).all(|w| dims.provably_positive(&w[0].sub(w[1])))
    });
    // Where every operand abstains on two such axes (each broadcast in one of them), the
    // insertion goes on past the inner one and may swap with an axis inside it:
    // `where(c, e, 0.0)` with `c: [3, 1, 1, 1]` and `e` expanded from `[1, B, 2, N]` puts
    // the axis of 3 inside `B`'s at `N = 1`.
    let decided = axes.iter().enumerate().all(|(n, &i)| {
        axes[n + 1..].iter().all(|&j| {
            per.iter()
                .any(|strides| strides[i].is_some() && strides[j].is_some())
        })
    });
    falling && decided
}

/// Whether `p` is a product of free dims (`N`, `B * N`).
fn product_of_free_dims(dims: &DimTable, p: &Poly) -> bool {
    let mut terms = p.terms();
    match (terms.next(), terms.next()) {
        (Some((m, c)), None) => {
            c == Ratio::ONE
                && m.atoms().all(|(a, e)| {
                    e > 0 && matches!(a, Atom::Sym(s) if matches!(dims.info(*s).kind, DimKind::Free { .. }))
                })
        }
        _ => false,
    }
}

/// The non-empty subsets of `items`: all of them for a few items, else each one alone and
/// all together.
fn subsets<T: Copy>(items: &[T]) -> Vec<Vec<T>> {
    let k = items.len();
    match k <= ONES_TRIED_EXHAUSTIVELY {
        true => (1..1usize << k)
            .map(|m| (0..k).filter(|i| m >> i & 1 == 1).map(|i| items[i]).collect())
            .collect(),
        false => items.iter().map(|&s| vec![s]).chain([items.to_vec()]).collect(),
    }
}

/// `cat` of items: row-major, except that PyTorch keeps a channels-last format of 4-d and
/// 5-d results (`cat_compute_output_memory_format`) where every item suggests it: such
/// results are row-major or channels-last unless channels-last is ruled out (see
/// `may_be_channels_last`). `known[i]`: whether item `i`'s strides are PyTorch's on its
/// axes of size 1 too ([`strides_known_at_ones`]).
pub fn joined(dims: &DimTable, operands: &[&TensorType], known: &[bool], shape: &[Poly]) -> Layout {
    let row_major = row_major_strides(shape);
    let may = |(t, &known): (&&TensorType, &bool)| may_be_channels_last(dims, t, known, shape);
    match operands.iter().zip(known).any(may) {
        true => Layout::one_of(dims, [row_major, channels_last(shape)]),
        false => Layout::exact(row_major),
    }
}

/// `stack` of `items` along axis `d` of the result `shape`, as ATen builds it: `cat` of the
/// items along `d`, then a view that splits that axis; or, where `d` is the new last axis,
/// `cat` of the items unsqueezed there. So stacking items of rank 3 gives a row-major 4-d
/// result unless `d` is the last axis. `known` as for [`joined`] (`unsqueeze` keeps it).
pub fn stacked(dims: &DimTable, items: &[&TensorType], known: &[bool], d: usize, shape: &[Poly]) -> Layout {
    let first = items[0];
    if d < first.rank() {
        let mut cat_shape = first.shape.clone();
        cat_shape[d] = shape[d].mul(&shape[d + 1]);
        let cat = joined(dims, items, known, &cat_shape).with(cat_shape, first.dtype);
        // Splitting an axis is always a view.
        return view(dims, &cat, shape).unwrap_or_else(|| Layout::any(row_major_strides(shape)));
    }
    let unsqueezed: Vec<TensorType> = items.iter().map(|t| unsqueezed(dims, t, d)).collect();
    joined(dims, &unsqueezed.iter().collect::<Vec<_>>(), known, shape)
}

/// `x.unsqueeze(d)`: a new axis of size 1 at `d`, with the stride PyTorch gives it (the
/// extent of the axis it is put before, or 1 at the end).
pub fn unsqueezed(dims: &DimTable, x: &TensorType, d: usize) -> TensorType {
    let laid = Layout::moved(dims, x, |old| {
        let stride = match d < x.rank() {
            true => old[d].mul(&x.shape[d]),
            false => Poly::int(1),
        };
        let mut s = old.to_vec();
        s.insert(d, stride);
        s
    });
    let mut shape = x.shape.clone();
    shape.insert(d, Poly::int(1));
    laid.with(shape, x.dtype)
}

/// `x` without axis `d`, as `squeeze` and `select` drop it.
pub fn without_axis(dims: &DimTable, x: &TensorType, d: usize) -> TensorType {
    let laid = Layout::moved(dims, x, |old| {
        let mut s = old.to_vec();
        s.remove(d);
        s
    });
    let shape = crate::shape::dropped(&x.shape, d).expect("`d` is an axis of `x`");
    laid.with(shape, x.dtype)
}

/// `x.reshape(shape)`: a view where PyTorch's `view` succeeds, a row-major copy where it
/// does not, for each of `x`'s possible strides. Where the view is legal for every size
/// the result is that view. Otherwise it is a copy in general, and a view at sizes that
/// happen to allow one (`x.transpose(1, 2).reshape(B, N, D)`, a view only where `N = 1`,
/// is row-major there too, while `y.transpose(0, 1).reshape(B, N * 4)` is the view where
/// `B = 1`): every such view is possible too.
pub fn reshape(dims: &DimTable, x: &TensorType, shape: &[Poly]) -> Layout {
    let key = (
        x.clone(),
        shape.to_vec(),
        dims.context(memo::sizes(x).chain(shape)),
    );
    RESHAPES.get_or_prove(key, || reshape_unremembered(dims, x, shape))
}

/// [`reshape`]'s answers by the operand's type, the shape asked and what the table knows of
/// their dims: every layer of a loop asks it again of the same types (each of SmolLM2's 30
/// layers, of its heads' views; 5 % of that model's compile before).
static RESHAPES: memo::Answers<(TensorType, Vec<Poly>, crate::dims::Context), Layout> = memo::Answers::new();

/// [`reshape`], worked out.
fn reshape_unremembered(dims: &DimTable, x: &TensorType, shape: &[Poly]) -> Layout {
    let Some(all) = x.layouts() else {
        let strides = view_strides(dims, x, shape).unwrap_or_else(|| row_major_strides(shape));
        return Layout::any(strides);
    };
    Layout::union(
        dims,
        all.iter().map(|s| reshape_of_exact(dims, &x.exact(s), shape)),
    )
}

/// [`reshape`] of a value whose strides are known.
fn reshape_of_exact(dims: &DimTable, x: &TensorType, shape: &[Poly]) -> Layout {
    if let Some(strides) = view_strides(dims, x, shape) {
        return Layout::exact(strides);
    }
    let copy = row_major_strides(shape);
    match views_where_dims_are_one(dims, x, shape) {
        Some(views) => Layout::one_of(dims, [copy].into_iter().chain(views)),
        None => Layout::any(copy),
    }
}

/// `x.expand(shape)` (ATen's `inferExpandGeometry`): an axis keeps its stride where its size
/// is the requested one, and an axis of size 1 expanded to another size gets stride 0. A new
/// leading axis gets stride 0, or, where it is of size 1, the extent of the axes inside it.
/// A rank-0 operand expands with every stride 0. Where a requested size may be 1 without
/// provably being 1, the general case is stride 0: PyTorch keeps the operand's stride there,
/// on an axis of size 1, which no view or order of the axes not of size 1 reads. The caller
/// has already proved that each axis keeps its size or is 1.
pub fn expand(dims: &DimTable, x: &TensorType, shape: &[Poly]) -> Layout {
    Layout::moved(dims, x, |old| {
        let pad = shape.len() - x.rank();
        let mut strides = vec![Poly::int(0); shape.len()];
        if x.rank() == 0 {
            return strides;
        }
        for i in (0..shape.len()).rev() {
            strides[i] = match i.checked_sub(pad) {
                Some(j) if dims.equal(&x.shape[j], &shape[i]) => old[j].clone(),
                Some(_) => Poly::int(0),
                None if dims.is_one(&shape[i]) => shape[i + 1].mul(&strides[i + 1]),
                None => Poly::int(0),
            };
        }
        strides
    })
}

/// The free dims that occur in `sizes`, each once, in index order: the dims a size-1 scenario
/// may set to 1.
fn free_dims<'a>(dims: &DimTable, sizes: impl Iterator<Item = &'a Poly>) -> Vec<Sym> {
    let mut free: Vec<Sym> = sizes
        .flat_map(Poly::syms)
        .filter(|&s| matches!(dims.info(s).kind, DimKind::Free { .. }))
        .collect();
    free.sort_unstable();
    free.dedup();
    free
}

/// The largest rank whose strides a size-1 scenario compares with the other free dims
/// shifted to at least 2: shifting `N` to `N + 1` expands each stride `N^k` into `k + 1`
/// terms, which made a rank-200 elementwise value check for 13 s (rank 8,000 for hours).
/// Above it the strides are compared as they are, which may refuse a layout, never accept
/// a wrong one.
const SHIFTED_RANK: usize = 16;

/// `p` in a size-1 scenario: the dims `ones` at 1, the other `free` dims `s` shifted to
/// `s + by` (with `by = 1`, a dim at least 2 as `s + 1` with `s >= 1`; `-1` shifts back).
fn with_ones(p: &Poly, ones: &[Sym], free: &[Sym], by: i64) -> Poly {
    p.substitute(&|s| match ones.contains(&s) {
        true => Some(Poly::int(1)),
        false if free.contains(&s) => Some(Poly::sym(s).add(&Poly::int(by))),
        false => None,
    })
}

/// Strides that lay out `shape` densely with `perm[0]` innermost, `perm[1]` next, ..
fn dense_in_order(shape: &[Poly], perm: &[usize]) -> Vec<Poly> {
    let mut strides = vec![Poly::int(1); shape.len()];
    let mut acc = Poly::int(1);
    for &a in perm {
        strides[a] = acc.clone();
        acc = acc.mul(&shape[a]);
    }
    strides
}

/// `t`'s strides over the axes of the broadcast `shape`, `None` where TensorIterator sees
/// a stride of 0: a missing leading axis, an axis of size 1 that broadcasts, an expanded
/// axis.
fn broadcast_strides(dims: &DimTable, t: &TensorType, shape: &[Poly]) -> Vec<Option<Poly>> {
    let pad = shape.len() - t.rank().min(shape.len());
    (0..shape.len())
        .map(|i| {
            let j = i.checked_sub(pad)?;
            let (size, stride) = (&t.shape[j], &t.strides[j]);
            let broadcast = dims.is_one(size) && !dims.is_one(&shape[i]);
            (!broadcast && !dims.consts_in(stride).is_zero()).then(|| stride.clone())
        })
        .collect()
}

/// TensorIterator's `should_swap(dim0, dim1)`, each answer it may give: `Greater` to swap,
/// `Less` to stop, `Equal` when every operand abstains. More than one where the answer
/// depends on the sizes; the first is then the one `compare` would take in general.
fn should_swap(
    dims: &DimTable,
    strides: &[Vec<Option<Poly>>],
    shape: &[Poly],
    dim0: usize,
    dim1: usize,
) -> Vec<Ordering> {
    let mut answers = Vec::new();
    for s in strides {
        let (Some(s0), Some(s1)) = (&s[dim0], &s[dim1]) else {
            continue;
        };
        let by_stride = possible_orders(dims, s0, s1);
        answers.extend(by_stride.iter().filter(|o| o.is_ne()));
        if !by_stride.contains(&Ordering::Equal) {
            return dedup(answers);
        }
        // Equal strides: the larger axis goes outside; otherwise the next operand decides.
        let by_size = possible_orders(dims, &shape[dim0], &shape[dim1]);
        if by_size.contains(&Ordering::Greater) {
            answers.push(Ordering::Greater);
        }
        if by_size == [Ordering::Greater] {
            return dedup(answers);
        }
    }
    answers.push(Ordering::Equal);
    dedup(answers)
}

/// `orders` without repeats, in their first order.
fn dedup(orders: Vec<Ordering>) -> Vec<Ordering> {
    let mut out = Vec::with_capacity(orders.len());
    for o in orders {
        if !out.contains(&o) {
            out.push(o);
        }
    }
    out
}

/// The orders two sizes or strides may have: the one `compare` proves, else all three
/// (`Less` first, as TensorIterator's general case keeps a smaller stride inside).
fn possible_orders(dims: &DimTable, a: &Poly, b: &Poly) -> &'static [Ordering] {
    match compare(dims, a, b) {
        Some(Ordering::Less) => &[Ordering::Less],
        Some(Ordering::Equal) => &[Ordering::Equal],
        Some(Ordering::Greater) => &[Ordering::Greater],
        None => &[Ordering::Less, Ordering::Equal, Ordering::Greater],
    }
}

/// The order of two sizes or strides at the sizes where it matters, or `None` when it
/// depends on the sizes. Two expressions that differ only where a size is 1 (`N` and 1)
/// compare by their general case: an axis of size 1 has no place in memory.
fn compare(dims: &DimTable, a: &Poly, b: &Poly) -> Option<Ordering> {
    if dims.equal(a, b) {
        Some(Ordering::Equal)
    } else if dims.provably_nonneg(&b.sub(a)) {
        Some(Ordering::Less)
    } else if dims.provably_nonneg(&a.sub(b)) {
        Some(Ordering::Greater)
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
