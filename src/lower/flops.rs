//! The FLOP count `attnc bench` divides by its time.

use crate::dims::Poly;
use crate::ir::{Op, Program, ValueId};

/// 2·m·n·k summed over every `matmul` and `linear` of `program` (and the two products of
/// each `scaled_dot_product_attention`; per loop iteration), what
/// `attnc bench` divides by the time. Give it the source program, not the optimized one.
/// Each op counts its own ([`Op::product_flops`]).
pub fn source_flops(program: &Program, dims: &[Option<i64>]) -> f64 {
    fn walk(program: &Program, body: &[ValueId], dims: &mut Vec<Option<i64>>) -> f64 {
        let mut total = 0.0;
        let eval = |dims: &[Option<i64>], p: &Poly| program.dims.eval(p, &|s| dims.get(s).copied().flatten());
        for &id in body {
            let node = program.node(id);
            let sizes = |dims: &[Option<i64>], v: ValueId| -> Vec<f64> {
                let shape = &program.tensor_type(v).shape;
                shape.iter().map(|p| eval(dims, p).unwrap_or(0) as f64).collect()
            };
            match &node.op {
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
                op => {
                    let operands: Vec<Vec<f64>> = node.args.iter().map(|&a| sizes(dims, a)).collect();
                    total += op.product_flops(&operands, &sizes(dims, id));
                }
            }
        }
        total
    }
    let mut dims = dims.to_vec();
    dims.resize(program.dims.len(), None);
    walk(program, &program.body, &mut dims)
}
