//! A weights file of either format `--weights` takes: safetensors, or GGUF (told apart by
//! GGUF's magic bytes, not by the file's extension).

use super::files::{Param, Store, TensorFile};
use super::gguf::{types, GgufFile, ReadError};
use super::RunError;
use std::io::Read;
use std::path::Path;

/// An opened weights file.
pub enum WeightFile {
    Safetensors(TensorFile),
    Gguf(GgufFile),
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
}

impl Store for WeightFile {
    fn describe(&self) -> String {
        format!("`{}`", self.path().display())
    }

    fn param(&self, key: &str) -> Result<Param, RunError> {
        match self {
            WeightFile::Safetensors(file) => file.param(key),
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

    fn keys(&self) -> Vec<String> {
        match self {
            WeightFile::Safetensors(f) => f.keys(),
            WeightFile::Gguf(f) => f.tensor_names().map(str::to_string).collect(),
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
