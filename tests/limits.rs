//! The limits of a run through the binary: programs whose tensors do not fit (E0305),
//! zero-size tensors, usage limits, and output that never hurts the user.

use std::process::Output;

use attnc::dims::Poly;
use attnc::runtime::files::save;
use attnc::runtime::Tensor;
use std::fs::OpenOptions;
use std::io::Read;
#[cfg(unix)]
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{attnc, scratch, stderr, stdout};

const WRAP: [&str; 8] = [
    "--dim", "A=384773", "--dim", "B=49477", "--dim", "C=34724", "--dim", "D=27905",
];

/// Expect exit code `code` and every fragment on stderr.
fn expect(o: &Output, code: i32, fragments: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    for f in fragments {
        assert!(err.contains(f), "`{f}` missing from:\n{err}");
    }
}

fn with(base: &[&str], more: &[&str]) -> Output {
    attnc(&[base, more].concat())
}

#[test]
fn a_product_of_2_pow_64_plus_4_elements_is_e0305_on_every_path() {
    let run = ["run", "tests/limits/wrap.attn"];
    let needs = "tensor `y` of shape [384773, 49477, 34724, 27905] needs 73786976294838206480 bytes";
    for backend in ["jit", "interp"] {
        let o = with(&run, &[&WRAP[..], &["--backend", backend]].concat());
        expect(&o, 1, &["error[E0305]", needs, "overflows 64 bits"]);
    }
    for stage in ["kernels", "clif", "asm"] {
        let o = with(&["ir", "tests/limits/wrap.attn", "--stage", stage], &WRAP);
        expect(&o, 1, &["error[E0305]", needs]);
        assert!(stdout(&o).is_empty());
    }
    let o = with(&["bench", "tests/limits/wrap.attn"], &WRAP);
    expect(&o, 1, &["error[E0305]", needs]);
}

#[test]
fn attention_scores_beyond_the_budget_are_e0305_before_anything_is_allocated() {
    let dims = [
        "--dim", "D=16", "--dim", "H=4", "--dim", "B=1", "--dim", "N=40000", "--dim", "M=40000",
    ];
    // 25.6 GB of scores against a budget of 1 GB: refused at once, not aborted.
    let o = with(&["run", "examples/mha.attn", "--max-memory", "1000000000"], &dims);
    expect(
        &o,
        1,
        &[
            "error[E0305]",
            "tensor `attn` of shape [1, 4, 40000, 40000]",
            "1000000000 bytes",
        ],
    );
    let o = with(
        &["bench", "examples/mha.attn", "--max-memory", "1000000000"],
        &dims,
    );
    expect(&o, 1, &["error[E0305]", "tensor `attn`"]);
    let o = with(
        &[
            "ir",
            "examples/mha.attn",
            "--stage",
            "kernels",
            "--max-memory",
            "1000000000",
        ],
        &dims,
    );
    expect(&o, 1, &["error[E0305]", "tensor `attn`"]);
}

#[test]
fn a_constant_dim_of_2_pow_31_is_e0305() {
    let o = attnc(&["run", "tests/limits/huge_const.attn"]);
    expect(
        &o,
        1,
        &["error[E0305]", "tensor `x` of shape [2147483648, 2147483648]"],
    );
    let o = attnc(&["ir", "tests/limits/huge_const.attn", "--stage", "kernels"]);
    expect(&o, 1, &["error[E0305]"]);
}

#[test]
fn the_plan_itself_is_checked_against_the_budget() {
    // The params and each value fit 4.4 MB; everything the plan holds at once does not.
    let dims = ["--dim", "B=2", "--dim", "N=7", "--dim", "M=7", "--max-memory"];
    let o = with(
        &["run", "examples/mha.attn", "--backend", "interp"],
        &[&dims[..], &["5400000"]].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = with(&["run", "examples/mha.attn"], &[&dims[..], &["5400000"]].concat());
    expect(&o, 1, &["error[E0305]", "the kernel plan"]);
}

#[test]
fn max_memory_and_threads_have_usage_limits() {
    let base = [
        "run",
        "examples/mha.attn",
        "--dim",
        "B=1",
        "--dim",
        "N=3",
        "--dim",
        "M=3",
    ];
    for bad in [
        &["--threads", "1025"][..],
        &["--threads", "0"],
        &["--max-memory", "0"],
        &["--max-memory", "x"],
    ] {
        let o = with(&base, bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
    let o = with(&base, &["--threads", "1024"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn derived_sizes_of_0_run_on_both_backends() {
    for n in ["1", "3"] {
        let mut printed = Vec::new();
        for backend in ["jit", "interp"] {
            let args = ["run", "tests/limits/empty_slices.attn", "--dim", "B=2", "--dim"];
            let o = with(&args, &[&format!("N={n}") as &str, "--backend", backend]);
            assert_eq!(o.status.code(), Some(0), "{backend}: {}", stderr(&o));
            let out = stdout(&o);
            printed.push(out.lines().take(2).map(String::from).collect::<Vec<_>>());
        }
        assert_eq!(printed[0], printed[1]);
        let y = format!("y  [2, {n}, 0]  checksum 0.000000");
        assert!(printed[0][0].contains(&y), "{:?}", printed[0]);
    }
}

#[test]
fn a_product_of_no_rows_runs_on_both_backends() {
    // Its tiles were cut by the tasks' count, which is 0 here: a division by zero.
    for backend in ["jit", "interp"] {
        let args = [
            "run",
            "tests/limits/empty_product.attn",
            "--dim",
            "B=2",
            "--dim",
            "N=1",
        ];
        let o = with(&args, &["--backend", backend]);
        assert_eq!(o.status.code(), Some(0), "{backend}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(
            out.contains("p  [2, 0, 36864]  checksum 0.000000"),
            "{backend}: {out}"
        );
    }
}

#[test]
fn an_input_with_a_free_dim_of_0_is_e0301() {
    let temp = scratch("limits-empty");
    let inputs = temp.path().join("empty_input.safetensors");
    let x = Tensor::new(vec![2, 0, 4], vec![]);
    save(&inputs, &[("x".to_string(), x)]).unwrap();
    let o = attnc(&[
        "run",
        "tests/limits/empty_slices.attn",
        "--inputs",
        inputs.to_str().unwrap(),
    ]);
    expect(
        &o,
        1,
        &[
            "error[E0301]",
            "input `x` has size 0 on axis 1",
            "`N`",
            "at least 1",
        ],
    );
    let o = attnc(&[
        "run",
        "tests/limits/empty_slices.attn",
        "--dim",
        "B=0",
        "--dim",
        "N=2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

fn binary() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_attnc"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// A program of `lines` bindings: its `check` table is far larger than a pipe's buffer.
fn long_program(dir: &Path, lines: usize) -> PathBuf {
    let mut src = String::from("dim N\ninput x: [N, 4]\nlet y0 = x * 1.0\n");
    for i in 1..lines {
        src.push_str(&format!("let y{i} = y{} * 1.0\n", i - 1));
    }
    src.push_str(&format!("output y = y{}\n", lines - 1));
    let path = dir.join("long.attn");
    std::fs::write(&path, src).unwrap();
    path
}

#[test]
fn a_closed_stdout_pipe_ends_quietly_with_exit_0() {
    let temp = scratch("limits-pipe");
    let dir = temp.path();
    let file = long_program(dir, 5000);
    let mut child = binary()
        .args(["check", file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe is closed here, with most of the table unwritten.
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

#[test]
fn a_full_disk_is_an_error_with_exit_1() {
    let Ok(full) = OpenOptions::new().write(true).open("/dev/full") else {
        return; // not on this system
    };
    let o = binary()
        .args(["check", "examples/mha.attn"])
        .stdout(Stdio::from(full))
        .output()
        .unwrap();
    expect(
        &o,
        1,
        &["error: cannot write the output", "No space left on device"],
    );
}

const SMALL: [&str; 8] = ["--dim", "B=1", "--dim", "N=2", "--dim", "M=2", "--dim", "D=16"];

#[cfg(unix)]
#[test]
fn output_writes_through_a_symlink_atomically() {
    let temp = scratch("limits-symlink");
    let dir = temp.path();
    let (real, link) = (dir.join("real.safetensors"), dir.join("link.safetensors"));
    std::fs::write(&real, "old").unwrap();
    std::os::unix::fs::symlink("real.safetensors", &link).unwrap();
    let o = with(
        &["run", "examples/mha.attn", "-o", link.to_str().unwrap()],
        &SMALL,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let saved = attnc::runtime::files::TensorFile::open(&real).unwrap();
    assert!(saved.get("out").is_some() && saved.get("attn").is_some());
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "no temporary left behind: {names:?}");
}

#[cfg(unix)]
#[test]
fn output_refuses_fifos_and_directories() {
    let temp = scratch("limits-special");
    let dir = temp.path();
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let o = with(
        &["run", "examples/mha.attn", "-o", fifo.to_str().unwrap()],
        &SMALL,
    );
    expect(&o, 1, &["it is a FIFO, not a regular file"]);
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    let o = with(&["run", "examples/mha.attn", "-o", dir.to_str().unwrap()], &SMALL);
    expect(&o, 1, &["it is a directory, not a regular file"]);
}

#[test]
fn wide_tables_do_not_panic() {
    let temp = scratch("limits-wide");
    let dir = temp.path();
    let name = "x".repeat(70_000);
    let src = format!("dim N\ninput {name}: [N, 4]\noutput {name}_out = {name} * 2.0\n");
    let file = dir.join("wide.attn");
    std::fs::write(&file, src).unwrap();
    let o = attnc(&["check", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).lines().all(|l| l.len() > 70_000));
    let o = attnc(&["run", file.to_str().unwrap(), "--dim", "N=2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("{name}_out  [2, 4]  checksum")));
}

#[test]
fn the_optimizer_is_bounded_by_nodes_and_fuses_a_3000_statement_program() {
    let mut src = String::from("dim N, D\ninput x: [N, D]\n");
    src.push_str(&"let x = x * 1.0 + 0.0\n".repeat(3000));
    src.push_str("output y = x\n");
    let checked = attnc::driver::check_source(&src, &[]).unwrap();
    let optimized = attnc::opt::optimize_and_compare(&checked.program);
    let stats = &optimized.stats;
    assert_eq!(stats.fallback, None);
    assert_eq!(stats.stop_reason, "saturated");
    assert!(stats.nodes <= 4 * 3 * 3000, "{} nodes", stats.nodes);
    // Each statement's multiply and add become one kernel.
    assert_eq!(stats.before.map(|c| c.kernels), Some(6000));
    assert_eq!(stats.after.kernels, 3000);
}

/// Fusion makes a chain of elementwise statements one map, its formula as deep as the
/// chain: lowering it walked the formula by recursion, and 20,000 statements overflowed the
/// stack (an abort, on the native backend only).
#[test]
fn a_20000_statement_elementwise_chain_runs_natively() {
    let temp = scratch("limits-chain");
    let dir = temp.path();
    let mut src = String::from("dim N\ninput x: [N]\nlet y = x\n");
    src.push_str(&"let y = y + x\n".repeat(20_000));
    src.push_str("output y = y\n");
    let file = dir.join("chain.attn");
    std::fs::write(&file, src).unwrap();
    let o = attnc(&["run", file.to_str().unwrap(), "--dim", "N=4"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("y  [4]  checksum"), "{}", stdout(&o));
}

#[test]
fn the_repl_lists_a_dim_with_a_name_wider_than_65535_characters() {
    let name = "D".repeat(70_000);
    let mut child = binary()
        .args(["repl"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = format!("dim {name} = 4\n:dims\n:quit\n");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&name), "{}", stderr(&o));
}

/// Functions inline at most 64 calls deep: a chain of 70 distinct functions is refused as
/// too deep, not as a function calling itself (what the message said before).
#[test]
fn a_chain_of_70_distinct_calls_is_too_deep_not_recursive() {
    let mut src = String::from("dim N\ninput x: [N]\nfn f0(a: [N]) -> [N] { a + 1.0 }\n");
    for i in 1..70 {
        src.push_str(&format!("fn f{i}(a: [N]) -> [N] {{ f{}(a) }}\n", i - 1));
    }
    src.push_str("output y = f69(x)\n");
    let checked = attnc::driver::check_source(&src, &[]).unwrap();
    let messages: Vec<&str> = checked.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        messages,
        ["the call of `f5` nests calls more than 64 deep: functions are inlined"]
    );
    assert_eq!(checked.diagnostics[0].code.to_string(), "E0101");
}

/// Checking is close to linear in the rank. Comparing the strides `N^k` and `N^(k+1)` of
/// an elementwise result once expanded `(N + 1)^k`, which made a rank-30,000 input run for
/// hours; rank 8,000 now checks in well under a second.
#[test]
fn a_rank_8000_elementwise_program_checks() {
    let shape = vec!["N"; 8000].join(", ");
    let src = format!(
        "dim N\ninput x: [{shape}]\noutput y = (x * 2.0).view(-1)\noutput z = exp(x.transpose(0, 1))\n"
    );
    let checked = attnc::driver::check_source(&src, &[]).unwrap();
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    let prog = &checked.program;
    let ty = |name: &str| {
        let b = prog.bindings.iter().find(|b| b.name == name).unwrap();
        prog.tensor_type(b.value).clone()
    };
    let (y, z) = (ty("y"), ty("z"));
    assert_eq!(y.rank(), 1);
    assert_eq!(z.rank(), 8000);
    // Laid out in the transposed input's order: axis 1 outermost, then axis 0 over the rest.
    let inner = z.shape[2..].iter().fold(Poly::int(1), |p, d| p.mul(d));
    assert!(!z.varies());
    assert!(prog.dims.equal(&z.strides[0], &inner));
    assert!(prog.dims.equal(&z.strides[1], &inner.mul(&z.shape[0])));
}
