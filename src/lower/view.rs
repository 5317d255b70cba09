//! Strided views with concrete sizes: what the view ops of the IR (`transpose`, `view`,
//! `slice`, broadcasting, ..) do to a value without touching its elements. Which sizes
//! broadcast is the shape library's rule ([`crate::shape`]), applied to numbers.

use crate::kernel::{BufId, Operand};
use crate::shape::{self, Concrete};

/// Element `[i0, i1, ..]` of the value is `buf[offset + Σ i·strides]`.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub buf: BufId,
    pub offset: usize,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

/// The strides of a row-major tensor of `shape`.
pub fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl View {
    /// A whole row-major buffer.
    pub fn whole(buf: BufId, shape: Vec<usize>) -> View {
        View {
            buf,
            offset: 0,
            strides: row_major(&shape),
            shape,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The operand reading this view over its own shape.
    pub fn operand(&self) -> Operand {
        Operand {
            buf: self.buf,
            offset: self.offset,
            strides: self.strides.clone(),
        }
    }

    /// Row-major for its shape (axes of size 1 do not count, as in PyTorch).
    pub fn is_contiguous(&self) -> bool {
        let expected = row_major(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&expected))
            .all(|(&n, (s, e))| n == 1 || s == e)
    }

    pub fn permute(&self, perm: &[usize]) -> Option<View> {
        if perm.len() != self.shape.len() {
            return None;
        }
        Some(View {
            buf: self.buf,
            offset: self.offset,
            shape: perm
                .iter()
                .map(|&p| self.shape.get(p).copied())
                .collect::<Option<_>>()?,
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
        })
    }

    pub fn transpose(&self, a: usize, b: usize) -> Option<View> {
        let mut perm: Vec<usize> = (0..self.shape.len()).collect();
        if a >= perm.len() || b >= perm.len() {
            return None;
        }
        perm.swap(a, b);
        self.permute(&perm)
    }

    pub fn unsqueeze(&self, axis: usize) -> Option<View> {
        if axis > self.shape.len() {
            return None;
        }
        let mut v = self.clone();
        v.shape.insert(axis, 1);
        v.strides.insert(axis, 0);
        Some(v)
    }

    /// Removes `axis` when its size is 1 and leaves the view as it is otherwise, as PyTorch.
    pub fn squeeze(&self, axis: usize) -> Option<View> {
        let mut v = self.clone();
        if *self.shape.get(axis)? == 1 {
            v.shape.remove(axis);
            v.strides.remove(axis);
        }
        Some(v)
    }

    pub fn slice(&self, axis: usize, start: usize, end: usize) -> Option<View> {
        if end < start || end > *self.shape.get(axis)? {
            return None;
        }
        let mut v = self.clone();
        if end > start {
            v.offset += start * self.strides[axis];
        }
        v.shape[axis] = end - start;
        Some(v)
    }

    /// `len` elements of `axis` from `start`, every `step`-th: the axis's stride times `step`.
    pub fn step(&self, axis: usize, start: usize, step: usize, len: usize) -> Option<View> {
        let last = match len {
            0 => start,
            _ => start.checked_add(step.checked_mul(len - 1)?)?,
        };
        if step == 0 || start > *self.shape.get(axis)? || (len > 0 && last >= self.shape[axis]) {
            return None;
        }
        let mut v = self.clone();
        if len > 0 {
            v.offset += start * self.strides[axis];
        }
        v.shape[axis] = len;
        v.strides[axis] *= step;
        Some(v)
    }

    pub fn select(&self, axis: usize, index: usize) -> Option<View> {
        if index >= *self.shape.get(axis)? {
            return None;
        }
        let mut v = self.clone();
        v.offset += index * self.strides[axis];
        v.shape.remove(axis);
        v.strides.remove(axis);
        Some(v)
    }

    /// Broadcasts to `shape` as PyTorch's `expand`: align from the right; an axis of size 1
    /// (or a missing one) repeats with stride 0.
    pub fn expand(&self, shape: &[usize]) -> Option<View> {
        let rank = shape.len();
        if self.shape.len() > rank {
            return None;
        }
        let pad = rank - self.shape.len();
        let mut strides = vec![0; rank];
        for i in 0..self.shape.len() {
            let (n, t) = (self.shape[i], shape[pad + i]);
            if !shape::broadcasts_to(&Concrete, &n, &t) {
                return None;
            }
            strides[pad + i] = if n == 1 { 0 } else { self.strides[i] };
        }
        Some(View {
            buf: self.buf,
            offset: self.offset,
            shape: shape.to_vec(),
            strides,
        })
    }

    /// The view with `shape`, when the elements' layout allows one without a copy
    /// (PyTorch's `computeStride`); `None` when a copy is needed.
    pub fn reshape(&self, shape: &[usize]) -> Option<View> {
        let numel: usize = shape.iter().product();
        if numel != self.numel() {
            return None;
        }
        let strides = if numel == 0 || self.shape.is_empty() {
            row_major(shape)
        } else {
            view_strides(&self.shape, &self.strides, shape)?
        };
        Some(View {
            buf: self.buf,
            offset: self.offset,
            shape: shape.to_vec(),
            strides,
        })
    }
}

/// PyTorch's `computeStride`: strides for `new` over the memory of `(old, old_strides)`,
/// when every chunk of contiguous old axes maps onto whole new axes.
fn view_strides(old: &[usize], old_strides: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    let mut out = vec![0; new.len()];
    let mut view_d = new.len() as isize - 1;
    let mut chunk_base = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..old.len()).rev() {
        tensor_numel *= old[d];
        let chunk_ends = d == 0 || (old[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= new[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = old_strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_merges_contiguous_axes_and_refuses_transposed_ones() {
        let v = View::whole(0, vec![2, 3, 4]);
        let r = v.reshape(&[6, 4]).unwrap();
        assert_eq!(r.strides, [4, 1]);
        let t = v.transpose(1, 2).unwrap();
        assert!(t.reshape(&[2, 12]).is_none());
        let split = t.reshape(&[2, 2, 2, 3]).unwrap();
        assert_eq!(split.strides, [12, 2, 1, 4]);
    }

    #[test]
    fn expand_gives_broadcast_axes_stride_zero() {
        let v = View::whole(0, vec![3, 1]);
        let e = v.expand(&[2, 3, 4]).unwrap();
        assert_eq!(e.strides, [0, 1, 0]);
        assert!(v.expand(&[2, 4]).is_none());
    }
}
