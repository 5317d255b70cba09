//! Whole transformer blocks (`examples/*_layer.attn`, `gpt2_block.attn`) against the
//! PyTorch fixtures in `tests/fixtures/blocks`, through the binary, with the weights loaded
//! under their state_dict keys: `|got - expected| <= 1e-5 * max|expected| + 1e-6`, NaN and
//! infinity in the same places.

use attnc::runtime::files::TensorFile;
use attnc::runtime::Tensor;
use std::path::{Path, PathBuf};

mod common;
use common::{assert_close, attnc, scratch, stderr};

fn blocks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blocks")
}

fn tensor(file: &Path, key: &str) -> Tensor {
    TensorFile::open(file)
        .unwrap()
        .get(key)
        .and_then(|e| e.tensor)
        .unwrap_or_else(|| panic!("{key} in {}", file.display()))
}

/// Runs `example` on fixture `name` with `dims` on `backend` and compares `out`.
fn reproduce(example: &str, name: &str, dims: &[&str], backend: &str) {
    let temp = scratch(&format!("blocks-{name}-{backend}"));
    let dir = temp.path();
    let file = |kind: &str| blocks().join(format!("{kind}_{name}.safetensors"));
    let out = dir.join("out.safetensors");
    let (weights, inputs) = (file("weights"), file("inputs"));
    let mut args = vec![
        "run",
        example,
        "--backend",
        backend,
        "--weights",
        weights.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    for d in dims {
        args.extend(["--dim", d]);
    }
    let o = attnc(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{example} on {name} ({backend}): {}",
        stderr(&o)
    );
    let what = format!("{example} on {name} ({backend})");
    assert_close(&what, &tensor(&out, "out"), &tensor(&file("expected"), "out"));
}

#[test]
fn encoder_layer_reproduces_the_annotated_transformer() {
    let dims = ["D=16", "H=4", "F=32"];
    for backend in ["interp", "jit"] {
        reproduce(
            "examples/encoder_layer.attn",
            "encoder_b2_n7_d16_h4_f32",
            &dims,
            backend,
        );
    }
}

#[test]
fn gpt2_block_reproduces_hugging_face() {
    let dims = ["D=24", "H=4"];
    for backend in ["interp", "jit"] {
        reproduce("examples/gpt2_block.attn", "gpt2_b2_n9_d24_h4", &dims, backend);
    }
}

#[test]
fn llama_layer_reproduces_hugging_face() {
    let dims = ["D=32", "H=4", "Hkv=2", "F=48"];
    for backend in ["interp", "jit"] {
        reproduce(
            "examples/llama_layer.attn",
            "llama_b1_n8_d32_h4_kv2_f48",
            &dims,
            backend,
        );
    }
}

#[test]
fn causal_mask_from_positions_reproduces_pytorch() {
    let dims = ["D=16", "H=4"];
    for backend in ["interp", "jit"] {
        reproduce(
            "examples/causal_from_positions.attn",
            "causal_b2_n9_d16_h4",
            &dims,
            backend,
        );
    }
}

#[test]
fn sliding_window_reproduces_pytorch() {
    let dims = ["D=16", "H=2", "W=4"];
    for backend in ["interp", "jit"] {
        reproduce(
            "examples/sliding_window.attn",
            "window_b1_n20_d16_h2_w4",
            &dims,
            backend,
        );
    }
}

#[test]
fn alibi_reproduces_pytorch_with_slopes_computed_from_the_heads() {
    let dims = ["D=32", "H=8"];
    for backend in ["interp", "jit"] {
        reproduce("examples/alibi.attn", "alibi_b1_n15_d32_h8", &dims, backend);
    }
}

#[test]
fn softcap_reproduces_pytorch() {
    let dims = ["D=16", "H=2"];
    for backend in ["interp", "jit"] {
        reproduce("examples/softcap.attn", "softcap_b2_n10_d16_h2", &dims, backend);
    }
}

#[test]
fn gqa_decode_reproduces_pytorch() {
    let dims = ["D=32", "H=8", "Hkv=2"];
    for backend in ["interp", "jit"] {
        reproduce(
            "examples/gqa_decode.attn",
            "decode_b1_m11_d32_h8_kv2",
            &dims,
            backend,
        );
    }
}
