//! The two conversions: a checked program into a term of the optimizer's language, and
//! the extracted term back into a program.
//!
//! Into: one e-node per IR node (attributes as leaves), a `for` as `(for var start end
//! item)` whose body is whatever its item reaches, and a root `(outputs ..)`.
//!
//! Out: the chosen term, numbered canonically. Params and inputs come first, in
//! declaration order, then every other value in the order a depth-first walk from the
//! outputs (in order, operands left to right) finishes them, so the text depends on the
//! program alone, not on its source names or on how its nodes were allocated. Each value's
//! strides are those of the chosen term (see `layout`); a `reshape` whose operand cannot
//! be viewed gets a `contiguous` copy first.

use super::analysis::EG;
use super::cost::Extraction;
use super::lang::{self, DimLeaf, Float, ShapeLeaf, Tensor};
use crate::dims::{Poly, Sym};
use crate::hash::HashMap;
use crate::ir::{
    Attr, BinaryOp, CmpOp, DType, Node, Op, OutputDecl, Program, ReduceOp, TensorType, Type, ValueId,
};
use crate::source::Span;
use egg::{FromOp, Id, Language, RecExpr};

/// The program as one term rooted at `(outputs ..)`; `Err` names an op it cannot hold.
pub fn to_expr(prog: &Program) -> Result<RecExpr<Tensor>, String> {
    let mut b = Into {
        prog,
        expr: RecExpr::default(),
        ids: HashMap::default(),
    };
    b.nodes(&prog.body)?;
    let outs: Vec<Id> = prog
        .outputs
        .iter()
        .map(|o| b.ids.get(&o.value).copied().ok_or("an output before its value"))
        .collect::<Result<_, _>>()?;
    b.expr.add(Tensor::Outputs(outs.into()));
    Ok(b.expr)
}

struct Into<'a> {
    prog: &'a Program,
    expr: RecExpr<Tensor>,
    ids: HashMap<ValueId, Id>,
}

impl Into<'_> {
    fn nodes(&mut self, ids: &[ValueId]) -> Result<(), String> {
        for &id in ids {
            if let Op::For { body, .. } = &self.prog.node(id).op {
                self.nodes(body)?;
            }
            let e = self.node(id)?;
            self.ids.insert(id, e);
        }
        Ok(())
    }

    fn leaf(&mut self, t: Tensor) -> Id {
        self.expr.add(t)
    }

    /// The leaves that hold an attribute, in order: a range is its two ends, a flag the
    /// integer 0 or 1, axes a shape of integers.
    fn leaves(attr: &Attr, out: &mut Vec<Tensor>) {
        let ints = |axes: &[usize]| ShapeLeaf(axes.iter().map(|&a| Poly::int(a as i64)).collect());
        let dim = |p: &Poly| Tensor::Dim(DimLeaf(p.clone()));
        let shape = |s: Vec<Poly>| Tensor::Shape(ShapeLeaf(s));
        match attr {
            Attr::Int(i) => out.push(Tensor::Int(*i)),
            Attr::Float(x) => out.push(Tensor::Float(Float::new(*x))),
            Attr::Bool(b) | Attr::Flag(_, b) => out.push(Tensor::Int(i64::from(*b))),
            Attr::Dim(p) => out.push(dim(p)),
            Attr::Shape(s) => out.push(shape(s.clone())),
            Attr::Axes(axes) | Attr::Order(axes) => out.push(Tensor::Shape(ints(axes))),
            Attr::Range(start, end) => out.extend([dim(start), dim(end)]),
            Attr::Ranges(ranges) => {
                let (starts, ends) = ranges.iter().cloned().unzip();
                out.extend([shape(starts), shape(ends)]);
            }
            Attr::Named(_, a) | Attr::Implied(a) => Self::leaves(a, out),
        }
    }

    /// The node's operands as e-graph ids.
    fn operands(&self, id: ValueId) -> Result<Vec<Id>, String> {
        let node = self.prog.node(id);
        node.args
            .iter()
            .map(|v| {
                self.ids
                    .get(v)
                    .copied()
                    .ok_or_else(|| format!("node {id} uses a later value"))
            })
            .collect()
    }

    /// A node's e-node: the one named as the op (see [`lang::spelling`]) whose children are
    /// its operands then the leaves of its [`Op::attrs`], with `none` for an absent last
    /// operand (a bias, a mask). Two ops differ: a loop, whose item is its child, and `cat`,
    /// whose axis comes first so that rules can match parts of any number.
    fn node(&mut self, id: ValueId) -> Result<Id, String> {
        let node = self.prog.node(id);
        let mut operands = self.operands(id)?;
        let types: Vec<&TensorType> = node.args.iter().map(|&a| self.prog.tensor_type(a)).collect();
        let mut leaves = Vec::new();
        for attr in node.op.attrs(&types, &self.prog.tensor_type(id).shape) {
            Self::leaves(&attr, &mut leaves);
        }
        if let Op::For {
            var,
            start,
            end,
            result,
            ..
        } = &node.op
        {
            let item = *self.ids.get(result).ok_or("a loop item before its value")?;
            let var = self.leaf(Tensor::Int(*var as i64));
            let [start, end] = [start, end].map(|p| self.leaf(Tensor::Dim(DimLeaf(p.clone()))));
            return Ok(self.expr.add(Tensor::For([var, start, end, item])));
        }
        let name = lang::spelling(node.op.name());
        let fits = |n: usize| Tensor::from_op(name, vec![Id::from(0); n]).is_ok();
        if !fits(operands.len() + leaves.len()) {
            operands.push(self.leaf(Tensor::None));
        }
        let leaves: Vec<Id> = leaves.into_iter().map(|t| self.leaf(t)).collect();
        let children = match matches!(node.op, Op::Cat(_)) {
            true => leaves.into_iter().chain(operands).collect(),
            false => operands.into_iter().chain(leaves).collect(),
        };
        let t = Tensor::from_op(name, children)
            .map_err(|_| format!("`{}` has no e-graph form", node.op.name()))?;
        Ok(self.expr.add(t))
    }
}

/// The chosen term under `root` as a [`RecExpr`] (for explanations).
pub fn chosen_expr(eg: &EG, ex: &Extraction, root: Id) -> RecExpr<Tensor> {
    fn go(eg: &EG, ex: &Extraction, id: Id, expr: &mut RecExpr<Tensor>, memo: &mut HashMap<Id, Id>) -> Id {
        let id = eg.find(id);
        if let Some(&e) = memo.get(&id) {
            return e;
        }
        let node = ex
            .node(eg, id)
            .clone()
            .map_children(|c| go(eg, ex, c, expr, memo));
        let e = expr.add(node);
        memo.insert(id, e);
        e
    }
    let mut expr = RecExpr::default();
    go(eg, ex, root, &mut expr, &mut HashMap::default());
    expr
}

/// The extracted program: `source`'s dims and declarations, the chosen term's nodes.
pub fn lower(eg: &EG, ex: &Extraction, root: Id, source: &Program) -> Result<Program, String> {
    let mut out = Out {
        eg,
        ex,
        prog: Program {
            dims: source.dims.clone(),
            params: source.params.clone(),
            inputs: source.inputs.clone(),
            asserts: source.asserts.clone(),
            ..Program::default()
        },
        values: HashMap::default(),
        literals: HashMap::default(),
        loops: Vec::new(),
    };
    for i in 0..source.params.len() {
        let ty = TensorType::row_major(source.params[i].shape.clone(), DType::F32);
        out.push(Op::Param(i), vec![], Type::Tensor(ty), &[]);
    }
    for i in 0..source.inputs.len() {
        let ty = TensorType::row_major(source.inputs[i].shape.clone(), source.inputs[i].dtype);
        out.push(Op::Input(i), vec![], Type::Tensor(ty), &[]);
    }
    let root = eg.find(root);
    let Tensor::Outputs(outs) = ex.node(eg, root) else {
        return Err("the root is not the outputs".into());
    };
    for (decl, &id) in source.outputs.iter().zip(outs.iter()) {
        let value = out.value(id)?;
        out.prog.outputs.push(OutputDecl {
            name: decl.name.clone(),
            value,
            state: decl.state,
            span: decl.span,
        });
    }
    Ok(out.prog)
}

struct Out<'a> {
    eg: &'a EG,
    ex: &'a Extraction,
    prog: Program,
    values: HashMap<Id, ValueId>,
    literals: HashMap<u64, ValueId>,
    /// The loops being lowered, innermost last: each variable and its body.
    loops: Vec<(Sym, Vec<ValueId>)>,
}

impl Out<'_> {
    /// Appends a node to the innermost open loop whose variable it depends on, or to the
    /// top level.
    fn push(&mut self, op: Op, args: Vec<ValueId>, ty: Type, deps: &[Sym]) -> ValueId {
        self.prog.nodes.push(Node {
            op,
            args,
            ty,
            span: Span::default(),
        });
        let id = self.prog.nodes.len() - 1;
        match self.loops.iter_mut().rev().find(|(v, _)| deps.contains(v)) {
            Some((_, body)) => body.push(id),
            None => self.prog.body.push(id),
        }
        id
    }

    fn value(&mut self, id: Id) -> Result<ValueId, String> {
        let (eg, ex) = (self.eg, self.ex);
        let id = eg.find(id);
        if let Some(&v) = self.values.get(&id) {
            return Ok(v);
        }
        let data = &eg[id].data;
        let node = ex.node(eg, id);
        let kid = |i: usize| &eg[node.children()[i]].data;
        let ty = ex.ty(eg, id).cloned().ok_or("a value without a type")?;
        let deps = data.deps.clone();
        let v = match node {
            Tensor::Param(_) => ValueId::from(kid(0).axis().ok_or("param index")?),
            Tensor::Input(_) => self.prog.params.len() + kid(0).axis().ok_or("input index")?,
            Tensor::For(c) => {
                let var = kid(0).axis().ok_or("loop variable")?;
                let (start, end) = (
                    kid(1).dim().ok_or("loop start")?.clone(),
                    kid(2).dim().ok_or("loop end")?.clone(),
                );
                self.loops.push((var, Vec::new()));
                let result = self.value(c[3])?;
                let (_, body) = self.loops.pop().ok_or("loop stack")?;
                let len = end.sub(&start);
                let op = Op::For {
                    var,
                    start,
                    end,
                    body,
                    result,
                };
                self.push(op, vec![], Type::Seq { item: ty, len }, &deps)
            }
            Tensor::Scale(c) => {
                let x = self.value(c[0])?;
                let lit = self.literal(kid(1).float().ok_or("scale")?);
                self.push(Op::Binary(BinaryOp::Mul), vec![x, lit], Type::Tensor(ty), &deps)
            }
            Tensor::Reshape(c) => {
                let mut x = self.value(c[0])?;
                if ex.copies(eg, id) {
                    let t = self.prog.tensor_type(x).clone();
                    let rm = TensorType::row_major(t.shape, t.dtype);
                    x = self.push(Op::Contiguous, vec![x], Type::Tensor(rm), &deps);
                }
                let sizes = kid(1).shape_attr().ok_or("reshape sizes")?.to_vec();
                self.push(Op::View(sizes), vec![x], Type::Tensor(ty), &deps)
            }
            _ => {
                let (op, operands) = self.op(node)?;
                let args = operands
                    .iter()
                    .map(|&c| self.value(c))
                    .collect::<Result<_, _>>()?;
                self.push(op, args, Type::Tensor(ty), &deps)
            }
        };
        self.values.insert(id, v);
        Ok(v)
    }

    /// A rank-0 literal, one node per value.
    fn literal(&mut self, x: f64) -> ValueId {
        if let Some(&v) = self.literals.get(&x.to_bits()) {
            return v;
        }
        let ty = TensorType::row_major(vec![], DType::F32);
        let v = self.push(Op::Literal(x), vec![], Type::Tensor(ty), &[]);
        self.literals.insert(x.to_bits(), v);
        v
    }

    /// The IR op of a node and its operand classes (attributes read into the op).
    fn op(&self, node: &Tensor) -> Result<(Op, Vec<Id>), String> {
        let eg = self.eg;
        let d = |i: Id| &eg[i].data;
        let axis = |i: Id| d(i).axis().ok_or_else(|| "an axis".to_string());
        let float = |i: Id| d(i).float().ok_or_else(|| "a float".to_string());
        let dim = |i: Id| d(i).dim().cloned().ok_or_else(|| "a dim".to_string());
        let flag = |i: Id| Ok::<bool, String>(axis(i)? == 1);
        let present = |ids: &[Id]| {
            ids.iter()
                .copied()
                .filter(|&i| !d(i).is_none())
                .collect::<Vec<_>>()
        };
        Ok(match node {
            Tensor::Literal(c) => (Op::Literal(float(*c)?), vec![]),
            Tensor::DimValue(c) => (Op::DimValue(dim(*c)?), vec![]),
            Tensor::Linear(c) => (Op::Linear, present(c)),
            Tensor::MatMul(c) => (Op::MatMul, c.to_vec()),
            Tensor::Transpose(c) => (Op::Transpose(axis(c[1])?, axis(c[2])?), vec![c[0]]),
            Tensor::Permute(c) => (self.permute(c)?, vec![c[0]]),
            Tensor::Contiguous(c) => (Op::Contiguous, vec![*c]),
            Tensor::Expand(c) => {
                let sizes = d(c[1]).shape_attr().ok_or("expand sizes")?.to_vec();
                (Op::Expand(sizes), vec![c[0]])
            }
            Tensor::Unsqueeze(c) => (Op::Unsqueeze(axis(c[1])?), vec![c[0]]),
            Tensor::Squeeze(c) => (Op::Squeeze(axis(c[1])?), vec![c[0]]),
            Tensor::Softmax(c) => (Op::Softmax(axis(c[1])?), vec![c[0]]),
            Tensor::Where(c) => (Op::Where, c.to_vec()),
            Tensor::Tri(c) => {
                let upper = axis(c[1])? == 1;
                let diagonal = d(c[2]).int().ok_or("diagonal")?;
                (Op::Tri { upper, diagonal }, vec![c[0]])
            }
            Tensor::Fill(c) => (Op::Fill(d(c[0]).float().ok_or("fill value")?), vec![]),
            Tensor::Arange(c) => (
                Op::Arange {
                    start: dim(c[0])?,
                    step: dim(c[1])?,
                },
                vec![],
            ),
            Tensor::Reduce(op, c) => (self.reduce(*op, c)?, vec![c[0]]),
            Tensor::MaskedFill(c) => (Op::MaskedFill, c.to_vec()),
            Tensor::Unary(op, c) => (Op::Unary(*op), c.to_vec()),
            Tensor::Binary(op, c) => (Op::Binary(*op), c.to_vec()),
            Tensor::Eq(c) => (Op::Compare(CmpOp::Eq), c.to_vec()),
            Tensor::Ne(c) => (Op::Compare(CmpOp::Ne), c.to_vec()),
            Tensor::Lt(c) => (Op::Compare(CmpOp::Lt), c.to_vec()),
            Tensor::Le(c) => (Op::Compare(CmpOp::Le), c.to_vec()),
            Tensor::Gt(c) => (Op::Compare(CmpOp::Gt), c.to_vec()),
            Tensor::Ge(c) => (Op::Compare(CmpOp::Ge), c.to_vec()),
            Tensor::Slice(c) => (
                Op::Slice {
                    axis: axis(c[1])?,
                    start: dim(c[2])?,
                    end: dim(c[3])?,
                },
                vec![c[0]],
            ),
            Tensor::StepSlice(c) => (
                Op::StepSlice {
                    axis: axis(c[1])?,
                    start: dim(c[2])?,
                    step: d(c[3]).int().ok_or("a step")?,
                    len: dim(c[4])?,
                },
                vec![c[0]],
            ),
            Tensor::Select(c) => (
                Op::Select {
                    axis: axis(c[1])?,
                    index: dim(c[2])?,
                },
                vec![c[0]],
            ),
            Tensor::CatLoop(c) => (Op::CatLoop(axis(c[1])?), vec![c[0]]),
            Tensor::Stack(c) => (Op::Stack(axis(c[1])?), vec![c[0]]),
            Tensor::IndexCopy(c) => (self.index_copy(c)?, c[..3].to_vec()),
            Tensor::Gemm(c) => (
                Op::Gemm {
                    trans_a: flag(c[3])?,
                    trans_b: flag(c[4])?,
                    alpha: float(c[5])?,
                },
                present(&c[..3]),
            ),
            Tensor::MaskedSoftmax(c) => (
                Op::MaskedSoftmax {
                    scale: float(c[2])?,
                    fill: float(c[3])?,
                },
                present(&c[..2]),
            ),
            Tensor::Attention(c) => (
                Op::Attention {
                    scale: float(c[4])?,
                    fill: float(c[5])?,
                },
                present(&c[..4]),
            ),
            Tensor::ScoredAttention(c) => (
                Op::ScoredAttention {
                    scale: float(c[3])?,
                    fill: float(c[4])?,
                },
                present(&c[..3]),
            ),
            Tensor::Sdpa(c) => (
                Op::Sdpa {
                    causal: flag(c[5])?,
                    gqa: flag(c[6])?,
                },
                present(&c[..5]),
            ),
            Tensor::Cat(c) => (Op::Cat(axis(c[0])?), c[1..].to_vec()),
            other => return Err(format!("`{other}` is not a value")),
        })
    }

    /// `permute`'s axes, from its operand's rank and its axes leaf.
    fn permute(&self, c: &[Id; 2]) -> Result<Op, String> {
        let d = |i: Id| &self.eg[i].data;
        let rank = d(c[0]).rank().ok_or("permute operand")?;
        let axes = super::analysis::perm_of(d(c[1]).shape_attr().ok_or("axes")?, rank).ok_or("axes")?;
        Ok(Op::Permute(axes))
    }

    /// A reduction's axes and `keepdim`, from their leaves.
    fn reduce(&self, op: ReduceOp, c: &[Id; 3]) -> Result<Op, String> {
        let d = |i: Id| &self.eg[i].data;
        let axes = d(c[1]).shape_attr().ok_or("axes")?;
        let axes: Option<Vec<usize>> = axes.iter().map(|p| usize::try_from(p.as_int()?).ok()).collect();
        let keepdim = d(c[2]).axis().ok_or("keepdim")? == 1;
        Ok(Op::Reduce {
            op,
            axes: axes.ok_or("axes")?,
            keepdim,
        })
    }

    /// An index copy's axis and window, from their leaves.
    fn index_copy(&self, c: &[Id; 6]) -> Result<Op, String> {
        let d = |i: Id| &self.eg[i].data;
        Ok(Op::IndexCopy {
            axis: d(c[3]).axis().ok_or("an axis")?,
            starts: d(c[4]).shape_attr().ok_or("starts")?.to_vec(),
            ends: d(c[5]).shape_attr().ok_or("ends")?.to_vec(),
        })
    }
}
