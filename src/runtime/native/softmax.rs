//! The attention tile's online softmax at the machine's width, called from the generated code
//! after the tile's score changes and masks (`codegen/softmax.rs`, [`tile_softmax`]): per
//! row of the scores tile, the row's maximum, `exp(s - max)` written back with its sum, the
//! running maximum and sum updated, and the row's outputs rescaled where the maximum moved.
//! The changes a shim can apply as it reads each score (a row of values per key, [`KeyRow`],
//! and a tensor added by row and key, [`Added`]) the generated code leaves to it.
//!
//! It computes the bits the 128-bit JIT path computes (`codegen/softmax.rs`'s
//! `scale_mask_max` and `exp_sum`, `codegen/attention.rs`'s `update_row`), so that the
//! interpreter's tolerances and every thread count see one result: the same `exp`
//! polynomial, operation for operation, and the same order of every sum and maximum. That
//! order is this routine's natural one: a row's keys in 16 lanes (key `j` in lane
//! `j mod 16`, in order), over its whole groups of four keys; the lanes folded in halves
//! (256 bits, then 128, then the JIT's pairs of lanes); then the keys left one by one. The
//! JIT keeps the 16 lanes as four vectors of four; [`Avx512`] as one vector of 16, [`Avx2`]
//! as two of 8. The row's bookkeeping is written once here, over the passes of a
//! [`Width`].
//!
//! [`tile_softmax`]: crate::codegen

mod avx2;
mod avx512;

pub use avx2::Avx2;
pub use avx512::Avx512;

use crate::codegen::KeyChange;
use std::arch::x86_64::*;

/// The running state of the tile's rows: each row's maximum and sum so far (`rows` floats
/// each), and its output row (`dv` floats, strides `rs` between rows and `cs` between
/// columns), rescaled only when `later` (a tile was visited before this one).
pub struct Running {
    pub max: *mut f32,
    pub sum: *mut f32,
    pub out: *mut f32,
    pub rs: usize,
    pub cs: usize,
    pub dv: usize,
    pub later: bool,
}

/// A change of the scores the same for every row of the tile, one value per key, as the
/// generated code computed it once for the tile (`codegen/attention.rs`): a padding mask
/// broadcast over the queries, or an additive one (`(1 - mask) · min`). Applied as each
/// pass reads a score, so the tile is not read and written once more to change it.
#[derive(Clone, Copy)]
pub struct KeyRow {
    pub values: *const f32,
    pub op: KeyChange,
}

/// A change of the scores different in every row, as the generated code found it in the
/// kernel's inputs: a tensor of one value per query and key (T5's position bias), row `i`'s
/// values at `values + i·rs`, one per key in order. Added to each score before the key
/// row's change (`s + (t + k)` with an additive key row), as each pass reads the score, so
/// the tile is not read and written once more to change it.
#[derive(Clone, Copy)]
pub struct Added {
    pub values: *const f32,
    pub rs: usize,
}

/// The changes of a score as the const parameter of the passes, bits of: a key row that
/// fills ([`FILL`]) or is added ([`ADD`]), and a row of [`Added`] values ([`TILE`]), added
/// first. [`NONE`] is none of them.
const NONE: u8 = 0;
const FILL: u8 = 1;
const ADD: u8 = 2;
const TILE: u8 = 4;
const TILE_FILL: u8 = TILE | FILL;
const TILE_ADD: u8 = TILE | ADD;

/// A row's changes as the passes read them: the key row's values and the fill (where `OP`
/// has [`FILL`]), and the row's added values (where `OP` has [`TILE`]).
#[derive(Clone, Copy)]
pub struct Keys {
    values: *const f32,
    fill: f32,
    added: *const f32,
}

/// The vector passes over a row at one instruction set's width, each in the order of the
/// module's documentation. `OP` says how the row's added values and the key row change a
/// score (bits of [`TILE`], [`FILL`], [`ADD`]).
///
/// # Safety
/// Every method asks that the CPU runs the instruction set (as `Lanes` in `native.rs`
/// checks) and that
/// the elements it names are inside their allocations.
pub trait Width {
    /// The row's maximum over its `cols` scores at `row`, each changed as `OP` says.
    ///
    /// # Safety
    /// The row's `cols` scores, `cols` values of the key row where `OP` has [`FILL`] or
    /// [`ADD`], and `cols` added values where it has [`TILE`], are inside their allocations.
    unsafe fn row_max<const OP: u8>(row: *const f32, cols: usize, keys: Keys) -> f32;

    /// `exp(s - base)` over the row's `cols` scores, written back, and their sum.
    ///
    /// # Safety
    /// As for [`Width::row_max`].
    unsafe fn exp_sum<const OP: u8>(row: *mut f32, cols: usize, base: f32, keys: Keys) -> f32;

    /// `e^x` for `x ≤ 0`, as the passes compute each lane.
    ///
    /// # Safety
    /// The CPU runs the instruction set.
    unsafe fn exp1(x: f32) -> f32;

    /// `dst[c] *= factor` for `c < len`.
    ///
    /// # Safety
    /// Those elements are inside their allocation.
    unsafe fn scale(dst: *mut f32, len: usize, factor: f32);
}

/// Runs the online softmax's update on `rows × cols` scores at `tile` (row stride
/// `tile_rs`, unit column stride), each score changed by its row's `added` value and its
/// key's value in `keys`: see the module's documentation.
///
/// # Safety
/// The CPU runs `W`'s instructions; the tile's `rows × cols` elements,
/// `rows` floats at `run.max` and at `run.sum`, `run.out + i·rs + c·cs` for `i < rows`,
/// `c < dv`, `cols` floats at `keys.values` and at `added.values + i·added.rs` are inside
/// their allocations; the first three are written by no other thread during the call, and
/// none of them is another's.
pub unsafe fn tile_softmax<W: Width>(
    (rows, cols): (usize, usize),
    (tile, tile_rs): (*mut f32, usize),
    run: &Running,
    keys: Option<KeyRow>,
    added: Option<Added>,
) {
    let (values, fill, keys_op) = match keys {
        Some(KeyRow {
            values,
            op: KeyChange::Fill(fill),
        }) => (values, fill, FILL),
        Some(KeyRow {
            values,
            op: KeyChange::Add,
        }) => (values, 0.0, ADD),
        None => (std::ptr::null(), 0.0, NONE),
    };
    let op = keys_op | added.map_or(NONE, |_| TILE);
    for i in 0..rows {
        // SAFETY: row `i < rows` of the tile, of the statistics, of the outputs and of the
        // added values, and the key row, are inside their allocations (the contract); a
        // pointer the passes do not read (`OP` says which) is not formed past anything.
        unsafe {
            let row = tile.add(i * tile_rs);
            let added = added.map_or(std::ptr::null(), |a| a.values.add(i * a.rs));
            let k = Keys { values, fill, added };
            match op {
                FILL => update::<W, FILL>(row, cols, i, run, k),
                ADD => update::<W, ADD>(row, cols, i, run, k),
                TILE => update::<W, TILE>(row, cols, i, run, k),
                TILE_FILL => update::<W, TILE_FILL>(row, cols, i, run, k),
                TILE_ADD => update::<W, TILE_ADD>(row, cols, i, run, k),
                _ => update::<W, NONE>(row, cols, i, run, k),
            }
        }
    }
}

/// Row `i` of the tile, its `cols` scores at `row`, changed as `OP` says by `keys` (not
/// read where `OP` is [`NONE`]).
///
/// # Safety
/// [`tile_softmax`]'s contract, for this row.
unsafe fn update<W: Width, const OP: u8>(row: *mut f32, cols: usize, i: usize, run: &Running, keys: Keys) {
    // SAFETY: the CPU runs `W`, and the row's `cols` scores and the key row are inside
    // their allocations (the contract).
    let row_max = unsafe { W::row_max::<OP>(row, cols, keys) };
    // SAFETY: the CPU runs `W`, and row `i` of the statistics and its `dv` outputs at
    // stride `cs` are inside their allocations (the contract).
    unsafe {
        let m_old = *run.max.add(i);
        let m_new = max(m_old, row_max);
        // A row whose every key so far is removed subtracts 0, so `-inf - -inf` is not NaN.
        let base = if m_new == f32::NEG_INFINITY { 0.0 } else { m_new };
        let sum = W::exp_sum::<OP>(row, cols, base, keys);
        // `base` is at least `m_old`: the exponent is never positive.
        let corr = W::exp1(m_old - base);
        let l_at = run.sum.add(i);
        *l_at = (*l_at).mul_add(corr, sum);
        *run.max.add(i) = m_new;
        // A product by exactly 1 changes no bit: a row whose maximum stayed is left.
        if run.later && corr != 1.0 {
            let out = run.out.add(i * run.rs);
            match run.cs {
                1 => W::scale(out, run.dv, corr),
                cs => (0..run.dv).for_each(|c| *out.add(c * cs) *= corr),
            }
        }
    }
}

/// The larger of `a` and `b` as the JIT's `max` takes it: `a` where `a > b`, else `b`
/// (`_mm512_max_ps`'s rule, NaN and signed zeros included).
fn max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// The keys of a row that go through the 16 lanes: `(whole, quads)`, the end of its whole
/// groups of 16 and of its whole groups of 4 (the lanes set in the last, partial vector).
fn spans(cols: usize) -> (usize, usize) {
    (cols & !15, cols & !3)
}

/// Eight lanes folded to one: lane `x` with lane `4 + x`, then lanes `(0, 1)` and `(2, 3)`
/// (the JIT's `hmax` and `hsum`), then those two, each by `f(first, second)`.
#[target_feature(enable = "avx")]
fn fold4(h: __m256, f: fn(f32, f32) -> f32) -> f32 {
    let mut q = [0.0f32; 8];
    // SAFETY: `q` holds 8 floats.
    unsafe { _mm256_storeu_ps(q.as_mut_ptr(), h) };
    let l: [f32; 4] = std::array::from_fn(|x| f(q[x], q[4 + x]));
    f(f(l[0], l[1]), f(l[2], l[3]))
}

/// `a + b`, as a function for [`fold4`].
fn add(a: f32, b: f32) -> f32 {
    a + b
}

/// The score of key `j`, changed as `OP` says by its row's added value and its key's
/// value: the keys left after a row's groups of four.
///
/// # Safety
/// Key `j` is inside the tile, inside the key row where `OP` has [`FILL`] or [`ADD`], and
/// inside the row's added values where it has [`TILE`].
unsafe fn score<const OP: u8>(row: *const f32, j: usize, keys: Keys) -> f32 {
    // SAFETY: as the contract says.
    unsafe {
        let s = *row.add(j);
        let s = match (OP & TILE != 0, OP & ADD != 0) {
            (true, true) => s + (*keys.added.add(j) + *keys.values.add(j)),
            (true, false) => s + *keys.added.add(j),
            (false, true) => s + *keys.values.add(j),
            (false, false) => s,
        };
        match OP & FILL != 0 && *keys.values.add(j) != 0.0 {
            true => keys.fill,
            false => s,
        }
    }
}

/// `attnc_softmax_tile(rows, cols, tile, tile_rs, max, sum, out, out_rs, out_cs, dv, keys,
/// added, added_rs, later, op, fill)`: [`tile_softmax`] for JIT code, with the key row at
/// `keys` where it is not null, changing the scores as [`KeyChange::from_abi`] reads `op`
/// and `fill`, and the [`Added`] values at `added` (rows `added_rs` apart) where it is not
/// null. The code generator calls it only for the `W` that [`super::softmax_shim`] chose,
/// which this CPU runs (the shim is bound to no symbol otherwise).
///
/// # Safety
/// [`tile_softmax`]'s: the CPU runs `W`, and the tile, the statistics, the outputs, the
/// key row and the added values are inside their allocations, the first three this call's
/// alone. The JIT code passes its thread's scratch (tile, statistics and key row, sized by
/// `KernelOp::scratch`), its task's own output rows, which `Plan::validate` proved inside
/// their buffer, and the rows and keys of a score input that `Plan::validate` proved
/// inside theirs.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn attnc_softmax_tile<W: Width>(
    rows: i64,
    cols: i64,
    tile: *mut f32,
    tile_rs: i64,
    max: *mut f32,
    sum: *mut f32,
    out: *mut f32,
    out_rs: i64,
    out_cs: i64,
    dv: i64,
    keys: *const f32,
    added: *const f32,
    added_rs: i64,
    later: i32,
    op: i32,
    fill: f32,
) {
    if rows <= 0 || cols <= 0 || tile_rs < 0 || out_rs < 0 || out_cs < 0 || dv < 0 || added_rs < 0 {
        return;
    }
    let u = |x: i64| x as usize;
    let run = Running {
        max,
        sum,
        out,
        rs: u(out_rs),
        cs: u(out_cs),
        dv: u(dv),
        later: later != 0,
    };
    let op = KeyChange::from_abi(op, fill);
    let keys = (!keys.is_null()).then_some(KeyRow { values: keys, op });
    let added = (!added.is_null()).then_some(Added {
        values: added,
        rs: u(added_rs),
    });
    // SAFETY: the sizes and strides are not negative (checked), and this function's
    // contract is `tile_softmax`'s.
    unsafe { tile_softmax::<W>((u(rows), u(cols)), (tile, u(tile_rs)), &run, keys, added) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tile of `rows × cols` scores in rows of `cols + 3` (the 3 past each row a
    /// sentinel the routine must not touch), the state of each row before it, a row of
    /// keys (`keys`, empty for none) that changes every row as `op` says, and values added
    /// to each row's scores first (`added`, rows of `cols + 1`, empty for none).
    struct Case {
        rows: usize,
        cols: usize,
        tile: Vec<f32>,
        max: Vec<f32>,
        sum: Vec<f32>,
        out: Vec<f32>,
        dv: usize,
        keys: Vec<f32>,
        op: KeyChange,
        added: Vec<f32>,
    }

    const SENTINEL: f32 = 12345.0;

    impl Case {
        fn new(rows: usize, cols: usize, score: impl Fn(usize, usize) -> f32) -> Case {
            let rs = cols + 3;
            let tile = (0..rows * rs)
                .map(|x| match x % rs < cols {
                    true => score(x / rs, x % rs),
                    false => SENTINEL,
                })
                .collect();
            let dv = 5;
            Case {
                rows,
                cols,
                tile,
                max: (0..rows).map(|i| [f32::NEG_INFINITY, 0.5, 3.0][i % 3]).collect(),
                sum: (0..rows).map(|i| [0.0, 1.5, 2.0][i % 3]).collect(),
                out: (0..rows * (dv + 1)).map(|x| x as f32 * 0.25 - 1.0).collect(),
                dv,
                keys: Vec::new(),
                op: KeyChange::Add,
                added: Vec::new(),
            }
        }

        /// The case with `add(i, j)` added to row `i`'s score of key `j` before the key
        /// row's change.
        fn with_added(self, add: impl Fn(usize, usize) -> f32) -> Case {
            let rs = self.cols + 1;
            let added = (0..self.rows * rs).map(|x| add(x / rs, x % rs)).collect();
            Case { added, ..self }
        }

        /// The case with the keys `hit` says filled by `fill` in every row.
        fn filled(self, hit: impl Fn(usize) -> bool, fill: f32) -> Case {
            let keys = (0..self.cols).map(|j| if hit(j) { 1.0 } else { 0.0 }).collect();
            Case {
                keys,
                op: KeyChange::Fill(fill),
                ..self
            }
        }

        /// The case with `add(j)` added to key `j`'s score in every row.
        fn added(self, add: impl Fn(usize) -> f32) -> Case {
            let keys = (0..self.cols).map(add).collect();
            Case {
                keys,
                op: KeyChange::Add,
                ..self
            }
        }

        /// Row `i`'s scores as the routine sees them: changed by the key row.
        fn scores(&self, i: usize) -> Vec<f32> {
            let rs = self.cols + 3;
            let row = &self.tile[i * rs..i * rs + self.cols];
            let added = |j: usize| self.added.get(i * (self.cols + 1) + j).copied();
            let key = |j: usize| self.keys.get(j).copied();
            let change = |(j, &s): (usize, &f32)| match (added(j), key(j), self.op) {
                (_, Some(v), KeyChange::Fill(fill)) if v != 0.0 => fill,
                (Some(t), Some(v), KeyChange::Add) => s + (t + v),
                (Some(t), _, _) => s + t,
                (None, Some(v), KeyChange::Add) => s + v,
                _ => s,
            };
            row.iter().enumerate().map(change).collect()
        }

        /// Runs the routine at width `W` on a copy; returns the tile, maxima, sums and
        /// outputs after.
        fn run<W: Width>(&self) -> Case {
            let mut c = self.clone();
            let run = Running {
                max: c.max.as_mut_ptr(),
                sum: c.sum.as_mut_ptr(),
                out: c.out.as_mut_ptr(),
                rs: self.dv + 1,
                cs: 1,
                dv: self.dv,
                later: true,
            };
            // SAFETY: the CPU runs `W` (checked by the caller), and every element the
            // routine reaches is inside these vectors, which nothing else uses.
            let keys = (!c.keys.is_empty()).then_some(KeyRow {
                values: c.keys.as_ptr(),
                op: c.op,
            });
            let added = (!c.added.is_empty()).then_some(Added {
                values: c.added.as_ptr(),
                rs: c.cols + 1,
            });
            let tile = (c.tile.as_mut_ptr(), c.cols + 3);
            unsafe { tile_softmax::<W>((c.rows, c.cols), tile, &run, keys, added) };
            c
        }
    }

    impl Clone for Case {
        fn clone(&self) -> Case {
            Case {
                tile: self.tile.clone(),
                max: self.max.clone(),
                sum: self.sum.clone(),
                out: self.out.clone(),
                keys: self.keys.clone(),
                added: self.added.clone(),
                ..*self
            }
        }
    }

    /// The routine at each width this CPU runs, checked against a plain loop ([`check_at`]);
    /// where the CPU runs both, their results are the same bits.
    fn check(before: &Case) {
        let bits = |c: &Case| {
            let all = c.tile.iter().chain(&c.max).chain(&c.sum).chain(&c.out);
            all.map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let wide = super::super::tile::available().then(|| check_at(before.run::<Avx512>(), before));
        let narrow = super::super::avx2_fma().then(|| check_at(before.run::<Avx2>(), before));
        if let (Some(wide), Some(narrow)) = (wide, narrow) {
            assert!(bits(&wide) == bits(&narrow), "512 and 256 bits differ");
        }
    }

    /// A plain loop of the online softmax's update in float64, against which each row's
    /// results `after` are compared (`exp` within 3·10⁻⁷ relative, the sums within 10⁻⁶).
    fn check_at(after: Case, before: &Case) -> Case {
        let rs = before.cols + 3;
        for i in 0..before.rows {
            let row = &before.scores(i);
            let got = &after.tile[i * rs..(i + 1) * rs];
            assert!(
                got[before.cols..].iter().all(|&x| x == SENTINEL),
                "row {i}: wrote past the tile"
            );
            let m_old = before.max[i] as f64;
            let nan = row.iter().any(|x| x.is_nan());
            let m_new = row.iter().fold(m_old, |m, &x| m.max(x as f64));
            let base = if m_new == f64::NEG_INFINITY { 0.0 } else { m_new };
            let mut sum = 0.0;
            for (j, &s) in row.iter().enumerate() {
                // The exponent is rounded to f32 before `exp`, as the kernel computes it.
                let want = ((s - base as f32) as f64).exp();
                sum += want;
                let close = match nan {
                    true => true,
                    false => (got[j] as f64 - want).abs() <= 3e-7 * want + 1.5e-45,
                };
                assert!(
                    close,
                    "row {i} key {j}: exp({s} - {base}) = {}, want {want}",
                    got[j]
                );
            }
            let corr = ((before.max[i] - base as f32) as f64).exp();
            let l = before.sum[i] as f64 * corr + sum;
            let got_l = after.sum[i] as f64;
            match nan {
                true => assert!(
                    got_l.is_nan(),
                    "row {i}: a NaN score gives a NaN sum, got {got_l}"
                ),
                false => {
                    assert!((got_l - l).abs() <= 1e-6 * l, "row {i}: sum {got_l}, want {l}");
                    assert_eq!(after.max[i] as f64, m_new, "row {i}: maximum");
                }
            }
            let o = i * (before.dv + 1);
            for c in 0..before.dv {
                let want = before.out[o + c] as f64 * corr;
                let got = after.out[o + c] as f64;
                assert!(
                    nan || (got - want).abs() <= 1e-6 * want.abs(),
                    "row {i} output {c}: {got}, want {want}"
                );
            }
            assert_eq!(
                after.out[o + before.dv],
                before.out[o + before.dv],
                "row {i}: wrote past dv"
            );
        }
        after
    }

    fn score(i: usize, j: usize) -> f32 {
        ((i * 31 + j * 17) % 41) as f32 * 0.37 - 6.0
    }

    #[test]
    fn tiles_of_every_width_and_height_match_a_plain_loop() {
        for rows in [1, 3, 4, 5, 8] {
            for cols in [1, 2, 3, 4, 5, 7, 16, 17, 64, 67] {
                check(&Case::new(rows, cols, score));
            }
        }
    }

    #[test]
    fn rows_removed_whole_nan_and_huge_scores_match_a_plain_loop() {
        let removed = |i: usize, j: usize| {
            if i.is_multiple_of(2) {
                f32::NEG_INFINITY
            } else {
                score(i, j)
            }
        };
        let nan = |i: usize, j: usize| if i == 1 && j == 2 { f32::NAN } else { score(i, j) };
        let huge = |i: usize, j: usize| score(i, j) * 1e30 * if j.is_multiple_of(2) { 1.0 } else { -1.0 };
        for cols in [1, 6, 19] {
            check(&Case::new(5, cols, removed));
            check(&Case::new(5, cols, nan));
            check(&Case::new(5, cols, huge));
        }
    }

    #[test]
    fn keys_a_mask_fills_are_filled_in_every_row() {
        for cols in [1, 3, 4, 13, 16, 21, 64, 67] {
            for fill in [-1e9, f32::NEG_INFINITY, 0.0] {
                // Every third key, and a row of keys all filled.
                check(&Case::new(5, cols, score).filled(|j| j % 3 == 1, fill));
                check(&Case::new(3, cols, score).filled(|_| true, fill));
            }
        }
    }

    #[test]
    fn a_row_of_keys_added_to_every_row_is_added() {
        // An additive padding mask: 0 for kept keys, the float minimum for removed ones.
        let padding = |j: usize| if j % 4 == 3 { f32::MIN } else { 0.0 };
        for cols in [1, 3, 4, 13, 16, 21, 64, 67] {
            check(&Case::new(5, cols, score).added(padding));
            check(&Case::new(4, cols, score).added(|j| j as f32 * 0.25 - 2.0));
        }
    }

    #[test]
    fn values_added_to_each_row_are_added_before_the_row_of_keys() {
        // T5's position bias, alone, with an additive padding mask, and with a padding mask
        // that fills; huge values of both signs and infinities among them.
        let bias = |i: usize, j: usize| ((i * 7 + j * 3) % 11) as f32 * 0.5 - 2.5;
        let wild = |i: usize, j: usize| match (i + j) % 5 {
            0 => f32::MAX,
            1 => -f32::MAX,
            2 => f32::NEG_INFINITY,
            _ => bias(i, j) * 1e30,
        };
        let padding = |j: usize| if j % 4 == 3 { f32::MIN } else { 0.0 };
        for cols in [1, 3, 4, 13, 16, 21, 64, 67] {
            for added in [&bias as &dyn Fn(usize, usize) -> f32, &wild] {
                check(&Case::new(5, cols, score).with_added(added));
                check(&Case::new(4, cols, score).added(padding).with_added(added));
                check(
                    &Case::new(3, cols, score)
                        .filled(|j| j % 3 == 1, -1e9)
                        .with_added(added),
                );
            }
        }
    }
}
