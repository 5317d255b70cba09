//! Row kernels: reductions along one axis, and the fused row programs (norms, softmax,
//! `var`) the fusion pass found, as stages over each row and a write computed from them.

use super::map::map_node;
use super::{internal, view, Lowerer, View};
use crate::hash::HashMap;
use crate::ir::{Op, ReduceOp, ValueId};
use crate::kernel::{Expr, KernelOp, Operand, PlanError, Row, Stage};

/// What the formulas of one row kernel are built from: its root and the nodes it computes,
/// the stage each reduction is, and the inputs read so far, strided over `shape`
/// (`[rows.., n]`).
struct RowFormula {
    root: ValueId,
    shape: Vec<usize>,
    nodes: crate::hash::HashSet<ValueId>,
    stages: HashMap<ValueId, usize>,
    inputs: Vec<Operand>,
}

impl Lowerer<'_> {
    /// `op` of `x` over one axis as a row kernel: the axis is the row, every other axis a
    /// row axis; one value per row, written row-major (with or without `keepdim`, the
    /// same elements in the same order).
    pub(super) fn reduction(
        &mut self,
        id: ValueId,
        x: ValueId,
        op: ReduceOp,
        axis: usize,
    ) -> Result<View, PlanError> {
        let x = self.view(x)?;
        let mut perm: Vec<usize> = (0..x.shape.len()).filter(|&a| a != axis).collect();
        perm.push(axis);
        let moved = x
            .permute(&perm)
            .ok_or_else(|| internal(format!("node {id} reduces a missing axis")))?;
        let (rows, n) = (
            moved.shape[..moved.shape.len() - 1].to_vec(),
            moved.shape[moved.shape.len() - 1],
        );
        let out = self.temp(self.shape(id)?);
        let row = Row {
            out: Operand {
                buf: out.buf,
                offset: out.offset,
                strides: view::row_major(&rows),
            },
            rows_per_task: (8192 / n.max(1)).max(16),
            rows,
            n,
            inputs: vec![moved.operand()],
            stages: vec![Stage {
                reduce: op,
                expr: vec![Expr::Input(0)],
            }],
            write: vec![Expr::Reduced(0)],
        };
        self.kernel(self.label(id), KernelOp::Row(row));
        Ok(out)
    }

    /// An elementwise root and the reductions along the last axis and elementwise ops that
    /// fusion gave it, as one row kernel: each reduction a stage (in evaluation order, so a
    /// stage reads only earlier ones), the root the write. Each row is read from memory
    /// once; its later passes find it in cache.
    pub(super) fn row(&mut self, id: ValueId) -> Result<View, PlanError> {
        let shape = self.shape(id)?;
        let nodes = self.fusion.rows.get(&id).cloned().unwrap_or_default();
        let mut formula = RowFormula {
            root: id,
            shape: shape.clone(),
            nodes: nodes.iter().copied().collect(),
            stages: HashMap::default(),
            inputs: Vec::new(),
        };
        let mut stages = Vec::new();
        for &r in &nodes {
            if let Op::Reduce { op, .. } = self.program.node(r).op {
                let x = self.program.node(r).args[0];
                let expr = self.row_formula(&mut formula, x)?;
                formula.stages.insert(r, stages.len());
                stages.push(Stage { reduce: op, expr });
            }
        }
        let write = self.row_formula(&mut formula, id)?;
        let (&n, rows) = shape
            .split_last()
            .ok_or_else(|| internal(format!("node {id}: a row kernel of rank 0")))?;
        let out = self.temp(shape.clone());
        let row = Row {
            rows: rows.to_vec(),
            n,
            inputs: formula.inputs,
            stages,
            write,
            out: out.operand(),
            rows_per_task: (8192 / n.max(1)).max(16),
        };
        self.kernel(self.label(id), KernelOp::Row(row));
        Ok(out)
    }

    /// The formula of node `id` inside a row kernel, each node once.
    fn row_formula(&mut self, f: &mut RowFormula, id: ValueId) -> Result<Vec<Expr>, PlanError> {
        let mut expr = Vec::new();
        let mut at = HashMap::default();
        self.row_node(f, id, &mut expr, &mut at)?;
        Ok(expr)
    }

    fn row_node(
        &mut self,
        f: &mut RowFormula,
        id: ValueId,
        expr: &mut Vec<Expr>,
        at: &mut HashMap<ValueId, usize>,
    ) -> Result<usize, PlanError> {
        if let Some(&i) = at.get(&id) {
            return Ok(i);
        }
        let node = self.program.node(id);
        let inline = f.nodes.contains(&id) || id == f.root;
        let e = if self.fusion.constant[id] {
            Expr::Const(self.constant(id)?)
        } else if let Some(&k) = f.stages.get(&id) {
            Expr::Reduced(k)
        } else if inline && node.op.is_elementwise() {
            let args = node.args.clone();
            let mut a = Vec::new();
            for &x in &args {
                a.push(self.row_node(f, x, expr, at)?);
            }
            map_node(id, &node.op, &a)?
        } else {
            let v = self.view(id)?;
            let op = v
                .expand(&f.shape)
                .ok_or_else(|| internal(format!("node {id} does not broadcast to {:?}", f.shape)))?
                .operand();
            let i = match f.inputs.iter().position(|o| *o == op) {
                Some(i) => i,
                None => {
                    f.inputs.push(op);
                    f.inputs.len() - 1
                }
            };
            Expr::Input(i)
        };
        expr.push(e);
        at.insert(id, expr.len() - 1);
        Ok(expr.len() - 1)
    }
}
