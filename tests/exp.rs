//! The native `exp` over the whole float32 range: within 2 ulp of `e^x` computed in f64
//! and rounded (PyTorch's own `exp` is within 1 ulp), infinity beyond 88.72, subnormal
//! results where they are due, NaN for NaN; and the same through the fused softmax.

use attnc::driver::check_source;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{Bound, Tensor};

mod common;
use common::Rng;

/// The native result of `src`'s only output for the input `xs` of shape `shape`.
fn run_native(src: &str, shape: Vec<usize>, xs: Vec<f32>) -> Vec<f32> {
    let checked = check_source(src, &[]).expect("no overrides");
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    let dims: Vec<Option<i64>> = shape.iter().map(|&n| Some(n as i64)).collect();
    let exe = Executable::compile(&checked.program, &dims).unwrap();
    let bound = Bound {
        params: vec![],
        inputs: vec![Tensor::new(shape, xs)],
        dims,
    };
    let out = exe.run(&bound, &pool(1).unwrap()).unwrap();
    out.into_iter().next().expect("one output").1.data.into_vec()
}

/// The distance in units in the last place between two floats of one sign (infinity is one
/// step beyond the largest float, a subnormal's ulp is the smallest one).
fn ulps(a: f32, b: f32) -> u64 {
    if a == b {
        return 0;
    }
    if a.is_sign_negative() != b.is_sign_negative() {
        return u64::MAX;
    }
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
}

/// Every thousandth of the range where `exp` is neither 0 nor infinite, the ends of it, the
/// special values, and random bit patterns from the whole float range.
fn arguments() -> Vec<f32> {
    let mut xs: Vec<f32> = (-110_000..=100_000).map(|i| i as f32 / 1000.0).collect();
    xs.extend([
        88.722_83,
        88.722_84,
        88.723,
        89.0,
        -87.336_54,
        -87.34,
        -103.278_93,
        -103.972_08,
        -103.973,
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    let mut rng = Rng(0xe4b);
    xs.extend(
        (0..100_000)
            .map(|_| f32::from_bits(rng.next() as u32))
            .filter(|x| !x.is_nan()),
    );
    xs
}

#[test]
fn exp_follows_float32_over_its_whole_range() {
    let xs = arguments();
    let src = "dim N\ninput x: [N]\noutput y = exp(x)\n";
    let got = run_native(src, vec![xs.len()], xs.clone());
    let mut worst = (0, 0.0f32);
    for (&x, &y) in xs.iter().zip(&got) {
        let want = (x as f64).exp() as f32;
        let d = ulps(y, want);
        assert!(d <= 2, "exp({x:e}) = {y:e}, want {want:e} ({d} ulp)");
        if d > worst.0 {
            worst = (d, x);
        }
    }
    let at = |x: f32| got[xs.iter().position(|&v| v.to_bits() == x.to_bits()).unwrap()];
    assert_eq!(at(88.723), f32::INFINITY);
    assert_eq!(at(f32::INFINITY), f32::INFINITY);
    assert_eq!(at(f32::NEG_INFINITY), 0.0);
    assert!(
        at(-100.0) > 0.0 && at(-100.0) < f32::MIN_POSITIVE,
        "a subnormal, not 0"
    );
    assert_eq!(at(88.0), 88f64.exp() as f32, "not clamped to e^88 below the top");
    println!("worst: {} ulp at {:e}", worst.0, worst.1);
}

#[test]
fn exp_of_nan_is_nan() {
    let xs = vec![f32::NAN, -f32::NAN, 1.0, f32::from_bits(0x7fc0_1234)];
    let got = run_native("dim N\ninput x: [N]\noutput y = exp(x)\n", vec![4], xs);
    assert!(got[0].is_nan() && got[1].is_nan() && got[3].is_nan(), "{got:?}");
    assert_eq!(got[2], 1f64.exp() as f32);
}

/// Softmax subtracts each row's maximum, so its `exp` sees only `x <= 0`: scores 87 to 104
/// below the maximum give subnormal probabilities, as in PyTorch, not 0.
#[test]
fn softmax_keeps_subnormal_probabilities() {
    let gaps = [
        0.0f32,
        -50.0,
        -87.0,
        -88.0,
        -95.0,
        -100.0,
        -103.0,
        -103.5,
        -120.0,
        f32::NEG_INFINITY,
    ];
    let rows = 4;
    let xs: Vec<f32> = (0..rows)
        .flat_map(|r| gaps.iter().map(move |g| g + r as f32 * 10.0))
        .collect();
    let src = "dim R, L\ninput x: [R, L]\noutput p = softmax(x, -1)\n";
    let got = run_native(src, vec![rows, gaps.len()], xs.clone());
    for (i, (&x, &p)) in xs.iter().zip(&got).enumerate() {
        let row = &xs[i / gaps.len() * gaps.len()..][..gaps.len()];
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        let want = ((x as f64 - max).exp() / sum) as f32;
        assert!(ulps(p, want) <= 2, "softmax entry {i}: {p:e}, want {want:e}");
    }
    assert!(got[5] > 0.0, "e^-100 is a subnormal probability");
}
