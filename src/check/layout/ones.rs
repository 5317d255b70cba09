//! Strides on axes of size 1: where the checker's are PyTorch's at every size.
//!
//! PyTorch keeps a stride on an axis of size 1 that neither `computeStride` nor
//! TensorIterator's order reads, so the checker's strides are in general PyTorch's only
//! on the axes not of size 1. c10's channels-last test does read them, though: `stack` of
//! a row-major `x: [B, N, E]` at a new last axis is never channels-last, but only the
//! strides of `x.unsqueeze(3)` at `E = 1` (`[N, 1, 1, 1]`) say so. A value built from
//! inputs and fresh results by the ops below has PyTorch's strides on every axis.

use crate::dims::{DimTable, Poly};
use crate::hash::HashMap;
use crate::ir::{Op, Program, TensorType, Type, ValueId};

/// How far back through the program [`strides_known_at_ones`] looks before it gives up.
const DEPTH: usize = 32;

/// Whether `v`'s strides (a `for`'s: its items') are PyTorch's at every size, on axes of
/// size 1 too:
/// - an input or a parameter, a reduction, a `softmax`, a `masked_fill`, a `tril` or a
///   `triu` (whose meta function gives no strides, so row-major whatever the input's), a
///   `matmul` or a `linear` (PyTorch allocates each with `at::empty(shape)` or a contiguous clone, or
///   views such a result with `computeStride` on one chunk; checked for `matmul` and
///   `linear` of 2-d to 4-d operands, transposed or not, with every size 1 or not), whose
///   strides are the row-major formula on every axis;
/// - a view op that maps strides one by one (`transpose`, `permute`, `unsqueeze` with
///   the stride `inferUnsqueezeGeometry` gives, `squeeze`, slices, `select`) of such a
///   value, `expand` of one where no axis is expanded to a size that may be 1, and
///   `contiguous()` of one that is contiguous at every size (PyTorch returns it; where it
///   copies at some sizes only, it returns the operand at the others), and `contiguous()`
///   of one contiguous at no size (an expanded axis), which is always a fresh copy;
/// - an elementwise result, a `cat`, a `view` or a `reshape` that is row-major on every
///   axis, of operands that are all row-major on every axis and known: TensorIterator's
///   comparisons then never reorder the axes (equal strides only beside axes of size 1,
///   which lose the tie) and allocate the row-major formula; `cat` that is not
///   channels-last allocates it too; `computeStride` on one chunk gives it;
/// - an elementwise result of known operands whose order TensorIterator's sort, run in
///   every scenario of sizes, gives as the checker's strides on every axis
///   (`exact::order_is_exact`): `x[:, 1 : N].unsqueeze(2) + y` is row-major on every axis
///   where it is not empty, though its operand is not.
pub fn strides_known_at_ones(prog: &Program, v: ValueId) -> bool {
    Known {
        prog,
        seen: HashMap::default(),
    }
    .at(v, DEPTH)
}

/// One [`strides_known_at_ones`] walk: each value is decided once (a value used twice by
/// each of a chain of statements would otherwise be visited 2^[`DEPTH`] times).
struct Known<'a> {
    prog: &'a Program,
    /// Each value decided so far, with the depth it was decided with.
    seen: HashMap<ValueId, (usize, bool)>,
}

impl Known<'_> {
    /// Whether `v`'s strides are known, looking at most `depth` steps back.
    fn at(&mut self, v: ValueId, depth: usize) -> bool {
        match self.seen.get(&v) {
            // A value known with less depth left is known with more; one decided with
            // at least as much depth left is decided.
            Some(&(d, known)) if known || d >= depth => known,
            _ => {
                let known = self.decide(v, depth);
                self.seen.insert(v, (depth, known));
                known
            }
        }
    }

    fn decide(&mut self, v: ValueId, depth: usize) -> bool {
        let Some(depth) = depth.checked_sub(1) else {
            return false;
        };
        known(self, v, depth)
    }
}

fn known(walk: &mut Known, v: ValueId, depth: usize) -> bool {
    let prog = walk.prog;
    let node = &prog.nodes[v];
    let t = match (&node.op, &node.ty) {
        // A `for`'s items are its result's.
        (Op::For { result, .. }, _) => return walk.at(*result, depth),
        (_, Type::Tensor(t)) => t,
        (_, Type::Seq { .. }) => return false,
    };
    let mut operand = |i: usize| node.args.get(i).is_some_and(|&a| walk.at(a, depth));
    let dims = &prog.dims;
    match &node.op {
        Op::Input(_)
        | Op::Param(_)
        | Op::Literal(_)
        | Op::DimValue(_)
        | Op::Reduce { .. }
        | Op::Softmax(_)
        | Op::MaskedFill
        | Op::Tri { .. }
        | Op::MatMul
        | Op::Linear => row_major_everywhere(dims, t),
        Op::Transpose(..)
        | Op::Permute(_)
        | Op::Unsqueeze(_)
        | Op::Squeeze(_)
        | Op::Slice { .. }
        | Op::StepSlice { .. }
        | Op::Select { .. } => !t.varies() && operand(0),
        // `inferExpandGeometry` keeps a stride where the size stays and gives 0 where it
        // changes, or, on a new leading axis of size 1, the extent of the axis inside it:
        // the checker's strides, except on an axis expanded to a size that may be 1
        // (PyTorch keeps the old stride there, the checker says 0).
        Op::Expand(_) => {
            let x = prog.tensor_type(node.args[0]);
            let pad = t.rank() - x.rank().min(t.rank());
            let decided = (0..t.rank()).all(|i| {
                let same = i >= pad && dims.equal(&x.shape[i - pad], &t.shape[i]);
                same || dims.is_one(&t.shape[i]) || dims.never_one(&t.shape[i])
            });
            x.rank() > 0 && !t.varies() && decided && operand(0)
        }
        // PyTorch returns the operand wherever it is contiguous, keeping its strides on
        // axes of size 1, even where the checker's rule copies for other sizes; an operand
        // that is contiguous at no size (expanded, as `repeat_interleave` builds it) is
        // always copied into `at::empty(shape)`.
        Op::Contiguous => {
            let x = prog.tensor_type(node.args[0]);
            let kept = !x.varies() && x.strides.iter().zip(&t.strides).all(|(a, b)| dims.equal(a, b));
            (!t.varies() && kept && operand(0))
                || (never_contiguous(dims, x) && row_major_everywhere(dims, t))
        }
        Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Where if !t.varies() => {
            let operands: Vec<&TensorType> = node.args.iter().map(|&a| prog.tensor_type(a)).collect();
            let row_major =
                row_major_everywhere(dims, t) && operands.iter().all(|x| row_major_everywhere(dims, x));
            (row_major || super::exact::order_is_exact(dims, &operands, t))
                && node.args.iter().all(|&a| walk.at(a, depth))
        }
        Op::Cat(_) | Op::View(_) | Op::Reshape(_) => {
            row_major_everywhere(dims, t)
                && node.args.iter().all(|&a| {
                    let Type::Tensor(x) = &prog.nodes[a].ty else {
                        return false;
                    };
                    row_major_everywhere(dims, x) && walk.at(a, depth)
                })
        }
        _ => false,
    }
}

/// Whether `t` is contiguous at no size where it has elements: in each of its layouts, an
/// axis that is never 1 has stride 0 (expanded).
fn never_contiguous(dims: &DimTable, t: &TensorType) -> bool {
    let expanded = |strides: &[Poly]| {
        (0..t.rank()).any(|i| dims.never_one(&t.shape[i]) && dims.with_consts(&strides[i]).is_zero())
    };
    t.layouts()
        .is_some_and(|layouts| layouts.into_iter().all(expanded))
}

/// Whether `t` has one list of strides, the row-major formula on every axis.
fn row_major_everywhere(dims: &DimTable, t: &TensorType) -> bool {
    if t.varies() {
        return false;
    }
    // From the innermost axis out, each stride the extent of the axes inside it: the
    // row-major formula, with no product past the first axis that differs.
    let mut extent = Poly::int(1);
    for i in (0..t.rank()).rev() {
        if !dims.equal(&t.strides[i], &extent) {
            return false;
        }
        if i > 0 {
            extent = extent.mul(&t.shape[i]);
        }
    }
    true
}
