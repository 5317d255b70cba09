//! The library's compile-once entry point, `runtime::function::Function` (what the Python
//! module calls): the same outputs as `bind` + `Executable::run` (what `attnc run` does),
//! one plan per set of sizes, calls from several threads, and the command line's errors.

use attnc::check::DimOverride;
use attnc::driver::check_source;
use attnc::ir::Program;
use attnc::runtime::files::{Store, TensorFile, Tensors};
use attnc::runtime::function::{Backend, Function, Input, Options, Weights};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{self, RunOptions, Tensor};
use std::path::{Path, PathBuf};

const PAD: &str = "pad_b2_n7_d16_h4";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn mha(d: i64, h: i64) -> Program {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mha.attn")).unwrap();
    let dims = [("D", d), ("H", h)].map(|(name, value)| DimOverride {
        name: name.to_string(),
        value,
    });
    let checked = check_source(&src, &dims).unwrap();
    assert!(!checked.has_errors());
    checked.program
}

fn pad_inputs() -> Vec<Tensor> {
    let file = TensorFile::open(&fixture(&format!("inputs_{PAD}.safetensors"))).unwrap();
    ["query", "key", "value", "mask"]
        .iter()
        .map(|k| file.get(k).unwrap().tensor.unwrap())
        .collect()
}

fn borrowed(tensors: &[Tensor]) -> Vec<Input<'_>> {
    tensors
        .iter()
        .map(|t| Input {
            shape: &t.shape,
            data: &t.data,
        })
        .collect()
}

fn options(threads: usize) -> Options {
    Options {
        threads: Some(threads),
        ..Options::default()
    }
}

#[test]
fn a_call_is_bit_for_bit_the_command_lines_run() {
    let program = mha(16, 4);
    let weights = fixture(&format!("weights_{PAD}.safetensors"));
    let opts = RunOptions {
        weights: Some(weights.clone()),
        inputs: Some(fixture(&format!("inputs_{PAD}.safetensors"))),
        ..RunOptions::default()
    };
    let bound = runtime::bind(&program, &opts).unwrap();
    let optimized = attnc::opt::optimize(&program).program;
    let exe = Executable::compile(&optimized, &bound.dims).unwrap();
    let expected = exe.run(&bound, &pool(2).unwrap()).unwrap();

    let f = Function::new(program, Weights::File(weights), options(2)).unwrap();
    let inputs = pad_inputs();
    let got = f.call(&borrowed(&inputs)).unwrap();
    assert_eq!(got, expected);
}

#[test]
fn each_set_of_sizes_compiles_once() {
    let f = Function::new(mha(16, 4), Weights::Drawn { seed: 1 }, options(1)).unwrap();
    let make = |b: usize, n: usize| -> Vec<Tensor> {
        let x = Tensor::new(
            vec![b, n, 16],
            (0..b * n * 16).map(|i| (i % 7) as f32 * 0.1).collect(),
        );
        let mask = Tensor::new(vec![b, 1, n], vec![1.0; b * n]);
        vec![x.clone(), x.clone(), x, mask]
    };
    let (small, large) = (make(1, 3), make(2, 5));
    let first = f.call(&borrowed(&small)).unwrap();
    f.call(&borrowed(&large)).unwrap();
    let again = f.call(&borrowed(&small)).unwrap();
    assert_eq!(first, again);
    let plans = f.plans();
    assert_eq!(plans.len(), 2);
    let size = |p: &attnc::runtime::function::PlanInfo, name: &str| {
        p.sizes.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    };
    assert_eq!((size(&plans[0], "B"), size(&plans[0], "N")), (Some(1), Some(3)));
    assert_eq!((size(&plans[1], "B"), size(&plans[1], "N")), (Some(2), Some(5)));
    assert!(plans.iter().all(|p| p.compile_ms > 0.0 && p.kernels > 0));
}

#[test]
fn the_weights_are_prepared_once_for_every_shape() {
    let weights = || Weights::File(fixture(&format!("weights_{PAD}.safetensors")));
    let f = Function::new(mha(16, 4), weights(), options(1)).unwrap();
    let x = Tensor::new(vec![1, 3, 16], (0..48).map(|i| (i % 5) as f32 * 0.2).collect());
    let small = vec![x.clone(), x.clone(), x, Tensor::new(vec![1, 1, 3], vec![1.0; 3])];
    f.call(&borrowed(&pad_inputs())).unwrap();
    let shared = f.call(&borrowed(&small)).unwrap();
    let prepared: Vec<bool> = f.plans().iter().map(|p| p.prepared).collect();
    assert_eq!(prepared, [true, false]);
    // The shared weights are what the second shape would have prepared for itself.
    let alone = Function::new(mha(16, 4), weights(), options(1)).unwrap();
    assert_eq!(alone.call(&borrowed(&small)).unwrap(), shared);
    assert!(alone.plans()[0].prepared);
    // There is something to share: the plan's prologue lays out the weights.
    let opts = RunOptions {
        weights: Some(fixture(&format!("weights_{PAD}.safetensors"))),
        inputs: Some(fixture(&format!("inputs_{PAD}.safetensors"))),
        ..RunOptions::default()
    };
    let program = mha(16, 4);
    let bound = runtime::bind(&program, &opts).unwrap();
    let optimized = attnc::opt::optimize(&program).program;
    let exe = Executable::compile(&optimized, &bound.dims).unwrap();
    assert!(!exe.plan().prologue.is_empty());
}

/// Self-attention inputs of `b × n` rows of width 16, an all-ones mask.
fn rows(b: usize, n: usize) -> Vec<Tensor> {
    let x = Tensor::new(
        vec![b, n, 16],
        (0..b * n * 16).map(|i| (i % 5) as f32 * 0.2).collect(),
    );
    vec![
        x.clone(),
        x.clone(),
        x,
        Tensor::new(vec![b, 1, n], vec![1.0; b * n]),
    ]
}

#[test]
fn a_plan_called_once_is_not_kept_and_its_weights_go_when_the_next_plan_needs_others() {
    let weights = || Weights::File(fixture(&format!("weights_{PAD}.safetensors")));
    let f = Function::new(mha(16, 4), weights(), options(1)).unwrap();
    let kept = Function::new(mha(16, 4), weights(), options(1)).unwrap();
    let (few, many) = (rows(1, 3), rows(2, 20));
    // Compiled each time, the second sharing the weights the first left aside.
    let once = f.call_once(&borrowed(&few)).unwrap();
    assert_eq!(once, kept.call(&borrowed(&few)).unwrap());
    let few_bytes = f.prepared_bytes();
    assert!(few_bytes > 0);
    f.call_once(&borrowed(&few)).unwrap();
    let prepared = |f: &Function| f.plans().iter().map(|p| p.prepared).collect::<Vec<bool>>();
    assert_eq!(prepared(&f), [true, false]);
    // A plan of 40 rows lays the weights out in strips for the `gemm` crate's microkernel,
    // not in the panels of few rows: the set aside goes before it prepares its own.
    let wide = f.call_once(&borrowed(&many)).unwrap();
    assert_eq!(wide, kept.call(&borrowed(&many)).unwrap());
    assert_eq!(prepared(&f), [true, false, true]);
    // One set held, where a function keeping both plans holds two.
    let many_bytes = f.prepared_bytes();
    assert!(many_bytes > 0);
    assert_eq!(kept.prepared_bytes(), few_bytes + many_bytes);
    // A kept plan shares nothing with them and prepares again; one of the function's
    // kept plans serves a later `call_once` of its shape without compiling.
    f.call(&borrowed(&few)).unwrap();
    assert_eq!(prepared(&f), [true, false, true, true]);
    assert_eq!(f.prepared_bytes(), few_bytes);
    f.call_once(&borrowed(&few)).unwrap();
    assert_eq!(f.plans().len(), 4);
}

#[test]
fn calls_from_several_threads_agree() {
    let f = Function::new(
        mha(16, 4),
        Weights::File(fixture(&format!("weights_{PAD}.safetensors"))),
        options(2),
    )
    .unwrap();
    let inputs = pad_inputs();
    let alone = f.call(&borrowed(&inputs)).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..5)
                        .map(|_| f.call(&borrowed(&inputs)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for got in h.join().unwrap() {
                assert_eq!(got, alone);
            }
        }
    });
    assert_eq!(f.plans().len(), 1);
}

#[test]
fn the_interpreter_and_the_jit_agree() {
    let weights = || Weights::File(fixture(&format!("weights_{PAD}.safetensors")));
    let jit = Function::new(mha(16, 4), weights(), options(1)).unwrap();
    let interp = Options {
        backend: Backend::Interp,
        ..Options::default()
    };
    let reference = Function::new(mha(16, 4), weights(), interp).unwrap();
    let inputs = pad_inputs();
    let (a, b) = (
        jit.call(&borrowed(&inputs)).unwrap(),
        reference.call(&borrowed(&inputs)).unwrap(),
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let worst = x
            .data
            .iter()
            .zip(&y.data)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "{name}: {worst}");
    }
    assert!(reference.plans().is_empty());
}

#[test]
fn weights_in_memory_are_checked_as_a_files_are() {
    let file = TensorFile::open(&fixture(&format!("weights_{PAD}.safetensors"))).unwrap();
    let mut entries: Vec<_> = file
        .keys()
        .into_iter()
        .map(|k| {
            let t = file.get(&k).unwrap().tensor.unwrap();
            (k, safetensors::Dtype::F32, t)
        })
        .collect();
    entries.retain(|(k, _, _)| k != "linears.2.bias");
    let store = Tensors {
        name: "the weights given".to_string(),
        entries,
    };
    let Err(e) = Function::new(mha(16, 4), Weights::Store(Box::new(store)), options(1)) else {
        panic!("a missing weight was accepted");
    };
    assert_eq!(e.code, Some(attnc::diagnostic::Code::E0302));
    assert_eq!(
        e.message,
        "weight `linears.2.bias` of param `bv` is missing from the weights given"
    );
    assert_eq!(
        e.hints,
        ["did you mean `linears.0.bias`, `linears.1.bias`, `linears.3.bias`?"]
    );
}

#[test]
fn a_misshapen_input_is_e0301_before_anything_compiles() {
    let f = Function::new(mha(16, 4), Weights::Drawn { seed: 0 }, options(1)).unwrap();
    let mut inputs = pad_inputs();
    inputs[2] = Tensor::new(vec![2, 6, 16], vec![0.0; 2 * 6 * 16]);
    let e = f.call(&borrowed(&inputs)).unwrap_err();
    assert_eq!(e.code, Some(attnc::diagnostic::Code::E0301));
    assert_eq!(
        e.message,
        "input `value` has size 6 on axis 1, but `M` is 7 from input `key`"
    );
    let short = Input {
        shape: &[2, 7, 16],
        data: &[0.0; 5],
    };
    let mut wrong = borrowed(&inputs);
    wrong[0] = short;
    let e = f.call(&wrong).unwrap_err();
    assert_eq!(e.message, "input `query` has shape [2, 7, 16] but 5 elements");
    assert!(f.plans().is_empty());
}

#[test]
fn a_function_crosses_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Function>();
}
