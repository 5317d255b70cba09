//! Slices moved toward the inputs through the ops that compute each slice of their result
//! from the same slice of their operands: `f(x)[.., s:e, ..]` is `f(x[.., s:e, ..])`.
//!
//! Elementwise ops and scales (an operand of size 1 on the axis, or without it, is
//! broadcast and kept whole), reductions over other axes, `linear` on any axis but its last
//! and `matmul` on a batch axis or the rows of its left operand. This is what makes
//! `logits[:, -1:]` of `linear(rms_norm(h), W)` a product of one row per sequence:
//! generation asks a language model for the last position's logits only
//! (`generate::program::last_logits`).
//!
//! A slice that keeps its whole axis is left alone (`slice-noop` puts it in its input's
//! class, where sinking it would rebuild the op it came from), and so is one whose bounds
//! move with a loop variable (a head's columns: the `lift-*` rules make it a `select` of a
//! split axis). Each rule makes slices of smaller terms only, so the rules end.

use super::*;
use crate::ir::ReduceOp;

/// Which op a slice is moved through.
pub enum Sink {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Reduce(ReduceOp),
    Scale,
    Linear,
    MatMul,
}

impl Applier<Tensor, Ctx> for Sink {
    fn apply_one(
        &self,
        eg: &mut EG,
        eclass: Id,
        subst: &Subst,
        ast: Option<&PatternAst<Tensor>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let build = |m: &Match, r: &mut Rhs| -> Option<()> {
            match self {
                Sink::Unary(op) => {
                    let x = operand(m, r, "?x", m.data("?x").shape()?)?;
                    r.node(Tensor::Unary(*op, [x]));
                }
                Sink::Binary(op) => {
                    let whole = m.ctx().broadcast(m.data("?x").shape()?, m.data("?y").shape()?)?;
                    let (x, y) = (operand(m, r, "?x", &whole)?, operand(m, r, "?y", &whole)?);
                    r.node(Tensor::Binary(*op, [x, y]));
                }
                Sink::Reduce(op) => {
                    let x = reduced_operand(m, r)?;
                    let (axes, keep) = (r.var("?d"), r.var("?k"));
                    r.node(Tensor::Reduce(*op, [x, axes, keep]));
                }
                Sink::Scale => {
                    let x = operand(m, r, "?x", m.data("?x").shape()?)?;
                    let c = r.var("?c");
                    r.node(Tensor::Scale([x, c]));
                }
                Sink::Linear => {
                    let x = m.data("?x").shape()?;
                    (m.data("?a").axis()? + 1 < x.len()).then_some(())?;
                    let x = operand(m, r, "?x", x)?;
                    let (w, b) = (r.var("?w"), r.var("?b"));
                    r.node(Tensor::Linear([x, w, b]));
                }
                Sink::MatMul => {
                    let (x, y) = matmul_operands(m, r)?;
                    r.node(Tensor::MatMul([x, y]));
                }
            }
            Some(())
        };
        apply_built(eg, eclass, subst, ast, rule, &build)
    }
}

/// The rules, one per op a slice moves through.
pub fn sink_rules() -> Vec<Rw> {
    let mut rules = Vec::new();
    let mut add = |name: String, lhs: String, sink: Sink| {
        let lhs: egg::Pattern<Tensor> = lhs.parse().unwrap();
        rules.push(Rewrite::new(name, lhs, sink).unwrap());
    };
    for &op in UnaryOp::ALL {
        add(
            format!("slice-{op}"),
            format!("(slice ({op} ?x) ?a ?s ?e)"),
            Sink::Unary(op),
        );
    }
    for &op in BinaryOp::ALL {
        add(
            format!("slice-{op}"),
            format!("(slice ({op} ?x ?y) ?a ?s ?e)"),
            Sink::Binary(op),
        );
    }
    for &op in ReduceOp::ALL {
        add(
            format!("slice-{op}"),
            format!("(slice ({op} ?x ?d ?k) ?a ?s ?e)"),
            Sink::Reduce(op),
        );
    }
    add(
        "slice-scale".into(),
        "(slice (scale ?x ?c) ?a ?s ?e)".into(),
        Sink::Scale,
    );
    add(
        "slice-linear".into(),
        "(slice (linear ?x ?w ?b) ?a ?s ?e)".into(),
        Sink::Linear,
    );
    add(
        "slice-matmul".into(),
        "(slice (matmul ?x ?y) ?a ?s ?e)".into(),
        Sink::MatMul,
    );
    rules
}

/// Whether the slice `?a ?s ?e` of a result of shape `whole` may move: it drops part of
/// its axis, and its bounds hold no loop variable.
fn moves(m: &Match, whole: &[Poly]) -> Option<()> {
    let ctx = m.ctx();
    let size = whole.get(m.data("?a").axis()?)?;
    let (s, e) = (m.data("?s").dim()?, m.data("?e").dim()?);
    let keeps_all = ctx.equal(s, &Poly::int(0)) && ctx.equal(e, size);
    let looped = [s, e].iter().any(|p| p.syms().iter().any(|&v| ctx.is_loop(v)));
    (!keeps_all && !looped).then_some(())
}

/// The operand `v` of an elementwise op whose result has shape `whole`, sliced as the
/// result is (broadcasting aligns the trailing axes); kept whole where it does not reach
/// the sliced axis or has size 1 on it.
fn operand(m: &Match, r: &mut Rhs, v: &str, whole: &[Poly]) -> Option<Id> {
    moves(m, whole)?;
    let ctx = m.ctx();
    let (shape, a) = (m.data(v).shape()?, m.data("?a").axis()?);
    let missing = whole.len().checked_sub(shape.len())?;
    let Some(axis) = a.checked_sub(missing) else {
        return Some(r.var(v));
    };
    if ctx.equal(&shape[axis], &Poly::int(1)) {
        return Some(r.var(v));
    }
    ctx.equal(&shape[axis], &whole[a]).then_some(())?;
    Some(slice(r, v, axis))
}

/// `v` sliced on `axis` by the matched slice's bounds.
fn slice(r: &mut Rhs, v: &str, axis: usize) -> Id {
    let x = r.var(v);
    let (axis, s, e) = (r.int(axis), r.var("?s"), r.var("?e"));
    r.node(Tensor::Slice([x, axis, s, e]))
}

/// The reduction's operand `?x`, sliced on the axis the result's sliced axis comes from,
/// which must not be one it reduces.
fn reduced_operand(m: &Match, r: &mut Rhs) -> Option<Id> {
    let x = m.data("?x").shape()?;
    let reduced: Vec<usize> = m
        .data("?d")
        .shape_attr()?
        .iter()
        .map(|p| p.as_int().and_then(|a| usize::try_from(a).ok()))
        .collect::<Option<_>>()?;
    let a = m.data("?a").axis()?;
    let axis = match m.data("?k").int()? {
        1 => a,
        _ => (0..x.len()).filter(|i| !reduced.contains(i)).nth(a)?,
    };
    (axis < x.len() && !reduced.contains(&axis)).then_some(())?;
    moves(m, x)?;
    Some(slice(r, "?x", axis))
}

/// A matmul's operands, sliced for a slice of its result on a batch axis (both operands,
/// as broadcast) or on the rows of `?x` (`?x` alone); never on its columns, nor where
/// either operand is a vector (its axes do not line up with the result's).
fn matmul_operands(m: &Match, r: &mut Rhs) -> Option<(Id, Id)> {
    let (x, y) = (m.data("?x").shape()?, m.data("?y").shape()?);
    (x.len() >= 2 && y.len() >= 2).then_some(())?;
    let batch = m.ctx().broadcast(&x[..x.len() - 2], &y[..y.len() - 2])?;
    let rows = batch.len();
    let a = m.data("?a").axis()?;
    if a == rows {
        let mut whole = batch;
        whole.extend([x[x.len() - 2].clone(), Poly::int(1)]);
        let xs = operand(m, r, "?x", &whole)?;
        return Some((xs, r.var("?y")));
    }
    (a < rows).then_some(())?;
    let whole: Vec<Poly> = batch.into_iter().chain([Poly::int(1), Poly::int(1)]).collect();
    Some((operand(m, r, "?x", &whole)?, operand(m, r, "?y", &whole)?))
}
