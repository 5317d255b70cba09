//! Section 7's calls as PyTorch code makes them, against PyTorch's values: each program runs
//! on the interpreter and, typed and optimized, on the native backend, and every output
//! must be PyTorch's (`tests/fixtures/make/make_section7.py`, NaN and infinities included).

use attnc::ir::DType;
use attnc::runtime::files::TensorFile;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions, Tensor};
use std::path::PathBuf;

mod common;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/section7")
        .join(name)
}

/// Runs `src` (its inputs named `CASE_..`) and compares each output `o` with `CASE_o`.
fn matches_pytorch(case: &str, src: &str) {
    let program = common::program(src, &[]);
    let opts = RunOptions {
        inputs: Some(fixture("inputs.safetensors")),
        ..RunOptions::default()
    };
    let bound = bind(&program, &opts).unwrap_or_else(|e| panic!("{case}: {e}"));
    let expected = TensorFile::open(&fixture("expected.safetensors")).unwrap();
    let want = |name: &str| -> Tensor {
        let key = format!("{case}_{name}");
        expected
            .get(&key)
            .and_then(|e| e.tensor)
            .unwrap_or_else(|| panic!("{key} is in the fixture"))
    };
    let interpreted = interpret(&program, &bound).unwrap_or_else(|e| panic!("{case}: {e}"));
    for (name, got) in &interpreted {
        common::assert_close(&format!("{case}: `{name}`, interpreter"), got, &want(name));
    }
    let optimized = attnc::opt::optimize(&program).program;
    for (stage, prog) in [("typed", &program), ("optimized", &optimized)] {
        let exe = Executable::compile(prog, &bound.dims).unwrap_or_else(|e| panic!("{case}: {e}"));
        let got = exe.run(&bound, &pool(1).unwrap()).unwrap();
        for (name, got) in &got {
            common::assert_close(&format!("{case}: `{name}`, native {stage}"), got, &want(name));
        }
    }
}

#[test]
fn var_clamps_its_divisor_at_zero() {
    matches_pytorch(
        "var",
        "dim N, M\ninput var_a: [N, 4]\ninput var_b: [M, 4]\n\
         output c2 = var_a.var(0, correction=2)\n\
         output c3 = var_b.var(0, correction=3)\n\
         output c1 = var_b.var(0, correction=1)\n",
    );
}

#[test]
fn an_empty_list_of_dims_reduces_every_axis() {
    matches_pytorch(
        "empty_dims",
        "dim N\ninput empty_dims_x: [N, 3]\nlet x = empty_dims_x\n\
         output sum = x.sum(dim=[])\noutput mean = x.mean(dim=[])\n\
         output amax = x.amax(dim=[])\noutput amin = x.amin(dim=[])\n\
         output var = x.var(dim=[])\noutput std = x.std(dim=[])\n\
         output keep = x.sum(dim=[], keepdim=True)\n",
    );
}

#[test]
fn stack_takes_a_list_or_a_tuple() {
    matches_pytorch(
        "stack",
        "dim N\ninput stack_x: [N, 4]\nlet x = stack_x\n\
         output s0 = stack([x, x * 2], dim=0)\n\
         output s1 = stack([x, x * 2, -x], dim=1)\n\
         output s2 = stack((x, x), dim=-1)\n",
    );
}

#[test]
fn the_tuples_of_chunk_and_split_are_indexed() {
    matches_pytorch(
        "tuples",
        "dim N\ninput tuples_x: [N, 4]\nlet x = tuples_x\n\
         output c0 = x.chunk(2, dim=-1)[0]\n\
         output s1 = x.split(1, dim=1)[1]\n\
         output last = x.chunk(2, dim=1)[-1]\n",
    );
}

#[test]
fn true_and_false_are_boolean_values() {
    matches_pytorch(
        "booleans",
        "dim N\ninput booleans_x: [N, 4]\nlet x = booleans_x\n\
         output full = full([N, 4], True)\n\
         output where = where(x > 0, True, False)\n\
         output mixed = where(x > 0, True, 0.5)\n\
         output and = full([N, 4], False) | (x > 0)\n",
    );
}

#[test]
fn floor_division_and_remainder_of_dims_are_numbers() {
    matches_pytorch(
        "dims",
        "dim N\ndim D = 4\ninput dims_x: [N, D]\n\
         output half = dims_x / (D // 2)\noutput rem = dims_x * (7 % D)\n",
    );
}

#[test]
fn softmax_of_a_scalar_reads_it_as_a_row_of_one() {
    matches_pytorch(
        "scalar_softmax",
        "dim N\ninput scalar_softmax_x: [N, 4]\n\
         output p = scalar_softmax_x.sum().softmax(-1)\n\
         output lp = scalar_softmax_x.sum().log_softmax(0)\n",
    );
}

#[test]
fn std_of_values_near_the_float_limit_does_not_overflow() {
    matches_pytorch(
        "large",
        "dim N\ninput large_x: [N, 2]\n\
         output std = large_x.std(0)\noutput std_all = large_x[:, : 1].std()\n",
    );
}

#[test]
fn long_of_floats_truncates_toward_zero() {
    matches_pytorch(
        "long",
        "input long_x: [2, 6]\n\
         output l = long_x.long()\n\
         output half = (long_x * 0.5).long()\n\
         output div = long_x.long() / 2\n",
    );
}

#[test]
fn a_shape_unpacks_into_dims() {
    matches_pytorch(
        "unpack",
        "dim B, N, D\ninput unpack_x: [B, N, D]\n\
         b, n, d = unpack_x.shape\n\
         h, w = unpack_x[0].size()\n\
         output v = unpack_x.view(b * n, d)\n\
         output s = unpack_x.sum(-1) / d\n\
         output t = unpack_x.view(b, h * w)\n",
    );
}

#[test]
fn a_slice_with_a_step_is_a_strided_view() {
    matches_pytorch(
        "step",
        "dim B, N, D, M\ninput step_x: [B, N, D]\ninput step_v: [M]\n\
         assert D % 2 == 0\nassert M >= 7\n\
         let even = step_x[..., 0::2]\n\
         let odd = step_x[..., 1::2]\n\
         output even = even\n\
         output odd = odd\n\
         output rot = stack((-odd, even), dim=-1).flatten(-2)\n\
         output flat = even.view(B, N * (D / 2))\n\
         output gram = even @ odd.transpose(-1, -2)\n\
         output rows = step_x[:, 1::2].sum(-1)\n\
         output a = step_v[1:7:3]\n\
         output b = step_v[0:7:3]\n\
         output c = step_v[1::4]\n\
         output d = step_v[::4]\n",
    );
}

/// The strides of `[2, 3, 8]` sliced with a step and viewed, as PyTorch returns them.
#[test]
fn a_slice_with_a_step_has_pytorchs_strides() {
    let src = "dim B, N, D\ninput x: [B, N, D]\nassert D % 4 == 0\n\
               let even = x[..., 0::2]\n\
               output even = even\n\
               output odd = x[..., 1::2]\n\
               output flat = even.view(B, N * (D / 2))\n\
               output split = even.view(B, N, 2, D / 4)\n\
               output rows = x[:, 0::2]\n";
    let program = common::program(src, &[("B", 2), ("N", 3), ("D", 8)]);
    let strides = |name: &str| -> Vec<i64> {
        let out = program.outputs.iter().find(|o| o.name == name).unwrap();
        let t = program.tensor_type(out.value);
        t.strides.iter().map(|p| program.dims.value(p).unwrap()).collect()
    };
    // torch.randn(2, 3, 8)[..., 0::2].stride() and so on
    assert_eq!(strides("even"), [24, 8, 2]);
    assert_eq!(strides("odd"), [24, 8, 2]);
    assert_eq!(strides("flat"), [24, 2]);
    assert_eq!(strides("split"), [24, 8, 4, 2]);
    assert_eq!(strides("rows"), [24, 16, 1]);
}

#[test]
fn arange_is_int64_and_promotes_as_in_pytorch() {
    let src = "dim P, D = 8, C = 6\ninput arange_pos: [P] int64\n\
               output inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2) / D))\n\
               output mask = torch.arange(C)[None, :] <= arange_pos[:, None]\n\
               output ints = arange(5) * 3 - 7\n\
               output half = arange(5) * 0.5\n\
               output f = arange(0.0, 5)\n\
               output sum = arange(1, 11, 2).sum()\n";
    matches_pytorch("arange", src);
    let program = common::program(src, &[]);
    let dtype = |name: &str| {
        let out = program.outputs.iter().find(|o| o.name == name).unwrap();
        program.tensor_type(out.value).dtype
    };
    // PyTorch's dtypes of the same expressions
    let want = [
        ("inv", DType::F32),
        ("mask", DType::Bool),
        ("ints", DType::I64),
        ("half", DType::F32),
        ("f", DType::F32),
    ];
    for (name, dt) in want {
        assert_eq!(dtype(name), dt, "{name}");
    }
}
