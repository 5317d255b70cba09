//! The GEMM epilogues the native shim runs at 512 bits (`attnc_epilogue_tile`) against the
//! generated code's 128-bit path: programs whose GEMM ends in each form (sigmoid, SiLU,
//! GELU's tanh and erf forms, with a bias and a residual; SwiGLU's gate times up over a
//! paired product), lowered as `attnc run` lowers them, at
//! tiles whose columns are no multiple of 16, over values that reach every range of the
//! activations (infinities and NaN from the bias included). Both paths must give the same
//! bits (NaN for NaN), on 1 and 2 threads alike. Where the CPU has no AVX-512 the shim is
//! never bound and there is nothing to compare.

use attnc::codegen::{Jit, Shims};
use attnc::ir::Program;
use attnc::kernel::Plan;
use attnc::runtime::jit::{pool, shims, Executable};
use attnc::runtime::{bind_dims, Bound, Tensor};

mod common;
use common::{program, Rng};

const M: usize = 37;
const K: usize = 3;
const N: usize = 133;

/// The program around `expr`, a formula of `y = x @ w.transpose(0, 1)` (no bias),
/// `lin = linear(x, w, b)`, the bias `b` and a residual `r`.
fn source(expr: &str) -> String {
    format!(
        "dim M = {M}\ndim K = {K}\ndim N = {N}\ninput x: [M, K]\ninput w: [N, K]\ninput b: [N]\n\
         input r: [M, N]\nlet y = x @ w.transpose(0, 1)\nlet lin = linear(x, w, b)\noutput out = {expr}\n"
    )
}

/// `x` and `w` so that the products spread over [-24, 24]; a bias with every special value
/// of float32 among ordinary ones; a residual of ordinary values.
fn inputs() -> Vec<Tensor> {
    let mut rng = Rng(11);
    let mut uniform = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale)
            .collect()
    };
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e30,
        -1e30,
        f32::MAX,
        f32::MIN,
        0.0,
        -0.0,
        1e-40,
        -1e-40,
        9.5,
        -9.5,
        -88.0,
        88.0,
    ];
    let mut b = uniform(N, 4.0);
    b[..specials.len()].copy_from_slice(&specials);
    vec![
        Tensor::new(vec![M, K], uniform(M * K, 8.0)),
        Tensor::new(vec![N, K], uniform(N * K, 4.0)),
        Tensor::new(vec![N], b),
        Tensor::new(vec![M, N], uniform(M * N, 2.0)),
    ]
}

/// The shims with the epilogue in the generated code.
fn generated() -> Shims {
    Shims {
        epilogue: None,
        ..shims()
    }
}

/// Each element's bits, every NaN as one.
fn bits(t: &Tensor) -> Vec<u32> {
    let one_nan = |x: &f32| {
        if x.is_nan() {
            f32::NAN.to_bits()
        } else {
            x.to_bits()
        }
    };
    t.data.iter().map(one_nan).collect()
}

/// The program of a paired product: `gate = linear(x, w)` and `up = linear(x, u)` on
/// weights, which the optimizer merges into one GEMM whose epilogue reads both halves.
fn paired_source(expr: &str) -> String {
    format!(
        "dim M = {M}\ndim K = {K}\ndim N = {N}\ninput x: [M, K]\nparam w: [N, K]\nparam u: [N, K]\n\
         input r: [M, N]\nlet gate = linear(x, w)\nlet up = linear(x, u)\noutput out = {expr}\n"
    )
}

/// The plan of `prog`, and whether its code calls the shim (differs from the code without
/// it).
fn plan_of(prog: &Program, bound: &mut Bound) -> (Plan, bool) {
    bound.dims = bind_dims(prog).unwrap();
    let plan = Executable::compile(prog, &bound.dims).unwrap().plan().clone();
    let clif = |s: Shims| Jit::new(s).unwrap().clif(&plan).unwrap();
    let calls = clif(shims()) != clif(generated());
    (plan, calls)
}

/// Runs `expr` with its epilogue in the shim and in the generated code: the shim must be
/// called and the results must be the same bits.
fn check(expr: &str) {
    let bound = Bound {
        params: vec![],
        inputs: inputs(),
        dims: vec![],
    };
    check_program(expr, &program(&source(expr), &[]), bound);
}

/// [`check`] of `expr` over a paired product: `x` and `w` as [`inputs`] draws them, `u`
/// the weights of `w` reversed with the bias's values (special ones among them) first; the
/// residual `r`.
fn check_paired(expr: &str) {
    let [x, w, b, r] = <[Tensor; 4]>::try_from(inputs()).unwrap();
    let mut u = w.clone();
    u.data.reverse();
    u.data[..N].copy_from_slice(&b.data);
    let bound = Bound {
        params: vec![w, u],
        inputs: vec![x, r],
        dims: vec![],
    };
    // The merge of the two projections is the optimizer's.
    let optimized = attnc::opt::optimize(&program(&paired_source(expr), &[])).program;
    check_program(expr, &optimized, bound);
}

/// [`check`]'s comparison, of the program `prog` that `expr` names.
fn check_program(expr: &str, prog: &Program, mut bound: Bound) {
    if shims().epilogue.is_none() {
        return;
    }
    let (plan, calls) = plan_of(prog, &mut bound);
    assert!(calls, "{expr}: the shim is not called");
    let native = Executable::from_plan_with(plan.clone(), shims()).unwrap();
    let fallback = Executable::from_plan_with(plan.clone(), generated()).unwrap();
    let run = |exe: &Executable, threads| exe.run(&bound, &pool(threads).unwrap()).unwrap().remove(0).1;
    let want = bits(&run(&fallback, 1));
    for threads in [1, 2] {
        let got = bits(&run(&native, threads));
        let differs = got.iter().zip(&want).position(|(g, w)| g != w);
        if let Some(i) = differs {
            let (g, w) = (f32::from_bits(got[i]), f32::from_bits(want[i]));
            panic!(
                "{expr}, {threads} threads: element {i} is {g:e} in the shim, {w:e} in the generated code"
            );
        }
    }
}

/// A bias, a residual and ReLU are memory-bound: they measured no faster at 512 bits, and
/// stay in the generated code.
#[test]
fn bias_residual_and_relu_stay_in_the_generated_code() {
    for expr in ["lin", "lin + r", "r + (y + b)", "relu(lin)", "relu(y + b) + r"] {
        let mut bound = Bound {
            params: vec![],
            inputs: inputs(),
            dims: vec![],
        };
        let prog = program(&source(expr), &[]);
        assert!(!plan_of(&prog, &mut bound).1, "{expr}: the shim is called");
    }
}

#[test]
fn sigmoid_and_silu() {
    check("sigmoid(lin)");
    check("silu(y + b)");
    check("silu(lin) + r");
}

#[test]
fn gelu_in_both_forms() {
    check("gelu(lin, approximate=\"tanh\")");
    check("gelu(y + b, approximate=\"tanh\") + r");
    check("gelu(lin)");
    check("gelu(y + b) + r");
}

/// SwiGLU as Llama's MLP writes it: the gate and up products merge into one paired GEMM,
/// whose epilogue multiplies the gate's activation by the up product.
#[test]
fn swiglu_over_a_paired_product() {
    check_paired("silu(gate) * up");
    check_paired("up * silu(gate)");
    check_paired("silu(gate) * up + r");
    check_paired("sigmoid(gate) * up");
}
