//! Sizes that cannot overflow silently: the one place where element and byte counts are
//! multiplied out, for the checks of E0305 (the runtime) and for every buffer the lowering
//! makes (a plan whose sizes wrapped would let a kernel write past its buffer).
//!
//! A tensor may hold at most [`MAX_ELEMENTS`] floats, so its byte count and every element
//! offset inside it, times four, fit in an `isize`: what Rust's allocator and pointer
//! arithmetic require. Every stride and offset of a view is at most its buffer's length, so
//! once the lengths are checked here, the arithmetic on them in `lower` cannot overflow.

use std::fmt;

/// The most elements one tensor may have.
pub const MAX_ELEMENTS: usize = isize::MAX as usize / size_of::<f32>();

/// The elements of `shape`, or `None` when the product of its sizes passes
/// [`MAX_ELEMENTS`]. Sizes of 0 count as 1 in that bound, because the row-major strides of
/// the other axes are multiplied out whether the tensor is empty or not.
pub fn numel(shape: &[usize]) -> Option<usize> {
    let mut reach = 1usize;
    for &n in shape {
        reach = reach.checked_mul(n.max(1)).filter(|&r| r <= MAX_ELEMENTS)?;
    }
    Some(if shape.contains(&0) { 0 } else { reach })
}

/// The bytes of a float32 tensor whose axes have these sizes, exactly (saturating at
/// `u128::MAX`, far beyond any budget).
pub fn bytes(sizes: &[u128]) -> u128 {
    let elements = sizes.iter().try_fold(1u128, |n, &s| n.checked_mul(s));
    elements
        .and_then(|n| n.checked_mul(size_of::<f32>() as u128))
        .unwrap_or(u128::MAX)
}

/// A tensor, or the whole plan, that does not fit (E0305): `bytes` beyond 64 bits, or beyond
/// the memory budget.
#[derive(Clone, Debug, PartialEq)]
pub struct TooLarge {
    /// What needs the memory: "tensor `y` of shape [..]", "the kernel plan".
    pub what: String,
    pub bytes: u128,
    pub budget: u64,
}

impl TooLarge {
    /// `Ok` when `bytes` fit both 64 bits and the budget.
    pub fn check(what: impl FnOnce() -> String, bytes: u128, budget: u64) -> Result<(), TooLarge> {
        match bytes > u128::from(budget) || bytes > u128::from(u64::MAX) {
            true => Err(TooLarge {
                what: what(),
                bytes,
                budget,
            }),
            false => Ok(()),
        }
    }
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let needs = match self.bytes {
            u128::MAX => "more than 2^128 bytes".to_string(),
            b => format!("{b} bytes"),
        };
        match self.bytes > u128::from(u64::MAX) {
            true => write!(f, "{} needs {needs}, a size that overflows 64 bits", self.what),
            false => write!(
                f,
                "{} needs {needs}, more than the memory budget of {} bytes",
                self.what, self.budget
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numel_refuses_products_that_wrap() {
        // 2^64 + 4 elements: the product wraps to 4 in unchecked arithmetic.
        assert_eq!(numel(&[384773, 49477, 34724, 27905]), None);
        assert_eq!(numel(&[2, 3, 4]), Some(24));
        assert_eq!(numel(&[]), Some(1));
        assert_eq!(numel(&[0, 5]), Some(0));
        assert_eq!(numel(&[0, usize::MAX]), None);
    }

    #[test]
    fn bytes_are_exact_beyond_64_bits() {
        let b = bytes(&[384773, 49477, 34724, 27905]);
        assert_eq!(b, ((1u128 << 64) + 4) * 4);
        let e = TooLarge::check(|| "tensor `y`".into(), b, u64::MAX).unwrap_err();
        assert!(e
            .to_string()
            .contains("73786976294838206480 bytes, a size that overflows 64 bits"));
        assert!(TooLarge::check(|| "x".into(), 100, 100).is_ok());
        let over = TooLarge::check(|| "x".into(), 101, 100).unwrap_err();
        assert!(over
            .to_string()
            .ends_with("more than the memory budget of 100 bytes"));
    }
}
