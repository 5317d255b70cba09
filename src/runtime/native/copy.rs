//! Copies, run on the host: a weight concatenated with its siblings or laid out in panels
//! (the prologue's), a weight times the attention's scale, `kᵀ`'s layout for the attention
//! kernel, a `.contiguous()`. A copy needs no code of its own: a Cranelift function cost
//! 0.3–0.5 ms of compile each and ran no faster than these loops.

use crate::kernel::Map;

/// Columns a transposing copy walks through every row of its task before the next ones,
/// so that the lines of the strided input a row reads are still in cache for the next
/// row: the generated map kernel's chunk.
const CHUNK: usize = 64;

/// Copies rows `rows` of `m`'s iteration space (every axis but the last, flattened) from
/// its input to its output, times [`Map::scale`] where there is one (the product
/// Cranelift's `fmul` makes, bit for bit). A copy that transposes its last two axes
/// ([`Map::transposed_run`]: weights laid out in panels) moves blocks of 4 × 4 through
/// registers: one element at a time, a store each, made SmolLM2's preparation 10 % slower
/// than the generated kernels had it (416 against 378 ms); the blocks make it 14 % faster
/// (343–346 against 400–406 ms).
///
/// # Safety
/// `m` is a copy ([`Map::is_copy`], or with a [`Map::scale`]) of a plan that [`crate::kernel::Plan::validate`]
/// accepted; `input` and `out` point at its operands' first elements, inside allocations
/// that hold every element their strides reach over its shape, and the elements the input
/// reaches are none that the output does (validated); `rows` lies within the iteration
/// space; no other thread writes the elements these rows read or write.
pub unsafe fn rows(m: &Map, input: *const f32, out: *mut f32, rows: std::ops::Range<usize>) {
    let (input_strides, out_strides) = (&m.inputs[0].strides, &m.out.strides);
    let scale = m.scale();
    let Some((&len, outer)) = m.shape.split_last() else {
        // A rank-0 map is one element, scaled as every other.
        // SAFETY: the operands' first elements (contract).
        unsafe { *out = scale.map_or(*input, |c| *input * c) };
        return;
    };
    let last = outer.len();
    let (from_step, to_step) = (input_strides[last], out_strides[last]);
    let chunk = if from_step > 1 { CHUNK } else { len.max(1) };
    // With a run, rows `r..r + 4` of one run are 4 consecutive floats of the input.
    let run = m.transposed_run();
    for c0 in (0..len).step_by(chunk) {
        let width = chunk.min(len - c0);
        let mut r = rows.start;
        while r < rows.end {
            let (from, to) = row_offsets(r, outer, input_strides, out_strides);
            let (from, to) = (from + c0 * from_step, to + c0 * to_step);
            if run.is_some_and(|run| r % run + 4 <= run && r + 4 <= rows.end) {
                // SAFETY: rows `r..r + 4` are this task's and of one run (checked just
                // above), so consecutive floats of the input; they and columns
                // `c0..c0 + width` are inside the iteration space, whose every element each
                // operand's strides keep inside its allocation (contract).
                unsafe {
                    four_rows(
                        (input.add(from), from_step),
                        (out.add(to), out_strides[last - 1]),
                        width,
                    )
                };
                r += 4;
                continue;
            }
            // SAFETY: row `r` of this task and columns `c0..c0 + width` are inside the
            // iteration space, whose every element each operand's strides keep inside its
            // allocation; the output's elements are none of the input's (contract), so the
            // slices written alias nothing read.
            unsafe {
                match (from_step, to_step, scale) {
                    (1, 1, None) => std::ptr::copy(input.add(from), out.add(to), width),
                    (1, 1, Some(c)) => {
                        let source = std::slice::from_raw_parts(input.add(from), width);
                        let row = std::slice::from_raw_parts_mut(out.add(to), width);
                        row.iter_mut().zip(source).for_each(|(y, &x)| *y = x * c);
                    }
                    (0, 1, _) => {
                        let x = *input.add(from);
                        let row = std::slice::from_raw_parts_mut(out.add(to), width);
                        row.fill(scale.map_or(x, |c| x * c));
                    }
                    _ => {
                        for j in 0..width {
                            let x = *input.add(from + j * from_step);
                            *out.add(to + j * to_step) = scale.map_or(x, |c| x * c);
                        }
                    }
                }
            }
            r += 1;
        }
    }
}

/// Four rows of a transposing copy, `width` columns: `out[i·row + j] = input[i + j·step]`
/// for `i < 4`; on x86-64, four columns at a time as a 4 × 4 block transposed in SSE
/// registers (every x86-64 CPU has them).
///
/// # Safety
/// Those elements of `input` and `out` are inside their allocations.
unsafe fn four_rows((input, step): (*const f32, usize), (out, row): (*mut f32, usize), width: usize) {
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    while j + 4 <= width {
        use std::arch::x86_64::*;
        // SAFETY: columns `j..j + 4` of the four rows (contract).
        unsafe {
            let [a, b, c, d] = [0, 1, 2, 3].map(|q| _mm_loadu_ps(input.add((j + q) * step)));
            let (ab_low, cd_low) = (_mm_unpacklo_ps(a, b), _mm_unpacklo_ps(c, d));
            let (ab_high, cd_high) = (_mm_unpackhi_ps(a, b), _mm_unpackhi_ps(c, d));
            _mm_storeu_ps(out.add(j), _mm_movelh_ps(ab_low, cd_low));
            _mm_storeu_ps(out.add(row + j), _mm_movehl_ps(cd_low, ab_low));
            _mm_storeu_ps(out.add(2 * row + j), _mm_movelh_ps(ab_high, cd_high));
            _mm_storeu_ps(out.add(3 * row + j), _mm_movehl_ps(cd_high, ab_high));
        }
        j += 4;
    }
    for j in j..width {
        for i in 0..4 {
            // SAFETY: as above.
            unsafe { *out.add(i * row + j) = *input.add(i + j * step) };
        }
    }
}

/// The input's and the output's offsets of row `r` of the axes `outer`.
fn row_offsets(mut r: usize, outer: &[usize], input: &[usize], out: &[usize]) -> (usize, usize) {
    let (mut from, mut to) = (0, 0);
    for axis in (0..outer.len()).rev() {
        let i = r % outer[axis];
        r /= outer[axis];
        from += i * input[axis];
        to += i * out[axis];
    }
    (from, to)
}

#[cfg(test)]
mod tests {
    use super::rows;
    use crate::kernel::{Expr, Map, Operand};

    fn operand(strides: &[usize]) -> Operand {
        Operand {
            buf: 0,
            offset: 0,
            strides: strides.to_vec(),
        }
    }

    /// Copies `input` (strides `from`) over `shape` into a fresh output (strides `to`, of
    /// `len` floats), the rows in two ranges as two tasks would.
    fn copied(shape: &[usize], from: &[usize], to: &[usize], input: &[f32], len: usize) -> Vec<f32> {
        mapped(vec![Expr::Input(0)], shape, from, to, input, len)
    }

    /// [`copied`] with the map's expression `expr`.
    fn mapped(
        expr: Vec<Expr>,
        shape: &[usize],
        from: &[usize],
        to: &[usize],
        input: &[f32],
        len: usize,
    ) -> Vec<f32> {
        let m = Map {
            shape: shape.to_vec(),
            inputs: vec![operand(from)],
            expr,
            out: operand(to),
            rows_per_task: 1,
        };
        let mut out = vec![f32::NAN; len];
        let total = crate::kernel::rows(shape);
        for part in [0..total / 4, total / 4..total] {
            // SAFETY: the strides keep every element inside `input` and `out` (by the
            // shapes chosen below), and the two calls run one after the other.
            unsafe { rows(&m, input.as_ptr(), out.as_mut_ptr(), part) };
        }
        out
    }

    #[test]
    fn a_transposing_copy_moves_every_element_to_its_place_across_chunks() {
        // `x [2, 150, 6]` read as `x.transpose(1, 2)`: runs of 6 rows, the second a block
        // of 4 and 2 single rows, the first cut by the tasks' split after row 3 into
        // single rows (a block from row 3 would cross into the next run); the last axis
        // is strided, its 150 columns crossing two chunk boundaries, 2 left over a block's
        // 4.
        let (b, r, c) = (2, 150, 6);
        let input: Vec<f32> = (0..b * r * c).map(|i| i as f32).collect();
        let out = copied(&[b, c, r], &[c * r, 1, c], &[c * r, r, 1], &input, b * r * c);
        for (i, j, k) in (0..b).flat_map(|i| (0..c).flat_map(move |j| (0..r).map(move |k| (i, j, k)))) {
            assert_eq!(
                out[i * c * r + j * r + k],
                input[i * c * r + k * c + j],
                "at {i}, {j}, {k}"
            );
        }
    }

    #[test]
    fn a_broadcast_copy_fills_each_row_with_its_one_element() {
        // `x [3, 1]` expanded to `[3, 5]`: stride 0 along the row.
        let out = copied(&[3, 5], &[1, 0], &[5, 1], &[1.0, 2.0, 3.0], 15);
        assert_eq!(out, [[1.0; 5], [2.0; 5], [3.0; 5]].concat());
    }

    #[test]
    fn a_scaled_copy_multiplies_every_element_once_in_any_layout() {
        use crate::kernel::BinaryOp::Mul;
        let input: Vec<f32> = (0..24).map(|i| 0.1 * i as f32 - 1.0).collect();
        let times = |c: f32| vec![Expr::Const(c), Expr::Input(0), Expr::Binary(Mul, 0, 1)];
        // Rows, a transposed read and a broadcast, each as `in0 * c` or `c * in0`.
        let rows = mapped(times(0.125), &[4, 6], &[6, 1], &[6, 1], &input, 24);
        assert!(rows.iter().zip(&input).all(|(y, x)| *y == x * 0.125), "{rows:?}");
        let expr = vec![Expr::Input(0), Expr::Const(3.0), Expr::Binary(Mul, 0, 1)];
        let transposed = mapped(expr, &[6, 4], &[1, 6], &[4, 1], &input, 24);
        for (i, j) in (0..6).flat_map(|i| (0..4).map(move |j| (i, j))) {
            assert_eq!(transposed[i * 4 + j], input[j * 6 + i] * 3.0, "at {i}, {j}");
        }
        let spread = mapped(times(-2.0), &[3, 5], &[1, 0], &[5, 1], &input[..3], 15);
        let want: Vec<f32> = input[..3].iter().flat_map(|x| [x * -2.0; 5]).collect();
        assert_eq!(spread, want);
    }

    #[test]
    fn a_contiguous_copy_lands_at_the_outputs_strides() {
        // Rows of 5 into every other row of a [8, 5] output (a concatenation's slot).
        let input: Vec<f32> = (0..20).map(|i| i as f32).collect();
        let out = copied(&[4, 5], &[5, 1], &[10, 1], &input, 40);
        for (i, row) in out.chunks(5).enumerate() {
            match i % 2 {
                0 => assert_eq!(row, &input[i / 2 * 5..i / 2 * 5 + 5]),
                _ => assert!(row.iter().all(|x| x.is_nan()), "row {i} was written"),
            }
        }
    }
}
