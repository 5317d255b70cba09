//! Strides on axes of size 1: where the checker's are PyTorch's at every size.
//!
//! PyTorch keeps a stride on an axis of size 1 that neither `computeStride` nor
//! TensorIterator's order reads, so the checker's strides are in general PyTorch's only
//! on the axes not of size 1. c10's channels-last test does read them, though: `stack` of
//! a row-major `x: [B, N, E]` at a new last axis is never channels-last, but only the
//! strides of `x.unsqueeze(3)` at `E = 1` (`[N, 1, 1, 1]`) say so. A value built from
//! inputs and fresh results by the ops below has PyTorch's strides on every axis.

use crate::dims::DimTable;
use crate::ir::{row_major_strides, Op, Program, TensorType, Type, ValueId};

/// How far back through the program [`strides_known_at_ones`] looks before it gives up.
const DEPTH: usize = 32;

/// Whether `v`'s strides (a `for`'s: its items') are PyTorch's at every size, on axes of
/// size 1 too:
/// - an input or a parameter, a reduction or a `softmax` (PyTorch allocates each with
///   `at::empty(shape)`, whose strides are the row-major formula on every axis);
/// - a view op that maps strides one by one (`transpose`, `permute`, `unsqueeze` with
///   the stride `inferUnsqueezeGeometry` gives, `squeeze`, slices, `select`) of such a
///   value, and `contiguous()` of one that is contiguous at every size (PyTorch returns
///   it; where it copies at some sizes only, it returns the operand at the others);
/// - an elementwise result, a `cat`, a `view` or a `reshape` that is row-major on every
///   axis, of operands that are all row-major on every axis and known: TensorIterator's
///   comparisons then never reorder the axes (equal strides only beside axes of size 1,
///   which lose the tie) and allocate the row-major formula; `cat` that is not
///   channels-last allocates it too; `computeStride` on one chunk gives it.
pub fn strides_known_at_ones(prog: &Program, v: ValueId) -> bool {
    known(prog, v, DEPTH)
}

fn known(prog: &Program, v: ValueId, depth: usize) -> bool {
    let Some(depth) = depth.checked_sub(1) else {
        return false;
    };
    let node = &prog.nodes[v];
    let t = match (&node.op, &node.ty) {
        // A `for`'s items are its result's.
        (Op::For { result, .. }, _) => return known(prog, *result, depth),
        (_, Type::Tensor(t)) => t,
        (_, Type::Seq { .. }) => return false,
    };
    let operand = |i: usize| node.args.get(i).is_some_and(|&a| known(prog, a, depth));
    let dims = &prog.dims;
    match &node.op {
        Op::Input(_)
        | Op::Param(_)
        | Op::Literal(_)
        | Op::DimValue(_)
        | Op::Reduce { .. }
        | Op::Softmax(_) => row_major_everywhere(dims, t),
        Op::Transpose(..)
        | Op::Permute(_)
        | Op::Unsqueeze(_)
        | Op::Squeeze(_)
        | Op::Slice { .. }
        | Op::StepSlice { .. }
        | Op::Select { .. } => !t.varies() && operand(0),
        // PyTorch returns the operand wherever it is contiguous, keeping its strides on
        // axes of size 1, even where the checker's rule copies for other sizes.
        Op::Contiguous => {
            let x = prog.tensor_type(node.args[0]);
            let kept = !x.varies() && x.strides.iter().zip(&t.strides).all(|(a, b)| dims.equal(a, b));
            !t.varies() && kept && operand(0)
        }
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where
        | Op::Cat(_)
        | Op::View(_)
        | Op::Reshape(_) => {
            row_major_everywhere(dims, t)
                && node.args.iter().all(|&a| {
                    let Type::Tensor(x) = &prog.nodes[a].ty else {
                        return false;
                    };
                    row_major_everywhere(dims, x) && known(prog, a, depth)
                })
        }
        _ => false,
    }
}

/// Whether `t` has one list of strides, the row-major formula on every axis.
fn row_major_everywhere(dims: &DimTable, t: &TensorType) -> bool {
    !t.varies()
        && t.strides
            .iter()
            .zip(row_major_strides(&t.shape))
            .all(|(s, r)| dims.equal(s, &r))
}
