//! Where a task of an attention kernel lies: a block of query rows of one batch index, and
//! with a split one chunk of the block's keys. The key ranges kernel computed for an
//! attention kernel numbers its tasks the same way, one table entry for each.

use super::emit::Emit;
use crate::kernel::KeySplit;
use cranelift_codegen::ir::{InstBuilder, Value};

/// Where a task lies: its batch index, its first query row and how many, and with a split
/// its chunk and the chunk's keys `[c0, c1)` (without, `chunk` is the task's number).
pub struct Place {
    pub idx: Vec<Value>,
    pub i0: Value,
    pub rows: Value,
    pub chunk: Value,
    pub keys: Option<(Value, Value)>,
}

/// Where task `t` lies, for tasks of blocks of `br` of the `n` query rows of each index of
/// `batch`, and with a split, chunks of the `m` keys of each block: the attention kernel's
/// tasks, and the key ranges kernel's, which computes an entry for each.
pub fn place(
    e: &mut Emit,
    t: Value,
    batch: &[usize],
    (n, br, m): (usize, usize, usize),
    split: Option<KeySplit>,
) -> Place {
    let nb = n.div_ceil(br);
    // With a split, the task is a chunk of the keys of a block of rows: its keys are
    // [c0, c1).
    let (t, chunk, keys) = match split {
        Some(s) => {
            let chunk = e.b.ins().urem_imm_u(t, s.chunks as i64);
            let c0 = e.b.ins().imul_imm_s(chunk, s.len as i64);
            let c1 = e.b.ins().iadd_imm_s(c0, s.len as i64);
            let m = e.int(m as i64);
            let c1 = e.min_usize(c1, m);
            (e.b.ins().udiv_imm_u(t, s.chunks as i64), chunk, Some((c0, c1)))
        }
        None => (t, t, None),
    };
    let block = e.b.ins().urem_imm_u(t, nb as i64);
    let bi = e.b.ins().udiv_imm_u(t, nb as i64);
    let idx = e.unflatten(bi, batch);
    let i0 = e.b.ins().imul_imm_s(block, br as i64);
    let n_all = e.int(n as i64);
    let left = e.b.ins().isub(n_all, i0);
    let br_v = e.int(br as i64);
    let rows = e.min_usize(br_v, left);
    Place {
        idx,
        i0,
        rows,
        chunk,
        keys,
    }
}
