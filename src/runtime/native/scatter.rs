//! State writes ([`Scatter`] kernels), run on the host, and their undoing.
//!
//! A step writes each layer's new keys and values into the caches in place, one scatter
//! after another. A position out of range stops the call at the scatter that reads it, when
//! the scatters before it have written: so each scatter keeps the elements it overwrote,
//! and a call that fails puts them back, newest first, leaving every state as it was
//! before the call. What is kept is the size of what is written (the new rows), never
//! the size of a state.

use crate::diagnostic::Code;
use crate::kernel::Scatter;
use crate::runtime::RunError;

/// The scatters a call has run, with what each overwrote.
#[derive(Default)]
pub struct Written {
    done: Vec<Undo>,
}

/// One scatter's writes: its operands, its rows and the elements they replaced, in the
/// order they were written.
struct Undo {
    scatter: Scatter,
    ptrs: Vec<*mut f32>,
    rows: Vec<usize>,
    old: Vec<f32>,
}

impl Written {
    /// Runs `s`: every position is read and checked against the window first (E0306 names
    /// the index, the position and the value), then each of the source's elements is copied
    /// to its place in the window, what it replaces kept.
    ///
    /// # Safety
    /// `ptrs` are the operands of `s` in [`crate::kernel::KernelOp::operands`] order (index,
    /// source, out), each pointing to its first element, with every element its strides
    /// reach over its operand shape inside its allocation, and nothing else reading or
    /// writing the window until the call that runs the scatters ends (when [`Written::undo`]
    /// may write it again).
    pub unsafe fn run(&mut self, s: &Scatter, ptrs: &[*mut f32]) -> Result<(), RunError> {
        // SAFETY: the caller's contract.
        let rows = unsafe { check(s, ptrs[0]) }?;
        let (source, out) = (ptrs[1], ptrs[2]);
        let mut old = Vec::with_capacity(s.shape.iter().product());
        each_run(s, &rows, |(from, from_step), (to, to_step), len| {
            // SAFETY: the run's elements are inside the source's shape, and its places inside
            // the window (`rows[c] < size` on the axis, checked above): both within their
            // operands. Where both are contiguous the run is copied as a block: the plan's
            // validation proved the source (read) and the window (written) disjoint, and
            // `copy` would be right even if they were not.
            unsafe {
                if from_step == 1 && to_step == 1 {
                    old.extend_from_slice(std::slice::from_raw_parts(out.add(to), len));
                    std::ptr::copy(source.add(from), out.add(to), len);
                    return;
                }
                for k in 0..len {
                    let (from, to) = (from + k * from_step, to + k * to_step);
                    old.push(*out.add(to));
                    *out.add(to) = *source.add(from);
                }
            }
        });
        self.done.push(Undo {
            scatter: s.clone(),
            ptrs: ptrs.to_vec(),
            rows,
            old,
        });
        Ok(())
    }

    /// Puts back every element the scatters overwrote, the last scatter's first.
    ///
    /// # Safety
    /// The windows the scatters wrote are still alive, and nothing else reads or writes them
    /// during the call.
    pub unsafe fn undo(self) {
        for u in self.done.into_iter().rev() {
            let out = u.ptrs[2];
            let mut places = Vec::with_capacity(u.old.len());
            each_run(&u.scatter, &u.rows, |_, (to, step), len| {
                places.extend((0..len).map(|k| to + k * step));
            });
            // Newest first: where two rows of one scatter named one position, the element
            // from before the call is the one put back last.
            for (&to, &x) in places.iter().zip(&u.old).rev() {
                // SAFETY: `to` was written by `run`, inside the window (the caller's
                // contract keeps it alive).
                unsafe { *out.add(to) = x };
            }
        }
    }
}

/// The row of the window each position of the index names: E0306 for the first out of
/// range.
///
/// # Safety
/// `index` points to the first of `s.shape[s.axis]` positions at its strides.
unsafe fn check(s: &Scatter, index: *const f32) -> Result<Vec<usize>, RunError> {
    let n = s.shape[s.axis];
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `i < n`, the index operand's shape (the caller's contract).
        let value = unsafe { *index.add(i * s.index.strides[0]) };
        match crate::runtime::gather::row(value, s.size) {
            Some(row) => rows.push(row),
            None => {
                let (index, target) = &s.names;
                let message = format!(
                    "{index} holds {value} at [{i}], outside the {} positions of axis {} of {target}",
                    s.size, s.axis
                );
                let hint = format!("give positions from 0 to {}", s.size.saturating_sub(1));
                return Err(RunError::new(Some(Code::E0306), message).with_hint(hint));
            }
        }
    }
    Ok(rows)
}

/// Calls `f((from, from_step), (to, to_step), len)` for each run of the source in row-major
/// order: `len` elements along its last axis (one at a time where that axis is the scatter's,
/// whose places are rows of the window), the first one's offset in the source and that of
/// its place in the window, and the steps between the run's elements in each. A run rather
/// than an element at a time, so a cache's rows are copied as blocks (a prefill's scatters
/// were 2-3 % of SmolLM2's prefill on one thread, element by element; `BENCHMARKS.md`).
fn each_run(s: &Scatter, rows: &[usize], mut f: impl FnMut((usize, usize), (usize, usize), usize)) {
    let last = s.shape.len() - 1;
    let (len, steps) = match last == s.axis {
        true => (1, (0, 0)),
        false => (s.shape[last], (s.source.strides[last], s.out.strides[last])),
    };
    let outer = &s.shape[..s.shape.len() - usize::from(last != s.axis)];
    let runs: usize = outer.iter().product();
    let mut coords = vec![0usize; outer.len()];
    for _ in 0..runs {
        let (mut from, mut to) = (0, 0);
        for (a, &c) in coords.iter().enumerate() {
            from += c * s.source.strides[a];
            to += if a == s.axis { rows[c] } else { c } * s.out.strides[a];
        }
        f((from, steps.0), (to, steps.1), len);
        for a in (0..coords.len()).rev() {
            coords[a] += 1;
            if coords[a] < outer[a] {
                break;
            }
            coords[a] = 0;
        }
    }
}
