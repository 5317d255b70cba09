//! The key ranges of an attention kernel's tensor mask, found once per call where the mask
//! is broadcast over heads ([`KeyRanges`]): a kernel before the attention scans each block
//! of rows once into a small table, and the attention's tasks of every head read their
//! entry, where each would otherwise scan the same rows of the mask again. The layers of a
//! model share one mask (SmolLM2's 30 attentions read one causal mask of the positions), so
//! a table is made once and read by every attention whose ranges are the same.

use super::Lowerer;
use crate::kernel::{Attention, KernelOp, KeyRanges, Operand};

impl Lowerer<'_> {
    /// `a` reading its key ranges from a [`KeyRanges`] kernel added before it, where its
    /// mask does not vary along some of its batch axes (a table made for an earlier
    /// attention where it has the same ranges); `a` as it is otherwise.
    pub(super) fn key_ranges(&mut self, label: &str, a: Attention) -> Attention {
        let mut shape = Vec::new();
        let placeholder = |s: &[usize]| {
            shape = s.to_vec();
            Operand {
                buf: usize::MAX,
                offset: 0,
                strides: Vec::new(),
            }
        };
        let Some(mut ranges) = KeyRanges::shared(&a, placeholder) else {
            return a;
        };
        let read = match self.table_of(&ranges) {
            Some(made) => made.read_by(&a.batch),
            None => {
                ranges.out = self.temp(shape).operand();
                let read = ranges.read_by(&a.batch);
                let what = format!("{label} (key ranges of its mask)");
                self.kernel(what, KernelOp::KeyRanges(ranges.clone()));
                self.ranges.push((ranges, self.plan.kernels.len()));
                read
            }
        };
        Attention {
            ranges: Some(read),
            ..a
        }
    }

    /// A table made earlier for the ranges of `wanted` (all but its `out`), where no kernel
    /// after the one that made it has written its mask's buffer or the table's.
    fn table_of(&self, wanted: &KeyRanges) -> Option<KeyRanges> {
        let same = |made: &KeyRanges| {
            KeyRanges {
                out: wanted.out.clone(),
                ..made.clone()
            } == *wanted
        };
        let (made, since) = self.ranges.iter().rev().find(|(made, _)| same(made))?;
        let unwritten = |buf| self.last_write.get(&buf).is_none_or(|k| k < since);
        (unwritten(made.mask.mask.buf) && unwritten(made.out.buf)).then(|| made.clone())
    }
}
