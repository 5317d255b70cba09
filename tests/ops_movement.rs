//! The movement ops of section 7.2 that repeat or regroup elements (`expand`,
//! `repeat_interleave`, `flatten`), on the
//! interpreter and on the native backend (the checked program and the optimized one),
//! against the values and shapes PyTorch 2.15 gives for the same input, NaN and infinity
//! included.

use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind_dims, interpret, Bound, Tensor};

mod common;
use common::program;

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

const SRC: &str = r#"
dim B = 2, N = 3
input x: [B, 1, N]
output wide = x.expand(B, 4, N)
output leading = expand(x, 2, -1, 2, -1)
output repeat_kv = x[:, None].expand(B, 2, 1, N).reshape(2 * B, N)
output then_add = x.expand(B, 2, N) + x.transpose(0, 1).expand(2, 2, N)
output ri_dim = x.repeat_interleave(2, dim=-1)
output ri_flat = x.transpose(0, 2).repeat_interleave(2)
output ri_rows = repeat_interleave(x.squeeze(1), B + 1, 0)
output ri_scalar = x[0, 0, 0].repeat_interleave(2)
output flat = x.transpose(0, 2).flatten()
output flat_mid = x.expand(B, 2, N).flatten(1)
output flat_scalar = flatten(x[1, 0, 2])
"#;

/// `x`, `[2, 1, 3]`.
const X: [f32; 6] = [1.5, NAN, -2.0, INF, 0.25, -INF];

/// The two rows of `x`, as PyTorch repeats them.
const R0: [f32; 3] = [1.5, NAN, -2.0];
const R1: [f32; 3] = [INF, 0.25, -INF];

/// PyTorch's results: shape and values in row-major order.
fn pytorch() -> Vec<(&'static str, Vec<usize>, Vec<f32>)> {
    let rows = |rs: &[[f32; 3]]| rs.concat();
    vec![
        ("wide", vec![2, 4, 3], rows(&[R0, R0, R0, R0, R1, R1, R1, R1])),
        (
            "leading",
            vec![2, 2, 2, 3],
            rows(&[R0, R0, R1, R1, R0, R0, R1, R1]),
        ),
        ("repeat_kv", vec![4, 3], rows(&[R0, R0, R1, R1])),
        (
            "then_add",
            vec![2, 2, 3],
            vec![3.0, NAN, -4.0, INF, NAN, -INF, INF, NAN, -INF, INF, 0.5, -INF],
        ),
        (
            "ri_dim",
            vec![2, 1, 6],
            vec![1.5, 1.5, NAN, NAN, -2.0, -2.0, INF, INF, 0.25, 0.25, -INF, -INF],
        ),
        (
            "ri_flat",
            vec![12],
            vec![1.5, 1.5, INF, INF, NAN, NAN, 0.25, 0.25, -2.0, -2.0, -INF, -INF],
        ),
        ("ri_rows", vec![6, 3], rows(&[R0, R0, R0, R1, R1, R1])),
        ("ri_scalar", vec![2], vec![1.5, 1.5]),
        ("flat", vec![6], vec![1.5, INF, NAN, 0.25, -2.0, -INF]),
        ("flat_mid", vec![2, 6], rows(&[R0, R0, R1, R1])),
        ("flat_scalar", vec![1], vec![-INF]),
    ]
}

/// Equal within the project's tolerance, NaN and infinity in the same places.
fn assert_matches(backend: &str, name: &str, got: &Tensor, shape: &[usize], want: &[f32]) {
    assert_eq!(got.shape, shape, "{backend}: shape of `{name}`");
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    for (i, (&g, &w)) in got.data.iter().zip(want).enumerate() {
        let same = match w.is_finite() {
            true => (g - w).abs() <= 1e-5 * scale + 1e-6,
            false => g.is_nan() && w.is_nan() || g == w,
        };
        assert!(same, "{backend}: {name}[{i}] = {g}, PyTorch gives {w}");
    }
}

#[test]
fn movement_ops_match_pytorch_on_both_backends() {
    let prog = program(SRC, &[]);
    let bound = Bound {
        params: vec![],
        inputs: vec![Tensor::new(vec![2, 1, 3], X.to_vec())],
        dims: bind_dims(&prog).unwrap(),
    };
    let optimized = attnc::opt::optimize(&prog).program;
    let runs = [
        ("interp", interpret(&prog, &bound).unwrap()),
        (
            "jit",
            Executable::compile(&prog, &bound.dims)
                .unwrap()
                .run(&bound, &pool(2).unwrap())
                .unwrap(),
        ),
        (
            "jit optimized",
            Executable::compile(&optimized, &bound.dims)
                .unwrap()
                .run(&bound, &pool(2).unwrap())
                .unwrap(),
        ),
    ];
    for (backend, outputs) in &runs {
        for (name, shape, want) in pytorch() {
            let got = &outputs.iter().find(|(n, _)| n == name).unwrap().1;
            assert_matches(backend, name, got, &shape, &want);
        }
    }
}
