//! The key ranges kernel ([`KeyRanges`]): each task scans the mask rows of one block of
//! query rows (and with a split, one chunk of keys) for the keys any row keeps and the keys
//! every row keeps, exactly as an attention task that scans its own mask does
//! (`visible.rs`), and writes them to its entry of the table; the attention kernel after it
//! reads the entry in every head the mask is broadcast over. The same scans give the same
//! ranges, so the tiles visited, and the bits, are those of the scan in the attention task.

use super::emit::Emit;
use super::place::{place, Place};
use super::visible::{kept_by_all, visible_keys, MaskRows};
use crate::kernel::KeyRanges;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};

/// Byte offsets in an entry of its four key indices (64-bit integers): the visible keys'
/// `[lo, hi)`, then the keys every row keeps, `[a, b)`.
const OFFSETS: [i32; 4] = [0, 8, 16, 24];

pub fn translate(e: &mut Emit, k: &KeyRanges) {
    let (mask_at, table) = (e.arg(0), e.arg(1));
    let r = k.batch.len();
    let (ms, os) = (&k.mask.mask.strides, &k.out.strides);
    let (begin, end) = (e.begin, e.end);
    e.for_range(begin, end, 1, |e, t| {
        let Place {
            idx, i0, rows, keys, ..
        } = place(e, t, &k.batch, (k.n, k.rows, k.m), k.split);
        let at = {
            let o = e.dot(&idx, &ms[..r]);
            let p = e.at(mask_at, o);
            e.step(p, i0, ms[r])
        };
        let mask = MaskRows {
            at,
            row_stride: ms[r],
            key_stride: ms[r + 1],
            fill: &k.mask,
        };
        let zero = e.int(0);
        let all = (zero, e.int(k.m as i64));
        let visible = visible_keys(e, &mask, rows, keys.unwrap_or(all));
        let whole = kept_by_all(e, &mask, rows, visible);
        let at = entry(e, (table, os), t, &idx, k.row_tasks());
        for (x, off) in [visible.0, visible.1, whole.0, whole.1].into_iter().zip(OFFSETS) {
            e.b.ins().store(MemFlagsData::new().with_notrap(), x, at, off);
        }
    });
}

/// The key ranges of task `t` (of batch index `idx`) of an attention kernel from the table
/// at `table`: the visible keys, then the keys every row keeps.
pub fn read_entry(
    e: &mut Emit,
    table: (Value, &[usize]),
    t: Value,
    idx: &[Value],
    row_tasks: usize,
) -> ((Value, Value), (Value, Value)) {
    let at = entry(e, table, t, idx, row_tasks);
    // Written by the kernel before; this one only reads it.
    let flags = MemFlagsData::new().with_notrap().with_readonly();
    let [lo, hi, a, b] = OFFSETS.map(|off| e.b.ins().load(I64, flags, at, off));
    ((lo, hi), (a, b))
}

/// The entry of task `t` in the table at `table`, strided over `[batch.., row_tasks,
/// RANGE_FLOATS]`: at its batch index, then its number within that index (the tasks of
/// one index are consecutive, as [`place`] numbers them).
fn entry(
    e: &mut Emit,
    (table, strides): (Value, &[usize]),
    t: Value,
    idx: &[Value],
    row_tasks: usize,
) -> Value {
    let r = idx.len();
    let o = e.dot(idx, &strides[..r]);
    let at = e.at(table, o);
    let within = e.b.ins().urem_imm_u(t, row_tasks as i64);
    e.step(at, within, strides[r])
}
