//! Plan-level tests of the elementwise primitives and the row kernel: plans built by hand,
//! run natively, compared with a float64 reference that follows PyTorch's float32 rules
//! (NaN, infinities and subnormal results included), on one thread and on two.

use attnc::ir::CmpOp;
use attnc::kernel::{
    BinaryOp, Buffer, BufferKind, Expr, Kernel, KernelOp, Map, Operand, Plan, ReduceOp, Row, Stage, UnaryOp,
};
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
    let run = |threads| exe.run(&bound, &pool(threads).unwrap()).unwrap().remove(0).1;
    let (one, two) = (run(1).data.into_vec(), run(2).data);
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

fn check_unary(u: UnaryOp, xs: &[f32], reference: impl Fn(f64) -> f64, ulps: f32) {
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
    check_unary(UnaryOp::Neg, &xs, |x| -x, 0.0);
    check_unary(UnaryOp::Abs, &xs, f64::abs, 0.0);
    check_unary(UnaryOp::Sqrt, &xs, f64::sqrt, 0.5);
    check_unary(UnaryOp::Rsqrt, &xs, |x| 1.0 / (x as f32).sqrt() as f64, 0.5);
    check_unary(UnaryOp::Log, &xs, f64::ln, 1.0);
    check_unary(UnaryOp::Tanh, &xs, f64::tanh, 2.0);
    check_unary(UnaryOp::Erf, &xs, libm::erf, 2.0);
    check_unary(UnaryOp::Sin, &xs, f64::sin, 1.0);
    check_unary(UnaryOp::Cos, &xs, f64::cos, 1.0);
    check_unary(UnaryOp::Not, &xs, |x| if x == 0.0 { 1.0 } else { 0.0 }, 0.0);
    check_unary(UnaryOp::Sigmoid, &xs, sigmoid, 2.0);
    check_unary(UnaryOp::Exp, &xs, f64::exp, 2.0);
}

/// Every magnitude from the subnormals to 20 (log-spaced, both signs) and a fine linear
/// sweep of [-10, 10]: where the vector polynomials change formula or saturate.
fn sweep() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=40_000).map(|i| -10.0 + i as f32 * 5e-4).collect();
    for i in 0..=20_000 {
        let m = 10f32.powf(-44.0 + 45.3 * i as f32 / 20_000.0);
        v.extend([m, -m]);
    }
    v
}

/// Every unary primitive's native code against its own `eval` (the meaning the interpreter
/// runs), over the special values and the dense sweep: a primitive added to `UnaryOp` is
/// tested natively without a line here. 4 ulps leaves room for the vector polynomials;
/// NaN, the infinities and exact results must match.
#[test]
fn every_unary_primitive_computes_its_eval_natively() {
    let mut xs = special();
    xs.extend(sweep());
    for &u in UnaryOp::ALL {
        check_unary(u, &xs, |x| f64::from(u.eval(x as f32)), 4.0);
    }
}

/// The same for every binary primitive over every pair of special values.
#[test]
fn every_binary_primitive_computes_its_eval_natively() {
    let p = pairs();
    for &b in BinaryOp::ALL {
        check_binary(b, &p, |x, y| f64::from(b.eval(x as f32, y as f32)), 1.0);
    }
}

/// Every reduction against a fold of its own `combine` from its `identity`, over rows whose
/// sums are exact in any order (small integers), with NaN, infinities and signed zeros, so
/// the results must match to the bit.
#[test]
fn every_reduction_computes_its_fold_natively() {
    let n = 37;
    let ints: Vec<f32> = (0..n).map(|i| (i as f32 * 7.0) % 23.0 - 11.0).collect();
    let mut rows = vec![ints.clone(), vec![0.0; n], vec![-0.0; n]];
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for at in [0, n / 2, n - 1] {
            let mut r = ints.clone();
            r[at] = special;
            rows.push(r);
        }
    }
    let mut both = ints.clone();
    (both[3], both[30]) = (f32::INFINITY, f32::NEG_INFINITY);
    rows.push(both);
    let x: Vec<f32> = rows.concat();
    for &r in ReduceOp::ALL {
        let mut f = F::default();
        f.add(Expr::Input(0));
        let kernel = KernelOp::Row(Row {
            rows: vec![rows.len()],
            n,
            inputs: vec![op(0, 0, &[n, 1])],
            stages: vec![stage(r, f)],
            write: vec![Expr::Reduced(0)],
            out: op(1, 0, &[1]),
            rows_per_task: 2,
        });
        let got = run(kernel, std::slice::from_ref(&x), rows.len());
        for (row, g) in rows.iter().zip(&got) {
            let want = row.iter().fold(r.identity(), |acc, &v| r.combine(acc, v));
            let same = g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan());
            assert!(same, "{r:?} of {row:?} = {g}, want {want}");
        }
    }
}

/// Beyond 9.01, tanh rounds to ±1 exactly, so tanh-GELU of a large negative argument
/// (`0.5 x (1 + tanh(..))`) is -0.0 as in PyTorch, not a tiny multiple of `x`.
#[test]
fn tanh_saturates_to_exactly_one() {
    let xs: Vec<f32> = [9.02f32, 9.5, 10.0, 20.0, 43.6, 1e30, f32::MAX, f32::INFINITY]
        .iter()
        .flat_map(|&x| [x, -x])
        .collect();
    check_unary(UnaryOp::Tanh, &xs, f64::tanh, 0.0);
}

#[test]
fn tanh_and_erf_polynomials_stay_within_a_relative_epsilon_everywhere() {
    let xs = sweep();
    check_unary(UnaryOp::Tanh, &xs, f64::tanh, 1.0);
    check_unary(UnaryOp::Erf, &xs, libm::erf, 1.0);
}

/// Tanh-GELU's float32 constants, `√(2/π)` and 0.044715, as the checker writes them.
const GELU_BETA: f32 = 0.797_884_6;
const GELU_KAPPA: f32 = 0.044_715;

/// ATen's tanh-GELU of input 0, `(x · 0.5) · (1 + tanh((x + x³ · κ) · β))`, as the
/// optimizer leaves it: the formula the native code ran before the lowering rewrote it.
fn aten_gelu_tanh() -> Vec<Expr> {
    let mut f = F::default();
    let x = f.add(Expr::Input(0));
    let x2 = f.add(Expr::Binary(BinaryOp::Mul, x, x));
    let x3 = f.add(Expr::Binary(BinaryOp::Mul, x2, x));
    let kappa = f.add(Expr::Const(GELU_KAPPA));
    let cubic = f.add(Expr::Binary(BinaryOp::Mul, x3, kappa));
    let sum = f.add(Expr::Binary(BinaryOp::Add, x, cubic));
    let beta = f.add(Expr::Const(GELU_BETA));
    let u = f.add(Expr::Binary(BinaryOp::Mul, sum, beta));
    let t = f.add(Expr::Unary(UnaryOp::Tanh, u));
    let one = f.add(Expr::Const(1.0));
    let one_plus = f.add(Expr::Binary(BinaryOp::Add, one, t));
    let half = f.add(Expr::Const(0.5));
    let half_x = f.add(Expr::Binary(BinaryOp::Mul, x, half));
    f.add(Expr::Binary(BinaryOp::Mul, half_x, one_plus));
    f.0
}

/// The worst errors of `got[i]` against tanh-GELU of `xs[i]` in float64 (with the float32
/// constants, as `x / (1 + e^(-2u))`): in units of `ulp(want) + |x| 2^-24`, and in ulps of
/// `want` alone where it is normal and above `|x| 2^-25` (below, `1 + tanh u` rounds to 0
/// in float32 and the result is `±0`). `1 + tanh u` rounds to within 2^-24 of its value and is then scaled
/// by `x / 2`, so ATen's form in float32 is off by a multiple of `|x| 2^-24` where `tanh u`
/// is near -1 (tens of percent of the result near `x = -5`), and by ulps elsewhere.
fn gelu_tanh_errors(xs: &[f32], got: &[f32]) -> (f64, f64) {
    let (beta, kappa) = (f64::from(GELU_BETA), f64::from(GELU_KAPPA));
    let (mut bound, mut ulps) = (0f64, 0f64);
    for (&x, &g) in xs.iter().zip(got) {
        let x64 = f64::from(x);
        // `0.5 x (1 + tanh u)` cancels in float64 too where `u` is below -18.
        let want = x64 / (1.0 + (-2.0 * beta * (x64 + kappa * x64 * x64 * x64)).exp());
        let ulp = (want as f32).abs() as f64 * f64::from(f32::EPSILON);
        let err = (f64::from(g) - want).abs();
        let unit = (ulp + x64.abs() * 2f64.powi(-24)).max(1e-45);
        assert!(err.is_finite(), "gelu_tanh({x:e}) = {g:e}, want {want:e}");
        bound = bound.max(err / unit);
        if want.abs() >= (x64.abs() * 2f64.powi(-25)).max(f64::from(f32::MIN_POSITIVE)) {
            ulps = ulps.max(err / ulp);
        }
    }
    (bound, ulps)
}

/// Tanh-GELU over the dense sweep: as the lowering computes it now (`x / (1 + e^(-2u))`,
/// compiled from the language), within the bound of the form it replaced (ATen's, with the
/// `tanh` polynomial, run from a map built by hand) against float64, in units of
/// `ulp(want) + |x| 2^-24`; and, without the cancellation of `1 + tanh u`, within 32 ulps
/// of every normal result above `|x| 2^-25` (below, `1 + tanh u` rounds to 0 and both forms give
/// `±0`, as PyTorch), where ATen's form is off by up to all of it. (What is left is `u`'s
/// own rounding in float32, which the result's relative error takes times `2|u|`.) The
/// worst errors are printed (`--nocapture`).
#[test]
fn tanh_gelu_as_a_sigmoid_stays_within_the_bound_of_atens_form() {
    let xs = sweep();
    let n = xs.len();
    let aten = run(map(aten_gelu_tanh(), 1, n, 1), std::slice::from_ref(&xs), n);
    let src = format!("dim N = {n}\ninput x: [N]\noutput t = gelu(x, approximate=\"tanh\")\n");
    let prog = common::program(&src, &[]);
    let bound = Bound {
        params: vec![],
        inputs: vec![Tensor::new(vec![n], xs.clone())],
        dims: attnc::runtime::bind_dims(&prog).unwrap(),
    };
    let exe = Executable::compile(&prog, &bound.dims).unwrap();
    let now = exe.run(&bound, &pool(2).unwrap()).unwrap().remove(0).1.data;
    let (old, old_ulps) = gelu_tanh_errors(&xs, &aten);
    let (new, new_ulps) = gelu_tanh_errors(&xs, &now);
    println!("worst in ulp(want) + |x| 2^-24: ATen's form {old:.3}, as a sigmoid {new:.3}");
    println!("worst in ulps of a normal result above |x| 2^-25: ATen's form {old_ulps:.1}, as a sigmoid {new_ulps:.1}");
    assert!(old <= 1.0, "ATen's form: {old}");
    assert!(new <= 1.0, "as a sigmoid: {new}");
    assert!(new_ulps <= 32.0, "as a sigmoid, in ulps: {new_ulps}");
}

/// Every positive magnitude, subnormals to `f32::MAX`, and a fine sweep around 1.
#[test]
fn the_log_polynomial_stays_within_a_relative_epsilon_everywhere() {
    let mut xs: Vec<f32> = (0..=100_000).map(|i| 0.5 + i as f32 * 1e-5).collect();
    xs.extend((0..=100_000).map(|i| 2f32.powf(-149.0 + 277.0 * i as f32 / 100_000.0)));
    xs.extend([f32::MAX, f32::MIN_POSITIVE, 1.0]);
    check_unary(UnaryOp::Log, &xs, f64::ln, 1.0);
}

/// PyTorch's `sigmoid`: `1 / (1 + exp(-x))` in float32, so 0 where `exp(-x)` overflows.
fn sigmoid(x: f64) -> f64 {
    match (-x as f32).exp().is_infinite() {
        true => 0.0,
        false => 1.0 / (1.0 + (-x).exp()),
    }
}

/// Every 1/1000 of [-100, 100]: the subnormal results near -88 and the overflow of `exp(-x)`.
#[test]
fn the_sigmoid_polynomial_follows_pytorch_into_the_subnormals() {
    let xs: Vec<f32> = (0..=200_000).map(|i| -100.0 + i as f32 * 1e-3).collect();
    check_unary(UnaryOp::Sigmoid, &xs, sigmoid, 2.0);
}

fn check_binary(b: BinaryOp, pairs: &[(f32, f32)], reference: impl Fn(f64, f64) -> f64, ulps: f32) {
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
    check_binary(BinaryOp::Add, &p, |a, b| a + b, 1.0);
    check_binary(BinaryOp::Sub, &p, |a, b| a - b, 1.0);
    check_binary(BinaryOp::Mul, &p, |a, b| a * b, 1.0);
    check_binary(BinaryOp::Div, &p, |a, b| a / b, 1.0);
    check_binary(BinaryOp::Pow, &p, f64::powf, 1.0);
    check_binary(BinaryOp::Maximum, &p, extremum(|a, b| a >= b), 0.0);
    check_binary(BinaryOp::Minimum, &p, extremum(|a, b| a <= b), 0.0);
    let truth = |x: f64| x != 0.0;
    check_binary(BinaryOp::And, &p, |a, b| (truth(a) && truth(b)) as u8 as f64, 0.0);
    check_binary(BinaryOp::Or, &p, |a, b| (truth(a) || truth(b)) as u8 as f64, 0.0);
}

/// `pow` with a constant exponent takes PyTorch's special cases: `x ** 0.5` is `sqrt(x)`
/// (NaN at `-inf`, `-0` at `-0`, where `powf` gives `inf` and `0`), `x ** 0` is 1 even at
/// NaN, `x ** 2` is `x * x`.
#[test]
fn pow_by_a_constant_takes_pytorchs_special_cases() {
    let xs = special();
    for c in [0.0f32, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.5, -3.0] {
        let expr = vec![Expr::Input(0), Expr::Const(c), Expr::Binary(BinaryOp::Pow, 0, 1)];
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

/// A formula built node by node.
#[derive(Default)]
struct F(Vec<Expr>);

impl F {
    fn add(&mut self, e: Expr) -> usize {
        self.0.push(e);
        self.0.len() - 1
    }
    fn un(&mut self, u: UnaryOp, a: usize) -> usize {
        self.add(Expr::Unary(u, a))
    }
    fn bin(&mut self, b: BinaryOp, x: usize, y: usize) -> usize {
        self.add(Expr::Binary(b, x, y))
    }
    fn c(&mut self, v: f32) -> usize {
        self.add(Expr::Const(v))
    }
}

fn stage(reduce: ReduceOp, f: F) -> Stage {
    Stage { reduce, expr: f.0 }
}

/// The ops of the language that are row programs: stages and write, as a lowering makes
/// them (`in0` is x, `in1` a weight, `in2` a bias).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Prog {
    Sum,
    Mean,
    Amax,
    Amin,
    Var,
    Std,
    Softmax,
    LogSoftmax,
    LayerNorm,
    RmsNorm,
}

const EPS: f32 = 1e-5;

impl Prog {
    const ALL: [Prog; 10] = [
        Prog::Sum,
        Prog::Mean,
        Prog::Amax,
        Prog::Amin,
        Prog::Var,
        Prog::Std,
        Prog::Softmax,
        Prog::LogSoftmax,
        Prog::LayerNorm,
        Prog::RmsNorm,
    ];

    fn per_row(self) -> bool {
        !matches!(
            self,
            Prog::Softmax | Prog::LogSoftmax | Prog::LayerNorm | Prog::RmsNorm
        )
    }

    fn inputs(self) -> usize {
        match self {
            Prog::LayerNorm => 3,
            Prog::RmsNorm => 2,
            _ => 1,
        }
    }

    fn program(self, n: usize) -> (Vec<Stage>, Vec<Expr>) {
        let reduce_x = |r: ReduceOp| {
            let mut f = F::default();
            f.add(Expr::Input(0));
            stage(r, f)
        };
        let reduced = |k: usize| {
            let mut f = F::default();
            f.add(Expr::Reduced(k));
            f
        };
        // r0 = sum(x), r1 = sum((x - r0 / n)²).
        let centered = || {
            let mut f = F::default();
            let x = f.add(Expr::Input(0));
            let s = f.add(Expr::Reduced(0));
            let n = f.c(n as f32);
            let mean = f.bin(BinaryOp::Div, s, n);
            let d = f.bin(BinaryOp::Sub, x, mean);
            f.bin(BinaryOp::Mul, d, d);
            vec![reduce_x(ReduceOp::Sum), stage(ReduceOp::Sum, f)]
        };
        // r0 = amax(x), r1 = sum(exp(x - r0)).
        let exps = || {
            let mut f = F::default();
            let x = f.add(Expr::Input(0));
            let m = f.add(Expr::Reduced(0));
            let d = f.bin(BinaryOp::Sub, x, m);
            f.un(UnaryOp::Exp, d);
            vec![reduce_x(ReduceOp::Max), stage(ReduceOp::Sum, f)]
        };
        match self {
            Prog::Sum => (vec![reduce_x(ReduceOp::Sum)], reduced(0).0),
            Prog::Amax => (vec![reduce_x(ReduceOp::Max)], reduced(0).0),
            Prog::Amin => (vec![reduce_x(ReduceOp::Min)], reduced(0).0),
            Prog::Mean => {
                let mut f = reduced(0);
                let n = f.c(n as f32);
                f.bin(BinaryOp::Div, 0, n);
                (vec![reduce_x(ReduceOp::Sum)], f.0)
            }
            Prog::Var | Prog::Std => {
                let mut f = reduced(1);
                let d = f.c(n as f32 - 1.0);
                let v = f.bin(BinaryOp::Div, 0, d);
                if self == Prog::Std {
                    f.un(UnaryOp::Sqrt, v);
                }
                (centered(), f.0)
            }
            Prog::Softmax | Prog::LogSoftmax => {
                let mut f = F::default();
                let x = f.add(Expr::Input(0));
                let m = f.add(Expr::Reduced(0));
                let s = f.add(Expr::Reduced(1));
                let d = f.bin(BinaryOp::Sub, x, m);
                if self == Prog::Softmax {
                    let e = f.un(UnaryOp::Exp, d);
                    f.bin(BinaryOp::Div, e, s);
                } else {
                    let l = f.un(UnaryOp::Log, s);
                    f.bin(BinaryOp::Sub, d, l);
                }
                (exps(), f.0)
            }
            Prog::LayerNorm => {
                let mut f = F::default();
                let x = f.add(Expr::Input(0));
                let s = f.add(Expr::Reduced(0));
                let q = f.add(Expr::Reduced(1));
                let nn = f.c(n as f32);
                let mean = f.bin(BinaryOp::Div, s, nn);
                let var = f.bin(BinaryOp::Div, q, nn);
                let eps = f.c(EPS);
                let ve = f.bin(BinaryOp::Add, var, eps);
                let inv = f.un(UnaryOp::Rsqrt, ve);
                let d = f.bin(BinaryOp::Sub, x, mean);
                let y = f.bin(BinaryOp::Mul, d, inv);
                let w = f.add(Expr::Input(1));
                let y = f.bin(BinaryOp::Mul, y, w);
                let b = f.add(Expr::Input(2));
                f.bin(BinaryOp::Add, y, b);
                (centered(), f.0)
            }
            Prog::RmsNorm => {
                let mut sq = F::default();
                let x = sq.add(Expr::Input(0));
                sq.bin(BinaryOp::Mul, x, x);
                let mut f = F::default();
                let x = f.add(Expr::Input(0));
                let s = f.add(Expr::Reduced(0));
                let nn = f.c(n as f32);
                let ms = f.bin(BinaryOp::Div, s, nn);
                let eps = f.c(EPS);
                let me = f.bin(BinaryOp::Add, ms, eps);
                let inv = f.un(UnaryOp::Rsqrt, me);
                let y = f.bin(BinaryOp::Mul, x, inv);
                let w = f.add(Expr::Input(1));
                f.bin(BinaryOp::Mul, y, w);
                (vec![stage(ReduceOp::Sum, sq)], f.0)
            }
        }
    }

    /// The float64 reference for one row `x` (with weight `w` and bias `b`).
    fn reference(self, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
        let n = x.len() as f64;
        let sum: f64 = x.iter().sum();
        let mean = sum / n;
        let sq: f64 = x.iter().map(|v| (v - mean) * (v - mean)).sum();
        let nan = x.iter().any(|v| v.is_nan());
        let fold = |init: f64, keep: fn(f64, f64) -> bool| match nan {
            true => f64::NAN,
            false => x.iter().fold(init, |m, &v| if keep(v, m) { v } else { m }),
        };
        let max = fold(f64::NEG_INFINITY, |v, m| v > m);
        let min = fold(f64::INFINITY, |v, m| v < m);
        let exps: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
        let total: f64 = exps.iter().sum();
        match self {
            Prog::Sum => vec![sum],
            Prog::Mean => vec![mean],
            Prog::Amax => vec![max],
            Prog::Amin => vec![min],
            Prog::Var => vec![sq / (n - 1.0)],
            Prog::Std => vec![(sq / (n - 1.0)).sqrt()],
            Prog::Softmax => exps.iter().map(|e| e / total).collect(),
            Prog::LogSoftmax => x.iter().map(|v| v - max - total.ln()).collect(),
            Prog::LayerNorm => {
                let inv = 1.0 / (sq / n + EPS as f64).sqrt();
                (0..x.len()).map(|i| (x[i] - mean) * inv * w[i] + b[i]).collect()
            }
            Prog::RmsNorm => {
                let ms: f64 = x.iter().map(|v| v * v).sum::<f64>() / n;
                let inv = 1.0 / (ms + EPS as f64).sqrt();
                (0..x.len()).map(|i| x[i] * inv * w[i]).collect()
            }
        }
    }
}

/// A tensor laid out as `[a, n, c]` (row-major, so the reduced axis `n` is the middle one
/// when `c > 1`: stride `c`), with a row of each kind of special value.
fn tensor(a: usize, n: usize, c: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut x: Vec<f32> = (0..a * n * c)
        .map(|_| ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0)
        .collect();
    let mut set_row = |row: usize, f: &dyn Fn(usize) -> f32| {
        let (i, k) = (row / c, row % c);
        for j in 0..n {
            x[i * n * c + j * c + k] = f(j);
        }
    };
    let rows = a * c;
    if rows > 5 {
        set_row(1, &|j| if j == n / 2 { f32::NAN } else { 1.0 });
        set_row(2, &|_| f32::NEG_INFINITY);
        set_row(3, &|j| if j == 0 { f32::INFINITY } else { -2.0 });
        set_row(4, &|j| 1e-40 * (j as f32 + 1.0));
        set_row(5, &|j| 1e15 * (j % 3) as f32 - 1e15);
    }
    x
}

/// Whether `got` matches `want` as the project compares tensors: NaN and infinities in the
/// same places, and `|got - want| <= 1e-5 * max|want| + 1e-6` elsewhere, per row.
fn matches(got: &[f32], want: &[f64]) -> bool {
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f64, |m, v| m.max(v.abs()));
    got.iter().zip(want).all(|(&g, &w)| {
        let w32 = w as f32;
        match (w32.is_nan(), w32.is_infinite()) {
            (true, _) => g.is_nan(),
            (_, true) => g == w32,
            _ => (g as f64 - w).abs() <= 1e-5 * scale + 1e-6,
        }
    })
}

/// Runs `prog` over `[a, n, c]`, reducing the middle axis (the last when `c` is 1), with a
/// weight and bias of `n` elements read with `wstride`.
fn check_rows(prog: Prog, a: usize, n: usize, c: usize, wstride: usize) {
    let x = tensor(a, n, c, (a * 1000 + n * 10 + c) as u64);
    let w: Vec<f32> = (0..n).map(|j| 0.5 + j as f32 / n as f32).collect();
    let b: Vec<f32> = (0..n).map(|j| j as f32 * 0.01 - 0.3).collect();
    let (stages, write) = prog.program(n);
    let inputs = [
        op(0, 0, &[n * c, 1, c]),
        op(1, 0, &[0, 0, wstride]),
        op(2, 0, &[0, 0, wstride]),
    ];
    let (out, out_len) = match prog.per_row() {
        true => (op(prog.inputs(), 0, &[c, 1]), a * c),
        false => (op(prog.inputs(), 0, &[n * c, 1, c]), a * n * c),
    };
    let kernel = KernelOp::Row(Row {
        rows: vec![a, c],
        n,
        inputs: inputs[..prog.inputs()].to_vec(),
        stages,
        write,
        out,
        rows_per_task: 3,
    });
    let data = [x.clone(), strided(&w, wstride), strided(&b, wstride)];
    let got = run(kernel, &data[..prog.inputs()], out_len);
    let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let (w, b) = (f64s(&w), f64s(&b));
    for i in 0..a {
        for k in 0..c {
            let at = |j: usize| i * n * c + j * c + k;
            let row: Vec<f64> = (0..n).map(|j| x[at(j)] as f64).collect();
            let want = prog.reference(&row, &w, &b);
            let got_row: Vec<f32> = match prog.per_row() {
                true => vec![got[i * c + k]],
                false => (0..n).map(|j| got[at(j)]).collect(),
            };
            assert!(
                matches(&got_row, &want),
                "{prog:?} over [{a}, {n}, {c}], row ({i}, {k}): got {got_row:?}, want {want:?}"
            );
        }
    }
}

#[test]
fn row_programs_match_a_float64_reference_along_the_last_axis() {
    for prog in Prog::ALL {
        for n in [1, 7, 33, 300] {
            check_rows(prog, 9, n, 1, 1);
        }
    }
}

#[test]
fn row_programs_reduce_an_axis_that_is_not_the_last() {
    for prog in Prog::ALL {
        for n in [1, 7, 33] {
            check_rows(prog, 2, n, 5, 2);
        }
    }
}

/// Enough rows for the runtime to spread the tasks over both threads (`run` compares the
/// bits of one thread and two).
#[test]
fn row_programs_give_the_same_bits_on_any_thread_count() {
    for prog in [Prog::Softmax, Prog::LayerNorm, Prog::Var] {
        check_rows(prog, 700, 300, 1, 1);
    }
}

#[test]
fn a_plan_with_a_malformed_row_program_is_rejected() {
    let (stages, write) = Prog::Sum.program(4);
    let valid = Row {
        rows: vec![3],
        n: 4,
        inputs: vec![op(0, 0, &[4, 1])],
        stages,
        write,
        out: op(1, 0, &[1]),
        rows_per_task: 1,
    };
    let plan = |row: &Row| plan_of(KernelOp::Row(row.clone()), &[12], 3);
    plan(&valid).validate().unwrap();
    let mut own_result = valid.clone();
    own_result.stages[0].expr = vec![Expr::Reduced(0)];
    let mut later_stage = valid.clone();
    later_stage.write = vec![Expr::Reduced(1)];
    // One value per row cannot come from an element of the input.
    let mut element = valid.clone();
    element.write = vec![Expr::Input(0)];
    // Tasks of no row would leave every row unwritten.
    let mut no_rows = valid.clone();
    no_rows.rows_per_task = 0;
    for (what, row) in [
        ("a stage reads its own result", own_result),
        ("the write reads a stage that does not exist", later_stage),
        ("a per-row write reads an element", element),
        ("tasks of no row", no_rows),
    ] {
        assert!(plan(&row).validate().is_err(), "{what}: passes validation");
    }
}

/// `attnc ir --stage kernels` shows a row kernel's stages and write.
#[test]
fn the_text_of_a_plan_shows_a_row_program() {
    let (stages, write) = Prog::LayerNorm.program(8);
    let row = Row {
        rows: vec![2, 3],
        n: 8,
        inputs: vec![op(0, 0, &[24, 8, 1]), op(1, 0, &[0, 0, 1]), op(2, 0, &[0, 0, 1])],
        stages,
        write,
        out: op(3, 0, &[24, 8, 1]),
        rows_per_task: 2,
    };
    let plan = plan_of(KernelOp::Row(row), &[48, 8, 8], 48);
    plan.validate().unwrap();
    insta::assert_snapshot!(plan.to_text());
}

/// Long rows of values in [1, 2), where a single running sum would lose digits: the eight
/// lanes of accumulators kept the relative error under 6e-7 at 100 003 elements (measured), inside
/// the project's tolerance.
#[test]
fn long_rows_of_positive_values_sum_accurately() {
    for prog in [Prog::Sum, Prog::Mean, Prog::Var, Prog::RmsNorm] {
        for n in [4096, 100_003] {
            let mut rng = Rng(n as u64);
            let x: Vec<f32> = (0..2 * n)
                .map(|_| 1.0 + (rng.next() >> 40) as f32 / (1u64 << 24) as f32)
                .collect();
            let w = vec![1.0f32; n];
            let (stages, write) = prog.program(n);
            let out = match prog.per_row() {
                true => op(prog.inputs(), 0, &[1]),
                false => op(prog.inputs(), 0, &[n, 1]),
            };
            let out_len = if prog.per_row() { 2 } else { 2 * n };
            let inputs = [op(0, 0, &[n, 1]), op(1, 0, &[0, 1])];
            let kernel = KernelOp::Row(Row {
                rows: vec![2],
                n,
                inputs: inputs[..prog.inputs()].to_vec(),
                stages,
                write,
                out,
                rows_per_task: 1,
            });
            let data = [x.clone(), w.clone()];
            let got = run(kernel, &data[..prog.inputs()], out_len);
            let w64 = vec![1.0f64; n];
            for r in 0..2 {
                let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|&v| v as f64).collect();
                let want = prog.reference(&row, &w64, &w64);
                let got_row = match prog.per_row() {
                    true => &got[r..r + 1],
                    false => &got[r * n..(r + 1) * n],
                };
                assert!(
                    matches(got_row, &want),
                    "{prog:?} over a row of {n}: got {:?}, want {:?}",
                    &got_row[..1],
                    &want[..1]
                );
            }
        }
    }
}

/// Rows of length 0 (a reduction over an axis of size 0): a sum is 0 and a mean NaN, as in
/// PyTorch; a maximum is `-inf`, the identity of `Max` (PyTorch refuses `amax` there).
#[test]
fn empty_rows_reduce_to_the_identity() {
    for (prog, want) in [
        (Prog::Sum, 0.0),
        (Prog::Mean, f32::NAN),
        (Prog::Amax, f32::NEG_INFINITY),
    ] {
        let (stages, write) = prog.program(0);
        let kernel = KernelOp::Row(Row {
            rows: vec![3],
            n: 0,
            inputs: vec![op(0, 0, &[0, 1])],
            stages,
            write,
            out: op(1, 0, &[1]),
            rows_per_task: 2,
        });
        let got = run(kernel, &[vec![]], 3);
        let same = |g: &f32| g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan());
        assert!(got.iter().all(same), "{prog:?} of empty rows: {got:?}");
    }
}

/// A reduction of a whole vector: no row axes, one row, a rank-0 result.
#[test]
fn a_row_kernel_without_row_axes_reduces_one_row() {
    let x: Vec<f32> = (0..10).map(|i| i as f32 - 2.5).collect();
    for (prog, want) in [(Prog::Sum, 20.0), (Prog::Amin, -2.5), (Prog::Amax, 6.5)] {
        let (stages, write) = prog.program(10);
        let kernel = KernelOp::Row(Row {
            rows: vec![],
            n: 10,
            inputs: vec![op(0, 0, &[1])],
            stages,
            write,
            out: op(1, 0, &[]),
            rows_per_task: 1,
        });
        assert_eq!(run(kernel, std::slice::from_ref(&x), 1), [want], "{prog:?}");
    }
}

/// A layout copy that transposes its last two axes (the attention kernel's `kᵀ` layout):
/// `out[b, p, l] = x[b, l, p]`, every bit moved (NaN payloads, signed zeros, subnormals),
/// with tasks of whole runs of `p`, of rows inside one run, and of neither.
#[test]
fn a_transposing_layout_copy_moves_every_bit() {
    let (b, p, l) = (3, 20, 37);
    let special = special();
    // Every fifth a NaN of its own payload.
    let x: Vec<f32> = (0..b * l * p)
        .map(|i| match i % 5 {
            0 => f32::from_bits(0x7fc0_0000 | i as u32),
            _ => special[i % special.len()],
        })
        .collect();
    for rows_per_task in [4, 20, 40, 7] {
        let kernel = KernelOp::Map(Map {
            shape: vec![b, p, l],
            inputs: vec![op(0, 0, &[l * p, 1, p])],
            expr: vec![Expr::Input(0)],
            out: op(1, 0, &[p * l, l, 1]),
            rows_per_task,
        });
        let got = run(kernel, std::slice::from_ref(&x), b * p * l);
        for (i, g) in got.iter().enumerate() {
            let (bi, pi, li) = (i / (p * l), i / l % p, i % l);
            let want = x[bi * l * p + li * p + pi];
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "rows per task {rows_per_task}: element {i}"
            );
        }
    }
}
