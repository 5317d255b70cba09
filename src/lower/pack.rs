//! Weights packed once. A product of at most [`PACKED_ROWS`] rows does a few multiply-adds
//! per element of `b` it reads, so its time is mostly streaming `b`: it reads panels of
//! [`PANEL`] columns front to back. A product of more rows runs the `gemm` crate's
//! microkernel, which reads `b` in strips of [`STRIP`] columns: the crate packs them at
//! every call, which at a few hundred rows is a tenth of the product's time. Where `b` is
//! computed from params alone, a copy laid out in either ([`Gemm::packed`]) is made before
//! the product, which memory planning moves to the prologue with every other kernel that
//! reads params only: once per set of weights.
//!
//! Where the `[in, out]` weight a product reads is laid out by copies only (`linear`'s
//! weight read transposed, the concatenated weights of sibling `linear`s) and read by
//! packed products only, the panels are copied straight from what those copies read and
//! the copies are dropped: the prologue writes the weight once, in one layout.

use super::tiling::PACKED_ROWS;
use super::Lowerer;
use crate::hash::HashMap;
use crate::kernel::{BufId, BufferKind, Expr, Gemm, Kernel, KernelOp, Map, Operand, PANEL, STRIP};

/// The width of the panels the product `g` would read `b` packed in, params aside:
/// [`PANEL`] for few rows, [`STRIP`] for more, where its column blocks start at a panel (a
/// multiple of the width, or one block for all columns).
fn packable(g: &Gemm) -> Option<usize> {
    let width = if g.m <= PACKED_ROWS { PANEL } else { STRIP };
    let cols = g.block.1;
    let starts = cols.is_multiple_of(width) || cols >= g.n;
    (g.packed.is_none() && g.n > 0 && g.k > 0 && starts).then_some(width)
}

/// What a packed copy is made from: `b`'s operand, the batch, `k`, `n` and the panels'
/// width.
type Source = (Operand, Vec<usize>, usize, usize, usize);

/// Columns `first..first + width` of a `[k, total]` row-major buffer, written by one copy
/// from `input` (`[k, width]`, strided).
#[derive(Clone, Debug)]
struct Run {
    first: usize,
    width: usize,
    input: Operand,
}

/// Columns `x0..x1` of one batch index's `b`: column `x` of row `p` is element
/// `offset + p·rs + (x - x0)·cs` of buffer `buf`.
struct Segment {
    x0: usize,
    x1: usize,
    buf: BufId,
    offset: usize,
    rs: usize,
    cs: usize,
}

impl Lowerer<'_> {
    /// Packs the `b` of every main GEMM that [`packable`] accepts and whose `b` is computed
    /// from params; GEMMs that read one `b` the same way share its packed copy. A `b` laid
    /// out by copies that only packed products read is packed from the copies' inputs, and
    /// the copies go.
    pub(super) fn pack_weights(&mut self) {
        let kernels = std::mem::take(&mut self.plan.kernels);
        let packs: Vec<Option<usize>> = kernels
            .iter()
            .map(|k| match &k.op {
                KernelOp::Gemm(g) if self.param_derived(g.b.buf) => packable(g),
                _ => None,
            })
            .collect();
        let mut laid: HashMap<BufId, Option<Vec<Run>>> = HashMap::default();
        for (kernel, _) in kernels.iter().zip(&packs).filter(|p| p.1.is_some()) {
            if let KernelOp::Gemm(g) = &kernel.op {
                laid.entry(g.b.buf)
                    .or_insert_with(|| self.layout_copies(&kernels, &packs, g));
            }
        }
        let mut made: Vec<(Source, Operand)> = Vec::new();
        for (mut kernel, pack) in kernels.into_iter().zip(packs) {
            let out = kernel.op.operands().iter().find(|o| o.2).map(|o| o.0.buf);
            if out.is_some_and(|b| matches!(laid.get(&b), Some(Some(_)))) {
                continue; // a copy whose panels are made from its input
            }
            if let (KernelOp::Gemm(g), Some(width)) = (&mut kernel.op, pack) {
                let key = (g.b.clone(), g.batch.clone(), g.k, g.n, width);
                g.b = match made.iter().find(|(k, _)| *k == key) {
                    Some((_, packed)) => packed.clone(),
                    None => {
                        let runs = laid.get(&g.b.buf).cloned().flatten();
                        let packed = self.pack(g, width, runs.as_deref(), &kernel.label);
                        made.push((key, packed.clone()));
                        packed
                    }
                };
                g.packed = Some(width);
            }
            self.plan.kernels.push(kernel);
        }
        for (buf, runs) in laid {
            if runs.is_some() {
                self.plan.buffers[buf].len = 0; // neither written nor read any more
            }
        }
    }

    /// The copies that lay out `g`'s `b` where they are all its writers, each writes whole
    /// columns of a `[k, total]` row-major temporary (`total` being `b`'s row stride), they
    /// cover it, every batch index of `g` reads whole rows of it, and every reader is a
    /// product that [`Lowerer::pack_weights`] packs, reading it as its `b` only.
    fn layout_copies(&self, kernels: &[Kernel], packs: &[Option<usize>], g: &Gemm) -> Option<Vec<Run>> {
        let (buf, r) = (g.b.buf, g.batch.len());
        let (total, k) = (g.b.strides[r], g.k);
        let temp = matches!(self.plan.buffers[buf].kind, BufferKind::Temp { .. });
        if !temp || self.plan.buffers[buf].len != k * total {
            return None;
        }
        let mut runs = Vec::new();
        for (kernel, &pack) in kernels.iter().zip(packs) {
            let ops = kernel.op.operands();
            let touches = ops.iter().filter(|o| o.0.buf == buf).count();
            if touches == 0 {
                continue;
            }
            match &kernel.op {
                KernelOp::Gemm(h)
                    if pack.is_some() && touches == 1 && h.b.buf == buf && whole_rows(h, k, total) => {}
                KernelOp::Map(m) if touches == 1 && m.out.buf == buf => runs.push(copy_run(m, k, total)?),
                _ => return None,
            }
        }
        runs.sort_by_key(|r| r.first);
        let mut end = 0;
        for run in &runs {
            if run.first != end {
                return None;
            }
            end += run.width;
        }
        (end == total).then_some(runs)
    }

    /// The kernels that copy `g`'s `b` into a new buffer in panels of `width` columns (from
    /// the copies that laid it out, `runs`, where there are), and the packed operand that
    /// reads it: for each batch index whose `b` differs (a broadcast axis is packed once),
    /// the columns of each run in full panels, and the parts of panels at the runs' ends and
    /// `b`'s. A buffer of strips gets [`PANEL`] floats more ([`Gemm::packed`]).
    fn pack(&mut self, g: &Gemm, width: usize, runs: Option<&[Run]>, label: &str) -> Operand {
        let r = g.batch.len();
        let (n, k) = (g.n, g.k);
        let mut strides = vec![0; r];
        let mut len = n * k;
        for i in (0..r).rev() {
            if g.b.strides[i] != 0 {
                strides[i] = len;
                len *= g.batch[i];
            }
        }
        let past = if width == STRIP { PANEL } else { 0 };
        let buf = self.temp(vec![len + past]).buf;
        let label = format!("{label} (weight in panels of {width} columns)");
        let sizes: Vec<usize> = (0..r)
            .map(|i| if strides[i] == 0 { 1 } else { g.batch[i] })
            .collect();
        for index in indices(&sizes) {
            let at = |s: &[usize]| index.iter().zip(s).map(|(i, s)| i * s).sum::<usize>();
            let (b_rs, b_cs) = (g.b.strides[r], g.b.strides[r + 1]);
            let first = g.b.offset + at(&g.b.strides[..r]);
            let segments = match runs {
                Some(runs) => segments(runs, first, n),
                None => vec![Segment {
                    x0: 0,
                    x1: n,
                    buf: g.b.buf,
                    offset: first,
                    rs: b_rs,
                    cs: b_cs,
                }],
            };
            for s in segments {
                self.pack_segment(&s, (n, k, width), (buf, at(&strides)), &label);
            }
        }
        Operand {
            buf,
            offset: 0,
            strides: [&strides[..], &[1, k]].concat(),
        }
    }

    /// The copies of one segment's columns into the panels of `width` columns at `base` of
    /// `out`: full panels as one kernel, a part of a panel (where a segment starts or ends
    /// inside one, or the narrower last panel) as a kernel of its own.
    fn pack_segment(
        &mut self,
        s: &Segment,
        (n, k, width): (usize, usize, usize),
        (out, base): (BufId, usize),
        label: &str,
    ) {
        let mut x = s.x0;
        while x < s.x1 {
            let panel = x / width * width;
            let wide = (n - panel).min(width);
            let full = (s.x1 - panel) / width;
            let input = |strides: &[usize]| Operand {
                buf: s.buf,
                offset: s.offset + (x - s.x0) * s.cs,
                strides: strides.to_vec(),
            };
            let output = |strides: &[usize]| Operand {
                buf: out,
                offset: base + panel * k + (x - panel),
                strides: strides.to_vec(),
            };
            if x == panel && wide == width && full > 0 {
                let shape = vec![full, k, width];
                let into = output(&[width * k, width, 1]);
                self.copy_into(shape, input(&[width * s.cs, s.rs, s.cs]), into, label.to_string());
                x += full * width;
            } else {
                let end = (panel + wide).min(s.x1);
                let into = output(&[wide, 1]);
                self.copy_into(vec![k, end - x], input(&[s.rs, s.cs]), into, label.to_string());
                x = end;
            }
        }
    }

    /// A map that copies `input` to `out`, both strided over `shape`.
    fn copy_into(&mut self, shape: Vec<usize>, input: Operand, out: Operand, label: String) {
        let len = shape.last().copied().unwrap_or(1).max(1);
        let m = Map {
            shape,
            inputs: vec![input],
            expr: vec![Expr::Input(0)],
            out,
            rows_per_task: (8192 / len).max(16),
        };
        self.kernel(label, KernelOp::Map(m));
    }
}

/// Whether every batch index of `g` reads its `b` as whole rows of a `[k, total]`
/// row-major buffer: a row stride of `total`, a unit column stride, at most `k` rows, and
/// the columns inside the first row.
fn whole_rows(g: &Gemm, k: usize, total: usize) -> bool {
    let r = g.batch.len();
    let last: usize = g.batch.iter().zip(&g.b.strides).map(|(&b, &s)| (b - 1) * s).sum();
    g.b.strides[r..] == [total, 1] && g.k <= k && g.b.offset + last + g.n <= total
}

/// The run a copy `m` writes into a `[k, total]` row-major buffer: whole columns of every
/// row, from one strided input.
fn copy_run(m: &Map, k: usize, total: usize) -> Option<Run> {
    let [rows, width] = m.shape[..] else {
        return None;
    };
    let copy = m.expr == [Expr::Input(0)] && m.inputs.len() == 1 && m.inputs[0].strides.len() == 2;
    let whole = rows == k && m.out.strides == [total, 1] && m.out.offset + width <= total;
    (copy && whole).then(|| Run {
        first: m.out.offset,
        width,
        input: m.inputs[0].clone(),
    })
}

/// The columns `0..n` of a `b` whose column 0 is column `first` of the runs' buffer, as the
/// parts of the runs they fall in.
fn segments(runs: &[Run], first: usize, n: usize) -> Vec<Segment> {
    runs.iter()
        .filter(|run| run.first < first + n && first < run.first + run.width)
        .map(|run| {
            let start = run.first.max(first);
            let (rs, cs) = (run.input.strides[0], run.input.strides[1]);
            Segment {
                x0: start - first,
                x1: (run.first + run.width).min(first + n) - first,
                buf: run.input.buf,
                offset: run.input.offset + (start - run.first) * cs,
                rs,
                cs,
            }
        })
        .collect()
}

/// Every index of a batch of `sizes`, in row-major order (one, empty, for no axes).
fn indices(sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &size in sizes {
        all = all
            .into_iter()
            .flat_map(|prefix| (0..size).map(move |i| [&prefix[..], &[i]].concat()))
            .collect();
    }
    all
}
