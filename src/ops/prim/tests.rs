//! Edge cases of each primitive, as PyTorch 2.15 gives them on float32 CPU tensors.

use super::{BinaryOp, UnaryOp};

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

/// Same value, NaN equal to NaN and the sign of zero compared.
fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits() || (a - b).abs() <= 1e-6 * b.abs()
}

fn check_unary(op: UnaryOp, cases: &[(f32, f32)]) {
    for &(x, want) in cases {
        let got = op.eval(x);
        assert!(same(got, want), "{op}({x}) = {got}, PyTorch gives {want}");
    }
}

#[test]
fn unary_edges_match_pytorch() {
    use UnaryOp::*;
    // torch.tensor([nan, inf, -inf, 1e20, -1e20, 2.7, -2.7, -0.5, 16777217.0, 9.2e18]).long()
    let min = -9_223_372_036_854_775_808.0;
    check_unary(
        Long,
        &[
            (NAN, min),
            (INF, min),
            (-INF, min),
            (1e20, min),
            (-1e20, min),
            (2.7, 2.0),
            (-2.7, -2.0),
            (-0.5, 0.0),
            (16_777_217.0, 16_777_216.0),
            (9.2e18, 9.2e18),
        ],
    );
    check_unary(Abs, &[(NAN, NAN), (-INF, INF), (-0.0, 0.0), (-104.0, 104.0)]);
    check_unary(
        Sqrt,
        &[(NAN, NAN), (INF, INF), (-INF, NAN), (-0.0, -0.0), (-1.0, NAN)],
    );
    check_unary(
        Rsqrt,
        &[(INF, 0.0), (0.0, INF), (-0.0, -INF), (-1.0, NAN), (100.0, 0.1)],
    );
    check_unary(
        Exp,
        &[
            (NAN, NAN),
            (INF, INF),
            (-INF, 0.0),
            (-100.0, 3.783_5e-44),
            (88.8, INF),
        ],
    );
    check_unary(
        Log,
        &[(INF, INF), (-INF, NAN), (0.0, -INF), (-0.0, -INF), (-1.0, NAN)],
    );
    check_unary(
        Tanh,
        &[
            (INF, 1.0),
            (-INF, -1.0),
            (-0.0, -0.0),
            (-1.0, -0.761_594_2),
            (100.0, 1.0),
        ],
    );
    check_unary(
        Sigmoid,
        &[
            (INF, 1.0),
            (-INF, 0.0),
            (0.0, 0.5),
            (-1.0, 0.268_941_43),
            (-104.0, 0.0),
        ],
    );
    check_unary(
        Erf,
        &[
            (NAN, NAN),
            (INF, 1.0),
            (-INF, -1.0),
            (-0.0, -0.0),
            (-1.0, -0.842_700_8),
            (1e-45, 1e-45),
        ],
    );
    check_unary(Sin, &[(INF, NAN), (-0.0, -0.0), (100.0, -0.506_365_66)]);
    check_unary(Cos, &[(-INF, NAN), (-0.0, 1.0), (-104.0, -0.946_868)]);
}

#[test]
fn binary_edges_match_pytorch() {
    use BinaryOp::*;
    let cases: &[(BinaryOp, f32, f32, f32)] = &[
        (Maximum, NAN, 1.0, NAN),
        (Maximum, 1.0, NAN, NAN),
        (Maximum, 0.0, -0.0, 0.0),
        (Maximum, -0.0, 0.0, -0.0),
        (Minimum, -8.0, 1.0 / 3.0, -8.0),
        (Minimum, 0.0, -0.0, 0.0),
        (Minimum, 2.0, INF, 2.0),
        (Pow, NAN, 0.0, 1.0),
        (Pow, -8.0, 1.0 / 3.0, NAN),
        (Pow, 2.0, INF, INF),
        (Pow, -2.0, 2.0, 4.0),
    ];
    for &(op, a, b, want) in cases {
        let got = op.eval(a, b);
        assert!(same(got, want), "{op}({a}, {b}) = {got}, PyTorch gives {want}");
    }
}

#[test]
fn names_parse_back() {
    for &op in UnaryOp::ALL {
        assert_eq!(op.name().parse::<UnaryOp>(), Ok(op));
    }
    for &op in BinaryOp::ALL {
        assert_eq!(op.name().parse::<BinaryOp>(), Ok(op));
    }
    assert!("exp".parse::<BinaryOp>().is_err());
}

#[test]
fn logical_ops_read_zero_as_false_and_give_zero_or_one() {
    // Booleans are stored as 0.0/1.0; anything else but 0 counts as true, as `bool(x)`.
    for (x, want) in [(0.0, 1.0), (-0.0, 1.0), (1.0, 0.0), (NAN, 0.0), (-INF, 0.0)] {
        assert_eq!(UnaryOp::Not.eval(x), want, "not({x})");
    }
    for (a, b, and, or) in [
        (0.0, 0.0, 0.0, 0.0),
        (1.0, 0.0, 0.0, 1.0),
        (0.0, 1.0, 0.0, 1.0),
        (1.0, 1.0, 1.0, 1.0),
    ] {
        assert_eq!(BinaryOp::And.eval(a, b), and, "and({a}, {b})");
        assert_eq!(BinaryOp::Or.eval(a, b), or, "or({a}, {b})");
    }
    assert!(UnaryOp::Not.is_logical() && BinaryOp::And.is_logical() && BinaryOp::Or.is_logical());
    assert!(!UnaryOp::Neg.is_logical() && !BinaryOp::Mul.is_logical());
}
