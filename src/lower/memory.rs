//! Memory planning: kernels that read params only move to the prologue and their results
//! become derived buffers (computed once per set of weights); every other temporary gets an
//! offset in one arena, first fit among the temporaries live at the same time, so a dead
//! temporary's memory is reused.

use crate::kernel::{BufferKind, Plan};

/// Moves every kernel whose buffer is computed from params alone to the prologue.
fn hoist(plan: &mut Plan) {
    // derived[b]: every writer of b so far read params and derived buffers only. All writes
    // of a buffer come before its first read, so the answer is final when it is read.
    let mut derived: Vec<Option<bool>> = vec![None; plan.buffers.len()];
    for k in &plan.kernels {
        let ops = k.op.operands();
        let reads_params = ops.iter().filter(|o| !o.2).all(|(o, _, _)| {
            matches!(plan.buffers[o.buf].kind, BufferKind::Param(_)) || derived[o.buf] == Some(true)
        });
        for (o, _, written) in &ops {
            if *written {
                let temp = matches!(plan.buffers[o.buf].kind, BufferKind::Temp { .. });
                let d = &mut derived[o.buf];
                *d = Some(temp && reads_params && d.unwrap_or(true));
            }
        }
    }
    let kernels = std::mem::take(&mut plan.kernels);
    for k in kernels {
        let out = k.op.operands().iter().find(|o| o.2).map(|o| o.0.buf);
        match out.is_some_and(|b| derived[b] == Some(true)) {
            true => plan.prologue.push(k),
            false => plan.kernels.push(k),
        }
    }
    let mut offset = 0;
    for (b, d) in derived.iter().enumerate() {
        if *d == Some(true) {
            plan.buffers[b].kind = BufferKind::Derived { offset };
            offset = offset.saturating_add(aligned(plan.buffers[b].len));
        }
    }
    plan.derived_len = offset;
}

/// Offsets are multiples of this many floats (64 bytes, a cache line).
const ALIGN: usize = 16;

/// `len` rounded up to [`ALIGN`]. Sums saturate: a saturated plan fails the budget and
/// `Plan::validate`, where a wrapped one could pass.
fn aligned(len: usize) -> usize {
    len.div_ceil(ALIGN).saturating_mul(ALIGN)
}

pub fn plan(plan: &mut Plan) {
    hoist(plan);
    // Live range of every temporary: from its first to its last kernel.
    let mut live: Vec<Option<(usize, usize)>> = vec![None; plan.buffers.len()];
    for (k, kernel) in plan.kernels.iter().enumerate() {
        for (op, _, _) in kernel.op.operands() {
            let r = live[op.buf].get_or_insert((k, k));
            r.1 = k;
        }
    }
    let mut order: Vec<usize> = (0..plan.buffers.len())
        .filter(|&b| matches!(plan.buffers[b].kind, BufferKind::Temp { .. }))
        .collect();
    order.sort_by_key(|&b| (live[b].map_or(0, |r| r.0), b));
    // (offset, len, last use) of the placed temporaries.
    let mut placed: Vec<(usize, usize, usize)> = Vec::new();
    let mut arena = 0;
    for b in order {
        let range = live[b].unwrap_or((0, 0));
        let len = aligned(plan.buffers[b].len);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 >= range.0)
            .map(|p| (p.0, p.1))
            .collect();
        busy.sort_unstable();
        let mut offset = 0usize;
        for (o, l) in busy {
            if o >= offset.saturating_add(len) {
                break;
            }
            offset = offset.max(o.saturating_add(l));
        }
        placed.push((offset, len, range.1));
        arena = arena.max(offset.saturating_add(len));
        plan.buffers[b].kind = BufferKind::Temp { offset, live: range };
    }
    plan.arena_len = arena;
}
