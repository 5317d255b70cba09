//! Sizes as dims (section 7.1): `x.size(d)` and `x.shape[d]` are the symbolic size of an
//! axis (the axis by position or as `dim=`), in dim contexts and as numbers; a `let` made only of them binds a dim, which
//! `check` lists with shape `[]`.

use attnc::driver::check_source;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions};

mod common;

const SRC: &str = r#"
dim B, N
dim D = 8
input x: [B, N, D]
let d_k = x.size(-1)
let n = x.shape[1]
let half = x.shape[-1] // 2
let b = x.size(dim=0)
let m = size(x, dim=1)
output y = x.view(b, m, 2, half) * sqrt(d_k) + x.shape[0] + n - m
"#;

#[test]
fn shape_and_size_are_dims_listed_as_scalars() {
    let checked = check_source(SRC, &[]).unwrap();
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    let prog = &checked.program;
    let shape = |name: &str| {
        let b = prog.bindings.iter().find(|b| b.name == name).unwrap();
        prog.shape_text(&prog.tensor_type(b.value).shape)
    };
    for dim in ["d_k", "n", "half", "b", "m"] {
        assert_eq!(shape(dim), "[]", "`{dim}`");
    }
    assert_eq!(shape("y"), "[B, N, 2, D / 2]");
}

#[test]
fn sizes_are_numbers_on_both_backends() {
    let prog = common::program(SRC, &[("B", 2), ("N", 3)]);
    let bound = bind(&prog, &RunOptions::default()).unwrap();
    let x = &bound.inputs[0];
    let want: Vec<f32> = x.data.iter().map(|v| v * 8f32.sqrt() + 2.0).collect();
    let interp = interpret(&prog, &bound).unwrap();
    let exe = Executable::compile(&prog, &bound.dims).unwrap();
    let jit = exe.run(&bound, &pool(1).unwrap()).unwrap();
    for (backend, outputs) in [("interp", interp), ("jit", jit)] {
        let y = &outputs[0].1;
        assert_eq!(y.shape, [2, 3, 2, 4], "{backend}");
        for (g, w) in y.data.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * w.abs() + 1e-6, "{backend}: {g} vs {w}");
        }
    }
}
