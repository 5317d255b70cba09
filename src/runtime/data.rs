//! A tensor's elements: owned, or read in place from a file's bytes shared by every tensor
//! of the file (a memory map), so that loading a float32 weight copies nothing.
//!
//! Whatever holds them, the elements are a `&[f32]` ([`Data`] dereferences to one): the
//! kernels, the interpreter and the gathers never know where they live. Writing to a
//! borrowed tensor (which no weight needs) first copies it into memory of its own, as a
//! copy-on-write page would.

use std::fmt;
use std::fs::File;
use std::ops::{Deref, DerefMut, Range};
use std::path::Path;
use std::sync::Arc;

/// Bytes that several tensors read from: a file's memory map, or a file made in memory;
/// either gives the same bytes at the same address every time, which borrowing relies on.
pub type Bytes = dyn AsRef<[u8]> + Send + Sync;

/// A tensor's float32 elements, owned or borrowed from shared [`Bytes`].
pub struct Data(Repr);

enum Repr {
    Owned(Vec<f32>),
    /// The elements are `bytes[range]`, checked 4-byte aligned and a whole number of floats
    /// when made ([`Data::borrow`]).
    Borrowed {
        bytes: Arc<Bytes>,
        range: Range<usize>,
    },
}

impl Data {
    /// `bytes[range]` read in place as little-endian float32, when they can be: the range
    /// is inside `bytes`, a whole number of floats, starts at an address that is a multiple
    /// of 4, and the machine is little-endian. `None` otherwise (the caller converts).
    pub fn borrow(bytes: &Arc<Bytes>, range: Range<usize>) -> Option<Data> {
        let slice = bytes_of(bytes).get(range.clone())?;
        let fits = cfg!(target_endian = "little") && bytemuck::try_cast_slice::<u8, f32>(slice).is_ok();
        fits.then(|| {
            Data(Repr::Borrowed {
                bytes: bytes.clone(),
                range,
            })
        })
    }

    /// Whether the elements are read in place from shared bytes.
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0, Repr::Borrowed { .. })
    }

    pub fn as_slice(&self) -> &[f32] {
        match &self.0 {
            Repr::Owned(v) => v,
            // `borrow` checked the range's bounds, size and alignment, and the bytes behind
            // an `Arc` never move, so the cast cannot fail.
            Repr::Borrowed { bytes, range } => bytemuck::cast_slice(&bytes_of(bytes)[range.clone()]),
        }
    }

    /// The elements, writable: a borrowed tensor is copied into memory of its own first.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        if let Repr::Borrowed { .. } = self.0 {
            self.0 = Repr::Owned(self.as_slice().to_vec());
        }
        match &mut self.0 {
            Repr::Owned(v) => v,
            Repr::Borrowed { .. } => unreachable!("made owned above"),
        }
    }

    /// The elements as a vector: free when owned, a copy when borrowed.
    pub fn into_vec(self) -> Vec<f32> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::Borrowed { .. } => self.as_slice().to_vec(),
        }
    }
}

impl From<Vec<f32>> for Data {
    fn from(v: Vec<f32>) -> Data {
        Data(Repr::Owned(v))
    }
}

impl Deref for Data {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        self.as_slice()
    }
}

impl DerefMut for Data {
    fn deref_mut(&mut self) -> &mut [f32] {
        self.as_mut_slice()
    }
}

impl<'a> IntoIterator for &'a Data {
    type Item = &'a f32;
    type IntoIter = std::slice::Iter<'a, f32>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

/// A clone of borrowed elements borrows them too: no copy.
impl Clone for Data {
    fn clone(&self) -> Data {
        Data(match &self.0 {
            Repr::Owned(v) => Repr::Owned(v.clone()),
            Repr::Borrowed { bytes, range } => Repr::Borrowed {
                bytes: bytes.clone(),
                range: range.clone(),
            },
        })
    }
}

/// Equal elements are equal data, wherever they live.
impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> PartialEq<[f32; N]> for Data {
    fn eq(&self, other: &[f32; N]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<f32>> for Data {
    fn eq(&self, other: &Vec<f32>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[f32]> for Data {
    fn eq(&self, other: &[f32]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[f32]> for Data {
    fn eq(&self, other: &&[f32]) -> bool {
        self.as_slice() == *other
    }
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// The bytes behind an `Arc` of [`Bytes`].
pub fn bytes_of(bytes: &Arc<Bytes>) -> &[u8] {
    (**bytes).as_ref()
}

/// The bytes of the regular file at `path`, memory-mapped: pages are read from the file
/// when first touched and shared with the page cache, never copied into the heap. Anything
/// else (a pipe, a device) is read into memory, since it cannot be mapped.
pub fn map(path: &Path) -> std::io::Result<Arc<Bytes>> {
    let file = File::open(path)?;
    if !file.metadata()?.is_file() {
        return read(file);
    }
    // SAFETY: the map is private (`MAP_PRIVATE`) and read-only (`PROT_READ`): attnc never
    // writes through it, and no write of its own can reach the file. What a map cannot rule
    // out is another process truncating or rewriting the file while it is mapped: the bytes
    // would change under the slices read from them (or the read would fault). attnc assumes,
    // as safetensors, candle and llama.cpp do, that a weights file is not modified while a
    // model that loaded it runs; docs/LANGUAGE.md (Files) and the README say so to users.
    let map = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }?;
    Ok(Arc::new(map))
}

/// The whole of `file`, read into memory.
fn read(mut file: File) -> std::io::Result<Arc<Bytes>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(Arc::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(bytes: Vec<u8>) -> Arc<Bytes> {
        Arc::new(bytes)
    }

    fn floats(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn borrowed_elements_are_read_in_place() {
        let bytes = shared(floats(&[1.0, -2.0, 3.5, 4.0]));
        let base = bytes_of(&bytes).as_ptr();
        let Some(data) = Data::borrow(&bytes, 4..12) else {
            // An allocator that hands out byte vectors at odd addresses: nothing to test.
            assert_ne!(base.align_offset(4), 0);
            return;
        };
        assert!(data.is_borrowed());
        assert_eq!(data, [-2.0, 3.5]);
        assert_eq!(data.as_ptr().cast::<u8>(), base.wrapping_add(4));
        let copy = data.clone();
        assert_eq!(copy.as_ptr(), data.as_ptr());
    }

    #[test]
    fn misaligned_or_partial_ranges_are_not_borrowed() {
        let bytes = shared(floats(&[1.0, 2.0, 3.0]));
        assert!(Data::borrow(&bytes, 1..5).is_none());
        assert!(Data::borrow(&bytes, 0..6).is_none());
        assert!(Data::borrow(&bytes, 8..16).is_none());
    }

    #[test]
    fn writing_a_borrowed_tensor_copies_it_first() {
        let bytes = shared(floats(&[1.0, 2.0]));
        let Some(mut data) = Data::borrow(&bytes, 0..8) else {
            return;
        };
        data[1] = 5.0;
        assert!(!data.is_borrowed());
        assert_eq!(data, [1.0, 5.0]);
        assert_eq!(&bytes_of(&bytes)[4..8], 2f32.to_le_bytes());
    }
}
