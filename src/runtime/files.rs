//! Safetensors files: reading weights and inputs, writing outputs.
//!
//! File contents are user input: a missing, truncated or garbage file is an error that
//! names the path, never a panic. Every dtype attnc reads becomes float32 here; which
//! dtypes are allowed where (floats for params, anything for masks) is the caller's call.
//!
//! A file is memory-mapped ([`data::map`]), and a float32 tensor whose bytes are 4-byte
//! aligned is read in place, never copied: its [`Tensor`] borrows the map. Other dtypes,
//! and float32 at an odd offset, are converted into memory of their own.

use super::data::{self, Bytes, Data};
use super::tensor::{numel, Tensor};
use super::RunError;
use safetensors::tensor::{Metadata, TensorView};
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The 8-byte little-endian header length that starts every safetensors file.
const LEN_BYTES: usize = 8;

/// An opened safetensors file whose header has been validated.
pub struct TensorFile {
    path: PathBuf,
    bytes: Arc<Bytes>,
    header_len: usize,
    metadata: Metadata,
}

/// One tensor of a file: its dtype and, when attnc reads that dtype, its values as f32.
pub struct Entry {
    pub dtype: Dtype,
    pub tensor: Option<Tensor>,
}

impl TensorFile {
    /// Maps and validates `path`: the header must parse and the data must cover exactly
    /// the tensors it declares.
    pub fn open(path: &Path) -> Result<TensorFile, RunError> {
        let bytes = data::map(path).map_err(|e| file_error("read", path, &e.to_string()))?;
        TensorFile::from_shared(path, bytes)
    }

    /// A file's `bytes`, made in memory or read elsewhere; `path` names it in messages.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<TensorFile, RunError> {
        TensorFile::from_shared(path, Arc::new(bytes))
    }

    fn from_shared(path: &Path, bytes: Arc<Bytes>) -> Result<TensorFile, RunError> {
        let (header_len, metadata) = SafeTensors::read_metadata(data::bytes_of(&bytes))
            .map_err(|e| file_error("read", path, &format!("not a well-formed safetensors file ({e})")))?;
        Ok(TensorFile {
            path: path.to_path_buf(),
            bytes,
            header_len,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensor stored under `key`, if there is one: float32 read in place where its
    /// bytes are aligned, anything else converted.
    pub fn get(&self, key: &str) -> Option<Entry> {
        let info = self.metadata.info(key)?;
        let start = LEN_BYTES + self.header_len;
        let range = start + info.data_offsets.0..start + info.data_offsets.1;
        let bytes = data::bytes_of(&self.bytes).get(range.clone())?;
        let in_place = match info.dtype {
            Dtype::F32 => Data::borrow(&self.bytes, range),
            _ => None,
        };
        let tensor = in_place
            .or_else(|| decode(info.dtype, bytes).map(Data::from))
            .filter(|data| data.len() == numel(&info.shape))
            .map(|data| Tensor::with_data(info.shape.clone(), data));
        Some(Entry {
            dtype: info.dtype,
            tensor,
        })
    }
}

/// Where named tensors are read from: a weights file (safetensors or GGUF, see
/// [`super::weights::WeightFile`]), or tensors already in memory ([`Tensors`], what the
/// Python module passes). Binding reads them all the same way, so a missing or misshapen
/// weight is the same error whichever holds it.
pub trait Store {
    /// How messages name the store: a file's path in backquotes, or a phrase.
    fn describe(&self) -> String;

    /// The tensor stored under `key` as float32, or why there is none; an error only where
    /// the store cannot be read.
    fn param(&self, key: &str) -> Result<Param, RunError>;

    /// Every key, in any order.
    fn keys(&self) -> Vec<String>;

    /// The `n` keys nearest to `key` by edit distance, nearest first (ties in alphabetical
    /// order), for "did you mean" hints.
    fn closest_keys(&self, key: &str, n: usize) -> Vec<String> {
        let mut keys = self.keys();
        keys.sort();
        let near = crate::suggest::nearest(key, keys.iter().map(String::as_str), n);
        near.into_iter().map(str::to_string).collect()
    }
}

/// A param as its store holds it.
pub enum Param {
    Missing,
    Tensor(Tensor),
    /// Stored in a type no param can have: the type's name and a hint that starts with a verb.
    Unreadable {
        dtype: String,
        hint: String,
    },
}

impl Param {
    /// A safetensors-typed tensor as a param: a float (read as float32) or unreadable.
    fn typed(dtype: Dtype, tensor: Option<Tensor>) -> Param {
        match tensor {
            Some(t) if is_float(dtype) => Param::Tensor(t),
            _ => Param::Unreadable {
                dtype: format!("{dtype:?}"),
                hint: "store it as F32, F16, BF16 or F64".into(),
            },
        }
    }
}

impl Store for TensorFile {
    fn describe(&self) -> String {
        format!("`{}`", self.path.display())
    }

    fn param(&self, key: &str) -> Result<Param, RunError> {
        Ok(match self.get(key) {
            None => Param::Missing,
            Some(entry) => Param::typed(entry.dtype, entry.tensor),
        })
    }

    fn keys(&self) -> Vec<String> {
        self.metadata.offset_keys()
    }
}

/// Named tensors held in memory, each with the dtype it had before it became float32.
pub struct Tensors {
    /// How messages name them (`the weights given`).
    pub name: String,
    pub entries: Vec<(String, Dtype, Tensor)>,
}

impl Store for Tensors {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn param(&self, key: &str) -> Result<Param, RunError> {
        Ok(match self.entries.iter().find(|(k, _, _)| k == key) {
            None => Param::Missing,
            Some((_, dtype, t)) => Param::typed(*dtype, Some(t.clone())),
        })
    }

    fn keys(&self) -> Vec<String> {
        self.entries.iter().map(|(k, _, _)| k.clone()).collect()
    }
}

/// Whether `dtype` is a floating-point type attnc reads (what a `param` may be).
pub fn is_float(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64)
}

/// The values of little-endian `bytes` of `dtype` as f32; `None` for dtypes attnc does
/// not read (8-bit and smaller floats, complex).
fn decode(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => each(bytes, f32::from_le_bytes),
        Dtype::F64 => each(bytes, |b| f64::from_le_bytes(b) as f32),
        Dtype::F16 => each(bytes, |b| f16_to_f32(u16::from_le_bytes(b))),
        Dtype::BF16 => each(bytes, |b| bf16_to_f32(u16::from_le_bytes(b))),
        Dtype::BOOL => each(bytes, |[b]| f32::from(u8::from(b != 0))),
        Dtype::U8 => each(bytes, |[b]| f32::from(b)),
        Dtype::I8 => each(bytes, |b| f32::from(i8::from_le_bytes(b))),
        Dtype::I16 => each(bytes, |b| f32::from(i16::from_le_bytes(b))),
        Dtype::U16 => each(bytes, |b| f32::from(u16::from_le_bytes(b))),
        Dtype::I32 => each(bytes, |b| i32::from_le_bytes(b) as f32),
        Dtype::U32 => each(bytes, |b| u32::from_le_bytes(b) as f32),
        Dtype::I64 => each(bytes, |b| i64::from_le_bytes(b) as f32),
        Dtype::U64 => each(bytes, |b| u64::from_le_bytes(b) as f32),
        _ => return None,
    })
}

/// `f` applied to each `W`-byte element of `bytes` (a trailing partial element is dropped;
/// the caller checks the count).
fn each<const W: usize>(bytes: &[u8], f: impl Fn([u8; W]) -> f32) -> Vec<f32> {
    bytes
        .chunks_exact(W)
        .map(|c| {
            let mut b = [0; W];
            b.copy_from_slice(c);
            f(b)
        })
        .collect()
}

/// IEEE half precision to single: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let magnitude = match exp {
        // Zero and subnormals: mant * 2^-24, exact in f32.
        0 => {
            let value = mant as f32 * 2f32.powi(-24);
            return if sign == 0 { value } else { -value };
        }
        // Infinity and NaN keep their payload.
        0x1f => 0x7f80_0000 | (mant << 13),
        // Normal: rebias the exponent from 15 to 127.
        _ => ((exp + 112) << 23) | (mant << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// bfloat16 is the top half of an f32.
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Writes `tensors` to `path` as float32 safetensors, each under its name. The bytes go to
/// a temporary file in the same directory that is then renamed over `path`, so a failed
/// run never leaves a partial output behind.
///
/// A symlink is written through: the file it points to is replaced, atomically, and the
/// link stays. A device, a FIFO or a directory is refused ([`output_target`]).
pub fn save(path: &Path, tensors: &[(String, Tensor)]) -> Result<(), RunError> {
    let target = output_target(path)?;
    let encoded = encode(tensors).map_err(|e| file_error("write", path, &e.to_string()))?;
    let temp = temp_path(&target);
    let written = std::fs::write(&temp, encoded).and_then(|()| std::fs::rename(&temp, &target));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        file_error("write", path, &e.to_string())
    })
}

/// The file `-o PATH` writes: `path` itself, or the file its chain of symlinks ends at.
/// Anything but a regular file or a new name is refused, because an output replaced by a
/// rename would silently turn a device, a FIFO or a directory into a file.
pub fn output_target(path: &Path) -> Result<PathBuf, RunError> {
    let mut target = path.to_path_buf();
    for _ in 0..40 {
        let meta = match std::fs::symlink_metadata(&target) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(target),
            Err(e) => return Err(file_error("write", path, &e.to_string())),
        };
        if meta.is_file() {
            return Ok(target);
        }
        if !meta.file_type().is_symlink() {
            let what = format!("it is {}, not a regular file", kind(&meta.file_type()));
            return Err(
                file_error("write", path, &what).with_hint("give `-o` the path of a .safetensors file")
            );
        }
        let link = std::fs::read_link(&target).map_err(|e| file_error("write", path, &e.to_string()))?;
        target = match target.parent() {
            Some(dir) => dir.join(link),
            None => link,
        };
    }
    Err(file_error("write", path, "too many levels of symbolic links"))
}

/// What a file that is neither regular nor a symlink is, for messages.
fn kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    match t.is_dir() {
        true => "a directory",
        false => "a special file",
    }
}

/// The safetensors bytes of `tensors`, all float32.
fn encode(tensors: &[(String, Tensor)]) -> Result<Vec<u8>, SafeTensorError> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, t)| t.data.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let mut views = Vec::new();
    for ((name, t), data) in tensors.iter().zip(&bytes) {
        views.push((name, TensorView::new(Dtype::F32, t.shape.clone(), data)?));
    }
    safetensors::serialize(views, None)
}

/// `dir/.name.PID.tmp` next to `path`: same file system, so the rename is atomic.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map_or("out".into(), |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// `action` is "read" or "write".
pub(super) fn file_error(action: &str, path: &Path, what: &str) -> RunError {
    RunError::new(None, format!("cannot {action} `{}`: {what}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::testutil::scratch;

    fn error_of(path: &Path) -> String {
        TensorFile::open(path).err().unwrap().to_string()
    }

    #[test]
    fn f16_converts_normals_subnormals_and_specials() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
    }

    #[test]
    fn bf16_and_f64_convert() {
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0xc0a0), -5.0);
        let bytes = 0.1f64.to_le_bytes();
        assert_eq!(decode(Dtype::F64, &bytes), Some(vec![0.1f32]));
        assert_eq!(decode(Dtype::I64, &(-3i64).to_le_bytes()), Some(vec![-3.0]));
        assert_eq!(decode(Dtype::BOOL, &[0, 1, 2]), Some(vec![0.0, 1.0, 1.0]));
        assert_eq!(decode(Dtype::C64, &[0; 8]), None);
    }

    #[test]
    fn saved_tensors_load_back() {
        let dir = scratch("files");
        let path = dir.path().join("round_trip.safetensors");
        let a = Tensor::new(vec![2, 3], vec![1.0, -2.5, 3.0, 0.0, 1e-9, 7.0]);
        let s = Tensor::scalar(4.0);
        save(&path, &[("a".into(), a.clone()), ("s".into(), s.clone())]).unwrap();
        let file = TensorFile::open(&path).unwrap();
        assert_eq!(file.get("a").unwrap().tensor, Some(a));
        assert_eq!(file.get("s").unwrap().dtype, Dtype::F32);
        assert_eq!(file.get("s").unwrap().tensor, Some(s));
        assert!(file.get("b").is_none());
    }

    #[test]
    fn aligned_float32_is_read_in_place_from_the_map() {
        let dir = scratch("files");
        let path = dir.path().join("in_place.safetensors");
        let a = Tensor::new(vec![3], vec![1.0, 2.0, 3.0]);
        save(&path, &[("a".into(), a.clone())]).unwrap();
        let file = TensorFile::open(&path).unwrap();
        let read = file.get("a").unwrap().tensor.unwrap();
        assert!(read.data.is_borrowed());
        assert_eq!(read, a);
        let bytes = data::bytes_of(&file.bytes).as_ptr_range();
        assert!(bytes.contains(&read.data.as_ptr().cast::<u8>()));
    }

    #[test]
    fn misaligned_float32_and_other_dtypes_are_converted() {
        // A one-byte tensor first puts the float at an odd offset (safetensors' own writer
        // would order them by alignment; a file from elsewhere need not).
        let mut header = br#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}}"#.to_vec();
        header.resize(header.len().next_multiple_of(8), b' ');
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header);
        bytes.push(7);
        bytes.extend(2.5f32.to_le_bytes());
        let dir = scratch("files");
        let path = dir.path().join("misaligned.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let file = TensorFile::open(&path).unwrap();
        let b = file.get("b").unwrap().tensor.unwrap();
        assert!(!b.data.is_borrowed());
        assert_eq!(b.data, [2.5]);
        let a = file.get("a").unwrap().tensor.unwrap();
        assert!(!a.data.is_borrowed());
        assert_eq!(a.data, [7.0]);
    }

    #[test]
    fn bad_files_are_errors_naming_the_path() {
        let temp = scratch("files");
        let dir = temp.path();
        let missing = dir.join("missing.safetensors");
        assert!(error_of(&missing).contains("missing.safetensors"));

        let garbage = dir.join("garbage.safetensors");
        std::fs::write(&garbage, b"this is not a safetensors file at all").unwrap();
        assert!(error_of(&garbage).contains("garbage.safetensors"));

        let good = dir.join("good.safetensors");
        save(&good, &[("x".into(), Tensor::new(vec![4], vec![1.0; 4]))]).unwrap();
        let mut bytes = std::fs::read(&good).unwrap();
        bytes.truncate(bytes.len() - 3);
        let truncated = dir.join("truncated.safetensors");
        std::fs::write(&truncated, bytes).unwrap();
        let message = error_of(&truncated);
        assert!(message.contains("truncated.safetensors"), "{message}");
    }

    #[test]
    fn a_failed_save_leaves_no_file() {
        let dir = scratch("files");
        let path = dir.path().join("no_such_dir").join("out.safetensors");
        assert!(save(&path, &[("x".into(), Tensor::scalar(1.0))]).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn closest_keys_rank_by_edit_distance() {
        let dir = scratch("files");
        let path = dir.path().join("keys.safetensors");
        let names = ["linears.0.weight", "linears.0.bias", "linears.1.weight", "norm"];
        let tensors: Vec<(String, Tensor)> = names
            .iter()
            .map(|n| (n.to_string(), Tensor::scalar(0.0)))
            .collect();
        save(&path, &tensors).unwrap();
        let file = TensorFile::open(&path).unwrap();
        assert_eq!(
            file.closest_keys("linear.0.weight", 2),
            ["linears.0.weight", "linears.1.weight"]
        );
    }
}
