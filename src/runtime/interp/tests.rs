use super::*;
use crate::runtime::bind;
use crate::runtime::files::TensorFile;
use crate::runtime::testutil::{fixture, mha, mha_heads, Builder, Mask};
use crate::runtime::RunOptions;

/// Runs a program with no free dims on the given params and inputs.
fn run(program: &Program, params: Vec<Tensor>, inputs: Vec<Tensor>) -> Vec<(String, Tensor)> {
    let dims = program
        .dims
        .iter()
        .map(|(s, _)| program.dims.value(&Poly::sym(s)))
        .collect();
    interpret(program, &Bound { params, inputs, dims }).unwrap()
}

fn t(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::new(shape.to_vec(), data.to_vec())
}

fn iota(shape: &[usize]) -> Tensor {
    Tensor::new(shape.to_vec(), (0..numel(shape)).map(|i| i as f32).collect())
}

#[test]
fn transpose_then_contiguous_is_row_major() {
    let mut b = Builder::new();
    let x = b.input("x", &[2, 3]);
    let xt = b.node(Op::Transpose(0, 1), &[x], &[3, 2]);
    let xc = b.node(Op::Contiguous, &[xt], &[3, 2]);
    let flat = b.node(Op::View(vec![Poly::int(6)]), &[xc], &[6]);
    b.output("y", flat);
    let out = run(&b.finish(), vec![], vec![iota(&[2, 3])]);
    assert_eq!(out[0].1, t(&[6], &[0., 3., 1., 4., 2., 5.]));
}

#[test]
fn linear_and_broadcast_matmul_run_through_the_ir() {
    let mut b = Builder::new();
    let x = b.input("x", &[2, 1, 3]);
    let w = b.param("w", &[2, 3]);
    let bias = b.param("b", &[2]);
    let y = b.node(Op::Linear, &[x, w, bias], &[2, 1, 2]);
    let m = b.input("m", &[2, 4]);
    let z = b.node(Op::MatMul, &[y, m], &[2, 1, 4]);
    b.output("y", y);
    b.output("z", z);
    let params = vec![t(&[2, 3], &[1., 0., 0., 1., 1., 1.]), t(&[2], &[10., 20.])];
    let out = run(&b.finish(), params, vec![iota(&[2, 1, 3]), iota(&[2, 4])]);
    assert_eq!(out[0].1, t(&[2, 1, 2], &[10., 23., 13., 32.]));
    // [10, 23] @ [[0 1 2 3] [4 5 6 7]] and [13, 32] @ the same.
    assert_eq!(
        out[1].1,
        t(&[2, 1, 4], &[92., 125., 158., 191., 128., 173., 218., 263.])
    );
}

#[test]
fn scalars_compare_and_fill() {
    let mut b = Builder::new();
    let x = b.input("x", &[4]);
    let two = b.scalar(Op::Literal(2.0), &[]);
    let big = b.node(Op::Compare(crate::ir::CmpOp::Gt), &[x, two], &[4]);
    let neg = b.node(Op::Unary(UnaryOp::Neg), &[x], &[4]);
    let y = b.node(Op::MaskedFill, &[neg, big, two], &[4]);
    let e = b.node(Op::Unary(UnaryOp::Exp), &[y], &[4]);
    let sum = b.node(Op::Binary(BinaryOp::Sub), &[y, e], &[4]);
    b.output("y", y);
    b.output("big", big);
    b.output("sum", sum);
    let out = run(&b.finish(), vec![], vec![iota(&[4])]);
    assert_eq!(out[0].1.data, [0., -1., -2., 2.]);
    assert_eq!(out[1].1.data, [0., 0., 0., 1.]);
    assert_eq!(out[2].1.data[0], -1.0);
}

#[test]
fn a_loop_slices_with_its_variable_and_stacks_its_items() {
    let mut b = Builder::new();
    let x = b.input("x", &[2, 6]);
    let (zero, three) = (b.int(0), b.int(3));
    let items = b.for_loop("h", (zero, three), &[2, 2], |b, h| {
        let (start, end) = (h.mul(&Poly::int(2)), h.add(&Poly::int(1)).mul(&Poly::int(2)));
        let cols = b.node(Op::Slice { axis: 1, start, end }, &[x], &[2, 2]);
        let scale = b.scalar(Op::DimValue(h), &[]);
        b.node(Op::Binary(BinaryOp::Mul), &[cols, scale], &[2, 2])
    });
    let joined = b.node(Op::CatLoop(1), &[items], &[2, 6]);
    let stacked = b.node(Op::Stack(0), &[items], &[3, 2, 2]);
    let first = b.node(
        Op::Select {
            axis: 0,
            index: Poly::int(2),
        },
        &[stacked],
        &[2, 2],
    );
    b.output("joined", joined);
    b.output("last", first);
    let out = run(&b.finish(), vec![], vec![iota(&[2, 6])]);
    assert_eq!(out[0].1.data, [0., 0., 2., 3., 8., 10., 0., 0., 8., 9., 20., 22.]);
    assert_eq!(out[1].1, t(&[2, 2], &[8., 10., 20., 22.]));
}

#[test]
fn a_type_that_disagrees_with_the_result_is_an_internal_error() {
    let mut b = Builder::new();
    let x = b.input("x", &[2, 3]);
    let y = b.node(Op::Transpose(0, 1), &[x], &[2, 3]);
    b.output("y", y);
    let program = b.finish();
    let dims = vec![];
    let bound = Bound {
        params: vec![],
        inputs: vec![iota(&[2, 3])],
        dims,
    };
    let error = interpret(&program, &bound).unwrap_err();
    assert_eq!(error.code, None);
    assert!(error.message.contains("internal error"), "{error}");
}

/// The largest difference to `expected`, relative to its largest element.
fn relative_error(got: &Tensor, expected: &Tensor) -> f32 {
    assert_eq!(got.shape, expected.shape);
    let scale = expected.data.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = got
        .data
        .iter()
        .zip(&expected.data)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

/// Runs `program` on fixture `name` and compares every output with the expected one.
fn check_fixture(program: &Program, name: &str) {
    let opts = RunOptions {
        weights: Some(fixture(&format!("weights_{name}.safetensors"))),
        inputs: Some(fixture(&format!("inputs_{name}.safetensors"))),
        ..RunOptions::default()
    };
    let bound = bind::bind(program, &opts).unwrap();
    let expected = TensorFile::open(&fixture(&format!("expected_{name}.safetensors"))).unwrap();
    for (out, got) in interpret(program, &bound).unwrap() {
        let want = expected.get(&out).unwrap().tensor.unwrap();
        let error = relative_error(&got, &want);
        assert!(error < 1e-5, "{name}: `{out}` off by {error}");
    }
}

#[test]
fn attention_reproduces_the_pytorch_fixtures() {
    check_fixture(&mha(16, 4, Mask::Padding), "pad_b2_n7_d16_h4");
    check_fixture(&mha(32, 8, Mask::Causal), "causal_b3_n9_d32_h8");
    check_fixture(&mha(12, 3, Mask::None), "nomask_b1_n5_d12_h3");
}

#[test]
fn attention_head_by_head_reproduces_the_fixtures() {
    check_fixture(&mha_heads(16, 4, Mask::Padding), "pad_b2_n7_d16_h4");
    check_fixture(&mha_heads(32, 8, Mask::Causal), "causal_b3_n9_d32_h8");
}
