//! Tanh-GELU in fewer operations: `0.5 x (1 + tanh u)` is `x / (1 + e^(-2u))` (that is,
//! `x · sigmoid(2u)`), one `exp`, an add and a division where `tanh` is a polynomial, an
//! `exp`, a division and selects: from `u` on, 34 vector instructions of `codegen/math.rs`
//! where ATen's form took 49 (40 against 55 per element with a bias and GELU's cubic;
//! `BENCHMARKS.md`). Found by the formula's structure, in any order of its
//! commutative operands, wherever the lowering writes a formula; the interpreter still
//! evaluates the expression as written, and `tests/kernels.rs` sweeps both forms against a
//! float64 GELU.
//!
//! Only where `u` is a polynomial in `x` (sums and products of `x` and constants that read
//! `x`), as GELU's `√(2/π) (x + 0.044715 x³)` is: then `u` is infinite or NaN wherever `x`
//! is, and the two forms agree on every infinity and NaN (`x` where `tanh u` is 1, NaN at
//! `x = -inf`) and give `±0` alike where `1 + tanh u` rounds to 0 in float32 (GELU below
//! about -10, as PyTorch). In between they differ by rounding, the new form the more
//! accurate: `1 + tanh u` cancels for `u < 0`, tens of percent of GELU near `x = -5`.

use crate::ir::CmpOp;
use crate::kernel::formula::{either, is_const, live, renumbered, same, unary};
use crate::kernel::{BinaryOp, Expr, UnaryOp};

/// Where `e^(-2u)` is above this, `tanh u` rounds to -1 in float32 (`1 + tanh u` is below
/// 2^-25), so ATen's form, and PyTorch, give `±0`: the new form takes its denominator as
/// infinite there to give the same.
const SATURATED: f32 = 67_108_864.0; // 2^26

/// `expr` with every `0.5 x (1 + tanh u)` (`u` a polynomial in `x`) computed as
/// `x / (1 + e)`, `e = exp(u · -2)`, or `inf` where that is above [`SATURATED`].
pub fn as_sigmoid(expr: Vec<Expr>) -> Vec<Expr> {
    if !expr.iter().any(|e| matches!(e, Expr::Unary(UnaryOp::Tanh, _))) {
        return expr;
    }
    let mut out: Vec<Expr> = Vec::with_capacity(expr.len() + 5);
    let mut at: Vec<usize> = Vec::with_capacity(expr.len());
    for (n, e) in expr.iter().enumerate() {
        let node = match half_tanh(&expr, n) {
            Some((x, u)) => {
                let mut push = |e: Expr| {
                    out.push(e);
                    out.len() - 1
                };
                let minus_two = push(Expr::Const(-2.0));
                let t = push(Expr::Binary(BinaryOp::Mul, at[u], minus_two));
                let ex = push(Expr::Unary(UnaryOp::Exp, t));
                let limit = push(Expr::Const(SATURATED));
                let over = push(Expr::Compare(CmpOp::Gt, ex, limit));
                let inf = push(Expr::Const(f32::INFINITY));
                let ex = push(Expr::Select(over, inf, ex));
                let one = push(Expr::Const(1.0));
                let d = push(Expr::Binary(BinaryOp::Add, one, ex));
                Expr::Binary(BinaryOp::Div, at[x], d)
            }
            None => renumbered(e, |a| at[a]),
        };
        out.push(node);
        at.push(out.len() - 1);
    }
    live(&out)
}

/// `(x, u)` where node `n` is `(x · 0.5) · (1 + tanh u)`, each product and sum in either
/// order, and `u` a polynomial in `x`.
fn half_tanh(expr: &[Expr], n: usize) -> Option<(usize, usize)> {
    either(expr, n, BinaryOp::Mul, |half_x, one_plus| {
        let x = either(expr, half_x, BinaryOp::Mul, |x, h| {
            is_const(expr, h, 0.5).then_some(x)
        })?;
        let tanh = either(expr, one_plus, BinaryOp::Add, |one, t| {
            is_const(expr, one, 1.0).then_some(t)
        })?;
        let u = unary(expr, tanh, UnaryOp::Tanh)?;
        (polynomial(expr, u, x) == Some(true)).then_some((x, u))
    })
}

/// Whether node `n` is a polynomial in node `x` (sums and products of `x` and constants):
/// `Some(reads x)`, or `None` where it is not one.
fn polynomial(expr: &[Expr], n: usize, x: usize) -> Option<bool> {
    if same(expr, n, x) {
        return Some(true);
    }
    match expr[n] {
        Expr::Const(_) => Some(false),
        Expr::Binary(BinaryOp::Add | BinaryOp::Mul, a, b) => {
            Some(polynomial(expr, a, x)? | polynomial(expr, b, x)?)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::formula::binary;

    /// ATen's tanh-GELU of input 0, as the checker builds it, with the operands of `sum`
    /// and the outer product in the given order.
    fn gelu(swap: bool) -> Vec<Expr> {
        use BinaryOp::{Add, Mul};
        let mut e = vec![
            Expr::Input(0),                // 0: x
            Expr::Binary(Mul, 0, 0),       // 1: x²
            Expr::Binary(Mul, 1, 0),       // 2: x³
            Expr::Const(0.044_715),        // 3
            Expr::Binary(Mul, 2, 3),       // 4
            Expr::Binary(Add, 0, 4),       // 5: x + κx³
            Expr::Const(0.797_884_6),      // 6
            Expr::Binary(Mul, 5, 6),       // 7: u
            Expr::Unary(UnaryOp::Tanh, 7), // 8
            Expr::Const(1.0),              // 9
            Expr::Binary(Add, 9, 8),       // 10: 1 + tanh u
            Expr::Input(0),                // 11: x again, as a tree repeats it
            Expr::Const(0.5),              // 12
            Expr::Binary(Mul, 11, 12),     // 13: x · 0.5
            Expr::Binary(Mul, 13, 10),     // 14
        ];
        if swap {
            e[5] = Expr::Binary(Add, 4, 0);
            e[14] = Expr::Binary(Mul, 10, 13);
        }
        e
    }

    #[test]
    fn tanh_gelu_becomes_x_over_one_plus_exp_in_either_order() {
        for swap in [false, true] {
            let got = as_sigmoid(gelu(swap));
            let text = format!("{got:?}");
            assert!(!text.contains("Tanh"), "{text}");
            let root = got.len() - 1;
            let Expr::Binary(BinaryOp::Div, x, d) = got[root] else {
                panic!("{text}");
            };
            assert_eq!(got[x], Expr::Input(0));
            let (one, sel) = binary(&got, d, BinaryOp::Add).expect("1 + e");
            assert!(is_const(&got, one, 1.0));
            let Expr::Select(over, inf, ex) = got[sel] else {
                panic!("{text}");
            };
            assert!(is_const(&got, inf, f32::INFINITY));
            assert_eq!(got[over], Expr::Compare(CmpOp::Gt, ex, over - 1), "{text}");
            assert!(is_const(&got, over - 1, SATURATED));
            let t = unary(&got, ex, UnaryOp::Exp).expect("exp");
            let (u, k) = binary(&got, t, BinaryOp::Mul).expect("u · -2");
            assert!(is_const(&got, k, -2.0));
            assert!(matches!(got[u], Expr::Binary(BinaryOp::Mul, _, _)), "{text}");
            assert_eq!(got, live(&got), "no dead nodes");
        }
    }

    /// `0.5 y (1 + tanh u)` with `u` reading another input, or with a factor other than
    /// one half, is left as written.
    #[test]
    fn other_products_with_tanh_are_left_alone() {
        let mut other_input = gelu(false);
        other_input[11] = Expr::Input(1);
        let mut third = gelu(false);
        third[12] = Expr::Const(0.25);
        let mut not_poly = gelu(false);
        not_poly[1] = Expr::Unary(UnaryOp::Exp, 0);
        for e in [other_input, third, not_poly] {
            assert_eq!(as_sigmoid(e.clone()), e);
        }
    }
}
