//! A weights file of either format `--weights` takes: safetensors, or GGUF (told apart by
//! GGUF's magic bytes, not by the file's extension).

use super::files::{is_float, TensorFile};
use super::gguf::{types, GgufFile, ReadError};
use super::tensor::Tensor;
use super::RunError;
use std::io::Read;
use std::path::Path;

/// An opened weights file.
pub enum WeightFile {
    Safetensors(TensorFile),
    Gguf(GgufFile),
}

/// A param as its weights file holds it.
pub enum Param {
    Missing,
    Tensor(Tensor),
    /// Stored in a type no param can have: the type's name and a hint that starts with a verb.
    Unreadable {
        dtype: String,
        hint: String,
    },
}

impl WeightFile {
    /// Opens `path` as GGUF when it starts with `GGUF`, else as safetensors.
    pub fn open(path: &Path) -> Result<WeightFile, RunError> {
        if is_gguf(path) {
            GgufFile::open(path).map(WeightFile::Gguf)
        } else {
            TensorFile::open(path).map(WeightFile::Safetensors)
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            WeightFile::Safetensors(f) => f.path(),
            WeightFile::Gguf(f) => f.path(),
        }
    }

    /// The tensor stored under `key` as float32.
    pub fn param(&self, key: &str) -> Result<Param, RunError> {
        match self {
            WeightFile::Safetensors(file) => Ok(match file.get(key) {
                None => Param::Missing,
                Some(entry) => match entry.tensor {
                    Some(t) if is_float(entry.dtype) => Param::Tensor(t),
                    _ => Param::Unreadable {
                        dtype: format!("{:?}", entry.dtype),
                        hint: "store it as F32, F16, BF16 or F64".into(),
                    },
                },
            }),
            WeightFile::Gguf(file) => match file.tensor(key) {
                None => Ok(Param::Missing),
                Some(Ok(t)) => Ok(Param::Tensor(t)),
                Some(Err(ReadError::Type(name))) => Ok(Param::Unreadable {
                    dtype: name.into(),
                    hint: format!("quantize it as {} (llama.cpp's `llama-quantize`)", types::READ),
                }),
                Some(Err(ReadError::Other(e))) => Err(e),
            },
        }
    }

    /// The `n` tensor names nearest to `key`, nearest first, for "did you mean" hints.
    pub fn closest_keys(&self, key: &str, n: usize) -> Vec<String> {
        match self {
            WeightFile::Safetensors(f) => f.closest_keys(key, n),
            WeightFile::Gguf(f) => {
                let mut names: Vec<&str> = f.tensor_names().collect();
                names.sort_unstable();
                let near = crate::suggest::nearest(key, names, n);
                near.into_iter().map(str::to_string).collect()
            }
        }
    }
}

/// Whether the file at `path` starts with GGUF's magic; an unreadable file is not (opening
/// it as safetensors then reports why).
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"GGUF")
}
