//! Fusion decisions, made once on the IR before anything is lowered: which nodes a
//! consumer's kernel absorbs, so that they never get a kernel (or a buffer) of their own.
//!
//! The patterns, each only where the absorbed values have no other use and are not outputs:
//! - `softmax(masked_fill(x * s, mask op c, fill))` (either part optional, `x / s` too):
//!   one [`crate::kernel::Softmax`] kernel.
//! - `softmax(..(q @ kᵀ)..) @ v` over the last axis: one flash-style
//!   [`crate::kernel::Attention`] kernel; the probabilities are never stored.
//! - `(a @ b) / s`, `(a @ b) * s`: the scale becomes the GEMM's `alpha`.
//! - elementwise ops (`+ - * /`, `neg sqrt exp`, comparisons, `masked_fill`) feeding
//!   elementwise ops: one [`crate::kernel::Map`] kernel per tree.
//! - such a tree over the whole result of a `linear`, a matmul or a `gemm` (through
//!   `view`s): the GEMM's [`crate::kernel::Epilogue`], applied to each tile as it is
//!   written (the lowering falls back to a map where the plan does not allow it).
//! - elementwise ops and sums, maxima and minima along the last axis (`keepdim`) that only
//!   an elementwise root reads, directly or not: one [`crate::kernel::Row`] kernel
//!   reading each row once, its reductions as stages (`layer_norm`, `rms_norm`, the
//!   Annotated Transformer's `a_2 * (x - mean) / (std + eps) + b_2`, softmax by hand).
//!
//! - the optimizer's attention ops: a mask that is a function of positions
//!   ([`super::positions`]) is computed in the kernel from `i` and `j`; the score change of a
//!   `scored_attention` ([`super::scores`]) is computed in the kernel; keys and values that
//!   are `cat([cache, new])` along the keys are read as two segments, never joined.
//!
//! - `x * cos + rotate_half(x) * sin` ([`super::rope`]): the rotation of q or k, made part
//!   of the projection that writes `x` where nothing else reads it.
//!
//! Rank-0 values computed from literals and dims alone (`sqrt(Dk)`) are constants.

use super::positions::{self, Positions};
use super::rope::{self, RopePat};
use super::scores::{self, ScorePlan};
use crate::dims::DimTable;
use crate::hash::{HashMap, HashSet};
use crate::ir::{BinaryOp, CmpOp, DType, Op, Program, ValueId};
use crate::kernel::{IndexMask, Keep};
use std::collections::BinaryHeap;

mod attention;

/// The most nodes one row kernel computes. Each stage's formula repeats the elementwise
/// nodes below it, so a kernel's code grows with the square of its nodes: a chain of
/// `y = y.sum(-1, keepdim=True) + y` fused whole took minutes to compile at 1,000
/// statements. A norm or a softmax by hand is a dozen nodes.
const MAX_ROW_NODES: usize = 64;

/// A constant scale: multiply by `node`'s value, or divide by it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub node: ValueId,
    pub divide: bool,
}

/// `masked_fill(.., mask op rhs, fill)` with `rhs` and `fill` constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaskPat {
    pub mask: ValueId,
    pub op: CmpOp,
    pub rhs: ValueId,
    pub fill: ValueId,
}

/// What a softmax absorbs: `softmax(masked_fill(x * scale, mask))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxPat {
    pub x: ValueId,
    pub scale: Option<Scale>,
    pub mask: Option<MaskPat>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fused {
    Softmax(SoftmaxPat),
    /// On the `p @ v` matmul: `q @ kt` are the scores' operands.
    Attention {
        q: ValueId,
        kt: ValueId,
        v: ValueId,
        softmax: SoftmaxPat,
    },
    /// On a `/ s` or `* s` node: the matmul whose alpha it becomes.
    GemmAlpha {
        matmul: ValueId,
        scale: Scale,
    },
}

/// The decisions for a whole program.
pub struct Fusion {
    /// Nodes computed inside a consumer's kernel.
    pub absorbed: Vec<bool>,
    pub fused: HashMap<ValueId, Fused>,
    /// Rank-0 values that are constants.
    pub constant: Vec<bool>,
    /// Values with exactly one use that are not outputs.
    pub single: Vec<bool>,
    /// `linear`s of one input with weights of one shape (`q`, `k` and `v` of
    /// self-attention), by their first: one GEMM over the concatenated weights computes all.
    pub siblings: HashMap<ValueId, Vec<ValueId>>,
    /// Elementwise roots, each with the GEMM result among its tree's leaves that it may
    /// become the epilogue of.
    pub epilogue: HashMap<ValueId, ValueId>,
    /// Elementwise roots computed by one row kernel, each with the nodes it computes
    /// (elementwise ops and reductions along the last axis), in evaluation order.
    pub rows: HashMap<ValueId, Vec<ValueId>>,
    /// By attention node: where its mask, a function of positions, keeps the scores.
    pub positions: HashMap<ValueId, Keep>,
    /// By `scaled_dot_product_attention` node with a mask of positions: what its removed
    /// scores become (`-inf` for a boolean mask, the value an additive one adds).
    pub fills: HashMap<ValueId, f32>,
    /// By `scored_attention` node: the score change its kernel computes.
    pub scores: HashMap<ValueId, ScorePlan>,
    /// By attention node: its keys and values, each a `cat` of a cache and new entries
    /// along the keys, read in place.
    pub tails: HashMap<ValueId, [ValueId; 2]>,
    /// By attention node: keys and values of fewer heads that it repeats, read in place,
    /// and how many query heads share each.
    pub groups: HashMap<ValueId, ([ValueId; 2], usize)>,
    /// Rotary embeddings, by their root.
    pub rope: HashMap<ValueId, RopePat>,
}

/// The decisions for `program` at the dim values `dims`.
pub fn decide(program: &Program, dims: &[Option<i64>]) -> Fusion {
    let n = program.nodes.len();
    let mut uses = vec![0usize; n];
    let mut order = Vec::new();
    collect(program, &program.body, &mut uses, &mut order);
    for o in &program.outputs {
        uses[o.value] += 2; // an output is never absorbed
    }
    let mut constant = vec![false; n];
    for &id in &order {
        constant[id] = is_constant(program, id, &constant);
    }
    let mut f = Decider {
        program,
        dims: &program.dims,
        single: uses.iter().map(|&u| u == 1).collect(),
        uses,
        constant,
        absorbed: vec![false; n],
        fused: HashMap::default(),
        epilogue: HashMap::default(),
        rows: HashMap::default(),
        rope: HashMap::default(),
        values: dims,
        attention: Default::default(),
    };
    for &id in order.iter().rev() {
        if !f.absorbed[id] {
            f.visit(id);
        }
    }
    let mut siblings = HashMap::default();
    f.siblings(&program.body, &mut siblings);
    Fusion {
        absorbed: f.absorbed,
        fused: f.fused,
        constant: f.constant,
        single: f.single,
        siblings,
        epilogue: f.epilogue,
        rows: f.rows,
        positions: f.attention.positions,
        fills: f.attention.fills,
        scores: f.attention.scores,
        tails: f.attention.tails,
        groups: f.attention.groups,
        rope: f.rope,
    }
}

/// What the attention kernels compute from positions, in place, or inside.
#[derive(Default)]
struct AttentionParts {
    positions: HashMap<ValueId, Keep>,
    fills: HashMap<ValueId, f32>,
    scores: HashMap<ValueId, ScorePlan>,
    tails: HashMap<ValueId, [ValueId; 2]>,
    groups: HashMap<ValueId, ([ValueId; 2], usize)>,
}

/// Counts uses and lists every node in evaluation order, loop bodies included.
fn collect(program: &Program, body: &[ValueId], uses: &mut [usize], order: &mut Vec<ValueId>) {
    for &id in body {
        let node = program.node(id);
        for &a in &node.args {
            uses[a] += 1;
        }
        if let Op::For { body, result, .. } = &node.op {
            collect(program, body, uses, order);
            uses[*result] += 2; // each item is a value of the sequence
        }
        order.push(id);
    }
}

fn is_constant(program: &Program, id: ValueId, constant: &[bool]) -> bool {
    let node = program.node(id);
    if program.tensor_type(id).rank() != 0 {
        return false;
    }
    match node.op {
        Op::Literal(_) | Op::DimValue(_) => true,
        Op::Unary(_) | Op::Binary(_) => node.args.iter().all(|&a| constant[a]),
        _ => false,
    }
}

/// Whether the op is elementwise arithmetic a [`crate::kernel::Map`] computes.
struct Decider<'p> {
    program: &'p Program,
    dims: &'p DimTable,
    single: Vec<bool>,
    uses: Vec<usize>,
    constant: Vec<bool>,
    absorbed: Vec<bool>,
    fused: HashMap<ValueId, Fused>,
    epilogue: HashMap<ValueId, ValueId>,
    rows: HashMap<ValueId, Vec<ValueId>>,
    rope: HashMap<ValueId, RopePat>,
    /// The dims' values.
    values: &'p [Option<i64>],
    attention: AttentionParts,
}

impl Decider<'_> {
    fn op(&self, id: ValueId) -> &Op {
        &self.program.node(id).op
    }

    fn args(&self, id: ValueId) -> &[ValueId] {
        &self.program.node(id).args
    }

    fn same_shape(&self, a: ValueId, b: ValueId) -> bool {
        let (x, y) = (
            &self.program.tensor_type(a).shape,
            &self.program.tensor_type(b).shape,
        );
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| self.dims.equal(p, q))
    }

    /// Single use, not an output, not yet taken by another pattern.
    fn free(&self, id: ValueId) -> bool {
        self.single[id] && !self.absorbed[id] && !self.constant[id]
    }

    fn visit(&mut self, id: ValueId) {
        match self.op(id) {
            Op::MatMul => {
                if let Some(f) = self.attention(id) {
                    self.fused.insert(id, f);
                }
            }
            Op::Attention { .. } | Op::ScoredAttention { .. } => self.attention_parts(id),
            Op::Sdpa { .. } => self.sdpa_parts(id),
            Op::MaskedSoftmax { .. } => self.absorb_mask_compare(id),
            Op::Softmax(_) if !self.fused.contains_key(&id) => {
                let pat = self.softmax(id);
                self.fused.insert(id, Fused::Softmax(pat));
            }
            op if op.is_elementwise() && !self.constant[id] => {
                let free = |x: ValueId| self.free(x);
                if let Some(pat) = rope::find(self.program, self.values, id, &self.uses, &free) {
                    for &n in &pat.inner {
                        self.absorbed[n] = true;
                    }
                    self.rope.insert(id, pat);
                    return;
                }
                if let Some(scale) = self.scaled_matmul(id) {
                    self.fused.insert(id, scale);
                    return;
                }
                if let Some(nodes) = self.row(id) {
                    for &n in &nodes {
                        self.absorbed[n] = true;
                    }
                    self.rows.insert(id, nodes);
                    return;
                }
                self.absorb_map_args(id);
                if let Some(leaf) = self.gemm_leaf(id) {
                    self.epilogue.insert(id, leaf);
                }
            }
            _ => {}
        }
    }

    /// The nodes one row kernel computes for the elementwise `root` (of shape `[rows.., n]`):
    /// elementwise ops of shape `[rows.., n]` or `[rows.., 1]` and sums, maxima and minima
    /// of `[rows.., n]` values along the last axis, read by nothing but the root and each
    /// other; `None` unless there is a reduction among them (else it is a map).
    ///
    /// Walked from the root down in decreasing id: a node's readers all come after it, so
    /// when it is reached, every reader it has inside the kernel is counted. The walk stops
    /// at [`MAX_ROW_NODES`]: the nodes below are computed by kernels of their own.
    fn row(&self, root: ValueId) -> Option<Vec<ValueId>> {
        let shape = &self.program.tensor_type(root).shape;
        let (_, rows) = shape.split_last()?;
        let rowwise = |v: ValueId, per_row: bool| {
            let s = &self.program.tensor_type(v).shape;
            let last_ok = match per_row {
                true => s.last().is_some_and(|p| self.dims.is_one(p)),
                false => self.same_shape(v, root),
            };
            s.len() == shape.len() && last_ok && rows.iter().zip(s).all(|(p, q)| self.dims.equal(p, q))
        };
        let mut reads: HashMap<ValueId, usize> = HashMap::default();
        let mut heap = BinaryHeap::new();
        let mut inside = HashSet::default();
        let mut reductions = 0;
        let take = |v: ValueId, reads: &mut HashMap<_, _>, heap: &mut BinaryHeap<_>| {
            for &a in self.args(v) {
                *reads.entry(a).or_insert(0usize) += 1;
                heap.push(a);
            }
        };
        take(root, &mut reads, &mut heap);
        while let Some(v) = heap.pop() {
            if inside.contains(&v) || reads[&v] != self.uses[v] || self.absorbed[v] || self.constant[v] {
                continue;
            }
            let fits = match self.op(v) {
                Op::Reduce {
                    axes, keepdim: true, ..
                } => {
                    let x = self.args(v)[0];
                    let last = axes.as_slice() == [shape.len() - 1];
                    last && rowwise(v, true) && rowwise(x, false)
                }
                op => op.is_elementwise() && (rowwise(v, false) || rowwise(v, true)),
            };
            if fits && inside.len() == MAX_ROW_NODES {
                break;
            }
            if fits {
                reductions += usize::from(matches!(self.op(v), Op::Reduce { .. }));
                inside.insert(v);
                take(v, &mut reads, &mut heap);
            }
        }
        let mut nodes: Vec<ValueId> = inside.into_iter().collect();
        nodes.sort();
        (reductions > 0).then_some(nodes)
    }

    /// The first leaf of the elementwise tree rooted at `root` that only the tree reads and
    /// that may be a GEMM's whole result: a `linear`, a matmul or a `gemm` (possibly
    /// through `view`s), or an elementwise root (itself an epilogue, so two compose: GELU
    /// over `x @ w + b`), of the root's shape; else a GEMM whose result the tree reads as
    /// two slices of its last axis, and nothing else reads.
    fn gemm_leaf(&self, root: ValueId) -> Option<ValueId> {
        let mut reads = HashMap::default();
        self.leaves(root, &mut reads);
        let mut leaves: Vec<_> = reads.into_iter().collect();
        leaves.sort();
        let only_here = |&(leaf, n): &(ValueId, usize)| {
            self.uses[leaf] == n && !self.absorbed[leaf] && !self.constant[leaf]
        };
        let whole = leaves.iter().filter(|l| only_here(l)).find_map(|&(leaf, _)| {
            let gemm = match self.op(leaf) {
                Op::Linear | Op::MatMul | Op::Gemm { .. } => true,
                Op::View(_) | Op::Reshape(_) => self.is_gemm_result(self.args(leaf)[0]),
                op => op.is_elementwise(),
            };
            (gemm && self.same_shape(leaf, root)).then_some(leaf)
        });
        whole.or_else(|| {
            // Two slices of the last axis of one GEMM's result that nothing else reads (the
            // gate and up halves of SwiGLU's merged projection): a paired epilogue.
            let mut halves = leaves.iter().filter(|l| only_here(l)).filter_map(|&(leaf, _)| {
                let last = self.program.tensor_type(leaf).rank().checked_sub(1)?;
                match self.op(leaf) {
                    Op::Slice { axis, .. } if *axis == last && self.same_shape(leaf, root) => {
                        Some(self.args(leaf)[0])
                    }
                    _ => None,
                }
            });
            let (p, q) = (halves.next()?, halves.next()?);
            let gemm = matches!(self.op(p), Op::Linear | Op::MatMul | Op::Gemm { .. });
            (p == q && gemm && self.uses[p] == 2 && !self.absorbed[p]).then_some(p)
        })
    }

    /// Counts how often the elementwise tree of `root` (its absorbed nodes) reads each of its
    /// leaves; walked with a stack, as [`Self::absorb_map_args`] builds it.
    fn leaves(&self, root: ValueId, reads: &mut HashMap<ValueId, usize>) {
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            for &a in self.args(id) {
                if self.absorbed[a] && self.op(a).is_elementwise() {
                    stack.push(a);
                } else {
                    *reads.entry(a).or_default() += 1;
                }
            }
        }
    }

    /// Whether `id` is a GEMM's result, read only by its one user, through views.
    fn is_gemm_result(&self, id: ValueId) -> bool {
        self.free(id)
            && match self.op(id) {
                Op::Linear | Op::MatMul | Op::Gemm { .. } => true,
                Op::View(_) | Op::Reshape(_) => self.is_gemm_result(self.args(id)[0]),
                _ => false,
            }
    }

    /// The optimizer's fused softmax and attention take a bool mask (their last argument
    /// after the tensors); a comparison with a constant that nothing else reads is tested
    /// inside their kernel instead of in a kernel of its own.
    fn absorb_mask_compare(&mut self, id: ValueId) {
        let tensors = match self.op(id) {
            Op::Attention { .. } => 3,
            Op::ScoredAttention { .. } => 2,
            _ => 1,
        };
        let Some(&m) = self.args(id).get(tensors) else {
            return;
        };
        if let (Op::Compare(_), &[_, c]) = (self.op(m), self.args(m)) {
            if self.free(m) && self.constant[c] {
                self.absorbed[m] = true;
            }
        }
    }

    /// Absorbs `id` and, recursively, its operands, as far as nothing else reads them.
    fn absorb_tree(&mut self, id: ValueId) {
        if self.free(id) {
            self.absorbed[id] = true;
            for a in self.args(id).to_vec() {
                self.absorb_tree(a);
            }
        }
    }

    /// Groups the `linear`s of each body (loop bodies apart) that read one input with
    /// params of one shape as weights (and params as biases, all or none); the first of a
    /// group computes it, the others are absorbed.
    fn siblings(&mut self, body: &[ValueId], groups: &mut HashMap<ValueId, Vec<ValueId>>) {
        let is_param = |d: &Self, v: ValueId| matches!(d.op(v), Op::Param(_));
        let mut open: Vec<Vec<ValueId>> = Vec::new();
        for &id in body {
            if let Op::For { body, .. } = self.op(id) {
                let body = body.clone();
                self.siblings(&body, groups);
                continue;
            }
            let args = self.args(id);
            let fits = matches!(self.op(id), Op::Linear)
                && !self.absorbed[id]
                && args[1..].iter().all(|&a| is_param(self, a));
            if !fits {
                continue;
            }
            let same = |d: &Self, g: &[ValueId]| {
                let first = d.args(g[0]);
                first[0] == args[0] && first.len() == args.len() && d.same_shape(first[1], args[1])
            };
            match open.iter_mut().find(|g| same(self, g)) {
                Some(g) => g.push(id),
                None => open.push(vec![id]),
            }
        }
        for g in open.into_iter().filter(|g| g.len() > 1) {
            for &m in &g[1..] {
                self.absorbed[m] = true;
            }
            groups.insert(g[0], g);
        }
    }

    /// Absorbs the elementwise producers of an elementwise root, and theirs in turn. They
    /// are walked with a stack of their own, not by recursion: a chain of them is as long as
    /// the program makes it, deeper than the thread's stack.
    fn absorb_map_args(&mut self, root: ValueId) {
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            for a in self.args(id).to_vec() {
                if self.free(a) && self.op(a).is_elementwise() {
                    self.absorbed[a] = true;
                    stack.push(a);
                }
            }
        }
    }

    /// A constant scale applied to `id`'s first operand: `x / c`, `x * c`, `c * x`.
    fn scale_of(&self, id: ValueId) -> Option<(ValueId, Scale)> {
        let args = self.args(id);
        match (self.op(id), args) {
            (Op::Binary(BinaryOp::Div), &[x, c]) if self.constant[c] => Some((
                x,
                Scale {
                    node: c,
                    divide: true,
                },
            )),
            (Op::Binary(BinaryOp::Mul), &[x, c]) if self.constant[c] => Some((
                x,
                Scale {
                    node: c,
                    divide: false,
                },
            )),
            (Op::Binary(BinaryOp::Mul), &[c, x]) if self.constant[c] => Some((
                x,
                Scale {
                    node: c,
                    divide: false,
                },
            )),
            _ => None,
        }
    }

    /// `(a @ b) * s` as one GEMM of alpha `s`, the matmul absorbed: lowering the scale
    /// computes the product from `a` and `b`, so the matmul gets no kernel of its own. A
    /// matmul that is attention's `p @ v` stays the attention kernel (which absorbs the
    /// softmax and the scores, so no GEMM could read `p`); the scale is then a map after it.
    fn scaled_matmul(&mut self, id: ValueId) -> Option<Fused> {
        let (x, scale) = self.scale_of(id)?;
        let ok = matches!(self.op(x), Op::MatMul) && self.free(x) && self.same_shape(x, id);
        if !ok {
            return None;
        }
        if let Some(attention) = self.attention(x) {
            self.fused.insert(x, attention);
            return None;
        }
        self.absorbed[x] = true;
        Some(Fused::GemmAlpha { matmul: x, scale })
    }

    /// Peels `masked_fill` and a scale off a softmax's operand, absorbing them.
    fn softmax(&mut self, id: ValueId) -> SoftmaxPat {
        let mut pat = SoftmaxPat {
            x: self.args(id)[0],
            scale: None,
            mask: None,
        };
        if let Some((x, mask)) = self.mask_fill(pat.x) {
            self.absorbed[pat.x] = true;
            self.absorbed[mask.compare] = true;
            pat.mask = Some(mask.pat);
            pat.x = x;
        }
        if let Some((x, scale)) = self.scale_of(pat.x) {
            if self.free(pat.x) && self.same_shape(x, pat.x) {
                self.absorbed[pat.x] = true;
                pat.scale = Some(scale);
                pat.x = x;
            }
        }
        pat
    }

    /// `masked_fill(x, mask op c, fill)` whose result has the shape of `x`.
    fn mask_fill(&self, id: ValueId) -> Option<(ValueId, FoundMask)> {
        let &[x, cond, fill] = self.args(id) else {
            return None;
        };
        let ok = matches!(self.op(id), Op::MaskedFill)
            && self.free(id)
            && self.free(cond)
            && self.constant[fill]
            && self.same_shape(x, id);
        if !ok {
            return None;
        }
        let Op::Compare(op) = *self.op(cond) else {
            return None;
        };
        let &[l, r] = self.args(cond) else {
            return None;
        };
        let (mask, op, rhs) = match (self.constant[l], self.constant[r]) {
            (false, true) => (l, op, r),
            (true, false) => (r, flip(op), l),
            _ => return None,
        };
        let pat = MaskPat { mask, op, rhs, fill };
        Some((x, FoundMask { pat, compare: cond }))
    }
}

struct FoundMask {
    pat: MaskPat,
    compare: ValueId,
}

/// `c op x` as `x op' c`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Eq,
        CmpOp::Ne => CmpOp::Ne,
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
    }
}
