//! The kernel plan: what [`crate::lower`] makes of a program for one set of concrete dims,
//! and what [`crate::codegen`] turns into machine code (`attnc ir --stage kernels`).
//!
//! A plan is a list of [`Buffer`]s and a sequence of [`Kernel`]s. Every size is concrete:
//! a plan is specialized to one binding of the dims. A kernel reads and writes its buffers
//! through [`Operand`]s, strided views given as an element offset and one stride per axis
//! of the kernel's iteration space, so transposes, slices and broadcasts cost nothing.
//!
//! Each kernel is split into `tasks` independent pieces of work (a batch index, a block of
//! rows, a block of columns); the runtime hands ranges of tasks to threads. A task's
//! arithmetic never depends on which thread runs it or how the range was split, so every
//! thread count gives the same bits.
//!
//! Five kernel kinds cover the typed IR and the optimizer's fused ops:
//! [`Gemm`] (batched, any strides, `alpha`, a bias, an elementwise [`Epilogue`]), [`Softmax`] (fused scale, mask
//! fill and a numerically safe softmax along the last axis), [`Attention`] (flash style:
//! blocked over keys with a running max and sum), [`Map`] (a fused elementwise
//! expression, which also does every layout copy) and [`Row`] (reductions along one axis and
//! what is computed from them: norms, softmax, `sum`, `var`).
//!
//! Elementwise arithmetic is written with the language's own primitives ([`UnaryOp`],
//! [`BinaryOp`], comparisons and a select; rows reduce with [`ReduceOp`]), the ones the
//! interpreter evaluates: the native code of each is tested against its `eval`.

use crate::ir::CmpOp;
pub use crate::ops::prim::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::{self, Write as _};

mod index_mask;
mod text;
mod validate;

pub use index_mask::{Affine, IndexMask, Keep, Tile, TileCounts, Truth};
pub use text::byte_size;

/// Index of a buffer in [`Plan::buffers`].
pub type BufId = usize;

/// Where a buffer's memory comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// `Bound::params[i]`: read only.
    Param(usize),
    /// `Bound::inputs[i]`: read only.
    Input(usize),
    /// The program's output `i`, written by the plan and handed to the caller.
    Output(usize),
    /// The storage of the state `Bound::inputs[input]`, donated: the caller's tensor for
    /// `output` (the state's last version), which holds the state's value when the run
    /// starts. Kernels read it; only [`Scatter`] kernels write it, in place, each the next
    /// version (the lowering proves that every read of a version comes before the write
    /// that replaces it).
    State { input: usize, output: usize },
    /// A temporary at `offset` elements into the arena, live from kernel `live.0` (its first
    /// writer) to kernel `live.1` (its last reader), inclusive.
    Temp { offset: usize, live: (usize, usize) },
    /// A value computed from params alone (a weight in the layout a GEMM prefers, a
    /// concatenation of weights): written by the prologue, once per set of weights, at
    /// `offset` elements into the prepared memory; read only by the main kernels.
    Derived { offset: usize },
}

/// A float32 buffer of `len` elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub kind: BufferKind,
    pub len: usize,
    /// The name of the param, input or output; empty for temporaries.
    pub name: String,
}

/// A strided view of a buffer over a kernel's iteration space: element `[i0, i1, ..]` is
/// `buf[offset + i0 * strides[0] + i1 * strides[1] + ..]`. A stride of 0 broadcasts.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    pub buf: BufId,
    pub offset: usize,
    pub strides: Vec<usize>,
}

impl Operand {
    /// The largest element index the operand reaches over `shape` (`None` for an empty
    /// shape, which reaches nothing). The arithmetic saturates: a reach past `usize::MAX`
    /// is `usize::MAX`, outside every buffer, never a small wrapped index.
    pub fn max_index(&self, shape: &[usize]) -> Option<usize> {
        if shape.contains(&0) {
            return None;
        }
        let reach = shape
            .iter()
            .zip(&self.strides)
            .fold(0usize, |r, (&n, &s)| r.saturating_add((n - 1).saturating_mul(s)));
        Some(self.offset.saturating_add(reach))
    }
}

/// A batched matrix product with an epilogue, for every batch index:
/// `c[i, j] = alpha * Σ_p a[i, p] * b[p, j] + bias[j]`.
///
/// Operands are strided over `[batch.., rows, cols]`: `a` over `[batch.., m, k]`, `b` over
/// `[batch.., k, n]`, `c` over `[batch.., m, n]`, `bias` over `[n]`. A transposed operand is
/// just swapped strides (`linear` reads `W [n, k]` as `b` with strides `[1, k]`), and a
/// broadcast batch axis has stride 0. The tile product calls the `gemm` crate's microkernels
/// (AVX-512 when the CPU has it) through an `extern "C"` shim.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    pub batch: Vec<usize>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub alpha: f32,
    pub bias: Option<Operand>,
    /// Elementwise work on each tile once its product is written, while it is in cache.
    pub epilogue: Option<Epilogue>,
    /// Rotary embeddings of column ranges of heads, applied after the epilogue.
    pub rope: Vec<Rope>,
    /// Rows and columns of `c` per task.
    pub block: (usize, usize),
}

/// What a [`Gemm`] applies to each element of a tile after the product (and `alpha` and
/// the bias): `c[i, j] = expr(..)`, where [`Expr::Input`] 0 is the element of `c` and
/// `1 + k` the element of `inputs[k]`, strided over `[batch.., m, n]` (ReLU, GELU, SiLU, a
/// residual add, a scale): the elementwise op that follows a `linear` costs no pass over
/// memory of its own.
///
/// With `pair`, the last batch axis has size 2 and one task computes both of its products
/// for its tile: input 0 is the element of the first, 1 the element of the second, `2 + k`
/// the element of `inputs[k]`, and the result overwrites the first (SwiGLU's
/// `silu(gate) * up` over the two halves of one GEMM of concatenated weights).
#[derive(Clone, Debug, PartialEq)]
pub struct Epilogue {
    pub inputs: Vec<Operand>,
    pub expr: Vec<Expr>,
    pub pair: bool,
}

impl Epilogue {
    /// The formula's inputs before `inputs`: the element of `c`, and of the second product
    /// with `pair`.
    pub fn leaves(&self) -> usize {
        1 + usize::from(self.pair)
    }

    /// This epilogue followed by `next` (not a pair), which reads this one's result as its
    /// element of `c`: one formula over both's inputs.
    pub fn then(&self, next: &Epilogue) -> Epilogue {
        let (base, last) = (self.expr.len(), self.expr.len() - 1);
        let at = |a: usize| match next.expr[a] {
            Expr::Input(0) => last,
            _ => base + a,
        };
        let expr = next.expr.iter().map(|e| match *e {
            // Never read: `at` sends its readers to this epilogue's result.
            Expr::Input(0) => Expr::Const(0.0),
            Expr::Input(i) => Expr::Input(self.leaves() + self.inputs.len() + i - 1),
            Expr::Const(c) => Expr::Const(c),
            Expr::Reduced(k) => Expr::Reduced(k),
            Expr::Index(a) => Expr::Index(a),
            Expr::Unary(op, a) => Expr::Unary(op, at(a)),
            Expr::Binary(op, a, b) => Expr::Binary(op, at(a), at(b)),
            Expr::Compare(op, a, b) => Expr::Compare(op, at(a), at(b)),
            Expr::Select(c, a, b) => Expr::Select(at(c), at(a), at(b)),
        });
        Epilogue {
            inputs: [self.inputs.as_slice(), &next.inputs].concat(),
            expr: self.expr.iter().cloned().chain(expr).collect(),
            pair: self.pair,
        }
    }
}

impl Gemm {
    /// Whether one task computes both products of the last batch axis ([`Epilogue::pair`]).
    pub fn paired(&self) -> bool {
        self.epilogue.as_ref().is_some_and(|e| e.pair) && !self.batch.is_empty()
    }
}

/// Rotary position embeddings (GPT-NeoX's and Llama's halves) applied by a [`Gemm`] without
/// batch axes to the columns `start..start + heads * dim` of its tile, in place: in each
/// head, for `d < dim / 2` and its partner `d + dim / 2`,
/// `c[d] = c[d] * cos[d] - c[d + dim/2] * sin[d]` and
/// `c[d + dim/2] = c[d + dim/2] * cos[d + dim/2] + c[d] * sin[d + dim/2]`, from the
/// un-rotated pair: `x * cos + rotate_half(x) * sin` as the projection writes q or k, never
/// a pass of its own. A task's columns must hold whole heads ([`Rope::fits`]).
///
/// Row `i` of `c` is position `i % period` of sequence `i / period`; `cos` and `sin` are
/// strided over `[m / period, period, dim]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub start: usize,
    pub heads: usize,
    pub dim: usize,
    pub period: usize,
    pub cos: Operand,
    pub sin: Operand,
}

impl Rope {
    /// The columns rotated.
    pub fn end(&self) -> usize {
        self.start + self.heads * self.dim
    }

    /// Whether every head lies within one task's columns, for tiles of `cols` columns of a
    /// result of `n` columns, and the rows split into sequences of `period`.
    pub fn fits(&self, cols: usize, n: usize, m: usize) -> bool {
        let aligned = cols >= n || (cols.is_multiple_of(self.dim) && self.start.is_multiple_of(self.dim));
        let rows = self.period > 0 && m.is_multiple_of(self.period);
        self.dim.is_multiple_of(2) && self.dim > 0 && self.end() <= n && aligned && rows
    }

    /// The iteration shape `cos` and `sin` are read over, for a GEMM of `m` rows.
    pub fn table_shape(&self, m: usize) -> Vec<usize> {
        vec![m / self.period.max(1), self.period, self.dim]
    }
}

/// Which elements a mask removes: where `mask op rhs` holds, the score becomes `fill`.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskFill {
    /// The mask, strided over the kernel's iteration space (0/1 floats).
    pub mask: Operand,
    pub op: CmpOp,
    pub rhs: f32,
    pub fill: f32,
}

/// `out = softmax(masked_fill(x * scale, mask), -1)` over the last axis of `shape`, one
/// task per block of rows: the row maximum is subtracted before `exp`, so a row filled with
/// -1e9 comes out uniform.
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    pub shape: Vec<usize>,
    pub x: Operand,
    pub out: Operand,
    pub scale: f32,
    pub mask: Option<MaskFill>,
    pub rows_per_task: usize,
}

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

/// One node of an elementwise formula ([`Map::expr`], the stages of a [`Row`]); operands
/// index earlier nodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// The element of input `i` (`Map::inputs[i]`, `Row::inputs[i]`).
    Input(usize),
    Const(f32),
    /// The result of stage `k` of a [`Row`] kernel: one value per row. Not in a [`Map`].
    Reduced(usize),
    /// The element's index along axis `a` of a [`Map`]'s iteration space, as a float
    /// (`tril`'s test `j - i <= diagonal`). Only in a [`Map`].
    Index(usize),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    /// 1.0 where the comparison holds, else 0.0.
    Compare(CmpOp, usize, usize),
    /// `a` where `cond` is not 0, else `b` (args `cond, a, b`): `where`, `masked_fill`.
    Select(usize, usize, usize),
}

/// `out[.., index[n], ..] = source[.., n, ..]` along `axis`: `index_copy`, written in place
/// into a window of its buffer (a state's storage, donated by the output of its last
/// version). Its addresses depend on the index's values, so the executor runs it on the host
/// rather than as compiled code: it checks every position against `size` before it writes
/// anything. `out` spans the whole window (`size` on `axis`), so the plan's bounds proof
/// covers every position in range.
#[derive(Clone, Debug, PartialEq)]
pub struct Scatter {
    /// The source's shape; `shape[axis]` positions are written.
    pub shape: Vec<usize>,
    pub axis: usize,
    /// The window's extent on `axis`: positions run in `0..size`.
    pub size: usize,
    pub index: Operand,
    pub source: Operand,
    pub out: Operand,
    /// What an index out of range names: the index's source and the tensor written.
    pub names: (String, String),
}

impl Scatter {
    /// The window `out` spans: the source's shape with `size` on `axis`.
    pub fn out_shape(&self) -> Vec<usize> {
        let mut shape = self.shape.clone();
        shape[self.axis] = self.size;
        shape
    }
}

/// `out[i..] = expr(inputs[0][i..], inputs[1][i..], ..)` over `shape`: fused elementwise
/// arithmetic, and every layout copy (`contiguous`, `reshape`, `concat`, outputs).
#[derive(Clone, Debug, PartialEq)]
pub struct Map {
    pub shape: Vec<usize>,
    pub inputs: Vec<Operand>,
    /// The expression in evaluation order; the last node is the result.
    pub expr: Vec<Expr>,
    pub out: Operand,
    pub rows_per_task: usize,
}

/// One reduction of a [`Row`] kernel: `reduce` over the row of `expr`, whose nodes may read
/// the inputs and the results of earlier stages ([`Expr::Reduced`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub reduce: ReduceOp,
    pub expr: Vec<Expr>,
}

/// A row program over `rows` (the sizes of the row axes) independent rows of length `n`:
/// the `stages` in order, each a reduction over the row, then `write`, a formula over the
/// inputs and every stage's result, stored to `out`. Softmax, log_softmax, layer_norm,
/// rms_norm and `sum`, `mean`, `amax`, `amin`, `var`, `std` along one axis are such programs.
///
/// Every input is strided over `[rows.., n]`: the reduced axis is the last one of the
/// iteration space whatever its stride, so any single axis of a tensor can be reduced, and a
/// stride of 0 broadcasts (a norm's weight has stride 0 on every row axis). `out` is strided
/// over `[rows.., n]` when `write` reads an input (one value per element: a norm), or over
/// `[rows..]` when it does not (one value per row: a reduction). One task is a block of
/// `rows_per_task` rows; a row's arithmetic is the same in whichever task it falls.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub rows: Vec<usize>,
    pub n: usize,
    pub inputs: Vec<Operand>,
    pub stages: Vec<Stage>,
    pub write: Vec<Expr>,
    pub out: Operand,
    pub rows_per_task: usize,
}

impl Row {
    /// Whether `out` holds one value per row rather than one per element.
    pub fn per_row(&self) -> bool {
        self.out.strides.len() == self.rows.len()
    }

    /// The shape `out` is written over.
    pub fn out_shape(&self) -> Vec<usize> {
        match self.per_row() {
            true => self.rows.clone(),
            false => [self.rows.as_slice(), &[self.n]].concat(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum KernelOp {
    Gemm(Gemm),
    Softmax(Softmax),
    Attention(Box<Attention>),
    Map(Map),
    Row(Row),
    Scatter(Scatter),
}

/// One kernel: its op, a short label saying what in the program it computes, and how many
/// independent tasks it splits into.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub label: String,
    pub op: KernelOp,
}

/// The whole program for one set of dims.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub buffers: Vec<Buffer>,
    /// Kernels that read params only: run once per set of weights ([`BufferKind::Derived`]).
    pub prologue: Vec<Kernel>,
    /// Kernels run on every call, in order.
    pub kernels: Vec<Kernel>,
    /// The output buffers, in the program's output order.
    pub outputs: Vec<(String, BufId, Vec<usize>)>,
    /// Elements of the arena that holds every temporary.
    pub arena_len: usize,
    /// Elements of the prepared memory that holds every derived buffer.
    pub derived_len: usize,
    /// The FLOPs of one call: [`KernelOp::flops`] summed over the kernels (2·m·n·k per GEMM,
    /// both products of an attention kernel over every query-key pair), so the optimizer's
    /// GEMMs count as the source's matmuls do.
    pub flops: f64,
}

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
            KernelOp::Softmax(_) | KernelOp::Map(_) | KernelOp::Row(_) | KernelOp::Scatter(_) => 0.0,
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
            KernelOp::Attention(a) => 2 * a.block.0 + a.block.0 * a.block.1,
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
        }
    }
}

/// The number of rows of a shape whose last axis is the row (a rank-0 shape has one).
pub fn rows(shape: &[usize]) -> usize {
    shape.split_last().map_or(1, |(_, outer)| product(outer))
}

/// The product of sizes, saturating (a validated plan's products are all in range).
fn product(sizes: &[usize]) -> usize {
    sizes.iter().fold(1usize, |p, &n| p.saturating_mul(n))
}

/// A plan that breaks one of its invariants: a bug in the lowering, never the user's.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid kernel plan: {}", self.0)
    }
}

/// Whether `expr` is a formula over `inputs` inputs and `reduced` stage results whose
/// nodes read earlier nodes only.
fn well_formed(expr: &[Expr], inputs: usize, reduced: usize, axes: usize) -> bool {
    let bad = expr.iter().enumerate().any(|(i, e)| match *e {
        Expr::Input(j) => j >= inputs,
        Expr::Const(_) => false,
        Expr::Reduced(k) => k >= reduced,
        Expr::Index(a) => a >= axes,
        Expr::Unary(_, a) => a >= i,
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => a >= i || b >= i,
        Expr::Select(a, b, c) => a >= i || b >= i || c >= i,
    });
    !bad && !expr.is_empty()
}

/// Checks the formulas of a map or row kernel.
fn formulas(op: &KernelOp) -> Result<(), String> {
    match op {
        KernelOp::Map(m) if !well_formed(&m.expr, m.inputs.len(), 0, m.shape.len()) => {
            Err("malformed expression".into())
        }
        KernelOp::Gemm(g) => match &g.epilogue {
            Some(e) if !well_formed(&e.expr, e.leaves() + e.inputs.len(), 0, 0) => {
                Err("malformed epilogue expression".into())
            }
            Some(e) if e.pair && (g.batch.last() != Some(&2) || g.bias.is_some()) => {
                Err("a paired epilogue without a last batch axis of 2, or with a bias".into())
            }
            _ if !g.rope.is_empty() && !g.batch.is_empty() => Err("rotary embeddings over batch axes".into()),
            _ if g.rope.iter().any(|r| !r.fits(g.block.1, g.n, g.m)) => {
                Err("rotary embeddings whose heads a task's columns split".into())
            }
            _ => Ok(()),
        },
        KernelOp::Attention(a) => match &a.score {
            Some(s) if !well_formed(&s.expr, ScoreMod::LEAVES + s.inputs.len(), 0, 0) => {
                Err("malformed score expression".into())
            }
            _ => Ok(()),
        },
        KernelOp::Row(r) => {
            let inputs = r.inputs.len();
            for (k, stage) in r.stages.iter().enumerate() {
                if !well_formed(&stage.expr, inputs, k, 0) {
                    return Err(format!("malformed expression in stage {k}"));
                }
            }
            if !well_formed(&r.write, inputs, r.stages.len(), 0) {
                return Err("malformed write expression".into());
            }
            if r.per_row() && r.write.iter().any(|e| matches!(e, Expr::Input(_))) {
                return Err("a write of one value per row reads an element of an input".into());
            }
            if r.rows_per_task == 0 {
                return Err("a row kernel's tasks hold no row".into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

impl Plan {
    /// Floats of scratch each thread needs.
    pub fn scratch_len(&self) -> usize {
        let all = self.prologue.iter().chain(&self.kernels);
        all.map(|k| k.op.scratch()).max().unwrap_or(0)
    }

    /// The plan as deterministic text (`attnc ir --stage kernels`).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "plan: {} kernels (+{} once per weights), arena {} bytes, prepared {} bytes, scratch {} bytes per thread, {:.6} GFLOP",
            self.kernels.len(),
            self.prologue.len(),
            self.arena_len * 4,
            self.derived_len * 4,
            self.scratch_len() * 4,
            self.flops / 1e9
        );
        text::buffers(self, &mut out);
        text::kernels(self, &mut out);
        out
    }
}
