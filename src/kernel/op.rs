//! What a kernel op costs (its tasks, work, FLOPs, bytes and scratch), what it reads and
//! writes, and the key its machine code is cached under.

use super::*;

fn ceil_div(a: usize, b: usize) -> usize {
    a.div_ceil(b.max(1))
}

impl KernelOp {
    /// The number of independent tasks.
    pub fn tasks(&self) -> usize {
        match self {
            KernelOp::Gemm(g) => product(&g.batch[..g.batch.len() - usize::from(g.paired())])
                .saturating_mul(ceil_div(g.m, g.block.0))
                .saturating_mul(ceil_div(g.n, g.block.1)),
            KernelOp::Softmax(s) => ceil_div(rows(&s.shape), s.rows_per_task),
            KernelOp::Attention(a) => product(&a.batch)
                .saturating_mul(ceil_div(a.n, a.block.0))
                .saturating_mul(a.split.map_or(1, |s| s.chunks)),
            KernelOp::Map(m) => ceil_div(rows(&m.shape), m.rows_per_task),
            KernelOp::Row(r) => ceil_div(product(&r.rows), r.rows_per_task),
            KernelOp::Scatter(_) => 1,
            KernelOp::KeyRanges(r) => product(&r.batch).saturating_mul(r.row_tasks()),
        }
    }

    /// A rough count of the kernel's arithmetic (flops; ten per element for the others),
    /// to tell a program worth spreading over threads from one that is not. In floats, so
    /// that no size can overflow it.
    pub fn work(&self) -> f64 {
        let f = |sizes: &[usize]| sizes.iter().map(|&n| n as f64).product::<f64>();
        match self {
            KernelOp::Gemm(g) => 2.0 * f(&g.batch) * f(&[g.m, g.n, g.k]),
            KernelOp::Attention(a) => {
                let scores = f(&a.batch) * f(&[a.n, a.m]);
                2.0 * scores * (a.dk + a.dv) as f64 + 30.0 * scores
            }
            KernelOp::Softmax(s) => 30.0 * f(&s.shape),
            KernelOp::Map(m) => 10.0 * f(&m.shape),
            KernelOp::Row(r) => 10.0 * (r.stages.len() + 1) as f64 * r.n as f64 * f(&r.rows),
            KernelOp::Scatter(s) => f(&s.shape),
            // A compare per mask element at most.
            KernelOp::KeyRanges(r) => f(&r.batch) * f(&[r.n, r.m]),
        }
    }

    /// The arithmetic of the kernel's matrix products (2 per multiply-add; attention's two
    /// products counted dense, masked pairs included, as the peers count them); 0 for the
    /// kernels without one.
    pub fn flops(&self) -> f64 {
        let f = |sizes: &[usize]| sizes.iter().map(|&n| n as f64).product::<f64>();
        match self {
            KernelOp::Gemm(g) => 2.0 * f(&g.batch) * f(&[g.m, g.n, g.k]),
            KernelOp::Attention(a) => 2.0 * f(&a.batch) * f(&[a.n, a.m]) * (a.dk + a.dv) as f64,
            KernelOp::Softmax(_)
            | KernelOp::Map(_)
            | KernelOp::Row(_)
            | KernelOp::Scatter(_)
            | KernelOp::KeyRanges(_) => 0.0,
        }
    }

    /// The bytes the kernel reads and writes, each element counted once (what it moves
    /// between memory and the cores at best): for each operand, the elements its strides
    /// reach, so a broadcast axis counts once.
    pub fn bytes(&self) -> usize {
        // A scatter's output operand spans its window, of which it writes the source's size.
        if let KernelOp::Scatter(s) = self {
            return 4 * (s.shape[s.axis] + 2 * s.shape.iter().product::<usize>());
        }
        self.operands()
            .iter()
            .map(|(op, shape, _)| {
                let reached: usize = shape
                    .iter()
                    .zip(&op.strides)
                    .filter(|&(_, &s)| s != 0)
                    .map(|(&n, _)| n)
                    .product();
                reached * 4
            })
            .sum()
    }

    /// Floats of per-thread scratch a task needs.
    pub fn scratch(&self) -> usize {
        match self {
            KernelOp::Attention(a) => 2 * a.block.0 + a.block.0 * a.block.1 + a.block.1,
            _ => 0,
        }
    }

    /// Every operand with the iteration shape it is read over, and whether it is written.
    pub fn operands(&self) -> Vec<(&Operand, Vec<usize>, bool)> {
        match self {
            KernelOp::Gemm(g) => {
                let with = |tail: [usize; 2]| [g.batch.as_slice(), &tail].concat();
                let mut v = vec![
                    (&g.a, with([g.m, g.k]), false),
                    (&g.b, with([g.k, g.n]), false),
                    (&g.c, with([g.m, g.n]), true),
                ];
                if let Some(bias) = &g.bias {
                    v.push((bias, vec![g.n], false));
                }
                for input in g.epilogue.iter().flat_map(|e| &e.inputs) {
                    v.push((input, with([g.m, g.n]), false));
                }
                for r in &g.rope {
                    v.push((&r.cos, r.table_shape(g.m), false));
                    v.push((&r.sin, r.table_shape(g.m), false));
                }
                v
            }
            KernelOp::Softmax(s) => {
                let mut v = vec![(&s.x, s.shape.clone(), false), (&s.out, s.shape.clone(), true)];
                if let Some(mask) = &s.mask {
                    v.push((&mask.mask, s.shape.clone(), false));
                }
                v
            }
            KernelOp::Attention(a) => {
                let with = |tail: [usize; 2]| [a.batch.as_slice(), &tail].concat();
                let kv_batch = a.kv_batch();
                let kv = |tail: [usize; 2]| [kv_batch.as_slice(), &tail].concat();
                let head = a.m - a.tail.as_ref().map_or(0, |t| t.len.min(a.m));
                let out = match a.split {
                    Some(s) => [a.batch.as_slice(), &[s.chunks, a.n, a.dv + 2]].concat(),
                    None => with([a.n, a.dv]),
                };
                let mut v = vec![
                    (&a.q, with([a.n, a.dk]), false),
                    (&a.k, kv([head, a.dk]), false),
                    (&a.v, kv([head, a.dv]), false),
                    (&a.out, out, true),
                ];
                if let Some(mask) = &a.mask {
                    v.push((&mask.mask, with([a.n, a.m]), false));
                }
                for input in a.score.iter().flat_map(|s| &s.inputs) {
                    v.push((input, with([a.n, a.m]), false));
                }
                if let Some(t) = &a.tail {
                    v.push((&t.k, kv([t.len, a.dk]), false));
                    v.push((&t.v, kv([t.len, a.dv]), false));
                }
                if let Some(ranges) = &a.ranges {
                    v.push((ranges, with([a.row_tasks(), RANGE_FLOATS]), false));
                }
                v
            }
            KernelOp::Map(m) => {
                let mut v: Vec<_> = m.inputs.iter().map(|i| (i, m.shape.clone(), false)).collect();
                v.push((&m.out, m.shape.clone(), true));
                v
            }
            KernelOp::Row(r) => {
                let shape = [r.rows.as_slice(), &[r.n]].concat();
                let mut v: Vec<_> = r.inputs.iter().map(|i| (i, shape.clone(), false)).collect();
                v.push((&r.out, r.out_shape(), true));
                v
            }
            KernelOp::Scatter(s) => vec![
                (&s.index, vec![s.shape[s.axis]], false),
                (&s.source, s.shape.clone(), false),
                (&s.out, s.out_shape(), true),
            ],
            KernelOp::KeyRanges(r) => {
                let mask = [r.batch.as_slice(), &[r.n, r.m]].concat();
                vec![(&r.mask.mask, mask, false), (&r.out, r.out_shape(), true)]
            }
        }
    }

    /// The same kernel with every operand's buffer and offset cleared: two kernels equal in
    /// this form compile to the same code (offsets are added to the pointers at run time).
    pub fn code_key(&self) -> KernelOp {
        let mut k = self.clone();
        let clear = |o: &mut Operand| {
            o.buf = 0;
            o.offset = 0;
        };
        match &mut k {
            KernelOp::Gemm(g) => {
                [&mut g.a, &mut g.b, &mut g.c].into_iter().for_each(clear);
                g.bias.iter_mut().for_each(clear);
                g.epilogue
                    .iter_mut()
                    .for_each(|e| e.inputs.iter_mut().for_each(clear));
                for r in &mut g.rope {
                    [&mut r.cos, &mut r.sin].into_iter().for_each(clear);
                }
            }
            KernelOp::Softmax(s) => {
                [&mut s.x, &mut s.out].into_iter().for_each(clear);
                s.mask.iter_mut().for_each(|m| clear(&mut m.mask));
            }
            KernelOp::Attention(a) => {
                [&mut a.q, &mut a.k, &mut a.v, &mut a.out]
                    .into_iter()
                    .for_each(clear);
                a.mask.iter_mut().for_each(|m| clear(&mut m.mask));
                a.score
                    .iter_mut()
                    .for_each(|s| s.inputs.iter_mut().for_each(clear));
                if let Some(t) = &mut a.tail {
                    [&mut t.k, &mut t.v].into_iter().for_each(clear);
                }
                a.ranges.iter_mut().for_each(clear);
            }
            KernelOp::Map(m) => {
                m.inputs.iter_mut().for_each(clear);
                clear(&mut m.out);
            }
            KernelOp::Row(r) => {
                r.inputs.iter_mut().for_each(clear);
                clear(&mut r.out);
            }
            KernelOp::Scatter(s) => {
                [&mut s.index, &mut s.source, &mut s.out]
                    .into_iter()
                    .for_each(clear);
                s.names = Default::default();
            }
            KernelOp::KeyRanges(r) => [&mut r.mask.mask, &mut r.out].into_iter().for_each(clear),
        }
        k
    }

    /// Replaces the operand the kernel writes.
    pub fn set_output(&mut self, out: Operand) {
        match self {
            KernelOp::Gemm(g) => g.c = out,
            KernelOp::Softmax(s) => s.out = out,
            KernelOp::Attention(a) => a.out = out,
            KernelOp::Map(m) => m.out = out,
            KernelOp::Row(r) => r.out = out,
            KernelOp::Scatter(s) => s.out = out,
            KernelOp::KeyRanges(r) => r.out = out,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            KernelOp::Gemm(_) => "gemm",
            KernelOp::Softmax(_) => "softmax",
            KernelOp::Attention(_) => "attention",
            KernelOp::Map(_) => "map",
            KernelOp::Row(_) => "row",
            KernelOp::Scatter(_) => "scatter",
            KernelOp::KeyRanges(_) => "ranges",
        }
    }
}

/// The number of rows of a shape whose last axis is the row (a rank-0 shape has one).
pub fn rows(shape: &[usize]) -> usize {
    shape.split_last().map_or(1, |(_, outer)| product(outer))
}

/// The product of sizes, saturating (a validated plan's products are all in range).
pub(super) fn product(sizes: &[usize]) -> usize {
    sizes.iter().fold(1usize, |p, &n| p.saturating_mul(n))
}
