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
//! what is computed from them: norms, softmax, `sum`, `var`). Two more serve them: a
//! [`Scatter`] writes a state in place, and [`KeyRanges`] reads an attention kernel's mask
//! once for all its heads.
//!
//! Elementwise arithmetic is written with the language's own primitives ([`UnaryOp`],
//! [`BinaryOp`], comparisons and a select; rows reduce with [`ReduceOp`]), the ones the
//! interpreter evaluates: the native code of each is tested against its `eval`.

use crate::ir::CmpOp;
pub use crate::ops::prim::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::{self, Write as _};

mod attention;
pub mod formula;
mod index_mask;
mod op;
mod text;
mod validate;

pub use attention::{Attention, KeyRanges, KeySplit, KeyTail, ScoreMod, POSITION_CHUNK, RANGE_FLOATS};
pub use index_mask::{Affine, IndexMask, Keep, Tile, TileCounts, Truth};
pub use op::rows;
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
    /// `offset` elements into the prepared memory. Live from prologue kernel `live.0` to
    /// `live.1`: a step the prologue alone reads ends at its last reader, and its memory
    /// may be another's after that; one the main kernels read ends at `usize::MAX`, and
    /// only these may the main kernels read.
    Derived { offset: usize, live: (usize, usize) },
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
///
/// With `packed`, `b` is a weight laid out once by the prologue in panels of columns
/// ([`Gemm::packed`]: [`PANEL`] for few rows, [`STRIP`] for many) and read by the packed
/// shim front to back.
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
    /// The width of `b`'s panels where it is packed ([`PANEL`] or [`STRIP`]): for each
    /// batch index, its `k × n` matrix is a run of `n·k` elements, column panels of that
    /// width one after the other (the last one narrower where `n` is not a multiple), each
    /// `k` rows of its width, row after row. `b`'s strides are then `[batch.., 1, k]`: they
    /// reach the same elements as the panels (a block of columns from a multiple of the
    /// width covers `k` times its width elements from `k` times its first column), which is
    /// what `Plan::validate` proves in bounds; the order inside a panel is the packing's,
    /// never read from the strides. A buffer of strips holds [`PANEL`] floats more than its
    /// runs: the products of a narrower last strip read whole vectors of it.
    pub packed: Option<usize>,
}

/// Columns per panel of a packed `b` read by products of few rows ([`Gemm::packed`]): one
/// 512-bit vector of floats.
pub const PANEL: usize = 16;

/// Columns per panel of a packed `b` read by products of many rows ([`Gemm::packed`]): the
/// 64 rows of the `gemm` crate's AVX-512 microkernel's block, which reads them as one run a
/// step, as it reads the copy it packs itself at every call.
pub const STRIP: usize = 64;

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
            _ => formula::renumbered(e, at),
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

impl Map {
    /// Whether the map copies its one input (`out = in0`), whatever the two layouts.
    pub fn is_copy(&self) -> bool {
        self.inputs.len() == 1 && self.expr == [Expr::Input(0)]
    }

    /// Where the map copies its one input times a constant (`out = in0 * c` or `c * in0`,
    /// whatever the two layouts: a weight with the attention's scale folded in), `c`.
    pub fn scale(&self) -> Option<f32> {
        use BinaryOp::Mul;
        match (self.inputs.len(), self.expr.as_slice()) {
            (1, [Expr::Input(0), Expr::Const(c), Expr::Binary(Mul, 0, 1)])
            | (1, [Expr::Const(c), Expr::Input(0), Expr::Binary(Mul, 0, 1)]) => Some(*c),
            _ => None,
        }
    }

    /// Where the map is a copy that transposes its last two axes (the input contiguous
    /// along the next-to-last axis, strided along the last; the output contiguous along
    /// the last: `kᵀ`'s layout, `x.transpose(-1, -2).contiguous()`), the length of the
    /// next-to-last axis: a run of rows that is one block of the transpose.
    pub fn transposed_run(&self) -> Option<usize> {
        let rank = self.shape.len();
        if !self.is_copy() || rank < 2 {
            return None;
        }
        let input = &self.inputs[0];
        let (last, next) = (rank - 1, rank - 2);
        let form = input.strides[next] == 1 && input.strides[last] > 1 && self.out.strides[last] == 1;
        form.then_some(self.shape[next])
    }
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
    KeyRanges(KeyRanges),
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
