//! `scaled_dot_product_attention` against PyTorch's (`tests/fixtures/sdpa`, made by
//! `make/make_sdpa.py`): plain, causal, boolean and float masks (one row fully removed by
//! each), an explicit scale, grouped-query heads with and without a mask, on the
//! interpreter and the native backend (as checked and as optimized).

use attnc::runtime::files::TensorFile;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions};
use std::path::{Path, PathBuf};

mod common;
use common::{assert_close, program};

const SRC: &str = "
dim B, L, S
dim H = 4, Hkv = 2, E = 8
input q: [B, H, L, E]
input k: [B, H, S, E]
input v: [B, H, S, E]
input kg: [B, Hkv, S, E]
input vg: [B, Hkv, S, E]
input bm: [L, S]
input fm: [B, 1, L, S]
output plain = scaled_dot_product_attention(q, k, v)
output causal = scaled_dot_product_attention(q, k, v, is_causal=True)
output boolmask = scaled_dot_product_attention(q, k, v, attn_mask=bm > 0.5)
output floatmask = scaled_dot_product_attention(q, k, v, attn_mask=fm, scale=0.3)
output gqa = scaled_dot_product_attention(q, kg, vg, enable_gqa=True, is_causal=True)
output gqamask = scaled_dot_product_attention(q, kg, vg, bm > 0.5, enable_gqa=True)
";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sdpa")
        .join(name)
}

/// The plan's first attention kernel.
fn first_attention(plan: &attnc::kernel::Plan) -> attnc::kernel::Attention {
    plan.kernels
        .iter()
        .find_map(|k| match &k.op {
            attnc::kernel::KernelOp::Attention(a) => Some(a.as_ref().clone()),
            _ => None,
        })
        .expect("an attention kernel")
}

#[test]
fn sdpa_matches_pytorch_on_both_backends() {
    let prog = program(SRC, &[]);
    let opts = RunOptions {
        inputs: Some(fixture("inputs.safetensors")),
        ..RunOptions::default()
    };
    let bound = bind(&prog, &opts).unwrap();
    let optimized = attnc::opt::optimize(&prog).program;
    let threads = pool(2).unwrap();
    let native = |p| {
        Executable::compile(p, &bound.dims)
            .unwrap()
            .run(&bound, &threads)
            .unwrap()
    };
    let expected = TensorFile::open(&fixture("expected.safetensors")).unwrap();
    for (backend, outputs) in [
        ("interp", interpret(&prog, &bound).unwrap()),
        ("jit typed", native(&prog)),
        ("jit optimized", native(&optimized)),
    ] {
        assert_eq!(outputs.len(), 6);
        for (name, got) in &outputs {
            let want = expected.get(name).and_then(|e| e.tensor).unwrap();
            assert_close(&format!("{name} on {backend}"), got, &want);
        }
    }
}

/// A fully removed row gives 0, where `softmax` alone would give NaN.
#[test]
fn a_row_without_keys_is_zero() {
    let prog = program(SRC, &[]);
    let bound = bind(
        &prog,
        &RunOptions {
            inputs: Some(fixture("inputs.safetensors")),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let outputs = interpret(&prog, &bound).unwrap();
    let boolmask = &outputs.iter().find(|(n, _)| n == "boolmask").unwrap().1;
    // [B, H, L, E] with L = 5, E = 8: row 2 of every (batch, head).
    for bh in 0..8 {
        let row = &boolmask.data[(bh * 5 + 2) * 8..(bh * 5 + 3) * 8];
        assert!(row.iter().all(|&x| x == 0.0), "head {bh}: {row:?}");
    }
}

/// Natively, each `scaled_dot_product_attention` is one flash-style attention kernel: the
/// causal mask as positions whose tiles above the diagonal are skipped, grouped-query
/// heads read in place, and a row without keys 0; no softmax or score buffer of its own.
#[test]
fn each_sdpa_is_one_attention_kernel() {
    let prog = program(SRC, &[]);
    let opts = RunOptions {
        inputs: Some(fixture("inputs.safetensors")),
        ..RunOptions::default()
    };
    let bound = bind(&prog, &opts).unwrap();
    let optimized = attnc::opt::optimize(&prog).program;
    let exe = Executable::compile(&optimized, &bound.dims).unwrap();
    let attention: Vec<&attnc::kernel::Attention> = exe
        .plan()
        .kernels
        .iter()
        .filter_map(|k| match &k.op {
            attnc::kernel::KernelOp::Attention(a) => Some(&**a),
            _ => None,
        })
        .collect();
    assert_eq!(attention.len(), 6, "{}", exe.plan().to_text());
    assert!(attention.iter().all(|a| a.zero_empty_rows));
    let kinds: Vec<&str> = exe.plan().kernels.iter().map(|k| k.op.kind()).collect();
    assert!(
        !kinds.contains(&"softmax") && !kinds.contains(&"row"),
        "{kinds:?}"
    );
    // `gqa` (causal) and `gqamask`: two query heads per key head, causal on the first.
    let grouped: Vec<_> = attention.iter().filter(|a| a.kv_group == 2).collect();
    assert_eq!(grouped.len(), 2);
    assert_eq!(attention.iter().filter(|a| a.positions.is_some()).count(), 2);
}

#[test]
fn a_causal_sdpa_skips_the_tiles_above_the_diagonal() {
    let src = "
dim N
dim H = 2, E = 8
input q: [H, N, E]
output o = scaled_dot_product_attention(q, q, q, is_causal=True)
";
    let prog = program(src, &[]);
    let exe = Executable::compile(&prog, &[Some(512), Some(2), Some(8)]).unwrap();
    let a = first_attention(exe.plan());
    assert!(a.skips_tiles());
    let t = a.tile_counts().unwrap();
    assert!(t.skipped > 0 && t.skipped >= t.kept, "{t:?}");
}

/// Without any key (`S = 0`), every row is 0, as PyTorch gives it, on both backends.
#[test]
fn no_keys_at_all_give_zeros() {
    let src = "
dim N = 3, M = 1
dim H = 2, E = 4
input q: [H, N, E]
input k: [H, M, E]
output o = scaled_dot_product_attention(q, k[:, :M - 1], k[:, :M - 1])
";
    let prog = program(src, &[]);
    let bound = bind(&prog, &RunOptions::default()).unwrap();
    let want = interpret(&prog, &bound).unwrap();
    let exe = Executable::compile(&prog, &bound.dims).unwrap();
    let got = exe.run(&bound, &pool(1).unwrap()).unwrap();
    for outputs in [want, got] {
        assert_eq!(outputs[0].1.data, vec![0.0; 24]);
    }
}

/// A decode step (`examples/gqa_decode.attn`): the keys and values `cat([cache, new],
/// dim=2)` are read as two segments, so no kernel copies the cache; the grouped query
/// heads fold into the rows of one task.
#[test]
fn a_decode_step_reads_the_cache_and_the_new_key_in_place() {
    let src = common::example("gqa_decode.attn");
    let sizes = [("B", 1), ("M", 11), ("D", 32), ("H", 8), ("Hkv", 2)];
    let prog = program(&src, &sizes);
    let dims = attnc::runtime::bind_dims(&prog).unwrap();
    for p in [prog.clone(), attnc::opt::optimize(&prog).program] {
        let exe = Executable::compile(&p, &dims).unwrap();
        let plan = exe.plan();
        assert!(
            plan.kernels.iter().all(|k| !k.label.contains("cat")),
            "{}",
            plan.to_text()
        );
        let a = first_attention(plan);
        assert_eq!((a.m, a.tail.as_ref().map(|t| t.len)), (12, Some(1)));
        assert_eq!(
            (a.n, a.kv_group),
            (4, 1),
            "the 4 query heads of a key head as rows"
        );
    }
}
