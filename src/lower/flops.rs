//! The FLOP count `attnc bench` divides by its time.

use crate::dims::Poly;
use crate::ir::{Op, Program, ValueId};

/// 2·m·n·k summed over every `matmul` and `linear` of `program` (and the two products of
/// each `scaled_dot_product_attention`; per loop iteration), what
/// `attnc bench` divides by the time. Give it the source program, not the optimized one.
pub fn source_flops(program: &Program, dims: &[Option<i64>]) -> f64 {
    fn walk(program: &Program, body: &[ValueId], dims: &mut Vec<Option<i64>>) -> f64 {
        let mut total = 0.0;
        let eval = |dims: &[Option<i64>], p: &Poly| program.dims.eval(p, &|s| dims.get(s).copied().flatten());
        for &id in body {
            let node = program.node(id);
            let numel = |dims: &[Option<i64>], v: ValueId| -> f64 {
                program
                    .tensor_type(v)
                    .shape
                    .iter()
                    .map(|p| eval(dims, p).unwrap_or(0) as f64)
                    .product()
            };
            let last = |dims: &[Option<i64>], v: ValueId| -> f64 {
                let shape = &program.tensor_type(v).shape;
                shape.last().map_or(1.0, |p| eval(dims, p).unwrap_or(0) as f64)
            };
            match &node.op {
                // Every output element is a dot product over the inner dim.
                Op::Linear | Op::MatMul => total += 2.0 * numel(dims, id) * last(dims, node.args[0]),
                // Its two products, dense: `[.., L, S]` scores over `E`, then over `Ev`.
                Op::Sdpa { .. } => {
                    let k = &program.tensor_type(node.args[1]).shape;
                    let keys = k
                        .iter()
                        .rev()
                        .nth(1)
                        .map_or(0.0, |p| eval(dims, p).unwrap_or(0) as f64);
                    let rows = numel(dims, id) / last(dims, id).max(1.0);
                    total += 2.0 * rows * keys * (last(dims, node.args[0]) + last(dims, id));
                }
                Op::For {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    let (s, e) = (eval(dims, start).unwrap_or(0), eval(dims, end).unwrap_or(0));
                    for i in s..e {
                        if *var < dims.len() {
                            dims[*var] = Some(i);
                        }
                        total += walk(program, body, dims);
                    }
                }
                // No matrix product (the optimizer's fused forms never reach a source
                // program).
                Op::Contiguous
                | Op::Where
                | Op::MaskedFill
                | Op::Gather
                | Op::Param(..)
                | Op::Input(..)
                | Op::Literal(..)
                | Op::DimValue(..)
                | Op::Transpose(..)
                | Op::Permute(..)
                | Op::View(..)
                | Op::Reshape(..)
                | Op::Expand(..)
                | Op::Unsqueeze(..)
                | Op::Squeeze(..)
                | Op::Softmax(..)
                | Op::Fill(..)
                | Op::Unary(..)
                | Op::Binary(..)
                | Op::Compare(..)
                | Op::CatLoop(..)
                | Op::Stack(..)
                | Op::Cat(..)
                | Op::Reduce { .. }
                | Op::Tri { .. }
                | Op::Arange { .. }
                | Op::Slice { .. }
                | Op::StepSlice { .. }
                | Op::Select { .. }
                | Op::IndexCopy { .. }
                | Op::Gemm { .. }
                | Op::MaskedSoftmax { .. }
                | Op::Attention { .. }
                | Op::ScoredAttention { .. } => {}
            }
        }
        total
    }
    let mut dims = dims.to_vec();
    dims.resize(program.dims.len(), None);
    walk(program, &program.body, &mut dims)
}
