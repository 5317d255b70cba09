//! The GGUF header: magic, version, metadata key-values and tensor infos, read with every
//! length and count checked against the bytes that remain, so a corrupt or truncated file
//! is an error, never an out-of-bounds read or an allocation its size does not justify.
//!
//! Layout (little-endian; versions 2 and 3 are the same, version 3 only allows big-endian
//! files, which are refused): `GGUF`, u32 version, u64 tensor count, u64 metadata count,
//! the metadata (string key, u32 value type, value), the tensor infos (string name, u32
//! rank, u64 dims innermost first, u32 GGML type, u64 offset into the data), padding to the
//! alignment, the data.

use super::types::GgmlType;

/// A metadata value, of any of GGUF's 13 value types.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A tensor as the header declares it; `offset` is relative to the start of the data.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF's dims, innermost first (`[cols, rows]` for a matrix).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub offset: u64,
}

/// The parsed header and where the data starts (before alignment).
pub struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub end: usize,
}

/// GGML's limit on a tensor's rank.
const MAX_DIMS: u32 = 4;
/// How deep arrays of arrays may nest; real files nest none.
const MAX_NESTING: usize = 8;

/// Parses the header of `bytes`; errors are lower-case phrases without the file's name.
pub fn header(bytes: &[u8]) -> Result<Header, String> {
    let mut c = Cursor { bytes, at: 0 };
    if c.take(4).ok() != Some(b"GGUF".as_slice()) {
        return Err("not a GGUF file (no `GGUF` magic)".into());
    }
    let version = c.u32()?;
    match version {
        2 | 3 => {}
        1 => return Err("GGUF version 1 is not supported (only versions 2 and 3)".into()),
        v if matches!(v.swap_bytes(), 2 | 3) => {
            return Err("a big-endian GGUF file; only little-endian files are read".into())
        }
        v => return Err(format!("unknown GGUF version {v} (only versions 2 and 3)")),
    }
    let tensor_count = c.u64()?;
    let kv_count = c.u64()?;
    // Each metadata entry takes at least 12 bytes (key length, value type), each tensor
    // info at least 24 (name length, rank, type, offset).
    c.require_room(kv_count, 12, "metadata entries")?;
    let mut metadata = Vec::new();
    for _ in 0..kv_count {
        let key = c.string()?;
        let ty = c.u32()?;
        let value = c.value(ty, 0).map_err(|e| format!("metadata `{key}`: {e}"))?;
        metadata.push((key, value));
    }
    c.require_room(tensor_count, 24, "tensor infos")?;
    let mut tensors = Vec::new();
    for _ in 0..tensor_count {
        tensors.push(c.tensor_info()?);
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        end: c.at,
    })
}

/// A read position in the header's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "the file ends inside its header (at byte {}, {n} more needed)",
                self.at
            ));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }

    /// A count of `count` items of at least `min` bytes each must fit in what remains.
    fn require_room(&self, count: u64, min: u64, what: &str) -> Result<(), String> {
        let left = (self.bytes.len() - self.at) as u64;
        match count.checked_mul(min) {
            Some(need) if need <= left => Ok(()),
            _ => Err(format!(
                "the header declares {count} {what}, more than the file's {left} remaining bytes can hold"
            )),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u64()?;
        self.require_room(len, 1, "string bytes")?;
        let bytes = self.take(len as usize)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("a string at byte {} is not UTF-8", self.at))
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, String> {
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.array()?)),
            1 => Value::I8(i8::from_le_bytes(self.array()?)),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()? {
                [0] => Value::Bool(false),
                [1] => Value::Bool(true),
                [b] => return Err(format!("a bool of byte value {b}")),
            },
            8 => Value::String(self.string()?),
            9 => self.array_value(depth)?,
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            t => return Err(format!("unknown value type {t}")),
        })
    }

    fn array_value(&mut self, depth: usize) -> Result<Value, String> {
        if depth >= MAX_NESTING {
            return Err(format!("arrays nested deeper than {MAX_NESTING}"));
        }
        let ty = self.u32()?;
        let len = self.u64()?;
        // The smallest element: a byte; an array's type and length; a string's length.
        let min = match ty {
            9 => 12,
            8 => 8,
            _ => 1,
        };
        self.require_room(len, min, "array elements")?;
        let items = (0..len)
            .map(|_| self.value(ty, depth + 1))
            .collect::<Result<_, _>>()?;
        Ok(Value::Array(items))
    }

    fn tensor_info(&mut self) -> Result<TensorInfo, String> {
        let name = self.string()?;
        let rank = self.u32()?;
        if rank > MAX_DIMS {
            return Err(format!(
                "tensor `{name}` has rank {rank}, more than GGML's {MAX_DIMS}"
            ));
        }
        let dims = (0..rank).map(|_| self.u64()).collect::<Result<Vec<_>, _>>()?;
        let id = self.u32()?;
        let ty =
            GgmlType::from_id(id).ok_or_else(|| format!("tensor `{name}` has unknown GGML type {id}"))?;
        let offset = self.u64()?;
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
        })
    }
}
