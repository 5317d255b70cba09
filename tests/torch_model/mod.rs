//! PyTorch's stride rules for concrete sizes, transcribed from ATen: what each op returns,
//! and where PyTorch raises. The layout property test runs the checker's accepted programs
//! through it at many sizes. `LAYOUT.md` beside the checker names the ATen functions.

/// A tensor's sizes and strides (in elements).
#[derive(Clone, Debug, PartialEq)]
pub struct T {
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
}

/// Why PyTorch raises.
pub type Refusal = String;

impl T {
    pub fn row_major(shape: Vec<i64>) -> T {
        let strides = row_major(&shape);
        T { shape, strides }
    }

    fn numel(&self) -> i64 {
        self.shape.iter().product()
    }

    /// `Tensor.is_contiguous()`: axes of size 1 do not count; an empty tensor is contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let expected = row_major(&self.shape);
        (0..self.shape.len()).all(|i| self.shape[i] == 1 || self.strides[i] == expected[i])
    }

    /// `is_non_overlapping_and_dense`: the axes of size 2 or more, sorted by stride, are
    /// row-major.
    fn is_dense(&self) -> bool {
        let mut axes: Vec<usize> = (0..self.shape.len()).collect();
        axes.sort_by_key(|&a| (self.strides[a], self.shape[a]));
        let mut expected = 1;
        for a in axes {
            if self.shape[a] < 2 {
                continue;
            }
            if self.strides[a] != expected {
                return false;
            }
            expected *= self.shape[a];
        }
        true
    }

    pub fn transpose(&self, a: usize, b: usize) -> T {
        let mut t = self.clone();
        t.shape.swap(a, b);
        t.strides.swap(a, b);
        t
    }

    pub fn permute(&self, perm: &[usize]) -> T {
        T {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
        }
    }

    /// `unsqueeze`'s stride: `sizes[d] * strides[d]`, or 1 at the end.
    pub fn unsqueeze(&self, d: usize) -> T {
        let stride = match d < self.shape.len() {
            true => self.shape[d] * self.strides[d],
            false => 1,
        };
        let mut t = self.clone();
        t.shape.insert(d, 1);
        t.strides.insert(d, stride);
        t
    }

    /// `expand(sizes)`, a `None` size being `-1` (ATen's `inferExpandGeometry`): an axis
    /// keeps its stride where it keeps its size, an axis of size 1 that repeats gets stride
    /// 0, a new leading axis gets stride 0 or, at size 1, `size * stride` of the next axis;
    /// a rank-0 tensor expands with every stride 0.
    pub fn expand(&self, sizes: &[Option<i64>]) -> Result<T, Refusal> {
        let rank = self.shape.len();
        let pad = sizes.len().checked_sub(rank).ok_or("expand to fewer axes")?;
        let mut t = T {
            shape: vec![0; sizes.len()],
            strides: vec![0; sizes.len()],
        };
        for i in (0..sizes.len()).rev() {
            let (mut size, mut stride) = match i.checked_sub(pad) {
                Some(j) => (self.shape[j], self.strides[j]),
                None if i + 1 < sizes.len() => (1, t.shape[i + 1] * t.strides[i + 1]),
                None => (1, 1),
            };
            let target = match sizes[i] {
                Some(s) => s,
                None if i >= pad => size,
                None => return Err("-1 in a new leading axis of expand".into()),
            };
            if target != size {
                if size != 1 {
                    return Err(format!("expand of size {size} to {target}"));
                }
                (size, stride) = (target, 0);
            }
            t.shape[i] = size;
            t.strides[i] = stride;
        }
        if rank == 0 {
            t.strides.fill(0);
        }
        Ok(t)
    }

    /// `squeeze(d)` removes the axis only where its size is 1.
    pub fn squeeze(&self, d: usize) -> T {
        let mut t = self.clone();
        if t.shape[d] == 1 {
            t.shape.remove(d);
            t.strides.remove(d);
        }
        t
    }

    pub fn slice(&self, d: usize, start: i64, end: i64) -> Result<T, Refusal> {
        if start < 0 || end < start || end > self.shape[d] {
            return Err(format!("slice {start}:{end} of size {}", self.shape[d]));
        }
        let mut t = self.clone();
        t.shape[d] = end - start;
        Ok(t)
    }

    pub fn select(&self, d: usize, i: i64) -> Result<T, Refusal> {
        if i >= self.shape[d] {
            return Err(format!("index {i} out of range for size {}", self.shape[d]));
        }
        let mut t = self.clone();
        t.shape.remove(d);
        t.strides.remove(d);
        Ok(t)
    }

    pub fn contiguous(&self) -> T {
        match self.is_contiguous() {
            true => self.clone(),
            false => T::row_major(self.shape.clone()),
        }
    }

    /// `view(sizes)`, a `None` size being `-1` (`infer_size`, then `computeStride`).
    pub fn view(&self, sizes: &[Option<i64>]) -> Result<T, Refusal> {
        let shape = infer_size(sizes, self.numel())?;
        match compute_stride(&self.shape, &self.strides, &shape) {
            Some(strides) => Ok(T { shape, strides }),
            None => Err("view size is not compatible with input tensor's size and stride".into()),
        }
    }

    /// `reshape(sizes)`: the view where one exists, else a row-major copy.
    pub fn reshape(&self, sizes: &[Option<i64>]) -> Result<T, Refusal> {
        let shape = infer_size(sizes, self.numel())?;
        Ok(match compute_stride(&self.shape, &self.strides, &shape) {
            Some(strides) => T { shape, strides },
            None => T::row_major(shape),
        })
    }
}

fn row_major(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// ATen's `infer_size`: the `-1` solved, refused beside a 0-size axis.
fn infer_size(sizes: &[Option<i64>], numel: i64) -> Result<Vec<i64>, Refusal> {
    let known: i64 = sizes.iter().flatten().product();
    let holes = sizes.iter().filter(|s| s.is_none()).count();
    match holes {
        0 if known == numel => Ok(sizes.iter().flatten().copied().collect()),
        1 if known != 0 && numel % known == 0 => {
            Ok(sizes.iter().map(|s| s.unwrap_or(numel / known)).collect())
        }
        1 if known == 0 => Err("the unspecified dimension size -1 can be any value".into()),
        _ => Err(format!("shape {sizes:?} is invalid for input of size {numel}")),
    }
}

/// ATen's `computeStride` (`TensorUtils.cpp`), empty tensors included.
pub fn compute_stride(old: &[i64], old_strides: &[i64], new: &[i64]) -> Option<Vec<i64>> {
    if old.is_empty() {
        return Some(vec![1; new.len()]);
    }
    let numel: i64 = old.iter().product();
    if numel == 0 && old == new {
        return Some(old_strides.to_vec());
    }
    if numel == 0 {
        return Some(row_major(new));
    }
    let mut out = vec![0; new.len()];
    let mut view_d = new.len() as isize - 1;
    let mut chunk_base = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for d in (0..old.len()).rev() {
        tensor_numel *= old[d];
        if d == 0 || (old[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base) {
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

/// The broadcast shape (`infer_size_dimvector`).
pub fn broadcast(shapes: &[&[i64]]) -> Result<Vec<i64>, Refusal> {
    let n = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1; n];
    for s in shapes {
        for (i, &size) in s.iter().enumerate() {
            let o = &mut out[n - s.len() + i];
            match (*o, size) {
                (a, b) if a == b || b == 1 => {}
                (1, b) => *o = b,
                (a, b) => return Err(format!("sizes {a} and {b} do not broadcast")),
            }
        }
    }
    Ok(out)
}

/// An elementwise result as TensorIterator lays it out (`TensorIterator.cpp`: `compute_shape`,
/// `fast_set_up`, `compute_strides`, `reorder_dimensions`, `allocate_or_resize_outputs`).
pub fn elementwise(operands: &[&T]) -> Result<T, Refusal> {
    let shapes: Vec<&[i64]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let shape = broadcast(&shapes)?;
    if let Some(t) = fast_set_up(operands) {
        return Ok(t);
    }
    let n = shape.len();
    let strides: Vec<Vec<i64>> = operands
        .iter()
        .map(|t| {
            let pad = n - t.shape.len();
            (0..n)
                .map(|i| match i.checked_sub(pad) {
                    None => 0,
                    Some(j) if t.shape[j] == 1 && shape[i] != 1 => 0,
                    Some(j) => t.strides[j],
                })
                .collect()
        })
        .collect();
    let should_swap = |d0: usize, d1: usize| -> i32 {
        for s in &strides {
            let (s0, s1) = (s[d0], s[d1]);
            if s0 == 0 || s1 == 0 {
                continue;
            }
            if s0 < s1 {
                return -1;
            }
            if s0 > s1 {
                return 1;
            }
            if shape[d0] > shape[d1] {
                return 1;
            }
        }
        0
    };
    let mut perm: Vec<usize> = (0..n).rev().collect();
    if n > 1 {
        for i in 1..n {
            let mut dim1 = i;
            for dim0 in (0..i).rev() {
                match should_swap(perm[dim0], perm[dim1]) {
                    c if c > 0 => {
                        perm.swap(dim0, dim1);
                        dim1 = dim0;
                    }
                    c if c < 0 => break,
                    _ => {}
                }
            }
        }
    }
    let mut out = vec![0; n];
    let mut next = 1;
    for &a in &perm {
        out[a] = next;
        next *= shape[a];
    }
    Ok(T { shape, strides: out })
}

/// TensorIterator's fast path: operands of one shape that are all contiguous, all
/// channels-last contiguous (4-d only), or all dense with the same strides, give a result
/// with those strides. (Rank-0 operands next
/// to tensors disable it.)
fn fast_set_up(operands: &[&T]) -> Option<T> {
    let first = operands.first()?;
    let same_shape = operands.iter().all(|t| t.shape == first.shape);
    if !same_shape {
        return None;
    }
    if operands.iter().all(|t| t.is_contiguous()) {
        return Some(T::row_major(first.shape.clone()));
    }
    if operands
        .iter()
        .all(|t| t.shape.len() == 4 && t.is_channels_last_contiguous())
    {
        return Some(T::empty(first.shape.clone(), Format::ChannelsLast));
    }
    let same_dense = operands
        .iter()
        .all(|t| t.is_dense() && t.strides == first.strides);
    same_dense.then(|| (*first).clone())
}

/// `softmax`, `masked_fill` and the other ops whose result PyTorch allocates row-major.
pub fn fresh(shape: Vec<i64>) -> T {
    T::row_major(shape)
}

/// A memory format PyTorch infers from strides (`suggest_memory_format`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Format {
    Contiguous,
    /// `ChannelsLast` (4-d) or `ChannelsLast3d` (5-d): axis 1 innermost, then the last
    /// axes from the right, then axis 0.
    ChannelsLast,
}

impl T {
    /// `suggest_memory_format()`: channels-last where the strides are like it
    /// (`is_channels_last_strides_2d_s4` and `_3d_s5` in c10's `MemoryFormat.h`).
    fn suggest_memory_format(&self) -> Format {
        let order: &[usize] = match self.shape.len() {
            4 => &[1, 3, 2, 0],
            5 => &[1, 4, 3, 2, 0],
            _ => return Format::Contiguous,
        };
        if self.strides[1] == 0 {
            return Format::Contiguous;
        }
        let mut min = 0;
        for &d in order {
            if self.shape[d] == 0 || self.strides[d] < min {
                return Format::Contiguous;
            }
            // An `N111` tensor, or one sliced to it, is taken as contiguous.
            if d == 0 && min == self.strides[1] {
                return Format::Contiguous;
            }
            min = self.strides[d];
            if self.shape[d] > 1 {
                min *= self.shape[d];
            }
        }
        Format::ChannelsLast
    }

    /// `is_contiguous(MemoryFormat::ChannelsLast)` (4-d) or `ChannelsLast3d` (5-d): dense
    /// with axis 1 innermost, then the last axes from the right, then axis 0, axes of size 1
    /// not counting.
    fn is_channels_last_contiguous(&self) -> bool {
        let order: &[usize] = match self.shape.len() {
            4 => &[1, 3, 2, 0],
            5 => &[1, 4, 3, 2, 0],
            _ => return false,
        };
        let mut expected = 1;
        for &d in order {
            if self.shape[d] != 1 {
                if self.strides[d] != expected {
                    return false;
                }
                expected *= self.shape[d];
            }
        }
        true
    }

    /// `contiguous(memory_format=suggest_memory_format())`, as `rms_norm` copies its input.
    pub fn contiguous_as_suggested(&self) -> T {
        match self.suggest_memory_format() {
            Format::Contiguous => self.contiguous(),
            Format::ChannelsLast if self.is_channels_last_contiguous() => self.clone(),
            Format::ChannelsLast => T::empty(self.shape.clone(), Format::ChannelsLast),
        }
    }

    /// A fresh tensor of `shape` in `format`.
    fn empty(shape: Vec<i64>, format: Format) -> T {
        match format {
            Format::Contiguous => T::row_major(shape),
            Format::ChannelsLast => {
                let mut order: Vec<usize> = vec![1];
                order.extend((2..shape.len()).rev());
                order.push(0);
                let mut strides = vec![0; shape.len()];
                let mut next = 1;
                for a in order {
                    strides[a] = next;
                    next *= shape[a].max(1);
                }
                T { shape, strides }
            }
        }
    }
}

/// `cat(items, dim)` of items of one shape: fresh, in the items' memory format where they
/// all suggest the same one, else row-major (`cat_compute_output_memory_format`).
pub fn cat(items: &[&T], dim: usize) -> T {
    let mut shape = items[0].shape.clone();
    shape[dim] *= items.len() as i64;
    let formats: Vec<Format> = items.iter().map(|t| t.suggest_memory_format()).collect();
    let format = match formats.iter().all(|&f| f == formats[0]) {
        true => formats[0],
        false => Format::Contiguous,
    };
    T::empty(shape, format)
}

/// `stack(items, dim)` as ATen builds it: `cat` of the items along `dim`, then a view that
/// splits that axis; where `dim` is the new last axis, `cat` of the items unsqueezed there.
pub fn stack(items: &[&T], dim: usize) -> T {
    let rank = items[0].shape.len();
    if dim == rank {
        let unsqueezed: Vec<T> = items.iter().map(|t| t.unsqueeze(dim)).collect();
        return cat(&unsqueezed.iter().collect::<Vec<_>>(), dim);
    }
    let mut sizes: Vec<Option<i64>> = items[0].shape.iter().map(|&n| Some(n)).collect();
    sizes.insert(dim, Some(items.len() as i64));
    cat(items, dim)
        .view(&sizes)
        .expect("splitting an axis is always a view")
}
