//! Channels-last: whether an op that follows its operand's suggested memory format
//! (`cat`, `rms_norm` of 4-d and 5-d tensors) may give a channels-last result, decided as
//! c10's `is_channels_last_strides_2d_s4`/`_3d_s5` decide it.

use super::*;
use crate::dims::Context;

/// Channels-last strides of a 4-d or 5-d `shape`: axis 1 innermost, then the last axes
/// from the right, then axis 0.
pub(super) fn channels_last(shape: &[Poly]) -> Vec<Poly> {
    let mut order = vec![1];
    order.extend((2..shape.len()).rev());
    order.push(0);
    dense_in_order(shape, &order)
}

/// `x.contiguous(memory_format=x.suggest_memory_format())`, as `rms_norm` copies its
/// input: `contiguous`, except that a 4-d or 5-d input whose strides may be channels-last
/// may keep that format instead. `known`: whether `x`'s strides are PyTorch's on its axes
/// of size 1 too (`ones::strides_known_at_ones`).
pub fn contiguous_as_suggested(dims: &DimTable, x: &TensorType, known: bool, shape: &[Poly]) -> Layout {
    each_combination(dims, &[x], shape, |dims, operands, shape| {
        let laid = contiguous(dims, operands, shape);
        match operands
            .iter()
            .any(|t| may_be_channels_last(dims, t, known, shape))
        {
            true => Layout::union(dims, [laid, Layout::exact(channels_last(shape))]),
            false => laid,
        }
    })
}

/// Whether PyTorch's `suggest_memory_format` may call `t` channels-last at sizes where that
/// gives a result of `shape` (4-d or 5-d) other strides than row-major on its axes not of
/// size 1. Each of `t`'s lists of strides is tried in each scenario of the free dims
/// (`exact::scenarios`: each at 1, 2, or 3 and more, so that `N - 1` is empty, 1 or at
/// least 2 in each); where more free dims occur than are tried exhaustively, or
/// `t` may have any strides, channels-last is not ruled out. `known`: whether `t`'s
/// strides are PyTorch's on axes of size 1 too, so that the test may read them.
pub(super) fn may_be_channels_last(dims: &DimTable, t: &TensorType, known: bool, shape: &[Poly]) -> bool {
    if !matches!(shape.len(), 4 | 5) {
        return false;
    }
    let context = dims.context(t.shape.iter().chain(&t.strides).chain(shape));
    let key = (t.clone(), known, shape.to_vec(), context);
    SUGGESTED.get_or_prove(key, || suggested_in_a_scenario(dims, t, known, shape))
}

/// [`may_be_channels_last`]'s answers by the item's type, `known`, the result's shape and what
/// the table knows of their dims: RoPE's `cat` asks it again in every layer of a loop.
static SUGGESTED: super::memo::Answers<(TensorType, bool, Vec<Poly>, Context), bool> =
    super::memo::Answers::new();

/// [`may_be_channels_last`] of a 4-d or 5-d result, worked out.
fn suggested_in_a_scenario(dims: &DimTable, t: &TensorType, known: bool, shape: &[Poly]) -> bool {
    let Some(layouts) = t.layouts().filter(|_| t.rank() == shape.len()) else {
        return true;
    };
    let free = free_dims(dims, t.shape.iter().chain(&t.strides).chain(shape));
    let Some(scenarios) = super::exact::scenarios(&free) else {
        return true;
    };
    scenarios.iter().any(|values| {
        let at = |ps: &[Poly]| -> Vec<Poly> {
            ps.iter()
                .map(|p| super::exact::at_scenario(p, &free, values))
                .collect()
        };
        let result = at(shape);
        let row_major = row_major_strides(&result);
        let differs = channels_last(&result)
            .iter()
            .zip(&row_major)
            .zip(&result)
            .any(|((c, r), size)| !dims.is_one(size) && !dims.equal(c, r));
        let t_shape = at(&t.shape);
        differs
            && layouts
                .iter()
                .any(|strides| strides_like_channels_last(dims, &t_shape, &at(strides), known))
    })
}

/// Whether c10's `is_channels_last_strides_2d_s4` (`_3d_s5`) may hold for `strides` of
/// `shape` at some sizes. The walk takes axis 1 innermost, then the last axes from the
/// right, then axis 0: a stride of 0 on axis 1, an empty axis, a stride below the extent of
/// the axes before it, or axis 0 reached by axis 1's extent alone (an `N111` tensor, taken
/// as contiguous) says no. Each test that says no is taken where it provably does. Unless
/// `known`, the strides are PyTorch's only on axes not of size 1 (on one of size 1,
/// PyTorch keeps what a view, `expand` or `contiguous` left), so those of axes of size 1
/// are unknown; with `known`, c10 reads them as it does. An axis that may be 1 or not is
/// followed both ways.
fn strides_like_channels_last(dims: &DimTable, shape: &[Poly], strides: &[Poly], known: bool) -> bool {
    let mut order = vec![1];
    order.extend((2..shape.len()).rev());
    order.push(0);
    let walk = Walk {
        dims,
        shape,
        strides,
        known,
    };
    let zero = known && dims.with_consts(&strides[1]).is_zero();
    !zero && walk.from(&order, None, None)
}

/// The state of [`strides_like_channels_last`]'s walk over a tensor.
struct Walk<'a> {
    dims: &'a DimTable,
    shape: &'a [Poly],
    strides: &'a [Poly],
    /// Whether the strides of axes of size 1 are PyTorch's.
    known: bool,
}

impl Walk<'_> {
    /// Whether the walk may pass the axes `order`, with `min` the extent of those before
    /// (unknown after an axis of size 1 unless its stride is `known`) and `first` axis 1's
    /// stride where it is known.
    fn from(&self, order: &[usize], min: Option<Poly>, first: Option<Poly>) -> bool {
        let Some((&d, rest)) = order.split_first() else {
            return true;
        };
        let dims = self.dims;
        let (size, stride) = (&self.shape[d], &self.strides[d]);
        let n111 = d == 0 && matches!((&min, &first), (Some(m), Some(f)) if dims.equal(m, f));
        if dims.with_consts(size).is_zero() || n111 {
            return false;
        }
        let below = min.is_some_and(|m| dims.provably_positive(&m.sub(stride)));
        let as_one = !dims.never_one(size)
            && match self.known {
                true => {
                    let first = if d == 1 {
                        Some(stride.clone())
                    } else {
                        first.clone()
                    };
                    !below && self.from(rest, Some(stride.clone()), first)
                }
                false => self.from(rest, None, first.clone()),
            };
        as_one
            || (!dims.is_one(size) && {
                let zero = d == 1 && dims.with_consts(stride).is_zero();
                let first = if d == 1 { Some(stride.clone()) } else { first };
                !below && !zero && self.from(rest, Some(stride.mul(size)), first)
            })
    }
}
