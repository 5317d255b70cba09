//! The native backend's gathers: `weight[input_ids]` runs on the host before the compiled
//! plan, and the plan reads its result as one more input.
//!
//! A gather whose table is a weight and whose ids are an input depends on nothing the plan
//! computes, so it is taken out of the program before the optimizer (which has no gather)
//! and done here, row by row, each id checked against the table (E0306). What the plan
//! sees in its place is an input node of the gather's type. A gather by ids the program
//! computes, or from a table it computes, is refused (E0307: the interpreter runs it).

use super::gather;
use super::{Bound, RunError, Tensor};
use crate::diagnostic::Code;
use crate::ir::{DType, InputDecl, Op, Program, ValueId};

/// A program without its gathers, and how to compute them from a [`Bound`].
pub struct Hoisted {
    pub program: Program,
    gathers: Vec<HostGather>,
}

/// One gather taken out: `params[table][inputs[ids]]`, the node `node` of the original
/// program, now the input `input`.
struct HostGather {
    node: ValueId,
    table: usize,
    ids: usize,
}

/// E0307: a gather the host cannot do, which the interpreter runs.
fn unsupported(message: &str) -> RunError {
    RunError::new(Some(Code::E0307), message).with_hint("run with `--backend interp`")
}

/// `program` with each gather replaced by a new input; E0307 for the first gather the host
/// cannot do.
pub fn hoist(program: &Program) -> Result<Hoisted, RunError> {
    let mut out = program.clone();
    let mut gathers = Vec::new();
    for (id, node) in program.nodes.iter().enumerate() {
        if node.op != Op::Gather {
            continue;
        }
        let (table, ids) = (program.node(node.args[0]), program.node(node.args[1]));
        let (Op::Param(t), Op::Input(i)) = (&table.op, &ids.op) else {
            return Err(unsupported(
                "the native backend gathers rows of a weight by an input's ids only",
            ));
        };
        if !program.body.contains(&id) {
            return Err(unsupported(
                "the native backend does not gather inside a `for` over heads",
            ));
        }
        out.inputs.push(InputDecl {
            name: format!("{}[{}]", program.params[*t].name, program.inputs[*i].name),
            shape: program.tensor_type(id).shape.clone(),
            dtype: DType::F32,
            mask_only: false,
            state: false,
            span: node.span,
        });
        out.nodes[id].op = Op::Input(out.inputs.len() - 1);
        out.nodes[id].args.clear();
        gathers.push(HostGather {
            node: id,
            table: *t,
            ids: *i,
        });
    }
    Ok(Hoisted {
        program: out,
        gathers,
    })
}

impl Hoisted {
    /// Appends each gather's result to `bound.inputs`, in the order [`hoist`] declared
    /// them (E0306 for an id outside its table).
    pub fn gather_inputs(&self, original: &Program, bound: &mut Bound) -> Result<(), RunError> {
        let inputs: Vec<(&[usize], &[f32])> =
            bound.inputs.iter().map(|t| (&t.shape[..], &t.data[..])).collect();
        let gathered = self.gather(original, &bound.params, &inputs)?;
        bound.inputs.extend(gathered);
        Ok(())
    }

    /// Each gather's result, in the order [`hoist`] declared them, from the weights and the
    /// inputs' shapes and values (E0306 for an id outside its table).
    pub fn gather(
        &self,
        original: &Program,
        params: &[Tensor],
        inputs: &[(&[usize], &[f32])],
    ) -> Result<Vec<Tensor>, RunError> {
        let mut out = Vec::with_capacity(self.gathers.len());
        for g in &self.gathers {
            let (table, (shape, ids)) = (&params[g.table], inputs[g.ids]);
            let rows = table.shape.first().copied().unwrap_or(0);
            let width: usize = table.shape[1..].iter().product();
            let mut data = Vec::with_capacity(ids.len() * width);
            for (k, &value) in ids.iter().enumerate() {
                let Some(row) = gather::row(value, rows) else {
                    return Err(gather::out_of_range(original, g.node, k, shape, value, rows));
                };
                data.extend_from_slice(&table.data[row * width..(row + 1) * width]);
            }
            out.push(Tensor::new([shape, &table.shape[1..]].concat(), data));
        }
        Ok(out)
    }
}
