//! The limits of a run through the binary: programs whose tensors do not fit (E0305),
//! zero-size tensors, usage limits, and output that never hurts the user.

use std::process::Output;

use attnc::runtime::files::save;
use attnc::runtime::Tensor;

mod common;
use common::{attnc, stderr, stdout};

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
    for stage in ["kernels", "clif"] {
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
fn an_input_with_a_free_dim_of_0_is_e0301() {
    let dir = std::env::temp_dir().join(format!("attnc-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inputs = dir.join("empty_input.safetensors");
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
