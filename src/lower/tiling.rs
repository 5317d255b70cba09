//! How GEMMs and attention are cut into tasks: from the shape alone, never from the thread
//! count, so that every thread count computes the same bits.

use crate::kernel::Gemm;

/// Folds trailing batch axes into the rows where `b` is broadcast along them and `a` and
/// `c` are laid out row after row (`x [B, N, D] @ W` is one `[B·N, D]` product).
pub fn fold_batch_into_rows(g: &mut Gemm) {
    while let Some(&size) = g.batch.last() {
        let r = g.batch.len();
        let (a, b, c) = (&g.a.strides, &g.b.strides, &g.c.strides);
        let fits = b[r - 1] == 0 && a[r - 1] == g.m * a[r] && c[r - 1] == g.m * c[r];
        if !fits && size != 1 {
            return;
        }
        g.m *= size;
        g.batch.pop();
        for op in [&mut g.a, &mut g.b, &mut g.c] {
            op.strides.remove(r - 1);
        }
    }
}

/// Bytes of `b` above which one task's block is worth a thread of its own however little
/// arithmetic it carries: a product of few rows (a decode step's one token, a short
/// sentence) does about one multiply-add per weight it reads, so its time is the time to
/// stream its block of `b` from memory, and one thread streams about half of what two do
/// (see BENCHMARKS.md).
const STREAMED: usize = 512 << 10;

/// Rows up to which a product whose `b` is a weight reads it packed in panels
/// ([`crate::kernel::Gemm::packed`], `lower/pack.rs`): a decode step's one token, a short
/// sentence's or prompt's few dozen, measured faster that way in `BENCHMARKS.md` ("Few-row
/// products from packed weights"; 32 rather than 16 since the product of 9 to 16 rows reads
/// the weight once: MiniLM at 2 × 16 tokens 1.3× faster, SmolLM2's prefill of 24 tokens
/// 1.4×). Past it the `gemm` crate's microkernel measured faster (64 rows by a `k` of 1536
/// already ran at 0.73-0.93× its speed, each block of 16 rows reading the weight again: "few-row
/// products of 9 to 16 rows"), and reads the weight packed once in strips of 64 columns
/// ("Products of many rows from weights packed once in strips").
pub const PACKED_ROWS: usize = 32;

/// Tiles of the result, chosen from the shape alone (never from the thread count, so that
/// every thread count computes the same bits): while there are fewer than 4 tasks, each of
/// more than 16 MFLOP or reading more than [`STREAMED`] bytes of `b`, halve the columns
/// (down to 128) or the rows (down to 256). The `gemm` crate packs its operands on every
/// call, so small tiles lose much of its speed (see BENCHMARKS.md): tiles stay large and
/// few. Columns are halved in 64s and rows in 16s, then both are evened out in whole panels
/// of 16 ([`even`]), so that equal threads get equal work; a rotary embedding's product
/// rounds its columns back up to whole heads ([`whole_heads`], `lower/rope.rs`).
pub fn gemm_blocks(g: &Gemm) -> (usize, usize) {
    let batch: usize = g.batch.iter().product();
    let (mut rb, mut cb) = (g.m.max(1), g.n.max(1));
    if batch == 0 || g.m == 0 || g.n == 0 {
        // An empty product: one task that writes nothing.
        return (rb, cb);
    }
    let half = |x: usize, unit: usize| (x / 2).div_ceil(unit) * unit;
    loop {
        let tasks = batch * g.m.div_ceil(rb) * g.n.div_ceil(cb);
        let flops = 2.0 * (rb * cb * g.k) as f64;
        let streamed = 4 * cb * g.k;
        if tasks >= 4 || (flops < 16e6 && streamed <= STREAMED) {
            return (even(g.m, rb, 16), even(g.n, cb, 16));
        }
        if flops < 16e6 {
            return (rb, streamed_columns(g.n, cb, tasks));
        }
        if cb > 256 && cb * 4 >= rb {
            cb = half(cb, 64);
        } else if rb > 256 {
            rb = half(rb, 16);
        } else if cb > 128 {
            cb = half(cb, 64);
        } else {
            return (even(g.m, rb, 16), even(g.n, cb, 16));
        }
    }
}

/// The block of `len` in as many blocks as `block` cuts it into, made as equal as whole
/// `unit`s allow: halving 1152 columns by 64s gave 320, 320, 320 and 192, so that of two
/// threads one computed 640 columns and the other 512; 288 each balances them (MiniLM's
/// fused query, key and value product at 8 × 256 tokens, `BENCHMARKS.md`).
fn even(len: usize, block: usize, unit: usize) -> usize {
    let blocks = len.div_ceil(block);
    len.div_ceil(blocks).next_multiple_of(unit).min(block)
}

/// Columns per task where the tasks' time is streaming `b` (few rows): enough equal blocks
/// of whole 16-column panels for 4 tasks, so that no thread streams a block more than the
/// others (halving 576 columns gave 5 tasks of 128 and 64, three of them on one thread of
/// two: see BENCHMARKS.md).
fn streamed_columns(n: usize, cb: usize, tasks: usize) -> usize {
    let pieces = 4usize.div_ceil(tasks) * n.div_ceil(cb);
    n.div_ceil(pieces).next_multiple_of(16).min(n)
}

/// Columns per task `cols` made a multiple of the head `dim` (or all `n`), so that a
/// rotary embedding ([`crate::kernel::Rope`]) finds whole heads in every tile.
pub fn whole_heads(cols: usize, n: usize, dim: usize) -> usize {
    cols.div_ceil(dim.max(1)).saturating_mul(dim).min(n)
}

/// Query rows per task and keys per block of the attention kernel, for `heads` (the
/// product of the batch axes) of `n` query rows and `m` keys, `positioned` where a mask of
/// positions applies. At L, blocks of 64 to 128 rows and 128 to 512 keys measured within
/// 6 % of each other (64 keys: 15 % slower); 256 keys keep the scores tile at 64 KiB a 64
/// rows. Without a mask of positions, blocks of 128 rows copy each panel of keys and values
/// half as often as 64 (seed M 2–4 % faster, L 4 %, encoder_M's attention 5 %:
/// `BENCHMARKS.md`, "Blocks of 128 query rows"), while at least 16 tasks remain for the
/// threads; a mask of positions keeps 64, which skip more of what a band removes
/// (sliding window at 128 rows: 11 % slower). A mask of positions is decided on chunks of a
/// tile ([`crate::kernel::POSITION_CHUNK`]), so it needs no narrower tiles.
pub fn attention_blocks(n: usize, m: usize, heads: usize, positioned: bool) -> (usize, usize) {
    let wide = !positioned && heads.saturating_mul(n.div_ceil(128)) >= 16;
    let rows = if wide { 128 } else { 64 };
    (n.clamp(1, rows), m.clamp(1, 256))
}

/// Rows per task of a copy that transposes its last two axes (`Map::transposed_run`: runs
/// of `run` rows): whole runs, about 16 tasks. A task walks its columns in chunks over all
/// of its runs (`codegen/map.rs`), so each chunk's input rows, far apart and each in a page
/// of its own, are read once for as many runs as a task has.
pub fn transposed_rows_per_task(shape: &[usize], run: usize) -> usize {
    let rows: usize = shape.split_last().map_or(1, |(_, outer)| outer.iter().product());
    let run = run.max(1);
    run * (rows / run / 16).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Operand;

    fn gemm(m: usize, n: usize, k: usize) -> Gemm {
        let op = |strides: &[usize]| Operand {
            buf: 0,
            offset: 0,
            strides: strides.to_vec(),
        };
        Gemm {
            batch: vec![],
            m,
            n,
            k,
            a: op(&[k, 1]),
            b: op(&[n, 1]),
            c: op(&[n, 1]),
            alpha: 1.0,
            bias: None,
            epilogue: None,
            rope: Vec::new(),
            block: (m, n),
            packed: None,
        }
    }

    #[test]
    fn a_transposing_copy_takes_whole_runs_about_sixteen_tasks() {
        // kᵀ at the seed module's L (16 heads of 64 rows) and M (64 heads of 64 rows).
        assert_eq!(transposed_rows_per_task(&[1, 16, 64, 2048], 64), 64);
        assert_eq!(transposed_rows_per_task(&[8, 8, 64, 512], 64), 256);
        // Fewer runs than tasks: a run each.
        assert_eq!(transposed_rows_per_task(&[2, 3, 5], 3), 3);
        assert_eq!(transposed_rows_per_task(&[0, 3, 5], 3), 3);
    }

    #[test]
    fn blocks_are_even_whole_panels() {
        // Halving 1152 columns by 64s gave 320, 320, 320 and 192: two threads computed 640
        // and 512 columns. Evened out, every block is 288.
        assert_eq!(gemm_blocks(&gemm(2048, 1152, 384)), (2048, 288));
        for (m, n, k) in [
            (1024, 1440, 2048),
            (4096, 1536, 512),
            (1024, 2560, 2048),
            (1024, 2000, 768),
            (1000, 1000, 1000),
            (64, 1000, 4096),
        ] {
            let (rb, cb) = gemm_blocks(&gemm(m, n, k));
            for (len, block) in [(m, rb), (n, cb)] {
                let blocks = len.div_ceil(block);
                let last = len - (blocks - 1) * block;
                assert!(block == len || block % 16 == 0, "{m}x{n}x{k}: block {block}");
                assert!(block - last < 16 * blocks, "{m}x{n}x{k}: {block} then {last}");
            }
        }
        // An empty product still has blocks of at least one row and column.
        for (m, n, k) in [(0, 1152, 384), (2048, 0, 384), (0, 0, 0), (0, 576, 4096)] {
            let (rb, cb) = gemm_blocks(&gemm(m, n, k));
            assert!(rb >= 1 && cb >= 1, "{m}x{n}x{k}: blocks {rb}x{cb}");
        }
    }

    #[test]
    fn products_of_few_rows_split_the_weights_they_stream() {
        // A decode step's projection: 1.1 MFLOP, but 2.2 MB of weights to read.
        let (rb, cb) = gemm_blocks(&gemm(1, 960, 576));
        assert_eq!(rb, 1);
        assert!(960usize.div_ceil(cb) >= 4, "column block {cb}");
        // A product whose weights sit in cache stays one task.
        assert_eq!(gemm_blocks(&gemm(1, 256, 256)), (1, 256));
    }

    #[test]
    fn rotary_embeddings_round_columns_up_to_whole_heads() {
        assert_eq!(whole_heads(384, 1440, 128), 384);
        assert_eq!(whole_heads(320, 1440, 128), 384);
        assert_eq!(whole_heads(320, 1440, 96), 384);
        assert_eq!(whole_heads(900, 1000, 128), 1000);
    }
}
