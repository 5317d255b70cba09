//! The activations, reductions and norms of section 7.2 against values PyTorch 2.15 gives
//! for the same input (float32, CPU), written with the digits it prints.
#![allow(clippy::excessive_precision)]

use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind_dims, interpret, Bound, Tensor};

mod common;
use common::program;

const SRC: &str = r#"
dim N = 8
input x: [N]
output gelu = gelu(x)
output gelu_tanh = x.gelu(approximate="tanh")
output silu = x.silu()
output log_softmax = x.log_softmax(dim=0)
output rms_norm = rms_norm(x, [N])
output var = x.var(0, unbiased=False)
output std = x.std(0)
"#;

const X: [f32; 8] = [-100.0, -3.0, -0.5, 0.0, 1.0, 2.5, 19.0, 7.0];

#[rustfmt::skip]
const PYTORCH: &[(&str, &[f32])] = &[
    ("gelu",        &[-0.0, -0.004050225, -0.15426877, 0.0, 0.84134471, 2.4844759, 19.0, 7.0]),
    ("gelu_tanh",   &[-0.0, -0.0036374331, -0.154286, 0.0, 0.84119201, 2.4849157, 19.0, 7.0]),
    ("silu",        &[-0.0, -0.14227761, -0.18877034, 0.0, 0.7310586, 2.3103545, 19.0, 6.9936228]),
    ("log_softmax", &[-119.00001, -22.000006, -19.500006, -19.000006, -18.000006, -16.500006, -6.3180723e-06, -12.000007]),
    ("rms_norm",    &[-2.769974, -0.083099224, -0.01384987, 0.0, 0.027699741, 0.069249354, 0.52629507, 0.19389819]),
    ("var",         &[1217.75]),
    ("std",         &[37.305687]),
];

#[test]
fn activations_reductions_and_norms_match_pytorch() {
    let prog = program(SRC, &[]);
    let bound = Bound {
        params: vec![],
        inputs: vec![Tensor::new(vec![8], X.to_vec())],
        dims: bind_dims(&prog).unwrap(),
    };
    let outputs = interpret(&prog, &bound).unwrap();
    for (name, want) in PYTORCH {
        let got = &outputs.iter().find(|(n, _)| n == name).unwrap().1;
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (&g, &w)) in got.data.iter().zip(want.iter()).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * scale + 1e-6,
                "{name}[{i}] = {g}, PyTorch gives {w}"
            );
        }
    }
}

/// GELU where float32 ends, on both backends, as PyTorch's vectorized CPU kernel gives it
/// (a tensor of 9: the first 8 take the vector path): the erf form is NaN at both
/// infinities and overflows above `f32::MAX / 2`; the tanh form keeps `+inf` and
/// `f32::MAX`; large negative arguments give -0.0.
#[test]
fn gelu_at_the_ends_of_float32_matches_pytorch_on_both_backends() {
    const SRC: &str =
        "dim N = 9\ninput x: [N]\noutput g = gelu(x)\noutput t = gelu(x, approximate=\"tanh\")\n";
    const INF: f32 = f32::INFINITY;
    const NAN: f32 = f32::NAN;
    let x = vec![INF, -INF, NAN, 1e30, -1e30, 3.4e38, -3.4e38, 10.0, -10.0];
    let pytorch: [(&str, [f32; 9]); 2] = [
        ("g", [NAN, NAN, NAN, 1e30, -0.0, INF, -0.0, 10.0, -0.0]),
        ("t", [INF, NAN, NAN, 1e30, -0.0, 3.4e38, -0.0, 10.0, -0.0]),
    ];
    let prog = program(SRC, &[]);
    let bound = Bound {
        params: vec![],
        inputs: vec![Tensor::new(vec![9], x)],
        dims: bind_dims(&prog).unwrap(),
    };
    let jit = Executable::compile(&prog, &bound.dims)
        .unwrap()
        .run(&bound, &pool(1).unwrap())
        .unwrap();
    for (backend, outputs) in [("interp", interpret(&prog, &bound).unwrap()), ("jit", jit)] {
        for (name, want) in &pytorch {
            let got = &outputs.iter().find(|(n, _)| n == name).unwrap().1;
            for (i, (&g, &w)) in got.data.iter().zip(want).enumerate() {
                let same =
                    (g.is_nan() && w.is_nan()) || (g == w && g.is_sign_negative() == w.is_sign_negative());
                assert!(same, "{backend}: {name}[{i}] = {g:e}, PyTorch gives {w:e}");
            }
        }
    }
}
