//! Rotary position embeddings (GPT-NeoX's and Llama's halves): `x * cos + rotate_half(x) *
//! sin`, where `rotate_half(x)` is `cat([-x[.., h:], x[.., :h]], -1)` and `h` half the head.
//!
//! Where `x` is a range of heads of a projection's result that nothing else reads, the
//! projection's GEMM rotates each pair of partners as it writes its tile ([`Rope`]): the
//! rotated q and k are never a pass of their own. Elsewhere the rotation is two maps, one
//! per half, each reading its partner half: no copy of the negated or concatenated halves.

use super::fuse::Fusion;
use super::{internal, Lowerer, View};
use crate::dims::Poly;
use crate::hash::{HashMap, HashSet};
use crate::ir::{BinaryOp, Op, Program, UnaryOp, ValueId};
use crate::kernel::{BufferKind, Expr, Kernel, KernelOp, Operand, PlanError, Rope};

/// `x * cos + rotate_half(x) * sin` at a root: its operands, the nodes it computes itself,
/// and the GEMM that may rotate `x` in place as it writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct RopePat {
    pub x: ValueId,
    pub cos: ValueId,
    pub sin: ValueId,
    /// The products, the halves, the negation and the `cat`.
    pub inner: Vec<ValueId>,
    /// The `linear`, matmul or `gemm` node whose result `x` is a view of, where nothing
    /// else reads the elements `x` covers.
    pub gemm: Option<ValueId>,
}

/// Finds the rotation at `root` (an `add`), given each node's number of uses and whether a
/// node is free to absorb (one use, not an output, not taken); `dims` are the dims' values.
pub fn find(
    program: &Program,
    dims: &[Option<i64>],
    root: ValueId,
    uses: &[usize],
    free: &dyn Fn(ValueId) -> bool,
) -> Option<RopePat> {
    let node = |id: ValueId| program.node(id);
    let (Op::Binary(BinaryOp::Add), &[p, q]) = (&node(root).op, node(root).args.as_slice()) else {
        return None;
    };
    let factors = |id: ValueId| match (&node(id).op, node(id).args.as_slice()) {
        (Op::Binary(BinaryOp::Mul), &[a, b]) if free(id) => Some([(a, b), (b, a)]),
        _ => None,
    };
    let size = |p: &Poly| program.dims.eval(p, &|s| dims.get(s).copied().flatten());
    for (direct, rotated) in [(p, q), (q, p)] {
        let (Some(direct_pairs), Some(rotated_pairs)) = (factors(direct), factors(rotated)) else {
            continue;
        };
        for (half_cat, sin) in rotated_pairs {
            let Some((x, halves)) = rotate_half(program, half_cat, free, &size) else {
                continue;
            };
            let Some(&(_, cos)) = direct_pairs.iter().find(|&&(a, _)| a == x) else {
                continue;
            };
            let shape = |v: ValueId| &program.tensor_type(v).shape;
            let same = shape(x).len() == shape(root).len()
                && shape(x)
                    .iter()
                    .zip(shape(root))
                    .all(|(a, b)| program.dims.equal(a, b));
            if !same {
                continue;
            }
            let inner = [vec![direct, rotated, half_cat], halves].concat();
            let gemm = (uses[x] == 3).then(|| alone(program, dims, x, free)).flatten();
            return Some(RopePat {
                x,
                cos,
                sin,
                inner,
                gemm,
            });
        }
    }
    None
}

/// `cat([-x[.., h:], x[.., :h]], -1)` of a last axis of `2h`: `x`, and the slices and the
/// negation (`neg` or a product with -1).
fn rotate_half(
    program: &Program,
    id: ValueId,
    free: &dyn Fn(ValueId) -> bool,
    size: &dyn Fn(&Poly) -> Option<i64>,
) -> Option<(ValueId, Vec<ValueId>)> {
    let node = |id: ValueId| program.node(id);
    let rank = program.tensor_type(id).rank();
    let (&Op::Cat(axis), &[neg, lower]) = (&node(id).op, node(id).args.as_slice()) else {
        return None;
    };
    if axis + 1 != rank || !free(id) || !free(neg) || !free(lower) {
        return None;
    }
    let upper = match (&node(neg).op, node(neg).args.as_slice()) {
        (Op::Unary(UnaryOp::Neg), &[u]) => u,
        (Op::Binary(BinaryOp::Mul), &[a, b]) => match (literal(program, a), literal(program, b)) {
            (_, Some(-1.0)) => a,
            (Some(-1.0), _) => b,
            _ => return None,
        },
        _ => return None,
    };
    let slice = |s: ValueId| match (&node(s).op, node(s).args.as_slice()) {
        (Op::Slice { axis: a, start, end }, &[x]) if *a == axis && free(s) => {
            Some((x, size(start)?, size(end)?))
        }
        _ => None,
    };
    let ((x, u0, u1), (x2, l0, l1)) = (slice(upper)?, slice(lower)?);
    let dim = size(program.tensor_type(x).shape.last()?)?;
    let halves = x == x2 && l0 == 0 && l1 == u0 && u1 == dim && 2 * u0 == dim;
    halves.then(|| (x, vec![neg, upper, lower]))
}

/// `x * cos + p * sin` over the inputs `[x, cos, p, sin]`, where `p` is the partner half,
/// negated for the first half (`rotate_half`'s `-x2`).
fn half_formula(negate: bool) -> Vec<Expr> {
    let mut expr = vec![
        Expr::Input(0),
        Expr::Input(1),
        Expr::Binary(BinaryOp::Mul, 0, 1),
        Expr::Input(2),
    ];
    let partner = match negate {
        true => {
            expr.push(Expr::Unary(UnaryOp::Neg, 3));
            4
        }
        false => 3,
    };
    expr.push(Expr::Input(3));
    let sin = expr.len() - 1;
    expr.push(Expr::Binary(BinaryOp::Mul, partner, sin));
    expr.push(Expr::Binary(BinaryOp::Add, 2, sin + 1));
    expr
}

fn literal(program: &Program, id: ValueId) -> Option<f64> {
    match program.node(id).op {
        Op::Literal(v) => Some(v),
        _ => None,
    }
}

/// The GEMM node whose result `x` is a view of, where nothing but `x` reads the elements it
/// covers: `x`'s chain of views down to a `linear`, a matmul or a `gemm` is read by nothing
/// else, and where the chain starts with a slice of the result's last axis, every other
/// reader of the result is a slice of that axis disjoint from it.
fn alone(
    program: &Program,
    dims: &[Option<i64>],
    x: ValueId,
    free: &dyn Fn(ValueId) -> bool,
) -> Option<ValueId> {
    let node = |id: ValueId| program.node(id);
    let size = |p: &Poly| program.dims.eval(p, &|s| dims.get(s).copied().flatten());
    let mut at = x;
    let mut below = None;
    loop {
        match (&node(at).op, node(at).args.as_slice()) {
            (Op::Linear | Op::MatMul | Op::Gemm { .. }, _) => break,
            (Op::View(_) | Op::Reshape(_) | Op::Transpose(..) | Op::Permute(_) | Op::Slice { .. }, &[a]) => {
                if at != x && !free(at) {
                    return None;
                }
                below = Some(at);
                at = a;
            }
            _ => return None,
        }
    }
    let gemm = at;
    let range = |s: ValueId| match &node(s).op {
        Op::Slice { axis, start, end } if *axis + 1 == program.tensor_type(gemm).rank() => {
            Some((size(start)?, size(end)?))
        }
        _ => None,
    };
    let Some(below) = below else {
        return Some(gemm); // `x` is the whole result
    };
    let Some(ours) = range(below) else {
        return free(gemm).then_some(gemm);
    };
    let readers = program.nodes.iter().enumerate();
    let mut others = readers.filter(|(id, n)| *id != below && n.args.contains(&gemm));
    let disjoint =
        others.all(|(id, n)| n.args.len() == 1 && range(id).is_some_and(|(a, b)| b <= ours.0 || ours.1 <= a));
    (disjoint && !program.outputs.iter().any(|o| o.value == gemm)).then_some(gemm)
}

/// `body` with the producers of each in-place rotation's `cos` and `sin` moved before the
/// GEMM that rotates: the GEMM rotates its tile only where no later kernel writes the tables
/// (`rope_in_place`), and tables computed from positions in the program (`arange`, `cos`,
/// `sin`) may come after the projection in the body, where they would leave the rotation
/// two maps. The producers that come after the GEMM move to just before it, in their order,
/// so every node still follows its operands; nothing moves where they include the GEMM (or
/// a `linear` merged with it), a loop or a write of state, whose place orders the reads.
pub fn tables_first(program: &Program, body: &[ValueId], fusion: &Fusion) -> Vec<ValueId> {
    let mut body = body.to_vec();
    let mut ropes: Vec<_> = fusion
        .rope
        .values()
        .filter_map(|p| Some((p.gemm?, [p.cos, p.sin])))
        .collect();
    ropes.sort_unstable();
    // Each node's place in `body`, made again only after a move (a model's tables are
    // usually computed once before its first layer, and nothing moves).
    let mut position: Option<HashMap<ValueId, usize>> = None;
    for (gemm, tables) in ropes {
        let merged = fusion.siblings.values().find(|g| g.contains(&gemm));
        let group = merged.map_or(vec![gemm], Vec::clone);
        let position = position.get_or_insert_with(|| places(&body));
        let Some(at) = group.iter().filter_map(|n| position.get(n).copied()).min() else {
            continue;
        };
        let Some(moved) = producers_after(program, position, at, &group, &tables) else {
            continue;
        };
        if moved.is_empty() {
            continue;
        }
        let (moved, rest): (Vec<_>, Vec<_>) = body[at..].iter().partition(|&n| moved.contains(n));
        body = [&body[..at], &moved, &rest].concat();
        *position = places(&body);
    }
    body
}

/// Each node's place in `body`.
fn places(body: &[ValueId]) -> HashMap<ValueId, usize> {
    body.iter().enumerate().map(|(i, &n)| (n, i)).collect()
}

/// The nodes at or after `body[at]` that `tables` are computed from (`position`: each
/// node's place in `body`), `None` where one is in `group`, outside `body`, a loop or a
/// write of state.
fn producers_after(
    program: &Program,
    position: &HashMap<ValueId, usize>,
    at: usize,
    group: &[ValueId],
    tables: &[ValueId],
) -> Option<HashSet<ValueId>> {
    let mut found = HashSet::default();
    let mut todo = tables.to_vec();
    while let Some(n) = todo.pop() {
        if *position.get(&n)? < at || !found.insert(n) {
            continue;
        }
        let op = &program.node(n).op;
        if group.contains(&n) || matches!(op, Op::For { .. } | Op::IndexCopy { .. }) {
            return None;
        }
        todo.extend(&program.node(n).args);
    }
    Some(found)
}

impl Lowerer<'_> {
    /// The rotation fusion found at `id`: in place by the GEMM that writes `x` where the plan
    /// allows it, else two maps.
    pub(super) fn rope(&mut self, id: ValueId, pat: &RopePat) -> Result<View, PlanError> {
        let shape = self.shape(id)?;
        let bad = || internal(format!("node {id}: rotary embedding operands do not fit"));
        let mut view =
            |v: ValueId| -> Result<View, PlanError> { self.view(v)?.expand(&shape).ok_or_else(bad) };
        let (x, cos, sin) = (view(pat.x)?, view(pat.cos)?, view(pat.sin)?);
        if pat.gemm.is_some() {
            if let Some(v) = self.rope_in_place(id, &x, &cos, &sin) {
                return Ok(v);
            }
        }
        let last = shape.len().checked_sub(1).ok_or_else(bad)?;
        let half = shape[last] / 2;
        let out = self.temp(shape.clone());
        let part = |v: &View, first: bool| {
            let from = if first { 0 } else { half };
            v.slice(last, from, from + half)
                .map(|s| s.operand())
                .ok_or_else(bad)
        };
        let label = format!("{} (rotary embedding)", self.label(id));
        // x1 * cos + (-x2) * sin into the first half, x2 * cos + x1 * sin into the second.
        for first in [true, false] {
            let lo = if first { 0 } else { half };
            let inputs = vec![
                part(&x, first)?,
                part(&cos, first)?,
                part(&x, !first)?,
                part(&sin, first)?,
            ];
            let expr = half_formula(first);
            let dest = out.slice(last, lo, lo + half).ok_or_else(bad)?;
            self.map(inputs, expr, &dest, label.clone());
        }
        Ok(out)
    }

    /// The rotation of `x` made part of the GEMM that writes it, `x` rotated in place: `x`
    /// must be whole heads of columns of the GEMM's (batch-free, row-major) result, its rows
    /// that result's rows in order, and `cos` and `sin` the same for every head; `None`
    /// where it is not, or where a task's columns cannot hold whole heads.
    fn rope_in_place(&mut self, id: ValueId, x: &View, cos: &View, sin: &View) -> Option<View> {
        let r = x.shape.len();
        let dim = *x.shape.last()?;
        let writes = |k: &Kernel, b: usize| k.op.operands().iter().any(|o| o.2 && o.0.buf == b);
        let k = self.plan.kernels.iter().rposition(|k| writes(k, x.buf))?;
        let KernelOp::Gemm(g) = &self.plan.kernels[k].op else {
            return None;
        };
        let buf = &self.plan.buffers[x.buf];
        let temp = matches!(buf.kind, BufferKind::Temp { .. }) && !self.derived.contains(&x.buf);
        let later = &self.plan.kernels[k + 1..];
        let tables_ok = [cos, sin]
            .iter()
            .all(|t| t.buf != x.buf && !later.iter().any(|k| writes(k, t.buf)));
        let row_major = g.c.offset == 0 && g.c.strides == [g.n, 1];
        let empty = g.n == 0 || x.numel() == 0;
        if empty || !temp || !tables_ok || !row_major || !g.batch.is_empty() || x.strides[r - 1] != 1 {
            return None;
        }
        // The heads axis (stride `dim`) and the rows' axes (strides of whole rows), each row
        // axis with its strides in `x`'s rows, `cos` and `sin`.
        let mut heads = 1;
        let mut rows: Vec<[usize; 4]> = Vec::new();
        for a in 0..r - 1 {
            let (n, s) = (x.shape[a], x.strides[a]);
            if n == 1 {
                continue;
            }
            if s % g.n == 0 && s > 0 {
                rows.push([n, s / g.n, cos.strides[a], sin.strides[a]]);
            } else if s == dim && heads == 1 && cos.strides[a] == 0 && sin.strides[a] == 0 {
                heads = n;
            } else {
                return None;
            }
        }
        rows.sort_by_key(|a| a[1]);
        let mut expected = 1;
        for a in &rows {
            if a[1] != expected {
                return None;
            }
            expected *= a[0];
        }
        if expected != g.m || x.offset + heads * dim > g.n {
            return None;
        }
        // Axes that step through `cos` and `sin` as through the rows are one.
        let mut merged: Vec<[usize; 4]> = Vec::new();
        for a in rows {
            match merged.last_mut() {
                Some(m) if a[2] == m[2] * m[0] && a[3] == m[3] * m[0] => m[0] *= a[0],
                _ => merged.push(a),
            }
        }
        let (period, outer, inner) = match merged.as_slice() {
            [] => (1, [0, 0], [0, 0]),
            [p] => (p[0], [0, 0], [p[2], p[3]]),
            [p, q] => (p[0], [q[2], q[3]], [p[2], p[3]]),
            _ => return None,
        };
        let table = |t: &View, i: usize| Operand {
            buf: t.buf,
            offset: t.offset,
            strides: vec![outer[i], inner[i], t.strides[r - 1]],
        };
        let rope = Rope {
            start: x.offset,
            heads,
            dim,
            period,
            cos: table(cos, 0),
            sin: table(sin, 1),
        };
        let mut g = g.clone();
        g.rope.push(rope);
        g.block.1 = super::tiling::whole_heads(g.block.1, g.n, dim);
        if !g.rope.iter().all(|r| r.fits(g.block.1, g.n, g.m)) {
            return None;
        }
        let label = format!(
            "{} + {} rotary embedding",
            self.plan.kernels[k].label,
            self.label(id)
        );
        self.remake_kernel(
            k,
            Kernel {
                label,
                op: KernelOp::Gemm(g),
            },
        );
        Some(x.clone())
    }
}
