//! Map kernels: fused elementwise formulas (absorbed into a GEMM's epilogue where they
//! can be), layout copies, and the joins of `cat`, `concat` and `stack`.

use super::gemm::pair;
use super::tanh_gelu;
use super::tiling::transposed_rows_per_task;
use super::{internal, view, Lowerer, Val, View};
use crate::ir::{BinaryOp, CmpOp, Op, ValueId};
use crate::kernel::{BufId, BufferKind, Epilogue, Expr, Kernel, KernelOp, Map, Operand, PlanError};

/// The formula node of elementwise op `op` (of node `id`) over the formula nodes `a`.
pub(super) fn map_node(id: ValueId, op: &Op, a: &[usize]) -> Result<Expr, PlanError> {
    Ok(match (op, a) {
        (Op::Unary(u), &[x]) => Expr::Unary(*u, x),
        (Op::Binary(b), &[x, y]) => Expr::Binary(*b, x, y),
        (Op::Compare(c), &[x, y]) => Expr::Compare(*c, x, y),
        (Op::MaskedFill, &[x, m, v]) => Expr::Select(m, v, x),
        (Op::Where, &[c, a, b]) => Expr::Select(c, a, b),
        _ => return Err(internal(format!("node {id} is not elementwise"))),
    })
}

impl Lowerer<'_> {
    /// A row-major copy of `x`.
    pub(super) fn copy(&mut self, x: &View, label: String) -> View {
        let out = self.temp(x.shape.clone());
        self.map(vec![x.operand()], vec![Expr::Input(0)], &out, label);
        out
    }

    pub(super) fn map(&mut self, inputs: Vec<Operand>, expr: Vec<Expr>, out: &View, label: String) {
        let len = out.shape.last().copied().unwrap_or(1).max(1);
        let mut m = Map {
            shape: out.shape.clone(),
            inputs,
            expr,
            out: out.operand(),
            rows_per_task: (8192 / len).max(16),
        };
        if let Some(run) = m.transposed_run() {
            m.rows_per_task = transposed_rows_per_task(&m.shape, run);
        }
        self.kernel(label, KernelOp::Map(m));
    }

    /// An elementwise root and every elementwise producer fusion gave it, as one map.
    pub(super) fn elementwise(&mut self, id: ValueId) -> Result<View, PlanError> {
        let shape = self.shape(id)?;
        let mut inputs: Vec<Operand> = Vec::new();
        let mut expr = Vec::new();
        self.expr(id, id, &shape, &mut inputs, &mut expr)?;
        let expr = tanh_gelu::as_sigmoid(expr);
        if let Some(v) = self.epilogue(id, &shape, &inputs, &expr) {
            return Ok(v);
        }
        let out = self.temp(shape);
        self.map(inputs, expr, &out, self.label(id));
        Ok(out)
    }

    /// The map `expr` over `inputs` made the epilogue of the GEMM that writes the leaf
    /// fusion chose for root `id`, its result in the GEMM's buffer; `None` (a map of its
    /// own) where the plan does not allow it: the leaf is not the GEMM's whole result in
    /// its order (or its two halves, for a paired epilogue), a kernel after the GEMM writes
    /// what the epilogue reads, or an input does not reshape to the GEMM's iteration space.
    fn epilogue(&mut self, id: ValueId, shape: &[usize], inputs: &[Operand], expr: &[Expr]) -> Option<View> {
        let leaf = *self.fusion.epilogue.get(&id)?;
        let Some(Val::Tensor(c)) = self.vals.get(&leaf).cloned() else {
            return None;
        };
        let buf = &self.plan.buffers[c.buf];
        let whole = c.offset == 0 && c.is_contiguous() && c.numel() == buf.len;
        let temp = matches!(buf.kind, BufferKind::Temp { .. }) && !self.derived.contains(&c.buf);
        if !whole || !temp || expr.iter().any(|e| matches!(e, Expr::Index(_))) {
            return None;
        }
        let writes = |k: &Kernel, b: BufId| k.op.operands().iter().any(|o| o.2 && o.0.buf == b);
        let k = self.plan.kernels.iter().rposition(|k| writes(k, c.buf))?;
        let KernelOp::Gemm(g) = &self.plan.kernels[k].op else {
            return None;
        };
        let space = [g.batch.as_slice(), &[g.m, g.n]].concat();
        // A rotation applies after the epilogue: nothing may follow it.
        if g.c.offset != 0 || g.c.strides != view::row_major(&space) || !g.rope.is_empty() {
            return None;
        }
        let paired = c.shape != shape;
        // The leaves the GEMM's elements stand for, and the value the epilogue leaves.
        let (leaves, out, mut g) = match paired {
            false => (vec![c.expand(shape)?.operand()], c.clone(), g.clone()),
            true => {
                let last = shape.len().checked_sub(1)?;
                let half = shape[last];
                let (first, second) = (c.slice(last, 0, half)?, c.slice(last, half, 2 * half)?);
                let halves = [first.expand(shape)?.operand(), second.expand(shape)?.operand()];
                (halves.to_vec(), first, pair(g, half)?)
            }
        };
        let space = [&g.batch[..g.batch.len() - usize::from(paired)], &[g.m, g.n]].concat();
        let at = |o: &Operand| inputs.iter().position(|i| i == o);
        let leads = leaves.iter().map(at).collect::<Option<Vec<usize>>>()?;
        let later = &self.plan.kernels[k + 1..];
        let mut moved = Vec::new();
        for (_, o) in inputs.iter().enumerate().filter(|(i, _)| !leads.contains(i)) {
            if o.buf == c.buf || later.iter().any(|k| writes(k, o.buf)) {
                return None;
            }
            let v = View {
                buf: o.buf,
                offset: o.offset,
                shape: shape.to_vec(),
                strides: o.strides.clone(),
            };
            let mut op = v.reshape(&space)?.operand();
            if paired {
                op.strides.insert(space.len() - 2, 0);
            }
            moved.push(op);
        }
        // The leaves first (the tile's elements), then the other inputs in their order.
        let others = (0..inputs.len()).filter(|i| !leads.contains(i));
        let order: Vec<usize> = leads.iter().copied().chain(others).collect();
        let renumber = |i: usize| order.iter().position(|&j| j == i).unwrap_or(i);
        let expr = expr
            .iter()
            .map(|e| match *e {
                Expr::Input(i) => Expr::Input(renumber(i)),
                ref e => e.clone(),
            })
            .collect();
        let epilogue = Epilogue {
            inputs: moved,
            expr,
            pair: paired,
        };
        g.epilogue = Some(match &g.epilogue {
            Some(first) if !paired => first.then(&epilogue),
            _ => epilogue,
        });
        let label = format!("{} + {}", self.plan.kernels[k].label, self.label(id));
        self.remake_kernel(
            k,
            Kernel {
                label,
                op: KernelOp::Gemm(g),
            },
        );
        match paired {
            true => Some(out),
            false => Some(View::whole(c.buf, shape.to_vec())),
        }
    }

    /// Appends `id`'s expression to `expr`: each absorbed producer's formula before the
    /// formula that reads it, the operands in order. The producers are walked with a stack
    /// of their own, not by recursion: a chain of absorbed ops is as long as the program
    /// makes it (`let a2 = a1 + x` twenty thousand times), deeper than the thread's stack.
    fn expr(
        &mut self,
        root: ValueId,
        id: ValueId,
        shape: &[usize],
        inputs: &mut Vec<Operand>,
        expr: &mut Vec<Expr>,
    ) -> Result<(), PlanError> {
        /// A node to start (push its operands) or to finish (its operands are done).
        enum Step {
            Start(ValueId),
            Finish(ValueId),
        }
        // The formula indices of the operands finished and not yet read, in order.
        let mut done: Vec<usize> = Vec::new();
        let mut steps = vec![Step::Start(id)];
        while let Some(step) = steps.pop() {
            match step {
                Step::Start(id) if self.inlined(root, id) => {
                    steps.push(Step::Finish(id));
                    let args = &self.program.node(id).args;
                    steps.extend(args.iter().rev().map(|&x| Step::Start(x)));
                }
                Step::Start(id) => {
                    let e = self.leaf(id, shape, inputs)?;
                    expr.push(e);
                    done.push(expr.len() - 1);
                }
                Step::Finish(id) => {
                    let a = done.split_off(done.len() - self.program.node(id).args.len());
                    let e = self.formula(id, shape, &a, expr)?;
                    expr.push(e);
                    done.push(expr.len() - 1);
                }
            }
        }
        Ok(())
    }

    /// Whether `id` is computed inside the map of `root`: the root itself, or an
    /// elementwise producer fusion absorbed (a constant is a leaf even then).
    fn inlined(&self, root: ValueId, id: ValueId) -> bool {
        let elementwise = self.fusion.absorbed[id] && self.program.node(id).op.is_elementwise();
        !self.fusion.constant[id] && (id == root || elementwise)
    }

    /// The formula of a node the map does not compute: a constant, or an input of the map
    /// (added to `inputs` unless an equal operand is there).
    fn leaf(&mut self, id: ValueId, shape: &[usize], inputs: &mut Vec<Operand>) -> Result<Expr, PlanError> {
        if self.fusion.constant[id] {
            return Ok(Expr::Const(self.constant(id)?));
        }
        let v = self.view(id)?;
        let op = v
            .expand(shape)
            .ok_or_else(|| internal(format!("node {id} does not broadcast to {shape:?}")))?
            .operand();
        let i = match inputs.iter().position(|o| *o == op) {
            Some(i) => i,
            None => {
                inputs.push(op);
                inputs.len() - 1
            }
        };
        Ok(Expr::Input(i))
    }

    /// The formula of inlined node `id` over its operands' formulas `a`; a `tril`'s pushes
    /// the index arithmetic it selects by to `expr` first.
    fn formula(
        &self,
        id: ValueId,
        shape: &[usize],
        a: &[usize],
        expr: &mut Vec<Expr>,
    ) -> Result<Expr, PlanError> {
        let node = self.program.node(id);
        Ok(match (&node.op, a) {
            // Only ever a root, so its last two axes are the map's.
            (&Op::Tri { upper, diagonal }, &[x]) => {
                let r = shape.len();
                let mut push = |e: Expr| {
                    expr.push(e);
                    expr.len() - 1
                };
                let (j, i) = (push(Expr::Index(r - 1)), push(Expr::Index(r - 2)));
                let offset = push(Expr::Binary(BinaryOp::Sub, j, i));
                let diagonal = push(Expr::Const(diagonal as f32));
                let side = if upper { CmpOp::Ge } else { CmpOp::Le };
                let keep = push(Expr::Compare(side, offset, diagonal));
                let zero = push(Expr::Const(0.0));
                Expr::Select(keep, x, zero)
            }
            _ => map_node(id, &node.op, a)?,
        })
    }

    /// The two parts of a `cat` along the keys: the parts themselves where fusion absorbed
    /// it, else the two slices of the joined tensor.
    pub(super) fn cat_parts(&mut self, x: ValueId) -> Result<(View, View), PlanError> {
        let node = self.program.node(x);
        if let (&Op::Unsqueeze(a), &[c]) = (&node.op, node.args.as_slice()) {
            let bad = || internal(format!("node {x}: parts do not fit"));
            let (first, second) = self.cat_parts(c)?;
            return Ok((
                first.unsqueeze(a).ok_or_else(bad)?,
                second.unsqueeze(a).ok_or_else(bad)?,
            ));
        }
        let (&Op::Cat(axis), &[a, b]) = (&node.op, node.args.as_slice()) else {
            return Err(internal(format!("node {x} is not a join of two parts")));
        };
        if self.fusion.absorbed[x] {
            return Ok((self.view(a)?, self.view(b)?));
        }
        let joined = self.view(x)?;
        let (len, total) = (self.shape(a)?[axis], joined.shape[axis]);
        let bad = || internal(format!("node {x}: parts do not fit"));
        let first = joined.slice(axis, 0, len).ok_or_else(bad)?;
        let second = joined.slice(axis, len, total).ok_or_else(bad)?;
        Ok((first, second))
    }

    /// `concat(seq, axis)` (or `stack`): one copy per item into its slice of the result.
    pub(super) fn concat(
        &mut self,
        id: ValueId,
        seq: ValueId,
        axis: usize,
        stack: bool,
    ) -> Result<View, PlanError> {
        let Val::Seq(items) = self.val(seq)?.clone() else {
            return Err(internal(format!("node {id}: not a sequence")));
        };
        self.join(id, items, axis, stack)
    }

    /// `items` joined along `axis` (a new one when stacking) into node `id`'s buffer.
    pub(super) fn join(
        &mut self,
        id: ValueId,
        items: Vec<View>,
        axis: usize,
        stack: bool,
    ) -> Result<View, PlanError> {
        let shape = self.shape(id)?;
        let out = self.temp(shape.clone());
        let bad = || internal(format!("node {id}: items do not fit"));
        if items.is_empty() || shape.contains(&0) {
            if !shape.contains(&0) {
                self.map(vec![], vec![Expr::Const(0.0)], &out, self.label(id));
            }
            return Ok(out);
        }
        let mut start = 0;
        for item in items {
            let item = if stack {
                item.unsqueeze(axis).ok_or_else(bad)?
            } else {
                item
            };
            let len = *item.shape.get(axis).ok_or_else(bad)?;
            let dest = out.slice(axis, start, start + len).ok_or_else(bad)?;
            if dest.shape != item.shape {
                return Err(bad());
            }
            self.map(vec![item.operand()], vec![Expr::Input(0)], &dest, self.label(id));
            start += len;
        }
        Ok(out)
    }
}
