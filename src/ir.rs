//! The checked, shape-typed IR: what the checker produces and every later stage consumes.
//!
//! A program is an arena of [`Node`]s in SSA form. Functions are already inlined; a `for`
//! stays a loop ([`Op::For`]) whose body is a list of nodes evaluated once per value of its
//! variable, so the optimizer can see the per-head structure. Every node carries its full
//! type: symbolic shape and strides (in the program's [`DimTable`]) and dtype. Scalars are
//! rank-0 tensors, as in PyTorch.

use crate::dims::{DimTable, Poly, Sym};
pub use crate::ops::prim::{BinaryOp, ReduceOp, UnaryOp};
use crate::source::Span;

mod dot;
mod text;

/// Index of a node in [`Program::nodes`].
pub type ValueId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// The result of a comparison, or a `bool` input; arithmetic reads it as 0 and 1.
    Bool,
    /// PyTorch's `long`: token ids, masks as a tokenizer returns them. Stored as float32 by
    /// both backends, so exact up to 2^24 in magnitude; inputs beyond that are refused when
    /// they are read.
    I64,
}

impl DType {
    /// PyTorch's name of the dtype (`torch.int64`'s `int64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::Bool => "bool",
            DType::I64 => "int64",
        }
    }

    /// The dtype a name written in a program or after `torch.` means (`long`, `int32`
    /// widened to int64, `float`); `None` for any other name.
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "float32" | "float" => DType::F32,
            "int64" | "long" | "int32" | "int" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }

    /// PyTorch's result type of arithmetic on two operands of these dtypes (bool, then
    /// int64, then float32: the higher category wins).
    pub fn promote(self, other: DType) -> DType {
        let rank = |d: DType| match d {
            DType::Bool => 0,
            DType::I64 => 1,
            DType::F32 => 2,
        };
        if rank(self) >= rank(other) {
            self
        } else {
            other
        }
    }
}

/// Shape, strides (in elements) and dtype of a tensor value, all symbolic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Vec<Poly>,
    /// The strides PyTorch gives the value; where they depend on the sizes, the strides of
    /// the general case.
    pub strides: Vec<Poly>,
    pub dtype: DType,
    /// The strides other sizes give the value (a `reshape` that is a view for some sizes
    /// only, an elementwise result whose operands' order depends on the sizes, a `cat` that
    /// may keep channels-last). A `view` must be legal on each (see `check::layout`).
    pub others: OtherStrides,
}

/// The strides a value may have beside its general ones, at some sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum OtherStrides {
    /// These, each a full list of strides (none: the strides are those for every size).
    #[default]
    None,
    Listed(Vec<Vec<Poly>>),
    /// Too many to follow: no `view` may rely on the strides, so it may only split axes and
    /// add or drop axes of size 1.
    Any,
}

/// The type of a node's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    Tensor(TensorType),
    /// The value of a `for`: `len` tensors of one type.
    Seq {
        item: TensorType,
        len: Poly,
    },
}

/// Elementwise comparison with broadcasting; the result is [`DType::Bool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The name in the IR text and the e-graph (`lt`), as `torch.lt`.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// Whether the comparison holds for `lhs - rhs` ordered this way against zero.
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ord == Equal,
            CmpOp::Ne => ord != Equal,
            CmpOp::Lt => ord == Less,
            CmpOp::Le => ord != Greater,
            CmpOp::Gt => ord == Greater,
            CmpOp::Ge => ord != Less,
        }
    }
}

/// What a node computes. Axis numbers are already non-negative; the operands are the
/// node's `args`, in the order given on each variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `params[i]`; no args.
    Param(usize),
    /// `inputs[i]`; no args.
    Input(usize),
    /// A rank-0 float constant; no args.
    Literal(f64),
    /// A dim used as a number (`sqrt(Dk)`), rank 0; no args.
    DimValue(Poly),
    /// `x @ W^T (+ b)`: args `[x, W]` or `[x, W, b]`.
    Linear,
    /// Batched matmul with broadcast batch dims: args `[a, b]`.
    MatMul,
    Transpose(usize, usize),
    Permute(Vec<usize>),
    /// A view with these sizes (the `-1` already solved); the strides are in the type.
    View(Vec<Poly>),
    /// As `View`, but copies into row-major order where a view is impossible.
    Reshape(Vec<Poly>),
    Contiguous,
    /// PyTorch's `expand` to these sizes (the `-1` already solved): axes of size 1 and
    /// new leading axes repeat, a view with stride 0 there; arg `[x]`.
    Expand(Vec<Poly>),
    Unsqueeze(usize),
    Squeeze(usize),
    Softmax(usize),
    /// `op` over `axes` (sorted, distinct, at least one); `keepdim` keeps them as size 1.
    /// arg `[x]`. Sums accumulate in f64 in the interpreter, as a tight reference.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdim: bool,
    },
    /// `torch.where`: args `[cond, a, b]`, all three broadcast; `a` where `cond` holds.
    Where,
    /// `tril` (`upper` false) or `triu` of the last two axes: entries off the kept
    /// triangle are 0, the others are selected (never multiplied); arg `[x]`.
    Tri {
        upper: bool,
        diagonal: i64,
    },
    /// A fresh tensor of the node's shape, every element `value` (`ones`, `zeros`,
    /// `full`); no args.
    Fill(f64),
    /// `arange`: the rank-1 tensor `start + i * step` for `i` below its length (the
    /// node's shape), in the node's dtype (int64, or float32 after a float literal); no
    /// args.
    Arange {
        start: Poly,
        step: Poly,
    },
    /// args `[x, mask, value]`: where the boolean mask holds, the result is `value`.
    MaskedFill,
    /// `scaled_dot_product_attention`: args `[q, k, v, scale]` or `[q, k, v, scale, mask]`,
    /// `q [.., Hq, L, E]`, `k [.., Hk, S, E]`, `v [.., Hk, S, Ev]`, `scale` rank 0, a
    /// boolean mask keeping where it holds or a float mask added, broadcast to the scores
    /// `[.., Hq, L, S]`. `causal` keeps `j <= i`; with `gqa`, query head `h` reads key head
    /// `h / (Hq / Hk)`. A row whose every score is `-inf` is 0. Result `[.., Hq, L, Ev]`.
    Sdpa {
        causal: bool,
        gqa: bool,
    },
    Unary(UnaryOp),
    /// args `[a, b]`.
    Binary(BinaryOp),
    /// args `[a, b]`.
    Compare(CmpOp),
    /// `x[.., start : end, ..]` on `axis`; arg `[x]`.
    Slice {
        axis: usize,
        start: Poly,
        end: Poly,
    },
    /// `x[.., start : end : step, ..]` on `axis` with `step > 1`: `len` elements
    /// (`ceil((end - start) / step)`) from `start`, every `step`-th; a view whose stride on
    /// `axis` is `step` times `x`'s, as PyTorch's. Arg `[x]`.
    StepSlice {
        axis: usize,
        start: Poly,
        step: i64,
        len: Poly,
    },
    /// `table[index]` (`embedding(index, table)`): the rows of `table` along axis 0 that
    /// the int64 tensor `index` names, args `[table, index]`; result
    /// `index.shape ++ table.shape[1..]`. An index outside `0..table.shape[0]` is a
    /// run-time error naming the input it came from, the position and the value.
    Gather,
    /// `x[.., index, ..]`: drops `axis`; arg `[x]`.
    Select {
        axis: usize,
        index: Poly,
    },
    /// `for var in start..end { body }`: `body` lists the nodes evaluated for each value of
    /// `var`, in order, and `result` (one of them, or an outer value) is each item. No args.
    For {
        var: Sym,
        start: Poly,
        end: Poly,
        body: Vec<ValueId>,
        result: ValueId,
    },
    /// Joins the items of a `For` along an existing axis: arg `[seq]`.
    CatLoop(usize),
    /// Stacks the items of a `For` along a new axis: arg `[seq]`.
    Stack(usize),
    /// `x.index_copy(axis, index, source)` written through the window `starts..ends` of
    /// `x` (one range per axis: a slice, or one element for an integer index): args
    /// `[x, index, source]`, `index` int64 of rank 1, `source` of `x`'s rank with the
    /// window's sizes but `len(index)` on `axis`. The result is `x` with element `c` of
    /// `source` at `starts + c`, `c[axis]` replaced by `index[c[axis]]`; a later index
    /// wins over an earlier equal one. An index outside the window's `axis` is a run-time
    /// error. The checker makes it for `index_copy` (the whole of `x`) and for a state's
    /// in-place `index_copy_` (the window of the view it was called on), where the result
    /// is the state's next version: the native backend writes it into the state's buffer.
    IndexCopy {
        axis: usize,
        starts: Vec<Poly>,
        ends: Vec<Poly>,
    },

    // The ops below are made by the optimizer only (`attnc ir --stage optimized`); the
    // checker never produces them. Each result is a fresh row-major tensor. In optimized
    // programs, a node whose operands are (transitively) only params, literals and dims is
    // a load-time constant (the merged weights `cat(..)`, the scaled `mul(Wq, 0.125)`): a
    // backend may compute it once, when the weights are loaded, and the optimizer's cost
    // model counts it as free.
    /// Batched GEMM with an epilogue: `alpha * (op(a) @ op(b) + bias)`, args `[a, b]` or
    /// `[a, b, bias]`. `op(t)` is `t`, or with its flag `t.transpose(-2, -1)` (read through
    /// the strides, never copied). `a` and `b` have rank 2 or more; after `op`, `a` is
    /// `[.., n, k]` and `b` `[.., k, m]`, and their batch axes (all but the last two)
    /// broadcast as `matmul`'s do. `bias` is `[m]`, added to every row before `alpha`
    /// scales the sum. Result `[batch.., n, m]`.
    Gemm {
        trans_a: bool,
        trans_b: bool,
        alpha: f64,
    },
    /// Fused `softmax(masked_fill(x * scale, mask, fill), -1)`: args `[x]` (no mask) or
    /// `[x, mask]`, `mask` a bool tensor that broadcasts to `x`'s shape (PyTorch rules;
    /// true means "fill"). Result: `x`'s shape.
    MaskedSoftmax {
        scale: f64,
        fill: f64,
    },
    /// Fused attention `softmax(masked_fill((q @ k^T) * scale, mask, fill), -1) @ v`
    /// that never materializes the scores: args `[q, k, v]` or `[q, k, v, mask]`. `q` is
    /// `[.., n, d]`, `k` `[.., m, d]`, `v` `[.., m, e]`, all of rank 2 or more; batch axes
    /// broadcast as `matmul`'s (those of `q` and `k` first, then with `v`'s). `mask` is
    /// bool and broadcasts to the scores `[batch.., n, m]`. Result `[batch.., n, e]`.
    Attention {
        scale: f64,
        fill: f64,
    },
    /// Attention over scores a program computes: `softmax(masked_fill(s * scale, mask,
    /// fill), -1) @ v`, args `[s, v]` or `[s, v, mask]`. `s` is `[.., n, m]` (the scores
    /// after a score change such as soft-capping or a position bias), `v` `[.., m, e]`,
    /// batch axes broadcast as `matmul`'s; `mask` as for [`Op::Attention`]. Where `s` is an
    /// elementwise function of one `q @ kᵀ`, the backend computes it inside the attention
    /// kernel, tile by tile, and never stores it. Result `[batch.., n, e]`.
    ScoredAttention {
        scale: f64,
        fill: f64,
    },
    /// `torch.cat(args, axis)` of one or more tensors of one rank that agree on every
    /// other axis. The optimizer uses it on params only (the merged Q/K/V weights), so
    /// a backend evaluates it once, when the weights are loaded.
    Cat(usize),
}

impl Op {
    /// The op's name: the one `attnc ir` prints (`transpose`, `exp`, `gemm`, `triu`), and
    /// the one kernel labels use.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Param(_) => "param",
            Op::Input(_) => "input",
            Op::Literal(_) => "literal",
            Op::DimValue(_) => "dim",
            Op::Linear => "linear",
            Op::MatMul => "matmul",
            Op::Transpose(..) => "transpose",
            Op::Permute(_) => "permute",
            Op::View(_) => "view",
            Op::Reshape(_) => "reshape",
            Op::Contiguous => "contiguous",
            Op::Expand(_) => "expand",
            Op::Unsqueeze(_) => "unsqueeze",
            Op::Squeeze(_) => "squeeze",
            Op::Softmax(_) => "softmax",
            Op::Reduce { op, .. } => op.name(),
            Op::Where => "where",
            Op::Tri { upper: true, .. } => "triu",
            Op::Tri { upper: false, .. } => "tril",
            Op::Fill(_) => "fill",
            Op::Arange { .. } => "arange",
            Op::MaskedFill => "masked_fill",
            Op::Sdpa { .. } => "scaled_dot_product_attention",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Slice { .. } => "slice",
            Op::StepSlice { .. } => "step_slice",
            Op::Gather => "gather",
            Op::Select { .. } => "select",
            Op::For { .. } => "for",
            Op::CatLoop(_) => "cat_loop",
            Op::Stack(_) => "stack",
            Op::IndexCopy { .. } => "index_copy",
            Op::Gemm { .. } => "gemm",
            Op::MaskedSoftmax { .. } => "masked_softmax",
            Op::Attention { .. } => "attention",
            Op::ScoredAttention { .. } => "scored_attention",
            Op::Cat(_) => "cat",
        }
    }

    /// The op's parameters, in the order `attnc ir` prints them after its operands and the
    /// optimizer's e-graph holds them after its operands (`opt::lang`), given its operands'
    /// types and its own shape. The list is whole, so the op can be rebuilt from it; what
    /// the text leaves out is [`Attr::Implied`] (a mask's fill where there is no mask, an
    /// index copy's window where it is the whole operand, a creation's shape, which the
    /// type shows). A loop's parameters are in its header.
    pub fn attrs(&self, operands: &[&TensorType], shape: &[Poly]) -> Vec<Attr> {
        let int = |a: usize| Attr::Int(a as i64);
        let named = |name: &'static str, a: Attr| Attr::Named(name, Box::new(a));
        let implied_unless = |shown: bool, a: Attr| match shown {
            true => a,
            false => Attr::Implied(Box::new(a)),
        };
        let own_shape = || Attr::Implied(Box::new(Attr::Shape(shape.to_vec())));
        let masked = |scale: f64, fill: f64, unmasked: usize| {
            let fill = named("fill", Attr::Float(fill));
            vec![
                named("scale", Attr::Float(scale)),
                implied_unless(operands.len() > unmasked, fill),
            ]
        };
        match self {
            Op::Param(i) | Op::Input(i) => vec![int(*i), own_shape()],
            Op::Fill(x) => vec![Attr::Float(*x), own_shape()],
            Op::Literal(x) => vec![Attr::Float(*x)],
            Op::DimValue(p) => vec![Attr::Dim(p.clone())],
            Op::Transpose(a, b) => vec![int(*a), int(*b)],
            Op::Permute(axes) => vec![Attr::Order(axes.clone())],
            Op::View(s) | Op::Reshape(s) | Op::Expand(s) => vec![Attr::Shape(s.clone())],
            Op::Unsqueeze(a)
            | Op::Squeeze(a)
            | Op::Softmax(a)
            | Op::CatLoop(a)
            | Op::Stack(a)
            | Op::Cat(a) => {
                vec![int(*a)]
            }
            // The name says which triangle.
            Op::Tri { upper, diagonal } => {
                vec![Attr::Implied(Box::new(Attr::Bool(*upper))), Attr::Int(*diagonal)]
            }
            Op::Arange { start, step } => vec![
                Attr::Dim(start.clone()),
                named("step", Attr::Dim(step.clone())),
                own_shape(),
            ],
            Op::Reduce { axes, keepdim, .. } => {
                vec![Attr::Axes(axes.clone()), named("keepdim", Attr::Bool(*keepdim))]
            }
            Op::Sdpa { causal, gqa } => vec![
                named("is_causal", Attr::Bool(*causal)),
                named("enable_gqa", Attr::Bool(*gqa)),
            ],
            Op::Slice { axis, start, end } => vec![int(*axis), Attr::Range(start.clone(), end.clone())],
            Op::StepSlice {
                axis,
                start,
                step,
                len,
            } => vec![
                int(*axis),
                Attr::Dim(start.clone()),
                Attr::Int(*step),
                Attr::Dim(len.clone()),
            ],
            Op::Select { axis, index } => vec![int(*axis), Attr::Dim(index.clone())],
            Op::IndexCopy { axis, starts, ends } => {
                let whole = operands.first().map_or(&[][..], |x| &x.shape[..]);
                let part = starts
                    .iter()
                    .zip(ends)
                    .zip(whole)
                    .any(|((s, e), n)| !s.is_zero() || e != n);
                let ranges = starts.iter().cloned().zip(ends.iter().cloned()).collect();
                vec![
                    int(*axis),
                    implied_unless(part, named("at", Attr::Ranges(ranges))),
                ]
            }
            Op::Gemm {
                trans_a,
                trans_b,
                alpha,
            } => vec![
                Attr::Flag("trans_a", *trans_a),
                Attr::Flag("trans_b", *trans_b),
                implied_unless(*alpha != 1.0, named("alpha", Attr::Float(*alpha))),
            ],
            Op::MaskedSoftmax { scale, fill } => masked(*scale, *fill, 1),
            Op::Attention { scale, fill } => masked(*scale, *fill, 3),
            Op::ScoredAttention { scale, fill } => masked(*scale, *fill, 2),
            Op::Linear
            | Op::MatMul
            | Op::Contiguous
            | Op::Where
            | Op::MaskedFill
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Gather
            | Op::For { .. } => vec![],
        }
    }

    /// Whether the op computes each element from the same element of its (broadcast)
    /// operands alone: what a backend fuses into one map.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::MaskedFill | Op::Where
        )
    }
}

/// One parameter of an op, in a form the IR text prints without knowing the op.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// An axis, a diagonal: `1`.
    Int(i64),
    /// `0.125`, as Rust prints an `f64` with `{:?}`.
    Float(f64),
    Bool(bool),
    Dim(Poly),
    /// Sizes: `[B, N, D]`.
    Shape(Vec<Poly>),
    /// Axes: `[0, 2]`.
    Axes(Vec<usize>),
    /// A permutation's axes, in a row: `0, 2, 1`.
    Order(Vec<usize>),
    /// `start..end`.
    Range(Poly, Poly),
    /// One range per axis: `[0..B, 2..3]`.
    Ranges(Vec<(Poly, Poly)>),
    /// A flag, shown as its word only where it holds: `trans_a`.
    Flag(&'static str, bool),
    /// A parameter shown with its name: `keepdim=true`.
    Named(&'static str, Box<Attr>),
    /// A parameter the text leaves out, its value going without saying there.
    Implied(Box<Attr>),
}

/// One SSA value.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub args: Vec<ValueId>,
    pub ty: Type,
    /// Where the value was written in the source (inside an inlined function: in its body).
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    pub name: String,
    /// The tensor's key in the weights file.
    pub key: String,
    pub shape: Vec<Poly>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InputDecl {
    pub name: String,
    pub shape: Vec<Poly>,
    /// The declared element type (`input ids: [B, N] int64`); float32 by default.
    pub dtype: DType,
    /// Every use reaches a comparison, so the default value is all ones ("keep everything").
    pub mask_only: bool,
    /// Declared `state`: kept between calls, zeros at first, and written back from the
    /// output of the same name (see [`OutputDecl::state`]).
    pub state: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OutputDecl {
    pub name: String,
    pub value: ValueId,
    /// The final version of this state input: what a call leaves behind in it. A backend
    /// computes it as any output; a caller keeps it rather than showing it.
    pub state: Option<usize>,
    pub span: Span,
}

/// What kind of name a [`Binding`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    Param,
    Input,
    State,
    Let,
    Output,
}

/// A value the program names at top level, for `attnc check` (source order).
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub name: String,
    pub kind: BindingKind,
    pub value: ValueId,
    pub span: Span,
}

/// An `assert` about dims that mentions free dims: checked once they are bound (E0209).
#[derive(Clone, Debug, PartialEq)]
pub struct DimAssert {
    pub lhs: Poly,
    pub op: CmpOp,
    pub rhs: Poly,
    /// The condition as written, for the run-time message.
    pub text: String,
    pub span: Span,
}

/// A checked program: dims, declarations, the node arena and the outputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub dims: DimTable,
    pub params: Vec<ParamDecl>,
    pub inputs: Vec<InputDecl>,
    pub nodes: Vec<Node>,
    /// The top-level nodes in evaluation order (loop bodies are listed in their `For`).
    pub body: Vec<ValueId>,
    pub outputs: Vec<OutputDecl>,
    pub bindings: Vec<Binding>,
    pub asserts: Vec<DimAssert>,
    /// Where `body` holds each iteration of an unrolled loop over layers (positions in
    /// `body`, in order, disjoint), so that the optimizer can work on one layer at a time
    /// and on identical layers once (`opt::layers`).
    pub layers: Vec<std::ops::Range<usize>>,
}

impl Program {
    pub fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id]
    }

    /// The tensor type of a value; sequences answer with their item type.
    pub fn tensor_type(&self, id: ValueId) -> &TensorType {
        match &self.nodes[id].ty {
            Type::Tensor(t) => t,
            Type::Seq { item, .. } => item,
        }
    }
}

impl TensorType {
    /// A fresh row-major tensor of this shape.
    pub fn row_major(shape: Vec<Poly>, dtype: DType) -> TensorType {
        let strides = row_major_strides(&shape);
        TensorType {
            shape,
            strides,
            dtype,
            others: OtherStrides::None,
        }
    }

    /// Whether some sizes give the value other strides than [`TensorType::strides`].
    pub fn varies(&self) -> bool {
        self.others != OtherStrides::None
    }

    /// Every list of strides the value may have, the general one first; `None` where they
    /// are too many to follow.
    pub fn layouts(&self) -> Option<Vec<&[Poly]>> {
        let mut all = vec![self.strides.as_slice()];
        match &self.others {
            OtherStrides::None => {}
            OtherStrides::Listed(others) => all.extend(others.iter().map(Vec::as_slice)),
            OtherStrides::Any => return None,
        }
        Some(all)
    }

    /// The value with one of its possible strides, known exactly.
    pub fn exact(&self, strides: &[Poly]) -> TensorType {
        TensorType {
            shape: self.shape.clone(),
            strides: strides.to_vec(),
            dtype: self.dtype,
            others: OtherStrides::None,
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> Poly {
        self.shape.iter().fold(Poly::int(1), |acc, d| acc.mul(d))
    }

    /// Row-major for every value of the free dims, whichever strides the sizes give (axes of
    /// size 1 given the constants do not count, and a tensor without elements is contiguous,
    /// as in PyTorch's `is_contiguous`).
    pub fn is_contiguous(&self, dims: &DimTable) -> bool {
        // PyTorch's is_contiguous holds for any tensor without elements.
        if self.shape.iter().any(|n| dims.equal(n, &Poly::int(0))) {
            return true;
        }
        self.layouts()
            .is_some_and(|all| all.iter().all(|strides| self.is_row_major(strides, dims)))
    }

    /// Whether `strides`, one list this value may have, are row-major for its shape
    /// (an axis of size 1 may have any stride).
    pub fn is_row_major(&self, strides: &[Poly], dims: &DimTable) -> bool {
        let expected = row_major_strides(&self.shape);
        self.shape
            .iter()
            .zip(strides.iter().zip(&expected))
            .all(|(size, (s, e))| dims.is_one(size) || dims.equal(s, e))
    }
}

/// The strides of a row-major tensor of `shape`.
pub fn row_major_strides(shape: &[Poly]) -> Vec<Poly> {
    let mut strides = vec![Poly::int(1); shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].mul(&shape[i + 1]);
    }
    strides
}
