//! Golden tests of the `attnc` binary: exit codes, output formats, usage errors.

use std::process::Output;

mod common;
use common::{attnc, stderr, stdout};

#[test]
fn check_prints_every_binding_of_the_main_example() {
    let o = attnc(&["check", "examples/mha.attn"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "param   Wq ",
        "input   query",
        "let     q ",
        "output  out ",
        "output  attn",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    assert!(
        out.contains("non-contiguous, strides [N * D, Dk, D, 1]"),
        "q is transposed:\n{out}"
    );
}

#[test]
fn check_json_lists_bindings_with_sizes_where_dims_have_values() {
    let o = attnc(&[
        "check",
        "examples/mha.attn",
        "--format",
        "json",
        "--dim",
        "B=2",
        "--dim",
        "N=7",
        "--dim",
        "M=7",
        "--dim",
        "D=16",
        "--dim",
        "H=4",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    assert_eq!(v["ok"], true);
    let q = v["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "q")
        .unwrap();
    assert_eq!(q["shape"], "[B, H, N, Dk]");
    assert_eq!(q["contiguous"], false);
    assert_eq!(q["sizes"], serde_json::json!([2, 4, 7, 4]));
}

#[test]
fn sizes_are_left_out_where_a_free_dim_has_no_value() {
    let o = attnc(&["check", "examples/mha.attn", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let bindings = v["bindings"].as_array().unwrap();
    let wq = bindings.iter().find(|b| b["name"] == "Wq").unwrap();
    assert_eq!(wq["sizes"], serde_json::json!([512, 512]));
    let query = bindings.iter().find(|b| b["name"] == "query").unwrap();
    assert!(query.get("sizes").is_none());
}

#[test]
fn an_error_exits_1_with_a_rendered_diagnostic() {
    let o = attnc(&["check", "tests/ui/E0203.attn"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("error[E0203]"), "{err}");
    assert!(err.contains("tests/ui/E0203.attn:6:"), "{err}");
    assert!(err.contains(".contiguous()"), "{err}");
}

#[test]
fn bad_dim_overrides_are_usage_errors() {
    for bad in ["Dk=4", "X=3", "D=0", "D=abc", "D"] {
        let o = attnc(&["check", "examples/mha.attn", "--dim", bad]);
        assert_eq!(o.status.code(), Some(2), "--dim {bad}: {}", stderr(&o));
    }
    assert_eq!(
        attnc(&["check", "examples/mha.attn", "--bogus"]).status.code(),
        Some(2)
    );
    // Given twice, the first value won, silently.
    let o = attnc(&["check", "examples/mha.attn", "--dim", "D=16", "--dim", "D=32"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--dim D: given twice, as 16 and 32"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_constant_override_is_checked_again() {
    let o = attnc(&["check", "examples/mha.attn", "--dim", "D=500"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("error[E0205]"), "{}", stderr(&o));
}

#[test]
fn an_unreadable_file_names_the_file() {
    let o = attnc(&["check", "no/such/file.attn"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no/such/file.attn"));
}

#[test]
fn typed_ir_is_deterministic_and_names_no_paths() {
    let a = attnc(&["ir", "examples/mha_heads.attn", "--stage", "typed"]);
    let b = attnc(&["ir", "examples/mha_heads.attn", "--stage", "typed"]);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    assert!(!stdout(&a).contains("examples/"));
    assert!(stdout(&a).contains("for h in 0..H"));
}

#[test]
fn every_command_has_help() {
    for cmd in [
        &["--help"][..],
        &["check", "--help"],
        &["ir", "--help"],
        &["repl", "--help"],
    ] {
        let o = attnc(cmd);
        assert_eq!(o.status.code(), Some(0));
        assert!(stdout(&o).contains("Usage"));
    }
}

#[test]
fn optimized_ir_is_deterministic_and_has_no_loop() {
    let a = attnc(&["ir", "examples/mha_heads.attn", "--stage", "optimized"]);
    let b = attnc(&["ir", "examples/mha_heads.attn", "--stage", "optimized"]);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    let out = stdout(&a);
    assert!(!out.contains("for h") && out.contains("attention("), "{out}");
}

#[test]
fn stats_are_deterministic_but_for_the_time_on_the_last_line() {
    let run = || {
        let o = attnc(&[
            "ir",
            "examples/self_attention.attn",
            "--stage",
            "optimized",
            "--stats",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    let (a, b) = (run(), run());
    let (a_lines, b_lines): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    assert!(a_lines.last().unwrap().starts_with("time: "), "{a}");
    assert_eq!(a_lines[..a_lines.len() - 1], b_lines[..b_lines.len() - 1]);
    for part in [
        "==== STATS ====",
        "stop reason: saturated",
        "e-graph: ",
        "merge-linear",
        "cost before: ",
        "cost after: ",
    ] {
        assert!(a.contains(part), "missing `{part}` in:\n{a}");
    }
}

#[test]
fn explain_names_the_rules_that_prove_the_result() {
    let o = attnc(&[
        "ir",
        "examples/mha_heads.attn",
        "--stage",
        "optimized",
        "--explain",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for rule in ["lift-linear", "lift-gemm", "lift-cat-loop", "fuse-attention"] {
        assert!(out.contains(rule), "missing {rule} in:\n{out}");
    }
}

#[test]
fn optimizer_flags_need_the_optimized_stage() {
    let o = attnc(&["ir", "examples/mha.attn", "--stage", "typed", "--stats"]);
    assert_eq!(o.status.code(), Some(2));
}

const SMALL: [&str; 8] = ["--dim", "B=1", "--dim", "N=8", "--dim", "D=16", "--dim", "H=2"];

#[test]
fn run_uses_the_jit_by_default_and_agrees_with_the_interpreter() {
    let args = |backend: &'static str| {
        let mut a = vec!["run", "examples/mha.attn", "--backend", backend, "--dim", "M=5"];
        a.extend(SMALL);
        a
    };
    let (jit, interp) = (attnc(&args("jit")), attnc(&args("interp")));
    assert_eq!(jit.status.code(), Some(0), "{}", stderr(&jit));
    assert!(stdout(&jit).contains("(jit, "), "{}", stdout(&jit));
    let mut default = args("jit");
    default.drain(2..4);
    assert!(stdout(&attnc(&default)).contains("(jit, "));
    // Checksums print with 6 decimals; the backends agree to about 1e-6 here.
    let sums = |o: &Output| -> Vec<f64> {
        stdout(o)
            .lines()
            .filter_map(|l| l.split("checksum ").nth(1)?.trim().parse().ok())
            .collect()
    };
    let (a, b) = (sums(&jit), sums(&interp));
    assert_eq!(a.len(), 2);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-3 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn kernels_clif_and_asm_stages_need_every_free_dim() {
    for stage in ["kernels", "clif", "asm"] {
        let o = attnc(&["ir", "examples/self_attention.attn", "--stage", stage]);
        assert_eq!(o.status.code(), Some(1), "{stage}");
        assert!(stderr(&o).contains("error[E0304]"), "{}", stderr(&o));
    }
}

#[test]
fn the_kernel_plan_is_deterministic_and_shows_the_fused_kernels() {
    let args = |file: &'static str, stage: &'static str| {
        let mut a = vec!["ir", file, "--stage", stage];
        a.extend(SMALL);
        a
    };
    let a = attnc(&args("examples/self_attention.attn", "kernels"));
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(
        a.stdout,
        attnc(&args("examples/self_attention.attn", "kernels")).stdout
    );
    let plan = stdout(&a);
    for want in [
        "attention",
        "gemm",
        "bytes",
        "prologue (once per weights)",
        "output out",
    ] {
        assert!(plan.contains(want), "missing `{want}`:\n{plan}");
    }
    // With the probabilities an output, there is a softmax kernel and no flash attention.
    let o = attnc(&args("examples/causal.attn", "kernels"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("softmax") && !stdout(&o).contains("attention `"));
    let clif = attnc(&args("examples/self_attention.attn", "clif"));
    assert_eq!(clif.status.code(), Some(0), "{}", stderr(&clif));
    assert!(stdout(&clif).contains("function u1:"), "{}", stdout(&clif));
    assert!(stdout(&clif).contains("; attention kernel of k"));
    // The machine code of the same kernels, after register allocation, on stdout only.
    let asm = attnc(&args("examples/self_attention.attn", "asm"));
    assert_eq!(asm.status.code(), Some(0), "{}", stderr(&asm));
    assert!(
        stdout(&asm).contains("; attention kernel of k"),
        "{}",
        stdout(&asm)
    );
    assert!(stdout(&asm).contains("ret"), "{}", stdout(&asm));
    assert!(!stdout(&asm).contains("function u1:"), "{}", stdout(&asm));
    assert!(stderr(&asm).is_empty(), "{}", stderr(&asm));
}

#[test]
fn bench_json_has_every_key_and_positive_numbers() {
    let mut args = vec![
        "bench",
        "examples/self_attention.attn",
        "--format",
        "json",
        "--threads",
        "2",
    ];
    args.extend(SMALL);
    let o = attnc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    for key in ["median_ms", "min_ms", "iters", "gflops", "compile_ms"] {
        let x = v[key].as_f64().unwrap_or(-1.0);
        assert!(x > 0.0, "`{key}` is {}", v[key]);
    }
    assert!(v["min_ms"].as_f64() <= v["median_ms"].as_f64());
    // The compile time's phases, each a part of it.
    let phases = ["optimize_ms", "lower_ms", "validate_ms", "cranelift_ms"];
    let mut sum = 0.0;
    for key in phases {
        let x = v[key].as_f64().unwrap_or(-1.0);
        assert!(x >= 0.0, "`{key}` is {}", v[key]);
        sum += x;
    }
    assert!(v["optimize_ms"].as_f64() > Some(0.0) && v["cranelift_ms"].as_f64() > Some(0.0));
    assert!(sum <= v["compile_ms"].as_f64().unwrap(), "{v}");
}

#[test]
fn bench_profile_lists_every_kernel_with_its_share() {
    let plan = {
        let mut a = vec!["ir", "examples/self_attention.attn", "--stage", "kernels"];
        a.extend(SMALL);
        stdout(&attnc(&a))
    };
    let kernels = plan.lines().filter(|l| l.starts_with("  k")).count();
    assert!(kernels > 0 && plan.contains("moved per call:"), "{plan}");

    let mut args = vec!["bench", "examples/self_attention.attn", "--profile"];
    args.extend(SMALL);
    let o = attnc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('k')).collect();
    assert_eq!(
        rows.len() - 1,
        kernels,
        "a row per kernel, after the header:\n{text}"
    );
    let last: Vec<&str> = text.lines().rev().take(2).collect();
    assert!(
        last[1].starts_with("total") && last[1].ends_with("100.0%"),
        "{text}"
    );
    assert!(
        last[0].starts_with("call") && last[0].contains("of which the kernels are"),
        "{text}"
    );
    let compile = text
        .lines()
        .find(|l| l.starts_with("compile "))
        .expect("a compile line");
    for part in [
        "optimize",
        "iterations",
        "saturate",
        "extract",
        "lower",
        "cranelift",
        "functions for",
    ] {
        assert!(compile.contains(part), "no `{part}` in {compile}");
    }

    args.extend(["--format", "json"]);
    let o = attnc(&args);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let profile = v["profile"].as_array().expect("a profile array");
    assert_eq!(profile.len(), kernels);
    let share: f64 = profile.iter().map(|k| k["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9, "shares sum to {share}");
    let gemm = profile
        .iter()
        .find(|k| k["kernel"].as_str().unwrap().ends_with("gemm"));
    assert!(gemm.is_some_and(|k| k["gflops"].as_f64().unwrap() > 0.0 && k["gbps"].as_f64().unwrap() > 0.0));
}

const FIXTURE: [&str; 4] = [
    "--weights",
    "tests/fixtures/weights_pad_b2_n7_d16_h4.safetensors",
    "--inputs",
    "tests/fixtures/inputs_pad_b2_n7_d16_h4.safetensors",
];

#[test]
fn a_dim_that_makes_a_division_false_says_so_once_with_the_values() {
    let dims = ["--dim", "D=100", "--dim", "H=8", "--dim", "B=1", "--dim", "N=4"];
    let o = attnc(&[&["run", "examples/mha.attn"][..], &dims].concat());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("error[E0205]: `D = 100` is not a multiple of `H = 8`"),
        "{err}"
    );
    assert!(
        err.contains("hint: give `--dim D` a multiple of 8, such as 96 or 104"),
        "{err}"
    );
    assert!(!err.contains("assert"), "no hint to add a false assert: {err}");
    assert_eq!(
        err.matches("error[").count(),
        1,
        "the errors that follow are left out: {err}"
    );
}

#[test]
fn a_call_with_a_failed_argument_reports_no_shape_variable() {
    let src = "dim B, N\ndim D = 12, H = 5\ndim Dk = D / H\ninput x: [B, N, D]\n\
               fn f(a: [B, Q, Dk], m: [B, 1, Q]) -> [B, N, Dk] { a + m }\n\
               let y = x.view(B, N, H, Dk)\noutput out = f(y, x)\n";
    let path = std::env::temp_dir().join(format!("attnc-shape-var-{}.attn", std::process::id()));
    std::fs::write(&path, src).unwrap();
    let o = attnc(&["check", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    let err = stderr(&o);
    assert!(err.contains("`D = 12` is not a multiple of `H = 5`"), "{err}");
    assert!(!err.contains('Q'), "a shape variable is shown: {err}");
    assert_eq!(err.matches("error[").count(), 1, "{err}");
}

#[test]
fn an_input_that_disagrees_with_a_constant_dim_hints_the_dim_that_fits() {
    let o = attnc(&[&["run", "examples/mha.attn"][..], &FIXTURE].concat());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("error[E0301]: input `query` has size 16 on axis 2"),
        "{err}"
    );
    assert!(err.contains("hint: pass `--dim D=16`"), "{err}");
}

#[test]
fn a_weight_that_disagrees_with_a_constant_dim_hints_the_dim_that_fits() {
    // Without inputs the sizes come from the declarations (D = 512); the weights are D = 16.
    let weights = "tests/fixtures/weights_pad_b2_n7_d16_h4.safetensors";
    let args = [
        "run",
        "examples/mha.attn",
        "--weights",
        weights,
        "--dim",
        "B=2",
        "--dim",
        "N=7",
    ];
    let o = attnc(&[&args[..], &["--dim", "M=7", "--dim", "H=4"]].concat());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("error[E0303]: weight `linears.0.weight`"), "{err}");
    assert!(err.contains("hint: pass `--dim D=16`"), "{err}");
}

#[test]
fn bench_reads_weights_and_inputs_like_run() {
    let dims = ["--dim", "D=16", "--dim", "H=4", "--format", "json", "--seed", "3"];
    let o = attnc(&[&["bench", "examples/mha.attn"][..], &FIXTURE, &dims].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    assert!(v["median_ms"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    // The file decides the sizes: a size it contradicts is the same error as `run`'s.
    let o = attnc(&[&["bench", "examples/mha.attn"][..], &FIXTURE].concat());
    assert!(stderr(&o).contains("error[E0301]"), "{}", stderr(&o));
}
