//! GGUF files (llama.cpp's format): metadata, and tensors dequantized to float32 when read.
//!
//! A file is memory-mapped and checked whole on open: the header ([`parse`]), the alignment,
//! and every tensor's bytes (a whole number of its type's blocks, aligned, inside the file,
//! overlapping no other tensor). Reading a tensor then only dequantizes ([`types`]), so a
//! program pays for the tensors it names, not for the whole file.
//!
//! Tensors come out in PyTorch's axis order (GGUF lists dims innermost first), and, in a
//! `llama` file, the rows of `attn_q` and `attn_k` permuted back from the order llama.cpp's
//! converter stores them in, as `transformers` loads them ([`unpermute`]): a program reads a
//! GGUF exactly as it reads the model's safetensors.

mod parse;
pub mod types;

use super::data::{self, Bytes, Data};
use super::files::file_error;
use super::tensor::Tensor;
use super::RunError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use parse::{TensorInfo, Value};
use types::GgmlType;

/// GGUF's alignment of tensor data when `general.alignment` does not say.
const DEFAULT_ALIGNMENT: u64 = 32;

/// An opened GGUF file whose header and tensor layout have been checked.
pub struct GgufFile {
    path: PathBuf,
    /// The file's bytes, mapped ([`data::map`]): float32 tensors are read from it in place.
    map: Arc<Bytes>,
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<Placed>,
}

/// A tensor and the byte range of the file that holds it.
struct Placed {
    info: TensorInfo,
    start: usize,
    len: usize,
}

/// Why a tensor could not be read as float32.
#[derive(Debug, PartialEq)]
pub enum ReadError {
    /// A type attnc does not dequantize (the type's name).
    Type(&'static str),
    /// Anything else, as a finished error.
    Other(RunError),
}

impl GgufFile {
    /// Maps `path` and checks it: a GGUF v2 or v3 header, and every tensor's data in bounds.
    pub fn open(path: &Path) -> Result<GgufFile, RunError> {
        let fail = |what: &str| file_error("read", path, what);
        let map = data::map(path).map_err(|e| fail(&e.to_string()))?;
        let map_len = data::bytes_of(&map).len();
        let header = parse::header(data::bytes_of(&map)).map_err(|e| fail(&e))?;
        let alignment = alignment(&header.metadata).map_err(|e| fail(&e))?;
        let data_start = (header.end as u64).div_ceil(alignment) * alignment;
        let tensors = place(header.tensors, data_start, alignment, map_len).map_err(|e| fail(&e))?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            map,
            version: header.version,
            metadata: header.metadata,
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Every metadata key-value, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Every tensor's declaration, in file order.
    pub fn tensor_infos(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors.iter().map(|p| &p.info)
    }

    /// The tensor `name` as float32 in PyTorch's axis order; `None` when the file has none.
    /// An F32 tensor is read in place from the map (GGUF aligns tensor data to at least 32
    /// bytes, so every one is aligned), unless its rows are permuted back ([`unpermute`]).
    pub fn tensor(&self, name: &str) -> Option<Result<Tensor, ReadError>> {
        let placed = self.tensors.iter().find(|p| p.info.name == name)?;
        let range = placed.start..placed.start + placed.len;
        let in_place = match placed.info.ty.id {
            types::F32 => Data::borrow(&self.map, range.clone()),
            _ => None,
        };
        let dequantized = || types::dequantize(placed.info.ty, &data::bytes_of(&self.map)[range]);
        let Some(data) = in_place.or_else(|| dequantized().map(Data::from)) else {
            return Some(Err(ReadError::Type(placed.info.ty.name)));
        };
        let shape: Vec<usize> = placed.info.dims.iter().rev().map(|&d| d as usize).collect();
        Some(
            self.unpermute(name, Tensor::with_data(shape, data))
                .map_err(ReadError::Other),
        )
    }

    /// The names of the file's tensors, in file order.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|p| p.info.name.as_str())
    }

    /// In a `llama` file, `t` with its rows in `transformers`' order when it is a query or
    /// key projection (weight or bias) and the head counts are known; else `t` itself.
    fn unpermute(&self, name: &str, t: Tensor) -> Result<Tensor, RunError> {
        if self.get("general.architecture").and_then(Value::as_str) != Some("llama") {
            return Ok(t);
        }
        let count = |key: &str| self.get(key).and_then(Value::as_u64);
        let (Some(heads), Some(kv_heads)) = (
            count("llama.attention.head_count"),
            count("llama.attention.head_count_kv"),
        ) else {
            return Ok(t);
        };
        let heads = match () {
            _ if name.contains(".attn_q.") => heads,
            _ if name.contains(".attn_k.") => kv_heads,
            _ => return Ok(t),
        };
        unpermute(t, heads as usize).map_err(|rows| {
            let message = format!(
                "cannot undo the rotary permutation of `{name}` in `{}`: its {rows} rows are not {heads} heads of an even size",
                self.path.display()
            );
            RunError::new(None, message)
        })
    }
}

/// Undoes llama.cpp's converter permutation of a Q or K projection's rows: within each of
/// `heads` heads, the converter stores rotary pair `(j, j + d/2)` as rows `(2j, 2j + 1)`;
/// `transformers`' `rotate_half` wants the halves back. The error is the row count.
pub fn unpermute(t: Tensor, heads: usize) -> Result<Tensor, usize> {
    let rows = t.shape.first().copied().unwrap_or(1);
    if heads == 0 || rows % (2 * heads) != 0 {
        return Err(rows);
    }
    let half = rows / heads / 2;
    let width = t.data.len() / rows.max(1);
    let mut data = Vec::with_capacity(t.data.len());
    for h in 0..heads {
        for i in 0..2 {
            for j in 0..half {
                let old = h * 2 * half + j * 2 + i;
                data.extend_from_slice(&t.data[old * width..(old + 1) * width]);
            }
        }
    }
    Ok(Tensor::new(t.shape, data))
}

/// `general.alignment`, or GGUF's default: a power of two.
fn alignment(metadata: &[(String, Value)]) -> Result<u64, String> {
    let Some((_, value)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match value.as_u64() {
        Some(a) if a.is_power_of_two() && a <= 1 << 20 => Ok(a),
        _ => Err(format!(
            "`general.alignment` is {value:?}, not a power of two up to 1 MiB"
        )),
    }
}

/// Each tensor's byte range, checked: whole blocks, aligned, inside the file, no overlaps.
fn place(
    infos: Vec<TensorInfo>,
    data_start: u64,
    alignment: u64,
    file_len: usize,
) -> Result<Vec<Placed>, String> {
    let mut placed = Vec::new();
    let mut names = std::collections::HashSet::new();
    for info in infos {
        if !names.insert(info.name.clone()) {
            return Err(format!("tensor `{}` is declared twice", info.name));
        }
        let len = byte_len(&info)?;
        if info.offset % alignment != 0 {
            return Err(format!(
                "tensor `{}` starts at offset {}, not a multiple of the alignment {alignment}",
                info.name, info.offset
            ));
        }
        let start = data_start.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(len));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len as u64 => placed.push(Placed {
                info,
                start: start as usize,
                len: len as usize,
            }),
            _ => {
                return Err(format!(
                    "tensor `{}` needs {len} bytes at offset {} of the data, past the end of the file ({file_len} bytes): the file is truncated or the tensor's size disagrees with its declaration",
                    info.name, info.offset
                ))
            }
        }
    }
    check_overlaps(&placed)?;
    Ok(placed)
}

/// The bytes a tensor's declaration implies: whole blocks of its type along the inner dim.
fn byte_len(info: &TensorInfo) -> Result<u64, String> {
    let GgmlType {
        name, block, bytes, ..
    } = info.ty;
    let inner = info.dims.first().copied().unwrap_or(1);
    if inner % block != 0 {
        return Err(format!(
            "tensor `{}` is {name} with rows of {inner} elements, not a multiple of {name}'s block of {block}",
            info.name
        ));
    }
    let numel = info.dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    numel
        .and_then(|n| (n / block).checked_mul(bytes))
        .filter(|&len| usize::try_from(len).is_ok())
        .ok_or_else(|| {
            format!(
                "tensor `{}` has dims {:?}, too many elements",
                info.name, info.dims
            )
        })
}

/// No two tensors share a byte: each one's size agrees with where the next one starts.
fn check_overlaps(placed: &[Placed]) -> Result<(), String> {
    let mut order: Vec<&Placed> = placed.iter().filter(|p| p.len > 0).collect();
    order.sort_by_key(|p| p.start);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.start + a.len > b.start {
            return Err(format!(
                "tensor `{}` ({} bytes declared) runs into tensor `{}`: its size disagrees with its declaration",
                a.info.name, a.len, b.info.name
            ));
        }
    }
    Ok(())
}
