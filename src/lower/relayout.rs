//! Relayout: a kernel writes its result in the order a later `contiguous()` wants, so the
//! layout copy disappears (`(p @ v).transpose(1, 2).contiguous()`: the attention kernel
//! writes `[B, N, H, Dk]` directly).

use super::tiling::gemm_blocks;
use super::{view, Lowerer, Val, View};
use crate::ir::ValueId;
use crate::kernel::{BufferKind, Gemm, KernelOp};

impl Lowerer<'_> {
    /// `x` made row-major without a copy: when `x` is a permutation of a whole temporary
    /// that one kernel wrote and nothing else reads or will read (every value from that
    /// kernel to `x` has one use), the kernel writes its result in `x`'s order instead
    /// (`(p @ v).transpose(1, 2).contiguous()`: attention writes `[B, N, H, Dk]` directly).
    pub(super) fn relayout(&mut self, mut node: ValueId, x: &View) -> Option<View> {
        // Every value that lives in x's buffer, from `node` back to the kernel that made
        // it, must have this one use: then no other value sees the layout change.
        loop {
            if !self.fusion.single[node] {
                return None;
            }
            let shares = |a: &ValueId| matches!(self.vals.get(a), Some(Val::Tensor(v)) if v.buf == x.buf);
            match self.program.node(node).args.iter().find(|a| shares(a)) {
                Some(&a) => node = a,
                None => break,
            }
        }
        let buf = &self.plan.buffers[x.buf];
        let temp = matches!(buf.kind, BufferKind::Temp { .. });
        if !temp || x.offset != 0 || x.numel() != buf.len {
            return None;
        }
        let mut writers = Vec::new();
        for (k, kernel) in self.plan.kernels.iter().enumerate() {
            for (o, shape, written) in kernel.op.operands() {
                match (o.buf == x.buf, written) {
                    (true, true) => writers.push((k, shape)),
                    (true, false) => return None,
                    _ => {}
                }
            }
        }
        let [(k, shape)] = writers.as_slice() else {
            return None;
        };
        let (k, mut shape) = (*k, shape.clone());
        let target = view::row_major(&x.shape);
        let mut op = self.plan.kernels[k].op.clone();
        let mut out = op.operands().into_iter().find(|o| o.2)?.0.clone();
        if out.offset != 0 {
            return None;
        }
        // A GEMM whose batch was folded into its rows may need it back.
        if let KernelOp::Gemm(g) = &mut op {
            if remap(&shape, &out.strides, x, &target).is_none() {
                unfold_rows(g, x)?;
                shape = [g.batch.as_slice(), &[g.m, g.n]].concat();
                out = g.c.clone();
                g.block = gemm_blocks(g);
            }
        }
        out.strides = remap(&shape, &out.strides, x, &target)?;
        // The `gemm` crate writes a column-strided result at about half speed (measured:
        // 0.61 vs 0.34 ms for S's key projection): a copy afterwards is cheaper.
        if matches!(op, KernelOp::Gemm(_)) && out.strides.last() != Some(&1) {
            return None;
        }
        op.set_output(out);
        self.plan.kernels[k].op = op;
        Some(View::whole(x.buf, x.shape.clone()))
    }
}

/// The strides that write, over an iteration space `shape` whose elements a kernel wrote
/// at `strides` into a row-major buffer, the same elements in the order of the view `x` of
/// that buffer (made row-major: `target`). Each iteration axis must cover whole axes of
/// `x` that stay in order and adjacent in `target` (a mixed radix), so its new stride is
/// a single number; `None` otherwise.
fn remap(shape: &[usize], strides: &[usize], x: &View, target: &[usize]) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for (&size, &stride) in shape.iter().zip(strides) {
        if size == 1 {
            out.push(0);
            continue;
        }
        // The axes of x this axis spans, innermost first.
        let (mut covered, mut first, mut next) = (1usize, None, 0usize);
        while covered < size {
            let j = (0..x.shape.len()).find(|&j| x.shape[j] > 1 && x.strides[j] == stride * covered)?;
            match first {
                None => first = Some(target[j]),
                Some(_) if target[j] != next => return None,
                Some(_) => {}
            }
            next = target[j] * x.shape[j];
            covered *= x.shape[j];
        }
        if covered != size {
            return None;
        }
        out.push(first.unwrap_or(0));
    }
    Some(out)
}

/// Undoes [`super::tiling::fold_batch_into_rows`] where the view `x` splits the rows: the rows become a
/// batch axis over blocks of `z` rows, `z` the size of the axis of `x` along the rows.
fn unfold_rows(g: &mut Gemm, x: &View) -> Option<()> {
    // The epilogue's inputs are strided over the folded iteration space.
    if g.epilogue.is_some() {
        return None;
    }
    let r = g.batch.len();
    let c_rs = g.c.strides[r];
    let j = (0..x.shape.len()).find(|&j| x.shape[j] > 1 && x.strides[j] == c_rs)?;
    let z = x.shape[j];
    if z >= g.m || !g.m.is_multiple_of(z) {
        return None;
    }
    g.batch.push(g.m / z);
    g.m = z;
    let a_rs = g.a.strides[r];
    g.a.strides.insert(r, z * a_rs);
    g.b.strides.insert(r, 0);
    g.c.strides.insert(r, z * c_rs);
    Some(())
}
