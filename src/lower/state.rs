//! State written in place: `index_copy` lowered to a [`Scatter`] kernel.
//!
//! A state's storage is one buffer ([`BufferKind::State`]): the caller's tensor for the
//! output of the state's last version, holding the state when the call starts. Every
//! version of the state is that buffer, so a write of the next version is a scatter of the
//! new slices into it, and nothing copies the state. That is sound only if every read of a
//! version runs before the write that replaces it: when the write is lowered, every node
//! that reads the old version (directly, through views, or inside the kernel of a node that
//! absorbed it) must already have been lowered, since kernels run in the order they are
//! made. A program where that fails (a read of a state's old value after the write, in the
//! order the optimizer chose) is refused rather than copied: a copy of the cache per step is
//! what the design exists to avoid. A functional `index_copy` of any other tensor copies it
//! into a temporary first and scatters there.

use super::{internal, Lowerer, View};
use crate::ir::{Op, ValueId};
use crate::kernel::{BufferKind, KernelOp, PlanError, Scatter};
use crate::runtime::gather::source as gather_source;

impl Lowerer<'_> {
    /// `index_copy` of node `id`: args `[x, index, source]`, written through the window
    /// `starts..ends` of `x` along `axis`.
    pub(super) fn index_copy(
        &mut self,
        id: ValueId,
        args: &[ValueId],
        axis: usize,
        (starts, ends): (&[crate::dims::Poly], &[crate::dims::Poly]),
    ) -> Result<View, PlanError> {
        let x = self.view(args[0])?;
        let in_place = matches!(self.plan.buffers[x.buf].kind, BufferKind::State { .. })
            && x.offset == 0
            && x.is_contiguous()
            && x.numel() == self.plan.buffers[x.buf].len;
        let target = match in_place {
            true => {
                if let Some(late) = self.late_reader(args[0], id) {
                    return Err(PlanError(format!(
                        "node {late} reads state `{}` after node {id} writes it in place; \
                         run with `--backend interp`",
                        self.plan.buffers[x.buf].name
                    )));
                }
                x
            }
            false => self.copy(&x, format!("{} (a copy to write into)", self.label(id))),
        };
        let mut window = target.clone();
        for (a, (s, e)) in starts.iter().zip(ends).enumerate() {
            let (s, e) = (self.size(s)?, self.size(e)?);
            window = window
                .slice(a, s, e)
                .ok_or_else(|| internal(format!("node {id}: a window outside its tensor")))?;
        }
        let (index, source) = (self.view(args[1])?, self.view(args[2])?);
        let scatter = Scatter {
            shape: source.shape.clone(),
            axis,
            size: window.shape[axis],
            index: index.operand(),
            source: source.operand(),
            out: window.operand(),
            names: (
                gather_source(self.program, args[1]),
                gather_source(self.program, args[0]),
            ),
        };
        self.kernel(self.label(id), KernelOp::Scatter(scatter));
        Ok(target)
    }

    /// A node reading `old` (or a view of it) that is not lowered yet, other than `writer`:
    /// it would run after the write and read the new version.
    fn late_reader(&mut self, old: ValueId, writer: ValueId) -> Option<ValueId> {
        let users = self.users();
        let mut todo = vec![old];
        let mut seen = crate::hash::HashSet::default();
        while let Some(v) = todo.pop() {
            for &u in &users[v] {
                if u == writer || !seen.insert(u) {
                    continue;
                }
                let absorbed = self.fusion.absorbed[u];
                if !absorbed && !self.vals.contains_key(&u) {
                    return Some(u);
                }
                // A view's readers read the state too, and so does the kernel that
                // absorbed a node.
                if absorbed || is_view(&self.program.node(u).op) {
                    todo.push(u);
                }
            }
        }
        None
    }

    /// The nodes that use each node, made once.
    fn users(&mut self) -> std::rc::Rc<Vec<Vec<ValueId>>> {
        if let Some(users) = &self.users {
            return users.clone();
        }
        let mut users = vec![Vec::new(); self.program.nodes.len()];
        for (id, node) in self.program.nodes.iter().enumerate() {
            for &a in &node.args {
                users[a].push(id);
            }
            if let Op::For { result, .. } = node.op {
                users[result].push(id);
            }
        }
        let users = std::rc::Rc::new(users);
        self.users = Some(users.clone());
        users
    }
}

/// Ops whose value is a view of their operand's memory, at least for some layouts.
fn is_view(op: &Op) -> bool {
    matches!(
        op,
        Op::Select { .. }
            | Op::Slice { .. }
            | Op::StepSlice { .. }
            | Op::Transpose(..)
            | Op::Permute(_)
            | Op::View(_)
            | Op::Reshape(_)
            | Op::Contiguous
            | Op::Unsqueeze(_)
            | Op::Squeeze(_)
            | Op::Expand(_)
    )
}
