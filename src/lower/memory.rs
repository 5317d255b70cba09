//! Memory planning: kernels that read params only move to the prologue and their results
//! become derived buffers (computed once per set of weights); every other temporary gets an
//! offset in one arena, first fit among the temporaries live at the same time, so a dead
//! temporary's memory is reused. Across the layers of a model this keeps the arena at a
//! few activations, and the prepared memory at the derived weights the kernels read (the
//! steps towards them, such as a scaled weight before it is merged, reuse one another's
//! memory as temporaries do).

use crate::kernel::{Buffer, BufferKind, Kernel, Plan};

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
    // A derived buffer only the prologue reads (the scaled weight that goes into a merged
    // one) is dead once its last reader ran, and its memory is reused like a temporary's;
    // one the main kernels read lives from its writer on.
    let derived: Vec<usize> = (0..plan.buffers.len())
        .filter(|&b| derived[b] == Some(true))
        .collect();
    let mut live = live_ranges(&plan.prologue, plan.buffers.len());
    for k in &plan.kernels {
        for (o, _, _) in k.op.operands() {
            if let Some(r) = live[o.buf].as_mut() {
                r.1 = KEPT;
            }
        }
    }
    let (offsets, len) = first_fit(&derived, &live, &plan.buffers);
    for (b, offset) in derived.into_iter().zip(offsets) {
        let live = live[b].unwrap_or((0, KEPT));
        plan.buffers[b].kind = BufferKind::Derived { offset, live };
    }
    plan.derived_len = len;
}

/// The end of the live range of a derived buffer that the main kernels read.
pub const KEPT: usize = usize::MAX;

/// Each buffer's first and last kernel among `kernels`.
fn live_ranges(kernels: &[Kernel], buffers: usize) -> Vec<Option<(usize, usize)>> {
    let mut live: Vec<Option<(usize, usize)>> = vec![None; buffers];
    for (k, kernel) in kernels.iter().enumerate() {
        for (op, _, _) in kernel.op.operands() {
            let r = live[op.buf].get_or_insert((k, k));
            r.1 = k;
        }
    }
    live
}

/// An offset for each of `bufs`, first fit among those live at the same time (taken in
/// order of their first use), and the length of the memory they need in all.
fn first_fit(bufs: &[usize], live: &[Option<(usize, usize)>], buffers: &[Buffer]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by_key(|&i| (live[bufs[i]].map_or(0, |r| r.0), bufs[i]));
    let mut offsets = vec![0; bufs.len()];
    // (offset, len, last use) of the placed buffers.
    let mut placed: Vec<(usize, usize, usize)> = Vec::new();
    let mut total = 0;
    for i in order {
        let range = live[bufs[i]].unwrap_or((0, 0));
        let len = aligned(buffers[bufs[i]].len);
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
        total = total.max(offset.saturating_add(len));
        offsets[i] = offset;
    }
    (offsets, total)
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
    let live = live_ranges(&plan.kernels, plan.buffers.len());
    let temps: Vec<usize> = (0..plan.buffers.len())
        .filter(|&b| matches!(plan.buffers[b].kind, BufferKind::Temp { .. }))
        .collect();
    let (offsets, len) = first_fit(&temps, &live, &plan.buffers);
    for (b, offset) in temps.into_iter().zip(offsets) {
        let live = live[b].unwrap_or((0, 0));
        plan.buffers[b].kind = BufferKind::Temp { offset, live };
    }
    plan.arena_len = len;
}
