//! The key ranges of an attention kernel's tensor mask, found once per call where the mask
//! is broadcast over heads ([`KeyRanges`]): a kernel before the attention scans each block
//! of rows once into a small table, and the attention's tasks of every head read their
//! entry, where each would otherwise scan the same rows of the mask again.

use super::Lowerer;
use crate::kernel::{Attention, KernelOp, KeyRanges};

impl Lowerer<'_> {
    /// `a` reading its key ranges from a [`KeyRanges`] kernel added before it, where its
    /// mask does not vary along some of its batch axes; `a` as it is otherwise.
    pub(super) fn key_ranges(&mut self, label: &str, a: Attention) -> Attention {
        let Some(ranges) = KeyRanges::shared(&a, |shape| self.temp(shape.to_vec()).operand()) else {
            return a;
        };
        let read = ranges.read_by(&a.batch);
        let what = format!("{label} (key ranges of its mask)");
        self.kernel(what, KernelOp::KeyRanges(ranges));
        Attention {
            ranges: Some(read),
            ..a
        }
    }
}
