//! The numeric ops of the reference interpreter, each with exactly PyTorch's meaning.
//!
//! Every op takes [`Strided`] operands and returns a fresh value, or `None` when the
//! operands do not fit the op (which a checked program never produces). Plain loops, no
//! allocation per element; the matmul kernel keeps its inner loop on contiguous rows and
//! accumulates in f64, so it is both fast enough and a tight reference for the JIT.

use super::tensor::{broadcast_shapes, numel, Strided, Tensor};
use crate::ir::{CmpOp, ReduceOp};

/// Elementwise `f(a, b)` with PyTorch broadcasting (either side may be rank 0).
pub fn zip_with(a: &Strided, b: &Strided, f: impl Fn(f32, f32) -> f32) -> Option<Strided> {
    let shape = broadcast_shapes(&a.shape, &b.shape)?;
    let (a, b) = (a.expand(&shape)?.to_vec(), b.expand(&shape)?.to_vec());
    let data = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
    Some(Tensor::new(shape, data).into())
}

/// Elementwise `f(x)`.
pub fn map(x: &Strided, f: impl Fn(f32) -> f32) -> Strided {
    let data = x.to_vec().into_iter().map(f).collect();
    Tensor::new(x.shape.clone(), data).into()
}

/// Whether `a op b` holds; comparisons yield 1.0 or 0.0, and asserts compare dims.
pub fn holds<T: PartialOrd>(op: CmpOp, a: T, b: T) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

/// `x.masked_fill(mask, value)`: `value` where the mask (1.0/0.0) is set; the result has
/// the broadcast shape of all three.
pub fn masked_fill(x: &Strided, mask: &Strided, value: &Strided) -> Option<Strided> {
    let shape = broadcast_shapes(&broadcast_shapes(&x.shape, &mask.shape)?, &value.shape)?;
    let [x, mask, value] = [x, mask, value].map(|t| t.expand(&shape).map(|t| t.to_vec()));
    let (x, mask, value) = (x?, mask?, value?);
    let data = x
        .iter()
        .zip(&mask)
        .zip(&value)
        .map(|((&x, &m), &v)| if m != 0.0 { v } else { x })
        .collect();
    Some(Tensor::new(shape, data).into())
}

/// `x.softmax(axis)`: the maximum is subtracted first, so large scores cannot overflow and
/// a row filled with -1e9 comes out uniform.
pub fn softmax(x: &Strided, axis: usize) -> Option<Strided> {
    let len = *x.shape.get(axis)?;
    if x.numel() == 0 {
        return Some(x.clone());
    }
    // Move `axis` last so that each softmax runs over one contiguous row, then move it back.
    let mut perm: Vec<usize> = (0..x.rank()).filter(|&a| a != axis).collect();
    perm.push(axis);
    let moved = x.permute(&perm)?;
    let mut data = moved.to_vec();
    for row in data.chunks_exact_mut(len) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f64;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += f64::from(*v);
        }
        for v in row.iter_mut() {
            *v = (f64::from(*v) / sum) as f32;
        }
    }
    let mut back = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    Strided::from(Tensor::new(moved.shape, data)).permute(&back)
}

/// `torch.matmul(a, b)`: the last two axes multiply, the others broadcast as batch axes.
/// A vector operand is a matrix with a unit axis (a row for `a`, a column for `b`) that
/// the result drops. Independent of [`crate::shape::matmul`] on purpose: this is the
/// oracle.
pub fn matmul(a: &Strided, b: &Strided) -> Option<Strided> {
    let (a_vec, b_vec) = (a.rank() == 1, b.rank() == 1);
    let a2 = if a_vec { a.unsqueeze(0)? } else { a.clone() };
    let b2 = if b_vec { b.unsqueeze(1)? } else { b.clone() };
    let r = batched_matmul(&a2, &b2)?;
    let rank = r.rank();
    let dropped = |axis: usize| (a_vec && axis == rank - 2) || (b_vec && axis == rank - 1);
    let shape = (0..rank).filter(|&i| !dropped(i)).map(|i| r.shape[i]).collect();
    r.reshape(shape)
}

/// `a [.., n, k] @ b [.., k, m]` for ranks of at least 2.
fn batched_matmul(a: &Strided, b: &Strided) -> Option<Strided> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra < 2 || rb < 2 {
        return None;
    }
    let (n, k, m) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    if b.shape[rb - 2] != k {
        return None;
    }
    let batch = broadcast_shapes(&a.shape[..ra - 2], &b.shape[..rb - 2])?;
    let a = a.expand(&[batch.as_slice(), &[n, k]].concat())?.to_vec();
    let b = b.expand(&[batch.as_slice(), &[k, m]].concat())?.to_vec();
    let mut out = vec![0.0; numel(&batch) * n * m];
    if n * m > 0 {
        for (i, c) in out.chunks_exact_mut(n * m).enumerate() {
            gemm(&a[i * n * k..], &b[i * k * m..], (k, m), None, c);
        }
    }
    Some(Tensor::new([batch, vec![n, m]].concat(), out).into())
}

/// `linear(x, w, bias)`: `x [.., i] @ w[o, i]^T + bias [o]`, all leading axes of `x` as rows.
pub fn linear(x: &Strided, w: &Strided, bias: Option<&Strided>) -> Option<Strided> {
    let (&i, lead) = x.shape.split_last()?;
    let &[o, wi] = w.shape.as_slice() else {
        return None;
    };
    let bias = match bias {
        Some(b) if b.shape == [o] => Some(b.to_vec()),
        Some(_) => return None,
        None => None,
    };
    if wi != i {
        return None;
    }
    let wt = w.transpose(0, 1)?.to_vec(); // [i, o]: rows of the right operand contiguous
    let x = x.to_vec();
    let mut out = vec![0.0; numel(lead) * o];
    gemm(&x, &wt, (i, o), bias.as_deref(), &mut out);
    Some(Tensor::new([lead, &[o]].concat(), out).into())
}

/// `out [n, m] = init + a [n, k] @ b [k, m]`, all row-major (`n` implied by `out`).
/// The loop order i-k-j keeps the innermost loop on contiguous rows of `b` and of the
/// accumulator, which the compiler vectorizes; the accumulator is f64 so that the result
/// is close to the exact sum whatever order the JIT later uses.
fn gemm(a: &[f32], b: &[f32], (k, m): (usize, usize), init: Option<&[f32]>, out: &mut [f32]) {
    if m == 0 {
        return;
    }
    let mut acc = vec![0.0f64; m];
    for (r, out_row) in out.chunks_exact_mut(m).enumerate() {
        match init {
            Some(init) => acc.iter_mut().zip(init).for_each(|(s, &v)| *s = f64::from(v)),
            None => acc.fill(0.0),
        }
        for (p, &a_rp) in a[r * k..(r + 1) * k].iter().enumerate() {
            let a_rp = f64::from(a_rp);
            for (s, &b_pj) in acc.iter_mut().zip(&b[p * m..(p + 1) * m]) {
                *s += a_rp * f64::from(b_pj);
            }
        }
        for (o, &s) in out_row.iter_mut().zip(&acc) {
            *o = s as f32;
        }
    }
}

/// The optimizer's GEMM: `alpha * (op(a) @ op(b) + bias)`, `op` transposing the last two
/// axes where its flag is set (see `ir::Op::Gemm`).
pub fn batched_gemm(
    a: &Strided,
    b: &Strided,
    (trans_a, trans_b): (bool, bool),
    bias: Option<&Strided>,
    alpha: f64,
) -> Option<Strided> {
    let last_two = |t: &Strided, flag: bool| match flag {
        true => t.transpose(t.rank().checked_sub(2)?, t.rank() - 1),
        false => (t.rank() >= 2).then(|| t.clone()),
    };
    let mut r = matmul(&last_two(a, trans_a)?, &last_two(b, trans_b)?)?;
    if let Some(bias) = bias {
        if bias.shape.as_slice() != [*r.shape.last()?] {
            return None;
        }
        r = zip_with(&r, bias, |x, y| x + y)?;
    }
    if alpha != 1.0 {
        r = map(&r, |x| (f64::from(x) * alpha) as f32);
    }
    Some(r)
}

/// `softmax(masked_fill(x * scale, mask, fill), -1)`, the mask broadcast to `x`.
pub fn masked_softmax(x: &Strided, mask: Option<&Strided>, scale: f64, fill: f64) -> Option<Strided> {
    let mut s = map(x, |v| (f64::from(v) * scale) as f32);
    if let Some(mask) = mask {
        if broadcast_shapes(&x.shape, &mask.shape)? != x.shape {
            return None;
        }
        s = masked_fill(&s, mask, &Tensor::scalar(fill as f32).into())?;
    }
    softmax(&s, x.rank().checked_sub(1)?)
}

/// `masked_softmax(q @ k^T, mask, scale, fill) @ v`; the reference materializes the
/// scores that a fused kernel would not.
pub fn attention([q, k, v]: [&Strided; 3], mask: Option<&Strided>, scale: f64, fill: f64) -> Option<Strided> {
    let scores = batched_gemm(q, k, (false, true), None, 1.0)?;
    if let Some(m) = mask {
        if broadcast_shapes(&scores.shape, &m.shape)? != scores.shape {
            return None;
        }
    }
    let p = masked_softmax(&scores, mask, scale, fill)?;
    batched_gemm(&p, v, (false, false), None, 1.0)
}

/// `masked_softmax(s, mask, scale, fill) @ v` over scores the program computed.
pub fn scored_attention(
    [s, v]: [&Strided; 2],
    mask: Option<&Strided>,
    scale: f64,
    fill: f64,
) -> Option<Strided> {
    let p = masked_softmax(s, mask, scale, fill)?;
    batched_gemm(&p, v, (false, false), None, 1.0)
}

/// `scaled_dot_product_attention` as PyTorch's math path computes it: with `gqa`, each key
/// and value head repeated for the query heads that read it (`repeat_interleave`), then
/// `scale * q @ kᵀ`, the causal mask (`-inf` where `j > i`), a boolean mask (`-inf` where
/// it is false, `mask.1`) or a float one added, softmax, 0 on a row whose every score is
/// `-inf`, and `@ v`.
pub fn sdpa(
    [q, k, v]: [&Strided; 3],
    scale: f32,
    mask: Option<(&Strided, bool)>,
    causal: bool,
    gqa: bool,
) -> Option<Strided> {
    let heads = |x: &Strided| x.shape.get(x.rank().checked_sub(3)?).copied();
    let (k, v) = match gqa {
        true => (repeat_heads(k, heads(q)?)?, repeat_heads(v, heads(q)?)?),
        false => (k.clone(), v.clone()),
    };
    let rk = k.rank();
    let scores = matmul(q, &k.transpose(rk.checked_sub(2)?, rk - 1)?)?;
    let mut s = map(&scores, |x| x * scale);
    let removed: Strided = Tensor::scalar(f32::NEG_INFINITY).into();
    let (rows, row) = (s.shape[s.rank() - 2], s.shape[s.rank() - 1]);
    if causal {
        let above = (0..rows * row).map(|e| f32::from(u8::from(e % row > e / row)));
        let above: Strided = Tensor::new(vec![rows, row], above.collect()).into();
        s = masked_fill(&s, &above, &removed)?;
    }
    s = match mask {
        Some((m, true)) => masked_fill(&s, &map(m, |x| f32::from(u8::from(x == 0.0))), &removed)?,
        Some((m, false)) => zip_with(&s, m, |a, b| a + b)?,
        None => s,
    };
    let p = softmax(&s, s.rank() - 1)?;
    let mut probs = p.to_vec();
    if row > 0 {
        let scores = s.to_vec();
        for (srow, prow) in scores.chunks(row).zip(probs.chunks_mut(row)) {
            if srow.iter().all(|&x| x == f32::NEG_INFINITY) {
                prow.fill(0.0);
            }
        }
    }
    matmul(&Tensor::new(p.shape.clone(), probs).into(), &v)
}

/// `x [.., h, s, e]` with each head repeated `heads / h` times in place (head `i` of the
/// result is head `i / (heads / h)` of `x`), as `repeat_interleave` on the head axis.
fn repeat_heads(x: &Strided, heads: usize) -> Option<Strided> {
    let r = x.rank();
    let h = *x.shape.get(r.checked_sub(3)?)?;
    let group = heads.checked_div(h)?;
    let mut wide = x.shape.clone();
    wide.insert(r - 2, group);
    let mut shape = x.shape.clone();
    shape[r - 3] = heads;
    x.unsqueeze(r - 2)?.expand(&wide)?.contiguous().reshape(shape)
}

/// `torch.cat(items, axis)`; `None` for an empty list (the caller knows the shape).
pub fn concat(items: &[Strided], axis: usize) -> Option<Strided> {
    let first = items.first()?;
    let mut shape = first.shape.clone();
    shape.get(axis)?;
    shape[axis] = 0;
    for item in items {
        let same = item.rank() == first.rank()
            && (0..item.rank()).all(|a| a == axis || item.shape[a] == first.shape[a]);
        if !same {
            return None;
        }
        shape[axis] += item.shape[axis];
    }
    // Each item contributes one contiguous chunk per index of the axes before `axis`.
    let outer = numel(&shape[..axis]);
    let parts: Vec<(Vec<f32>, usize)> = items
        .iter()
        .map(|t| (t.to_vec(), numel(&t.shape[axis..])))
        .collect();
    let mut data = Vec::with_capacity(numel(&shape));
    for o in 0..outer {
        for (values, chunk) in &parts {
            data.extend_from_slice(&values[o * chunk..(o + 1) * chunk]);
        }
    }
    Some(Tensor::new(shape, data).into())
}

/// `torch.stack(items, axis)`: a new axis of size `items.len()`.
pub fn stack(items: &[Strided], axis: usize) -> Option<Strided> {
    let unsqueezed: Option<Vec<Strided>> = items.iter().map(|t| t.unsqueeze(axis)).collect();
    concat(&unsqueezed?, axis)
}

/// `op` of `x` over `axes` (sorted), in row-major order of the reduced elements. A sum
/// accumulates in f64 and rounds once, so it is at least as exact as any backend's.
pub fn reduce(x: &Strided, op: ReduceOp, axes: &[usize], keepdim: bool) -> Option<Strided> {
    if axes.iter().any(|&a| a >= x.rank()) {
        return None;
    }
    // Move the reduced axes last: each output element is one contiguous run.
    let mut perm: Vec<usize> = (0..x.rank()).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let data = x.permute(&perm)?.to_vec();
    let len: usize = axes.iter().map(|&a| x.shape[a]).product();
    let kept: Vec<usize> = (0..x.rank())
        .filter(|a| !axes.contains(a))
        .map(|a| x.shape[a])
        .collect();
    let out: Vec<f32> = match len {
        0 => vec![op.identity(); numel(&kept)],
        _ => data
            .chunks(len)
            .map(|row| match op {
                ReduceOp::Sum => row.iter().map(|&v| f64::from(v)).sum::<f64>() as f32,
                _ => row.iter().fold(op.identity(), |acc, &v| op.combine(acc, v)),
            })
            .collect(),
    };
    let shape = match keepdim {
        true => (0..x.rank())
            .map(|a| if axes.contains(&a) { 1 } else { x.shape[a] })
            .collect(),
        false => kept,
    };
    Some(Tensor::new(shape, out).into())
}

/// `tril(x, diagonal)` (`upper` false) or `triu`: on the last two axes, element `(i, j)`
/// is kept when `j - i <= diagonal` (`>=` for `triu`), else 0.
pub fn tri(x: &Strided, upper: bool, diagonal: i64) -> Option<Strided> {
    let r = x.rank().checked_sub(2)?;
    let (rows, cols) = (x.shape[r], x.shape[r + 1]);
    let mut data = x.to_vec();
    for (k, v) in data.iter_mut().enumerate() {
        let (i, j) = ((k / cols.max(1)) % rows.max(1), k % cols.max(1));
        let d = j as i64 - i as i64;
        let keep = if upper { d >= diagonal } else { d <= diagonal };
        if !keep {
            *v = 0.0;
        }
    }
    Some(Tensor::new(x.shape.clone(), data).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], data: &[f32]) -> Strided {
        Tensor::new(shape.to_vec(), data.to_vec()).into()
    }

    fn iota(shape: &[usize]) -> Strided {
        let data: Vec<f32> = (0..numel(shape)).map(|i| i as f32).collect();
        t(shape, &data)
    }

    /// `a @ b` for one pair of row-major matrices, the textbook way.
    fn naive(a: &[f32], b: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
        let dot = |i: usize, j: usize| (0..k).map(|p| a[i * k + p] * b[p * m + j]).sum::<f32>();
        (0..n)
            .flat_map(|i| (0..m).map(move |j| (i, j)))
            .map(|(i, j)| dot(i, j))
            .collect()
    }

    #[test]
    fn matmul_of_matrices_is_the_textbook_product() {
        let (a, b) = (iota(&[2, 3]), iota(&[3, 4]));
        let c = matmul(&a, &b).unwrap();
        assert_eq!(c.shape, [2, 4]);
        assert_eq!(c.to_vec(), naive(&a.to_vec(), &b.to_vec(), 2, 3, 4));
    }

    #[test]
    fn matmul_broadcasts_batch_axes() {
        let a = iota(&[2, 1, 2, 3]);
        let b = map(&iota(&[3, 3, 2]), |x| x - 4.0);
        let c = matmul(&a, &b).unwrap();
        assert_eq!(c.shape, [2, 3, 2, 2]);
        let (av, bv, cv) = (a.to_vec(), b.to_vec(), c.to_vec());
        for i in 0..2 {
            for j in 0..3 {
                let want = naive(&av[i * 6..][..6], &bv[j * 6..][..6], 2, 3, 2);
                assert_eq!(cv[(i * 3 + j) * 4..][..4], want[..], "batch ({i}, {j})");
            }
        }
        assert!(matmul(&iota(&[2, 3]), &iota(&[2, 3])).is_none());
    }

    #[test]
    fn matmul_with_vectors_drops_their_unit_axes() {
        let v = t(&[3], &[1.0, 2.0, 3.0]);
        assert_eq!(matmul(&iota(&[2, 3]), &v).unwrap().to_vec(), [8.0, 26.0]);
        assert_eq!(matmul(&v, &iota(&[3, 2])).unwrap().to_vec(), [16.0, 22.0]);
        assert_eq!(matmul(&v, &v).unwrap().shape, Vec::<usize>::new());
    }

    #[test]
    fn linear_is_x_times_w_transposed_plus_bias() {
        let x = iota(&[2, 2, 3]);
        let w = t(&[2, 3], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        let b = t(&[2], &[10.0, 20.0]);
        let y = linear(&x, &w, Some(&b)).unwrap();
        assert_eq!(y.shape, [2, 2, 2]);
        assert_eq!(y.to_vec(), [10.0, 23.0, 13.0, 32.0, 16.0, 41.0, 19.0, 50.0]);
        assert!(linear(&x, &iota(&[2, 2]), None).is_none());
    }

    #[test]
    fn softmax_rows_sum_to_one_along_any_axis() {
        let x = map(&iota(&[2, 3, 4]), |v| (v * 0.7).sin() * 5.0);
        for axis in 0..3 {
            let p = softmax(&x, axis).unwrap();
            assert_eq!(p.shape, x.shape);
            let sums = p
                .permute(&[(axis + 1) % 3, (axis + 2) % 3, axis])
                .unwrap()
                .to_vec();
            for row in sums.chunks(x.shape[axis]) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6, "axis {axis}");
            }
        }
        let p = softmax(&t(&[2], &[1000.0, 1000.0]), 0).unwrap();
        assert_eq!(p.to_vec(), [0.5, 0.5]);
    }

    #[test]
    fn a_fully_masked_row_is_uniform() {
        let scores = iota(&[2, 4]);
        let mask = t(&[2, 1], &[0.0, 1.0]);
        let filled = masked_fill(&scores, &mask, &t(&[], &[-1e9])).unwrap();
        assert_eq!(filled.to_vec()[..4], [0.0, 1.0, 2.0, 3.0]);
        let p = softmax(&filled, 1).unwrap().to_vec();
        assert_eq!(p[4..], [0.25; 4]);
    }

    #[test]
    fn elementwise_broadcasts_scalars_and_unit_axes() {
        let x = iota(&[2, 3]);
        let y = zip_with(&x, &t(&[], &[2.0]), |a, b| a / b).unwrap();
        assert_eq!(y.to_vec(), [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        let z = zip_with(&t(&[2, 1], &[1.0, 2.0]), &t(&[3], &[1.0, 2.0, 3.0]), |a, b| a * b);
        assert_eq!(z.unwrap().to_vec(), [1.0, 2.0, 3.0, 2.0, 4.0, 6.0]);
        assert!(holds(CmpOp::Le, 2, 2) && !holds(CmpOp::Ne, 1.0, 1.0));
    }

    #[test]
    fn gemm_is_alpha_times_the_flagged_product_plus_bias() {
        let (a, b) = (iota(&[2, 3, 2]), map(&iota(&[2, 4]), |v| v - 3.0));
        let bias = t(&[4], &[1.0, -1.0, 0.5, 2.0]);
        let got = batched_gemm(&a.transpose(1, 2).unwrap(), &b, (true, false), Some(&bias), 0.5).unwrap();
        let plain = matmul(&a, &b).unwrap();
        let want = map(&zip_with(&plain, &bias, |x, y| x + y).unwrap(), |v| v * 0.5);
        assert_eq!(got.shape, [2, 3, 4]);
        assert_eq!(got.to_vec(), want.to_vec());
        let bt = b.transpose(0, 1).unwrap().contiguous();
        assert_eq!(
            batched_gemm(&a, &bt, (false, true), None, 1.0).unwrap().to_vec(),
            plain.to_vec()
        );
    }

    #[test]
    fn masked_softmax_is_scale_then_fill_then_softmax() {
        let x = map(&iota(&[2, 3]), |v| (v * 0.9).cos() * 3.0);
        let mask = t(&[1, 3], &[0.0, 1.0, 0.0]);
        let fill = t(&[], &[-1e9]);
        let scaled = map(&x, |v| v * 0.25);
        let want = softmax(&masked_fill(&scaled, &mask, &fill).unwrap(), 1).unwrap();
        let got = masked_softmax(&x, Some(&mask), 0.25, -1e9).unwrap();
        assert_eq!(got.to_vec(), want.to_vec());
        assert!(masked_softmax(&x, Some(&t(&[3, 1], &[0.0; 3])), 1.0, 0.0).is_none());
    }

    #[test]
    fn attention_is_softmax_of_the_scaled_masked_scores_times_v() {
        let q = map(&iota(&[2, 3, 4]), |v| (v * 0.3).sin());
        let k = map(&iota(&[2, 5, 4]), |v| (v * 0.7).cos());
        let v = map(&iota(&[2, 5, 2]), |x| x * 0.1);
        let mask = t(&[2, 1, 5], &[0., 0., 1., 0., 0., 1., 0., 0., 0., 0.]);
        let scores = matmul(&q, &k.transpose(1, 2).unwrap()).unwrap();
        let p = masked_softmax(&scores, Some(&mask), 0.5, -1e9).unwrap();
        let want = matmul(&p, &v).unwrap();
        let got = attention([&q, &k, &v], Some(&mask), 0.5, -1e9).unwrap();
        assert_eq!(got.shape, [2, 3, 2]);
        assert_eq!(got.to_vec(), want.to_vec());
    }

    #[test]
    fn concat_and_stack_join_items() {
        let (a, b) = (iota(&[2, 2]), map(&iota(&[2, 1]), |v| v + 10.0));
        assert_eq!(
            concat(&[a.clone(), b], 1).unwrap().to_vec(),
            [0., 1., 10., 2., 3., 11.]
        );
        let s = stack(&[a.clone(), a], 1).unwrap();
        assert_eq!(s.shape, [2, 2, 2]);
        assert_eq!(s.to_vec(), [0., 1., 0., 1., 2., 3., 2., 3.]);
        assert!(concat(&[], 0).is_none());
    }
}
