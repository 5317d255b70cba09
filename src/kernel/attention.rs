//! The flash-style attention kernel and the parts it computes in place: a split of the
//! keys, keys and values joined from a cache, a change of the scores; and the kernel that
//! finds the keys its tensor mask leaves each block of rows, once for all the heads.

use super::*;

/// Attention without its probabilities, flash style: for every batch index,
/// `out = softmax(masked_fill(scale * q @ kᵀ, mask), -1) @ v`.
///
/// `q` is strided over `[batch.., n, dk]`, `k` over `[batch.., m, dk]`, `v` over
/// `[batch.., m, dv]`, `out` over `[batch.., n, dv]` and the mask over `[batch.., n, m]`.
/// One task is a block of `block.0` query rows; keys are visited in blocks of `block.1`
/// with a running maximum and sum per row, so the scores need `block.0 * block.1` floats of
/// scratch, never `n * m`.
///
/// `positions` is a mask known from the positions alone, applied before `mask`
/// (`scores.masked_fill(~keep, fill).masked_fill(mask, ..)`): tiles it keeps whole test no
/// element, and where [`Attention::skips_tiles`] holds, tiles it removes are not visited.
/// With `kv_group` G > 1 (grouped-query attention), `k` and `v` have a G times smaller last
/// batch axis and query head `h` reads key/value head `h / G`, in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    pub batch: Vec<usize>,
    pub n: usize,
    pub m: usize,
    pub dk: usize,
    pub dv: usize,
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub out: Operand,
    pub scale: f32,
    pub mask: Option<MaskFill>,
    pub positions: Option<IndexMask>,
    pub kv_group: usize,
    /// A change of the scores applied to each tile before either mask.
    pub score: Option<ScoreMod>,
    /// Where the last keys come from another pair of operands (a decode step's new key and
    /// value after its cache): `k` and `v` then hold the first `m - tail.len` keys.
    pub tail: Option<KeyTail>,
    /// A row whose every score is `-inf` gives 0 rather than NaN: PyTorch's
    /// `scaled_dot_product_attention` (its safe softmax), where `softmax` alone gives NaN.
    pub zero_empty_rows: bool,
    pub block: (usize, usize),
    /// Flash-decoding: the keys cut into chunks, each chunk of each block of rows a task of
    /// its own. `out` then holds partial results for a merge kernel to combine.
    pub split: Option<KeySplit>,
    /// The key ranges of the mask, written by a [`KeyRanges`] kernel before this one and
    /// strided over `[batch.., row_tasks, RANGE_FLOATS]` ([`Attention::row_tasks`]), with
    /// stride 0 along the batch axes the mask does not vary along: each task reads its
    /// entry rather than scanning the mask. `None`: a task that skips masked tiles scans
    /// its own rows of the mask.
    pub ranges: Option<Operand>,
}

/// The keys of an attention kernel cut into `chunks` chunks of `len` keys (the last one
/// shorter), so that a few query rows over many keys still make enough tasks for the
/// threads. With a split, [`Attention::out`] is strided over `[batch.., chunks, n, dv + 2]`:
/// each chunk's output rows, not yet divided by their sum (0 where the chunk visits no
/// tile), followed by the rows' running maximum and sum over the chunk's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySplit {
    pub len: usize,
    pub chunks: usize,
}

/// The last `len` keys of an attention kernel and their values, strided over
/// `[kv batch.., len, dk]` and `[kv batch.., len, dv]`: `cat([k_cache, k_new], dim=2)`
/// read in place, never copied.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyTail {
    pub k: Operand,
    pub v: Operand,
    pub len: usize,
}

/// An elementwise change of attention scores (ALiBi's `s + slope_h * (j - i)`, soft-capping's
/// `c * tanh(s / c)`): `s' = expr(..)` where [`Expr::Input`] 0 is the scaled score, 1 the
/// query row `i` and 2 the key `j` (as floats), and `3 + k` the element of `inputs[k]`,
/// strided over the kernel's `[batch.., n, m]` (stride 0 along what it does not vary with).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreMod {
    pub inputs: Vec<Operand>,
    pub expr: Vec<Expr>,
}

impl ScoreMod {
    /// The leaves of the formula before the inputs: the score, `i` and `j`.
    pub const LEAVES: usize = 3;
}

/// Keys per chunk of a tile on which a mask of positions is decided: a tile is cut to the
/// chunks some row of its block keeps and tested only on those it keeps in part, so a tile
/// stays as wide as a dense one (256 keys; 64 keys a tile were 15 % slower) while skipping
/// and testing as finely as 64 keys a tile did (`codegen/attention.rs`, `BENCHMARKS.md`).
pub const POSITION_CHUNK: usize = 64;

/// Floats per entry of a [`KeyRanges`] table: four key indices as 64-bit integers.
pub const RANGE_FLOATS: usize = 8;

/// The keys each task of an attention kernel may visit under its tensor mask (one that
/// fills with `-inf`: [`Attention::skips_masked_tiles`]), found by reading the mask once per
/// call for the attention kernel after it ([`Attention::ranges`]). Where the mask is
/// broadcast over heads (its stride along them is 0), the attention's tasks of every head
/// would scan the same rows; this kernel's `batch` has size 1 there, so each block of rows
/// is scanned once.
///
/// Entry `[batch.., e]` is for the attention's `e`-th task of that batch index (a block of
/// `rows` query rows, and with a split a chunk of its keys, numbered as the attention
/// numbers its tasks): the keys `[lo, hi)` from the first any row keeps to one past the
/// last, then keys `[a, b)` every row keeps (`codegen/visible.rs` says how each is found),
/// as 64-bit integers. The attention compares its tiles with them and addresses nothing
/// by them, so its memory safety does not rest on their values.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyRanges {
    /// The attention's batch axes, 1 where the mask does not vary along them.
    pub batch: Vec<usize>,
    pub n: usize,
    pub m: usize,
    /// Query rows per task: the attention's `block.0`.
    pub rows: usize,
    pub split: Option<KeySplit>,
    /// The attention's mask, strided over `[batch.., n, m]`.
    pub mask: MaskFill,
    /// Strided over `[batch.., row_tasks, RANGE_FLOATS]`, each entry's floats contiguous.
    pub out: Operand,
}

/// Tasks per batch index of `n` query rows in blocks of `rows`: the blocks, times the
/// chunks of a split.
fn row_tasks(n: usize, rows: usize, split: Option<KeySplit>) -> usize {
    n.div_ceil(rows.max(1))
        .saturating_mul(split.map_or(1, |s| s.chunks))
}

impl KeyRanges {
    /// The ranges of `a`'s mask, written to `out`, where `a` skips masked tiles and its
    /// mask does not vary along some of its batch axes of more than one index; `None`
    /// where each of `a`'s tasks would read rows of the mask no other task reads.
    pub fn shared(a: &Attention, out: impl FnOnce(&[usize]) -> Operand) -> Option<KeyRanges> {
        let mask = a.mask.as_ref().filter(|_| a.skips_masked_tiles())?;
        let batch: Vec<usize> = (a.batch.iter().zip(&mask.mask.strides))
            .map(|(&n, &s)| if s == 0 { 1 } else { n })
            .collect();
        let product = |b: &[usize]| b.iter().product::<usize>();
        if product(&batch) >= product(&a.batch) {
            return None;
        }
        let shape = [batch.as_slice(), &[a.row_tasks(), RANGE_FLOATS]].concat();
        Some(KeyRanges {
            n: a.n,
            m: a.m,
            rows: a.block.0,
            split: a.split,
            mask: mask.clone(),
            out: out(&shape),
            batch,
        })
    }

    /// Entries per batch index: the attention's [`Attention::row_tasks`].
    pub fn row_tasks(&self) -> usize {
        row_tasks(self.n, self.rows, self.split)
    }

    /// The shape `out` is written over.
    pub fn out_shape(&self) -> Vec<usize> {
        [self.batch.as_slice(), &[self.row_tasks(), RANGE_FLOATS]].concat()
    }

    /// `out` as the attention reads it over its own `batch`: the same entry along the axes
    /// where this kernel's batch is 1.
    pub fn read_by(&self, batch: &[usize]) -> Operand {
        let mut read = self.out.clone();
        for (s, (&mine, &theirs)) in read.strides.iter_mut().zip(self.batch.iter().zip(batch)) {
            if mine == 1 && theirs != 1 {
                *s = 0;
            }
        }
        read
    }
}

impl Attention {
    /// Tasks per batch index: the blocks of rows, times the chunks of a split.
    pub fn row_tasks(&self) -> usize {
        row_tasks(self.n, self.block.0, self.split)
    }

    /// The batch axes `k` and `v` are read over: the last one divided by `kv_group`.
    pub fn kv_batch(&self) -> Vec<usize> {
        let mut batch = self.batch.clone();
        if let Some(heads) = batch.last_mut() {
            *heads /= self.kv_group.max(1);
        }
        batch
    }

    /// Whether the tiles `positions` removes may be skipped: every row must keep a key
    /// (a row that keeps none is uniform under a finite fill, which needs every key), and a
    /// tensor mask, if any, must fill with `-inf` (under a finite fill, the rows it removes
    /// whole would need every key too).
    pub fn skips_tiles(&self) -> bool {
        let tensor_mask_ok = self.mask.as_ref().is_none_or(|m| m.fill == f32::NEG_INFINITY);
        self.positions
            .as_ref()
            .is_some_and(|p| tensor_mask_ok && p.every_row_keeps(self.n, self.m, self.block.1))
    }

    /// Whether a key tile the tensor mask removes from every row of a task is skipped,
    /// decided at run time from the mask: only a `-inf` fill removes a key whatever the
    /// other scores are (under a finite one, a row that keeps no key needs every key).
    pub fn skips_masked_tiles(&self) -> bool {
        self.mask.as_ref().is_some_and(|m| m.fill == f32::NEG_INFINITY)
    }

    /// The chunks of tiles ([`POSITION_CHUNK`] keys) `positions` keeps whole, in part, and
    /// removes (removed ones are visited like partial ones where
    /// [`Attention::skips_tiles`] does not hold).
    pub fn tile_counts(&self) -> Option<TileCounts> {
        let p = self.positions.as_ref()?;
        let chunks = (self.block.0, POSITION_CHUNK.min(self.block.1));
        let counts = self
            .segments()
            .map(|(start, len)| p.tiles_of_keys(self.n, (start, start + len), chunks));
        Some(counts.fold(TileCounts::default(), |a, b| TileCounts {
            kept: a.kept + b.kept,
            partial: a.partial + b.partial,
            skipped: a.skipped + b.skipped,
        }))
    }

    /// The key ranges the kernel walks, each in blocks of its own: `(first key, length)` of
    /// `k`/`v`, then of the tail.
    pub fn segments(&self) -> impl Iterator<Item = (usize, usize)> {
        let tail = self.tail.as_ref().map_or(0, |t| t.len);
        let head = self.m.saturating_sub(tail);
        [(0, head), (head, tail)].into_iter().filter(|&(_, len)| len > 0)
    }

    /// Grouped-query attention of one query row (a decode step): the `kv_group` query heads
    /// that share a key/value head become that many rows of one task, so the shared keys are
    /// read once per group rather than once per query head. `None` where that would change
    /// the result: a mask of positions or a score change that reads the row `i`.
    pub fn fold_query_groups(&self) -> Option<Attention> {
        let (g, r) = (self.kv_group, self.batch.len());
        let reads_row = self
            .score
            .as_ref()
            .is_some_and(|s| s.expr.contains(&Expr::Input(1)));
        let later_part = self.split.is_some() || self.ranges.is_some();
        if g <= 1 || self.n != 1 || r == 0 || self.positions.is_some() || reads_row || later_part {
            return None;
        }
        // [.., heads, 1, x] -> [.., heads / g, g, x]: head h = hk * g + row.
        let fold = |o: &Operand| {
            let mut strides = o.strides.clone();
            let head = strides[r - 1];
            strides[r - 1] = head * g;
            strides[r] = head;
            Operand { strides, ..o.clone() }
        };
        let mut a = self.clone();
        a.batch[r - 1] /= g;
        a.n = g;
        a.kv_group = 1;
        a.q = fold(&self.q);
        a.out = fold(&self.out);
        if let Some(m) = &mut a.mask {
            m.mask = fold(&m.mask);
        }
        if let Some(s) = &mut a.score {
            s.inputs = s.inputs.iter().map(fold).collect();
        }
        a.block = (g, self.block.1);
        Some(a)
    }
}
