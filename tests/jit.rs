//! Differential tests of the native backend: every example at ordinary and odd shapes, run
//! by the JIT on one and on two threads and by the reference interpreter, must agree within
//! 1e-5 of the largest element (and the two thread counts bit for bit); the PyTorch fixtures
//! must come out right through the JIT.

use attnc::ir::Program;
use attnc::kernel::{PANEL, STRIP};
use attnc::runtime::files::TensorFile;
use attnc::runtime::jit::{pool, Cache, Executable};
use attnc::runtime::{bind, interpret, RunOptions};
use std::path::{Path, PathBuf};

mod common;
use common::{example, program, relative_error};

/// The native code of `program` as checked and as optimized: both paths must agree with
/// the interpreter (`attnc run` takes the optimized one).
fn executables(program: &Program, dims: &[Option<i64>]) -> [(&'static str, Executable); 2] {
    let optimized = attnc::opt::optimize(program).program;
    [
        ("typed", Executable::compile(program, dims).unwrap()),
        ("optimized", Executable::compile(&optimized, dims).unwrap()),
    ]
}

/// Runs `program` with drawn tensors both ways and compares.
fn differential(what: &str, program: &Program, seed: u64) {
    let opts = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let bound = bind(program, &opts).unwrap();
    let want = interpret(program, &bound).unwrap();
    for (path, exe) in executables(program, &bound.dims) {
        let one = exe.run(&bound, &pool(1).unwrap()).unwrap();
        let two = exe.run(&bound, &pool(2).unwrap()).unwrap();
        assert_eq!(want.len(), one.len(), "{what} ({path}): outputs");
        for (((name, w), (_, a)), (_, b)) in want.iter().zip(&one).zip(&two) {
            let error = relative_error(a, w);
            assert!(error < 1e-5, "{what} ({path}): `{name}` off by {error}");
            assert_eq!(
                a.data, b.data,
                "{what} ({path}): `{name}` differs between 1 and 2 threads"
            );
        }
    }
}

const SHAPES: &[&[(&str, i64)]] = &[
    &[("B", 1), ("N", 1), ("M", 1), ("D", 12), ("H", 3)],
    &[("B", 3), ("N", 7), ("M", 5), ("D", 12), ("H", 3)],
    &[("B", 2), ("N", 33), ("M", 33), ("D", 20), ("H", 4)],
    &[("B", 1), ("N", 7), ("M", 9), ("D", 16), ("H", 4)],
    &[("B", 3), ("N", 1), ("M", 33), ("D", 36), ("H", 3)],
];

#[test]
fn every_example_agrees_with_the_interpreter_at_odd_shapes() {
    for name in [
        "mha.attn",
        "mha_heads.attn",
        "self_attention.attn",
        "causal.attn",
        "encoder_layer.attn",
        "causal_from_positions.attn",
        "sliding_window.attn",
        "alibi.attn",
        "softcap.attn",
    ] {
        let src = example(name);
        for (i, dims) in SHAPES.iter().enumerate() {
            differential(&format!("{name} {dims:?}"), &program(&src, dims), i as u64);
        }
    }
}

#[test]
fn long_sequences_use_several_row_and_key_blocks() {
    let dims = [("B", 1), ("N", 300), ("M", 270), ("D", 8), ("H", 2)];
    for name in ["mha.attn", "self_attention.attn"] {
        differential(name, &program(&example(name), &dims), 7);
    }
    let dims = [("B", 2), ("N", 200), ("D", 64), ("H", 2)];
    differential(
        "tiled projections",
        &program(&example("self_attention.attn"), &dims),
        8,
    );
}

#[test]
fn a_grouped_query_decode_step_agrees_at_odd_shapes() {
    // One query row: the query heads of a key head fold into the rows of one task.
    for dims in [
        [("B", 1), ("M", 1), ("D", 12), ("H", 3), ("Hkv", 1)],
        [("B", 2), ("M", 33), ("D", 32), ("H", 8), ("Hkv", 2)],
        [("B", 3), ("M", 300), ("D", 16), ("H", 4), ("Hkv", 4)],
    ] {
        differential(
            &format!("gqa_decode {dims:?}"),
            &program(&example("gqa_decode.attn"), &dims),
            5,
        );
    }
}

#[test]
fn elementwise_broadcasts_scalars_and_views_run_natively() {
    let src = "\
dim B, N
dim D = 6
input x: [B, N, D]
input y: [N, 1]
param w: [D]
let a = exp(-x) * 2.0 + sqrt(D) - x / y
let m = a.masked_fill(x > 0.5, 3.0)
let t = m.transpose(0, 2).contiguous()
let r = t.reshape(D, -1)
let s = (x @ x.transpose(1, 2)).softmax(1)
output t = t
output r = r[1:4]
output s = s
output v = x @ w
output c = sqrt(D)
let y = x @ x.transpose(1, 2)
let yt = y.reshape(B, N, N).transpose(0, 1).contiguous()
output yt = yt
output z = y + 1.0
";
    for dims in [[("B", 2), ("N", 3)], [("B", 1), ("N", 1)], [("B", 3), ("N", 5)]] {
        differential(&format!("{dims:?}"), &program(src, &dims), 3);
    }
}

#[test]
fn products_read_their_weights_packed_in_panels_or_strips_and_agree_at_odd_shapes() {
    // 70 and 37 columns: whole panels of 16 and a narrower last one, a narrower strip of
    // 64; odd inner dims; `D` = 300 is a longer `k`, 600 longer than a strip product's chunk
    // of steps; a bias and ReLU, a residual (which products of strips apply themselves). A
    // weight read transposed is packed straight from the param.
    let src = |d: usize| {
        format!(
            "\
dim B, N
dim D = {d}, F = 70
input x: [B, N, D]
param w: [F, D]
param bias: [F]
param v: [F, D]
let h = linear(x, w, bias).relu()
output y = h @ v + x
"
        )
    };
    for (d, b, n, width) in [
        (37, 1, 1, PANEL),
        (37, 1, 5, PANEL),
        (37, 2, 8, PANEL),
        (37, 1, 17, PANEL),
        (37, 1, 33, STRIP),
        (37, 3, 11, STRIP),
        (300, 1, 3, PANEL),
        (600, 2, 20, STRIP),
    ] {
        let prog = program(&src(d), &[("B", b), ("N", n)]);
        differential(&format!("D {d}, B {b}, N {n}"), &prog, 11);
        let dims = bind(&prog, &RunOptions::default()).unwrap().dims;
        let exe = Executable::compile(&prog, &dims).unwrap();
        let plan = exe.plan();
        let widths: Vec<Option<usize>> = plan
            .kernels
            .iter()
            .filter_map(|k| match &k.op {
                attnc::kernel::KernelOp::Gemm(g) => Some(g.packed),
                _ => None,
            })
            .collect();
        let rows = b * n;
        assert_eq!(
            widths,
            [Some(width); 2],
            "D {d}, B {b}, N {n}: products of {rows} rows"
        );
        // Packed, `w` is copied from the param into panels: no `[in, out]` copy on the way.
        let layouts = plan
            .prologue
            .iter()
            .filter(|k| k.label.contains("weight layout"))
            .count();
        assert_eq!(layouts, 0, "D {d}, B {b}, N {n}: weight layout copies");
    }
}

#[test]
fn copies_run_on_the_host_without_code() {
    // The seed module's prologue scales the query's weight and bias by the attention's
    // scale and concatenates the Q/K/V weights, and at 1024 query rows (8 blocks: more than
    // read the keys in place) its main kernels lay `k` out as `kᵀ`: copies, scaled or not,
    // run by the executor, which every test above checks for their values. The prologue
    // compiles nothing.
    let prog = attnc::opt::optimize(&program(
        &example("self_attention.attn"),
        &[("B", 1), ("N", 1024)],
    ))
    .program;
    let dims = bind(&prog, &RunOptions::default()).unwrap().dims;
    let exe = Executable::compile(&prog, &dims).unwrap();
    let plan = exe.plan();
    let labels: Vec<&str> = plan
        .prologue
        .iter()
        .chain(&plan.kernels)
        .map(|k| k.label.as_str())
        .collect();
    let scaled =
        |k: &attnc::kernel::Kernel| matches!(&k.op, attnc::kernel::KernelOp::Map(m) if m.scale().is_some());
    assert!(plan.prologue.iter().any(scaled), "{labels:?}");
    assert!(
        plan.prologue.iter().all(|k| attnc::codegen::on_host(&k.op)),
        "{labels:?}"
    );
    assert!(
        plan.kernels.iter().any(|k| attnc::codegen::on_host(&k.op)),
        "{labels:?}"
    );
    let coded = plan.kernels.iter().filter(|k| !attnc::codegen::on_host(&k.op));
    let keys: std::collections::HashSet<String> = coded.map(|k| format!("{:?}", k.op.code_key())).collect();
    assert_eq!(exe.functions(), keys.len(), "{labels:?}");
}

#[test]
fn keys_are_laid_out_as_kt_only_for_many_query_blocks() {
    // `k` is a slice of the fused projection: up to 4 blocks of query rows a head the
    // attention reads it in place, beyond them after one layout copy. Blocks are 128 rows
    // without a mask of positions while at least 16 tasks remain, else 64.
    let cases = [
        ("self_attention.attn", 1, 128, 64, 0),
        ("self_attention.attn", 2, 16, 16, 0),
        ("self_attention.attn", 2, 512, 128, 0),
        ("self_attention.attn", 2, 513, 128, 1),
        ("causal_from_positions.attn", 1, 256, 64, 0),
        ("causal_from_positions.attn", 1, 257, 64, 1),
    ];
    for (file, b, n, rows, copies) in cases {
        let prog = attnc::opt::optimize(&program(&example(file), &[("B", b), ("N", n)])).program;
        let dims = bind(&prog, &RunOptions::default()).unwrap().dims;
        let exe = Executable::compile(&prog, &dims).unwrap();
        let kernels = &exe.plan().kernels;
        let layouts = kernels.iter().filter(|k| k.label.contains("kT layout")).count();
        let blocks: Vec<usize> = kernels
            .iter()
            .filter_map(|k| match &k.op {
                attnc::kernel::KernelOp::Attention(a) => Some(a.block.0),
                _ => None,
            })
            .collect();
        assert_eq!((layouts, blocks), (copies, vec![rows]), "{file} B {b} N {n}");
    }
}

/// Runs `program` both ways on drawn tensors whose input `mask` is set by `keep(b, i, j)`.
fn differential_masked(what: &str, program: &Program, keep: impl Fn(usize, usize, usize) -> bool) {
    let mut bound = bind(program, &RunOptions::default()).unwrap();
    let i = program.inputs.iter().position(|d| d.name == "mask").unwrap();
    let mask = &mut bound.inputs[i];
    let (n, m) = (mask.shape[1], mask.shape[2]);
    for (flat, x) in mask.data.iter_mut().enumerate() {
        let (b, i, j) = (flat / (n * m), flat / m % n, flat % m);
        *x = f32::from(u8::from(keep(b, i, j)));
    }
    let want = interpret(program, &bound).unwrap();
    for (path, exe) in executables(program, &bound.dims) {
        let got = exe.run(&bound, &pool(2).unwrap()).unwrap();
        for ((name, w), (_, g)) in want.iter().zip(&got) {
            let error = relative_error(g, w);
            assert!(error < 1e-5, "{what} ({path}): `{name}` off by {error}");
        }
    }
}

#[test]
fn masks_fill_and_fully_masked_rows_come_out_uniform() {
    // causal.attn without the probabilities as an output: the flash-style kernel.
    let src = example("causal.attn").replace("output attn = p", "");
    // Causal, with row 3 of batch 0 fully masked; 300 keys are two key blocks.
    let keep = |b: usize, i: usize, j: usize| j <= i && !(b == 0 && i == 3);
    for (n, d, h) in [(9, 12, 3), (300, 8, 2)] {
        let dims = [("B", 2), ("N", n), ("D", d), ("H", h)];
        differential_masked(&format!("flash N={n}"), &program(&src, &dims), keep);
        // And the softmax kernel, where the probabilities are an output.
        differential_masked(
            &format!("softmax N={n}"),
            &program(&example("causal.attn"), &dims),
            keep,
        );
    }
}

#[test]
fn a_cache_compiles_each_shape_once() {
    let p = program(&example("self_attention.attn"), &[("D", 16), ("H", 4)]);
    let mut cache = Cache::new(&p);
    let dims = |n: i64| {
        let mut d: Vec<Option<i64>> = vec![None; p.dims.len()];
        for (s, info) in p.dims.iter() {
            d[s] = match info.name.as_str() {
                "B" => Some(1),
                "N" => Some(n),
                "D" => Some(16),
                "H" => Some(4),
                "Dk" => Some(4),
                _ => None,
            };
        }
        d
    };
    let a = cache.get(&dims(3)).unwrap();
    let b = cache.get(&dims(3)).unwrap();
    cache.get(&dims(4)).unwrap();
    assert!(std::rc::Rc::ptr_eq(&a, &b));
    assert_eq!(cache.len(), 2);
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The fixture's module without a mask.
const NO_MASK: &str = "\
dim B, N
dim D = 12, H = 3
dim Dk = D / H
param Wq: [D, D] = \"linears.0.weight\"
param bq: [D]    = \"linears.0.bias\"
param Wk: [D, D] = \"linears.1.weight\"
param bk: [D]    = \"linears.1.bias\"
param Wv: [D, D] = \"linears.2.weight\"
param bv: [D]    = \"linears.2.bias\"
param Wo: [D, D] = \"linears.3.weight\"
param bo: [D]    = \"linears.3.bias\"
input query: [B, N, D]
input key:   [B, N, D]
input value: [B, N, D]
let q = linear(query, Wq, bq).view(B, -1, H, Dk).transpose(1, 2)
let k = linear(key,   Wk, bk).view(B, -1, H, Dk).transpose(1, 2)
let v = linear(value, Wv, bv).view(B, -1, H, Dk).transpose(1, 2)
let attn = (q @ k.transpose(-2, -1) / sqrt(Dk)).softmax(-1)
let x = (attn @ v).transpose(1, 2).contiguous().view(B, -1, H * Dk)
output out  = linear(x, Wo, bo)
output attn = attn
";

fn check_fixture(program: &Program, name: &str) {
    let opts = RunOptions {
        weights: Some(fixture(&format!("weights_{name}.safetensors"))),
        inputs: Some(fixture(&format!("inputs_{name}.safetensors"))),
        ..RunOptions::default()
    };
    let bound = bind(program, &opts).unwrap();
    let expected = TensorFile::open(&fixture(&format!("expected_{name}.safetensors"))).unwrap();
    for (path, exe) in executables(program, &bound.dims) {
        for (out, got) in exe.run(&bound, &pool(2).unwrap()).unwrap() {
            let want = expected.get(&out).unwrap().tensor.unwrap();
            let error = relative_error(&got, &want);
            assert!(error < 1e-5, "{name} ({path}): `{out}` off by {error}");
        }
    }
}

#[test]
fn the_jit_reproduces_the_pytorch_fixtures() {
    let mha = example("mha.attn");
    check_fixture(&program(&mha, &[("D", 16), ("H", 4)]), "pad_b2_n7_d16_h4");
    check_fixture(&program(&example("causal.attn"), &[]), "causal_b3_n9_d32_h8");
    check_fixture(&program(NO_MASK, &[]), "nomask_b1_n5_d12_h3");
    let heads = example("mha_heads.attn");
    check_fixture(&program(&heads, &[("D", 16), ("H", 4)]), "pad_b2_n7_d16_h4");
}

/// The new elementwise primitives, reductions over any one axis, and what decomposes into
/// them, against the interpreter.
#[test]
fn reductions_norms_and_activations_run_natively() {
    let src = r#"
        dim B, N
        dim D = 6
        input x: [B, N, D]
        param w: [D]
        param b: [D]
        output a = gelu(x) + gelu(x, approximate="tanh") + silu(x) + relu(x).sigmoid()
        output s = x.sum(1, keepdim=True) + x.amax(1, keepdim=True) - x.amin(dim=1, keepdim=True)
        output m = x.mean(-1) * x.var(-1) + x.std(-1).sum()
        output l = log_softmax(x, dim=1) + layer_norm(x, [D], w, b) + rms_norm(x, [D], w)
        output e = abs(x).log() + tanh(x) * erf(x) + sin(x) - cos(x) + rsqrt(abs(x) + 1.0)
        output p = pow(abs(x), 1.5) + maximum(x, x.transpose(1, 2).transpose(1, 2) * 0.5) + clamp(x, -0.5, 0.5)
        output z = zeros(N, D) + ones([N, D]) + full([D], 2.0)
    "#;
    for (i, dims) in SHAPES.iter().enumerate() {
        differential(&format!("ops {dims:?}"), &program(src, dims), i as u64);
    }
}

/// Indexing as PyTorch writes it: `None`, `...`, open and negative bounds.
#[test]
fn pytorch_indexing_runs_natively() {
    let src = r#"
        dim B, N
        dim D = 8
        input x: [B, N, D]
        input m: [B, N]
        output a = m[:, None, None, :] * 2.0
        output b = cat([-x[..., D / 2 :], x[..., : D / 2]], dim=-1)
        output c = x[:, -1] + x[:, 0]
        output d = x[:, 1:] - x[:, :-1]
        output e = x * m[..., None]
    "#;
    for (i, dims) in SHAPES.iter().enumerate().filter(|(_, d)| d.contains(&("N", 7))) {
        differential(&format!("indexing {dims:?}"), &program(src, dims), i as u64);
    }
}

/// `tril` and `triu` select by position (a map reading its element's index): non-square,
/// batched, read through a transpose, with diagonals on both sides, as masks too.
#[test]
fn triangles_run_natively() {
    let src = r#"
        dim B, N
        dim D = 8
        input x: [B, N, D]
        output a = x.tril()
        output b = x.transpose(1, 2).triu(diagonal=1)
        output c = x.tril(-2) + x.triu(3)
        output d = where(ones(N, N).tril() == 1, x @ x.transpose(-2, -1), -inf).softmax(-1)
    "#;
    for (i, dims) in SHAPES.iter().enumerate() {
        differential(&format!("triangles {dims:?}"), &program(src, dims), i as u64);
    }
}
