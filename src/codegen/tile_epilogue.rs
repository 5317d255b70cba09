//! The GEMM epilogues the native shim runs on 512-bit vectors (`attnc_epilogue_tile`,
//! `runtime/native/epilogue.rs`) where the CPU has AVX-512: formulas of the form
//! `act(c [+ bias] [+ pre]) [· second] [+ post]`, `act` one of [`Activation`] and `second`
//! a paired epilogue's second product (SwiGLU's `silu(gate) · up`), found by structure
//! (either order of every commutative operand; a shared value as one node or repeated).
//! The shim computes each form with the operations the 128-bit Cranelift code emits for
//! it (`math.rs`), in the same order, so both give the same bits. Any other epilogue, and
//! every epilogue without AVX-512 or under `ATTNC_NO_TILE_EPILOGUE`, stays in the
//! generated code.
//!
//! The activations are the ones whose arithmetic costs more than the tile's memory traffic
//! at 128 bits: GPT-2's tanh-GELU took its GEMM from 0.80 to 0.92 of the same GEMM without
//! an epilogue. A bias, a residual or ReLU alone are memory-bound, and measured the same
//! at 512 bits within the noise (`BENCHMARKS.md`), so they stay in the generated code.

use crate::ir::CmpOp;
use crate::kernel::formula::{binary, constant, either, is_const, same, unary};
use crate::kernel::{BinaryOp, Epilogue, Expr, Gemm, UnaryOp};

/// What the shim applies to `x = c [+ bias] [+ pre]`, as the formula writes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// `sigmoid(x)`
    Sigmoid,
    /// `x · sigmoid(x)`
    Silu,
    /// `x / (1 + e)`, `e = exp(((x + x·x·x · kappa) · beta) · -2)`, `inf` where `e` is
    /// above `limit`: tanh-GELU as the lowering rewrites it (`lower/tanh_gelu.rs`).
    GeluTanh { kappa: f32, beta: f32, limit: f32 },
    /// `where(x == inf, NaN, (x · (1 + erf(x · scale))) · 0.5)`: ATen's erf-GELU as the
    /// checker writes it.
    GeluErf { scale: f32 },
}

impl Activation {
    /// The shim's code for it, and its three constants (unused ones 0).
    pub fn code(self) -> (i64, [f32; 3]) {
        match self {
            Activation::Sigmoid => (0, [0.0; 3]),
            Activation::Silu => (1, [0.0; 3]),
            Activation::GeluTanh { kappa, beta, limit } => (2, [kappa, beta, limit]),
            Activation::GeluErf { scale } => (3, [scale, 0.0, 0.0]),
        }
    }

    /// The activation of a shim's code and constants; `None` for a code it does not know.
    pub fn from_code(code: i64, [k0, k1, k2]: [f32; 3]) -> Option<Activation> {
        Some(match code {
            0 => Activation::Sigmoid,
            1 => Activation::Silu,
            2 => Activation::GeluTanh {
                kappa: k0,
                beta: k1,
                limit: k2,
            },
            3 => Activation::GeluErf { scale: k0 },
            _ => return None,
        })
    }
}

/// An epilogue the shim runs: `act(x)`, `x = c [+ bias] [+ inputs[pre]]`, then, paired,
/// `· second` (the tile of the pair's second product), then `[+ inputs[post]]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Form {
    pub pre: Option<usize>,
    pub act: Activation,
    pub paired: bool,
    pub post: Option<usize>,
}

/// The form of `g`'s bias and epilogue where the shim can run it: one of the forms, `c`,
/// the bias and every input it reads contiguous along the row (rows at any stride); a
/// paired epilogue's second product is `c` one step along the last batch axis.
pub fn form(g: &Gemm) -> Option<Form> {
    let r = g.batch.len();
    let unit_rows = g.c.strides[r + 1] == 1 && g.bias.as_ref().is_none_or(|b| b.strides[0] == 1);
    let ep = g.epilogue.as_ref()?;
    if ep.pair && !g.paired() {
        return None;
    }
    let form = of_epilogue(ep)?;
    let inputs = &ep.inputs;
    let unit = |k: Option<usize>| k.is_none_or(|k| inputs[k].strides[r + 1] == 1);
    (unit_rows && unit(form.pre) && unit(form.post)).then_some(form)
}

/// The form of an epilogue's formula (its inputs numbered from 0 as in `Epilogue::inputs`).
fn of_epilogue(ep: &Epilogue) -> Option<Form> {
    let expr = &ep.expr;
    let root = expr.len().checked_sub(1)?;
    // An epilogue input, as its index in `inputs`: the formula reads `c` as `Input(0)`, a
    // pair's second product as `Input(1)`, then the inputs.
    let input = |n: usize| match expr[n] {
        Expr::Input(i) if i >= ep.leaves() => Some(i - ep.leaves()),
        _ => None,
    };
    let activated = |n: usize| {
        let (act, x) = activation(expr, n)?;
        Some((act, operand(expr, x, &input)?))
    };
    let body = |n: usize| match ep.pair {
        false => activated(n),
        true => either(expr, n, BinaryOp::Mul, |a, second| {
            matches!(expr[second], Expr::Input(1)).then_some(())?;
            activated(a)
        }),
    };
    let whole = |n: usize, post: Option<usize>| {
        let (act, pre) = body(n)?;
        Some(Form {
            pre,
            act,
            paired: ep.pair,
            post,
        })
    };
    whole(root, None).or_else(|| either(expr, root, BinaryOp::Add, |a, p| whole(a, Some(input(p)?))))
}

/// `Some(None)` where node `x` is the element of `c`, `Some(Some(k))` where it is that plus
/// input `k` (either order).
fn operand(expr: &[Expr], x: usize, input: &dyn Fn(usize) -> Option<usize>) -> Option<Option<usize>> {
    if matches!(expr[x], Expr::Input(0)) {
        return Some(None);
    }
    either(expr, x, BinaryOp::Add, |c, k| {
        matches!(expr[c], Expr::Input(0)).then_some(())?;
        input(k).map(Some)
    })
}

/// The activation at node `n` and the node of its argument `x`.
fn activation(expr: &[Expr], n: usize) -> Option<(Activation, usize)> {
    let is = |a: usize, x: usize| same(expr, a, x);
    if let Some(x) = unary(expr, n, UnaryOp::Sigmoid) {
        return Some((Activation::Sigmoid, x));
    }
    if let Some(x) = either(expr, n, BinaryOp::Mul, |x, s| {
        unary(expr, s, UnaryOp::Sigmoid).filter(|&y| is(y, x)).map(|_| x)
    }) {
        return Some((Activation::Silu, x));
    }
    if let Some(found) = gelu_tanh(expr, n) {
        return Some(found);
    }
    gelu_erf(expr, n)
}

/// `x / (1 + where(e > limit, inf, e))`, `e = exp(u · -2)`, `u = (x + x·x·x · kappa) · beta`.
fn gelu_tanh(expr: &[Expr], n: usize) -> Option<(Activation, usize)> {
    let is = |a: usize, x: usize| same(expr, a, x);
    let (x, d) = binary(expr, n, BinaryOp::Div)?;
    let sel = either(expr, d, BinaryOp::Add, |one, s| {
        is_const(expr, one, 1.0).then_some(s)
    })?;
    let Expr::Select(over, inf, e) = expr[sel] else {
        return None;
    };
    let Expr::Compare(CmpOp::Gt, e2, limit) = expr[over] else {
        return None;
    };
    let limit = constant(expr, limit)?;
    if !is_const(expr, inf, f32::INFINITY) || !is(e2, e) {
        return None;
    }
    let t = unary(expr, e, UnaryOp::Exp)?;
    let (u, k) = binary(expr, t, BinaryOp::Mul)?;
    is_const(expr, k, -2.0).then_some(())?;
    let (sum, beta) = either(expr, u, BinaryOp::Mul, |s, b| Some((s, constant(expr, b)?)))?;
    let kappa = either(expr, sum, BinaryOp::Add, |x1, cubic| {
        is(x1, x).then_some(())?;
        either(expr, cubic, BinaryOp::Mul, |x3, k| {
            let cube = either(expr, x3, BinaryOp::Mul, |x2, x1| {
                let (a, b) = binary(expr, x2, BinaryOp::Mul)?;
                (is(a, x) && is(b, x) && is(x1, x)).then_some(())
            });
            cube.and(constant(expr, k))
        })
    })?;
    Some((Activation::GeluTanh { kappa, beta, limit }, x))
}

/// `where(x == inf, NaN, (x · (1 + erf(x · scale))) · 0.5)`.
fn gelu_erf(expr: &[Expr], n: usize) -> Option<(Activation, usize)> {
    let is = |a: usize, x: usize| same(expr, a, x);
    let Expr::Select(at_inf, nan, value) = expr[n] else {
        return None;
    };
    let Expr::Compare(CmpOp::Eq, x, inf) = expr[at_inf] else {
        return None;
    };
    // The NaN the shim writes is this one, bit for bit.
    if !is_const(expr, nan, f32::NAN) || !is_const(expr, inf, f32::INFINITY) {
        return None;
    }
    let scaled = either(expr, value, BinaryOp::Mul, |s, h| {
        is_const(expr, h, 0.5).then_some(s)
    })?;
    let one_plus = either(expr, scaled, BinaryOp::Mul, |x1, o| is(x1, x).then_some(o))?;
    let erf = either(expr, one_plus, BinaryOp::Add, |one, t| {
        is_const(expr, one, 1.0).then_some(t)
    })?;
    let arg = unary(expr, erf, UnaryOp::Erf)?;
    let scale = either(expr, arg, BinaryOp::Mul, |x1, r| {
        is(x1, x).then_some(())?;
        constant(expr, r)
    })?;
    Some((Activation::GeluErf { scale }, x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Operand;

    fn epilogue(expr: Vec<Expr>, inputs: usize) -> Epilogue {
        let input = Operand {
            buf: 0,
            offset: 0,
            strides: vec![8, 1],
        };
        Epilogue {
            inputs: vec![input; inputs],
            expr,
            pair: false,
        }
    }

    /// `in2 + sigmoid(in1 + in0) * (in1 + in0)`: SiLU over `c` plus input 0, with every
    /// commutative operand in the other order and `x` repeated node for node, then input 1
    /// added.
    #[test]
    fn silu_with_a_bias_and_a_residual_in_any_order() {
        use BinaryOp::{Add, Mul};
        let expr = vec![
            Expr::Input(1),
            Expr::Input(0),
            Expr::Binary(Add, 0, 1),
            Expr::Unary(UnaryOp::Sigmoid, 2),
            Expr::Binary(Add, 0, 1),
            Expr::Binary(Mul, 3, 4),
            Expr::Input(2),
            Expr::Binary(Add, 6, 5),
        ];
        let want = Form {
            pre: Some(0),
            act: Activation::Silu,
            paired: false,
            post: Some(1),
        };
        assert_eq!(of_epilogue(&epilogue(expr, 2)), Some(want));
    }

    /// `sigmoid(c) * in1` is no SiLU, `c + in1 + in2` no form (two inputs before the
    /// activation), and a paired epilogue that does not multiply by its second product
    /// none.
    #[test]
    fn other_formulas_are_not_forms() {
        use BinaryOp::{Add, Mul};
        let gate = vec![
            Expr::Input(0),
            Expr::Unary(UnaryOp::Sigmoid, 0),
            Expr::Input(1),
            Expr::Binary(Mul, 1, 2),
        ];
        let sums = vec![
            Expr::Input(0),
            Expr::Input(1),
            Expr::Binary(Add, 0, 1),
            Expr::Input(2),
            Expr::Binary(Add, 2, 3),
            Expr::Unary(UnaryOp::Sigmoid, 4),
        ];
        assert_eq!(of_epilogue(&epilogue(gate.clone(), 1)), None);
        assert_eq!(of_epilogue(&epilogue(sums, 2)), None);
        let silu = vec![
            Expr::Input(0),
            Expr::Unary(UnaryOp::Sigmoid, 0),
            Expr::Binary(Mul, 0, 1),
        ];
        assert!(of_epilogue(&epilogue(silu.clone(), 0)).is_some());
        let mut paired = epilogue(silu, 0);
        paired.pair = true;
        assert_eq!(of_epilogue(&paired), None);
        // Paired, `Input(2)` is the first input, not the second product.
        let mut by_input = epilogue(swiglu(Expr::Input(2)), 1);
        by_input.pair = true;
        assert_eq!(of_epilogue(&by_input), None);
    }

    /// `silu(c) · second` (SwiGLU's gate times up) over a pair, then a residual (input 0).
    fn swiglu(second: Expr) -> Vec<Expr> {
        use BinaryOp::Mul;
        vec![
            Expr::Input(0),
            Expr::Unary(UnaryOp::Sigmoid, 0),
            Expr::Binary(Mul, 0, 1),
            second,
            Expr::Binary(Mul, 3, 2),
        ]
    }

    #[test]
    fn a_pair_times_its_second_product_is_a_form() {
        let mut ep = epilogue(swiglu(Expr::Input(1)), 1);
        ep.pair = true;
        let want = Form {
            pre: None,
            act: Activation::Silu,
            paired: true,
            post: None,
        };
        assert_eq!(of_epilogue(&ep), Some(want));
        ep.expr
            .extend([Expr::Input(2), Expr::Binary(BinaryOp::Add, 5, 4)]);
        let with_post = Form {
            post: Some(0),
            ..want
        };
        assert_eq!(of_epilogue(&ep), Some(with_post));
    }

    /// Every activation's code and constants read back as itself.
    #[test]
    fn codes_round_trip() {
        for act in [
            Activation::Sigmoid,
            Activation::Silu,
            Activation::GeluTanh {
                kappa: 0.044_715,
                beta: 0.797_884_6,
                limit: 67_108_864.0,
            },
            Activation::GeluErf {
                scale: std::f32::consts::FRAC_1_SQRT_2,
            },
        ] {
            let (code, k) = act.code();
            assert_eq!(Activation::from_code(code, k), Some(act));
        }
        assert_eq!(Activation::from_code(4, [0.0; 3]), None);
    }
}
