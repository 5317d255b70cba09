//! The fusions of whole blocks: each case is lowered from the optimized program to show
//! that it fuses (the plan's kernels), then run natively as checked and as optimized, on
//! one and two threads, against the reference interpreter.

use attnc::ir::Program;
use attnc::kernel::{Kernel, KernelOp, Plan};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions};

mod common;
use common::{program, relative_error};

const DIMS: &[(&str, i64)] = &[("B", 2), ("N", 37)];

/// The plan `attnc run` executes: the optimized program's.
fn plan(src: &str) -> Plan {
    plan_at(src, DIMS)
}

fn plan_at(src: &str, dims: &[(&str, i64)]) -> Plan {
    let p = program(src, dims);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let optimized = attnc::opt::optimize(&p).program;
    attnc::lower::lower(&optimized, &bound.dims).unwrap()
}

/// Every output of `program`, natively as checked and as optimized, on one and two
/// threads, within 1e-5 of the interpreter's largest element.
fn agrees(what: &str, program: &Program) {
    let opts = RunOptions {
        seed: 5,
        ..RunOptions::default()
    };
    let bound = bind(program, &opts).unwrap();
    let want = interpret(program, &bound).unwrap();
    let optimized = attnc::opt::optimize(program).program;
    for (path, p) in [("typed", program), ("optimized", &optimized)] {
        let exe = Executable::compile(p, &bound.dims).unwrap();
        let one = exe.run(&bound, &pool(1).unwrap()).unwrap();
        let two = exe.run(&bound, &pool(2).unwrap()).unwrap();
        for (((name, w), (_, a)), (_, b)) in want.iter().zip(&one).zip(&two) {
            let error = relative_error(a, w);
            assert!(error < 1e-5, "{what} ({path}): `{name}` off by {error}");
            assert_eq!(a.data, b.data, "{what} ({path}): `{name}` differs by threads");
        }
    }
}

fn kinds(plan: &Plan) -> Vec<&'static str> {
    plan.kernels.iter().map(|k| k.op.kind()).collect()
}

fn epilogue_inputs(k: &Kernel) -> Option<usize> {
    match &k.op {
        KernelOp::Gemm(g) => g.epilogue.as_ref().map(|e| e.inputs.len()),
        _ => None,
    }
}

const HEAD: &str =
    "dim B, N\ndim D = 96, F = 40\ninput x: [B, N, D]\nparam w: [F, D]\nparam b: [F]\nparam w2: [D, F]\n";

/// Each activation of a `linear` is its GEMM's epilogue: one kernel, no map. (A constant
/// scale the optimizer moves into the weights, so it costs nothing at all.)
#[test]
fn activations_after_a_linear_are_its_epilogue() {
    for (act, epilogue) in [
        ("relu(linear(x, w, b))", true),
        ("gelu(linear(x, w, b))", true),
        ("gelu(linear(x, w, b), approximate=\"tanh\")", true),
        ("silu(linear(x, w))", true),
        ("gelu(x @ w.transpose(0, 1) + b, approximate=\"tanh\")", true),
        ("linear(x, w, b) * 0.5", false),
    ] {
        let src = format!("{HEAD}output y = {act}\n");
        let p = plan(&src);
        assert_eq!(kinds(&p), ["gemm"], "{act}: {}", p.to_text());
        let fused = epilogue_inputs(&p.kernels[0]).is_some();
        assert_eq!(fused, epilogue, "{act}: {}", p.to_text());
        agrees(act, &program(&src, DIMS));
    }
}

/// A residual add reads its other operand in the epilogue: the feed-forward half of a
/// block is two GEMMs and nothing else.
#[test]
fn a_residual_add_is_the_epilogue_of_the_last_projection() {
    let src = format!("{HEAD}output y = x + linear(relu(linear(x, w, b)), w2)\n");
    let p = plan(&src);
    assert_eq!(kinds(&p), ["gemm", "gemm"], "{}", p.to_text());
    assert_eq!(epilogue_inputs(&p.kernels[0]), Some(0));
    assert_eq!(epilogue_inputs(&p.kernels[1]), Some(1));
    agrees("residual", &program(&src, DIMS));
}

/// SwiGLU: gate and up are one GEMM over their concatenated weights, whose task computes
/// both halves of its tile and then `silu(gate) * up` into the first; the down projection
/// reads that half in place.
#[test]
fn swiglu_is_a_paired_epilogue_of_the_merged_projection() {
    let src = "dim B, N\ndim D = 256, F = 384\ninput x: [B, N, D]\nparam g: [F, D]\nparam u: [F, D]\nparam d: [D, F]\noutput y = x + linear(silu(linear(x, g)) * linear(x, u), d)\n";
    let p = plan(src);
    assert_eq!(kinds(&p), ["gemm", "gemm"], "{}", p.to_text());
    let KernelOp::Gemm(merged) = &p.kernels[0].op else {
        unreachable!()
    };
    assert!(
        merged.epilogue.as_ref().is_some_and(|e| e.pair),
        "{}",
        p.to_text()
    );
    agrees("swiglu", &program(src, DIMS));
}

/// A batched product keeps its batch axis, and the epilogue reads an operand strided along
/// the row (a transposed residual) a lane at a time.
#[test]
fn an_epilogue_reads_operands_through_any_strides() {
    let src = format!("{HEAD}input y: [B, D, F]\ninput z: [B, F, N]\noutput o = x @ y + z.transpose(1, 2)\n");
    let p = plan(&src);
    assert_eq!(kinds(&p), ["gemm"], "{}", p.to_text());
    assert_eq!(epilogue_inputs(&p.kernels[0]), Some(1), "{}", p.to_text());
    agrees("transposed residual", &program(&src, DIMS));
}

/// Where the product has another reader, or the epilogue would read a value computed
/// after the GEMM, the elementwise op stays a map of its own, and the results hold.
#[test]
fn a_product_read_twice_or_an_operand_written_later_keeps_its_map() {
    let twice = format!("{HEAD}let y = linear(x, w, b)\noutput a = relu(y)\noutput c = y\n");
    let p = plan(&twice);
    assert!(
        p.kernels.iter().all(|k| epilogue_inputs(k).is_none()),
        "{}",
        p.to_text()
    );
    agrees("read twice", &program(&twice, DIMS));

    let later = format!(
        "{HEAD}let y = linear(x, w)\nlet z = (x.sum(-1, keepdim=True) * b).softmax(-1)\noutput o = y * z\n"
    );
    let p = plan(&later);
    assert_eq!(kinds(&p).last(), Some(&"map"), "{}", p.to_text());
    agrees("written later", &program(&later, DIMS));
}

/// Norms, as the ops and as the Annotated Transformer writes its own, are one row kernel
/// each: the statistics are stages over the row, the normalized value its write.
#[test]
fn norms_are_one_row_kernel() {
    for norm in [
        "layer_norm(x, [D], a, c)",
        "layer_norm(x, [D])",
        "rms_norm(x, [D], a, eps=1e-5)",
        "a * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6) + c",
        "exp(x - x.amax(-1, keepdim=True)) / exp(x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True)",
    ] {
        let src = format!("{HEAD}param a: [D]\nparam c: [D]\noutput y = {norm}\n");
        let p = plan(&src);
        assert_eq!(kinds(&p), ["row"], "{norm}: {}", p.to_text());
        agrees(norm, &program(&src, DIMS));
    }
    let src = format!("{HEAD}output y = relu(linear(layer_norm(x, [D]), w, b))\n");
    assert_eq!(kinds(&plan(&src)), ["row", "gemm"]);
}

/// A row kernel computes at most 64 nodes: each stage's formula repeats the elementwise
/// nodes below it, and a chain of 1,000 row-wise statements fused whole was one kernel of
/// some 500,000 formula nodes, minutes of Cranelift's time. It is many small kernels now.
#[test]
fn a_chain_of_row_statements_is_split_into_bounded_row_kernels() {
    let mut src = format!("{HEAD}let y = x\n");
    src.push_str(&"let y = y - y.amax(-1, keepdim=True) * 0.5\n".repeat(1000));
    src.push_str("output y = y\n");
    let p = plan(&src);
    for k in &p.kernels {
        if let KernelOp::Row(r) = &k.op {
            let size: usize = r.stages.iter().map(|s| s.expr.len()).sum::<usize>() + r.write.len();
            assert!(size <= 64 * 64, "a row kernel of {size} formula nodes");
        }
    }
    assert!(kinds(&p).iter().filter(|&&k| k == "row").count() > 1);
    agrees("row chain", &program(&src, DIMS));
}

/// A statistic that is also read elsewhere (here an output) is computed once, by a kernel
/// of its own, and the rest reads it.
#[test]
fn a_statistic_read_elsewhere_is_not_recomputed() {
    let src = format!("{HEAD}let m = x.mean(-1, keepdim=True)\noutput y = (x - m) * 2.0\noutput m = m\n");
    let p = plan(&src);
    assert!(
        !kinds(&p).contains(&"gemm") && kinds(&p).len() >= 2,
        "{}",
        p.to_text()
    );
    agrees("shared mean", &program(&src, DIMS));
}

/// The plan counts the FLOPs of its GEMMs, epilogues and all, as the source counts its
/// `linear`s and matmuls (the header of `ir --stage kernels` used to show 0 GFLOP once the
/// optimizer had turned a matmul into its `gemm` op).
#[test]
fn a_plan_counts_the_flops_of_the_source() {
    let src = format!(
        "{HEAD}let h = gelu(x @ w.transpose(0, 1) + b, approximate=\"tanh\")\noutput y = linear(h, w2) + x\n"
    );
    let p = program(&src, DIMS);
    let bound = bind(&p, &RunOptions::default()).unwrap();
    let want = attnc::lower::source_flops(&p, &bound.dims);
    assert_eq!(want, 2.0 * 2.0 * 37.0 * (96.0 * 40.0) * 2.0);
    assert_eq!(plan(&src).flops, want);
}

/// Q, K and V projected from one input (merged into one GEMM), rotated by `rope` (with
/// `rotate_half` spelled `body`) and attended with grouped heads.
fn rotated_attention(d: usize, rope: &str, body: &str, extra: &str) -> String {
    let q = rope.replace('x', "q");
    let k = rope.replace('x', "k");
    format!(
        "dim B, N\ndim D = {d}, H = 4, Hkv = 2\ndim Dk = D / H\nparam wq: [H * Dk, D]\nparam wk: [Hkv * Dk, D]\nparam wv: [Hkv * Dk, D]\ninput x: [B, N, D]\ninput cos: [N, Dk]\ninput sin: [N, Dk]\nfn rotate_half(t: [B, G, N, Dk]) -> [B, G, N, Dk] {{\n{body}\n}}\nlet q = linear(x, wq).view(B, N, H, Dk).transpose(1, 2)\nlet k = linear(x, wk).view(B, N, Hkv, Dk).transpose(1, 2)\nlet v = linear(x, wv).view(B, N, Hkv, Dk).transpose(1, 2)\noutput o = scaled_dot_product_attention({q}, {k}, v, enable_gqa=True)\n{extra}"
    )
}

const HALVES: &str = "let t1 = t[..., : Dk / 2]\nlet t2 = t[..., Dk / 2 :]\ncat([-t2, t1], dim=-1)";

/// The rotation of q and k (RoPE, halves) is applied by the merged projection as it writes
/// its tile: only q's and k's columns are rotated, v's are not, and no map is left. The
/// results equal the interpreter's where the tiles split the heads' columns and rows
/// differently: head dims of 64 and 128, several tasks, rows not a multiple of the row
/// tile, one sequence or two (positions repeating down the rows).
#[test]
fn rope_is_the_epilogue_of_the_projection() {
    let spellings = [
        ("x * cos + rotate_half(x) * sin", HALVES),
        (
            "rotate_half(x) * sin + cos * x",
            "let (t1, t2) = t.chunk(2, dim=-1)\ncat((-t2, t1), dim=-1)",
        ),
    ];
    for (d, dims) in [(256, [("B", 1), ("N", 300)]), (512, [("B", 2), ("N", 150)])] {
        for (rope, body) in spellings {
            let src = rotated_attention(d, rope, body, "");
            let p = plan_at(&src, &dims);
            assert_eq!(kinds(&p), ["gemm", "attention"], "{rope}: {}", p.to_text());
            let KernelOp::Gemm(g) = &p.kernels[0].op else {
                unreachable!()
            };
            let dk = d / 4;
            let columns: Vec<_> = g.rope.iter().map(|r| (r.start, r.end(), r.dim)).collect();
            assert_eq!(columns, [(0, d, dk), (d, d + 2 * dk, dk)], "{}", p.to_text());
            assert!(p.kernels[0].op.tasks() >= 4, "{}", p.to_text());
            assert!(g.m % g.block.0 != 0 || g.block.1 < g.n, "{}", p.to_text());
            agrees(rope, &program(&src, &dims));
        }
    }
}

/// The tables of RoPE computed in the program from positions, as Mistral's and Llama's
/// rotary modules write them (inverse frequencies from `arange`, their product with the
/// positions, `cos` and `sin` of the two halves joined), in place of the inputs.
const TABLES: [&str; 2] = [
    "let inv = 1.0 / (10000.0 ** (arange(0, Dk, 2).float() / Dk))\nlet freqs = arange(N).float()[:, None] * inv[None, :]\nlet emb = cat([freqs, freqs], dim=-1)\nlet cos = emb.cos()\nlet sin = emb.sin()\n",
    "let inv_freq = 1.0 / 500000.0 ** (torch.arange(0, Dk, 2) / Dk)\nlet t = torch.arange(N)\nlet freqs = t[:, None] * inv_freq[None, :]\nlet emb = torch.cat((freqs, freqs), dim=-1)\nlet cos = torch.cos(emb)\nlet sin = torch.sin(emb)\n",
];

/// RoPE whose tables the program computes after the projections is fused as RoPE given as
/// inputs is: the tables are computed first (once per weights, since they read no input),
/// and the merged projection rotates q's and k's columns as it writes its tile; no
/// rotation map is left, and the results equal the interpreter's.
#[test]
fn rope_computed_from_positions_is_the_epilogue_of_the_projection() {
    let rope = "x * cos + rotate_half(x) * sin";
    for (d, dims) in [(256, [("B", 1), ("N", 300)]), (512, [("B", 2), ("N", 150)])] {
        for tables in TABLES {
            let given = "input cos: [N, Dk]\ninput sin: [N, Dk]\n";
            let src = rotated_attention(d, rope, HALVES, "").replace(given, tables);
            let p = plan_at(&src, &dims);
            assert_eq!(kinds(&p), ["gemm", "attention"], "{tables}: {}", p.to_text());
            let KernelOp::Gemm(g) = &p.kernels[0].op else {
                unreachable!()
            };
            let dk = d / 4;
            let columns: Vec<_> = g.rope.iter().map(|r| (r.start, r.end(), r.dim)).collect();
            assert_eq!(columns, [(0, d, dk), (d, d + 2 * dk, dk)], "{}", p.to_text());
            agrees(tables, &program(&src, &dims));
        }
    }
}

/// The plan of RoPE from positions in the program: the tables' maps in the prologue, the
/// rotation in the projection's GEMM.
#[test]
fn the_plan_of_rope_from_positions_rotates_in_the_projection() {
    let given = "input cos: [N, Dk]\ninput sin: [N, Dk]\n";
    let src = rotated_attention(64, "x * cos + rotate_half(x) * sin", HALVES, "").replace(given, TABLES[0]);
    insta::assert_snapshot!(plan_at(&src, &[("B", 1), ("N", 8)]).to_text());
}

/// Where the un-rotated q is also read (an output), the projection keeps its values and
/// the rotation is two maps, one per half, each reading its partner half; the same for a
/// rotation of an input, which no GEMM writes.
#[test]
fn rope_of_a_value_read_elsewhere_is_two_maps() {
    let rope = "x * cos + rotate_half(x) * sin";
    let src = rotated_attention(256, rope, HALVES, "output q0 = q\n");
    let dims = [("B", 2), ("N", 37)];
    let p = plan_at(&src, &dims);
    let KernelOp::Gemm(g) = &p.kernels[0].op else {
        unreachable!()
    };
    assert_eq!(g.rope.len(), 1, "{}", p.to_text());
    assert_eq!((g.rope[0].start, g.rope[0].end()), (256, 384), "{}", p.to_text());
    let maps = p
        .kernels
        .iter()
        .filter(|k| k.label.contains("(rotary embedding)"));
    assert_eq!(maps.count(), 2, "{}", p.to_text());
    agrees("q read twice", &program(&src, &dims));

    let src = format!(
        "dim B, N\ndim Dk = 64\ninput x: [B, 3, N, Dk]\ninput cos: [N, Dk]\ninput sin: [N, Dk]\nfn rotate_half(t: [B, G, N, Dk]) -> [B, G, N, Dk] {{\n{HALVES}\n}}\noutput o = {rope}\n"
    );
    let p = plan(&src);
    assert_eq!(kinds(&p), ["map", "map"], "{}", p.to_text());
    agrees("an input rotated", &program(&src, DIMS));
}
