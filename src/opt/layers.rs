//! Whole models, a layer at a time.
//!
//! The checker unrolls a loop over layers, so a model of 30 layers is 30 copies of one
//! block. Equality saturation and, above all, extraction cost more than linearly in the
//! size of the term, so the whole model as one term compiles in seconds where one layer
//! takes milliseconds. Here the program is cut where the checker recorded each layer
//! ([`Program::layers`]): the statements before the first layer, each layer, and those
//! after the last are each optimized as a program of their own, whose inputs are the
//! values it reads from the pieces before it and whose outputs are the values the pieces
//! after it read. Pieces that are the same program up to which weights they name (every
//! layer of a model, once their weights are numbered in order of use) are optimized once,
//! and the result is used for each.
//!
//! What is lost is only rewriting across a cut, and a cut falls where one layer hands its
//! hidden state to the next: a row-major tensor that every kernel plan materializes anyway.
//! Where a piece's boundary would not be row-major, the whole program is optimized as one.

use super::{Cost, Optimized, Stats};
use crate::dims::Sym;
use crate::hash::{HashMap, HashSet};
use crate::ir::{DType, InputDecl, Node, Op, OutputDecl, ParamDecl, Program, TensorType, Type, ValueId};
use crate::side_by_side::side_by_side;
use crate::source::Span;
use std::collections::BTreeMap;
use std::ops::Range;

mod slot;

/// `prog` optimized piece by piece with `whole` (which optimizes one program), or `None`
/// when it has fewer than two layers or a cut it cannot make.
pub fn optimize(prog: &Program, whole: impl Fn(&Program) -> Optimized + Sync) -> Option<Optimized> {
    if prog.layers.len() < 2 {
        return None;
    }
    let pieces = cut(prog)?;
    let mut first: Vec<usize> = Vec::new();
    let mut chosen = Vec::with_capacity(pieces.len());
    for (k, piece) in pieces.iter().enumerate() {
        let index = first
            .iter()
            .position(|&f| same(&pieces[f].program, &piece.program))
            .unwrap_or_else(|| {
                first.push(k);
                first.len() - 1
            });
        chosen.push(index);
    }
    let programs: Vec<&Program> = first.iter().map(|&k| &pieces[k].program).collect();
    let distinct = optimized(&programs, &whole);
    let program = splice(prog, &pieces, |k| &distinct[chosen[k]].program)?;
    let stats = combine(&distinct, &chosen);
    Some(Optimized { program, stats })
}

/// Whether two pieces are one program: every part equal, and each node's op of the same
/// `Debug` text. Ops are compared by their text because `==` finds a NaN literal (`gelu`'s
/// guard) unequal to itself and `-0.0` equal to `0.0`; the rest holds no floats, and its
/// text (every type's layout) cost half of a model's serial optimization when whole pieces
/// were compared as text.
fn same(a: &Program, b: &Program) -> bool {
    let Program {
        dims,
        params,
        inputs,
        nodes,
        body,
        outputs,
        bindings,
        asserts,
        layers,
    } = a;
    let node = |(x, y): (&Node, &Node)| {
        let Node { op, args, ty, span } = x;
        *args == y.args && *ty == y.ty && *span == y.span && format!("{op:?}") == format!("{:?}", y.op)
    };
    *dims == b.dims
        && *params == b.params
        && *inputs == b.inputs
        && nodes.len() == b.nodes.len()
        && *body == b.body
        && *outputs == b.outputs
        && *bindings == b.bindings
        && *asserts == b.asserts
        && *layers == b.layers
        && nodes.iter().zip(&b.nodes).all(node)
}

/// Each of `programs` optimized by `whole`, on every core ([`side_by_side`]): the pieces
/// are independent, so a model's first and last pieces are optimized while its layer is,
/// and the results are the same whatever the threads' timing.
fn optimized(programs: &[&Program], whole: &(impl Fn(&Program) -> Optimized + Sync)) -> Vec<Optimized> {
    side_by_side(programs.to_vec(), whole)
        .into_iter()
        .zip(programs)
        // A piece whose thread failed (never expected: `whole` catches its own failures)
        // is optimized again here.
        .map(|(o, p)| o.unwrap_or_else(|| whole(p)))
        .collect()
}

/// One piece: a program of its own, and how its params, inputs and outputs correspond to
/// the whole program's.
struct Piece {
    program: Program,
    /// The whole program's param for each of the piece's.
    params: Vec<usize>,
    /// The whole program's value that feeds each of the piece's inputs.
    reads: Vec<ValueId>,
    /// The whole program's value each of the piece's outputs is.
    writes: Vec<ValueId>,
    /// The piece's value for each whole-program value it holds.
    map: HashMap<ValueId, ValueId>,
    /// The dim standing for the index at which the piece slices its states, and the index
    /// (see [`slot`]).
    layer: Option<(Sym, i64)>,
}

/// The pieces of `prog`, in order: before the first layer, each layer, after the last.
fn cut(prog: &Program) -> Option<Vec<Piece>> {
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let mut at = 0;
    for layer in &prog.layers {
        if layer.start < at || layer.end > prog.body.len() {
            return None;
        }
        ranges.push(at..layer.start);
        ranges.push(layer.clone());
        at = layer.end;
    }
    ranges.push(at..prog.body.len());
    ranges.retain(|r| !r.is_empty());
    let runtime = runtime_values(prog);
    let live = live_values(prog);
    let mut pieces: Vec<Piece> = Vec::with_capacity(ranges.len());
    let mut owner: HashMap<ValueId, usize> = HashMap::default();
    for (k, range) in ranges.iter().enumerate() {
        let body = &prog.body[range.clone()];
        pieces.push(Extract::new(prog, &runtime, &live).run(body)?);
        owner.extend(defined(prog, body).into_iter().map(|id| (id, k)));
    }
    // What a later piece reads, and what the program outputs, is an output of the piece
    // that computes it, in the order of the whole program's values.
    let mut writes: Vec<Vec<ValueId>> = vec![Vec::new(); pieces.len()];
    let read = pieces.iter().flat_map(|p| p.reads.iter().copied());
    for id in read.chain(prog.outputs.iter().map(|o| o.value)) {
        if let Some(&k) = owner.get(&id) {
            writes[k].push(id);
        }
    }
    for (piece, mut w) in pieces.iter_mut().zip(writes) {
        w.sort_unstable();
        w.dedup();
        for (n, id) in w.iter().enumerate() {
            piece.program.outputs.push(OutputDecl {
                name: format!("o{n}"),
                value: *piece.map.get(id)?,
                state: None,
                span: Span::default(),
            });
        }
        piece.writes = w;
    }
    slot::generalize(prog, &mut pieces);
    Some(pieces)
}

/// The values a list of body nodes defines, with those of their loops' bodies.
fn defined(prog: &Program, body: &[ValueId]) -> Vec<ValueId> {
    let mut out = Vec::new();
    for &id in body {
        if let Op::For { body, .. } = &prog.node(id).op {
            out.extend(defined(prog, body));
        }
        out.push(id);
    }
    out
}

/// Whether each value depends on an input: what a piece must read from the pieces before
/// it rather than compute again (anything else is weights, literals and dims, which it
/// copies).
fn runtime_values(prog: &Program) -> Vec<bool> {
    fn go(prog: &Program, id: ValueId, memo: &mut Vec<Option<bool>>) -> bool {
        if let Some(r) = memo[id] {
            return r;
        }
        let node = prog.node(id);
        let own = matches!(node.op, Op::Input(_) | Op::Gather);
        let inner = match &node.op {
            Op::For { body, result, .. } => body.iter().chain([result]).any(|&b| go(prog, b, memo)),
            _ => false,
        };
        let r = own || inner || node.args.iter().any(|&a| go(prog, a, memo));
        memo[id] = Some(r);
        r
    }
    let mut memo = vec![None; prog.nodes.len()];
    (0..prog.nodes.len()).map(|id| go(prog, id, &mut memo)).collect()
}

/// Whether each value is needed for an output. A dead node (a layer's index passed as an
/// argument and never used) would make two layers differ where their programs agree.
fn live_values(prog: &Program) -> Vec<bool> {
    let mut live = vec![false; prog.nodes.len()];
    let mut stack: Vec<ValueId> = prog.outputs.iter().map(|o| o.value).collect();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut live[id], true) {
            continue;
        }
        let node = prog.node(id);
        stack.extend(&node.args);
        if let Op::For { body, result, .. } = &node.op {
            stack.extend(body.iter().chain([result]));
        }
    }
    live
}

/// Builds one piece from a run of body nodes.
struct Extract<'a> {
    prog: &'a Program,
    runtime: &'a [bool],
    live: &'a [bool],
    out: Program,
    params: Vec<usize>,
    reads: Vec<ValueId>,
    map: HashMap<ValueId, ValueId>,
    /// The whole program's values the run defines.
    inside: HashSet<ValueId>,
    /// Values the piece takes from outside the run (its inputs, and the weights, literals
    /// and dims it copies), to be listed at top level before the node that needs them.
    pending: Vec<ValueId>,
}

impl<'a> Extract<'a> {
    fn new(prog: &'a Program, runtime: &'a [bool], live: &'a [bool]) -> Self {
        let out = Program {
            dims: prog.dims.clone(),
            asserts: prog.asserts.clone(),
            ..Program::default()
        };
        Extract {
            prog,
            runtime,
            live,
            out,
            params: Vec::new(),
            reads: Vec::new(),
            map: HashMap::default(),
            inside: HashSet::default(),
            pending: Vec::new(),
        }
    }

    fn run(mut self, body: &[ValueId]) -> Option<Piece> {
        self.inside = defined(self.prog, body).into_iter().collect();
        self.out.body = self.block(body, true)?;
        Some(Piece {
            program: self.out,
            params: self.params,
            reads: self.reads,
            writes: Vec::new(),
            map: self.map,
            layer: None,
        })
    }

    /// Copies the live nodes of a list of body nodes (a loop's body before the loop),
    /// returning the piece's list; at top level, with what each node takes from outside
    /// before it.
    fn block(&mut self, body: &[ValueId], top: bool) -> Option<Vec<ValueId>> {
        let mut list = Vec::with_capacity(body.len());
        for &id in body.iter().filter(|&&id| self.live[id]) {
            let v = self.copy(id)?;
            if top {
                list.append(&mut self.pending);
            }
            list.push(v);
        }
        Some(list)
    }

    /// The piece's value for the operand `id`: one the run defined, or one from outside.
    fn operand(&mut self, id: ValueId) -> Option<ValueId> {
        if let Some(&v) = self.map.get(&id) {
            return Some(v);
        }
        if self.inside.contains(&id) {
            return None; // used before it is defined: not a program the checker makes
        }
        let v = match self.runtime[id] {
            true => self.input(id)?,
            false => self.copy(id)?,
        };
        self.pending.push(v);
        Some(v)
    }

    /// A new input of the piece, fed by the whole program's `id`: a row-major tensor, or
    /// no cut (the optimizer gives inputs no other layout).
    fn input(&mut self, id: ValueId) -> Option<ValueId> {
        let Type::Tensor(t) = &self.prog.node(id).ty else {
            return None;
        };
        if *t != TensorType::row_major(t.shape.clone(), t.dtype) {
            return None;
        }
        self.out.inputs.push(InputDecl {
            name: format!("i{}", self.reads.len()),
            shape: t.shape.clone(),
            dtype: t.dtype,
            mask_only: false,
            state: false,
            span: Span::default(),
        });
        self.reads.push(id);
        let op = Op::Input(self.out.inputs.len() - 1);
        Some(self.push(id, op, Vec::new(), Type::Tensor(t.clone())))
    }

    /// Copies node `id`: one of the run's, or a weight, literal or dim it needs.
    fn copy(&mut self, id: ValueId) -> Option<ValueId> {
        if let Some(&v) = self.map.get(&id) {
            return Some(v);
        }
        let node = self.prog.node(id);
        let op = match &node.op {
            Op::Param(i) => {
                self.out.params.push(ParamDecl {
                    name: format!("p{}", self.params.len()),
                    key: String::new(),
                    shape: self.prog.params[*i].shape.clone(),
                    span: Span::default(),
                });
                self.params.push(*i);
                Op::Param(self.out.params.len() - 1)
            }
            Op::Input(_) => return self.input(id),
            Op::For {
                var,
                start,
                end,
                body,
                result,
            } => {
                let inner = self.block(body, false)?;
                Op::For {
                    var: *var,
                    start: start.clone(),
                    end: end.clone(),
                    body: inner,
                    result: self.operand(*result)?,
                }
            }
            op => op.clone(),
        };
        let args = node
            .args
            .iter()
            .map(|&a| self.operand(a))
            .collect::<Option<Vec<_>>>()?;
        Some(self.push(id, op, args, node.ty.clone()))
    }

    /// Appends a node standing for the whole program's `id`.
    fn push(&mut self, id: ValueId, op: Op, args: Vec<ValueId>, ty: Type) -> ValueId {
        self.out.nodes.push(Node {
            op,
            args,
            ty,
            span: Span::default(),
        });
        let v = self.out.nodes.len() - 1;
        self.map.insert(id, v);
        v
    }
}

/// The whole program again, each piece replaced by its optimized program; `None` where a
/// piece's output lost the layout the pieces after it were optimized for. An output only
/// the program gives may change its strides, as the optimizer may change any output's (a
/// slice of rows moved into the product before it makes the rows a fresh tensor).
fn splice<'p>(prog: &Program, pieces: &[Piece], optimized: impl Fn(usize) -> &'p Program) -> Option<Program> {
    let mut out = Program {
        dims: prog.dims.clone(),
        params: prog.params.clone(),
        inputs: prog.inputs.clone(),
        asserts: prog.asserts.clone(),
        ..Program::default()
    };
    // Params, then inputs, first: the node numbering every optimized program has.
    for (i, p) in prog.params.iter().enumerate() {
        let ty = TensorType::row_major(p.shape.clone(), DType::F32);
        graft_leaf(&mut out, Op::Param(i), ty);
    }
    for (i, p) in prog.inputs.iter().enumerate() {
        let ty = TensorType::row_major(p.shape.clone(), DType::F32);
        graft_leaf(&mut out, Op::Input(i), ty);
    }
    let mut values: HashMap<ValueId, ValueId> = HashMap::default();
    let read: HashSet<ValueId> = pieces.iter().flat_map(|p| p.reads.iter().copied()).collect();
    for (k, piece) in pieces.iter().enumerate() {
        let o = optimized(k);
        let mut local: Vec<Option<ValueId>> = vec![None; o.nodes.len()];
        for (n, node) in o.nodes.iter().enumerate() {
            local[n] = match node.op {
                Op::Param(i) => Some(*piece.params.get(i)?),
                Op::Input(i) => {
                    let read = *piece.reads.get(i)?;
                    match prog.node(read).op {
                        Op::Input(j) => Some(prog.params.len() + j),
                        _ => Some(*values.get(&read)?),
                    }
                }
                _ => None,
            };
        }
        let body = graft(&mut out, o, &o.body, &mut local, piece.layer)?;
        out.body.extend(body);
        for (decl, &whole) in o.outputs.iter().zip(&piece.writes) {
            let (before, after) = (prog.tensor_type(whole), o.tensor_type(decl.value));
            let relaid = before.strides != after.strides && read.contains(&whole);
            if before.shape != after.shape || relaid {
                return None;
            }
            values.insert(whole, local[decl.value]?);
        }
    }
    for o in &prog.outputs {
        let value = *values.get(&o.value)?;
        out.outputs.push(OutputDecl { value, ..o.clone() });
    }
    Some(out)
}

fn graft_leaf(out: &mut Program, op: Op, ty: TensorType) {
    out.nodes.push(Node {
        op,
        args: Vec::new(),
        ty: Type::Tensor(ty),
        span: Span::default(),
    });
    out.body.push(out.nodes.len() - 1);
}

/// Copies the nodes of `body` (of the optimized piece `o`) into `out`, returning `out`'s
/// list; `local` maps `o`'s values to `out`'s, its params and inputs already mapped, and
/// `layer` gives the piece's layer dim its value.
fn graft(
    out: &mut Program,
    o: &Program,
    body: &[ValueId],
    local: &mut [Option<ValueId>],
    layer: Option<(Sym, i64)>,
) -> Option<Vec<ValueId>> {
    let mut list = Vec::with_capacity(body.len());
    for &id in body {
        if local[id].is_some() {
            continue;
        }
        let node = o.node(id);
        let op = match &node.op {
            Op::For {
                var,
                start,
                end,
                body,
                result,
            } => {
                let inner = graft(out, o, body, local, layer)?;
                Op::For {
                    var: *var,
                    start: start.clone(),
                    end: end.clone(),
                    body: inner,
                    result: local[*result]?,
                }
            }
            op => op.clone(),
        };
        let args = node.args.iter().map(|&a| local[a]).collect::<Option<Vec<_>>>()?;
        let (op, ty) = match layer {
            Some((sym, index)) => slot::put_layer(&op, &node.ty, sym, index),
            None => (op, node.ty.clone()),
        };
        out.nodes.push(Node {
            op,
            args,
            ty,
            span: node.span,
        });
        let v = out.nodes.len() - 1;
        local[id] = Some(v);
        list.push(v);
    }
    Some(list)
}

/// The pieces' figures as one program's: each distinct piece's work once, the cost of
/// every piece the program runs.
fn combine(distinct: &[Optimized], chosen: &[usize]) -> Stats {
    let mut stats = Stats {
        pieces: Some((chosen.len(), distinct.len())),
        ..Stats::default()
    };
    let mut rules: BTreeMap<String, usize> = BTreeMap::new();
    let mut reasons: Vec<&str> = Vec::new();
    for (k, o) in distinct.iter().enumerate() {
        let s = &o.stats;
        for (name, n) in &s.rules {
            *rules.entry(name.clone()).or_default() += n;
        }
        if !s.stop_reason.is_empty() && !reasons.contains(&s.stop_reason.as_str()) {
            reasons.push(&s.stop_reason);
        }
        stats.iterations = stats.iterations.max(s.iterations);
        stats.nodes += s.nodes;
        stats.classes += s.classes;
        stats.refused += s.refused;
        stats.phases = stats.phases + s.phases;
        if let (None, Some(why)) = (&stats.fallback, &s.fallback) {
            let first = chosen.iter().position(|&c| c == k).unwrap_or(k);
            stats.fallback = Some(format!("piece {first}: {why}"));
        }
    }
    let before = |k: usize| distinct[k].stats.before;
    stats.before = chosen
        .iter()
        .try_fold(Cost::default(), |sum, &k| Some(sum + before(k)?));
    for &k in chosen {
        stats.after = stats.after + distinct[k].stats.after;
    }
    stats.rules = rules.into_iter().collect();
    stats.stop_reason = reasons.join(", ");
    stats
}

#[cfg(test)]
mod tests {
    use crate::runtime::{bind, interpret, RunOptions};

    /// Three post-norm encoder layers, each with its own weights, between a prelude and a
    /// pooling epilogue.
    const MODEL: &str = r#"
dim B = 2, N = 5, D = 16, H = 2, F = 32, L = 3
dim Dh = D / H
input x: [B, N, D]
input mask: [B, N]

fn layer(h: [B, N, D], m: [B, 1, 1, N], l) -> [B, N, D] {
    param wq: [D, D] = "layer.{l}.q.weight"
    param wk: [D, D] = "layer.{l}.k.weight"
    param wv: [D, D] = "layer.{l}.v.weight"
    param w1: [F, D] = "layer.{l}.ffn.1.weight"
    param w2: [D, F] = "layer.{l}.ffn.2.weight"
    let q = linear(h, wq).view(B, N, H, Dh).transpose(1, 2)
    let k = linear(h, wk).view(B, N, H, Dh).transpose(1, 2)
    let v = linear(h, wv).view(B, N, H, Dh).transpose(1, 2)
    let p = softmax(q @ k.transpose(-1, -2) / sqrt(Dh) + m, dim=-1)
    let a = layer_norm((p @ v).transpose(1, 2).contiguous().view(B, N, D) + h, [D])
    layer_norm(linear(gelu(linear(a, w1)), w2) + a, [D])
}

let m = (1.0 - mask[:, None, None, :]) * -10000.0
let hidden = layer_norm(x, [D])
for l in 0..L {
    hidden = layer(hidden, m, l)
}
output pooled = hidden.sum(1)
"#;

    fn model() -> crate::ir::Program {
        let checked = crate::driver::check_source(MODEL, &[]).unwrap();
        assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
        checked.program
    }

    #[test]
    fn the_checker_records_each_layer_of_a_loop_at_top_level() {
        let prog = model();
        assert_eq!(prog.layers.len(), 3);
        let sizes: Vec<usize> = prog.layers.iter().map(|r| r.len()).collect();
        assert!(sizes.iter().all(|&n| n > 0 && n == sizes[0]), "{sizes:?}");
        assert!(prog.layers.windows(2).all(|w| w[0].end <= w[1].start));
    }

    #[test]
    fn identical_layers_are_optimized_once_into_as_good_a_plan() {
        let prog = model();
        let layered = super::super::optimize_and_compare(&prog);
        let whole = super::super::optimize_whole(&prog, false);
        let (s, w) = (&layered.stats, &whole.stats);
        assert_eq!(s.pieces, Some((5, 3)), "prelude, three layers, epilogue");
        assert_eq!(s.fallback, None);
        assert!(
            s.after.kernels <= w.after.kernels,
            "{} > {}",
            s.after.kernels,
            w.after.kernels
        );
        assert!(
            s.after.flops <= w.after.flops,
            "{} > {}",
            s.after.flops,
            w.after.flops
        );
        assert!(s.before.is_some_and(|before| s.after.kernels < before.kernels));
        // Params keep their numbering; the layered program computes what the source does.
        assert_eq!(layered.program.params, prog.params);
        let bound = bind(&prog, &RunOptions::default()).unwrap();
        let want = interpret(&prog, &bound).unwrap();
        let got = interpret(&layered.program, &bound).unwrap();
        assert_eq!(got.len(), 1);
        let (a, b) = (&got[0].1, &want[0].1);
        assert_eq!(a.shape, b.shape);
        for (x, y) in a.data.iter().zip(&b.data) {
            assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{x} against {y}");
        }
    }

    #[test]
    fn pieces_are_one_program_by_their_literals_text() {
        use crate::ir::Op;
        let prog = model();
        // `gelu`'s guard: a NaN literal, which `==` finds unequal to itself.
        assert!(prog
            .nodes
            .iter()
            .any(|n| matches!(n.op, Op::Literal(x) if x.is_nan())));
        assert!(super::same(&prog, &prog.clone()));
        let at = prog
            .nodes
            .iter()
            .position(|n| matches!(n.op, Op::Literal(_)))
            .unwrap();
        let with = |x: f64| {
            let mut p = prog.clone();
            p.nodes[at].op = Op::Literal(x);
            p
        };
        // `==` finds `-0.0` equal to `0.0`; a piece optimized for one is not the other's.
        assert!(super::same(&with(0.0), &with(0.0)));
        assert!(!super::same(&with(0.0), &with(-0.0)));
        let mut moved = prog.clone();
        moved.nodes[at].span.start += 1;
        assert!(!super::same(&prog, &moved), "a node's span is part of the piece");
        let mut renamed = prog.clone();
        renamed.params[0].key.push('x');
        assert!(
            !super::same(&prog, &renamed),
            "a param's key is part of the piece"
        );
    }

    /// Layers that each write and read their own slice of a cache.
    const CACHED: &str = r#"
dim B = 2, N = 2, C = 4, D = 8, L = 3
input x: [B, N, D]
input pos: [N] int64
state cache: [L, B, C, D]

fn layer(h: [B, N, D], l) -> [B, N, D] {
    param w: [D, D] = "layer.{l}.w"
    cache[l].index_copy_(1, pos, linear(h, w))
    h + softmax(h @ cache[l].transpose(-1, -2), dim=-1) @ cache[l]
}

let hidden = x * 2.0
for l in 0..L {
    hidden = layer(hidden, l)
}
output y = hidden.sum(1)
"#;

    #[test]
    fn layers_that_differ_in_their_state_slice_are_optimized_once() {
        let checked = crate::driver::check_source(CACHED, &[]).unwrap();
        assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
        let prog = checked.program;
        let layered = super::super::optimize(&prog);
        let whole = super::super::optimize_whole(&prog, false);
        let (s, w) = (&layered.stats, &whole.stats);
        assert_eq!(s.pieces, Some((5, 3)), "prelude, three layers as one, epilogue");
        assert_eq!(s.fallback, None);
        assert_eq!((s.after.kernels, s.after.flops), (w.after.kernels, w.after.flops));
        // Each layer writes and reads its own slice again: the outputs and the state are
        // the source's.
        let bound = bind(&prog, &RunOptions::default()).unwrap();
        let want = interpret(&prog, &bound).unwrap();
        let got = interpret(&layered.program, &bound).unwrap();
        assert_eq!(got.len(), want.len());
        for ((name, a), (_, b)) in got.iter().zip(&want) {
            assert_eq!(a.shape, b.shape, "{name}");
            assert!(b.data.iter().any(|&y| y != 0.0), "{name} is not all zeros");
            for (x, y) in a.data.iter().zip(&b.data) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{name}: {x} against {y}");
            }
        }
    }

    fn with_layers(n: usize) -> crate::ir::Program {
        let src = MODEL.replace("L = 3", &format!("L = {n}"));
        crate::driver::check_source(&src, &[]).unwrap().program
    }

    #[test]
    fn a_program_without_layers_is_optimized_as_one_term() {
        let prog = with_layers(1);
        assert_eq!(prog.layers.len(), 1);
        assert_eq!(crate::opt::optimize(&prog).stats.pieces, None);
    }

    #[test]
    fn middle_layers_share_their_compiled_functions() {
        let functions = |n: usize| {
            let prog = with_layers(n);
            let dims = crate::runtime::bind_dims(&prog).unwrap();
            let optimized = crate::opt::optimize(&prog).program;
            let exe = crate::runtime::jit::Executable::compile(&optimized, &dims).unwrap();
            (exe.plan().kernels.len(), exe.functions())
        };
        // The first and last layers may differ from the others where the plan fuses
        // across a cut; every layer between them shares their functions.
        let (three, six) = (functions(3), functions(6));
        assert!(six.0 > three.0, "{six:?} against {three:?}");
        assert_eq!(six.1, three.1, "kernels and functions: {six:?} against {three:?}");
    }

    #[test]
    fn memory_is_planned_across_layers() {
        let plan = |n: usize| {
            let prog = with_layers(n);
            let dims = crate::runtime::bind_dims(&prog).unwrap();
            let optimized = crate::opt::optimize(&prog).program;
            crate::runtime::jit::plan(&optimized, &dims, u64::MAX).unwrap()
        };
        let (three, six) = (plan(3), plan(6));
        // The activations of one layer reuse the memory of the last: more layers, the same
        // arena.
        assert_eq!(six.arena_len, three.arena_len);
        // The prepared memory holds what the kernels read, each layer's once; the steps
        // towards it (the scaled weight before it is merged) reuse one another's memory.
        let kept = |p: &crate::kernel::Plan| -> usize {
            let derived = p.buffers.iter().filter_map(|b| match b.kind {
                crate::kernel::BufferKind::Derived { live, .. } => Some((b.len, live.1)),
                _ => None,
            });
            derived.filter(|d| d.1 == usize::MAX).map(|d| d.0).sum()
        };
        let steps = six.derived_len - kept(&six);
        assert!(kept(&six) > kept(&three));
        assert_eq!(
            steps,
            three.derived_len - kept(&three),
            "steps need the memory of one layer's"
        );
    }
}
