//! `attnc run` end to end: the PyTorch fixtures reproduced through the binary, every
//! run-time error code, broken files, and seeds.

use attnc::runtime::files::{save, TensorFile};
use attnc::runtime::Tensor;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{attnc, relative_error, scratch, stderr};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tensor(file: &Path, key: &str) -> Tensor {
    let f = TensorFile::open(file).unwrap();
    f.get(key)
        .and_then(|e| e.tensor)
        .unwrap_or_else(|| panic!("{key} in {}", file.display()))
}

/// The inputs of fixture `name`, with an all-ones `[B, 1, N]` mask added where it has none.
fn inputs_with_mask(name: &str, dir: &Path) -> PathBuf {
    let path = fixtures().join(format!("inputs_{name}.safetensors"));
    let file = TensorFile::open(&path).unwrap();
    if file.get("mask").is_some() {
        return path;
    }
    let query = tensor(&path, "query");
    let (b, n) = (query.shape[0], query.shape[1]);
    let mut tensors: Vec<(String, Tensor)> = ["query", "key", "value"]
        .iter()
        .map(|k| (k.to_string(), tensor(&path, k)))
        .collect();
    tensors.push(("mask".into(), Tensor::new(vec![b, 1, n], vec![1.0; b * n])));
    let out = dir.join("inputs.safetensors");
    save(&out, &tensors).unwrap();
    out
}

/// Run `example` on fixture `name` and compare every expected tensor it outputs.
fn reproduce(example: &str, name: &str, d: &str, h: &str) {
    let temp = scratch(&format!("run-{}-{name}", example.replace('/', "_")));
    let dir = temp.path();
    let inputs = inputs_with_mask(name, dir);
    let weights = fixtures().join(format!("weights_{name}.safetensors"));
    let expected = fixtures().join(format!("expected_{name}.safetensors"));
    let out = dir.join("out.safetensors");
    let o = attnc(&[
        "run",
        example,
        "--backend",
        "interp",
        "--weights",
        weights.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--dim",
        &format!("D={d}"),
        "--dim",
        &format!("H={h}"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{example} on {name}: {}", stderr(&o));
    let produced = TensorFile::open(&out).unwrap();
    let mut compared = 0;
    for key in ["out", "attn"] {
        if produced.get(key).is_some() {
            let err = relative_error(&tensor(&out, key), &tensor(&expected, key));
            assert!(err <= 1e-5, "{example} on {name}: `{key}` is off by {err:e}");
            compared += 1;
        }
    }
    assert!(compared > 0, "{example} produced nothing to compare");
}

#[test]
fn mha_reproduces_the_padding_mask_fixture() {
    reproduce("examples/mha.attn", "pad_b2_n7_d16_h4", "16", "4");
}

#[test]
fn mha_reproduces_the_maskless_fixture() {
    reproduce("examples/mha.attn", "nomask_b1_n5_d12_h3", "12", "3");
}

#[test]
fn mha_heads_reproduces_the_padding_mask_and_maskless_fixtures() {
    reproduce("examples/mha_heads.attn", "pad_b2_n7_d16_h4", "16", "4");
    reproduce("examples/mha_heads.attn", "nomask_b1_n5_d12_h3", "12", "3");
}

#[test]
fn causal_reproduces_the_causal_fixture() {
    reproduce("examples/causal.attn", "causal_b3_n9_d32_h8", "32", "8");
}

fn run_with(args: &[&str]) -> Output {
    let mut all = vec![
        "run",
        "examples/mha.attn",
        "--backend",
        "interp",
        "--dim",
        "D=16",
        "--dim",
        "H=4",
    ];
    all.extend_from_slice(args);
    attnc(&all)
}

fn pad(kind: &str) -> String {
    fixtures()
        .join(format!("{kind}_pad_b2_n7_d16_h4.safetensors"))
        .display()
        .to_string()
}

/// Expect exit code 1 and every fragment in the message.
fn expect_error(o: &Output, fragments: &[&str]) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    let err = stderr(o);
    for f in fragments {
        assert!(err.contains(f), "`{f}` missing from:\n{err}");
    }
}

#[test]
fn e0301_names_the_input_the_axis_and_both_sizes() {
    let o = run_with(&[
        "--inputs",
        &pad("inputs"),
        "--weights",
        &pad("weights"),
        "--dim",
        "N=5",
    ]);
    expect_error(&o, &["error[E0301]", "query", "axis 1", "7", "5"]);
}

#[test]
fn e0302_names_the_missing_weight_and_the_closest_keys() {
    let temp = scratch("run-e0302");
    let dir = temp.path();
    let weights = dir.join("w.safetensors");
    let src = pad("weights");
    let keep: Vec<(String, Tensor)> = ["linears.0.weight", "linears.0.bias", "linears.1.bias"]
        .iter()
        .map(|k| (k.to_string(), tensor(Path::new(&src), k)))
        .collect();
    save(&weights, &keep).unwrap();
    let o = run_with(&["--inputs", &pad("inputs"), "--weights", weights.to_str().unwrap()]);
    expect_error(&o, &["error[E0302]", "linears.1.weight", "linears.1.bias"]);
}

#[test]
fn e0303_names_a_weight_of_the_wrong_shape() {
    let temp = scratch("run-e0303");
    let dir = temp.path();
    let weights = dir.join("w.safetensors");
    let src = pad("weights");
    let file = TensorFile::open(Path::new(&src)).unwrap();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for i in 0..4 {
        for part in ["weight", "bias"] {
            let key = format!("linears.{i}.{part}");
            let t = file.get(&key).and_then(|e| e.tensor).unwrap();
            tensors.push((key, t));
        }
    }
    tensors[0].1 = Tensor::new(vec![16, 8], vec![0.0; 128]);
    save(&weights, &tensors).unwrap();
    let o = run_with(&["--inputs", &pad("inputs"), "--weights", weights.to_str().unwrap()]);
    expect_error(&o, &["error[E0303]", "Wq", "linears.0.weight", "[16, 8]"]);
}

#[test]
fn e0304_names_a_free_dim_without_a_value() {
    let o = attnc(&["run", "examples/mha.attn", "--backend", "interp"]);
    expect_error(&o, &["error[E0304]", "`B`", "--dim B="]);
}

#[test]
fn e0209_checks_an_assert_about_free_dims_at_run_time() {
    let temp = scratch("run-e0209");
    let dir = temp.path();
    let src = dir.join("even.attn");
    std::fs::write(
        &src,
        "dim B, N\nassert N % 2 == 0\ninput x: [B, N]\noutput y = x.softmax(-1)\n",
    )
    .unwrap();
    let ok = attnc(&["run", src.to_str().unwrap(), "--dim", "B=1", "--dim", "N=4"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let bad = attnc(&["run", src.to_str().unwrap(), "--dim", "B=1", "--dim", "N=5"]);
    expect_error(&bad, &["error[E0209]", "N % 2 == 0"]);
}

/// An id outside the table is named where it comes from. Ids computed from an input are not
/// the input's values: `(x * 1000).long()` is -644 where `x` holds -0.644, which the message
/// once called "input `x` holds -644".
#[test]
fn e0306_names_ids_computed_from_an_input_as_computed() {
    let temp = scratch("run-e0306");
    let dir = temp.path();
    let src = dir.join("ids.attn");
    std::fs::write(
        &src,
        "dim B, N, V = 10, D = 4\nparam W: [V, D] = \"w\"\ninput x: [B, N]\noutput y = W[(x * 1000).long()]\n",
    )
    .unwrap();
    let o = attnc(&[
        "run",
        src.to_str().unwrap(),
        "--backend",
        "interp",
        "--dim",
        "B=2",
        "--dim",
        "N=3",
    ]);
    expect_error(
        &o,
        &[
            "error[E0306]: a tensor computed from input `x` holds",
            "outside the 10 rows of weight `w`",
        ],
    );
}

/// A gather by ids the program computes runs on the interpreter (above); the native backend
/// refuses it with a code and the way to run it, before any kernel runs.
#[test]
fn e0307_a_gather_by_computed_ids_on_the_native_backend_names_the_interpreter() {
    let temp = scratch("run-e0307");
    let dir = temp.path();
    let src = dir.join("ids.attn");
    std::fs::write(
        &src,
        "dim B, N, V = 10, D = 4\nparam W: [V, D] = \"w\"\ninput x: [B, N]\noutput y = W[(x * 0).long()]\n",
    )
    .unwrap();
    let o = attnc(&["run", src.to_str().unwrap(), "--dim", "B=2", "--dim", "N=3"]);
    expect_error(
        &o,
        &[
            "error[E0307]: the native backend gathers rows of a weight by an input's ids only",
            "--backend interp",
        ],
    );
}

#[test]
fn broken_files_name_the_file_and_leave_no_output() {
    let temp = scratch("run-broken");
    let dir = temp.path();
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"this is not a safetensors file at all").unwrap();
    let truncated = dir.join("truncated.safetensors");
    let bytes = std::fs::read(pad("weights")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let missing = dir.join("missing.safetensors");
    let out = dir.join("out.safetensors");
    for bad in [&garbage, &truncated, &missing] {
        let o = run_with(&[
            "--inputs",
            &pad("inputs"),
            "--weights",
            bad.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        expect_error(&o, &[bad.file_name().unwrap().to_str().unwrap()]);
        assert!(!out.exists(), "a failed run left {} behind", out.display());
    }
}

#[test]
fn the_same_seed_gives_the_same_outputs_and_another_seed_others() {
    let dims = ["--dim", "B=2", "--dim", "N=6", "--dim", "M=5"];
    let run = |seed: &str| {
        let mut args = dims.to_vec();
        args.extend(["--seed", seed]);
        let o = run_with(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = String::from_utf8(o.stdout).unwrap();
        text.lines()
            .filter(|l| l.contains("checksum"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"));
}
