//! [`Plan::validate`]: the proof the native backend's memory safety rests on.
//!
//! The generated code indexes raw memory with the plan's sizes, offsets and strides and
//! runs the tasks of a kernel on several threads at once. Before any of it runs, this
//! proves, for the prologue and the main kernels alike:
//! 1. **Bounds.** Every operand stays inside its buffer over the kernel's whole iteration
//!    space (so over every task's part of it); temporaries lie inside the arena and derived
//!    buffers inside the prepared memory.
//! 2. **Disjoint writes.** The operand a kernel writes reaches a different element for
//!    every index of its iteration space. Tasks split that space, so no two tasks (no two
//!    threads) write one element.
//! 3. **No read of a write.** No operand a kernel reads overlaps what it writes, so the
//!    loads the code generator marks `readonly` and `can_move` really see memory that does
//!    not change while the kernel runs, whichever task writes first.
//! 4. **No aliasing.** Params and inputs are never written; derived buffers are written by
//!    the prologue only, the main kernels read only those kept for them, and derived
//!    buffers live at the same time never overlap; temporaries live at the same time never overlap
//!    in the arena; each output has one buffer.
//!
//! All arithmetic saturates: a reach past `usize::MAX` is out of every buffer, never a
//! small wrapped index.

use super::{Buffer, BufferKind, Gemm, KernelOp, KeySplit, Operand, Plan, PlanError, PANEL, STRIP};

impl Operand {
    /// The first and last element the operand reaches over `shape`; `None` when `shape` is
    /// empty.
    fn extent(&self, shape: &[usize]) -> Option<(usize, usize)> {
        Some((self.offset, self.max_index(shape)?))
    }

    /// Whether distinct indices of `shape` reach distinct elements. Sufficient condition,
    /// exact for every layout a view can have: with the axes that move (size above 1)
    /// sorted by stride, each stride is larger than the farthest reach of the smaller ones.
    pub fn is_injective(&self, shape: &[usize]) -> bool {
        if shape.contains(&0) {
            return true;
        }
        let mut axes: Vec<(usize, usize)> = shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n > 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        axes.sort_unstable();
        let mut reach = 0usize;
        for (stride, n) in axes {
            if stride <= reach {
                return false;
            }
            reach = reach.saturating_add((n - 1).saturating_mul(stride));
        }
        true
    }
}

/// Where a kernel runs: its place in the prologue or among the main kernels.
#[derive(Clone, Copy)]
enum At {
    Prologue(usize),
    Main(usize),
}

fn err(what: String) -> Result<(), PlanError> {
    Err(PlanError(what))
}

/// A packed `b` ([`Gemm::packed`]) is read by the shim as the run of `n·k` floats from
/// its first element per batch index, a tile's columns as the `k·cols` from `k·j0`: its
/// strides must be `[batch.., 1, k]` (whose reach over `[batch.., k, n]`, proved in bounds
/// with the other operands', is that run) and every column block must start at a panel. The
/// products of strips read whole vectors of a narrower last strip: its buffer holds
/// [`PANEL`] floats past the reach.
fn packed_in_panels(k: &str, g: &Gemm, buffers: &[Buffer]) -> Result<(), PlanError> {
    let r = g.batch.len();
    let Some(width) = g.packed else {
        return Ok(());
    };
    if g.b.strides.get(r..) != Some(&[1, g.k][..]) {
        return err(format!("{k}: a packed b with strides {:?}", g.b.strides));
    }
    if width != PANEL && width != STRIP {
        return err(format!("{k}: b packed in panels of {width}"));
    }
    if !g.block.1.is_multiple_of(width) && g.block.1 < g.n {
        return err(format!(
            "{k}: column blocks of {} in panels of {width}",
            g.block.1
        ));
    }
    if width == STRIP {
        let shape: Vec<usize> = g.batch.iter().copied().chain([g.k, g.n]).collect();
        let reach = g.b.extent(&shape).map_or(0, |(_, last)| last + 1);
        if buffers[g.b.buf].len < reach.saturating_add(PANEL) {
            return err(format!("{k}: strips of b without the {PANEL} floats past them"));
        }
    }
    Ok(())
}

/// Every chunk of a split of `m` keys holds a key: the merge weighs each chunk's partial
/// result.
fn chunks_hold_keys(k: &str, m: usize, split: Option<KeySplit>) -> Result<(), PlanError> {
    match split {
        Some(s) => {
            let covers = s.len.checked_mul(s.chunks).is_some_and(|all| all >= m);
            if s.len == 0 || !covers || (s.chunks - 1) * s.len >= m {
                return err(format!("{k}: {m} keys in {} chunks of {}", s.chunks, s.len));
            }
            Ok(())
        }
        None => Ok(()),
    }
}

/// A table of key ranges ([`super::KeyRanges`]) is read and written an entry at a time,
/// four 64-bit integers from its first float: its floats must be contiguous.
fn entries_contiguous(k: &str, table: &Operand) -> Result<(), PlanError> {
    match table.strides.last() {
        Some(1) => Ok(()),
        _ => err(format!("{k}: key ranges with strides {:?}", table.strides)),
    }
}

impl Plan {
    /// Proves the invariants the generated code relies on (the module's list). The runtime
    /// calls no kernel of a plan that fails this, and an executable's plan cannot change
    /// after it passed.
    pub fn validate(&self) -> Result<(), PlanError> {
        let prologue = self
            .prologue
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("p{i}"), At::Prologue(i), k));
        let main = self
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("k{i}"), At::Main(i), k));
        for (name, index, kernel) in prologue.chain(main) {
            self.kernel(&name, index, &kernel.op)?;
        }
        self.outputs_distinct()?;
        self.regions_disjoint()
    }

    /// Bounds, disjoint writes and no read of a write for one kernel, at place `index`.
    fn kernel(&self, k: &str, index: At, op: &KernelOp) -> Result<(), PlanError> {
        let operands = op.operands();
        if operands.iter().filter(|o| o.2).count() != 1 {
            return err(format!("{k} does not write exactly one operand"));
        }
        for (o, shape, written) in &operands {
            let Some(buf) = self.buffers.get(o.buf) else {
                return err(format!("{k} names no buffer b{}", o.buf));
            };
            if o.strides.len() != shape.len() {
                return err(format!("{k}: operand of b{} has the wrong rank", o.buf));
            }
            if let Some(max) = o.max_index(shape) {
                if max >= buf.len {
                    return err(format!("{k} reaches element {max} of b{} of {}", o.buf, buf.len));
                }
            }
            if *written && !o.is_injective(shape) {
                return err(format!("{k} writes an element of b{} twice", o.buf));
            }
            let allowed = match (index, &buf.kind, *written) {
                (_, BufferKind::Param(_), false) => true,
                (At::Main(_), BufferKind::Input(_), false) => true,
                (At::Main(i), BufferKind::Temp { live, .. }, _) => live.0 <= i && i <= live.1,
                (At::Main(_), BufferKind::Output(_), _) => true,
                // A state's storage changes only by in-place writes, whose order against
                // the reads of each version the lowering proved.
                (At::Main(_), BufferKind::State { .. }, false) => true,
                (At::Main(_), BufferKind::State { .. }, true) => matches!(op, KernelOp::Scatter(_)),
                (At::Main(_), BufferKind::Derived { live, .. }, false) => live.1 == usize::MAX,
                (At::Prologue(i), BufferKind::Derived { live, .. }, _) => live.0 <= i && i <= live.1,
                _ => false,
            };
            if !allowed {
                let what = if *written { "writes" } else { "reads" };
                return err(format!(
                    "{k} {what} b{} ({:?}), which it may not",
                    o.buf, buf.kind
                ));
            }
        }
        let (out, out_shape, _) = operands.iter().find(|o| o.2).expect("counted above");
        if let Some((first, last)) = out.extent(out_shape) {
            for (o, shape, _) in operands.iter().filter(|o| !o.2 && o.0.buf == out.buf) {
                if o.extent(shape).is_some_and(|(a, b)| a <= last && first <= b) {
                    return err(format!("{k} reads b{} where it writes it", o.buf));
                }
            }
        }
        if let KernelOp::Gemm(g) = op {
            packed_in_panels(k, g, &self.buffers)?;
        }
        if let KernelOp::Attention(a) = op {
            let heads = a.batch.last().copied().unwrap_or(1);
            if a.tail.as_ref().is_some_and(|t| t.len > a.m) {
                return err(format!("{k}: a tail of keys longer than the keys"));
            }
            if a.kv_group == 0 || heads % a.kv_group != 0 {
                return err(format!("{k}: {heads} query heads in groups of {}", a.kv_group));
            }
            chunks_hold_keys(k, a.m, a.split)?;
            if let Some(table) = &a.ranges {
                entries_contiguous(k, table)?;
            }
        }
        if let KernelOp::KeyRanges(r) = op {
            if r.rows == 0 {
                return err(format!("{k}: blocks of no query row"));
            }
            chunks_hold_keys(k, r.m, r.split)?;
            entries_contiguous(k, &r.out)?;
        }
        super::formulas(op).map_err(|what| PlanError(format!("{k}: {what}")))
    }

    /// Each output index has one buffer (the runtime hands each its own tensor).
    fn outputs_distinct(&self) -> Result<(), PlanError> {
        let mut seen = Vec::new();
        for b in &self.buffers {
            if let BufferKind::Output(i) | BufferKind::State { output: i, .. } = b.kind {
                if seen.contains(&i) {
                    return err(format!("two buffers are output {i}"));
                }
                seen.push(i);
            }
        }
        Ok(())
    }

    /// Temporaries inside the arena, no two live at once overlapping; derived buffers
    /// inside the prepared memory, none overlapping.
    fn regions_disjoint(&self) -> Result<(), PlanError> {
        let mut temps = Vec::new();
        let mut derived = Vec::new();
        for b in &self.buffers {
            match b.kind {
                BufferKind::Temp { offset, live } => temps.push((offset, b.len, live)),
                BufferKind::Derived { offset, live } => derived.push((offset, b.len, live)),
                _ => {}
            }
        }
        for (i, &(o1, l1, (s1, e1))) in temps.iter().enumerate() {
            if o1.saturating_add(l1) > self.arena_len {
                return err("a temporary ends past the arena".into());
            }
            for &(o2, l2, (s2, e2)) in &temps[i + 1..] {
                let space = o1 < o2.saturating_add(l2) && o2 < o1.saturating_add(l1);
                let time = s1 <= e2 && s2 <= e1;
                if space && time && l1 > 0 && l2 > 0 {
                    return err("two live temporaries overlap".into());
                }
            }
        }
        for (i, &(o1, l1, (s1, e1))) in derived.iter().enumerate() {
            if o1.saturating_add(l1) > self.derived_len {
                return err("a derived buffer ends past the prepared memory".into());
            }
            for &(o2, l2, (s2, e2)) in &derived[i + 1..] {
                let space = o1 < o2.saturating_add(l2) && o2 < o1.saturating_add(l1);
                let time = s1 <= e2 && s2 <= e1;
                if space && time && l1 > 0 && l2 > 0 {
                    return err("two live derived buffers overlap".into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Buffer, Expr, Kernel, KeyRanges, Map, MaskFill};

    /// `out = x` over `[4]`, with `x` an input and `out` an output of 4 elements each.
    fn copy_plan() -> Plan {
        let buffer = |kind, name: &str| Buffer {
            kind,
            len: 4,
            name: name.into(),
        };
        let map = Map {
            shape: vec![4],
            inputs: vec![op(0, &[1])],
            expr: vec![Expr::Input(0)],
            out: Operand {
                buf: 1,
                ..op(0, &[1])
            },
            rows_per_task: 1,
        };
        Plan {
            buffers: vec![
                buffer(BufferKind::Input(0), "x"),
                buffer(BufferKind::Output(0), "y"),
            ],
            kernels: vec![Kernel {
                label: "copy".into(),
                op: KernelOp::Map(map),
            }],
            ..Plan::default()
        }
    }

    fn map(plan: &mut Plan) -> &mut Map {
        match &mut plan.kernels[0].op {
            KernelOp::Map(m) => m,
            _ => unreachable!(),
        }
    }

    /// An operand of buffer `buf` from its first element.
    fn at(buf: usize, strides: &[usize]) -> Operand {
        Operand {
            buf,
            ..op(0, strides)
        }
    }

    /// `y [1, 40] = x [1, 5] @ w`, `w` a param packed in panels, in column blocks of 32.
    fn packed_plan() -> Plan {
        let buffer = |kind, len| Buffer {
            kind,
            len,
            name: String::new(),
        };
        let gemm = Gemm {
            batch: vec![],
            m: 1,
            n: 40,
            k: 5,
            a: at(0, &[5, 1]),
            b: at(1, &[1, 5]),
            c: at(2, &[40, 1]),
            alpha: 1.0,
            bias: None,
            epilogue: None,
            rope: Vec::new(),
            block: (1, 32),
            packed: Some(PANEL),
        };
        Plan {
            buffers: vec![
                buffer(BufferKind::Input(0), 5),
                buffer(BufferKind::Param(0), 200),
                buffer(BufferKind::Output(0), 40),
            ],
            kernels: vec![Kernel {
                label: "packed".into(),
                op: KernelOp::Gemm(gemm),
            }],
            ..Plan::default()
        }
    }

    #[test]
    fn a_packed_b_is_the_run_of_its_panels_and_tiles_start_at_a_panel() {
        let good = packed_plan();
        good.validate().unwrap();
        let gemm = |p: &mut Plan| match &mut p.kernels[0].op {
            KernelOp::Gemm(g) => g.clone(),
            _ => unreachable!(),
        };
        let set = |p: &mut Plan, g: Gemm| p.kernels[0].op = KernelOp::Gemm(g);
        // One panel short: the last tile's panels reach past the buffer.
        let mut p = good.clone();
        p.buffers[1].len = 199;
        rejected(&p, "reaches element 199 of b1 of 199");
        let mut p = good.clone();
        let g = gemm(&mut p);
        set(
            &mut p,
            Gemm {
                b: at(1, &[40, 1]),
                ..g
            },
        );
        rejected(&p, "a packed b with strides [40, 1]");
        let mut p = good.clone();
        let g = gemm(&mut p);
        set(&mut p, Gemm { block: (1, 24), ..g });
        rejected(&p, "column blocks of 24 in panels of 16");
        // One block of every column needs no panel boundary.
        let mut p = good.clone();
        let g = gemm(&mut p);
        set(&mut p, Gemm { block: (1, 40), ..g });
        p.validate().unwrap();
        // Strips of 64: tiles start at a strip, and the buffer holds a panel past them.
        let mut p = good.clone();
        let g = gemm(&mut p);
        set(
            &mut p,
            Gemm {
                packed: Some(STRIP),
                ..g
            },
        );
        rejected(&p, "column blocks of 32 in panels of 64");
        let g = gemm(&mut p);
        set(&mut p, Gemm { block: (1, 40), ..g });
        rejected(&p, "strips of b without the 16 floats past them");
        p.buffers[1].len = 216;
        p.validate().unwrap();
        let g = gemm(&mut p);
        set(
            &mut p,
            Gemm {
                packed: Some(32),
                ..g
            },
        );
        rejected(&p, "b packed in panels of 32");
    }

    /// The key ranges of a `[4, 4]` mask in one block of 4 rows: one entry, into an output of
    /// 32 floats.
    fn ranges_plan() -> Plan {
        let buffer = |kind, len| Buffer {
            kind,
            len,
            name: String::new(),
        };
        let ranges = KeyRanges {
            batch: vec![],
            n: 4,
            m: 4,
            rows: 4,
            split: None,
            mask: MaskFill {
                mask: at(0, &[4, 1]),
                op: crate::ir::CmpOp::Eq,
                rhs: 0.0,
                fill: f32::NEG_INFINITY,
            },
            out: at(1, &[8, 1]),
        };
        Plan {
            buffers: vec![
                buffer(BufferKind::Input(0), 16),
                buffer(BufferKind::Output(0), 32),
            ],
            kernels: vec![Kernel {
                label: "ranges".into(),
                op: KernelOp::KeyRanges(ranges),
            }],
            ..Plan::default()
        }
    }

    #[test]
    fn a_table_of_key_ranges_holds_whole_entries_of_blocks_of_rows() {
        let good = ranges_plan();
        good.validate().unwrap();
        // In bounds, but an entry's four integers are not contiguous.
        let mut p = good.clone();
        ranges(&mut p).out.strides = vec![8, 2];
        rejected(&p, "key ranges with strides [8, 2]");
        let mut p = good.clone();
        ranges(&mut p).rows = 0;
        rejected(&p, "blocks of no query row");
        // Blocks of 2 rows: two entries, the second past the buffer's 32 floats.
        let mut p = good.clone();
        ranges(&mut p).rows = 2;
        ranges(&mut p).out.offset = 17;
        rejected(&p, "reaches element 32 of b1 of 32");
    }

    fn ranges(plan: &mut Plan) -> &mut KeyRanges {
        match &mut plan.kernels[0].op {
            KernelOp::KeyRanges(r) => r,
            _ => unreachable!(),
        }
    }

    fn rejected(plan: &Plan, why: &str) {
        let e = plan.validate().expect_err(why);
        assert!(e.0.contains(why), "{e}");
    }

    #[test]
    fn validate_proves_bounds_disjoint_writes_and_no_read_of_a_write() {
        let good = copy_plan();
        good.validate().unwrap();
        let mut p = good.clone();
        map(&mut p).out.offset = 1;
        rejected(&p, "reaches element 4 of b1 of 4");
        let mut p = good.clone();
        map(&mut p).out.strides = vec![0];
        rejected(&p, "writes an element of b1 twice");
        let mut p = good.clone();
        map(&mut p).inputs[0].buf = 1;
        rejected(&p, "reads b1 where it writes it");
        let mut p = good.clone();
        map(&mut p).out.buf = 0;
        rejected(&p, "writes b0");
        let mut p = good.clone();
        p.buffers[0].kind = BufferKind::Output(0);
        rejected(&p, "two buffers are output 0");
    }

    #[test]
    fn the_prologue_is_held_to_the_same_proof() {
        let mut p = copy_plan();
        p.buffers[0].kind = BufferKind::Param(0);
        p.buffers[1].kind = BufferKind::Derived {
            offset: 0,
            live: (0, usize::MAX),
        };
        p.derived_len = 4;
        p.prologue = std::mem::take(&mut p.kernels);
        p.validate().unwrap();
        let mut late = p.clone();
        late.buffers[1].kind = BufferKind::Derived {
            offset: 1,
            live: (0, usize::MAX),
        };
        rejected(&late, "a derived buffer ends past the prepared memory");
        let mut early = p.clone();
        early.buffers[1].kind = BufferKind::Derived {
            offset: 0,
            live: (1, usize::MAX),
        };
        rejected(&early, "p0 writes b1");
        let mut out = p.clone();
        out.buffers[1].kind = BufferKind::Output(0);
        rejected(&out, "p0 writes b1");
    }

    fn op(offset: usize, strides: &[usize]) -> Operand {
        Operand {
            buf: 0,
            offset,
            strides: strides.to_vec(),
        }
    }

    #[test]
    fn injective_layouts_are_the_ones_without_repeats() {
        assert!(op(0, &[4, 1]).is_injective(&[3, 4]));
        assert!(op(0, &[1, 3]).is_injective(&[3, 4]), "transposed");
        assert!(
            op(5, &[0, 1]).is_injective(&[1, 4]),
            "a size-1 axis may have any stride"
        );
        assert!(!op(0, &[0, 1]).is_injective(&[2, 4]), "broadcast");
        assert!(!op(0, &[2, 1]).is_injective(&[3, 4]), "rows overlap");
        assert!(op(0, &[0, 1]).is_injective(&[2, 0]), "empty");
        assert!(
            !op(0, &[3, 1]).is_injective(&[2, 4]),
            "the second row starts inside the first"
        );
    }
}
