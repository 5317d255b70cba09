//! T5's self-attention (`examples/t5_attention.attn`): a position bias `[1, H, N, N]` and
//! the padding mask `(1 - mask) * finfo.min` added to unscaled scores. It reproduces
//! Hugging Face's own `T5Attention` (`tests/fixtures/t5`, made by `make/t5.py`) on both
//! backends, is one attention kernel whose score change reads both tensors in place, and
//! the JIT gives the interpreter's numbers whatever the mask and the bias hold: a 0/1 mask,
//! integers of any size and sign (added values of `finfo.min`'s size, and infinities), and
//! a bias with `-inf`, `f32::MIN` and subnormals.

use attnc::kernel::KernelOp;
use attnc::runtime::files::TensorFile;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions, Tensor};
use std::path::{Path, PathBuf};

mod common;
use common::{assert_close, attnc, example, program, scratch, stderr, Rng};

fn fixture(kind: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/t5/{kind}_{name}.safetensors"))
}

fn out_of(file: &Path) -> Tensor {
    TensorFile::open(file)
        .unwrap()
        .get("out")
        .and_then(|e| e.tensor)
        .unwrap()
}

#[test]
fn t5_attention_reproduces_hugging_face() {
    let name = "pad_b2_n9_d16_h4";
    let temp = scratch("t5");
    let dir = temp.path();
    for backend in ["interp", "jit"] {
        let out = dir.join(format!("out_{backend}.safetensors"));
        let (weights, inputs) = (fixture("weights", name), fixture("inputs", name));
        let o = attnc(&[
            "run",
            "examples/t5_attention.attn",
            "--backend",
            backend,
            "--weights",
            weights.to_str().unwrap(),
            "--inputs",
            inputs.to_str().unwrap(),
            "--dim",
            "D=16",
            "--dim",
            "H=4",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{backend}: {}", stderr(&o));
        let want = out_of(&fixture("expected", name));
        assert_close(&format!("t5 on {name} ({backend})"), &out_of(&out), &want);
    }
}

/// Masks of every kind of value, one per key: a 0/1 mask, a standard normal rounded (added
/// values of `finfo.min`'s size of both signs, and infinities where `1 - mask` is 2 or
/// more), and integers up to float32's exact limit, cycling.
fn masks(b: usize, n: usize) -> Vec<(&'static str, Vec<f32>)> {
    let mut rng = Rng(7);
    let normal = (0..b * n)
        .map(|_| {
            // A sum of 12 uniforms less 6: close enough to N(0, 1) for a mask's values.
            let x: f32 = (0..12)
                .map(|_| rng.below(1 << 20) as f32 / (1 << 20) as f32)
                .sum();
            (x - 6.0).round()
        })
        .collect();
    let padding = (0..b * n)
        .map(|k| ((k % n) < n - 37 * (k / n)) as u8 as f32)
        .collect();
    let extremes = [1.0, 0.0, -1.0, 2.0, 3.0, -100.0, 16_777_216.0, -16_777_216.0];
    let extreme = (0..b * n)
        .map(|k| extremes[(k * 7 + k / n) % extremes.len()])
        .collect();
    vec![("padding", padding), ("normal", normal), ("extremes", extreme)]
}

#[test]
fn masks_of_any_value_give_the_interpreters_numbers() {
    let (b, n) = (2, 300);
    let dims = [("B", b as i64), ("N", n as i64), ("D", 32), ("H", 4)];
    let p = program(&example("t5_attention.attn"), &dims);
    let opts = RunOptions {
        seed: 3,
        ..RunOptions::default()
    };
    let mut bound = bind(&p, &opts).unwrap();
    let optimized = attnc::opt::optimize(&p).program;
    let exe = Executable::compile(&optimized, &bound.dims).unwrap();
    let attention: Vec<_> = (exe.plan().kernels.iter())
        .filter_map(|k| match &k.op {
            KernelOp::Attention(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(attention.len(), 1, "{}", exe.plan().to_text());
    let score = attention[0].score.as_ref().expect("a score change");
    assert_eq!(score.inputs.len(), 2, "the bias and the mask, read in place");
    let bias = bound.inputs[2].clone();
    for (what, mask) in masks(b, n) {
        bound.inputs[1] = Tensor::new(vec![b, n], mask);
        bound.inputs[2] = bias.clone();
        if what == "extremes" {
            // The bias takes the float extremes, at every 5th score.
            let data = &mut bound.inputs[2].data;
            for (k, x) in data.iter_mut().enumerate().step_by(5) {
                *x = [f32::NEG_INFINITY, 1.0e-42, f32::MIN, -3.0e38][k / 5 % 4];
            }
        }
        let want = interpret(&p, &bound).unwrap();
        for threads in [1, 2] {
            let got = exe.run(&bound, &pool(threads).unwrap()).unwrap();
            let what = format!("{what} mask on {threads} threads");
            assert_close(&what, &got[0].1, &want[0].1);
        }
    }
}
