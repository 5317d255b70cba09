//! Lowering: from a checked program (typed or optimized IR) and concrete dims to a
//! [`Plan`] of kernels over buffers (`attnc ir --stage kernels`).
//!
//! Every value becomes a strided [`View`] of a buffer: view ops only change the view;
//! compute ops get a kernel writing a fresh buffer; [`fuse`] decides beforehand which
//! nodes a consumer's kernel absorbs. `for` loops are unrolled with their variable bound,
//! one set of kernels per iteration. Last, [`memory`] moves kernels that read params only
//! to the prologue and gives every temporary an offset in one arena, reusing the memory of
//! temporaries that are dead.
//!
//! The optimizer's fused ops map onto the same kernels as the patterns [`fuse`] finds in
//! a typed program:
//! - `gemm` (`alpha · (op(a) @ op(b) + bias)`): the operands as views, transposed where a
//!   flag says so (free), then the batched GEMM kernel;
//! - `masked_softmax`: the softmax kernel with its scale and mask fill (a comparison with a
//!   constant is tested inside the kernel);
//! - `attention`: the flash-style attention kernel, never holding the scores;
//! - `scored_attention`: the same kernel computing the score change tile by tile
//!   ([`scores`]), where the scores are an elementwise function of one `q @ kᵀ`; else the
//!   scores, a softmax kernel and a GEMM.
//!
//! An attention kernel computes a mask that is a function of positions from `i` and `j`
//! ([`positions`]), and reads keys and values that are `cat([cache, new])` in place.
//! - `cat`: one copy per part into a slice of one buffer; its kernels read params only, so
//!   they land in the prologue by themselves.

mod flops;
mod fuse;
mod memory;
mod positions;
mod relayout;
mod rope;
mod scores;
mod sdpa;
mod split;
mod tiling;
mod view;

use crate::dims::{Poly, Sym};
use crate::ir::{BinaryOp, CmpOp, Op, Program, ReduceOp, ValueId};
use crate::kernel::{
    Attention, BufId, Buffer, BufferKind, Epilogue, Expr, Gemm, IndexMask, Kernel, KernelOp, KeyTail, Map,
    MaskFill, Operand, Plan, PlanError, Row, ScoreMod, Softmax, Stage,
};
use crate::size;
pub use flops::source_flops;
use fuse::{Fused, Fusion, Scale, SoftmaxPat};
use std::collections::HashMap;
use tiling::{attention_blocks, fold_batch_into_rows, gemm_blocks};
pub use view::View;

/// The formula node of elementwise op `op` (of node `id`) over the formula nodes `a`.
fn map_node(id: ValueId, op: &Op, a: &[usize]) -> Result<Expr, PlanError> {
    Ok(match (op, a) {
        (Op::Unary(u), &[x]) => Expr::Unary(*u, x),
        (Op::Binary(b), &[x, y]) => Expr::Binary(*b, x, y),
        (Op::Compare(c), &[x, y]) => Expr::Compare(*c, x, y),
        (Op::MaskedFill, &[x, m, v]) => Expr::Select(m, v, x),
        (Op::Where, &[c, a, b]) => Expr::Select(c, a, b),
        _ => return Err(internal(format!("node {id} is not elementwise"))),
    })
}

/// Lowers `program` for the dim values `dims` (by [`crate::dims::Sym`], as
/// [`crate::runtime::Bound::dims`] gives them). Errors are internal: a checked program with
/// bound dims always lowers.
pub fn lower(program: &Program, dims: &[Option<i64>]) -> Result<Plan, PlanError> {
    let fusion = fuse::decide(program, dims);
    let mut l = Lowerer {
        program,
        fusion,
        dims: dims.to_vec(),
        vals: HashMap::new(),
        derived: Default::default(),
        plan: Plan::default(),
    };
    for (i, p) in program.params.iter().enumerate() {
        l.source(BufferKind::Param(i), &p.name, &p.shape)?;
    }
    for (i, input) in program.inputs.iter().enumerate() {
        l.source(BufferKind::Input(i), &input.name, &input.shape)?;
    }
    l.nodes(&program.body)?;
    l.outputs()?;
    l.plan.flops = l.plan.kernels.iter().map(|k| k.op.flops()).sum();
    memory::plan(&mut l.plan);
    l.plan.validate()?;
    Ok(l.plan)
}

/// What the formulas of one row kernel are built from: its root and the nodes it computes,
/// the stage each reduction is, and the inputs read so far, strided over `shape`
/// (`[rows.., n]`).
struct RowFormula {
    root: ValueId,
    shape: Vec<usize>,
    nodes: std::collections::HashSet<ValueId>,
    stages: HashMap<ValueId, usize>,
    inputs: Vec<Operand>,
}

/// What a mask does to scores: where `mask op rhs` holds, the score becomes `fill`.
#[derive(Clone, Copy, Debug)]
struct Masking {
    mask: ValueId,
    op: crate::ir::CmpOp,
    rhs: f32,
    fill: f32,
}

impl Masking {
    fn kernel(&self, mask: Operand) -> MaskFill {
        MaskFill {
            mask,
            op: self.op,
            rhs: self.rhs,
            fill: self.fill,
        }
    }
}

/// The keys of an attention kernel: `kᵀ` as the source writes it (`q @ k.transpose(-2, -1)`),
/// or `k` itself, as the optimizer's fused op takes it.
#[derive(Clone, Copy, Debug)]
enum KeyOperand {
    Transposed(ValueId),
    Keys(ValueId),
}

/// What an attention kernel computes besides its two products (see [`Attention`]).
#[derive(Default)]
struct Extras {
    positions: Option<IndexMask>,
    /// The score change: its formula and the tensors it reads.
    score: Option<(Vec<Expr>, Vec<ValueId>)>,
    /// The `cat` nodes of keys and values read as cache and tail.
    tail: Option<[ValueId; 2]>,
    /// Keys and values of fewer heads, and how many query heads share each.
    group: Option<([ValueId; 2], usize)>,
}

/// A lowered value.
#[derive(Clone, Debug)]
enum Val {
    /// A rank-0 constant (literals, dims and arithmetic on them).
    Const(f32),
    Tensor(View),
    Seq(Vec<View>),
}

struct Lowerer<'p> {
    program: &'p Program,
    fusion: Fusion,
    /// Dim values, loop variables included while their loop is unrolled.
    dims: Vec<Option<i64>>,
    vals: HashMap<ValueId, Val>,
    /// Buffers written by kernels that read params only (see `memory::hoist`).
    derived: std::collections::HashSet<BufId>,
    plan: Plan,
}

fn internal(what: String) -> PlanError {
    PlanError(what)
}

/// An op the native backend has no kernel for yet.
fn not_native(op: &str) -> PlanError {
    PlanError(format!(
        "the native backend has no kernel for `{op}` yet; run with `--backend interp`"
    ))
}

impl<'p> Lowerer<'p> {
    // ---- buffers, sizes and values ------------------------------------------------------

    fn buffer(&mut self, kind: BufferKind, name: &str, len: usize) -> BufId {
        self.plan.buffers.push(Buffer {
            kind,
            len,
            name: name.to_string(),
        });
        self.plan.buffers.len() - 1
    }

    fn temp(&mut self, shape: Vec<usize>) -> View {
        // Shapes come through `sizes`, which bounds them; a join of several that passes the
        // bound gets a length no plan can validate, never a wrapped one.
        let len = size::numel(&shape).unwrap_or(usize::MAX);
        let buf = self.buffer(
            BufferKind::Temp {
                offset: 0,
                live: (0, 0),
            },
            "",
            len,
        );
        View::whole(buf, shape)
    }

    fn source(&mut self, kind: BufferKind, name: &str, shape: &[Poly]) -> Result<(), PlanError> {
        let shape = self.sizes(shape)?;
        self.buffer(kind, name, size::numel(&shape).unwrap_or(usize::MAX));
        Ok(())
    }

    fn size(&self, p: &Poly) -> Result<usize, PlanError> {
        let v = self.int(p).ok();
        v.and_then(|v| usize::try_from(v).ok()).ok_or_else(|| {
            internal(format!(
                "the size `{}` has no value",
                self.program.dims.display(p)
            ))
        })
    }

    /// The value of a dim expression that may be negative (`arange`'s start).
    fn int(&self, p: &Poly) -> Result<i64, PlanError> {
        let v = self
            .program
            .dims
            .eval(p, &|s| self.dims.get(s).copied().flatten());
        v.ok_or_else(|| {
            internal(format!(
                "the size `{}` has no value",
                self.program.dims.display(p)
            ))
        })
    }

    /// The concrete sizes of a shape, refused when its elements pass [`size::MAX_ELEMENTS`]:
    /// every stride and offset of a view is then below that bound, so none of the
    /// arithmetic on them can wrap.
    fn sizes(&self, ps: &[Poly]) -> Result<Vec<usize>, PlanError> {
        let sizes = ps.iter().map(|p| self.size(p)).collect::<Result<Vec<_>, _>>()?;
        match size::numel(&sizes) {
            Some(_) => Ok(sizes),
            None => Err(internal(format!("the shape {sizes:?} has too many elements"))),
        }
    }

    /// The concrete shape of a node's type.
    fn shape(&self, id: ValueId) -> Result<Vec<usize>, PlanError> {
        self.sizes(&self.program.tensor_type(id).shape)
    }

    fn val(&self, id: ValueId) -> Result<&Val, PlanError> {
        self.vals
            .get(&id)
            .ok_or_else(|| internal(format!("node {id} is used before it is lowered")))
    }

    fn constant(&self, id: ValueId) -> Result<f32, PlanError> {
        match self.val(id)? {
            Val::Const(c) => Ok(*c),
            _ => Err(internal(format!("node {id} is not a constant"))),
        }
    }

    /// The value as a view, materializing a constant.
    fn view(&mut self, id: ValueId) -> Result<View, PlanError> {
        match self.val(id)?.clone() {
            Val::Tensor(v) => Ok(v),
            Val::Const(c) => {
                let out = self.temp(vec![]);
                self.map(vec![], vec![Expr::Const(c)], &out, format!("const {c:?}"));
                Ok(out)
            }
            Val::Seq(_) => Err(internal(format!("node {id} is a sequence"))),
        }
    }

    fn kernel(&mut self, label: String, op: KernelOp) {
        let ops = op.operands();
        // A kernel that writes no element (a derived size of 0: an empty slice, `N - 1` at
        // N = 1) is an empty step of the plan: nothing to compute, no call.
        if ops
            .iter()
            .any(|(_, shape, written)| *written && shape.contains(&0))
        {
            return;
        }
        if ops.iter().filter(|o| !o.2).all(|o| self.param_derived(o.0.buf)) {
            self.derived.extend(ops.iter().filter(|o| o.2).map(|o| o.0.buf));
        }
        self.plan.kernels.push(Kernel { label, op });
    }

    /// Whether a buffer holds a param or a value computed from params alone.
    fn param_derived(&self, buf: BufId) -> bool {
        matches!(self.plan.buffers[buf].kind, BufferKind::Param(_)) || self.derived.contains(&buf)
    }

    /// What a node is, for kernel labels: its op and a source-like description.
    fn label(&self, id: ValueId) -> String {
        let node = self.program.node(id);
        let name = self
            .program
            .bindings
            .iter()
            .find(|b| b.value == id)
            .map(|b| format!(" {}", b.name))
            .unwrap_or_default();
        let op = match &node.op {
            op if op.is_elementwise() => "elementwise",
            Op::View(_) => "reshape",
            Op::Attention { .. } | Op::ScoredAttention { .. } => "attention",
            op => op.name(),
        };
        let lp = loop_suffix(self);
        format!("%{id} {op}{name}{lp}")
    }

    // ---- the walk -----------------------------------------------------------------------

    fn nodes(&mut self, body: &[ValueId]) -> Result<(), PlanError> {
        for &id in body {
            if self.fusion.absorbed[id] {
                continue;
            }
            let val = self.node(id)?;
            if let Val::Tensor(v) = &val {
                let expected = self.shape(id)?;
                if v.shape != expected {
                    let what = format!(
                        "node {id} lowered to shape {:?}, its type says {expected:?}",
                        v.shape
                    );
                    return Err(internal(what));
                }
            }
            self.vals.insert(id, val);
        }
        Ok(())
    }

    fn node(&mut self, id: ValueId) -> Result<Val, PlanError> {
        let node = self.program.node(id);
        let args = node.args.clone();
        let arg = |i: usize| args[i];
        if self.fusion.constant[id] {
            return self.fold(id).map(Val::Const);
        }
        let bad = || internal(format!("node {id} does not fit its op"));
        let tensor = |v: Option<View>| v.map(Val::Tensor).ok_or_else(bad);
        match &node.op {
            Op::Param(i) => Ok(Val::Tensor(View::whole(*i, self.shape(id)?))),
            Op::Input(i) => Ok(Val::Tensor(View::whole(
                self.program.params.len() + i,
                self.shape(id)?,
            ))),
            Op::Literal(_) | Op::DimValue(_) => self.fold(id).map(Val::Const),
            Op::Linear => match self.fusion.siblings.get(&id).cloned() {
                Some(group) => self.linears(&group).map(Val::Tensor),
                None => self.linear(id, &args).map(Val::Tensor),
            },
            Op::MatMul => match self.fusion.fused.get(&id).copied() {
                Some(Fused::Attention { q, kt, v, softmax }) => {
                    let (_, scale, mask) = self.resolve(softmax)?;
                    let keys = KeyOperand::Transposed(kt);
                    self.attention(id, [q, v], keys, scale, mask, Extras::default())
                        .map(Val::Tensor)
                }
                _ => self.matmul(id, arg(0), arg(1), 1.0).map(Val::Tensor),
            },
            Op::Transpose(a, b) => tensor(self.view(arg(0))?.transpose(*a, *b)),
            Op::Permute(perm) => tensor(self.view(arg(0))?.permute(perm)),
            Op::Unsqueeze(a) => tensor(self.view(arg(0))?.unsqueeze(*a)),
            Op::Expand(sizes) => {
                let sizes = self.sizes(sizes)?;
                tensor(self.view(arg(0))?.expand(&sizes))
            }
            Op::Squeeze(a) => tensor(self.view(arg(0))?.squeeze(*a)),
            Op::Slice { axis, start, end } => {
                let (s, e) = (self.size(start)?, self.size(end)?);
                tensor(self.view(arg(0))?.slice(*axis, s, e))
            }
            Op::Select { axis, index } => {
                let i = self.size(index)?;
                tensor(self.view(arg(0))?.select(*axis, i))
            }
            Op::View(sizes) | Op::Reshape(sizes) => {
                let sizes = self.sizes(sizes)?;
                let x = self.view(arg(0))?;
                match x.reshape(&sizes) {
                    Some(v) => Ok(Val::Tensor(v)),
                    None => {
                        let copy = self.copy(&x, self.label(id));
                        tensor(copy.reshape(&sizes))
                    }
                }
            }
            Op::Contiguous => {
                let x = self.view(arg(0))?;
                if x.is_contiguous() {
                    return Ok(Val::Tensor(x));
                }
                match self.relayout(arg(0), &x) {
                    Some(v) => Ok(Val::Tensor(v)),
                    None => Ok(Val::Tensor(self.copy(&x, self.label(id)))),
                }
            }
            Op::Reduce { op, axes, .. } => match axes.as_slice() {
                &[axis] => self.reduction(id, arg(0), *op, axis).map(Val::Tensor),
                _ => Err(not_native(&format!("{} over several axes", op.name()))),
            },
            Op::Tri { .. } => self.elementwise(id).map(Val::Tensor),
            Op::Fill(v) => {
                let out = self.temp(self.shape(id)?);
                self.map(vec![], vec![Expr::Const(*v as f32)], &out, self.label(id));
                Ok(Val::Tensor(out))
            }
            Op::Arange { start, step } => self.arange(id, start, step).map(Val::Tensor),
            Op::Softmax(axis) => {
                let pat = match self.fusion.fused.get(&id) {
                    Some(Fused::Softmax(p)) => *p,
                    _ => SoftmaxPat {
                        x: arg(0),
                        scale: None,
                        mask: None,
                    },
                };
                let (x, scale, mask) = self.resolve(pat)?;
                self.softmax(id, *axis, x, scale, mask).map(Val::Tensor)
            }
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::MaskedFill | Op::Where => {
                self.map_op(id).map(Val::Tensor)
            }
            Op::For {
                var,
                start,
                end,
                body,
                result,
            } => self.for_loop(*var, (start, end), body, *result).map(Val::Seq),
            Op::Concat(axis) => self.concat(id, arg(0), *axis, false).map(Val::Tensor),
            Op::Stack(axis) => self.concat(id, arg(0), *axis, true).map(Val::Tensor),
            Op::Gemm {
                trans_a,
                trans_b,
                alpha,
            } => self
                .fused_gemm(id, &args, [*trans_a, *trans_b], *alpha as f32)
                .map(Val::Tensor),
            Op::MaskedSoftmax { scale, fill } => {
                let mask = args.get(1).map(|&m| self.bool_masking(m, *fill));
                let axis = self.shape(id)?.len().checked_sub(1).ok_or_else(bad)?;
                self.softmax(id, axis, arg(0), *scale as f32, mask)
                    .map(Val::Tensor)
            }
            Op::Attention { scale, fill } => {
                let (mask, extras) = self.attention_masking(id, args.get(3).copied(), *fill);
                let k = KeyOperand::Keys(arg(1));
                self.attention(id, [arg(0), arg(2)], k, *scale as f32, mask, extras)
                    .map(Val::Tensor)
            }
            Op::ScoredAttention { scale, fill } => self
                .scored_attention(id, &args, *scale as f32, *fill)
                .map(Val::Tensor),
            Op::Sdpa { causal, gqa } => self.sdpa(id, &args, *causal, *gqa).map(Val::Tensor),
            Op::Cat(axis) => {
                let items = args
                    .iter()
                    .map(|&a| self.view(a))
                    .collect::<Result<Vec<_>, _>>()?;
                self.join(id, items, *axis, false).map(Val::Tensor)
            }
        }
    }

    /// An elementwise op of the language: part of a row program or a RoPE kernel where the
    /// fusion pass put it there, the epilogue scale of a GEMM, or a fused map.
    fn map_op(&mut self, id: ValueId) -> Result<View, PlanError> {
        if self.fusion.rows.contains_key(&id) {
            return self.row(id);
        }
        if let Some(pat) = self.fusion.rope.get(&id).cloned() {
            return self.rope(id, &pat);
        }
        match self.fusion.fused.get(&id).copied() {
            Some(Fused::GemmAlpha { matmul, scale }) => {
                let alpha = self.scale(scale)?;
                let &[a, b] = self.program.node(matmul).args.as_slice() else {
                    return Err(internal(format!("node {matmul} is not a matmul of two")));
                };
                self.matmul(id, a, b, alpha)
            }
            _ => self.elementwise(id),
        }
    }

    /// A `for` loop's items: its body lowered once per value of `var`, which is bound to
    /// that value meanwhile.
    fn for_loop(
        &mut self,
        var: Sym,
        (start, end): (&Poly, &Poly),
        body: &[ValueId],
        result: ValueId,
    ) -> Result<Vec<View>, PlanError> {
        let (s, e) = (self.size(start)?, self.size(end)?);
        let saved = self.dims.get(var).copied().flatten();
        if var >= self.dims.len() {
            self.dims.resize(var + 1, None);
        }
        let mut items = Vec::new();
        for i in s..e {
            self.dims[var] = Some(i as i64);
            self.nodes(body)?;
            items.push(self.view(result)?);
        }
        self.dims[var] = saved;
        Ok(items)
    }

    /// `arange`: `start + i * step` from the element's index, exact below 2^24 as PyTorch's.
    fn arange(&mut self, id: ValueId, start: &Poly, step: &Poly) -> Result<View, PlanError> {
        let (start, step) = (self.int(start)?, self.size(step)?);
        let out = self.temp(self.shape(id)?);
        let expr = vec![
            Expr::Index(0),
            Expr::Const(step as f32),
            Expr::Binary(BinaryOp::Mul, 0, 1),
            Expr::Const(start as f32),
            Expr::Binary(BinaryOp::Add, 2, 3),
        ];
        self.map(vec![], expr, &out, self.label(id));
        Ok(out)
    }

    /// The optimizer's `gemm`: `alpha * (op(a) @ op(b) + bias)`, a transposed operand read
    /// through its strides. The kernel adds the bias after scaling, so a bias under an
    /// alpha other than 1 is scaled first (a param's, once, by the prologue).
    fn fused_gemm(
        &mut self,
        id: ValueId,
        args: &[ValueId],
        trans: [bool; 2],
        alpha: f32,
    ) -> Result<View, PlanError> {
        let bad = || internal(format!("node {id}: gemm operands do not fit"));
        let operand = |l: &mut Self, v: ValueId, t: bool| -> Result<View, PlanError> {
            let x = l.view(v)?;
            let r = x.shape.len();
            if !t {
                return Ok(x);
            }
            r.checked_sub(2)
                .and_then(|a| x.transpose(a, r - 1))
                .ok_or_else(bad)
        };
        let a = operand(self, args[0], trans[0])?;
        let mut b = operand(self, args[1], trans[1])?;
        // As for `linear`: a weight read transposed is copied once into `[in, out]` order.
        if self.param_derived(b.buf) && !b.is_contiguous() {
            b = self.copy(&b, format!("{} (weight layout)", self.label(id)));
        }
        let bias = match args.get(2) {
            None => None,
            Some(&bias) if alpha == 1.0 => Some(self.view(bias)?.operand()),
            Some(&bias) => {
                let v = self.view(bias)?;
                let scaled = self.temp(v.shape.clone());
                let expr = vec![
                    Expr::Input(0),
                    Expr::Const(alpha),
                    Expr::Binary(BinaryOp::Mul, 0, 1),
                ];
                self.map(
                    vec![v.operand()],
                    expr,
                    &scaled,
                    format!("{} (scaled bias)", self.label(id)),
                );
                Some(scaled.operand())
            }
        };
        let out = self.gemm(id, &a, &b, alpha, bias)?;
        out.reshape(&self.shape(id)?).ok_or_else(bad)
    }

    /// The mask of an optimizer's attention op: a mask of positions when fusion found one,
    /// else the kernel's masking; and keys read as cache and tail when fusion found them.
    fn attention_masking(&self, id: ValueId, mask: Option<ValueId>, fill: f64) -> (Option<Masking>, Extras) {
        let extras = Extras {
            positions: self.fusion.positions.get(&id).map(|keep| IndexMask {
                keep: keep.clone(),
                fill: self.fusion.fills.get(&id).copied().unwrap_or(fill as f32),
            }),
            score: None,
            tail: self.fusion.tails.get(&id).copied(),
            group: self.fusion.groups.get(&id).copied(),
        };
        let masking = match extras.positions {
            Some(_) => None,
            None => mask.map(|m| self.bool_masking(m, fill)),
        };
        (masking, extras)
    }

    /// `softmax(masked_fill(s * scale, mask, fill), -1) @ v`: one attention kernel that
    /// computes the score change where fusion found one, else the scores, a softmax and a
    /// GEMM.
    fn scored_attention(
        &mut self,
        id: ValueId,
        args: &[ValueId],
        scale: f32,
        fill: f64,
    ) -> Result<View, PlanError> {
        let (mask, mut extras) = self.attention_masking(id, args.get(2).copied(), fill);
        let bad = || internal(format!("node {id}: scored attention operands do not fit"));
        let Some(plan) = self.fusion.scores.get(&id).cloned() else {
            let mask = args.get(2).map(|&m| self.bool_masking(m, fill));
            let axis = self.shape(args[0])?.len().checked_sub(1).ok_or_else(bad)?;
            let p = self.softmax(id, axis, args[0], scale, mask)?;
            let v = self.view(args[1])?;
            let out = self.gemm(id, &p, &v, 1.0, None)?;
            return out.reshape(&self.shape(id)?).ok_or_else(bad);
        };
        let gemm = self.program.node(plan.gemm);
        let (Op::Gemm { trans_b, alpha, .. }, &[q, k]) = (&gemm.op, gemm.args.as_slice()) else {
            return Err(bad());
        };
        let keys = if *trans_b {
            KeyOperand::Keys(k)
        } else {
            KeyOperand::Transposed(k)
        };
        let mut expr = plan.expr;
        if scale != 1.0 {
            let root = expr.len() - 1;
            expr.push(Expr::Const(scale));
            expr.push(Expr::Binary(BinaryOp::Mul, root, root + 1));
        }
        // Scores that are the GEMM's alone (the rest was a mask of positions) need no change.
        extras.score = (expr != [Expr::Input(0)]).then_some((expr, plan.tensors));
        self.attention(id, [q, args[1]], keys, *alpha as f32, mask, extras)
    }

    /// A bool mask of the optimizer's fused ops as the kernels' masking: a comparison with
    /// a constant that fusion absorbed is tested inside the kernel; any other bool tensor
    /// (stored as 0 or 1) masks where it is not 0.
    fn bool_masking(&self, m: ValueId, fill: f64) -> Masking {
        let node = self.program.node(m);
        match (&node.op, node.args.as_slice()) {
            (Op::Compare(op), &[x, c]) if self.fusion.absorbed[m] => Masking {
                mask: x,
                op: *op,
                rhs: self.constant(c).unwrap_or(0.0),
                fill: fill as f32,
            },
            _ => Masking {
                mask: m,
                op: crate::ir::CmpOp::Ne,
                rhs: 0.0,
                fill: fill as f32,
            },
        }
    }

    /// The value of a constant node, computed in f32 as the interpreter does.
    fn fold(&self, id: ValueId) -> Result<f32, PlanError> {
        let node = self.program.node(id);
        let a = |i: usize| self.constant(node.args[i]);
        Ok(match &node.op {
            Op::Literal(v) => *v as f32,
            Op::DimValue(p) => self.size(p)? as f32,
            Op::Unary(u) => u.eval(a(0)?),
            Op::Binary(b) => b.eval(a(0)?, a(1)?),
            _ => return Err(internal(format!("node {id} is not a constant"))),
        })
    }

    fn scale(&self, s: Scale) -> Result<f32, PlanError> {
        let c = self.constant(s.node)?;
        Ok(if s.divide { 1.0 / c } else { c })
    }

    // ---- kernels ------------------------------------------------------------------------

    /// A row-major copy of `x`.
    fn copy(&mut self, x: &View, label: String) -> View {
        let out = self.temp(x.shape.clone());
        self.map(vec![x.operand()], vec![Expr::Input(0)], &out, label);
        out
    }

    fn map(&mut self, inputs: Vec<Operand>, expr: Vec<Expr>, out: &View, label: String) {
        let len = out.shape.last().copied().unwrap_or(1).max(1);
        let m = Map {
            shape: out.shape.clone(),
            inputs,
            expr,
            out: out.operand(),
            rows_per_task: (8192 / len).max(16),
        };
        self.kernel(label, KernelOp::Map(m));
    }

    /// `op` of `x` over one axis as a row kernel: the axis is the row, every other axis a
    /// row axis; one value per row, written row-major (with or without `keepdim`, the
    /// same elements in the same order).
    fn reduction(&mut self, id: ValueId, x: ValueId, op: ReduceOp, axis: usize) -> Result<View, PlanError> {
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
    fn row(&mut self, id: ValueId) -> Result<View, PlanError> {
        let shape = self.shape(id)?;
        let nodes = self.fusion.rows.get(&id).cloned().unwrap_or_default();
        let mut formula = RowFormula {
            root: id,
            shape: shape.clone(),
            nodes: nodes.iter().copied().collect(),
            stages: HashMap::new(),
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
        let mut at = HashMap::new();
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

    /// An elementwise root and every elementwise producer fusion gave it, as one map.
    fn elementwise(&mut self, id: ValueId) -> Result<View, PlanError> {
        let shape = self.shape(id)?;
        let mut inputs: Vec<Operand> = Vec::new();
        let mut expr = Vec::new();
        self.expr(id, id, &shape, &mut inputs, &mut expr)?;
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
        self.plan.kernels[k] = Kernel {
            label,
            op: KernelOp::Gemm(g),
        };
        match paired {
            true => Some(out),
            false => Some(View::whole(c.buf, shape.to_vec())),
        }
    }

    /// Appends `id`'s expression to `expr`; returns its index.
    fn expr(
        &mut self,
        root: ValueId,
        id: ValueId,
        shape: &[usize],
        inputs: &mut Vec<Operand>,
        expr: &mut Vec<Expr>,
    ) -> Result<usize, PlanError> {
        let node = self.program.node(id);
        let inline = id == root || (self.fusion.absorbed[id] && node.op.is_elementwise());
        let e = if self.fusion.constant[id] {
            Expr::Const(self.constant(id)?)
        } else if inline {
            let args = node.args.clone();
            let mut a = Vec::new();
            for &x in &args {
                a.push(self.expr(root, x, shape, inputs, expr)?);
            }
            match (&node.op, a.as_slice()) {
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
                _ => map_node(id, &node.op, &a)?,
            }
        } else {
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
            Expr::Input(i)
        };
        expr.push(e);
        Ok(expr.len() - 1)
    }

    /// `linear(x, w, b)`: a GEMM reading `w [n, k]` transposed through its strides.
    fn linear(&mut self, id: ValueId, args: &[ValueId]) -> Result<View, PlanError> {
        let x = self.view(args[0])?;
        let w = self.view(args[1])?;
        let bias = match args.get(2) {
            Some(&b) => Some(self.view(b)?.operand()),
            None => None,
        };
        let mut wt = w
            .transpose(0, 1)
            .ok_or_else(|| internal(format!("node {id}: the weight is not a matrix")))?;
        // A weight read transposed makes the `gemm` crate pack it on every call; a copy in
        // `[in, out]` order is made once per set of weights instead (the prologue).
        if self.param_derived(wt.buf) && !wt.is_contiguous() {
            wt = self.copy(&wt, format!("{} (weight layout)", self.label(id)));
        }
        let x2 = match x.shape.len() {
            1 => x.unsqueeze(0),
            _ => Some(x.clone()),
        }
        .ok_or_else(|| internal(format!("node {id}: bad input")))?;
        let out = self.gemm(id, &x2, &wt, 1.0, bias)?;
        let shape = self.shape(id)?;
        out.reshape(&shape)
            .ok_or_else(|| internal(format!("node {id}: result does not reshape")))
    }

    /// Sibling `linear`s (one input, weights of one shape) as one GEMM over their weights
    /// concatenated in `[in, out]` order (made by the prologue), each a column slice of the
    /// result; returns the first's value and records the others'.
    fn linears(&mut self, group: &[ValueId]) -> Result<View, PlanError> {
        let first = self.program.node(group[0]).args.clone();
        let x = self.view(first[0])?;
        let x2 = match x.shape.len() {
            1 => x.unsqueeze(0),
            _ => Some(x.clone()),
        }
        .ok_or_else(|| internal(format!("node {}: bad input", group[0])))?;
        let w0 = self.view(first[1])?;
        let (n, k) = (w0.shape[0], w0.shape[1]);
        let total = n * group.len();
        let weights = self.temp(vec![k, total]);
        let bias = (first.len() == 3).then(|| self.temp(vec![total]));
        let label = format!("{} (weights of {} linears)", self.label(group[0]), group.len());
        let bad = |id: ValueId| internal(format!("node {id}: sibling linear does not fit"));
        for (i, &id) in group.iter().enumerate() {
            let args = self.program.node(id).args.clone();
            let wt = self.view(args[1])?.transpose(0, 1).ok_or_else(|| bad(id))?;
            let dest = weights.slice(1, i * n, (i + 1) * n).ok_or_else(|| bad(id))?;
            if wt.shape != dest.shape {
                return Err(bad(id));
            }
            self.map(vec![wt.operand()], vec![Expr::Input(0)], &dest, label.clone());
            if let (Some(b), Some(&arg)) = (&bias, args.get(2)) {
                let src = self.view(arg)?;
                let dest = b.slice(0, i * n, (i + 1) * n).ok_or_else(|| bad(id))?;
                self.map(vec![src.operand()], vec![Expr::Input(0)], &dest, label.clone());
            }
        }
        let out = self.gemm(group[0], &x2, &weights, 1.0, bias.map(|b| b.operand()))?;
        let last = out.shape.len() - 1;
        let mut first_view = None;
        for (i, &id) in group.iter().enumerate() {
            let shape = self.shape(id)?;
            let part = out.slice(last, i * n, (i + 1) * n).ok_or_else(|| bad(id))?;
            let part = part.reshape(&shape).ok_or_else(|| bad(id))?;
            match i {
                0 => first_view = Some(part),
                _ => {
                    self.vals.insert(id, Val::Tensor(part));
                }
            }
        }
        first_view.ok_or_else(|| bad(group[0]))
    }

    /// `a @ b` with PyTorch's vector and broadcasting rules, times `alpha`.
    fn matmul(&mut self, id: ValueId, a: ValueId, b: ValueId, alpha: f32) -> Result<View, PlanError> {
        let (a, b) = (self.view(a)?, self.view(b)?);
        let bad = || internal(format!("node {id}: operands do not multiply"));
        let a2 = if a.shape.len() == 1 {
            a.unsqueeze(0).ok_or_else(bad)?
        } else {
            a
        };
        let b2 = if b.shape.len() == 1 {
            b.unsqueeze(1).ok_or_else(bad)?
        } else {
            b
        };
        let out = self.gemm(id, &a2, &b2, alpha, None)?;
        let shape = self.shape(id)?;
        out.reshape(&shape).ok_or_else(bad)
    }

    /// `alpha · a [.., m, k] @ b [.., k, n] (+ bias [n])` into a fresh `[batch.., m, n]`
    /// (batch axes broadcast): the entry point for a batched GEMM. A transposed operand is
    /// a transposed view; a batch that `b` is broadcast along is folded into the rows.
    fn gemm(
        &mut self,
        id: ValueId,
        a: &View,
        b: &View,
        alpha: f32,
        bias: Option<Operand>,
    ) -> Result<View, PlanError> {
        let bad = || internal(format!("node {id}: operands do not multiply"));
        let (ra, rb) = (a.shape.len(), b.shape.len());
        let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
        if b.shape[rb - 2] != k {
            return Err(bad());
        }
        let batch = view::broadcast(&a.shape[..ra - 2], &b.shape[..rb - 2]).ok_or_else(bad)?;
        let a = a.expand(&[batch.as_slice(), &[m, k]].concat()).ok_or_else(bad)?;
        let b = b.expand(&[batch.as_slice(), &[k, n]].concat()).ok_or_else(bad)?;
        let c = self.temp([batch.as_slice(), &[m, n]].concat());
        let mut g = Gemm {
            batch,
            m,
            n,
            k,
            a: a.operand(),
            b: b.operand(),
            c: c.operand(),
            alpha,
            bias,
            epilogue: None,
            rope: Vec::new(),
            block: (m, n),
        };
        fold_batch_into_rows(&mut g);
        g.block = gemm_blocks(&g);
        self.kernel(self.label(id), KernelOp::Gemm(g));
        Ok(c)
    }

    /// The constants of a softmax pattern: `(x, scale, masking)`.
    fn resolve(&self, pat: SoftmaxPat) -> Result<(ValueId, f32, Option<Masking>), PlanError> {
        let scale = pat.scale.map(|s| self.scale(s)).transpose()?.unwrap_or(1.0);
        let mask = match pat.mask {
            Some(m) => Some(Masking {
                mask: m.mask,
                op: m.op,
                rhs: self.constant(m.rhs)?,
                fill: self.constant(m.fill)?,
            }),
            None => None,
        };
        Ok((pat.x, scale, mask))
    }

    /// The mask's kernel operand over `shape` (it broadcasts), and what it does.
    fn mask_fill(
        &mut self,
        m: Option<Masking>,
        shape: &[usize],
    ) -> Result<Option<(View, Masking)>, PlanError> {
        let Some(m) = m else { return Ok(None) };
        let v = self.view(m.mask)?;
        let v = v
            .expand(shape)
            .ok_or_else(|| internal(format!("the mask does not broadcast to {shape:?}")))?;
        Ok(Some((v, m)))
    }

    /// `softmax(masked_fill(x * scale, mask op rhs, fill), axis)` into a fresh buffer: the
    /// entry point for a fused scale-mask-softmax op (`mask` broadcasts to `x`).
    fn softmax(
        &mut self,
        id: ValueId,
        axis: usize,
        x: ValueId,
        scale: f32,
        mask: Option<Masking>,
    ) -> Result<View, PlanError> {
        let x = self.view(x)?;
        let shape = x.shape.clone();
        let mask = self.mask_fill(mask, &shape)?;
        let out = self.temp(shape.clone());
        // Move the softmax axis last in every operand; the buffers keep their layout.
        let mut perm: Vec<usize> = (0..shape.len()).filter(|&a| a != axis).collect();
        perm.push(axis);
        let bad = || internal(format!("node {id}: bad softmax axis"));
        let permuted = |v: &View| v.permute(&perm).map(|v| v.operand()).ok_or_else(bad);
        let mask = match &mask {
            Some((v, m)) => Some(m.kernel(permuted(v)?)),
            None => None,
        };
        let len = shape.get(axis).copied().ok_or_else(bad)?.max(1);
        let s = Softmax {
            shape: perm.iter().map(|&p| shape[p]).collect(),
            x: permuted(&x)?,
            out: permuted(&out)?,
            scale,
            mask,
            rows_per_task: (8192 / len).max(1),
        };
        self.kernel(self.label(id), KernelOp::Softmax(s));
        Ok(out)
    }

    /// `softmax(masked_fill(scale * q @ kt, mask op rhs, fill), -1) @ v` into a fresh
    /// buffer of node `id`'s shape, flash style: the entry point for a fused attention op.
    /// `q [.., n, dk]`, `kt [.., dk, m]` (kᵀ, as the source writes it), `v [.., m, dv]` and
    /// the mask (to `[.., n, m]`) broadcast over the batch axes of the result.
    fn attention(
        &mut self,
        id: ValueId,
        [q, v]: [ValueId; 2],
        keys: KeyOperand,
        scale: f32,
        mask: Option<Masking>,
        extras: Extras,
    ) -> Result<View, PlanError> {
        let out_shape = self.shape(id)?;
        let bad = || internal(format!("node {id}: attention operands do not fit"));
        let r = out_shape.len();
        let batch = out_shape[..r - 2].to_vec();
        // Keys and values of fewer heads: query head `h` reads head `h / group`.
        let (keys, v, group) = match (extras.group, keys) {
            (Some(([k0, v0], g)), KeyOperand::Keys(_)) if r >= 3 => (KeyOperand::Keys(k0), v0, g),
            _ => (keys, v, 1),
        };
        let mut kv_batch = batch.clone();
        if let Some(heads) = kv_batch.last_mut() {
            *heads /= group;
        }
        let with_kv = |tail: [usize; 2]| [kv_batch.as_slice(), &tail].concat();
        // Keys and values joined from a cache: the first parts are `k` and `v`, the second
        // the tail.
        let transposed = |k: View| {
            let rk = k.shape.len();
            rk.checked_sub(2)
                .and_then(|a| k.transpose(a, rk - 1))
                .ok_or_else(bad)
        };
        let q = self.view(q)?;
        let (kt_id, mut kt, v, tail) = match (extras.tail, keys) {
            (Some([kc, vc]), KeyOperand::Keys(_)) => {
                let ((k0, k1), (v0, v1)) = (self.cat_parts(kc)?, self.cat_parts(vc)?);
                (None, transposed(k0)?, v0, Some((k1, v1)))
            }
            (_, KeyOperand::Transposed(kt)) => (Some(kt), self.view(kt)?, self.view(v)?, None),
            (_, KeyOperand::Keys(k)) => (Some(k), transposed(self.view(k)?)?, self.view(v)?, None),
        };
        // The tile product wants kᵀ key-contiguous: the projection writes it so where it
        // can, else one layout copy (not one per tile). A cache is read as it is.
        if let Some(kt_id) = kt_id.filter(|_| kt.strides.last().is_some_and(|&s| s != 1) && kt.numel() > 1) {
            kt = match self.relayout(kt_id, &kt) {
                Some(v) => v,
                None => self.copy(&kt, format!("{} (kT layout)", self.label(id))),
            };
        }
        let (n, dv) = (out_shape[r - 2], out_shape[r - 1]);
        let dk = *q.shape.last().ok_or_else(bad)?;
        let head = *kt.shape.last().ok_or_else(bad)?;
        let with = |tail: [usize; 2]| [batch.as_slice(), &tail].concat();
        let tail = match tail {
            Some((tk, tv)) => {
                let len = *tk.shape.get(r - 2).ok_or_else(bad)?;
                let k = tk.expand(&with_kv([len, dk])).ok_or_else(bad)?;
                let v = tv.expand(&with_kv([len, dv])).ok_or_else(bad)?;
                Some(KeyTail {
                    k: k.operand(),
                    v: v.operand(),
                    len,
                })
            }
            None => None,
        };
        let m = head + tail.as_ref().map_or(0, |t| t.len);
        let q = q.expand(&with([n, dk])).ok_or_else(bad)?;
        let k = kt
            .expand(&with_kv([dk, head]))
            .and_then(|k| k.transpose(r - 2, r - 1))
            .ok_or_else(bad)?;
        let v = v.expand(&with_kv([head, dv])).ok_or_else(bad)?;
        let mask = self
            .mask_fill(mask, &with([n, m]))?
            .map(|(view, mp)| mp.kernel(view.operand()));
        let score = match extras.score {
            Some((expr, tensors)) => {
                let mut inputs = Vec::new();
                for t in tensors {
                    let view = self.view(t)?.expand(&with([n, m])).ok_or_else(bad)?;
                    inputs.push(view.operand());
                }
                Some(ScoreMod { inputs, expr })
            }
            None => None,
        };
        let out = self.temp(out_shape.clone());
        let a = Attention {
            batch,
            n,
            m,
            dk,
            dv,
            q: q.operand(),
            k: k.operand(),
            v: v.operand(),
            out: out.operand(),
            scale,
            mask,
            block: attention_blocks(n, m, extras.positions.is_some()),
            positions: extras.positions,
            kv_group: group,
            score,
            tail,
            zero_empty_rows: false,
            split: None,
        };
        self.attention_kernel(self.label(id), a);
        Ok(out)
    }

    /// The two parts of a `cat` along the keys: the parts themselves where fusion absorbed
    /// it, else the two slices of the joined tensor.
    fn cat_parts(&mut self, x: ValueId) -> Result<(View, View), PlanError> {
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
    fn concat(&mut self, id: ValueId, seq: ValueId, axis: usize, stack: bool) -> Result<View, PlanError> {
        let Val::Seq(items) = self.val(seq)?.clone() else {
            return Err(internal(format!("node {id}: not a sequence")));
        };
        self.join(id, items, axis, stack)
    }

    /// `items` joined along `axis` (a new one when stacking) into node `id`'s buffer.
    fn join(&mut self, id: ValueId, items: Vec<View>, axis: usize, stack: bool) -> Result<View, PlanError> {
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

    /// Every output gets a buffer of its own: the temporary that holds it when it is whole
    /// and row-major, a copy otherwise.
    fn outputs(&mut self) -> Result<(), PlanError> {
        for (i, o) in self.program.outputs.iter().enumerate() {
            let v = self.view(o.value)?;
            let buf = &self.plan.buffers[v.buf];
            let whole = v.offset == 0 && v.is_contiguous() && v.numel() == buf.len;
            let own = whole && matches!(buf.kind, BufferKind::Temp { .. });
            let buf = if own {
                v.buf
            } else {
                let dest = self.temp(v.shape.clone());
                let label = format!("output {}", o.name);
                self.map(vec![v.operand()], vec![Expr::Input(0)], &dest, label);
                dest.buf
            };
            self.plan.buffers[buf].kind = BufferKind::Output(i);
            self.plan.buffers[buf].name = o.name.clone();
            self.plan.outputs.push((o.name.clone(), buf, v.shape.clone()));
        }
        Ok(())
    }
}

/// `g` (a GEMM whose columns are two halves of `half` columns each, no bias, no epilogue
/// yet) as a GEMM over `half` columns with a last batch axis of 2 for the halves: the
/// shape a paired epilogue reads them in.
fn pair(g: &Gemm, half: usize) -> Option<Gemm> {
    if g.n != 2 * half || g.bias.is_some() || g.epilogue.is_some() || !g.rope.is_empty() {
        return None;
    }
    let r = g.batch.len();
    let mut p = g.clone();
    p.batch.push(2);
    p.n = half;
    p.a.strides.insert(r, 0);
    p.b.strides.insert(r, half * g.b.strides[r + 1]);
    p.c.strides.insert(r, half * g.c.strides[r + 1]);
    // Tiles as for one half alone: a task computes both.
    let mut one = p.clone();
    one.batch.pop();
    for o in [&mut one.a, &mut one.b, &mut one.c] {
        o.strides.remove(r);
    }
    p.block = gemm_blocks(&one);
    Some(p)
}

fn loop_suffix(l: &Lowerer) -> String {
    let mut parts = Vec::new();
    for (s, info) in l.program.dims.iter() {
        if let crate::dims::DimKind::Loop { .. } = info.kind {
            if let Some(Some(v)) = l.dims.get(s) {
                parts.push(format!("{}={v}", info.name));
            }
        }
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!(" [{}]", parts.join(", ")),
    }
}
