//! Flash-decoding: an attention kernel with too few tasks for the threads (a decode step: a
//! few query rows of one or two key/value heads over a long cache) has its keys cut into
//! chunks, each chunk of each block of rows a task of its own, and a row kernel merges the
//! chunks' partial results (log-sum-exp) and normalizes them.
//!
//! The cut is decided from the shape alone, as every cut into tasks is (`tiling`): a plan is
//! the same for every thread count, and so are the bits it computes.

use super::Lowerer;
use crate::ir::CmpOp;
use crate::kernel::{Attention, BinaryOp, Expr, KernelOp, KeySplit, Operand, ReduceOp, Row, Stage, UnaryOp};

/// Below this many tasks an attention kernel's keys are split: four tasks for each of four
/// threads. The plan cannot ask the thread count (every count must compute the same bits),
/// so the bar is fixed; at 2 threads it splits what has fewer than 8 tasks per thread.
const TASKS: usize = 16;

/// The fewest keys in a chunk: a task then reads at least 512 keys and values (256 KiB at
/// 64 floats each), far more than the merge costs per chunk (`dv + 2` floats per row).
const MIN_CHUNK: usize = 512;

/// How `a`'s keys are split, if at all: where it has fewer than [`TASKS`] tasks, into
/// chunks of a whole number of key blocks, at least [`MIN_CHUNK`] keys, and as many as make
/// about [`TASKS`] tasks (the last chunk holds what is left); never fewer than
/// `2 ×` [`MIN_CHUNK`] keys.
pub fn key_split(a: &Attention) -> Option<KeySplit> {
    let tasks = KernelOp::Attention(Box::new(a.clone())).tasks();
    if tasks == 0 || tasks >= TASKS || a.m < 2 * MIN_CHUNK || a.split.is_some() {
        return None;
    }
    let want = a.m.div_ceil(TASKS.div_ceil(tasks));
    let len = want.max(MIN_CHUNK).next_multiple_of(a.block.1.max(1));
    let chunks = a.m.div_ceil(len);
    (chunks > 1).then_some(KeySplit { len, chunks })
}

/// The row kernel that merges the chunks of `partial` (the split kernel's output, strided
/// over `[batch.., chunks, n, dv + 2]`) into `out` (over `[batch.., n, dv]`): per output
/// element, over the chunks `c` with maxima `m_c`, sums `l_c` and outputs `o_c`,
/// `M = max m_c` (0 where every `m_c` is `-inf`: no key kept so far), then
/// `out = Σ e^(m_c - M) o_c / Σ e^(m_c - M) l_c`. A chunk whose keys are all removed has
/// `m_c = -inf`, so the weight 0 and no say; a row with no key left anywhere divides 0 by 0
/// (NaN, `softmax`'s meaning) or is 0 with `zero_empty_rows` (SDPA's). Under a finite fill
/// the removed keys' scores are finite and weigh as they do in the unsplit kernel.
pub fn merge(a: &Attention, split: KeySplit, partial: &Operand, out: Operand) -> Row {
    let r = a.batch.len();
    let p = &partial.strides;
    let (chunk, row, col) = (p[r], p[r + 1], p[r + 2]);
    let column = |at: usize, step: usize| Operand {
        buf: partial.buf,
        offset: partial.offset + at * col,
        strides: [&p[..r], &[row, step, chunk]].concat(),
    };
    let weighted = |input: usize| {
        vec![
            Expr::Reduced(0),
            Expr::Const(f32::NEG_INFINITY),
            Expr::Compare(CmpOp::Eq, 0, 1),
            Expr::Const(0.0),
            Expr::Select(2, 3, 0),
            Expr::Input(0),
            Expr::Binary(BinaryOp::Sub, 5, 4),
            Expr::Unary(UnaryOp::Exp, 6),
            Expr::Input(input),
            Expr::Binary(BinaryOp::Mul, 7, 8),
        ]
    };
    let mut write = vec![
        Expr::Reduced(2),
        Expr::Reduced(1),
        Expr::Binary(BinaryOp::Div, 0, 1),
    ];
    if a.zero_empty_rows {
        write.extend([
            Expr::Const(0.0),
            Expr::Compare(CmpOp::Eq, 1, 3),
            Expr::Select(4, 3, 2),
        ]);
    }
    Row {
        rows: [a.batch.as_slice(), &[a.n, a.dv]].concat(),
        n: split.chunks,
        inputs: vec![column(a.dv, 0), column(a.dv + 1, 0), column(0, col)],
        stages: vec![
            Stage {
                reduce: ReduceOp::Max,
                expr: vec![Expr::Input(0)],
            },
            Stage {
                reduce: ReduceOp::Sum,
                expr: weighted(1),
            },
            Stage {
                reduce: ReduceOp::Sum,
                expr: weighted(2),
            },
        ],
        write,
        out,
        rows_per_task: (8192 / split.chunks).max(16),
    }
}

impl Lowerer<'_> {
    /// Adds attention kernel `a`: grouped query heads folded into rows where that keeps the
    /// result, and its keys split, followed by the merge, where it has too few tasks; its
    /// mask's key ranges found before it where the heads share them (`key_ranges`).
    pub(super) fn attention_kernel(&mut self, label: String, a: Attention) {
        let a = a.fold_query_groups().unwrap_or(a);
        let Some(split) = key_split(&a) else {
            let a = self.key_ranges(&label, a);
            return self.kernel(label, KernelOp::Attention(Box::new(a)));
        };
        let shape = [a.batch.as_slice(), &[split.chunks, a.n, a.dv + 2]].concat();
        let partial = self.temp(shape).operand();
        let merge = merge(&a, split, &partial, a.out.clone());
        let a = Attention {
            out: partial,
            split: Some(split),
            ..a
        };
        let a = self.key_ranges(&label, a);
        self.kernel(label.clone(), KernelOp::Attention(Box::new(a)));
        self.kernel(format!("{label} (merge of the key chunks)"), KernelOp::Row(merge));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Operand;

    /// An attention kernel of `batch` heads, `n` query rows and `m` keys, blocked as the
    /// lowering blocks it.
    fn attention(batch: usize, n: usize, m: usize) -> Attention {
        let op = |len: usize| Operand {
            buf: 0,
            offset: 0,
            strides: vec![len, 64, 1],
        };
        Attention {
            batch: vec![batch],
            n,
            m,
            dk: 64,
            dv: 64,
            q: op(n * 64),
            k: op(m * 64),
            v: op(m * 64),
            out: op(n * 64),
            scale: 0.125,
            mask: None,
            positions: None,
            kv_group: 1,
            score: None,
            tail: None,
            zero_empty_rows: false,
            block: super::super::tiling::attention_blocks(n, m, batch, false),
            split: None,
            ranges: None,
        }
    }

    #[test]
    fn splits_below_sixteen_tasks_into_chunks_of_at_least_512_keys() {
        // One head, one row, 4097 keys: 16 chunks wanted, 512 keys at least: 9 chunks.
        let s = key_split(&attention(1, 1, 4097)).expect("one task splits");
        assert_eq!((s.len, s.chunks), (512, 9));
        // Eight tasks want two chunks each: 2049 keys, rounded up to whole blocks of 256.
        let s = key_split(&attention(8, 4, 4097)).expect("eight tasks split");
        assert_eq!((s.len, s.chunks), (2304, 2));
        // Sixteen tasks are enough, and so are 8 heads of 128 rows (two blocks each).
        assert_eq!(key_split(&attention(16, 1, 4097)), None);
        assert_eq!(key_split(&attention(8, 128, 4097)), None);
        let s = key_split(&attention(15, 1, 4097)).expect("fifteen tasks split");
        assert_eq!((s.len, s.chunks), (2304, 2));
        // Fewer than two chunks of 512 keys stay whole.
        assert_eq!(key_split(&attention(1, 1, 1023)), None);
        let s = key_split(&attention(1, 1, 1025)).expect("two chunks of 512 and one key");
        assert_eq!((s.len, s.chunks), (512, 3));
    }
}
