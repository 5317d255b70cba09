//! Plan-level tests of the elementwise primitives: plans built by hand,
//! run natively, compared with a float64 reference that follows PyTorch's float32 rules
//! (NaN, infinities and subnormal results included), on one thread and on two.

use attnc::ir::CmpOp;
use attnc::kernel::{Binary, Buffer, BufferKind, Expr, Kernel, KernelOp, Map, Operand, Plan, Unary};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{Bound, Tensor};

mod common;
use common::Rng;

fn op(buf: usize, offset: usize, strides: &[usize]) -> Operand {
    Operand {
        buf,
        offset,
        strides: strides.to_vec(),
    }
}

/// A plan of one kernel over inputs of the given lengths (buffers 0..) writing output
/// buffer `lens.len()` of `out_len` elements.
fn plan_of(kernel: KernelOp, lens: &[usize], out_len: usize) -> Plan {
    let mut buffers: Vec<Buffer> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| Buffer {
            kind: BufferKind::Input(i),
            len,
            name: format!("in{i}"),
        })
        .collect();
    let out = buffers.len();
    buffers.push(Buffer {
        kind: BufferKind::Output(0),
        len: out_len,
        name: "out".into(),
    });
    Plan {
        buffers,
        prologue: vec![],
        kernels: vec![Kernel {
            label: "test".into(),
            op: kernel,
        }],
        outputs: vec![("out".into(), out, vec![out_len])],
        arena_len: 0,
        derived_len: 0,
        flops: 0.0,
    }
}

/// Runs a plan of one kernel over `inputs` on one and on two threads; the two must agree
/// bit for bit.
fn run(kernel: KernelOp, inputs: &[Vec<f32>], out_len: usize) -> Vec<f32> {
    let lens: Vec<usize> = inputs.iter().map(Vec::len).collect();
    let plan = plan_of(kernel, &lens, out_len);
    let exe = Executable::from_plan(plan).unwrap();
    let bound = Bound {
        params: vec![],
        inputs: inputs
            .iter()
            .map(|d| Tensor::new(vec![d.len()], d.clone()))
            .collect(),
        dims: vec![],
    };
    let one = exe.run(&bound, &pool(1).unwrap()).unwrap().remove(0).1.data;
    let two = exe.run(&bound, &pool(2).unwrap()).unwrap().remove(0).1.data;
    let same = one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "1 and 2 threads differ");
    one
}

/// Values that exercise every range: zeros of both signs, subnormals, the edges of `exp`,
/// huge magnitudes, infinities, NaN, and ordinary numbers.
fn special() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        3.0,
        1e-40,
        -1e-40,
        1.4e-45,
        f32::MIN_POSITIVE,
        1e-20,
        -1e-20,
        9.0,
        -9.0,
        3.9,
        -4.0,
        20.0,
        -20.0,
        87.5,
        -87.5,
        88.8,
        -88.8,
        100.0,
        -100.0,
        1e10,
        -1e10,
        1e30,
        -1e30,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut rng = Rng(7);
    for _ in 0..40 {
        let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
        v.push((u - 0.5) * 16.0);
    }
    v
}

/// Whether `got` is `want` (the float64 reference) rounded to float32, within `ulps` units
/// in the last place; NaN and infinities must match exactly.
fn close(got: f32, want: f64, ulps: f32) -> bool {
    let want32 = want as f32;
    if want32.is_nan() || got.is_nan() {
        return want32.is_nan() && got.is_nan();
    }
    if want32.is_infinite() || got.is_infinite() {
        return got == want32;
    }
    let ulp = (want32.abs() * f32::EPSILON).max(1.4e-45);
    (got - want32).abs() <= ulps * ulp
}

/// A map of one primitive over `n` elements of every input, each read with `stride`.
fn map(expr: Vec<Expr>, inputs: usize, n: usize, stride: usize) -> KernelOp {
    KernelOp::Map(Map {
        shape: vec![n],
        inputs: (0..inputs).map(|i| op(i, 0, &[stride])).collect(),
        expr,
        out: op(inputs, 0, &[1]),
        rows_per_task: 1,
    })
}

/// Spreads `xs` over a buffer read with `stride` (the gaps hold garbage that must not leak).
fn strided(xs: &[f32], stride: usize) -> Vec<f32> {
    let mut v = vec![1234.5; (xs.len() - 1) * stride + 1];
    for (i, &x) in xs.iter().enumerate() {
        v[i * stride] = x;
    }
    v
}

fn check_unary(u: Unary, xs: &[f32], reference: impl Fn(f64) -> f64, ulps: f32) {
    for stride in [1, 3] {
        let expr = vec![Expr::Input(0), Expr::Unary(u, 0)];
        let got = run(map(expr, 1, xs.len(), stride), &[strided(xs, stride)], xs.len());
        for (&x, &g) in xs.iter().zip(&got) {
            let want = reference(x as f64);
            assert!(close(g, want, ulps), "{u:?}({x:e}) = {g:e}, want {want:e}");
        }
    }
}

#[test]
fn unary_primitives_follow_pytorch_over_the_whole_range() {
    let xs = special();
    check_unary(Unary::Neg, &xs, |x| -x, 0.0);
    check_unary(Unary::Abs, &xs, f64::abs, 0.0);
    check_unary(Unary::Sqrt, &xs, f64::sqrt, 0.5);
    check_unary(Unary::Rsqrt, &xs, |x| 1.0 / (x as f32).sqrt() as f64, 0.5);
    check_unary(Unary::Log, &xs, f64::ln, 1.0);
    check_unary(Unary::Tanh, &xs, f64::tanh, 2.0);
    check_unary(Unary::Erf, &xs, libm::erf, 2.0);
    check_unary(Unary::Sin, &xs, f64::sin, 1.0);
    check_unary(Unary::Cos, &xs, f64::cos, 1.0);
    check_unary(Unary::Not, &xs, |x| if x == 0.0 { 1.0 } else { 0.0 }, 0.0);
    // PyTorch: `1 / (1 + exp(-x))` in float32, so 0 where `exp(-x)` overflows.
    let sigmoid = |x: f64| match (-x as f32).exp().is_infinite() {
        true => 1.0 / (1.0 + f64::INFINITY),
        false => 1.0 / (1.0 + (-x).exp()),
    };
    check_unary(Unary::Sigmoid, &xs, sigmoid, 2.0);
    // `exp` keeps its clamp at ±88 until the layouts issue's full-range version lands.
    let inside: Vec<f32> = xs
        .iter()
        .copied()
        .filter(|x| x.is_nan() || x.abs() <= 87.5)
        .collect();
    check_unary(Unary::Exp, &inside, f64::exp, 2.0);
}

fn check_binary(b: Binary, pairs: &[(f32, f32)], reference: impl Fn(f64, f64) -> f64, ulps: f32) {
    let (xs, ys): (Vec<f32>, Vec<f32>) = pairs.iter().copied().unzip();
    for stride in [1, 2] {
        let expr = vec![Expr::Input(0), Expr::Input(1), Expr::Binary(b, 0, 1)];
        let inputs = [strided(&xs, stride), strided(&ys, stride)];
        let got = run(map(expr, 2, xs.len(), stride), &inputs, xs.len());
        for ((&x, &y), &g) in xs.iter().zip(&ys).zip(&got) {
            let want = reference(x as f64, y as f64);
            assert!(close(g, want, ulps), "{b:?}({x:e}, {y:e}) = {g:e}, want {want:e}");
        }
    }
}

/// Every pair of a few special values, and pairs of ordinary ones.
fn pairs() -> Vec<(f32, f32)> {
    let few = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.5,
        3.0,
        1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut v: Vec<(f32, f32)> = few
        .iter()
        .flat_map(|&a| few.iter().map(move |&b| (a, b)))
        .collect();
    let xs = special();
    v.extend(xs.iter().zip(xs.iter().rev()).map(|(&a, &b)| (a, b)));
    v
}

/// `torch.maximum`/`minimum`: NaN if either is NaN, else the first where it wins or ties.
fn extremum(keep_first: fn(f64, f64) -> bool) -> impl Fn(f64, f64) -> f64 {
    move |a, b| match (a.is_nan() || b.is_nan(), keep_first(a, b)) {
        (true, _) => f64::NAN,
        (false, true) => a,
        (false, false) => b,
    }
}

#[test]
fn binary_primitives_follow_pytorch_over_the_whole_range() {
    let p = pairs();
    check_binary(Binary::Add, &p, |a, b| a + b, 1.0);
    check_binary(Binary::Sub, &p, |a, b| a - b, 1.0);
    check_binary(Binary::Mul, &p, |a, b| a * b, 1.0);
    check_binary(Binary::Div, &p, |a, b| a / b, 1.0);
    check_binary(Binary::Pow, &p, f64::powf, 1.0);
    check_binary(Binary::Maximum, &p, extremum(|a, b| a >= b), 0.0);
    check_binary(Binary::Minimum, &p, extremum(|a, b| a <= b), 0.0);
    let truth = |x: f64| x != 0.0;
    check_binary(Binary::And, &p, |a, b| (truth(a) && truth(b)) as u8 as f64, 0.0);
    check_binary(Binary::Or, &p, |a, b| (truth(a) || truth(b)) as u8 as f64, 0.0);
}

/// `pow` with a constant exponent takes PyTorch's special cases: `x ** 0.5` is `sqrt(x)`
/// (NaN at `-inf`, `-0` at `-0`, where `powf` gives `inf` and `0`), `x ** 0` is 1 even at
/// NaN, `x ** 2` is `x * x`.
#[test]
fn pow_by_a_constant_takes_pytorchs_special_cases() {
    let xs = special();
    for c in [0.0f32, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.5, -3.0] {
        let expr = vec![Expr::Input(0), Expr::Const(c), Expr::Binary(Binary::Pow, 0, 1)];
        let got = run(map(expr, 1, xs.len(), 1), std::slice::from_ref(&xs), xs.len());
        for (&x, &g) in xs.iter().zip(&got) {
            let x64 = x as f64;
            let want = match c {
                0.0 => 1.0,
                1.0 => x64,
                2.0 => (x * x) as f64,
                3.0 => (x * x * x) as f64,
                -1.0 => 1.0 / x64,
                -2.0 => (1.0 / (x * x)) as f64,
                0.5 => x64.sqrt(),
                -0.5 => 1.0 / x64.sqrt(),
                _ => x64.powf(c as f64),
            };
            assert!(close(g, want, 1.0), "pow({x:e}, {c}) = {g:e}, want {want:e}");
            if c == 0.5 && x == 0.0 {
                assert_eq!(g.to_bits(), x.to_bits(), "sqrt keeps the sign of zero");
            }
        }
    }
}

#[test]
fn comparisons_and_select_treat_nan_as_pytorch_does() {
    let p = pairs();
    let (xs, ys): (Vec<f32>, Vec<f32>) = p.iter().copied().unzip();
    let n = xs.len();
    for (c, holds) in [
        (CmpOp::Lt, f32::lt as fn(&f32, &f32) -> bool),
        (CmpOp::Le, f32::le),
        (CmpOp::Gt, f32::gt),
        (CmpOp::Ge, f32::ge),
        (CmpOp::Eq, f32::eq),
        (CmpOp::Ne, f32::ne),
    ] {
        // where(x < y, x, y) and the comparison itself.
        let expr = vec![
            Expr::Input(0),
            Expr::Input(1),
            Expr::Compare(c, 0, 1),
            Expr::Select(2, 0, 1),
        ];
        let got = run(map(expr, 2, n, 1), &[xs.clone(), ys.clone()], n);
        for i in 0..n {
            let want = if holds(&xs[i], &ys[i]) { xs[i] } else { ys[i] };
            assert_eq!(got[i].to_bits(), want.to_bits(), "{c:?} {} {}", xs[i], ys[i]);
        }
    }
}
