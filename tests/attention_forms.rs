//! Attention as today's models write it becomes ONE fused attention kernel: each form is
//! optimized and lowered, its plan must hold a single attention kernel (no softmax kernel, no
//! kernel that stores the scores) with the mask of positions, score change or cache tail
//! the form calls for, and the JIT must agree with the interpreter on it (both the typed and
//! the optimized program), at sizes that cut the keys into several tiles and a ragged last
//! one.

use attnc::ir::Program;
use attnc::kernel::{Attention, KernelOp, Plan};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions, Tensor};

mod common;
use common::{assert_close, program};

/// The plan of the optimized program at `dims`.
fn plan(program: &Program, dims: &[Option<i64>]) -> Plan {
    let optimized = attnc::opt::optimize(program).program;
    Executable::compile(&optimized, dims).unwrap().plan().clone()
}

/// The one attention kernel of the plan; fails if the plan has another, a softmax kernel,
/// or any kernel that writes a tensor of scores (`[.., n, m]`).
fn one_attention(plan: &Plan) -> Attention {
    let attention: Vec<&Attention> = plan
        .kernels
        .iter()
        .filter_map(|k| match &k.op {
            KernelOp::Attention(a) => Some(a.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(attention.len(), 1, "{}", plan.to_text());
    let a = attention[0];
    for k in &plan.kernels {
        assert!(!matches!(k.op, KernelOp::Softmax(_)), "{}", plan.to_text());
        let stores_scores = k.op.operands().iter().any(|o| o.2 && o.1.ends_with(&[a.n, a.m]));
        assert!(
            !stores_scores,
            "`{}` stores the scores\n{}",
            k.label,
            plan.to_text()
        );
    }
    a.clone()
}

/// The JIT on the typed and the optimized program against the interpreter.
fn agrees(what: &str, program: &Program) -> Vec<(String, Tensor)> {
    let opts = RunOptions {
        seed: 5,
        ..RunOptions::default()
    };
    let bound = bind(program, &opts).unwrap();
    let want = interpret(program, &bound).unwrap();
    let optimized = attnc::opt::optimize(program).program;
    for (path, p) in [("typed", program), ("optimized", &optimized)] {
        let exe = Executable::compile(p, &bound.dims).unwrap();
        let got = exe.run(&bound, &pool(2).unwrap()).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            assert_close(&format!("{what} ({path}) `{name}`"), g, w);
        }
    }
    want
}

/// `src` at `dims`: the attention kernel of its plan, after checking the numbers.
fn form(what: &str, src: &str, dims: &[(&str, i64)]) -> Attention {
    let p = program(src, dims);
    agrees(what, &p);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    one_attention(&plan(&p, &bound.dims))
}

const HEAD: &str = "dim B, H, N
dim Dk = 8
input q: [B, H, N, Dk]
input k: [B, H, N, Dk]
input v: [B, H, N, Dk]
let scores = q @ k.transpose(-2, -1) / sqrt(Dk)
";

const DIMS: &[(&str, i64)] = &[("B", 2), ("H", 3), ("N", 150)];

fn with(body: &str) -> String {
    format!("{HEAD}{body}\n")
}

#[test]
fn soft_capping_is_a_score_change_of_the_kernel() {
    let src = with("output out = (30.0 * tanh(scores / 30.0)).softmax(-1) @ v");
    let a = form("soft-cap", &src, DIMS);
    let score = a.score.expect("a score change");
    assert!(score.inputs.is_empty());
    assert!(a.positions.is_none() && a.mask.is_none());
}

#[test]
fn a_causal_mask_of_ones_tril_is_a_mask_of_positions_and_skips_tiles() {
    for (fill, name) in [("-inf", "-inf"), ("-1e9", "-1e9")] {
        let src = with(&format!(
            "let mask = ones(N, N).tril() == 0\noutput out = scores.masked_fill(mask, {fill}).softmax(-1) @ v"
        ));
        let a = form(&format!("causal {name}"), &src, DIMS);
        assert!(a.mask.is_none(), "the mask is computed, not read");
        let counts = a.tile_counts().expect("a mask of positions");
        assert!(
            a.skips_tiles() && counts.skipped > 0 && counts.kept > 0,
            "{counts:?}"
        );
        // 150 keys in one tile, decided in chunks of 64: 3 blocks of rows by 3 chunks.
        assert_eq!(a.block.1, 150, "a mask of positions needs no narrower tiles");
        assert_eq!(counts.kept + counts.partial + counts.skipped, 9, "{counts:?}");
    }
}

#[test]
fn where_and_triu_masks_are_masks_of_positions() {
    let forms = [
        "let keep = ones(N, N).tril() == 1\noutput out = where(keep, scores, -1e9).softmax(-1) @ v",
        "let future = ones(N, N).triu(1) == 1\noutput out = scores.masked_fill(future, -inf).softmax(-1) @ v",
        "let future = ones(N, N).triu(1) != 0\noutput out = scores.masked_fill(future, -inf).softmax(-1) @ v",
    ];
    for body in forms {
        let a = form(body, &with(body), DIMS);
        let counts = a.tile_counts().expect("a mask of positions");
        assert!(counts.skipped > 0, "{body}: {counts:?}");
    }
}

#[test]
fn masks_from_arange_comparisons_are_masks_of_positions() {
    let i = "let i = arange(N)[:, None]\nlet j = arange(N)[None, :]\n";
    let forms = [
        ("causal -inf", "scores.masked_fill(j > i, -inf)"),
        ("window |", "scores.masked_fill((j > i) | (i - j >= 40), -inf)"),
        (
            "window & ~",
            "scores.masked_fill(~((j <= i) & (j > i - 40)), -1e9)",
        ),
        ("where", "where((j <= i) & (j + 40 > i), scores, -1e9)"),
        ("offset keys", "scores.masked_fill(j - 3 > i, -inf)"),
        ("strided positions", "scores.masked_fill(2 * j > 2 * i + 1, -inf)"),
    ];
    for (what, masked) in forms {
        let src = with(&format!("{i}output out = {masked}.softmax(-1) @ v"));
        let a = form(what, &src, DIMS);
        assert!(a.mask.is_none(), "{what}: the mask is computed, not read");
        let counts = a
            .tile_counts()
            .unwrap_or_else(|| panic!("{what}: no mask of positions"));
        assert!(counts.skipped > 0, "{what}: {counts:?}");
    }
}

#[test]
fn alibi_biases_are_a_score_change_over_positions_and_a_slope_per_head() {
    let body = "let i = arange(N)[:, None]
let j = arange(N)[None, :]
let slopes = 2.0 ** (-8.0 * (arange(H) + 1.0) / H)
let s = scores + slopes[:, None, None] * (j - i)
output out = s.masked_fill(j > i, -inf).softmax(-1) @ v";
    let a = form("alibi", &with(body), DIMS);
    let score = a.score.as_ref().expect("a score change");
    // One input: the slopes, stride 0 but along the heads; `j - i` is computed.
    assert_eq!(score.inputs.len(), 1);
    assert_eq!(score.inputs[0].strides, [0, 1, 0, 0]);
    assert!(a.tile_counts().unwrap().skipped > 0);
}

#[test]
fn a_soft_capped_causal_form_is_one_kernel_with_both() {
    let body = "let s = 50.0 * tanh(scores / 50.0)
let mask = ones(N, N).tril() == 0
output out = s.masked_fill(mask, -inf).softmax(-1) @ v";
    let a = form("soft-capped causal", &with(body), DIMS);
    assert!(a.score.is_some() && a.positions.is_some());
    assert!(a.tile_counts().unwrap().skipped > 0);
}

#[test]
fn a_bias_tensor_is_read_by_the_score_change_in_place() {
    let body = "input bias: [H, 1, N]
output out = (scores + bias).softmax(-1) @ v";
    let a = form("bias", &with(body), DIMS);
    let score = a.score.expect("a score change");
    assert_eq!(score.inputs.len(), 1);
    // Broadcast over the batch and the rows: stride 0, never copied.
    assert_eq!(score.inputs[0].strides[0], 0);
    assert_eq!(score.inputs[0].strides[2], 0);
}

#[test]
fn rows_without_a_key_keep_each_fills_meaning() {
    // `tril(-1)` keeps no key of row 0: uniform under -1e9, NaN under -inf (as PyTorch).
    for (fill, nan) in [("-1e9", false), ("-inf", true)] {
        let body = format!(
            "let mask = ones(N, N).tril(-1) == 0\noutput out = scores.masked_fill(mask, {fill}).softmax(-1) @ v"
        );
        let p = program(&with(&body), DIMS);
        let out = agrees(fill, &p);
        let row0 = &out[0].1.data[..8];
        assert_eq!(row0.iter().all(|x| x.is_nan()), nan, "{fill}: {row0:?}");
        let bound = bind(&p, &RunOptions::default()).unwrap();
        let a = one_attention(&plan(&p, &bound.dims));
        assert!(a.positions.is_some());
    }
}

const DECODE: &str = "dim B, M
dim H = 4, Dk = 8
input q: [B, H, 1, Dk]
input k_cache: [B, H, M, Dk]
input v_cache: [B, H, M, Dk]
input k_new: [B, H, 1, Dk]
input v_new: [B, H, 1, Dk]
let k = cat([k_cache, k_new], dim=2)
let v = cat([v_cache, v_new], dim=2)
let p = (q @ k.transpose(-2, -1) / sqrt(Dk)).softmax(-1)
output out = p @ v
";

#[test]
fn a_decode_step_reads_the_cache_and_the_new_key_as_two_segments() {
    let dims = [("B", 2), ("M", 77)];
    let a = form("decode", DECODE, &dims);
    let tail = a.tail.expect("the new key read as a tail");
    assert_eq!((tail.len, a.m), (1, 78));
    // Nothing copies the cache.
    let p = program(DECODE, &dims);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let plan = plan(&p, &bound.dims);
    assert_eq!(plan.kernels.len(), 1, "{}", plan.to_text());
}

#[test]
fn a_cache_that_is_an_output_is_joined_once() {
    let src = format!("{DECODE}output k_next = k\n");
    let dims = [("B", 2), ("M", 77)];
    let a = form("decode with the cache out", &src, &dims);
    // The keys are read from the joined output, the values from their two parts.
    let tail = a.tail.expect("a tail");
    assert_eq!(tail.k.buf, a.k.buf);
    assert_ne!(tail.v.buf, a.v.buf);
    let p = program(&src, &dims);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let plan = plan(&p, &bound.dims);
    let copies: Vec<&str> = plan
        .kernels
        .iter()
        .map(|k| k.label.as_str())
        .filter(|l| l.contains("cat"))
        .collect();
    assert_eq!(
        copies.len(),
        2,
        "one copy per part of the keys' `cat`\n{}",
        plan.to_text()
    );
}

const GQA: &str = "dim B, N
dim Hkv = 2, G = 3, Dk = 8
dim H = Hkv * G
input q: [B, H, N, Dk]
input k: [B, Hkv, N, Dk]
input v: [B, Hkv, N, Dk]
fn repeat_kv(x: [B, Hkv, N, Dk]) -> [B, H, N, Dk] {
    x[:, :, None, :, :].expand(B, Hkv, G, N, Dk).reshape(B, Hkv * G, N, Dk)
}
let i = arange(N)[:, None]
let j = arange(N)[None, :]
let scores = q @ repeat_kv(k).transpose(-2, -1) / sqrt(Dk)
output out = scores.masked_fill(j > i, -inf).softmax(-1) @ repeat_kv(v)
";

#[test]
fn keys_repeated_by_expand_and_reshape_are_read_in_place_by_group() {
    let a = form("repeat_kv", GQA, &[("B", 2), ("N", 150)]);
    assert_eq!(a.kv_group, 3);
    assert!(a.tile_counts().unwrap().skipped > 0);
    let p = program(GQA, &[("B", 2), ("N", 150)]);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let plan = plan(&p, &bound.dims);
    // Keys and values are read from the inputs: no kernel copies them.
    let copies: Vec<&str> = plan
        .kernels
        .iter()
        .filter(|k| matches!(k.op, KernelOp::Map(_)))
        .map(|k| k.label.as_str())
        .filter(|l| !l.contains("kT layout"))
        .collect();
    assert!(copies.is_empty(), "{copies:?}\n{}", plan.to_text());
}

#[test]
fn a_grouped_decode_step_against_a_cache_is_one_kernel() {
    let src = "dim B, M
dim Hkv = 2, G = 4, Dk = 8
dim H = Hkv * G
input q: [B, H, 1, Dk]
input k_cache: [B, Hkv, M, Dk]
input v_cache: [B, Hkv, M, Dk]
input k_new: [B, Hkv, 1, Dk]
input v_new: [B, Hkv, 1, Dk]
fn repeat_kv(x: [B, Hkv, M + 1, Dk]) -> [B, H, M + 1, Dk] {
    x[:, :, None, :, :].expand(B, Hkv, G, M + 1, Dk).reshape(B, Hkv * G, M + 1, Dk)
}
let k = repeat_kv(cat([k_cache, k_new], dim=2))
let v = repeat_kv(cat([v_cache, v_new], dim=2))
output out = (q @ k.transpose(-2, -1) / sqrt(Dk)).softmax(-1) @ v
";
    let dims = [("B", 2), ("M", 100)];
    let a = form("grouped decode", src, &dims);
    // One query row: the group's heads become rows of one task, the cache read once.
    assert_eq!((a.n, a.kv_group, a.batch.as_slice()), (4, 1, &[2, 2][..]));
    assert_eq!(a.tail.as_ref().map(|t| t.len), Some(1));
    let p = program(src, &dims);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    assert_eq!(plan(&p, &bound.dims).kernels.len(), 1);
}

/// The programs of the attention benchmarks (the variant examples, `benches/decode.attn`) at
/// small sizes: each is one attention kernel with what its variant needs, and agrees with the
/// interpreter.
#[test]
fn the_benchmarked_variants_are_one_attention_kernel_each() {
    let small = [("B", 1), ("N", 130), ("D", 64), ("H", 4), ("W", 20)];
    for name in ["causal_from_positions", "sliding_window", "alibi", "softcap"] {
        let a = form(name, &common::example(&format!("{name}.attn")), &small);
        assert!(a.tile_counts().unwrap().skipped > 0, "{name}");
        assert_eq!(a.score.is_some(), ["alibi", "softcap"].contains(&name), "{name}");
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/decode.attn");
    let src = std::fs::read_to_string(path).unwrap();
    let a = form(
        "decode bench",
        &src,
        &[("B", 2), ("M", 70), ("D", 64), ("H", 8), ("Hkv", 2)],
    );
    assert!(a.tail.is_some());
}

const SDPA: &str = "dim B, H, N
dim Dk = 8
input q: [B, H, N, Dk]
input k: [B, H, N, Dk]
input v: [B, H, N, Dk]
";

#[test]
fn scaled_dot_product_attention_computes_a_boolean_mask_of_positions() {
    let forms = [
        ("is_causal", "output out = scaled_dot_product_attention(q, k, v, is_causal=True)", true),
        (
            "a window as attn_mask",
            "let i = arange(N)[:, None]\nlet j = arange(N)[None, :]\n\
             output out = scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & (j > i - 40), scale=0.5)",
            true,
        ),
        ("no mask", "output out = scaled_dot_product_attention(q, k, v)", false),
    ];
    for (what, body, skips) in forms {
        let a = form(what, &format!("{SDPA}{body}\n"), DIMS);
        assert!(a.zero_empty_rows, "{what}");
        assert_eq!(a.tile_counts().is_some_and(|c| c.skipped > 0), skips, "{what}");
    }
}

#[test]
fn scaled_dot_product_attention_gives_0_on_a_row_without_keys() {
    let body = "let keep = ones(N, N).tril(-1) == 1
output out = scaled_dot_product_attention(q, k, v, attn_mask=keep)";
    let p = program(&format!("{SDPA}{body}\n"), DIMS);
    let out = agrees("sdpa empty row", &p);
    assert!(out[0].1.data[..8].iter().all(|&x| x == 0.0));
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let a = one_attention(&plan(&p, &bound.dims));
    assert!(a.zero_empty_rows && a.positions.is_some());
}

#[test]
fn the_grouped_decode_example_reads_its_cache_in_place() {
    let small = [("B", 2), ("M", 70), ("D", 64), ("H", 8), ("Hkv", 2)];
    let a = form("gqa_decode", &common::example("gqa_decode.attn"), &small);
    assert!(a.tail.is_some() && a.zero_empty_rows);
}

/// The Llama layer adds `full([N, N], min).triu(1)` to its scores: the kernel computes that
/// mask from the row and key as its mask of positions, with the value it adds as the fill
/// (no `[N, N]` tensor, no select in a score change), and skips the tiles it removes; so
/// for the other float masks of positions, on either side of the `+` and after a scale.
#[test]
fn an_additive_mask_of_positions_is_the_kernels_mask_of_positions() {
    let prelude = "let i = arange(N)[:, None]\nlet j = arange(N)[None, :]\n";
    let forms = [
        (
            "scores + full(min).triu(1)",
            "(scores + full([N, N], -3.4028234663852886e38).triu(1))",
            f32::MIN,
        ),
        (
            "where -inf + q @ kT / s",
            "(where(j <= i, 0.0, -inf) + q @ k.transpose(-2, -1) / sqrt(Dk))",
            f32::NEG_INFINITY,
        ),
        (
            "(q @ kT) * s + (1 - causal) * -1e9",
            "((q @ k.transpose(-2, -1)) * 0.25 + (1.0 - (j <= i)) * -1e9)",
            -1e9,
        ),
        (
            "soft cap + window",
            "(30.0 * tanh(scores / 30.0) + where((j <= i) & (i - j < 40), 0.0, -inf))",
            f32::NEG_INFINITY,
        ),
    ];
    for (what, scores, fill) in forms {
        let src = with(&format!("{prelude}output out = {scores}.softmax(dim=-1) @ v"));
        let a = form(what, &src, DIMS);
        let p = a
            .positions
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: no mask of positions"));
        assert_eq!(p.fill, fill, "{what}");
        assert!(a.mask.is_none(), "{what}: the mask is read");
        assert!(a.score.as_ref().is_none_or(|s| s.inputs.is_empty()), "{what}");
        let counts = a.tile_counts().expect("tiles");
        assert!(a.skips_tiles() && counts.skipped > 0, "{what}: {counts:?}");
    }
}

/// A row the mask removes whole: PyTorch's softmax gives NaN under a `-inf` mask, and
/// uniform probabilities under `finfo.min` (every score becomes `min`), so a finite fill
/// stays a score change there, and the kernel agrees with the interpreter either way.
#[test]
fn an_additive_mask_keeps_softmaxs_meaning_of_a_row_without_keys() {
    let prelude = "let i = arange(N)[:, None]\nlet j = arange(N)[None, :]\n";
    let inf = with(&format!(
        "{prelude}output out = (scores + where(j < i, 0.0, -inf)).softmax(dim=-1) @ v"
    ));
    let p = program(&inf, DIMS);
    let out = agrees("-inf, row 0 empty", &p);
    assert!(out[0].1.data[..8].iter().all(|x| x.is_nan()));
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let a = one_attention(&plan(&p, &bound.dims));
    assert_eq!(a.positions.map(|p| p.fill), Some(f32::NEG_INFINITY));
    let finite = with(&format!(
        "{prelude}output out = (scores + full([N, N], -3.4028234663852886e38).triu(0)).softmax(dim=-1) @ v"
    ));
    let p = program(&finite, DIMS);
    let out = agrees("min, row 0 empty", &p);
    assert!(out[0].1.data[..8].iter().all(|x| x.is_finite()));
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let a = one_attention(&plan(&p, &bound.dims));
    assert!(a.positions.is_none() && a.score.is_some());
}

/// `repeat_interleave(G, dim=1)` repeats each key head G times in a row, as `repeat_kv` does:
/// read in place too.
#[test]
fn keys_repeated_by_repeat_interleave_are_read_in_place_by_group() {
    let src = "dim B, N
dim Hkv = 2, G = 3, Dk = 8
dim H = Hkv * G
input q: [B, H, N, Dk]
input k: [B, Hkv, N, Dk]
input v: [B, Hkv, N, Dk]
let scores = q @ k.repeat_interleave(G, dim=1).transpose(-2, -1) / sqrt(Dk)
output out = scores.softmax(-1) @ v.repeat_interleave(G, dim=1)
";
    let a = form("repeat_interleave", src, &[("B", 2), ("N", 70)]);
    assert_eq!(a.kv_group, 3);
}

/// A decode step of `Hkv` key/value heads shared by `G` query heads each, `N` new query rows
/// against `M` cached keys plus the new ones, with `body` computing `out` from `scores`
/// (`[B, H, N, M + N]`, scaled) and `v`: the shapes where flash-decoding splits the keys.
fn decode_step(body: &str) -> String {
    format!(
        "dim B, M, N, Hkv, G
dim Dk = 8
dim H = Hkv * G
input q: [B, H, N, Dk]
input k_cache: [B, Hkv, M, Dk]
input v_cache: [B, Hkv, M, Dk]
input k_new: [B, Hkv, N, Dk]
input v_new: [B, Hkv, N, Dk]
fn repeat_kv(x: [B, Hkv, M + N, Dk]) -> [B, H, M + N, Dk] {{
    x[:, :, None, :, :].expand(B, Hkv, G, M + N, Dk).reshape(B, Hkv * G, M + N, Dk)
}}
let k = repeat_kv(cat([k_cache, k_new], dim=2))
let v = repeat_kv(cat([v_cache, v_new], dim=2))
let i = arange(N)[:, None] + M
let j = arange(M + N)[None, :]
let scores = q @ k.transpose(-2, -1) / sqrt(Dk)
{body}
"
    )
}

/// The attention kernel of `src` at `dims` after checking the numbers, with its keys split
/// into `chunks`; the plan's outputs are the same bits on 1 and 3 threads.
fn split_form(what: &str, src: &str, dims: &[(&str, i64)], chunks: usize) -> Attention {
    let a = form(what, src, dims);
    let split = a
        .split
        .unwrap_or_else(|| panic!("{what}: the keys are not split"));
    assert_eq!(split.chunks, chunks, "{what}");
    let p = attnc::opt::optimize(&program(src, dims)).program;
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let exe = Executable::compile(&p, &bound.dims).unwrap();
    let one = exe.run(&bound, &pool(1).unwrap()).unwrap();
    let three = exe.run(&bound, &pool(3).unwrap()).unwrap();
    for ((name, a), (_, b)) in one.iter().zip(&three) {
        let same = a
            .data
            .iter()
            .zip(&b.data)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{what}: `{name}` differs between 1 and 3 threads");
    }
    a
}

#[test]
fn a_decode_step_of_one_or_two_key_heads_splits_its_keys() {
    let src = decode_step("output out = scores.softmax(-1) @ v");
    // One kv head of two query heads (folded into two rows of one task): 16 chunks wanted,
    // 512 keys each at least, 3001 keys.
    let dims = [("B", 1), ("M", 3000), ("N", 1), ("Hkv", 1), ("G", 2)];
    let a = split_form("one head", &src, &dims, 6);
    assert_eq!(a.split.map(|s| s.len), Some(512));
    assert!(a.tail.is_some());
    // Two kv heads of four query heads each (folded into rows): 2 tasks, 8 chunks wanted.
    let dims = [("B", 1), ("M", 2999), ("N", 1), ("Hkv", 2), ("G", 4)];
    let a = split_form("grouped", &src, &dims, 6);
    assert_eq!((a.n, a.batch.as_slice()), (4, &[1, 2][..]));
    // A few query rows of their own positions over the cache.
    let dims = [("B", 1), ("M", 1300), ("N", 3), ("Hkv", 1), ("G", 2)];
    split_form("three rows", &src, &dims, 3);
}

#[test]
fn split_keys_compose_with_masks_of_positions_and_score_changes() {
    let dims = [("B", 1), ("M", 3000), ("N", 2), ("Hkv", 1), ("G", 2)];
    // A window of the last 700 positions: the chunks before it visit no tile.
    let window = "output out = scores.masked_fill((j > i) | (i - j >= 700), -inf).softmax(-1) @ v";
    let a = split_form("window", &decode_step(window), &dims, 6);
    assert!(a.skips_tiles() && a.tile_counts().unwrap().skipped > 0);
    let causal = "output out = scores.masked_fill(j > i, -1e9).softmax(-1) @ v";
    split_form("causal -1e9", &decode_step(causal), &dims, 6);
    let capped = "let s = 5.0 * tanh(scores / 5.0)\noutput out = s.masked_fill(j > i, -inf).softmax(-1) @ v";
    let a = split_form("soft-capped", &decode_step(capped), &dims, 6);
    assert!(a.score.is_some());
    let sdpa = "output out = scaled_dot_product_attention(q, k, v, attn_mask=i - j < 900)";
    split_form("sdpa window", &decode_step(sdpa), &dims, 6);
}

#[test]
fn split_keys_keep_each_forms_meaning_of_a_row_without_keys() {
    let dims = [("B", 1), ("M", 3000), ("N", 1), ("Hkv", 1), ("G", 1)];
    // No key is kept: uniform under -1e9, NaN under -inf, 0 for SDPA (as PyTorch).
    let none = "let removed = j >= 0";
    for (what, body, row) in [
        (
            "-1e9",
            "output out = scores.masked_fill(removed, -1e9).softmax(-1) @ v",
            "uniform",
        ),
        (
            "-inf",
            "output out = scores.masked_fill(removed, -inf).softmax(-1) @ v",
            "nan",
        ),
        (
            "sdpa",
            "output out = scaled_dot_product_attention(q, k, v, attn_mask=~removed)",
            "zero",
        ),
    ] {
        let src = decode_step(&format!("{none}\n{body}"));
        split_form(what, &src, &dims, 6);
        let p = program(&src, &dims);
        let bound = bind(&p, &RunOptions::default()).unwrap();
        let out = &interpret(&p, &bound).unwrap()[0].1.data;
        match row {
            "nan" => assert!(out.iter().all(|x| x.is_nan()), "{what}"),
            "zero" => assert!(out.iter().all(|&x| x == 0.0), "{what}"),
            _ => assert!(out.iter().all(|x| x.is_finite() && *x != 0.0), "{what}"),
        }
    }
}

#[test]
fn enough_tasks_or_few_keys_leave_the_keys_whole() {
    let src = decode_step("output out = scores.softmax(-1) @ v");
    // 16 kv heads make 16 tasks; 1000 keys make fewer than two chunks of 512.
    for dims in [
        [("B", 2), ("M", 3000), ("N", 1), ("Hkv", 8), ("G", 1)],
        [("B", 1), ("M", 999), ("N", 1), ("Hkv", 1), ("G", 1)],
    ] {
        let a = form("whole", &src, &dims);
        assert_eq!(a.split, None, "{dims:?}");
    }
}

/// Float masks of positions passed to `scaled_dot_product_attention`, written as models
/// write them: the kernel computes them from `i` and `j` (no `[N, N]` buffer, no kernel
/// that fills one) and skips the tiles they remove.
#[test]
fn float_attention_masks_of_positions_are_masks_of_positions() {
    let forms = [
        ("where -inf", "where(j <= i, 0.0, -inf)", f32::NEG_INFINITY),
        ("(1 - causal) * -1e9", "(1.0 - (j <= i)) * -1e9", -1e9),
        (
            "full(min).triu(1)",
            "full([N, N], -3.4028234663852886e38).triu(1)",
            f32::MIN,
        ),
        (
            "window, -inf",
            "where((j <= i) & (i - j < 40), 0.0, -inf)",
            f32::NEG_INFINITY,
        ),
    ];
    for (what, mask, fill) in forms {
        let body = format!(
            "let i = arange(N)[:, None]\nlet j = arange(N)[None, :]\n\
             output out = scaled_dot_product_attention(q, k, v, attn_mask={mask})"
        );
        let src = format!("{SDPA}{body}\n");
        let a = form(what, &src, DIMS);
        let p = a
            .positions
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: no mask of positions"));
        assert_eq!(p.fill, fill, "{what}");
        assert!(a.score.is_none() && a.mask.is_none(), "{what}: the mask is read");
        assert!(a.skips_tiles() && a.tile_counts().unwrap().skipped > 0, "{what}");
        let prog = program(&src, DIMS);
        let bound = bind(&prog, &RunOptions::default()).unwrap();
        let plan = plan(&prog, &bound.dims);
        assert_eq!(plan.kernels.len(), 1, "{what}\n{}", plan.to_text());
    }
}

/// A row that keeps no key: PyTorch's SDPA gives 0 under a `-inf` float mask (as under a
/// boolean one), and a uniform row under `-1e9` (up to the rounding of `s - 1e9`, which the
/// kernel keeps by adding the mask as a score change there).
#[test]
fn float_masks_of_positions_keep_sdpas_meaning_of_a_row_without_keys() {
    let prelude = "let i = arange(N)[:, None]\nlet j = arange(N)[None, :]\n";
    let inf = format!(
        "{SDPA}{prelude}output out = scaled_dot_product_attention(q, k, v, attn_mask=where(j < i, 0.0, -inf))\n"
    );
    let p = program(&inf, DIMS);
    let out = agrees("-inf, row 0 empty", &p);
    assert!(out[0].1.data[..8].iter().all(|&x| x == 0.0));
    let bound = bind(&p, &RunOptions::default()).unwrap();
    assert!(one_attention(&plan(&p, &bound.dims)).positions.is_some());
    let finite = format!(
        "{SDPA}{prelude}output out = scaled_dot_product_attention(q, k, v, attn_mask=(1.0 - (j < i)) * -1e9)\n"
    );
    let p = program(&finite, DIMS);
    let out = agrees("-1e9, row 0 empty", &p);
    assert!(out[0].1.data[..8].iter().all(|&x| x != 0.0 && x.is_finite()));
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let attention = plan(&p, &bound.dims)
        .kernels
        .into_iter()
        .find_map(|k| match k.op {
            KernelOp::Attention(a) => Some(a),
            _ => None,
        });
    let a = attention.expect("an attention kernel");
    assert!(a.positions.is_none() && a.score.is_some());
}
