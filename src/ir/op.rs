//! What a node computes ([`Op`]) and, written once per op, what every stage asks of it
//! without knowing the op: its name, its parameters ([`Attr`]), the dims it holds.

use super::{CmpOp, TensorType, ValueId};
use crate::dims::{Poly, Sym};
use crate::ops::prim::{BinaryOp, ReduceOp, UnaryOp};

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

    /// The op with `f` applied to every dim expression it holds. The match names every op, so a
    /// new op that holds one cannot be missed here.
    pub fn map_polys(&self, f: &dyn Fn(&Poly) -> Poly) -> Op {
        let all = |ps: &[Poly]| ps.iter().map(f).collect::<Vec<_>>();
        match self {
            Op::DimValue(p) => Op::DimValue(f(p)),
            Op::View(s) => Op::View(all(s)),
            Op::Reshape(s) => Op::Reshape(all(s)),
            Op::Expand(s) => Op::Expand(all(s)),
            Op::Arange { start, step } => Op::Arange {
                start: f(start),
                step: f(step),
            },
            Op::Slice { axis, start, end } => Op::Slice {
                axis: *axis,
                start: f(start),
                end: f(end),
            },
            Op::StepSlice {
                axis,
                start,
                step,
                len,
            } => Op::StepSlice {
                axis: *axis,
                start: f(start),
                step: *step,
                len: f(len),
            },
            Op::Select { axis, index } => Op::Select {
                axis: *axis,
                index: f(index),
            },
            Op::For {
                var,
                start,
                end,
                body,
                result,
            } => Op::For {
                var: *var,
                start: f(start),
                end: f(end),
                body: body.clone(),
                result: *result,
            },
            Op::IndexCopy { axis, starts, ends } => Op::IndexCopy {
                axis: *axis,
                starts: all(starts),
                ends: all(ends),
            },
            Op::Param(_)
            | Op::Input(_)
            | Op::Literal(_)
            | Op::Linear
            | Op::MatMul
            | Op::Transpose(..)
            | Op::Permute(_)
            | Op::Contiguous
            | Op::Unsqueeze(_)
            | Op::Squeeze(_)
            | Op::Softmax(_)
            | Op::Reduce { .. }
            | Op::Where
            | Op::Tri { .. }
            | Op::Fill(_)
            | Op::MaskedFill
            | Op::Sdpa { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Gather
            | Op::CatLoop(_)
            | Op::Stack(_)
            | Op::Gemm { .. }
            | Op::MaskedSoftmax { .. }
            | Op::Attention { .. }
            | Op::ScoredAttention { .. }
            | Op::Cat(_) => self.clone(),
        }
    }

    /// The FLOPs of the dense matrix products the op computes (2 per multiply-add), from
    /// its operands' sizes and its own: what `attnc bench` divides by its time. Ops with
    /// none count 0; a loop's body is counted node by node, once per iteration, by the
    /// caller. The optimizer's fused forms count 0: the count is of the source program.
    pub fn product_flops(&self, operands: &[Vec<f64>], shape: &[f64]) -> f64 {
        let numel = |s: &[f64]| s.iter().product::<f64>();
        let last = |s: &[f64]| s.last().copied().unwrap_or(1.0);
        let operand = |i: usize| operands.get(i).map_or(&[][..], |s| &s[..]);
        match self {
            // Every output element is a dot product over the inner dim.
            Op::Linear | Op::MatMul => 2.0 * numel(shape) * last(operand(0)),
            // Its two products, dense: `[.., L, S]` scores over `E`, then over `Ev`.
            Op::Sdpa { .. } => {
                let keys = operand(1).iter().rev().nth(1).copied().unwrap_or(0.0);
                let rows = numel(shape) / last(shape).max(1.0);
                2.0 * rows * keys * (last(operand(0)) + last(shape))
            }
            Op::For { .. }
            | Op::Contiguous
            | Op::Where
            | Op::MaskedFill
            | Op::Gather
            | Op::Param(..)
            | Op::Input(..)
            | Op::Literal(..)
            | Op::DimValue(..)
            | Op::Transpose(..)
            | Op::Permute(..)
            | Op::View(..)
            | Op::Reshape(..)
            | Op::Expand(..)
            | Op::Unsqueeze(..)
            | Op::Squeeze(..)
            | Op::Softmax(..)
            | Op::Fill(..)
            | Op::Unary(..)
            | Op::Binary(..)
            | Op::Compare(..)
            | Op::CatLoop(..)
            | Op::Stack(..)
            | Op::Cat(..)
            | Op::Reduce { .. }
            | Op::Tri { .. }
            | Op::Arange { .. }
            | Op::Slice { .. }
            | Op::StepSlice { .. }
            | Op::Select { .. }
            | Op::IndexCopy { .. }
            | Op::Gemm { .. }
            | Op::MaskedSoftmax { .. }
            | Op::Attention { .. }
            | Op::ScoredAttention { .. } => 0.0,
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
