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
use crate::ir::{BinaryOp, DType, UnaryOp};
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
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| self.equal(x, y))
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

    /// PyTorch broadcasting: axes aligned from the right, equal or provably 1 (as the
    /// checker decides it).
    pub fn broadcast(&self, a: &[Poly], b: &[Poly]) -> Option<Vec<Poly>> {
        let n = a.len().max(b.len());
        (0..n)
            .map(|i| {
                let da = (i + a.len()).checked_sub(n).map(|j| &a[j]);
                let db = (i + b.len()).checked_sub(n).map(|j| &b[j]);
                match (da, db) {
                    (Some(p), None) | (None, Some(p)) => Some(p.clone()),
                    (Some(p), Some(q)) if self.const_of(q) == Some(1) || self.equal(p, q) => Some(p.clone()),
                    (Some(p), Some(q)) if self.const_of(p) == Some(1) => Some(q.clone()),
                    _ => None,
                }
            })
            .collect()
    }

    /// The shape of `torch.matmul(a, b)`, vectors promoted and their axis dropped.
    pub fn matmul_shape(&self, a: &[Poly], b: &[Poly]) -> Option<Vec<Poly>> {
        if a.is_empty() || b.is_empty() {
            return None;
        }
        let one = Poly::int(1);
        let pa = if a.len() == 1 {
            vec![one.clone(), a[0].clone()]
        } else {
            a.to_vec()
        };
        let pb = if b.len() == 1 {
            vec![b[0].clone(), one]
        } else {
            b.to_vec()
        };
        let (ra, rb) = (pa.len(), pb.len());
        if !self.equal(&pa[ra - 1], &pb[rb - 2]) {
            return None;
        }
        let mut shape = self.broadcast(&pa[..ra - 2], &pb[..rb - 2])?;
        if a.len() > 1 {
            shape.push(pa[ra - 2].clone());
        }
        if b.len() > 1 {
            shape.push(pb[rb - 1].clone());
        }
        Some(shape)
    }

    /// The shape of a GEMM of `a` and `b` (rank 2 or more) after their transpose flags.
    pub fn gemm_shape(&self, a: &[Poly], b: &[Poly], ta: bool, tb: bool) -> Option<Vec<Poly>> {
        let flip = |s: &[Poly], t: bool| {
            let mut s = s.to_vec();
            let r = s.len();
            if t && r >= 2 {
                s.swap(r - 2, r - 1);
            }
            s
        };
        (a.len() >= 2 && b.len() >= 2).then_some(())?;
        self.matmul_shape(&flip(a, ta), &flip(b, tb))
    }

    /// The product of a shape's sizes.
    pub fn numel(shape: &[Poly]) -> Poly {
        shape.iter().fold(Poly::int(1), |acc, d| acc.mul(d))
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

    /// The kind of a node's value, or `None` when its operands do not fit it.
    fn kind(&self, node: &Tensor, k: &[&Data]) -> Option<Kind> {
        use Tensor as T;
        let ty = |i: usize| k[i].ty();
        let shape = |i: usize| k[i].shape();
        let value = |shape: Vec<Poly>| Some(Kind::Value(Ty::f32(shape)));
        let same = |i: usize| Some(Kind::Value(Ty::f32(k[i].shape()?.to_vec())));
        match node {
            T::None | T::Int(_) | T::Float(_) | T::Dim(_) | T::Shape(_) => Some(Kind::Attr(node.clone())),
            T::Param(_) | T::Input(_) => {
                k[0].int()?;
                value(k[1].shape_attr()?.to_vec())
            }
            T::Literal(_) => k[0].float().and_then(|_| value(vec![])),
            T::DimValue(_) => k[0].dim().and_then(|_| value(vec![])),
            T::Linear(_) => {
                let (x, w) = (shape(0)?, shape(1)?);
                let (i, lead) = x.split_last()?;
                let [o, wi] = w else { return None };
                (self.equal(i, wi)).then_some(())?;
                if !k[2].is_none() {
                    let b = shape(2)?;
                    (b.len() == 1 && self.equal(&b[0], o)).then_some(())?;
                }
                value([lead, std::slice::from_ref(o)].concat())
            }
            T::MatMul(_) => value(self.matmul_shape(shape(0)?, shape(1)?)?),
            T::Transpose(_) => {
                let mut s = shape(0)?.to_vec();
                let (a, b) = (k[1].axis()?, k[2].axis()?);
                (a < s.len() && b < s.len()).then_some(())?;
                s.swap(a, b);
                Some(Kind::Value(Ty {
                    shape: s,
                    dtype: ty(0)?.dtype,
                }))
            }
            T::Permute(_) => {
                let s = shape(0)?;
                let axes = perm_of(k[1].shape_attr()?, s.len())?;
                let shape = axes.iter().map(|&a| s[a].clone()).collect();
                Some(Kind::Value(Ty {
                    shape,
                    dtype: ty(0)?.dtype,
                }))
            }
            T::Reshape(_) => {
                let (s, new) = (shape(0)?, k[1].shape_attr()?);
                self.equal(&Ctx::numel(s), &Ctx::numel(new)).then_some(())?;
                Some(Kind::Value(Ty {
                    shape: new.to_vec(),
                    dtype: ty(0)?.dtype,
                }))
            }
            T::Contiguous(_) => Some(Kind::Value(ty(0)?.clone())),
            T::Expand(_) => {
                let (s, new) = (shape(0)?, k[1].shape_attr()?);
                let pad = new.len().checked_sub(s.len())?;
                let fits = |(a, b): (&Poly, &Poly)| self.equal(a, b) || self.const_of(a) == Some(1);
                s.iter().zip(&new[pad..]).all(fits).then_some(())?;
                Some(Kind::Value(Ty {
                    shape: new.to_vec(),
                    dtype: ty(0)?.dtype,
                }))
            }
            T::Unsqueeze(_) => {
                let mut t = ty(0)?.clone();
                let a = k[1].axis()?;
                (a <= t.rank()).then_some(())?;
                t.shape.insert(a, Poly::int(1));
                Some(Kind::Value(t))
            }
            T::Squeeze(_) => {
                let mut t = ty(0)?.clone();
                let a = k[1].axis()?;
                if self.const_of(t.shape.get(a)?) == Some(1) {
                    t.shape.remove(a);
                }
                Some(Kind::Value(t))
            }
            T::Where(_) => {
                (ty(0)?.dtype == DType::Bool).then_some(())?;
                let s = self.broadcast(shape(0)?, shape(1)?)?;
                Some(Kind::Value(Ty {
                    shape: self.broadcast(&s, shape(2)?)?,
                    dtype: logical_dtype(ty(1)?.dtype == DType::Bool && ty(2)?.dtype == DType::Bool),
                }))
            }
            T::Tri(_) => (shape(0)?.len() >= 2).then(|| Some(Kind::Value(ty(0)?.clone())))?,
            T::Fill(_) => Some(Kind::Value(Ty {
                shape: k[1].shape_attr()?.to_vec(),
                dtype: DType::F32,
            })),
            T::Arange(_) => {
                (k[0].dim().is_some() && k[1].dim().is_some()).then_some(())?;
                value(k[2].shape_attr()?.to_vec())
            }
            T::Reduce(..) => {
                let t = ty(0)?;
                let axes = k[1].shape_attr()?;
                let keepdim = k[2].int()? == 1;
                let mut shape = Vec::new();
                for (a, size) in t.shape.iter().enumerate() {
                    let reduced = axes.iter().any(|p| p.as_int() == Some(a as i64));
                    match (reduced, keepdim) {
                        (false, _) => shape.push(size.clone()),
                        (true, true) => shape.push(Poly::int(1)),
                        (true, false) => {}
                    }
                }
                Some(Kind::Value(Ty {
                    shape,
                    dtype: DType::F32,
                }))
            }
            T::Softmax(_) => {
                (k[1].axis()? < shape(0)?.len()).then_some(())?;
                same(0)
            }
            T::MaskedFill(_) => {
                (ty(1)?.dtype == DType::Bool && shape(2)?.is_empty()).then_some(())?;
                let s = self.broadcast(shape(0)?, shape(1)?)?;
                Some(Kind::Value(Ty {
                    shape: s,
                    dtype: ty(0)?.dtype,
                }))
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
            T::Slice(_) => {
                let mut t = ty(0)?.clone();
                let a = k[1].axis()?;
                let (start, end) = (k[2].dim()?, k[3].dim()?);
                (a < t.rank()).then_some(())?;
                t.shape[a] = end.sub(start);
                Some(Kind::Value(t))
            }
            T::StepSlice(_) => {
                let mut t = ty(0)?.clone();
                let a = k[1].axis()?;
                k[2].dim()?;
                (k[3].int()? > 0).then_some(())?;
                (a < t.rank()).then_some(())?;
                t.shape[a] = k[4].dim()?.clone();
                Some(Kind::Value(t))
            }
            T::Select(_) => {
                let mut t = ty(0)?.clone();
                let a = k[1].axis()?;
                k[2].dim()?;
                (a < t.rank()).then_some(())?;
                t.shape.remove(a);
                Some(Kind::Value(t))
            }
            T::For(_) => {
                k[0].int()?;
                let len = k[2].dim()?.sub(k[1].dim()?);
                Some(Kind::Seq {
                    item: ty(3)?.clone(),
                    len,
                })
            }
            T::CatLoop(_) | T::Stack(_) => {
                let Kind::Seq { item, len } = &k[0].kind else {
                    return None;
                };
                let a = k[1].axis()?;
                let mut t = item.clone();
                match node {
                    T::CatLoop(_) => {
                        (a < t.rank()).then_some(())?;
                        t.shape[a] = t.shape[a].mul(len);
                    }
                    _ => {
                        (a <= t.rank()).then_some(())?;
                        t.shape.insert(a, len.clone());
                    }
                }
                Some(Kind::Value(t))
            }
            T::Scale(_) => {
                k[1].float()?;
                same(0)
            }
            T::IndexCopy(_) => {
                let rank = shape(0)?.len();
                (k[3].axis()? < rank && k[4].shape_attr()?.len() == rank).then_some(())?;
                (k[5].shape_attr()?.len() == rank && shape(2)?.len() == rank).then_some(())?;
                same(0)
            }
            T::Gemm(_) => {
                let (ta, tb) = (flag(k[3])?, flag(k[4])?);
                k[5].float()?;
                let s = self.gemm_shape(shape(0)?, shape(1)?, ta, tb)?;
                if !k[2].is_none() {
                    let b = shape(2)?;
                    (b.len() == 1 && self.equal(&b[0], s.last()?)).then_some(())?;
                }
                value(s)
            }
            T::MaskedSoftmax(_) => {
                (k[2].float().is_some() && k[3].float().is_some()).then_some(())?;
                let x = shape(0)?;
                (!x.is_empty()).then_some(())?;
                self.mask_fits(k[1], x)?;
                same(0)
            }
            T::Attention(_) => {
                (k[4].float().is_some() && k[5].float().is_some()).then_some(())?;
                let scores = self.gemm_shape(shape(0)?, shape(1)?, false, true)?;
                self.mask_fits(k[3], &scores)?;
                value(self.gemm_shape(&scores, shape(2)?, false, false)?)
            }
            T::ScoredAttention(_) => {
                (k[3].float().is_some() && k[4].float().is_some()).then_some(())?;
                let scores = shape(0)?;
                (scores.len() >= 2).then_some(())?;
                self.mask_fits(k[2], scores)?;
                value(self.gemm_shape(scores, shape(1)?, false, false)?)
            }
            T::Sdpa(_) => {
                let gqa = k[6].int()? == 1;
                k[5].int()?;
                let (q, kk, v) = (shape(0)?, shape(1)?, shape(2)?);
                let (rq, rk, rv) = (q.len(), kk.len(), v.len());
                (rq >= 2 && rk >= 2 && rv >= 2 && shape(3)?.is_empty()).then_some(())?;
                // Key and value heads as the query heads read them.
                let seen = |x: &[Poly]| {
                    let mut b = x[..x.len() - 2].to_vec();
                    if gqa {
                        *b.last_mut()? = q[rq - 3].clone();
                    }
                    Some(b)
                };
                let batch = self.broadcast(&q[..rq - 2], &seen(kk)?)?;
                let batch = self.broadcast(&batch, &seen(v)?)?;
                let mut out = batch;
                out.extend([q[rq - 2].clone(), v[rv - 1].clone()]);
                value(out)
            }
            T::Cat(_) => {
                let a = k[0].axis()?;
                let first = ty(1)?;
                let mut t = first.clone();
                (a < t.rank()).then_some(())?;
                t.shape[a] = Poly::int(0);
                for part in &k[1..] {
                    let p = part.ty()?;
                    let fits = p.rank() == first.rank()
                        && (0..p.rank()).all(|i| i == a || self.equal(&p.shape[i], &first.shape[i]));
                    fits.then_some(())?;
                    t.shape[a] = t.shape[a].add(&p.shape[a]);
                }
                Some(Kind::Value(t))
            }
            T::Outputs(_) => k.iter().all(|d| d.ty().is_some()).then_some(Kind::Outputs),
        }
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

/// The axes of a `permute` attribute, when they are a permutation of `0..rank`.
pub fn perm_of(axes: &[Poly], rank: usize) -> Option<Vec<usize>> {
    let axes: Option<Vec<usize>> = axes.iter().map(|p| usize::try_from(p.as_int()?).ok()).collect();
    let axes = axes?;
    let mut seen = vec![false; rank];
    for &a in &axes {
        if a >= rank || std::mem::replace(&mut seen[a], true) {
            return None;
        }
    }
    (axes.len() == rank).then_some(axes)
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
