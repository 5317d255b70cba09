//! Masks written from positions (section 7.2's `arange` and booleans): exact values on the
//! reference interpreter and on the native backend (as checked and as optimized), and what
//! `-o` writes for a boolean output.

use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions, Tensor};

mod common;
use common::{attnc, program, scratch, stdout};

/// Every output of `src` at `dims` (drawn inputs, seed 0) on the interpreter, then on the
/// native backend for the typed and the optimized program.
fn run_everywhere(src: &str, dims: &[(&str, i64)]) -> Vec<(&'static str, Vec<(String, Tensor)>)> {
    let prog = program(src, dims);
    let bound = bind(&prog, &RunOptions::default()).unwrap();
    let optimized = attnc::opt::optimize(&prog).program;
    let threads = pool(2).unwrap();
    let native = |p| {
        Executable::compile(p, &bound.dims)
            .unwrap()
            .run(&bound, &threads)
            .unwrap()
    };
    vec![
        ("interp", interpret(&prog, &bound).unwrap()),
        ("jit typed", native(&prog)),
        ("jit optimized", native(&optimized)),
    ]
}

/// Asserts that output `name` is exactly `want` on every backend.
fn assert_exact(src: &str, dims: &[(&str, i64)], name: &str, want: &[f32]) {
    for (backend, outputs) in run_everywhere(src, dims) {
        let got = &outputs.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(got.data, want, "`{name}` on {backend}");
    }
}

#[test]
fn arange_counts_from_start_by_step() {
    let src = "
dim N
dim H = 4
output a = arange(N)
output b = arange(-2, 2 * H - 2, 2)
output c = arange(1, N + 1, step=1) * 0.5
";
    let dims = [("N", 5)];
    assert_exact(src, &dims, "a", &[0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_exact(src, &dims, "b", &[-2.0, 0.0, 2.0, 4.0]);
    assert_exact(src, &dims, "c", &[0.5, 1.0, 1.5, 2.0, 2.5]);
}

#[test]
fn positions_broadcast_into_a_relative_distance() {
    let src = "
dim N, M
output d = arange(M)[None, :] - arange(N)[:, None]
";
    #[rustfmt::skip]
    let want = [
        0.0, 1.0, 2.0, 3.0,
        -1.0, 0.0, 1.0, 2.0,
        -2.0, -1.0, 0.0, 1.0,
    ];
    assert_exact(src, &[("N", 3), ("M", 4)], "d", &want);
}

const WINDOW: &str = "
dim N
dim W = 2
let i = arange(N)[:, None]
let j = arange(N)[None, :]
output keep = (j <= i) & ~(i - j >= W)
output either = (j > i) | (i - j >= W)
output same = where(j <= i, j <= i, i == j)
output mixed = where(j <= i, 1.0, j > i)
output counted = (j <= i) * 2.0 + 1.0
";

#[test]
fn booleans_combine_into_a_sliding_window() {
    let dims = [("N", 4)];
    #[rustfmt::skip]
    let keep = [
        1.0, 0.0, 0.0, 0.0,
        1.0, 1.0, 0.0, 0.0,
        0.0, 1.0, 1.0, 0.0,
        0.0, 0.0, 1.0, 1.0,
    ];
    let either: Vec<f32> = keep.iter().map(|k| 1.0 - k).collect();
    assert_exact(WINDOW, &dims, "keep", &keep);
    assert_exact(WINDOW, &dims, "either", &either);
    // `where` of two booleans is a boolean; of a float and a boolean, a float of 0.0/1.0.
    #[rustfmt::skip]
    let lower = [
        1.0, 0.0, 0.0, 0.0,
        1.0, 1.0, 0.0, 0.0,
        1.0, 1.0, 1.0, 0.0,
        1.0, 1.0, 1.0, 1.0,
    ];
    assert_exact(WINDOW, &dims, "same", &lower);
    assert_exact(WINDOW, &dims, "mixed", &[1.0; 16]);
    let counted: Vec<f32> = lower.iter().map(|k| 2.0 * k + 1.0).collect();
    assert_exact(WINDOW, &dims, "counted", &counted);
}

#[test]
fn where_of_two_booleans_is_boolean_and_of_a_float_is_float() {
    let prog = program(WINDOW, &[]);
    let dtype = |name: &str| {
        let out = prog.outputs.iter().find(|o| o.name == name).unwrap();
        prog.tensor_type(out.value).dtype
    };
    assert_eq!(dtype("same"), attnc::ir::DType::Bool);
    assert_eq!(dtype("mixed"), attnc::ir::DType::F32);
    assert_eq!(dtype("counted"), attnc::ir::DType::F32);
}

#[test]
fn a_boolean_output_is_written_as_zeros_and_ones_and_its_checksum_counts_true() {
    let temp = scratch("positions");
    let dir = temp.path();
    let (src, out) = (dir.join("window.attn"), dir.join("out.safetensors"));
    std::fs::write(&src, WINDOW).unwrap();
    for backend in ["interp", "jit"] {
        let o = attnc(&[
            "run",
            src.to_str().unwrap(),
            "--dim",
            "N=4",
            "--backend",
            backend,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{backend}");
        let line = stdout(&o)
            .lines()
            .find(|l| l.starts_with("keep"))
            .unwrap()
            .to_string();
        assert!(line.ends_with("checksum 7.000000"), "{backend}: {line}");
        let file = attnc::runtime::files::TensorFile::open(&out).unwrap();
        let keep = file.get("keep").and_then(|e| e.tensor).unwrap();
        assert_eq!(keep.data.iter().filter(|&&v| v == 1.0).count(), 7, "{backend}");
        assert!(keep.data.iter().all(|&v| v == 0.0 || v == 1.0), "{backend}");
    }
}

/// The three meanings of a row whose every key is removed (here query 0, by `i == 0`), as
/// PyTorch gives them: `masked_fill` with `-1e9` then `softmax` is uniform, with `-inf` it
/// is NaN, and `scaled_dot_product_attention` gives 0.
const FULLY_MASKED: &str = "
dim N
dim E = 4
input s: [N, N]
input q: [N, E]
input k: [N, E]
input v: [N, E]
let i = arange(N)[:, None]
let j = arange(N)[None, :]
let removed = (j > i) | (i == 0)
output finite = s.masked_fill(removed, -1e9).softmax(dim=-1)
output infinite = s.masked_fill(removed, -inf).softmax(dim=-1)
output sdpa = scaled_dot_product_attention(q, k, v, attn_mask=~removed)
";

#[test]
fn a_row_without_keys_keeps_each_forms_pytorch_meaning() {
    let n = 5;
    for (backend, outputs) in run_everywhere(FULLY_MASKED, &[("N", n)]) {
        let out = |name: &str| outputs.iter().find(|(o, _)| o == name).unwrap().1.data.clone();
        let (finite, infinite, sdpa) = (out("finite"), out("infinite"), out("sdpa"));
        let uniform = 1.0 / n as f32;
        assert!(
            finite[..5].iter().all(|&p| (p - uniform).abs() < 1e-6),
            "{backend}: {finite:?}"
        );
        assert!(
            infinite[..5].iter().all(|p| p.is_nan()),
            "{backend}: {infinite:?}"
        );
        assert!(sdpa[..4].iter().all(|&x| x == 0.0), "{backend}: {sdpa:?}");
        // The other rows are ordinary: row 1 keeps keys 0 and 1.
        assert!((finite[5] + finite[6] - 1.0).abs() < 1e-6, "{backend}");
        assert_eq!(&finite[7..10], &[0.0; 3], "{backend}");
        assert!(sdpa[4..].iter().all(|x| x.is_finite()), "{backend}");
    }
}
