//! A key/value cache as program state (`examples/kv_cache_step.attn`), against
//! `transformers`' LlamaModel with a StaticCache (`tests/fixtures/make/make_kv_cache.py`): a
//! prefill of five tokens then three decode steps, on the interpreter, through a
//! `Function` on the native backend (one plan per number of new tokens, none per
//! position), and through `attnc run` from states given as inputs, with the AVX-512 tile
//! product and without; the caches written in place; positions out of range refused.

mod common;

use attnc::ir::Program;
use attnc::kernel::{BufferKind, KernelOp};
use attnc::runtime::files::TensorFile;
use attnc::runtime::function::{Backend, Function, Input, Options, Weights};
use attnc::runtime::Tensor;
use common::{assert_close, attnc, example, program, scratch, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

const DIMS: [(&str, i64); 6] = [("L", 2), ("D", 32), ("H", 4), ("Hkv", 2), ("I", 64), ("C", 8)];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kv_cache")
        .join(name)
}

fn step(s: usize) -> TensorFile {
    TensorFile::open(&fixture(&format!("step{s}.safetensors"))).unwrap()
}

fn tensor(file: &TensorFile, name: &str) -> Tensor {
    file.get(name).unwrap().tensor.unwrap()
}

fn function(backend: Backend) -> Function {
    let options = Options {
        backend,
        threads: Some(2),
        ..Options::default()
    };
    let weights = Weights::File(fixture("weights.safetensors"));
    Function::new(program(&example("kv_cache_step.attn"), &DIMS), weights, options).unwrap()
}

fn call(f: &Function, x: &Tensor, position: &Tensor) -> Result<Tensor, attnc::runtime::RunError> {
    let inputs = [x, position].map(|t| Input {
        shape: &t.shape,
        data: &t.data,
    });
    let mut out = f.call(&inputs)?;
    assert_eq!(out.len(), 1, "the states are not outputs of a call");
    Ok(out.remove(0).1)
}

#[test]
fn prefill_then_decode_is_transformers_static_cache_on_both_backends() {
    for backend in [Backend::Interp, Backend::Jit] {
        let f = function(backend);
        assert!(f.state("k_cache").is_none(), "no state before the first call");
        for s in 0..4 {
            let file = step(s);
            let what = format!("{backend:?} step {s}");
            let out = call(&f, &tensor(&file, "x"), &tensor(&file, "cache_position")).unwrap();
            assert_close(&format!("{what}: out"), &out, &tensor(&file, "out"));
            for name in ["k_cache", "v_cache"] {
                let state = f.state(name).unwrap();
                assert_close(
                    &format!("{what}: {name}"),
                    &state,
                    &tensor(&file, &format!("{name}_after")),
                );
            }
        }
        if backend == Backend::Jit {
            let sizes: Vec<i64> = f.plans().iter().map(|p| size(&p.sizes, "N")).collect();
            assert_eq!(sizes, [5, 1], "a plan for the prefill, one for every decode step");
        }
        f.reset_state();
        let file = step(0);
        let again = call(&f, &tensor(&file, "x"), &tensor(&file, "cache_position")).unwrap();
        assert_close(&format!("{backend:?} after reset"), &again, &tensor(&file, "out"));
    }
}

fn size(sizes: &[(String, i64)], name: &str) -> i64 {
    sizes.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn a_position_outside_the_cache_is_an_error_naming_it() {
    for backend in [Backend::Interp, Backend::Jit] {
        let f = function(backend);
        let file = step(1);
        let err = call(&f, &tensor(&file, "x"), &Tensor::new(vec![1], vec![8.0])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("E0306"), "{backend:?}: {text}");
        assert!(
            text.contains(
                "input `cache_position` holds 8 at [0], outside the 8 positions of axis 3 of state `k_cache`"
            ),
            "{backend:?}: {text}"
        );
    }
}

#[test]
fn the_command_line_runs_a_step_from_states_given_as_inputs() {
    let temp = scratch("kv-cache");
    let dir = temp.path();
    for (tile, backend) in [(true, "jit"), (false, "jit"), (true, "interp")] {
        let out = dir.join(format!("out-{backend}-{tile}.safetensors"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_attnc"));
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        cmd.args([
            "run",
            "examples/kv_cache_step.attn",
            "--backend",
            backend,
            "--threads",
            "2",
        ]);
        for (name, value) in DIMS.iter().filter(|(n, _)| *n != "C") {
            cmd.arg(format!("--dim={name}={value}"));
        }
        cmd.arg("--weights").arg(fixture("weights.safetensors"));
        cmd.arg("--inputs").arg(fixture("step2.safetensors"));
        cmd.arg("-o").arg(&out);
        if !tile {
            cmd.env("ATTNC_NO_TILE", "1");
        }
        let done = cmd.output().unwrap();
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        let got = TensorFile::open(&out).unwrap();
        let want = step(2);
        let what = format!("{backend}, tile {tile}");
        assert_close(&what, &tensor(&got, "out"), &tensor(&want, "out"));
        assert_close(&what, &tensor(&got, "k_cache"), &tensor(&want, "k_cache_after"));
        assert_close(&what, &tensor(&got, "v_cache"), &tensor(&want, "v_cache_after"));
    }
}

/// The decode step's plan at a capacity of 2048 and one new token.
fn decode_plan() -> attnc::kernel::Plan {
    let dims = [("B", 1), ("N", 1), ("C", 2048)];
    let all: Vec<(&str, i64)> = DIMS
        .iter()
        .filter(|(n, _)| *n != "C")
        .copied()
        .chain(dims)
        .collect();
    let program: Program = program(&example("kv_cache_step.attn"), &all);
    let optimized = attnc::opt::optimize(&program).program;
    let bound = attnc::runtime::bind_dims(&optimized).unwrap();
    attnc::runtime::jit::plan(&optimized, &bound, u64::MAX).unwrap()
}

#[test]
fn a_decode_step_writes_its_new_rows_into_the_cache_and_copies_nothing_of_its_size() {
    let plan = decode_plan();
    let cache: usize = 2 * 2 * 2048 * 8;
    let states: Vec<usize> = (0..plan.buffers.len())
        .filter(|&b| matches!(plan.buffers[b].kind, BufferKind::State { .. }))
        .collect();
    assert_eq!(states.len(), 2, "k_cache and v_cache are donated");
    for k in plan.prologue.iter().chain(&plan.kernels) {
        for (o, shape, written) in k.op.operands() {
            let n: usize = shape.iter().product();
            let scatter = matches!(k.op, KernelOp::Scatter(_));
            assert!(
                !written || scatter || n < cache / 2,
                "{} writes {n} elements",
                k.label
            );
            if written && states.contains(&o.buf) {
                assert!(matches!(k.op, KernelOp::Scatter(_)), "{} writes a state", k.label);
            }
        }
    }
    let writes = plan
        .kernels
        .iter()
        .filter(|k| matches!(k.op, KernelOp::Scatter(_)));
    assert_eq!(writes.count(), 4, "a write per cache and layer");
    // The mask from positions is [N, C], read by every head through stride 0.
    for k in &plan.kernels {
        if let KernelOp::Attention(a) = &k.op {
            let mask = &a.mask.as_ref().expect("the mask from positions").mask;
            assert!(
                mask.strides[..a.batch.len()].iter().all(|&s| s == 0),
                "{}",
                k.label
            );
            assert_eq!(a.m, 2048, "the keys are the whole cache, read in place");
        }
    }
    let text = plan.to_text();
    assert!(text.contains("(read and written in place)"), "{text}");
    for (name, buf, _) in &plan.outputs {
        if name.ends_with("_cache") {
            assert!(states.contains(buf), "state {name} is its own buffer");
        }
    }
}

/// `src` with no weights, as a function on `backend`.
fn small(src: &str, backend: Backend) -> Function {
    let options = Options {
        backend,
        threads: Some(2),
        ..Options::default()
    };
    Function::new(program(src, &[]), Weights::Drawn { seed: 0 }, options).unwrap()
}

fn run(f: &Function, inputs: &[Tensor]) -> Vec<(String, Tensor)> {
    let inputs: Vec<Input> = inputs
        .iter()
        .map(|t| Input {
            shape: &t.shape,
            data: &t.data,
        })
        .collect();
    f.call(&inputs).unwrap()
}

// The expected values below are PyTorch's (2.15), printed by the same statements.

#[test]
fn a_write_through_a_slice_puts_each_row_at_its_position_the_last_of_equal_ones_winning() {
    let src = "dim N\ninput pos: [N] int64\ninput new: [2, N, 3]\nstate cache: [2, 5, 3]\n\
               cache[:, 1:4].index_copy_(1, pos, new)\noutput total = cache.sum(-1)\n";
    // new[b, k, :] = k + 1 + 10 b
    let new: Vec<f32> = (0..2)
        .flat_map(|b| (0..3).flat_map(move |k| [(k + 1 + 10 * b) as f32; 3]))
        .collect();
    let inputs = [
        Tensor::new(vec![3], vec![2.0, 0.0, 2.0]),
        Tensor::new(vec![2, 3, 3], new),
    ];
    for backend in [Backend::Interp, Backend::Jit] {
        let out = run(&small(src, backend), &inputs);
        let want = [0.0, 6.0, 0.0, 9.0, 0.0, 0.0, 36.0, 0.0, 39.0, 0.0];
        assert_eq!(out[0].1.data, want, "{backend:?}");
    }
}

/// The writes copy a row of the source at a time where they can: along the last axis (one
/// element a row) and from a transposed source (rows that are not contiguous) they must land
/// where PyTorch puts them just the same.
#[test]
fn a_write_along_the_last_axis_or_from_a_transposed_source_lands_where_pytorch_puts_it() {
    let src = "input pos: [3] int64\ninput p2: [2] int64\ninput s: [3, 2]\ninput s2: [2, 2, 2]\n\
               state c: [2, 4]\nstate d: [3, 2, 2]\n\
               c.index_copy_(1, pos, s.transpose(0, 1))\nd.index_copy_(0, p2, s2.transpose(1, 2))\n\
               output seen = c * 1.0\noutput seen2 = d * 1.0\n";
    let inputs = [
        Tensor::new(vec![3], vec![3.0, 0.0, 3.0]),
        Tensor::new(vec![2], vec![2.0, 0.0]),
        Tensor::new(vec![3, 2], (1..7).map(|v| v as f32).collect()),
        Tensor::new(vec![2, 2, 2], (1..9).map(|v| v as f32).collect()),
    ];
    for backend in [Backend::Interp, Backend::Jit] {
        let out = run(&small(src, backend), &inputs);
        assert_eq!(
            out[0].1.data,
            [3.0, 0.0, 0.0, 5.0, 4.0, 0.0, 0.0, 6.0],
            "{backend:?}"
        );
        let want = [5.0, 7.0, 6.0, 8.0, 0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(out[1].1.data, want, "{backend:?}");
    }
}

#[test]
fn a_view_taken_before_a_write_sees_it_and_index_copy_copies() {
    let src = "input pos: [1] int64\ninput s: [1, 2]\ninput x: [4, 2]\nstate c: [3, 2]\n\
               let row = c[1]\nc.index_copy_(0, pos, s)\noutput seen = row * 1.0\n\
               output y = x.index_copy(0, pos + 2, s)\noutput total = x.sum()\n";
    let x = Tensor::new(vec![4, 2], (0..8).map(|v| v as f32).collect());
    let inputs = [
        Tensor::new(vec![1], vec![1.0]),
        Tensor::new(vec![1, 2], vec![5.0, 6.0]),
        x,
    ];
    for backend in [Backend::Interp, Backend::Jit] {
        let out = run(&small(src, backend), &inputs);
        assert_eq!(out[0].1.data, [5.0, 6.0], "{backend:?}: a view aliases the state");
        assert_eq!(
            out[1].1.data,
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 6.0],
            "{backend:?}"
        );
        assert_eq!(out[2].1.data, [28.0], "{backend:?}: the input is not written");
    }
}

#[test]
fn an_operand_read_before_a_write_in_one_expression_sees_it_as_in_pytorch() {
    let src = "input pos: [1] int64\ninput s: [1, 2]\nstate c: [3, 2]\n\
               output both = c + c.index_copy_(0, pos, s)\n";
    let inputs = [
        Tensor::new(vec![1], vec![1.0]),
        Tensor::new(vec![1, 2], vec![5.0, 6.0]),
    ];
    for backend in [Backend::Interp, Backend::Jit] {
        let out = run(&small(src, backend), &inputs);
        assert_eq!(out[0].1.data, [0.0, 0.0, 10.0, 12.0, 0.0, 0.0], "{backend:?}");
    }
}

#[test]
fn index_copy_is_checked_as_pytorch_checks_it() {
    let cases = [
        (
            "input i: [1]\nstate c: [3, 2]\nc.index_copy_(0, i, c[0:1])",
            "E0208",
            "must be int64 of rank 1",
        ),
        (
            "input i: [1, 1] int64\nstate c: [3, 2]\nc.index_copy_(0, i, c[0:1])",
            "E0208",
            "found int64 [1, 1]",
        ),
        (
            "input i: [2] int64\nstate c: [3, 2]\nc.index_copy_(0, i, c[0:1])",
            "E0201",
            "must be [2, 2]",
        ),
        (
            "input i: [1] int64\nstate c: [3, 2]\nc.index_copy_(2, i, c[0:1])",
            "E0204",
            "",
        ),
        (
            "state c: [3, 2]\noutput c = c[0]",
            "E0102",
            "has the name of a state",
        ),
    ];
    for (src, code, text) in cases {
        let checked = attnc::driver::check_source(src, &[]).unwrap();
        let d = checked
            .diagnostics
            .first()
            .unwrap_or_else(|| panic!("no error for {src}"));
        assert_eq!(d.code.to_string(), code, "{src}: {}", d.message);
        assert!(d.message.contains(text), "{src}: {}", d.message);
    }
}

/// A call that fails at a later write leaves every state as the call before left it: the
/// earlier writes of the failed call are undone, and the next call goes on from there.
#[test]
fn a_failed_call_leaves_no_state_half_written() {
    // `b`'s window is two rows, `a`'s three: position 2 passes `a`'s write and fails
    // `b`'s, which reads `a` after its write and so runs after it.
    let src = "input pos: [1] int64\ninput s: [1, 2]\nstate a: [3, 2]\nstate b: [3, 2]\n\
               a.index_copy_(0, pos, s)\nb[0:2].index_copy_(0, pos, s * a.sum())\n\
               output total = b.sum()\n";
    let (one, two) = (Tensor::new(vec![1], vec![1.0]), Tensor::new(vec![1], vec![2.0]));
    let s = Tensor::new(vec![1, 2], vec![5.0, 6.0]);
    for backend in [Backend::Interp, Backend::Jit] {
        let f = small(src, backend);
        run(&f, &[one.clone(), s.clone()]);
        let before = (f.state("a").unwrap(), f.state("b").unwrap());
        assert_eq!(before.0.data, [0.0, 0.0, 5.0, 6.0, 0.0, 0.0], "{backend:?}");
        assert_eq!(before.1.data, [0.0, 0.0, 55.0, 66.0, 0.0, 0.0], "{backend:?}");
        let given: Vec<Input> = [&two, &s]
            .into_iter()
            .map(|t| Input {
                shape: &t.shape,
                data: &t.data,
            })
            .collect();
        let err = f.call(&given).unwrap_err().to_string();
        assert!(
            err.contains("E0306") && err.contains("holds 2 at [0]"),
            "{backend:?}: {err}"
        );
        assert_eq!(f.state("a").unwrap().data, before.0.data, "{backend:?}: a");
        assert_eq!(f.state("b").unwrap().data, before.1.data, "{backend:?}: b");
        // The next call starts from the states the last good call left.
        let out = run(&f, &[Tensor::new(vec![1], vec![0.0]), s.clone()]);
        assert_eq!(
            f.state("a").unwrap().data,
            [5.0, 6.0, 5.0, 6.0, 0.0, 0.0],
            "{backend:?}"
        );
        assert_eq!(out[0].1.data, [110.0 + 132.0 + 55.0 + 66.0], "{backend:?}");
    }
}

/// `bench --profile` on a decode step accounts for the step by its kernels: a row for each
/// kernel of the plan (the cache writes and the attention over the cache among them),
/// whose times sum to the total it reports, timed inside the calls whose mean it gives
/// beside it. Structure only: no speed is asserted.
#[test]
fn the_profile_of_a_decode_step_lists_every_kernel_within_the_call() {
    let dims = ["--dim", "B=1", "--dim", "N=1", "--dim", "C=64"];
    let mut args = vec!["ir", "examples/kv_cache_step.attn", "--stage", "kernels"];
    args.extend(dims);
    let o = attnc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan = stdout(&o);
    let kernels = plan.lines().filter(|l| l.starts_with("  k")).count();
    assert!(kernels > 0, "{plan}");

    let mut args = vec![
        "bench",
        "examples/kv_cache_step.attn",
        "--profile",
        "--format",
        "json",
    ];
    args.extend(dims);
    let o = attnc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let rows = v["profile"].as_array().expect("a profile array");
    let mut names: Vec<&str> = rows.iter().map(|r| r["kernel"].as_str().unwrap()).collect();
    names.sort_by_key(|n| n[1..].split(' ').next().unwrap().parse::<usize>().unwrap());
    assert_eq!(names.len(), kernels, "{names:?}");
    for (i, name) in names.iter().enumerate() {
        assert!(
            name.starts_with(&format!("k{i} ")),
            "kernel {i} is listed once: {names:?}"
        );
    }
    for kind in ["scatter", "attention", "gemm"] {
        let n = names.iter().filter(|n| n.ends_with(kind)).count();
        assert!(n > 0, "no {kind} kernel in {names:?}");
    }
    let (sum, total) = (
        rows.iter().map(|r| r["ms"].as_f64().unwrap()).sum::<f64>(),
        v["profile_kernels_ms"].as_f64().unwrap(),
    );
    assert!((sum - total).abs() <= 1e-9 * total, "{sum} against {total}");
    let call = v["profile_step_ms"].as_f64().unwrap();
    assert!(
        0.0 < total && total <= call,
        "kernels {total} ms in a call of {call} ms"
    );
}
