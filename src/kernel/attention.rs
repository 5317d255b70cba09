//! The flash-style attention kernel and the parts it computes in place: a split of the
//! keys, keys and values joined from a cache, a change of the scores.

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

impl Attention {
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

    /// The tiles `positions` keeps whole, in part, and removes (removed ones are visited
    /// like partial ones where [`Attention::skips_tiles`] does not hold).
    pub fn tile_counts(&self) -> Option<TileCounts> {
        let p = self.positions.as_ref()?;
        let counts = self
            .segments()
            .map(|(start, len)| p.tiles_of_keys(self.n, (start, start + len), self.block));
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
        if g <= 1 || self.n != 1 || r == 0 || self.positions.is_some() || reads_row || self.split.is_some() {
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
