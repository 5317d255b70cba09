//! What a product of packed weights applies to its sums after `alpha` (`attnc_sgemm_packed`):
//! the bias, a residual add and ReLU, which the generated code would otherwise apply in a
//! pass over the tile after the product. The product of strips applies them to each block
//! of the tile as it stores it ([`Finish::after`]); the other paths after the whole tile
//! ([`Finish::over`]).

/// What a product applies to its sums besides `alpha`, in this order: the bias (`bias[j]`,
/// column stride given), a residual (`residual[i, j]`, row stride given, columns
/// contiguous) and ReLU (`maximum(c, 0)` as the generated code computes it: a NaN stays).
pub struct Finish {
    pub bias: Option<(*const f32, usize)>,
    pub residual: Option<(*const f32, usize)>,
    pub relu: bool,
}

impl Finish {
    /// The residual and ReLU over the `rows × width` block of `c` from row `i`, column `j`
    /// (rows `c_rs` apart, columns contiguous), in cache since its product stored it.
    ///
    /// # Safety
    /// For `r < rows`, `q < width`, `c + (i + r)·c_rs + j + q` and the residual's element
    /// `(i + r, j + q)` are inside their allocations, and `c`'s are the caller's alone.
    pub unsafe fn after(
        &self,
        (c, c_rs): (*mut f32, usize),
        (i, j): (usize, usize),
        (rows, width): (usize, usize),
    ) {
        if self.residual.is_none() && !self.relu {
            return;
        }
        for r in i..i + rows {
            // SAFETY: row `r` of the block, its `width` columns (contract).
            let row = unsafe { std::slice::from_raw_parts_mut(c.add(r * c_rs + j), width) };
            if let Some((residual, rs)) = self.residual {
                // SAFETY: the residual's row `r`, its `width` columns (contract).
                let add = unsafe { std::slice::from_raw_parts(residual.add(r * rs + j), width) };
                row.iter_mut().zip(add).for_each(|(x, y)| *x += y);
            }
            if self.relu {
                row.iter_mut().for_each(|x| *x = relu(*x));
            }
        }
    }

    /// The bias, the residual and ReLU over the `m × n` tile of `c` (strides `c_rs`,
    /// `c_cs`) after a product that applied none of them.
    ///
    /// # Safety
    /// For `i < m`, `j < n`, `c + i·c_rs + j·c_cs`, `bias + j·bias_cs` and the residual's
    /// element `(i, j)` are inside their allocations, and `c`'s are the caller's alone.
    pub unsafe fn over(&self, (m, n): (usize, usize), (c, c_rs, c_cs): (*mut f32, isize, isize)) {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: `i < m`, `j < n` (contract).
                unsafe {
                    let x = c.offset(i as isize * c_rs + j as isize * c_cs);
                    if let Some((bias, cs)) = self.bias {
                        *x += *bias.add(j * cs);
                    }
                    if let Some((residual, rs)) = self.residual {
                        *x += *residual.add(i * rs + j);
                    }
                    if self.relu {
                        *x = relu(*x);
                    }
                }
            }
        }
    }
}

/// `maximum(x, 0)` as the generated code computes it (`codegen/math.rs`): `x` where `x ≥ 0`
/// (-0 included) or NaN, else 0.
fn relu(x: f32) -> f32 {
    if x < 0.0 {
        0.0
    } else {
        x
    }
}
