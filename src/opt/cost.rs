//! The cost model and the extractor that picks the cheapest program.
//!
//! A node costs the FLOPs it computes, the bytes it moves and the kernels it launches
//! ([`Cost`]), at nominal sizes: constant dims take their values, free dims
//! [`NOMINAL`] (the optimizer compiles for every size, so it must not tune for one).
//! Views cost nothing; so does anything computed from the params alone, which a backend
//! evaluates once, at load time. A loop's body counts once per iteration.
//!
//! Extraction is greedy over the DAG: a class's cost is the sum over the *set* of classes
//! its best term needs, so a value shared by several consumers (the input that feeds Q, K
//! and V) counts once. Ties break on the number of classes, then on a structural hash of
//! the term, so that equal programs come out equal whatever the e-graph's ids are.

use super::analysis::{Data, Kind, EG};
use super::lang::Tensor;
use super::layout::lay_out;
use crate::dims::Poly;
use crate::ir::TensorType;
use egg::{Id, Language};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::{Add, Mul};
use std::rc::Rc;

use crate::hash::{HashMap, HashSet};
use trial::Base;

mod trial;

/// The size every free dim is given when costs are estimated.
pub const NOMINAL: i64 = 128;

/// FLOPs of softmax per element: the max, a subtraction, `exp` (about 12 with the
/// vectorized polynomial of `shared/notes/CRANELIFT.md`), the sum and a division.
const SOFTMAX: u128 = 16;

/// What running a node costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub flops: u128,
    pub bytes: u128,
    pub kernels: u128,
}

impl Cost {
    /// One number to minimize: an estimate of the time in picoseconds at 50 GFLOP/s,
    /// 10 GB/s and 2 µs per kernel launch.
    pub fn score(&self) -> u128 {
        self.flops
            .saturating_mul(20)
            .saturating_add(self.bytes.saturating_mul(100))
            .saturating_add(self.kernels.saturating_mul(2_000_000))
    }

    fn kernel(flops: u128, bytes: u128) -> Cost {
        Cost {
            flops,
            bytes,
            kernels: 1,
        }
    }
}

impl Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            flops: self.flops.saturating_add(o.flops),
            bytes: self.bytes.saturating_add(o.bytes),
            kernels: self.kernels.saturating_add(o.kernels),
        }
    }
}

impl Mul<u128> for Cost {
    type Output = Cost;
    fn mul(self, n: u128) -> Cost {
        Cost {
            flops: self.flops.saturating_mul(n),
            bytes: self.bytes.saturating_mul(n),
            kernels: self.kernels.saturating_mul(n),
        }
    }
}

/// The nominal value of a dim expression.
pub fn size(eg: &EG, p: &Poly) -> u128 {
    let dims = &eg.analysis.dims;
    let known = p.syms().iter().all(|&s| s < dims.len());
    let v = match known {
        true => dims.eval(p, &|_| Some(NOMINAL)),
        false => p.as_int(),
    };
    v.map_or(NOMINAL as u128, |v| v.max(0) as u128)
}

fn numel(eg: &EG, d: &Data) -> u128 {
    match &d.kind {
        Kind::Value(t) => t.shape.iter().map(|p| size(eg, p)).product(),
        _ => 0,
    }
}

/// The cost of running `node` once; `copies` is whether a `reshape` must copy.
pub fn node_cost(eg: &EG, data: &Data, node: &Tensor, copies: bool) -> Cost {
    if data.load_time {
        return Cost::default();
    }
    let p = Pricing {
        eg,
        node,
        out: numel(eg, data),
    };
    let (kid, n, out) = (|i: usize| p.kid(i), |d: &Data| numel(eg, d), p.out);
    let copy = Cost::kernel(0, 8 * out);
    match node {
        Tensor::Reshape(_) if copies => copy,
        Tensor::Contiguous(_) | Tensor::CatLoop(_) | Tensor::Stack(_) | Tensor::Cat(_) => copy,
        // In place: the source's slices are read and written, nothing else moves.
        Tensor::IndexCopy(_) => Cost::kernel(0, 8 * n(kid(2))),
        Tensor::Unary(..) | Tensor::Scale(_) => Cost::kernel(out, p.io(&[0])),
        Tensor::Binary(..)
        | Tensor::Eq(_)
        | Tensor::Ne(_)
        | Tensor::Lt(_)
        | Tensor::Le(_)
        | Tensor::Gt(_)
        | Tensor::Ge(_) => Cost::kernel(out, p.io(&[0, 1])),
        Tensor::MaskedFill(_) => Cost::kernel(out, p.io(&[0, 1])),
        // One FLOP more than `masked_softmax` without a mask, so a tie prints as the fused op.
        Tensor::Softmax(_) => Cost::kernel(SOFTMAX * out + 1, p.io(&[0])),
        Tensor::Where(_) => Cost::kernel(out, p.io(&[0, 1, 2])),
        Tensor::Tri(_) => Cost::kernel(out, p.io(&[0])),
        Tensor::Fill(_) => Cost::kernel(0, 4 * out),
        Tensor::Arange(_) => Cost::kernel(2 * out, 4 * out),
        Tensor::Reduce(..) => Cost::kernel(n(kid(0)), 4 * (n(kid(0)) + out)),
        Tensor::Linear(_) => {
            let inner = kid(0).shape().and_then(|s| s.last()).map_or(1, |d| size(eg, d));
            let bias = !kid(2).is_none();
            let reads: &[usize] = if bias { &[0, 1, 2] } else { &[0, 1] };
            Cost::kernel(2 * out * inner + unless(!bias, out), p.io(reads))
        }
        Tensor::MatMul(_) | Tensor::Gemm(_) => p.gemm(),
        Tensor::MaskedSoftmax(c) => {
            let mask = !kid(1).is_none();
            let scaled = eg[c[2]].data.float() != Some(1.0);
            let reads: &[usize] = if mask { &[0, 1] } else { &[0] };
            Cost::kernel(
                SOFTMAX * out + unless(!mask, out) + unless(!scaled, out),
                p.io(reads),
            )
        }
        Tensor::Sdpa(_) => p.sdpa(),
        Tensor::Attention(c) => p.attention(c),
        Tensor::ScoredAttention(c) => p.scored_attention(c),
        // Views and leaves move no data: a strided view of their operand, or no value at
        // all. Listed rather than caught by `_`, so a new node must be priced here.
        Tensor::Reshape(_)
        | Tensor::Transpose(_)
        | Tensor::Permute(_)
        | Tensor::Expand(_)
        | Tensor::Unsqueeze(_)
        | Tensor::Squeeze(_)
        | Tensor::Slice(_)
        | Tensor::StepSlice(_)
        | Tensor::Select(_)
        | Tensor::For(_)
        | Tensor::Outputs(_)
        | Tensor::None
        | Tensor::Param(_)
        | Tensor::Input(_)
        | Tensor::Literal(_)
        | Tensor::DimValue(_)
        | Tensor::Int(_)
        | Tensor::Float(_)
        | Tensor::Dim(_)
        | Tensor::Shape(_) => Cost::default(),
    }
}

/// `extra` unless `cond` holds.
fn unless(cond: bool, extra: u128) -> u128 {
    if cond {
        0
    } else {
        extra
    }
}

/// What pricing one node needs: the e-graph, the node and the elements it writes.
struct Pricing<'a> {
    eg: &'a EG,
    node: &'a Tensor,
    out: u128,
}

impl Pricing<'_> {
    fn kid(&self, i: usize) -> &Data {
        &self.eg[self.node.children()[i]].data
    }

    /// Bytes of f32 values read (the operands `reads`) and written.
    fn io(&self, reads: &[usize]) -> u128 {
        4 * (reads.iter().map(|&i| numel(self.eg, self.kid(i))).sum::<u128>() + self.out)
    }

    fn size_of(&self, p: &Poly) -> u128 {
        size(self.eg, p)
    }

    /// The last size of a value (1 for a scalar).
    fn last(&self, d: &Data) -> u128 {
        d.shape().and_then(|s| s.last()).map_or(1, |p| self.size_of(p))
    }

    /// The size before the last of a value (1 below rank 2).
    fn rows(&self, d: &Data) -> u128 {
        d.shape()
            .and_then(|s| s.iter().rev().nth(1))
            .map_or(1, |p| self.size_of(p))
    }

    /// A matmul, or a GEMM with its bias, scale and transposed `a`.
    fn gemm(&self) -> Cost {
        let (eg, node, out) = (self.eg, self.node, self.out);
        let (bias, alpha, trans_a) = match node {
            Tensor::Gemm(c) => (
                !eg[c[2]].data.is_none(),
                eg[c[5]].data.float() != Some(1.0),
                eg[c[3]].data.int() == Some(1),
            ),
            _ => (false, false, false),
        };
        // The inner size: the last axis of `a`, or the one before it when transposed.
        let a = self.kid(0).shape().unwrap_or(&[]);
        let inner = a
            .iter()
            .rev()
            .nth(usize::from(trans_a))
            .map_or(1, |p| self.size_of(p));
        let reads: &[usize] = if bias { &[0, 1, 2] } else { &[0, 1] };
        // A matmul is a GEMM without flags: one FLOP more, so a tie prints as `gemm`.
        let plain = u128::from(matches!(node, Tensor::MatMul(_)));
        Cost::kernel(
            2 * out * inner + unless(!bias, out) + unless(!alpha, out) + plain,
            self.io(reads),
        )
    }

    fn sdpa(&self) -> Cost {
        let (q, k, v) = (self.kid(0), self.kid(1), self.kid(2));
        let scores = self.out / self.last(v).max(1) * self.rows(k);
        let mask = !self.kid(4).is_none();
        let flops = 2 * scores * (self.last(q) + self.last(v)) + SOFTMAX * scores + unless(!mask, scores);
        let reads: &[usize] = if mask { &[0, 1, 2, 4] } else { &[0, 1, 2] };
        Cost::kernel(flops, self.io(reads))
    }

    fn attention(&self, c: &[Id]) -> Cost {
        let (q, k, v) = (self.kid(0), self.kid(1), self.kid(2));
        // The scores: batch * n * m, never stored.
        let scores = self.out / self.last(v).max(1) * self.rows(k);
        let mask = !self.kid(3).is_none();
        let scaled = self.eg[c[4]].data.float() != Some(1.0);
        let flops = 2 * scores * (self.last(q) + self.last(v))
            + SOFTMAX * scores
            + unless(!mask, scores)
            + unless(!scaled, scores);
        let reads: &[usize] = if mask { &[0, 1, 2, 3] } else { &[0, 1, 2] };
        Cost::kernel(flops, self.io(reads))
    }

    fn scored_attention(&self, c: &[Id]) -> Cost {
        let (s, v) = (self.kid(0), self.kid(1));
        let last = self.last(v);
        // The scores are read here (or computed in the kernel), the probabilities
        // never stored: one kernel where the unfused form has two.
        let scores = numel(self.eg, s);
        let mask = !self.kid(2).is_none();
        let scaled = self.eg[c[3]].data.float() != Some(1.0);
        let flops = 2 * scores * last + SOFTMAX * scores + unless(!mask, scores) + unless(!scaled, scores);
        let reads: &[usize] = if mask { &[0, 1, 2] } else { &[0, 1] };
        Cost::kernel(flops, self.io(reads))
    }
}

/// Layouts and costs already worked out, by class and node (interned types): extraction
/// evaluates the same nodes many times over, and each trial of the refinement lays out
/// the nodes after the one it switches again for their operands' new types.
#[derive(Default)]
struct Memo {
    types: RefCell<Vec<TensorType>>,
    index: RefCell<HashMap<TensorType, u32>>,
    seen: RefCell<HashMap<(Id, usize), Seen>>,
}

/// A node's type (interned, with strides), whether it copies, its cost per run and the
/// hash of its own text (for structural keys).
type Laid = (Option<u32>, bool, Cost, u64);

/// What one node has given so far. Its text and its cost are worked out once: the cost
/// reads the classes' shapes, never the operands' strides, but for whether a `reshape`
/// copies, so each of the two is priced once (sizing every shape costs a substitution of
/// the constant dims per dim).
struct Seen {
    text: u64,
    /// The cost without a copy, and with one.
    cost: [Option<Cost>; 2],
    /// The operand types the node was laid out for, its type then and whether it copies.
    laid: Vec<(Vec<Option<u32>>, Option<u32>, bool)>,
}

impl Memo {
    fn intern(&self, t: TensorType) -> u32 {
        if let Some(&i) = self.index.borrow().get(&t) {
            return i;
        }
        let mut types = self.types.borrow_mut();
        types.push(t.clone());
        let i = (types.len() - 1) as u32;
        self.index.borrow_mut().insert(t, i);
        i
    }

    fn ty(&self, i: u32) -> TensorType {
        self.types.borrow()[i as usize].clone()
    }

    /// Node `index` of class `id`, its operands of types `kids`.
    fn lay_out(&self, eg: &EG, id: Id, index: usize, kids: &[Option<u32>]) -> Laid {
        let node = &eg[id].nodes[index];
        let data = &eg[id].data;
        let found = self.seen.borrow().get(&(id, index)).and_then(|seen| {
            let (_, ty, copies) = seen.laid.iter().find(|(k, _, _)| k == kids)?;
            let cost = seen.cost[usize::from(*copies)]?;
            Some((*ty, *copies, cost, seen.text))
        });
        if let Some(laid) = found {
            return laid;
        }
        let attrs: Vec<&Data> = node.children().iter().map(|c| &eg[*c].data).collect();
        // The operands' types are read in place: cloning them was a good part of a miss.
        let laid = {
            let all = self.types.borrow();
            let types: Vec<Option<&TensorType>> = kids.iter().map(|k| k.map(|i| &all[i as usize])).collect();
            lay_out(&eg.analysis, node, data, &attrs, &types)
        };
        let (ty, copies) = match laid {
            Some((t, c)) => (Some(self.intern(t)), c),
            None => (None, false),
        };
        let mut seen = self.seen.borrow_mut();
        let seen = seen.entry((id, index)).or_insert_with(|| Seen {
            text: fnv(node.to_string().as_bytes(), FNV_BASIS),
            cost: [None; 2],
            laid: Vec::new(),
        });
        let cost = *seen.cost[usize::from(copies)].get_or_insert_with(|| node_cost(eg, data, node, copies));
        seen.laid.push((kids.to_vec(), ty, copies));
        (ty, copies, cost, seen.text)
    }
}

/// The term chosen for every class reachable from the root, with types and cost.
pub struct Extraction {
    /// The node chosen in each class.
    pub nodes: HashMap<Id, Tensor>,
    /// The type (with strides) of each chosen value, and whether a `reshape` copies.
    pub types: HashMap<Id, (Option<TensorType>, bool)>,
    /// The whole program's cost: every class it needs, once.
    pub total: Cost,
}

impl Extraction {
    pub fn node(&self, eg: &EG, id: Id) -> &Tensor {
        &self.nodes[&eg.find(id)]
    }

    pub fn ty(&self, eg: &EG, id: Id) -> Option<&TensorType> {
        self.types.get(&eg.find(id)).and_then(|(t, _)| t.as_ref())
    }

    pub fn copies(&self, eg: &EG, id: Id) -> bool {
        self.types.get(&eg.find(id)).is_some_and(|(_, c)| *c)
    }
}

/// A choice of node (its index in its class) for each class: `base`, with the classes of
/// `switch` chosen otherwise.
struct Choices<'a> {
    base: &'a HashMap<Id, usize>,
    switch: &'a [(Id, usize)],
}

impl Choices<'_> {
    fn get(&self, id: Id) -> Option<usize> {
        match self.switch.iter().find(|(c, _)| *c == id) {
            Some((_, n)) => Some(*n),
            None => self.base.get(&id).copied(),
        }
    }
}

/// Extracts the cheapest program under `root`: a greedy pass gives every class a node,
/// then whole-program evaluation improves it (see [`refine`]).
pub fn extract(eg: &EG, root: Id) -> Option<Extraction> {
    let root = eg.find(root);
    let memo = Memo::default();
    let window = match eg.number_of_classes() <= EXACT_CLASSES {
        true => usize::MAX,
        false => SHARED_WINDOW,
    };
    let mut nodes = greedy(eg, &memo, window);
    let trips = trips(eg);
    refine(eg, &memo, &mut nodes, root, &trips);
    let choices = Choices {
        base: &nodes,
        switch: &[],
    };
    let scope = Scope {
        eg,
        memo: &memo,
        nodes: &choices,
        trips: &trips,
    };
    let eval = evaluate(scope, root)?;
    let nodes = eval
        .parts
        .keys()
        .map(|&c| (c, eg[c].nodes[nodes[&c]].clone()))
        .collect();
    let types = eval
        .parts
        .into_iter()
        .map(|(id, p)| (id, (p.ty.map(|t| memo.ty(t)), p.copies)))
        .collect();
    Some(Extraction {
        nodes,
        types,
        total: eval.total,
    })
}

/// Up to this many e-classes, extraction counts every shared value exactly once.
const EXACT_CLASSES: usize = 1_000;

/// Beyond [`EXACT_CLASSES`], how many of the classes a term needs a greedy choice lists
/// one by one (the rest it only sums), so that extraction stays linear in the e-graph.
const SHARED_WINDOW: usize = 32;

/// Class visits the refinement may spend in all.
const REFINE_BUDGET: usize = 20_000_000;

/// The trip count of each loop variable (nominal where it is not constant).
fn trips(eg: &EG) -> HashMap<usize, u128> {
    let mut trips = HashMap::default();
    for node in eg.classes().flat_map(|c| c.iter()) {
        if let Tensor::For(c) = node {
            let (var, start, end) = (eg[c[0]].data.int(), eg[c[1]].data.dim(), eg[c[2]].data.dim());
            if let (Some(v), Some(s), Some(e)) = (var, start, end) {
                trips.insert(v as usize, size(eg, &e.sub(s)));
            }
        }
    }
    trips
}

/// A whole program's evaluation: its cost, its number of classes, a structural hash that
/// does not depend on e-class ids, and every value's type.
struct Eval {
    total: Cost,
    size: usize,
    key: u64,
    /// Each class's part of the evaluation, for every class the program needs.
    parts: HashMap<Id, Part>,
}

/// One class's part of an evaluation.
#[derive(Clone)]
struct Part {
    /// The type (interned) and whether it copies.
    ty: Option<u32>,
    copies: bool,
    /// The structural hash of the class's term.
    key: u64,
    /// Its cost times the trips of the loops it runs in.
    cost: Cost,
    /// The classes its chosen node reads (canonical).
    kids: Vec<Id>,
}

/// What the refinement minimizes: the cost's score, then the number of classes, then the
/// structural hash (so that equal programs tie the same way whatever the e-graph's ids).
type Rank = (u128, usize, u64);

impl Eval {
    fn rank(&self) -> Rank {
        (self.total.score(), self.size, self.key)
    }
}

/// What an evaluation walks over: the e-graph, the laid-out nodes, the choice and the
/// loops' trip counts.
#[derive(Clone, Copy)]
struct Scope<'a> {
    eg: &'a EG,
    memo: &'a Memo,
    nodes: &'a Choices<'a>,
    trips: &'a HashMap<usize, u128>,
}

impl Scope<'_> {
    /// Class `id`'s part given its children's types and keys (in the node's order): `None`
    /// when no node is chosen for it.
    fn part(&self, id: Id, kids: Vec<Id>, types: &[Option<u32>], keys: &[u64]) -> Option<Part> {
        let index = self.nodes.get(id)?;
        let (ty, copies, cost, text) = self.memo.lay_out(self.eg, id, index, types);
        let key = keys.iter().fold(text, |h, k| fnv(&k.to_le_bytes(), h));
        let times: u128 = self.eg[id]
            .data
            .deps
            .iter()
            .map(|v| self.trips.get(v).copied().unwrap_or(1))
            .product();
        Some(Part {
            ty,
            copies,
            key,
            cost: cost * times,
            kids,
        })
    }

    /// The canonical classes class `id`'s chosen node reads.
    fn kids(&self, id: Id) -> Option<Vec<Id>> {
        let node = &self.eg[id].nodes[self.nodes.get(id)?];
        Some(node.children().iter().map(|&c| self.eg.find(c)).collect())
    }
}

/// Evaluates the program that `nodes` choose under `root`; `None` when the choice is
/// cyclic or leaves a class without a node.
fn evaluate(scope: Scope, root: Id) -> Option<Eval> {
    struct Walk<'a> {
        scope: Scope<'a>,
        done: HashMap<Id, Part>,
        open: HashSet<Id>,
    }
    impl Walk<'_> {
        fn go(&mut self, id: Id) -> Option<u64> {
            let id = self.scope.eg.find(id);
            if let Some(part) = self.done.get(&id) {
                return Some(part.key);
            }
            if !self.open.insert(id) {
                return None;
            }
            let kids = self.scope.kids(id)?;
            let mut keys = Vec::with_capacity(kids.len());
            for &c in &kids {
                keys.push(self.go(c)?);
            }
            let types: Vec<Option<u32>> = kids.iter().map(|c| self.done[c].ty).collect();
            let part = self.scope.part(id, kids, &types, &keys)?;
            let key = part.key;
            self.open.remove(&id);
            self.done.insert(id, part);
            Some(key)
        }
    }
    let mut walk = Walk {
        scope,
        done: HashMap::default(),
        open: HashSet::default(),
    };
    let key = walk.go(root)?;
    Some(Eval {
        total: walk.done.values().fold(Cost::default(), |acc, p| acc + p.cost),
        size: walk.done.len(),
        key,
        parts: walk.done,
    })
}

/// Improves a choice by steepest descent on the whole program's cost: each step tries,
/// for every class the program uses, each other node of it, alone and together with the
/// nodes of other used classes that share an operand with it (the three slices of a
/// merged projection only pay off together), and takes the best.
///
/// Each trial is priced as a whole program (re-walking only the classes above the switched
/// ones: [`Base`]), and the descent stops when the next step's
/// trials would pass [`REFINE_BUDGET`] class visits in all: a bound on work, not on time,
/// so the result does not depend on the machine, and linear in the program's size.
fn refine(eg: &EG, memo: &Memo, nodes: &mut HashMap<Id, usize>, root: Id, trips: &HashMap<usize, u128>) {
    let whole = |nodes: &HashMap<Id, usize>| {
        let choices = Choices {
            base: nodes,
            switch: &[],
        };
        evaluate(
            Scope {
                eg,
                memo,
                nodes: &choices,
                trips,
            },
            root,
        )
    };
    let Some(mut current) = whole(nodes) else {
        return;
    };
    let mut budget = REFINE_BUDGET;
    for _ in 0..32 {
        let alternatives: usize = current.parts.keys().map(|&c| eg[c].len() - 1).sum();
        let step = alternatives.saturating_mul(2).saturating_mul(current.size.max(1));
        match budget.checked_sub(step) {
            Some(left) => budget = left,
            None => return,
        }
        let mut used: Vec<Id> = current
            .parts
            .keys()
            .copied()
            .filter(|&c| eg[c].len() > 1)
            .collect();
        used.sort();
        let base = Base::new(&current);
        let mut best: Option<(Rank, Vec<(Id, usize)>)> = None;
        for &class in &used {
            for (index, node) in eg[class].iter().enumerate() {
                let chosen = nodes.get(&class) == Some(&index);
                if chosen || node.children().iter().any(|c| !nodes.contains_key(&eg.find(*c))) {
                    continue;
                }
                let alone = vec![(class, index)];
                let mut group = alone.clone();
                let shared = operands(eg, node);
                for &other in used.iter().filter(|&&o| o != class) {
                    let partner = eg[other].iter().enumerate().find(|(i, n)| {
                        nodes.get(&other) != Some(i) && operands(eg, n).iter().any(|c| shared.contains(c))
                    });
                    if let Some((i, _)) = partner {
                        group.push((other, i));
                    }
                }
                let tries = if group.len() > 1 {
                    vec![alone, group]
                } else {
                    vec![alone]
                };
                for switch in tries {
                    let trial = Choices {
                        base: nodes,
                        switch: &switch,
                    };
                    let scope = Scope {
                        eg,
                        memo,
                        nodes: &trial,
                        trips,
                    };
                    let Some(rank) = base.trial(scope, root, &switch) else {
                        continue;
                    };
                    if rank < best.as_ref().map_or(current.rank(), |(b, _)| *b) {
                        best = Some((rank, switch));
                    }
                }
            }
        }
        let Some((_, switch)) = best else { return };
        nodes.extend(switch);
        match whole(nodes) {
            Some(eval) => current = eval,
            None => return,
        }
    }
}

/// The value classes a node reads (attributes left out).
fn operands(eg: &EG, node: &Tensor) -> Vec<Id> {
    node.children()
        .iter()
        .map(|c| eg.find(*c))
        .filter(|c| !matches!(eg[*c].data.kind, Kind::Attr(_)))
        .collect()
}

/// The greedy pass: each class keeps its cheapest node given its children's current
/// choices (a class's cost summed over the set of classes it needs), recomputed whenever
/// a child's choice changes, until nothing changes.
fn greedy(eg: &EG, memo: &Memo, window: usize) -> HashMap<Id, usize> {
    let mut choices: HashMap<Id, Choice> = HashMap::default();
    let mut queue: VecDeque<Id> = eg
        .classes()
        .filter(|c| c.iter().any(|n| n.is_leaf()))
        .map(|c| c.id)
        .collect();
    let mut queued: HashSet<Id> = queue.iter().copied().collect();
    // A bound against oscillation; the refinement that follows starts from any choice.
    let mut budget = 64 * eg.number_of_classes() + 1000;
    while let Some(id) = queue.pop_front() {
        queued.remove(&id);
        if budget == 0 {
            break;
        }
        budget -= 1;
        let best = (0..eg[id].len())
            .filter_map(|i| candidate(eg, memo, &choices, id, i, window))
            .min_by(better);
        let Some(best) = best else { continue };
        let changed = match choices.get(&id) {
            Some(old) => old.index != best.index || old.total != best.total || old.size != best.size,
            None => true,
        };
        if changed {
            choices.insert(id, best);
            for p in eg[id].parents() {
                let p = eg.find(p);
                if queued.insert(p) {
                    queue.push_back(p);
                }
            }
        }
    }
    choices.into_iter().map(|(id, c)| (id, c.index)).collect()
}

/// A class's greedy choice.
struct Choice {
    index: usize,
    ty: Option<u32>,
    total: Cost,
    size: usize,
    key: u64,
    /// The cost of every class the term needs (loop bodies times their trip count).
    needs: Rc<HashMap<Id, Cost>>,
    /// The cost of the classes the term needs that `needs` no longer lists (see
    /// [`SHARED_WINDOW`]).
    beyond: Cost,
}

fn better(a: &Choice, b: &Choice) -> std::cmp::Ordering {
    (a.total.score(), a.size, a.key).cmp(&(b.total.score(), b.size, b.key))
}

/// The choice of node `index` for class `id`, if its children all have one and none of
/// them needs `id` itself.
fn candidate(
    eg: &EG,
    memo: &Memo,
    choices: &HashMap<Id, Choice>,
    id: Id,
    index: usize,
    window: usize,
) -> Option<Choice> {
    let node = &eg[id].nodes[index];
    let kids: Vec<&Choice> = node
        .children()
        .iter()
        .map(|c| choices.get(&eg.find(*c)))
        .collect::<Option<_>>()?;
    // Sized for every class the children need, and this one: never grown while merging.
    let most = kids.iter().map(|k| k.needs.len()).sum::<usize>() + 1;
    let mut needs: HashMap<Id, Cost> = HashMap::with_capacity_and_hasher(most, Default::default());
    let mut beyond = kids.iter().fold(Cost::default(), |acc, k| acc + k.beyond);
    for (c, k) in node.children().iter().zip(&kids) {
        let c = eg.find(*c);
        if c == id || k.needs.contains_key(&id) {
            return None;
        }
        // Two children may price a shared class differently (one saw an older choice):
        // keep the dearer, whatever order the maps iterate in.
        for (&n, &cost) in k.needs.iter() {
            let e = needs.entry(n).or_insert(cost);
            if cost.score() > e.score() {
                *e = cost;
            }
        }
    }
    if let Tensor::For(c) = node {
        // The body runs once per iteration: what depends on the variable counts that often.
        let var = eg[c[0]].data.int().map(|v| v as usize);
        let trip = match (eg[c[1]].data.dim(), eg[c[2]].data.dim()) {
            (Some(s), Some(e)) => size(eg, &e.sub(s)),
            _ => 1,
        };
        for (n, cost) in needs.iter_mut() {
            if var.is_some_and(|v| eg[*n].data.depends_on(v)) {
                *cost = *cost * trip;
            }
        }
        beyond = beyond * trip;
    }
    let size = kids
        .iter()
        .fold(needs.len(), |n, k| n.saturating_add(k.size - k.needs.len()));
    // Past the window, what the term needs is only summed: a shared class beyond it may be
    // counted twice, but the maps, and so the work, stay bounded per class.
    if needs.len() >= window {
        beyond = needs.drain().fold(beyond, |acc, (_, c)| acc + c);
    }
    let types: Vec<Option<u32>> = kids.iter().map(|k| k.ty).collect();
    let (ty, _, cost, text) = memo.lay_out(eg, id, index, &types);
    needs.insert(id, cost);
    let total = needs.values().fold(beyond, |acc, &c| acc + c);
    let key = kids.iter().fold(text, |h, k| fnv(&k.key.to_le_bytes(), h));
    Some(Choice {
        index,
        ty,
        total,
        size: size + 1,
        key,
        needs: Rc::new(needs),
        beyond,
    })
}

const FNV_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
