//! Tensors: the row-major [`Tensor`] that crosses the runtime's boundary (its elements
//! owned, or read in place from a weights file: [`Data`]), and the
//! strided [`Strided`] view the interpreter works on, so that `transpose`, `permute`,
//! slicing and broadcasting cost nothing and only `contiguous`/`reshape` copy.
//!
//! This is the ground truth later optimizations are compared against, so it favours the
//! obviously right over the fast: every copy goes through one odometer loop.

use super::data::Data;
use std::rc::Rc;

/// A float32 tensor, row-major and contiguous.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Tensor {
    /// A tensor of `shape` over `data`; `data.len()` must be the product of `shape`.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Tensor {
        Tensor::with_data(shape, data.into())
    }

    /// As [`Tensor::new`], over elements that may be borrowed.
    pub fn with_data(shape: Vec<usize>, data: Data) -> Tensor {
        debug_assert_eq!(numel(&shape), data.len(), "shape {shape:?}");
        Tensor { shape, data }
    }

    /// A rank-0 tensor.
    pub fn scalar(value: f32) -> Tensor {
        Tensor::new(Vec::new(), vec![value])
    }
}

/// The number of elements of a tensor of `shape`.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The strides of a row-major tensor of `shape`.
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// The shape two shapes broadcast to, as PyTorch does: align from the right; sizes must
/// be equal or one of them 1. `None` when they do not broadcast.
///
/// Written here again on purpose, not taken from the compiler's shape library
/// ([`crate::shape`]): the interpreter is the independent oracle the compiled code is
/// tested against, so a mistake in the library cannot hide in both.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let size = |s: &[usize], i: usize| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    (0..rank)
        .map(|i| match (size(a, i), size(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// A strided view over a shared buffer (a weight's stays where it was read, in place):
/// element `[i0, i1, ..]` is
/// `buf[offset + i0 * strides[0] + i1 * strides[1] + ..]`. A stride of 0 repeats an
/// element (broadcasting).
#[derive(Clone, Debug)]
pub struct Strided {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub buf: Rc<Data>,
}

impl From<Tensor> for Strided {
    fn from(t: Tensor) -> Strided {
        Strided {
            strides: row_major_strides(&t.shape),
            shape: t.shape,
            offset: 0,
            buf: Rc::new(t.data),
        }
    }
}

impl Strided {
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// The elements in row-major order, copied.
    pub fn to_vec(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.numel());
        if self.numel() == 0 {
            // An empty view's offset may point past the buffer: nothing to read.
        } else if self.is_contiguous() {
            out.extend_from_slice(&self.buf[self.offset..self.offset + self.numel()]);
        } else {
            for_each_offset(&self.shape, &self.strides, self.offset, |o| out.push(self.buf[o]));
        }
        out
    }

    /// A row-major copy.
    pub fn to_tensor(&self) -> Tensor {
        Tensor::new(self.shape.clone(), self.to_vec())
    }

    /// The same values, laid out row-major (no copy when they already are).
    pub fn contiguous(&self) -> Strided {
        if self.is_contiguous() {
            self.clone()
        } else {
            self.to_tensor().into()
        }
    }

    /// Row-major for its shape (axes of size 1 do not count, as in PyTorch).
    pub fn is_contiguous(&self) -> bool {
        let expected = row_major_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&expected))
            .all(|(&size, (s, e))| size == 1 || s == e)
    }

    /// The same elements under another shape of equal element count (a copy when the
    /// layout is not row-major).
    pub fn reshape(&self, shape: Vec<usize>) -> Option<Strided> {
        (numel(&shape) == self.numel()).then(|| {
            let base = self.contiguous();
            Strided {
                strides: row_major_strides(&shape),
                shape,
                offset: base.offset,
                buf: base.buf,
            }
        })
    }

    /// Axes reordered: axis `i` of the result is axis `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Option<Strided> {
        let mut seen = vec![false; self.rank()];
        for &p in perm {
            if *seen.get(p)? {
                return None;
            }
            seen[p] = true;
        }
        (perm.len() == self.rank()).then(|| Strided {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
            buf: self.buf.clone(),
        })
    }

    pub fn transpose(&self, a: usize, b: usize) -> Option<Strided> {
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.get(a)?;
        perm.get(b)?;
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// A new axis of size 1 at `axis` (`0..=rank`).
    pub fn unsqueeze(&self, axis: usize) -> Option<Strided> {
        let mut v = self.clone();
        (axis <= v.rank()).then(|| {
            v.shape.insert(axis, 1);
            v.strides.insert(axis, 0);
            v
        })
    }

    /// `axis` removed when its size is 1; unchanged otherwise, as in PyTorch.
    pub fn squeeze(&self, axis: usize) -> Option<Strided> {
        let mut v = self.clone();
        if *v.shape.get(axis)? == 1 {
            v.shape.remove(axis);
            v.strides.remove(axis);
        }
        Some(v)
    }

    /// `start..end` of `axis`.
    pub fn slice(&self, axis: usize, start: usize, end: usize) -> Option<Strided> {
        if start > end || end > *self.shape.get(axis)? {
            return None;
        }
        let mut v = self.clone();
        v.offset += start * v.strides[axis];
        v.shape[axis] = end - start;
        Some(v)
    }

    /// `len` elements of `axis` from `start`, every `step`-th (`x[start::step]`): the
    /// axis's stride times `step`.
    pub fn step(&self, axis: usize, start: usize, step: usize, len: usize) -> Option<Strided> {
        let last = match len {
            0 => start,
            _ => start.checked_add(step.checked_mul(len - 1)?)?,
        };
        if step == 0 || start > *self.shape.get(axis)? || (len > 0 && last >= self.shape[axis]) {
            return None;
        }
        let mut v = self.clone();
        if len > 0 {
            v.offset += start * v.strides[axis];
        }
        v.shape[axis] = len;
        v.strides[axis] *= step;
        Some(v)
    }

    /// Index `index` of `axis`, which is dropped.
    pub fn select(&self, axis: usize, index: usize) -> Option<Strided> {
        let mut v = self.slice(axis, index, index + 1)?;
        v.shape.remove(axis);
        v.strides.remove(axis);
        Some(v)
    }

    /// Broadcast to `shape` (PyTorch's `expand`): new leading axes and axes of size 1
    /// repeat with stride 0.
    pub fn expand(&self, shape: &[usize]) -> Option<Strided> {
        let extra = shape.len().checked_sub(self.rank())?;
        let mut strides = vec![0; shape.len()];
        for (i, (&size, &stride)) in self.shape.iter().zip(&self.strides).enumerate() {
            match shape[extra + i] {
                s if s == size => strides[extra + i] = stride,
                _ if size == 1 => {}
                _ => return None,
            }
        }
        Some(Strided {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
            buf: self.buf.clone(),
        })
    }
}

/// Calls `f` with the buffer offset of every element of a strided view, in row-major
/// order. One loop for every copy, so that only one place needs to be right.
fn for_each_offset(shape: &[usize], strides: &[usize], offset: usize, mut f: impl FnMut(usize)) {
    if shape.contains(&0) {
        return;
    }
    let Some((&len, outer)) = shape.split_last() else {
        f(offset);
        return;
    };
    let step = strides[outer.len()];
    let mut index = vec![0; outer.len()];
    let mut base = offset;
    loop {
        for j in 0..len {
            f(base + j * step);
        }
        // Advance the outer index like an odometer, last axis fastest.
        let mut axis = outer.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            base += strides[axis];
            if index[axis] < outer[axis] {
                break;
            }
            base -= strides[axis] * outer[axis];
            index[axis] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(shape: &[usize]) -> Strided {
        Tensor::new(shape.to_vec(), (0..numel(shape)).map(|i| i as f32).collect()).into()
    }

    #[test]
    fn transpose_then_copy_reorders_elements() {
        let t = iota(&[2, 3]).transpose(0, 1).unwrap();
        assert!(!t.is_contiguous());
        assert_eq!(t.to_vec(), [0., 3., 1., 4., 2., 5.]);
    }

    #[test]
    fn slice_and_select_are_views() {
        let t = iota(&[3, 4]);
        assert_eq!(t.slice(1, 1, 3).unwrap().to_vec(), [1., 2., 5., 6., 9., 10.]);
        assert_eq!(t.select(0, 2).unwrap().to_vec(), [8., 9., 10., 11.]);
        assert!(t.slice(1, 2, 5).is_none());
    }

    #[test]
    fn a_step_is_a_larger_stride() {
        let t = iota(&[2, 5]);
        let odd = t.step(1, 1, 2, 2).unwrap();
        assert_eq!(
            (odd.to_vec(), odd.strides.clone()),
            (vec![1., 3., 6., 8.], vec![5, 2])
        );
        assert_eq!(t.step(1, 0, 3, 2).unwrap().to_vec(), [0., 3., 5., 8.]);
        assert!(t.step(1, 1, 2, 3).is_none());
        assert!(t.step(1, 0, 0, 1).is_none());
    }

    #[test]
    fn expand_repeats_size_one_axes() {
        let t = iota(&[2, 1]).expand(&[3, 2, 2]).unwrap();
        assert_eq!(t.to_vec(), [0., 0., 1., 1., 0., 0., 1., 1., 0., 0., 1., 1.]);
        assert!(iota(&[2]).expand(&[3]).is_none());
    }

    #[test]
    fn broadcast_aligns_from_the_right() {
        assert_eq!(broadcast_shapes(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[2], &[3]), None);
    }

    #[test]
    fn reshape_of_a_transpose_copies() {
        let t = iota(&[2, 3]).transpose(0, 1).unwrap().reshape(vec![6]).unwrap();
        assert_eq!(t.to_vec(), [0., 3., 1., 4., 2., 5.]);
        assert!(iota(&[2, 3]).reshape(vec![4]).is_none());
    }

    #[test]
    fn squeeze_leaves_other_sizes_alone() {
        assert_eq!(iota(&[2, 1]).squeeze(1).unwrap().shape, [2]);
        assert_eq!(iota(&[2, 3]).squeeze(1).unwrap().shape, [2, 3]);
        assert_eq!(iota(&[2]).unsqueeze(0).unwrap().shape, [1, 2]);
    }
}
