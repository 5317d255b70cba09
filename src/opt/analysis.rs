//! The e-class analysis: what every class's value is, so that rules can check shapes.
//!
//! A class's [`Data`] holds its value's symbolic shape and dtype (or a sequence's item
//! type and length, or an attribute's leaf), a constant for rank-0 values that have one,
//! the loop variables the value depends on, and whether it can be computed from the params
//! alone, once, when the weights are loaded. Shapes are an invariant of a class: two
//! classes whose shapes differ are never merged by a rule (see `rules::Computed`), and a
//! merge that would do it anyway is counted in [`Ctx::conflicts`] and makes `optimize`
//! return the source program.
//!
//! Strides are not an invariant of a class (`x` and `x.contiguous()` are one value in
//! two layouts): they are a property of the term chosen for each class, decided by
//! extraction (see `cost` and `convert`).

use super::lang::Tensor;
use crate::dims::{DimKind, DimTable, Poly, Sym};
use crate::ir::{BinaryOp, DType, ReduceOp, UnaryOp};
use crate::shape;
use egg::{Analysis, DidMerge, EGraph, Id, Language};

/// The egraph of the optimizer.
pub type EG = EGraph<Tensor, Ctx>;

/// A tensor value's type: a symbolic shape and a dtype. Strides are not part of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Ty {
    pub shape: Vec<Poly>,
    pub dtype: DType,
}

impl Ty {
    pub fn f32(shape: Vec<Poly>) -> Ty {
        Ty {
            shape,
            dtype: DType::F32,
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// What a class is.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// An attribute leaf (an axis, a float, a dim, a shape, `none`): the node itself.
    Attr(Tensor),
    Value(Ty),
    /// The value of a `for`: `len` items of type `item`.
    Seq {
        item: Ty,
        len: Poly,
    },
    /// The root that lists the outputs.
    Outputs,
    /// A node whose operands do not fit it. The converter never makes one, and rules
    /// refuse to add one.
    Invalid,
}

/// The analysis data of a class.
#[derive(Clone, Debug, PartialEq)]
pub struct Data {
    pub kind: Kind,
    /// The value of a rank-0 constant (`sqrt(Dk)`, `-1e9`).
    pub konst: Option<f64>,
    /// The loop variables (dim indices) the value depends on, sorted.
    pub deps: Vec<Sym>,
    /// Computed from params and constants only: a backend can evaluate it at load time.
    pub load_time: bool,
    /// The params a load-time value is computed from, sorted (orders merged weights).
    pub params: Vec<usize>,
}

impl Data {
    fn of(kind: Kind) -> Data {
        Data {
            kind,
            konst: None,
            deps: Vec::new(),
            load_time: true,
            params: Vec::new(),
        }
    }

    /// The tensor type, when this is a tensor value.
    pub fn ty(&self) -> Option<&Ty> {
        match &self.kind {
            Kind::Value(t) => Some(t),
            _ => None,
        }
    }

    pub fn shape(&self) -> Option<&[Poly]> {
        self.ty().map(|t| t.shape.as_slice())
    }

    pub fn rank(&self) -> Option<usize> {
        self.ty().map(Ty::rank)
    }

    pub fn leaf(&self) -> Option<&Tensor> {
        match &self.kind {
            Kind::Attr(t) => Some(t),
            _ => None,
        }
    }

    pub fn int(&self) -> Option<i64> {
        self.leaf()?.as_int()
    }

    pub fn axis(&self) -> Option<usize> {
        usize::try_from(self.int()?).ok()
    }

    pub fn float(&self) -> Option<f64> {
        self.leaf()?.as_float()
    }

    pub fn dim(&self) -> Option<&Poly> {
        self.leaf()?.as_dim()
    }

    pub fn shape_attr(&self) -> Option<&[Poly]> {
        self.leaf()?.as_shape()
    }

    pub fn is_none(&self) -> bool {
        matches!(self.kind, Kind::Attr(Tensor::None))
    }

    pub fn depends_on(&self, var: Sym) -> bool {
        self.deps.contains(&var)
    }
}

/// The analysis: the program's dims (for proofs about shapes) and what went wrong.
#[derive(Debug, Default)]
pub struct Ctx {
    pub dims: DimTable,
    /// Merges of classes whose shapes differ: a rule bug, never expected.
    pub conflicts: usize,
    /// Rule applications refused because the right side's shape would differ.
    pub refused: usize,
    /// The layouts of elementwise results already worked out (see `layout::lay_out`).
    pub layouts: super::layout::Memo,
}

impl Ctx {
    pub fn new(dims: DimTable) -> Ctx {
        Ctx {
            dims,
            ..Ctx::default()
        }
    }

    /// Whether the table knows every symbol of `p` (hand-written test terms may not).
    fn known(&self, p: &Poly) -> bool {
        p.syms().iter().all(|&s| s < self.dims.len())
    }

    /// `a == b` for every value of the free dims.
    pub fn equal(&self, a: &Poly, b: &Poly) -> bool {
        a == b || (self.known(a) && self.known(b) && self.dims.equal(a, b))
    }

    pub fn same_shape(&self, a: &[Poly], b: &[Poly]) -> bool {
        shape::same_shape(self, a, b)
    }

    /// `a / b`, proved exact.
    pub fn div(&self, a: &Poly, b: &Poly) -> Option<Poly> {
        if !(self.known(a) && self.known(b)) {
            return (a == b).then(|| Poly::int(1));
        }
        self.dims.div(a, b).ok()
    }

    /// Whether dim `s` is a loop variable (unknown symbols of test terms count as such).
    pub fn is_loop(&self, s: Sym) -> bool {
        s >= self.dims.len() || matches!(self.dims.info(s).kind, DimKind::Loop { .. })
    }

    /// The loop variable `p` is, when it is exactly one.
    pub fn loop_var(&self, p: &Poly) -> Option<Sym> {
        let s = *p.syms().first()?;
        (*p == Poly::sym(s) && self.is_loop(s)).then_some(s)
    }

    /// The value of a constant dim expression.
    pub fn const_of(&self, p: &Poly) -> Option<i64> {
        match self.known(p) {
            true => self.dims.with_consts(p).as_int(),
            false => p.as_int(),
        }
    }

    fn loop_syms(&self, p: &Poly) -> Vec<Sym> {
        p.syms().into_iter().filter(|&s| self.is_loop(s)).collect()
    }

    /// PyTorch broadcasting, as [`shape::broadcast`] with this analysis' proofs.
    pub fn broadcast(&self, a: &[Poly], b: &[Poly]) -> Option<Vec<Poly>> {
        shape::broadcast(self, a, b).ok()
    }

    /// Computes the data of `node` from its children's data; [`Analysis::make`] and the
    /// rules' dry runs of a right side both use it.
    pub fn compute<'a>(&self, node: &Tensor, child: impl Fn(Id) -> &'a Data) -> Data {
        let kids: Vec<&Data> = node.children().iter().map(|&c| child(c)).collect();
        let mut data = Data::of(self.kind(node, &kids).unwrap_or(Kind::Invalid));
        for k in &kids {
            data.deps.extend(&k.deps);
            data.load_time &= k.load_time;
            data.params.extend(&k.params);
        }
        match node {
            Tensor::Dim(d) => data.deps.extend(self.loop_syms(&d.0)),
            Tensor::Shape(s) => data.deps.extend(s.0.iter().flat_map(|p| self.loop_syms(p))),
            Tensor::Input(_) => data.load_time = false,
            Tensor::Param(_) => data.params.extend(kids[0].int().map(|i| i as usize)),
            Tensor::For(_) => {
                let var = kids[0].int().map(|v| v as usize);
                data.deps.retain(|&d| Some(d) != var);
            }
            _ => {}
        }
        data.deps.sort_unstable();
        data.deps.dedup();
        data.params.sort_unstable();
        data.params.dedup();
        data.konst = self.konst(node, &kids);
        data
    }

    /// The constant value of a rank-0 node whose operands are constants.
    fn konst(&self, node: &Tensor, kids: &[&Data]) -> Option<f64> {
        let k = |i: usize| kids.get(i).and_then(|d| d.konst);
        match node {
            Tensor::Literal(_) => kids[0].float(),
            Tensor::DimValue(_) => self.const_of(kids[0].dim()?).map(|v| v as f64),
            Tensor::Unary(op, _) => Some(fold_unary(*op, k(0)?)),
            Tensor::Binary(op, _) => Some(fold_binary(*op, k(0)?, k(1)?)),
            Tensor::Scale(_) => Some(k(0)? * kids[1].float()?),
            _ => None,
        }
    }

    /// The kind of a node's value, or `None` when its operands do not fit it: one arm per
    /// node, so a new node is a compile error here; each shape rule is
    /// [`shape`]'s, as the checker applies it.
    fn kind(&self, node: &Tensor, k: &[&Data]) -> Option<Kind> {
        use Tensor as T;
        let shape = |i: usize| k[i].shape();
        let value = |shape: Vec<Poly>| Some(Kind::Value(Ty::f32(shape)));
        let same = |i: usize| Some(Kind::Value(Ty::f32(k[i].shape()?.to_vec())));
        let keeps = |i: usize, shape: Vec<Poly>| {
            Some(Kind::Value(Ty {
                shape,
                dtype: k[i].ty()?.dtype,
            }))
        };
        match node {
            T::None | T::Int(_) | T::Float(_) | T::Dim(_) | T::Shape(_) => Some(Kind::Attr(node.clone())),
            T::Param(_) | T::Input(_) => k[0].int().and_then(|_| value(k[1].shape_attr()?.to_vec())),
            T::Literal(_) => k[0].float().and_then(|_| value(vec![])),
            T::DimValue(_) => k[0].dim().and_then(|_| value(vec![])),
            T::Linear(_) => value(shape::linear(self, shape(0)?, shape(1)?, optional(k[2])?).ok()?),
            T::MatMul(_) => value(shape::matmul(self, shape(0)?, shape(1)?).ok()?),
            T::Transpose(_) => keeps(0, shape::transposed(shape(0)?, k[1].axis()?, k[2].axis()?)?),
            T::Permute(_) => keeps(
                0,
                shape::permuted(shape(0)?, &perm_of(k[1].shape_attr()?, shape(0)?.len())?),
            ),
            T::Reshape(_) => self.reshape_kind(k),
            T::Contiguous(_) => Some(Kind::Value(k[0].ty()?.clone())),
            T::Expand(_) => self.expand_kind(k),
            T::Unsqueeze(_) => keeps(0, shape::unsqueezed(self, shape(0)?, k[1].axis()?)?),
            T::Squeeze(_) => self.squeeze_kind(k),
            T::Where(_) => self.where_kind(k),
            T::Tri(_) => (shape(0)?.len() >= 2).then(|| Some(Kind::Value(k[0].ty()?.clone())))?,
            T::Fill(_) => value(k[1].shape_attr()?.to_vec()),
            T::Arange(_) => {
                (k[0].dim().is_some() && k[1].dim().is_some()).then(|| value(k[2].shape_attr()?.to_vec()))?
            }
            T::Reduce(op, _) => {
                let shape = shape::reduced(self, shape(0)?, &axes_of(k[1].shape_attr()?), k[2].int()? == 1);
                // A sum counts (float32 here, as int64 is); a maximum keeps a boolean's dtype.
                match op {
                    ReduceOp::Sum => value(shape),
                    ReduceOp::Max | ReduceOp::Min => keeps(0, shape),
                }
            }
            T::Softmax(_) => (k[1].axis()? < shape(0)?.len()).then(|| same(0))?,
            T::MaskedFill(_) => {
                (k[1].ty()?.dtype == DType::Bool && shape(2)?.is_empty()).then_some(())?;
                keeps(0, self.broadcast(shape(0)?, shape(1)?)?)
            }
            T::Unary(op, _) => Some(Kind::Value(Ty {
                shape: shape(0)?.to_vec(),
                dtype: logical_dtype(op.is_logical()),
            })),
            T::Binary(op, _) => Some(Kind::Value(Ty {
                shape: self.broadcast(shape(0)?, shape(1)?)?,
                dtype: logical_dtype(op.is_logical()),
            })),
            T::Eq(_) | T::Ne(_) | T::Lt(_) | T::Le(_) | T::Gt(_) | T::Ge(_) => Some(Kind::Value(Ty {
                shape: self.broadcast(shape(0)?, shape(1)?)?,
                dtype: DType::Bool,
            })),
            T::Slice(_) => self.slice_kind(k),
            T::StepSlice(_) => self.step_slice_kind(k),
            T::Select(_) => keeps(
                0,
                k[2].dim().and_then(|_| shape::dropped(shape(0)?, k[1].axis()?))?,
            ),
            T::For(_) => {
                k[0].int()?;
                let len = k[2].dim()?.sub(k[1].dim()?);
                Some(Kind::Seq {
                    item: k[3].ty()?.clone(),
                    len,
                })
            }
            T::CatLoop(_) => join_kind(self, k, false),
            T::Stack(_) => join_kind(self, k, true),
            T::Scale(_) => k[1].float().and_then(|_| same(0)),
            T::IndexCopy(_) => self.index_copy_kind(k),
            T::Gemm(_) => self.gemm_kind(k),
            T::MaskedSoftmax(_) => self.masked_softmax_kind(k),
            T::Attention(_) => self.attention_kind(k),
            T::ScoredAttention(_) => self.scored_attention_kind(k),
            T::Sdpa(_) => self.sdpa_kind(k),
            T::Cat(_) => {
                let parts: Option<Vec<&[Poly]>> = k[1..].iter().map(|d| d.shape()).collect();
                keeps(1, shape::cat(self, k[0].axis()?, &parts?).ok()?)
            }
            T::Outputs(_) => k.iter().all(|d| d.ty().is_some()).then_some(Kind::Outputs),
        }
    }

    /// `reshape(x, shape)`: the element count kept.
    fn reshape_kind(&self, k: &[&Data]) -> Option<Kind> {
        let (t, new) = (k[0].ty()?, k[1].shape_attr()?);
        shape::keeps_count(self, &t.shape, new).then_some(())?;
        Some(Kind::Value(Ty {
            shape: new.to_vec(),
            dtype: t.dtype,
        }))
    }

    /// `expand(x, shape)`: each of `x`'s axes, aligned from the right, broadcasts to the new.
    fn expand_kind(&self, k: &[&Data]) -> Option<Kind> {
        let (t, new) = (k[0].ty()?, k[1].shape_attr()?);
        let pad = new.len().checked_sub(t.rank())?;
        let fits = |(a, b): (&Poly, &Poly)| shape::broadcasts_to(self, a, b);
        t.shape.iter().zip(&new[pad..]).all(fits).then_some(())?;
        Some(Kind::Value(Ty {
            shape: new.to_vec(),
            dtype: t.dtype,
        }))
    }

    /// `squeeze(x, axis)`: the axis dropped where it is 1, `x` as it is otherwise.
    fn squeeze_kind(&self, k: &[&Data]) -> Option<Kind> {
        let mut t = k[0].ty()?.clone();
        let a = k[1].axis()?;
        if shape::squeezes(self, t.shape.get(a)?) == Some(true) {
            t.shape = shape::dropped(&t.shape, a)?;
        }
        Some(Kind::Value(t))
    }

    fn where_kind(&self, k: &[&Data]) -> Option<Kind> {
        let (c, a, b) = (k[0].ty()?, k[1].ty()?, k[2].ty()?);
        (c.dtype == DType::Bool).then_some(())?;
        let s = self.broadcast(&c.shape, &a.shape)?;
        Some(Kind::Value(Ty {
            shape: self.broadcast(&s, &b.shape)?,
            dtype: logical_dtype(a.dtype == DType::Bool && b.dtype == DType::Bool),
        }))
    }

    fn slice_kind(&self, k: &[&Data]) -> Option<Kind> {
        let mut t = k[0].ty()?.clone();
        let a = k[1].axis()?;
        let (start, end) = (k[2].dim()?, k[3].dim()?);
        t.shape = shape::sliced(&t.shape, a, end.sub(start))?;
        Some(Kind::Value(t))
    }

    /// `x[.., start : end : step, ..]`: the length on the axis is the node's own.
    fn step_slice_kind(&self, k: &[&Data]) -> Option<Kind> {
        let mut t = k[0].ty()?.clone();
        let a = k[1].axis()?;
        k[2].dim()?;
        (k[3].int()? > 0).then_some(())?;
        t.shape = shape::sliced(&t.shape, a, k[4].dim()?.clone())?;
        Some(Kind::Value(t))
    }

    fn index_copy_kind(&self, k: &[&Data]) -> Option<Kind> {
        let x = k[0].ty()?;
        let rank = x.rank();
        (k[3].axis()? < rank && k[4].shape_attr()?.len() == rank).then_some(())?;
        (k[5].shape_attr()?.len() == rank && k[2].shape()?.len() == rank).then_some(())?;
        Some(Kind::Value(Ty::f32(x.shape.clone())))
    }

    fn gemm_kind(&self, k: &[&Data]) -> Option<Kind> {
        let (ta, tb) = (flag(k[3])?, flag(k[4])?);
        k[5].float()?;
        let s = shape::gemm(self, k[0].shape()?, k[1].shape()?, ta, tb)?;
        if !k[2].is_none() {
            let b = k[2].shape()?;
            (b.len() == 1 && self.equal(&b[0], s.last()?)).then_some(())?;
        }
        Some(Kind::Value(Ty::f32(s)))
    }

    fn masked_softmax_kind(&self, k: &[&Data]) -> Option<Kind> {
        (k[2].float().is_some() && k[3].float().is_some()).then_some(())?;
        let x = k[0].shape()?;
        (!x.is_empty()).then_some(())?;
        self.mask_fits(k[1], x)?;
        Some(Kind::Value(Ty::f32(x.to_vec())))
    }

    fn attention_kind(&self, k: &[&Data]) -> Option<Kind> {
        (k[4].float().is_some() && k[5].float().is_some()).then_some(())?;
        let scores = shape::gemm(self, k[0].shape()?, k[1].shape()?, false, true)?;
        self.mask_fits(k[3], &scores)?;
        let out = shape::gemm(self, &scores, k[2].shape()?, false, false)?;
        Some(Kind::Value(Ty::f32(out)))
    }

    fn scored_attention_kind(&self, k: &[&Data]) -> Option<Kind> {
        (k[3].float().is_some() && k[4].float().is_some()).then_some(())?;
        let scores = k[0].shape()?;
        (scores.len() >= 2).then_some(())?;
        self.mask_fits(k[2], scores)?;
        let out = shape::gemm(self, scores, k[1].shape()?, false, false)?;
        Some(Kind::Value(Ty::f32(out)))
    }

    fn sdpa_kind(&self, k: &[&Data]) -> Option<Kind> {
        let gqa = k[6].int()? == 1;
        k[5].int()?;
        let (q, kk, v) = (k[0].shape()?, k[1].shape()?, k[2].shape()?);
        let (rq, rk, rv) = (q.len(), kk.len(), v.len());
        (rq >= 2 && rk >= 2 && rv >= 2 && k[3].shape()?.is_empty()).then_some(())?;
        let batch = self.broadcast(&q[..rq - 2], &shape::read_heads(q, kk, gqa)?)?;
        let mut out = self.broadcast(&batch, &shape::read_heads(q, v, gqa)?)?;
        out.extend([q[rq - 2].clone(), v[rv - 1].clone()]);
        Some(Kind::Value(Ty::f32(out)))
    }

    /// `Some` when `mask` is absent, or a bool tensor that broadcasts to `shape`.
    fn mask_fits(&self, mask: &Data, shape: &[Poly]) -> Option<()> {
        if mask.is_none() {
            return Some(());
        }
        let m = mask.ty()?;
        let b = self.broadcast(shape, &m.shape)?;
        (m.dtype == DType::Bool && self.same_shape(&b, shape)).then_some(())
    }
}

/// A 0/1 flag attribute.
/// A constant primitive: the seed's arithmetic in f64 (as scales and alphas always were),
/// every other primitive through its f32 meaning in the op table.
fn fold_unary(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Exp => x.exp(),
        _ => f64::from(op.eval(x as f32)),
    }
}

fn fold_binary(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        _ => f64::from(op.eval(a as f32, b as f32)),
    }
}

fn flag(d: &Data) -> Option<bool> {
    match d.int()? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// An optional operand: `Some(None)` when absent, `Some(Some(shape))` for a tensor,
/// `None` for anything else.
fn optional(d: &Data) -> Option<Option<&[Poly]>> {
    match d.is_none() {
        true => Some(None),
        false => Some(Some(d.shape()?)),
    }
}

/// The axes of a reduction's attribute; an entry that is no axis matches none.
fn axes_of(axes: &[Poly]) -> Vec<usize> {
    axes.iter()
        .map(|p| {
            p.as_int()
                .and_then(|a| usize::try_from(a).ok())
                .unwrap_or(usize::MAX)
        })
        .collect()
}

/// `concat` or `stack` of a `for`'s items along an axis attribute.
fn join_kind(ctx: &Ctx, k: &[&Data], stack: bool) -> Option<Kind> {
    let Kind::Seq { item, len } = &k[0].kind else {
        return None;
    };
    let shape = shape::joined(ctx, &item.shape, len, k[1].axis()?, stack)?;
    Some(Kind::Value(Ty {
        shape,
        dtype: item.dtype,
    }))
}

/// The axes of a `permute` attribute, when they are a permutation of `0..rank`.
pub fn perm_of(axes: &[Poly], rank: usize) -> Option<Vec<usize>> {
    let axes: Option<Vec<usize>> = axes.iter().map(|p| usize::try_from(p.as_int()?).ok()).collect();
    let axes = axes?;
    shape::is_permutation(&axes, rank).then_some(axes)
}

impl shape::Sizes for Ctx {
    type Size = Poly;

    fn same(&self, a: &Poly, b: &Poly) -> bool {
        self.equal(a, b)
    }

    fn is_one(&self, a: &Poly) -> bool {
        self.const_of(a) == Some(1)
    }

    fn never_one(&self, a: &Poly) -> bool {
        match self.known(a) {
            true => self.dims.never_one(a),
            false => a.as_int().is_some_and(|c| c != 1),
        }
    }

    fn one(&self) -> Poly {
        Poly::int(1)
    }

    fn add(&self, a: &Poly, b: &Poly) -> Poly {
        a.add(b)
    }

    fn mul(&self, a: &Poly, b: &Poly) -> Poly {
        a.mul(b)
    }
}

impl Analysis<Tensor> for Ctx {
    type Data = Data;

    fn make(egraph: &mut EG, enode: &Tensor, _id: Id) -> Data {
        egraph.analysis.compute(enode, |c| &egraph[c].data)
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        let before = a.clone();
        let same_kind = match (&a.kind, &b.kind) {
            (Kind::Value(x), Kind::Value(y)) => x.dtype == y.dtype && self.same_shape(&x.shape, &y.shape),
            (Kind::Seq { item: x, len: l }, Kind::Seq { item: y, len: m }) => {
                x.dtype == y.dtype && self.same_shape(&x.shape, &y.shape) && self.equal(l, m)
            }
            (x, y) => x == y,
        };
        if !same_kind {
            self.conflicts += 1;
        }
        a.konst = a.konst.or(b.konst);
        // A value equal to a loop-invariant term is loop-invariant.
        a.deps.retain(|d| b.deps.contains(d));
        if !a.load_time && b.load_time {
            a.params = b.params.clone();
        }
        a.load_time |= b.load_time;
        let changed_a = *a != before;
        let changed_b = a.konst != b.konst || a.deps != b.deps || a.load_time != b.load_time;
        DidMerge(changed_a, changed_b)
    }
}

/// The dtype of a result that is boolean when `logical` holds, float32 otherwise.
fn logical_dtype(logical: bool) -> DType {
    if logical {
        DType::Bool
    } else {
        DType::F32
    }
}
