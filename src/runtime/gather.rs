//! What both backends share about gathers (`embedding(ids, weight)`, `weight[ids]`): the
//! check that an id names a row, and the error that names where a bad id came from. Each
//! backend gathers with its own code.

use super::RunError;
use crate::diagnostic::Code;
use crate::ir::{Op, Program, ValueId};

/// The row `value` names in a table of `rows` rows: an integer in `0..rows`.
pub fn row(value: f32, rows: usize) -> Option<usize> {
    (value >= 0.0 && value.fract() == 0.0 && (value as usize) < rows).then_some(value as usize)
}

/// E0306 for the id `value` at `position` (an index into the ids' shape `shape`) of the
/// gather node `gather`, whose table has `rows` rows.
pub fn out_of_range(
    program: &Program,
    gather: ValueId,
    flat: usize,
    shape: &[usize],
    value: f32,
    rows: usize,
) -> RunError {
    let node = program.node(gather);
    let ids = quoted(program, node.args[1]);
    let table = source(program, node.args[0]);
    let position = unflatten(flat, shape);
    RunError::new(
        Some(Code::E0306),
        format!("{ids} holds {value} at {position:?}, outside the {rows} rows of {table}"),
    )
    .with_hint(format!("give ids from 0 to {}", rows.saturating_sub(1)))
}

/// E0306 for the position `value` at `at` of the index of the `index_copy` node `copy`,
/// outside the `size` slices of the axis it writes.
pub fn copy_out_of_range(program: &Program, copy: ValueId, at: usize, value: f32, size: usize) -> RunError {
    let node = program.node(copy);
    let index = quoted(program, node.args[1]);
    let target = source(program, node.args[0]);
    let Op::IndexCopy { axis, .. } = node.op else {
        unreachable!("copy_out_of_range is called on an index_copy")
    };
    RunError::new(
        Some(Code::E0306),
        format!("{index} holds {value} at [{at}], outside the {size} positions of axis {axis} of {target}"),
    )
    .with_hint(format!("give positions from 0 to {}", size.saturating_sub(1)))
}

/// What holds the ids or positions `id` whose value and position a message quotes: the
/// input itself (`input `input_ids``) when the op reads it as it is, else `a tensor computed
/// from input `x``: the value of `W[(x * 1000).long()]` at `[0, 0]` is -644 where `x` holds
/// -0.644, and that of `W[ids.t()]` at `[1, 0]` is `ids`' at `[0, 1]`.
fn quoted(program: &Program, id: ValueId) -> String {
    let made_from = source(program, id);
    match program.node(id).op {
        Op::Input(_) => made_from,
        _ if made_from == COMPUTED => made_from,
        _ => format!("a tensor computed from {made_from}"),
    }
}

/// How [`source`] names what it cannot follow to an input or a weight.
const COMPUTED: &str = "a computed tensor";

/// `input `input_ids``, `weight `embeddings.word_embeddings.weight``, or `a computed
/// value`: what a gather's operand was made from, following conversions and views.
pub fn source(program: &Program, mut id: ValueId) -> String {
    loop {
        let node = program.node(id);
        match &node.op {
            Op::Input(i) if program.inputs[*i].state => {
                return format!("state `{}`", program.inputs[*i].name)
            }
            Op::Input(i) => return format!("input `{}`", program.inputs[*i].name),
            Op::Param(i) => return format!("weight `{}`", program.params[*i].key),
            // A state's next version is the state still.
            Op::IndexCopy { .. } => id = node.args[0],
            _ => match node.args.first() {
                Some(&a) if node.args.len() <= 2 => id = a,
                _ => return COMPUTED.to_string(),
            },
        }
    }
}

fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &n) in shape.iter().enumerate().rev() {
        index[i] = flat % n.max(1);
        flat /= n.max(1);
    }
    index
}
