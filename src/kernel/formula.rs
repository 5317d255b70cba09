//! Reading a formula's shape ([`Expr`] nodes): whether two nodes compute one value by the
//! same operations, a binary node's operands in either order, a formula's nodes renumbered
//! or pruned to what its root reads. The lowering's rewrites of formulas and the code
//! generator's choice of a native epilogue match formulas with these, by structure, so a
//! form is found however the program spelled or the optimizer ordered it.

use super::{BinaryOp, Expr, UnaryOp};

/// Nodes [`same`] visits before it answers "not the same": formulas built from a tree
/// repeat a shared value's nodes, and a deep chain of them could make the walk long.
const SAME_BUDGET: usize = 4096;

/// Whether nodes `a` and `b` of `expr` compute the same value by the same operations (the
/// same node, or equal nodes over such operands; constants equal bit for bit). Conservative:
/// past a budget of visited nodes it answers `false`.
pub fn same(expr: &[Expr], a: usize, b: usize) -> bool {
    let mut budget = SAME_BUDGET;
    same_within(expr, a, b, &mut budget)
}

fn same_within(expr: &[Expr], a: usize, b: usize, budget: &mut usize) -> bool {
    if a == b {
        return true;
    }
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let mut pair = |x: usize, y: usize| same_within(expr, x, y, budget);
    match (&expr[a], &expr[b]) {
        (Expr::Input(i), Expr::Input(j))
        | (Expr::Reduced(i), Expr::Reduced(j))
        | (Expr::Index(i), Expr::Index(j)) => i == j,
        (Expr::Const(x), Expr::Const(y)) => x.to_bits() == y.to_bits(),
        (Expr::Unary(o, x), Expr::Unary(p, y)) => o == p && pair(*x, *y),
        (Expr::Binary(o, x1, x2), Expr::Binary(p, y1, y2)) => o == p && pair(*x1, *y1) && pair(*x2, *y2),
        (Expr::Compare(o, x1, x2), Expr::Compare(p, y1, y2)) => o == p && pair(*x1, *y1) && pair(*x2, *y2),
        (Expr::Select(c, x1, x2), Expr::Select(d, y1, y2)) => {
            pair(*c, *d) && pair(*x1, *y1) && pair(*x2, *y2)
        }
        _ => false,
    }
}

/// Whether node `n` is the constant `c` (bit for bit).
pub fn is_const(expr: &[Expr], n: usize, c: f32) -> bool {
    matches!(expr[n], Expr::Const(k) if k.to_bits() == c.to_bits())
}

/// The constant at node `n`, if it is one.
pub fn constant(expr: &[Expr], n: usize) -> Option<f32> {
    match expr[n] {
        Expr::Const(c) => Some(c),
        _ => None,
    }
}

/// The operand of node `n` where it is `op` of one.
pub fn unary(expr: &[Expr], n: usize, op: UnaryOp) -> Option<usize> {
    match expr[n] {
        Expr::Unary(o, a) if o == op => Some(a),
        _ => None,
    }
}

/// The operands of node `n` where it is `op` of two.
pub fn binary(expr: &[Expr], n: usize, op: BinaryOp) -> Option<(usize, usize)> {
    match expr[n] {
        Expr::Binary(o, a, b) if o == op => Some((a, b)),
        _ => None,
    }
}

/// `f` of the operands of the commutative `op` at node `n`, tried in their order and then
/// swapped: the first that matches.
pub fn either<T>(expr: &[Expr], n: usize, op: BinaryOp, f: impl Fn(usize, usize) -> Option<T>) -> Option<T> {
    let (a, b) = binary(expr, n, op)?;
    f(a, b).or_else(|| f(b, a))
}

/// Node `e` with each operand `a` replaced by `to(a)`.
pub fn renumbered(e: &Expr, mut to: impl FnMut(usize) -> usize) -> Expr {
    match *e {
        Expr::Input(i) => Expr::Input(i),
        Expr::Const(c) => Expr::Const(c),
        Expr::Reduced(k) => Expr::Reduced(k),
        Expr::Index(a) => Expr::Index(a),
        Expr::Unary(op, a) => Expr::Unary(op, to(a)),
        Expr::Binary(op, a, b) => Expr::Binary(op, to(a), to(b)),
        Expr::Compare(op, a, b) => Expr::Compare(op, to(a), to(b)),
        Expr::Select(c, a, b) => Expr::Select(to(c), to(a), to(b)),
    }
}

/// The nodes the root (the last node) reads, directly or not, in their order: what a
/// rewrite that replaced a subtree leaves of the formula.
pub fn live(expr: &[Expr]) -> Vec<Expr> {
    let Some(root) = expr.len().checked_sub(1) else {
        return Vec::new();
    };
    let mut read = vec![false; expr.len()];
    read[root] = true;
    for n in (0..expr.len()).rev() {
        if read[n] {
            let _ = renumbered(&expr[n], |a| {
                read[a] = true;
                a
            });
        }
    }
    let mut at = vec![0; expr.len()];
    let mut out = Vec::new();
    for (n, e) in expr.iter().enumerate().filter(|(n, _)| read[*n]) {
        at[n] = out.len();
        out.push(renumbered(e, |a| at[a]));
    }
    out
}
