//! Weights of few-row products packed once. A product of at most [`PACKED_ROWS`] rows does
//! about one multiply-add per element of `b` it reads, so its time is streaming `b`; where
//! `b` is computed from params alone, a copy laid out in panels of [`PANEL`] columns
//! ([`Gemm::packed`]) is made before the product, which memory planning moves to the
//! prologue with every other kernel that reads params only: once per set of weights.

use super::tiling::PACKED_ROWS;
use super::Lowerer;
use crate::kernel::{Expr, Gemm, KernelOp, Map, Operand, PANEL};

/// Whether the product `g` reads `b` packed, params aside: few rows, and column blocks that
/// start at a panel (a multiple of [`PANEL`], or one block for all columns).
fn packable(g: &Gemm) -> bool {
    let cols = g.block.1;
    !g.packed && g.m <= PACKED_ROWS && g.n > 0 && g.k > 0 && (cols.is_multiple_of(PANEL) || cols >= g.n)
}

/// What a packed copy is made from: `b`'s operand, the batch, `k` and `n`.
type Source = (Operand, Vec<usize>, usize, usize);

impl Lowerer<'_> {
    /// Packs the `b` of every main GEMM that [`packable`] accepts and whose `b` is computed
    /// from params; GEMMs that read one `b` the same way share its packed copy.
    pub(super) fn pack_weights(&mut self) {
        let kernels = std::mem::take(&mut self.plan.kernels);
        let mut made: Vec<(Source, Operand)> = Vec::new();
        for mut kernel in kernels {
            if let KernelOp::Gemm(g) = &mut kernel.op {
                if packable(g) && self.param_derived(g.b.buf) {
                    let key = (g.b.clone(), g.batch.clone(), g.k, g.n);
                    g.b = match made.iter().find(|(k, _)| *k == key) {
                        Some((_, packed)) => packed.clone(),
                        None => {
                            let packed = self.pack(g, &kernel.label);
                            made.push((key, packed.clone()));
                            packed
                        }
                    };
                    g.packed = true;
                }
            }
            self.plan.kernels.push(kernel);
        }
    }

    /// The kernels that copy `g`'s `b` into a new buffer in panels, and the packed operand
    /// that reads it: for each batch index whose `b` differs (a broadcast axis is packed
    /// once), the full panels, then the narrower last one.
    fn pack(&mut self, g: &Gemm, label: &str) -> Operand {
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
        let batch: Vec<usize> = (0..r)
            .map(|i| if strides[i] == 0 { 1 } else { g.batch[i] })
            .collect();
        let buf = self.temp(vec![len]).buf;
        let (b_rs, b_cs) = (g.b.strides[r], g.b.strides[r + 1]);
        let label = format!("{label} (weight in panels of {PANEL} columns)");
        let (full, tail) = (n / PANEL, n % PANEL);
        let with = |tail: [usize; 3]| [&batch[..], &tail[..]].concat();
        let part = |first: usize, width: usize, offset: usize| {
            let input = Operand {
                buf: g.b.buf,
                offset: g.b.offset + first * b_cs,
                strides: [&g.b.strides[..r], &[width * b_cs, b_rs, b_cs]].concat(),
            };
            let out = Operand {
                buf,
                offset,
                strides: [&strides[..], &[width * k, width, 1]].concat(),
            };
            (input, out)
        };
        if full > 0 {
            let (input, out) = part(0, PANEL, 0);
            self.copy_into(with([full, k, PANEL]), input, out, label.clone());
        }
        if tail > 0 {
            let (input, out) = part(n - tail, tail, (n - tail) * k);
            self.copy_into(with([1, k, tail]), input, out, label);
        }
        Operand {
            buf,
            offset: 0,
            strides: [&strides[..], &[1, k]].concat(),
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
