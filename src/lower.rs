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

mod attention;
mod flops;
mod fuse;
mod gemm;
mod key_ranges;
mod map;
mod memory;
mod pack;
mod positions;
mod relayout;
mod rope;
mod row;
mod scores;
mod sdpa;
mod split;
mod state;
mod tanh_gelu;
mod tiling;
mod view;

use crate::dims::{Poly, Sym};
use crate::hash::HashMap;
use crate::ir::{BinaryOp, Op, Program, ValueId};
use crate::kernel::{BufId, Buffer, BufferKind, Expr, Kernel, KernelOp, Plan, PlanError};
use crate::size;
use attention::{Extras, KeyOperand, Masking};
pub use flops::source_flops;
use fuse::{Fused, Fusion, Scale, SoftmaxPat};
pub use tiling::{gemm_blocks, PACKED_ROWS};
pub use view::View;

/// Lowers `program` for the dim values `dims` (by [`crate::dims::Sym`], as
/// [`crate::runtime::Bound::dims`] gives them). Errors are internal: a checked program with
/// bound dims always lowers.
pub fn lower(program: &Program, dims: &[Option<i64>]) -> Result<Plan, PlanError> {
    let fusion = fuse::decide(program, dims);
    let mut l = Lowerer {
        program,
        fusion,
        dims: dims.to_vec(),
        vals: HashMap::default(),
        derived: Default::default(),
        plan: Plan::default(),
        users: None,
        ranges: Vec::new(),
        last_write: HashMap::default(),
    };
    for (i, p) in program.params.iter().enumerate() {
        l.source(BufferKind::Param(i), &p.name, &p.shape)?;
    }
    for (i, input) in program.inputs.iter().enumerate() {
        // A state's storage is the tensor of its last version's output (see `state`).
        let output = program.outputs.iter().position(|o| o.state == Some(i));
        let kind = output.map_or(BufferKind::Input(i), |output| BufferKind::State {
            input: i,
            output,
        });
        l.source(kind, &input.name, &input.shape)?;
    }
    let body = rope::tables_first(program, &program.body, &l.fusion);
    l.nodes(&body)?;
    l.outputs()?;
    l.pack_weights();
    l.plan.flops = l.plan.kernels.iter().map(|k| k.op.flops()).sum();
    memory::plan(&mut l.plan);
    l.plan.validate()?;
    Ok(l.plan)
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
    derived: crate::hash::HashSet<BufId>,
    plan: Plan,
    /// The users of every node, made when a state's write first needs them.
    users: Option<std::rc::Rc<Vec<Vec<ValueId>>>>,
    /// Key-range tables already computed, with the number of kernels the plan had then
    /// (`key_ranges.rs`): a later attention of the same mask reads the same table.
    ranges: Vec<(crate::kernel::KeyRanges, usize)>,
    /// The last kernel of the plan that writes each buffer, by index: whether a table of
    /// key ranges is still valid, without walking the kernels made since.
    last_write: HashMap<BufId, usize>,
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
        let at = self.plan.kernels.len();
        self.last_write
            .extend(ops.iter().filter(|o| o.2).map(|o| (o.0.buf, at)));
        self.plan.kernels.push(Kernel { label, op });
    }

    /// Kernel `k` made again as `kernel` (a GEMM given an epilogue or a rotation), which
    /// writes what it wrote and may write more.
    fn remake_kernel(&mut self, k: usize, kernel: Kernel) {
        for (o, _, written) in kernel.op.operands() {
            if written {
                let last = self.last_write.entry(o.buf).or_insert(k);
                *last = (*last).max(k);
            }
        }
        self.plan.kernels[k] = kernel;
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
            Op::StepSlice {
                axis,
                start,
                step,
                len,
            } => {
                let (s, n) = (self.size(start)?, self.size(len)?);
                let step = usize::try_from(*step).map_err(|_| bad())?;
                tensor(self.view(arg(0))?.step(*axis, s, step, n))
            }
            Op::Select { axis, index } => {
                let i = self.size(index)?;
                tensor(self.view(arg(0))?.select(*axis, i))
            }
            Op::View(sizes) | Op::Reshape(sizes) => self.reshaped(id, arg(0), sizes).map(Val::Tensor),
            Op::Contiguous => self.contiguous(id, arg(0)).map(Val::Tensor),
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
            Op::Softmax(axis) => self.softmax_node(id, *axis, arg(0)).map(Val::Tensor),
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
            Op::CatLoop(axis) => self.concat(id, arg(0), *axis, false).map(Val::Tensor),
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
            // `runtime::hoist` takes every gather out of a program before it is lowered.
            Op::Gather => Err(internal(format!(
                "node {id} is a gather, which runs before the plan"
            ))),
            Op::IndexCopy { axis, starts, ends } => {
                self.index_copy(id, &args, *axis, (starts, ends)).map(Val::Tensor)
            }
            Op::Cat(axis) => {
                let items = args
                    .iter()
                    .map(|&a| self.view(a))
                    .collect::<Result<Vec<_>, _>>()?;
                self.join(id, items, *axis, false).map(Val::Tensor)
            }
        }
    }

    /// A `view` or `reshape`: a view of the operand, or of a row-major copy of it where
    /// its strides allow none.
    fn reshaped(&mut self, id: ValueId, x: ValueId, sizes: &[Poly]) -> Result<View, PlanError> {
        let sizes = self.sizes(sizes)?;
        let x = self.view(x)?;
        match x.reshape(&sizes) {
            Some(v) => Ok(v),
            None => {
                let copy = self.copy(&x, self.label(id));
                copy.reshape(&sizes)
                    .ok_or_else(|| internal(format!("node {id} does not fit its op")))
            }
        }
    }

    /// A `contiguous`: the operand itself where it is row-major, else the operand laid out
    /// again by its producer, else a copy.
    fn contiguous(&mut self, id: ValueId, x: ValueId) -> Result<View, PlanError> {
        let view = self.view(x)?;
        if view.is_contiguous() {
            return Ok(view);
        }
        match self.relayout(x, &view) {
            Some(v) => Ok(v),
            None => Ok(self.copy(&view, self.label(id))),
        }
    }

    /// A softmax, with the scale and mask the fusion pass found it absorbs.
    fn softmax_node(&mut self, id: ValueId, axis: usize, x: ValueId) -> Result<View, PlanError> {
        let pat = match self.fusion.fused.get(&id) {
            Some(Fused::Softmax(p)) => *p,
            _ => SoftmaxPat {
                x,
                scale: None,
                mask: None,
            },
        };
        let (x, scale, mask) = self.resolve(pat)?;
        self.softmax(id, axis, x, scale, mask)
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

    /// Every output gets a buffer of its own: the temporary that holds it when it is whole
    /// and row-major, a copy otherwise.
    fn outputs(&mut self) -> Result<(), PlanError> {
        for (i, o) in self.program.outputs.iter().enumerate() {
            let v = self.view(o.value)?;
            if o.state.is_some() {
                // Every version of a state is its buffer, written in place.
                let buf = &self.plan.buffers[v.buf];
                let own = matches!(buf.kind, BufferKind::State { output, .. } if output == i);
                if !own || v.offset != 0 || v.numel() != buf.len {
                    return Err(internal(format!("state `{}` ends outside its buffer", o.name)));
                }
                self.plan.outputs.push((o.name.clone(), v.buf, v.shape.clone()));
                continue;
            }
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
