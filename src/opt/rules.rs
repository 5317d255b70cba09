//! The rewrite rules, as one table.
//!
//! Every rule is an equality of values. A right side that needs attributes computed from
//! the match (an axis moved, a shape split, a scale multiplied) is built by a function
//! ([`Computed`]); the others are patterns ([`same`]). Either way the right side's type is
//! worked out before anything is added, and a right side whose shape differs from the
//! left side's is refused: no rule can change a value's shape.
//!
//! There is no general commutativity or associativity: every rule moves work one way
//! (views and scales toward the params, loops out, ops into fused ones), so the e-graph
//! stays small.

use super::analysis::{Ctx, Data, Kind, EG};
use super::lang::{DimLeaf, Float, ShapeLeaf, Tensor};
use crate::dims::Poly;
use crate::ir::{BinaryOp, UnaryOp};
use egg::{rewrite as rw, Applier, ENodeOrVar, Id, MultiPattern, PatternAst, Rewrite, Subst, Symbol, Var};

pub type Rw = Rewrite<Tensor, Ctx>;

/// The rules, in the order the runner tries them.
#[rustfmt::skip]
pub fn rules() -> Vec<Rw> {
    let mut rules = vec![
        // Layout: values do not have layouts, so a copy is nothing (extraction puts one
        // back where a `view` needs row-major memory), and views compose.
        rw!("contiguous-elim";     "(contiguous ?x)"                              => { same("?x") }),
        rw!("transpose-transpose"; "(transpose (transpose ?x ?a ?b) ?a ?b)"       => { same("?x") }),
        rw!("reshape-reshape";     "(reshape (reshape ?x ?s) ?t)"                 => { same("(reshape ?x ?t)") }),
        rw!("reshape-noop";        "(reshape ?x ?s)"                              => { Computed(reshape_noop) }),
        rw!("slice-slice";         "(slice (slice ?x ?a ?s ?e) ?a ?t ?u)"         => { Computed(slice_slice) }),
        // `x[:, a:b]` slices every axis before the one it names: a whole axis is nothing.
        rw!("slice-noop";          "(slice ?x ?a ?s ?e)"                          => { Computed(slice_noop) }),

        // GEMMs: a matmul of matrices is a GEMM; a transposed operand (its last two axes)
        // becomes the GEMM's flag, read through the strides with no copy.
        rw!("matmul-gemm";         "(matmul ?a ?b)"                               => { Computed(matmul_gemm) }),
        rw!("gemm-trans-a";        "(gemm (transpose ?a ?i ?j) ?b ?c ?ta ?tb ?al)" => { Computed(gemm_trans_a) }),
        rw!("gemm-trans-b";        "(gemm ?a (transpose ?b ?i ?j) ?c ?ta ?tb ?al)" => { Computed(gemm_trans_b) }),

        // Scales: dividing or multiplying by a constant scalar is a `scale`; scales
        // combine, and move toward the params, where they cost nothing at run time: into
        // the GEMM's alpha, out of alpha into its left operand, through views, and into a
        // projection's weights and bias (1/sqrt(Dk) ends in Wq and bq).
        rw!("div-scale";           "(div ?x ?c)"                                  => { Computed(div_scale) }),
        rw!("mul-scale";           "(mul ?x ?c)"                                  => { Computed(mul_scale_right) }),
        rw!("mul-scale-left";      "(mul ?c ?x)"                                  => { Computed(mul_scale_left) }),
        rw!("scale-one";           "(scale ?x 1.0)"                               => { same("?x") }),
        rw!("scale-scale";         "(scale (scale ?x ?a) ?b)"                     => { Computed(scale_scale) }),
        rw!("scale-gemm";          "(scale (gemm ?a ?b ?c ?ta ?tb ?al) ?s)"       => { Computed(scale_gemm) }),
        rw!("gemm-alpha-to-a";     "(gemm ?a ?b none ?ta ?tb ?al)"                => { Computed(gemm_alpha_to_a) }),
        rw!("scale-transpose";     "(scale (transpose ?x ?i ?j) ?s)"              => { same("(transpose (scale ?x ?s) ?i ?j)") }),
        rw!("scale-permute";       "(scale (permute ?x ?p) ?s)"                   => { same("(permute (scale ?x ?s) ?p)") }),
        rw!("scale-reshape";       "(scale (reshape ?x ?t) ?s)"                   => { same("(reshape (scale ?x ?s) ?t)") }),
        rw!("scale-slice";         "(scale (slice ?x ?a ?i ?j) ?s)"               => { same("(slice (scale ?x ?s) ?a ?i ?j)") }),
        // Also the per-head lift of a scale: the scale of a head is a head of the scale.
        rw!("scale-select";        "(scale (select ?x ?a ?i) ?s)"                 => { same("(select (scale ?x ?s) ?a ?i)") }),
        rw!("scale-linear";        "(scale (linear ?x ?w ?b) ?s)"                 => { Computed(scale_linear) }),

        // Fusion: softmax over the last axis, with the mask and scale before it, is one
        // op; softmax(q k^T) v is one attention op that never materializes the scores.
        // Extraction picks the attention op only where the probabilities are not needed
        // elsewhere (an output), since recomputing them would cost more.
        rw!("fuse-softmax";        "(softmax ?x ?d)"                              => { Computed(fuse_softmax) }),
        rw!("fuse-masked-softmax"; "(softmax (masked_fill ?x ?m ?f) ?d)"          => { Computed(fuse_masked_softmax) }),
        rw!("fuse-scale-softmax";  "(masked_softmax (scale ?x ?s) ?m ?t ?f)"      => { Computed(fuse_scale_softmax) }),
        rw!("fuse-attention";      "(gemm (masked_softmax (gemm ?q ?k none 0 1 ?al) ?m ?s ?f) ?v none 0 0 1.0)"
                                                                                  => { Computed(fuse_attention) }),
        // Scores changed elementwise before the softmax (soft-capping `c * tanh(s / c)`, a
        // position bias `s + slope_h * (j - i)`): attention over the changed scores, which
        // the backend computes tile by tile inside its kernel.
        rw!("fuse-scored-attention"; "(gemm (masked_softmax ?s ?m ?sc ?f) ?v none 0 0 1.0)"
                                                                                  => { Computed(fuse_scored_attention) }),

        // Heads. A per-head value is `select(X, axis, h)` of a batched X with a head axis;
        // these rules move each op of a loop body under the select, then the loop's
        // concat/stack of `select(X, a, h)` over all h is X itself, viewed.
        // `linear(x, W[h*K : (h+1)*K], b[h*K : (h+1)*K])` is head h of
        // `linear(x, W, b).view(.., H, K)` (H = rows of W / K).
        rw!("lift-linear";         "(linear ?x (slice ?w 0 ?s ?e) (slice ?b 0 ?s ?e))" => { Computed(lift_linear) }),
        rw!("lift-linear-nobias";  "(linear ?x (slice ?w 0 ?s ?e) none)"          => { Computed(lift_linear) }),
        // Any loop-invariant `x[.., h*K : (h+1)*K, ..]` is head h of `x` with that axis split
        // into [H, K].
        rw!("lift-slice";          "(slice ?x ?a ?s ?e)"                          => { Computed(lift_slice) }),
        // A per-head GEMM of two heads is a head of one GEMM batched over (batch.., head),
        // the head axis of each operand moved just before its two matrix axes.
        rw!("lift-gemm";           "(gemm (select ?a ?i ?h) (select ?b ?j ?h) ?c ?ta ?tb ?al)" => { Computed(lift_gemm) }),
        // A mask that broadcasts against a head gets a unit axis where the heads are.
        rw!("lift-masked-fill";    "(masked_fill (select ?x ?a ?h) ?m ?f)"        => { Computed(lift_masked_fill) }),
        rw!("lift-softmax";        "(softmax (select ?x ?a ?h) ?d)"               => { Computed(lift_softmax) }),
        rw!("lift-transpose";      "(transpose (select ?x ?a ?h) ?i ?j)"          => { Computed(lift_transpose) }),
        // concat over h of head h of X along axis c: X with its head axis moved before c,
        // merged into c (a transpose and a view); a stack is the move alone.
        rw!("lift-concat";         "(concat (for ?v ?s ?e (select ?x ?a ?h)) ?c)" => { Computed(lift_concat) }),
        rw!("lift-stack";          "(stack (for ?v ?s ?e (select ?x ?a ?h)) ?c)"  => { Computed(lift_stack) }),

        // Merged projections: two projections of one input by load-time weights are one
        // projection by the weights concatenated (once, at load time), then sliced. The
        // weights go in param order, so Q, K and V of self-attention become one [3D, D].
        rw!("cat-flatten-left";    "(cat ?a (cat ?a ?x ?y) ?z)"                   => { same("(cat ?a ?x ?y ?z)") }),
        rw!("cat-flatten-right";   "(cat ?a ?x (cat ?a ?y ?z))"                   => { same("(cat ?a ?x ?y ?z)") }),
    ];
    rules.push(merge_linear());
    // Per-head elementwise ops lift like masked_fill (see `LiftElementwise`).
    // Every elementwise primitive of the op table lifts the same way.
    for &op in UnaryOp::ALL {
        let lhs: egg::Pattern<Tensor> = format!("({op} (select ?x ?a ?h))").parse().unwrap();
        rules.push(Rewrite::new(format!("lift-{op}"), lhs, LiftElementwise::Unary(op)).unwrap());
    }
    for &op in BinaryOp::ALL {
        let lifts = [
            (format!("lift-{op}-left"), format!("({op} (select ?x ?a ?h) ?y)"), LiftElementwise::Binary(op, true)),
            (format!("lift-{op}-right"), format!("({op} ?y (select ?x ?a ?h))"), LiftElementwise::Binary(op, false)),
            (format!("lift-{op}-both"), format!("({op} (select ?x ?a ?h) (select ?y ?a ?h))"), LiftElementwise::Both(op)),
        ];
        for (name, lhs, applier) in lifts {
            let lhs: egg::Pattern<Tensor> = lhs.parse().unwrap();
            rules.push(Rewrite::new(name, lhs, applier).unwrap());
        }
    }
    // A unit axis commutes with a comparison to a scalar (`mask.unsqueeze(1) == 0`), both
    // ways, so that either order is found from the other and the cheaper (or, on a tie,
    // the canonical) one is extracted.
    for op in ["eq", "ne", "lt", "le", "gt", "ge"] {
        let (inner, outer) = (format!("({op} (unsqueeze ?x ?d) ?c)"), format!("(unsqueeze ({op} ?x ?c) ?d)"));
        for (name, lhs, rhs) in [(format!("{op}-unsqueeze"), &inner, &outer), (format!("unsqueeze-{op}"), &outer, &inner)] {
            let lhs: egg::Pattern<Tensor> = lhs.parse().unwrap();
            let applier = Checked { rhs: rhs.parse().unwrap(), scalar: Some("?c".parse().unwrap()) };
            rules.push(Rewrite::new(name, lhs, applier).unwrap());
        }
    }
    // `where(x == k, a, f)` with a scalar `f` is `a.masked_fill(x != k, f)` (and `!=` the
    // other way), NaN included: so a causal mask built with `where`, as GPT-2 builds it,
    // reaches the fused attention like a `masked_fill`.
    for (op, negated) in [("eq", "ne"), ("ne", "eq")] {
        let lhs: egg::Pattern<Tensor> = format!("(where ({op} ?x ?k) ?a ?f)").parse().unwrap();
        let rhs = format!("(masked_fill ?a ({negated} ?x ?k) ?f)").parse().unwrap();
        let applier = Checked { rhs, scalar: Some("?f".parse().unwrap()) };
        rules.push(Rewrite::new(format!("where-{op}-masked-fill"), lhs, applier).unwrap());
    }
    // Any other condition: `where(c, a, f)` is `a.masked_fill(~c, f)`, so a mask of positions
    // written as FlexAttention's `mask_mod` keeps (`where(j <= i, s, -inf)`) fuses too.
    let applier = Checked { rhs: "(masked_fill ?a (not ?c) ?f)".parse().unwrap(), scalar: Some("?f".parse().unwrap()) };
    rules.push(Rewrite::new("where-masked-fill", "(where ?c ?a ?f)".parse::<egg::Pattern<Tensor>>().unwrap(), applier).unwrap());
    rules
}

/// A pattern right side, checked like every other (see the module doc).
fn same(rhs: &str) -> Checked {
    Checked {
        rhs: rhs.parse().unwrap(),
        scalar: None,
    }
}

/// A pattern right side; with `scalar`, only where that variable is a rank-0 tensor.
pub struct Checked {
    rhs: PatternAst<Tensor>,
    scalar: Option<Var>,
}

impl Applier<Tensor, Ctx> for Checked {
    fn apply_one(
        &self,
        eg: &mut EG,
        eclass: Id,
        subst: &Subst,
        ast: Option<&PatternAst<Tensor>>,
        rule: Symbol,
    ) -> Vec<Id> {
        if let Some(v) = self.scalar {
            if eg[subst[v]].data.rank() != Some(0) {
                return vec![];
            }
        }
        apply_checked(eg, eclass, subst, ast, &self.rhs, rule)
    }

    fn vars(&self) -> Vec<Var> {
        pattern_vars(&self.rhs)
    }
}

/// A right side computed from the match; the function declines with `None`.
pub struct Computed(pub fn(&Match, &mut Rhs) -> Option<()>);

impl Applier<Tensor, Ctx> for Computed {
    fn apply_one(
        &self,
        eg: &mut EG,
        eclass: Id,
        subst: &Subst,
        ast: Option<&PatternAst<Tensor>>,
        rule: Symbol,
    ) -> Vec<Id> {
        apply_built(eg, eclass, subst, ast, rule, &self.0)
    }
}

/// Builds a right side with `build` and applies it, checked.
fn apply_built(
    eg: &mut EG,
    eclass: Id,
    subst: &Subst,
    ast: Option<&PatternAst<Tensor>>,
    rule: Symbol,
    build: &dyn Fn(&Match, &mut Rhs) -> Option<()>,
) -> Vec<Id> {
    let mut rhs = Rhs::default();
    let built = build(&Match { eg, subst }, &mut rhs);
    match built {
        Some(()) if !rhs.ast.as_ref().is_empty() => apply_checked(eg, eclass, subst, ast, &rhs.ast, rule),
        _ => vec![],
    }
}

/// The per-head lift of an elementwise op: `op(head h of x, y)` is head h of `op(x, y')`
/// for an invariant `y` (with a unit axis where the heads are, as a mask gets), and
/// `op(head h of x, head h of y)` is head h of `op(x, y)`.
pub enum LiftElementwise {
    Unary(UnaryOp),
    /// The op, and whether the head is its left operand.
    Binary(BinaryOp, bool),
    Both(BinaryOp),
}

impl Applier<Tensor, Ctx> for LiftElementwise {
    fn apply_one(
        &self,
        eg: &mut EG,
        eclass: Id,
        subst: &Subst,
        ast: Option<&PatternAst<Tensor>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let build = |m: &Match, r: &mut Rhs| -> Option<()> {
            let op = match self {
                LiftElementwise::Unary(op) => {
                    head_var(m, "?h", &["?x"])?;
                    let x = r.var("?x");
                    r.node(Tensor::Unary(*op, [x]))
                }
                LiftElementwise::Binary(op, left) => {
                    head_var(m, "?h", &["?x", "?y"])?;
                    let x = r.var("?x");
                    let y = invariant_operand(m, r, "?y")?;
                    r.node(Tensor::Binary(*op, if *left { [x, y] } else { [y, x] }))
                }
                LiftElementwise::Both(op) => {
                    head_var(m, "?h", &["?x", "?y"])?;
                    (m.data("?x").rank()? == m.data("?y").rank()?).then_some(())?;
                    let (x, y) = (r.var("?x"), r.var("?y"));
                    r.node(Tensor::Binary(*op, [x, y]))
                }
            };
            let (axis, h) = (r.var("?a"), r.var("?h"));
            r.node(Tensor::Select([op, axis, h]));
            Some(())
        };
        apply_built(eg, eclass, subst, ast, rule, &build)
    }
}

/// An invariant operand `v` that broadcasts into one head of `?x` (whose head axis is
/// `?a`), with a unit axis inserted where the heads are if it reaches past them.
fn invariant_operand(m: &Match, r: &mut Rhs, v: &str) -> Option<Id> {
    let ctx = m.ctx();
    let a = m.data("?a").axis()?;
    let mut head = m.data("?x").shape()?.to_vec();
    head.remove(a);
    let shape = m.data(v).shape()?;
    // It must broadcast into one head, not widen it.
    let b = ctx.broadcast(&head, shape)?;
    (ctx.same_shape(&b, &head) && shape.len() <= head.len()).then_some(())?;
    let mut id = r.var(v);
    let uncovered = head.len() - shape.len();
    if uncovered < a {
        let at = r.int(a - uncovered);
        id = r.node(Tensor::Unsqueeze([id, at]));
    }
    Some(id)
}

fn pattern_vars(p: &PatternAst<Tensor>) -> Vec<Var> {
    let mut vars: Vec<Var> = p
        .as_ref()
        .iter()
        .filter_map(|n| match n {
            ENodeOrVar::Var(v) => Some(*v),
            ENodeOrVar::ENode(_) => None,
        })
        .collect();
    vars.sort();
    vars.dedup();
    vars
}

/// Adds `rhs` and merges it with the matched class, unless its type would differ.
fn apply_checked(
    eg: &mut EG,
    eclass: Id,
    subst: &Subst,
    searcher_ast: Option<&PatternAst<Tensor>>,
    rhs: &PatternAst<Tensor>,
    rule: Symbol,
) -> Vec<Id> {
    let data = dry_run(eg, subst, rhs);
    if !fits(&eg.analysis, &eg[eclass].data, &data) {
        eg.analysis.refused += 1;
        return vec![];
    }
    if let Some(ast) = searcher_ast {
        let (from, did) = eg.union_instantiations(ast, rhs, subst, rule);
        return if did { vec![from] } else { vec![] };
    }
    let id = eg.add_instantiation(rhs, subst);
    if eg.union(eclass, id) {
        vec![eclass]
    } else {
        vec![]
    }
}

/// The data the root of `rhs` would have, computed without adding anything.
fn dry_run(eg: &EG, subst: &Subst, rhs: &PatternAst<Tensor>) -> Data {
    let mut datas: Vec<Data> = Vec::with_capacity(rhs.as_ref().len());
    for n in rhs.as_ref() {
        let d = match n {
            ENodeOrVar::Var(v) => eg[subst[*v]].data.clone(),
            ENodeOrVar::ENode(node) => eg.analysis.compute(node, |c| &datas[usize::from(c)]),
        };
        datas.push(d);
    }
    datas.pop().expect("a right side has a root")
}

/// Whether a right side of data `new` may be merged into a class of data `old`.
fn fits(ctx: &Ctx, old: &Data, new: &Data) -> bool {
    match (&old.kind, &new.kind) {
        (Kind::Value(a), Kind::Value(b)) => a.dtype == b.dtype && ctx.same_shape(&a.shape, &b.shape),
        (Kind::Seq { item: a, len: l }, Kind::Seq { item: b, len: m }) => {
            a.dtype == b.dtype && ctx.same_shape(&a.shape, &b.shape) && ctx.equal(l, m)
        }
        _ => false,
    }
}

/// A match, to read the data of its variables.
pub struct Match<'a> {
    eg: &'a EG,
    subst: &'a Subst,
}

impl Match<'_> {
    fn var(v: &str) -> Var {
        v.parse().expect("a pattern variable")
    }

    fn data(&self, v: &str) -> &Data {
        &self.eg[self.subst[Match::var(v)]].data
    }

    fn ctx(&self) -> &Ctx {
        &self.eg.analysis
    }
}

/// A right side under construction: pattern variables of the left side and new nodes.
/// The last node added is the root.
#[derive(Default)]
pub struct Rhs {
    ast: PatternAst<Tensor>,
}

impl Rhs {
    fn var(&mut self, v: &str) -> Id {
        self.ast.add(ENodeOrVar::Var(Match::var(v)))
    }

    fn node(&mut self, n: Tensor) -> Id {
        self.ast.add(ENodeOrVar::ENode(n))
    }

    fn int(&mut self, i: usize) -> Id {
        self.node(Tensor::Int(i as i64))
    }

    fn float(&mut self, x: f64) -> Id {
        self.node(Tensor::Float(Float::new(x)))
    }

    fn dim(&mut self, p: Poly) -> Id {
        self.node(Tensor::Dim(DimLeaf(p)))
    }

    fn shape(&mut self, s: Vec<Poly>) -> Id {
        self.node(Tensor::Shape(ShapeLeaf(s)))
    }

    /// `x` with axis `from` moved to position `to` (a transpose when they are adjacent).
    fn movedim(&mut self, x: Id, rank: usize, from: usize, to: usize) -> Id {
        if from == to {
            return x;
        }
        if from.abs_diff(to) == 1 {
            let (a, b) = (self.int(from.min(to)), self.int(from.max(to)));
            return self.node(Tensor::Transpose([x, a, b]));
        }
        let mut axes: Vec<usize> = (0..rank).filter(|&a| a != from).collect();
        axes.insert(to, from);
        let p = self.shape(axes.iter().map(|&a| Poly::int(a as i64)).collect());
        self.node(Tensor::Permute([x, p]))
    }
}

fn reshape_noop(m: &Match, r: &mut Rhs) -> Option<()> {
    let same = m
        .ctx()
        .same_shape(m.data("?x").shape()?, m.data("?s").shape_attr()?);
    same.then(|| {
        r.var("?x");
    })
}

fn slice_slice(m: &Match, r: &mut Rhs) -> Option<()> {
    let (s, t, u) = (m.data("?s").dim()?, m.data("?t").dim()?, m.data("?u").dim()?);
    // Where either slice is the whole axis, `slice-noop` has put it in its input's class,
    // which already holds the composition. Composing it anyway would never end: a no-op
    // slice by value only (`x[R - 1 :]` with `R = 1`) is in `x`'s class, so it is its own
    // inner slice, and each composition adds new bounds (`2 * R - 2`, `3 * R - 3`, ..).
    let ctx = m.ctx();
    let size = m.data("?x").shape()?.get(m.data("?a").axis()?)?;
    let e = m.data("?e").dim()?;
    let zero = Poly::int(0);
    let whole_inner = ctx.equal(s, &zero) && ctx.equal(e, size);
    let whole_outer = ctx.equal(t, &zero) && ctx.equal(u, &e.sub(s));
    if whole_inner || whole_outer {
        return None;
    }
    let x = r.var("?x");
    let a = r.var("?a");
    let (start, end) = (r.dim(s.add(t)), r.dim(s.add(u)));
    r.node(Tensor::Slice([x, a, start, end]));
    Some(())
}

fn slice_noop(m: &Match, r: &mut Rhs) -> Option<()> {
    let ctx = m.ctx();
    let size = m.data("?x").shape()?.get(m.data("?a").axis()?)?;
    let whole = ctx.equal(m.data("?s").dim()?, &Poly::int(0)) && ctx.equal(m.data("?e").dim()?, size);
    whole.then(|| {
        r.var("?x");
    })
}

fn matmul_gemm(m: &Match, r: &mut Rhs) -> Option<()> {
    (m.data("?a").rank()? >= 2 && m.data("?b").rank()? >= 2).then_some(())?;
    let (a, b) = (r.var("?a"), r.var("?b"));
    let (none, t) = (r.node(Tensor::None), r.int(0));
    let alpha = r.float(1.0);
    r.node(Tensor::Gemm([a, b, none, t, t, alpha]));
    Some(())
}

/// Whether `(i, j)` are the last two axes of `?x`.
fn last_two(m: &Match, x: &str) -> Option<()> {
    let rank = m.data(x).rank()?;
    let (i, j) = (m.data("?i").axis()?, m.data("?j").axis()?);
    (rank >= 2 && i.min(j) == rank - 2 && i.max(j) == rank - 1).then_some(())
}

fn gemm_trans_a(m: &Match, r: &mut Rhs) -> Option<()> {
    last_two(m, "?a")?;
    let ta = 1 - m.data("?ta").int()?;
    let ids = [r.var("?a"), r.var("?b"), r.var("?c")];
    let ta = r.int(ta as usize);
    let (tb, al) = (r.var("?tb"), r.var("?al"));
    r.node(Tensor::Gemm([ids[0], ids[1], ids[2], ta, tb, al]));
    Some(())
}

fn gemm_trans_b(m: &Match, r: &mut Rhs) -> Option<()> {
    last_two(m, "?b")?;
    let tb = 1 - m.data("?tb").int()?;
    let ids = [r.var("?a"), r.var("?b"), r.var("?c"), r.var("?ta")];
    let tb = r.int(tb as usize);
    let al = r.var("?al");
    r.node(Tensor::Gemm([ids[0], ids[1], ids[2], ids[3], tb, al]));
    Some(())
}

/// `x * c` as a scale, when `c` is a constant scalar and `x` a float tensor.
fn scale_of(m: &Match, r: &mut Rhs, x: &str, c: f64) -> Option<()> {
    let data = m.data(x);
    (data.ty()?.dtype == crate::ir::DType::F32 && c.is_finite()).then_some(())?;
    let x = r.var(x);
    let c = r.float(c);
    r.node(Tensor::Scale([x, c]));
    Some(())
}

fn constant(m: &Match, v: &str) -> Option<f64> {
    let d = m.data(v);
    (d.rank()? == 0).then_some(d.konst?)
}

fn div_scale(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = constant(m, "?c")?;
    scale_of(m, r, "?x", 1.0 / c)
}

fn mul_scale_right(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = constant(m, "?c")?;
    scale_of(m, r, "?x", c)
}

fn mul_scale_left(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = constant(m, "?c")?;
    (m.data("?x").konst.is_none()).then_some(())?;
    scale_of(m, r, "?x", c)
}

fn scale_scale(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = m.data("?a").float()? * m.data("?b").float()?;
    let x = r.var("?x");
    let c = r.float(c);
    r.node(Tensor::Scale([x, c]));
    Some(())
}

fn scale_gemm(m: &Match, r: &mut Rhs) -> Option<()> {
    let alpha = m.data("?al").float()? * m.data("?s").float()?;
    let ids = [r.var("?a"), r.var("?b"), r.var("?c"), r.var("?ta"), r.var("?tb")];
    let al = r.float(alpha);
    r.node(Tensor::Gemm([ids[0], ids[1], ids[2], ids[3], ids[4], al]));
    Some(())
}

fn gemm_alpha_to_a(m: &Match, r: &mut Rhs) -> Option<()> {
    let alpha = m.data("?al").float()?;
    (alpha != 1.0).then_some(())?;
    let a = r.var("?a");
    let al = r.float(alpha);
    let a = r.node(Tensor::Scale([a, al]));
    let ids = [r.var("?b"), r.node(Tensor::None), r.var("?ta"), r.var("?tb")];
    let one = r.float(1.0);
    r.node(Tensor::Gemm([a, ids[0], ids[1], ids[2], ids[3], one]));
    Some(())
}

fn scale_linear(m: &Match, r: &mut Rhs) -> Option<()> {
    m.data("?w").load_time.then_some(())?;
    let bias = !m.data("?b").is_none();
    let (x, w, s) = (r.var("?x"), r.var("?w"), r.var("?s"));
    let w = r.node(Tensor::Scale([w, s]));
    let b = match bias {
        true => {
            let b = r.var("?b");
            r.node(Tensor::Scale([b, s]))
        }
        false => r.node(Tensor::None),
    };
    r.node(Tensor::Linear([x, w, b]));
    Some(())
}

fn last_axis(m: &Match, x: &str, d: &str) -> Option<()> {
    let rank = m.data(x).rank()?;
    (rank >= 1 && m.data(d).axis()? == rank - 1).then_some(())
}

fn fuse_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    last_axis(m, "?x", "?d")?;
    let x = r.var("?x");
    let none = r.node(Tensor::None);
    let (one, zero) = (r.float(1.0), r.float(0.0));
    r.node(Tensor::MaskedSoftmax([x, none, one, zero]));
    Some(())
}

fn fuse_masked_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    last_axis(m, "?x", "?d")?;
    let fill = constant(m, "?f")?;
    let (x, mask) = (r.var("?x"), r.var("?m"));
    let (one, fill) = (r.float(1.0), r.float(fill));
    r.node(Tensor::MaskedSoftmax([x, mask, one, fill]));
    Some(())
}

fn fuse_scale_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    let scale = m.data("?s").float()? * m.data("?t").float()?;
    let (x, mask) = (r.var("?x"), r.var("?m"));
    let (scale, fill) = (r.float(scale), r.var("?f"));
    r.node(Tensor::MaskedSoftmax([x, mask, scale, fill]));
    Some(())
}

fn fuse_attention(m: &Match, r: &mut Rhs) -> Option<()> {
    let scale = m.data("?al").float()? * m.data("?s").float()?;
    let ids = [r.var("?q"), r.var("?k"), r.var("?v"), r.var("?m")];
    let (scale, fill) = (r.float(scale), r.var("?f"));
    r.node(Tensor::Attention([ids[0], ids[1], ids[2], ids[3], scale, fill]));
    Some(())
}

fn fuse_scored_attention(m: &Match, r: &mut Rhs) -> Option<()> {
    let s = m.subst[Match::var("?s")];
    let shape = m.data("?s").shape()?;
    let direct = m.eg[s].nodes.iter().any(|n| matches!(n, Tensor::Gemm(_)));
    (!direct && changes_scores(m.eg, s, shape, SCORE_DEPTH)).then_some(())?;
    let ids = [r.var("?s"), r.var("?v"), r.var("?m"), r.var("?sc"), r.var("?f")];
    r.node(Tensor::ScoredAttention(ids));
    Some(())
}

/// How many elementwise ops deep a score change may be.
const SCORE_DEPTH: usize = 8;

/// Whether class `id` holds an elementwise function of a GEMM `q @ kᵀ` (or `q @ kt`) of the
/// scores' `shape`: an elementwise node one of whose operands of that shape is such a
/// function or the GEMM itself, within `depth` ops.
fn changes_scores(eg: &EG, id: Id, shape: &[Poly], depth: usize) -> bool {
    let full = |c: Id| {
        eg[c]
            .data
            .shape()
            .is_some_and(|s| eg.analysis.same_shape(s, shape))
    };
    let scores = |c: Id| {
        eg[c].nodes.iter().any(|n| match n {
            Tensor::Gemm(g) => eg[g[3]].data.int() == Some(0) && eg[g[2]].data.is_none(),
            _ => false,
        })
    };
    let operands: Vec<Id> = eg[id]
        .nodes
        .iter()
        .filter_map(|n| match n {
            Tensor::Unary(_, [a]) | Tensor::Scale([a, _]) => Some(vec![*a]),
            Tensor::Binary(_, a) => Some(a.to_vec()),
            Tensor::Where([_, a, b]) => Some(vec![*a, *b]),
            Tensor::MaskedFill([a, _, _]) => Some(vec![*a]),
            _ => None,
        })
        .flatten()
        .collect();
    depth > 0
        && operands
            .into_iter()
            .filter(|&c| full(c))
            .any(|c| scores(c) || changes_scores(eg, c, shape, depth - 1))
}

/// The loop variable of a head index `?h`, when `vars` do not depend on it.
fn head_var(m: &Match, h: &str, invariant: &[&str]) -> Option<usize> {
    let var = m.ctx().loop_var(m.data(h).dim()?)?;
    invariant
        .iter()
        .all(|v| !m.data(v).depends_on(var))
        .then_some(var)
}

fn lift_linear(m: &Match, r: &mut Rhs) -> Option<()> {
    let ctx = m.ctx();
    let (x, w) = (m.data("?x").shape()?, m.data("?w").shape()?);
    let (var, head, k) = head_slice(m)?;
    let invariant = ["?x", "?w"].iter().all(|v| !m.data(v).depends_on(var));
    let heads = ctx.div(w.first()?, &k)?;
    (invariant && !x.is_empty()).then_some(())?;
    let mut sizes = x[..x.len() - 1].to_vec();
    sizes.extend([heads, k]);
    let (xi, wi) = (r.var("?x"), r.var("?w"));
    let bi = match m.subst.get(Match::var("?b")) {
        Some(_) => r.var("?b"),
        None => r.node(Tensor::None),
    };
    let lin = r.node(Tensor::Linear([xi, wi, bi]));
    let shape = r.shape(sizes);
    let view = r.node(Tensor::Reshape([lin, shape]));
    let (axis, index) = (r.int(x.len() - 1), r.dim(head));
    r.node(Tensor::Select([view, axis, index]));
    Some(())
}

/// For a slice `start..end` by a loop variable: the variable, the head index and size
/// `K = end - start`, when `start = h * K`.
fn head_slice(m: &Match) -> Option<(usize, Poly, Poly)> {
    let ctx = m.ctx();
    let (start, end) = (m.data("?s").dim()?, m.data("?e").dim()?);
    let k = end.sub(start);
    let head = ctx.div(start, &k)?;
    Some((ctx.loop_var(&head)?, head, k))
}

fn lift_slice(m: &Match, r: &mut Rhs) -> Option<()> {
    let (var, head, k) = head_slice(m)?;
    let x = m.data("?x");
    (!x.depends_on(var)).then_some(())?;
    let a = m.data("?a").axis()?;
    let mut sizes = x.shape()?.to_vec();
    let heads = m.ctx().div(sizes.get(a)?, &k)?;
    sizes.splice(a..=a, [heads, k]);
    let xi = r.var("?x");
    let shape = r.shape(sizes);
    let split = r.node(Tensor::Reshape([xi, shape]));
    let (axis, index) = (r.var("?a"), r.dim(head));
    r.node(Tensor::Select([split, axis, index]));
    Some(())
}

fn lift_gemm(m: &Match, r: &mut Rhs) -> Option<()> {
    head_var(m, "?h", &["?a", "?b", "?c"])?;
    let (ra, rb) = (m.data("?a").rank()?, m.data("?b").rank()?);
    let (i, j) = (m.data("?i").axis()?, m.data("?j").axis()?);
    // Per head, a and b have ranks ra - 1 and rb - 1, both at least 2.
    (ra >= 3 && rb >= 3).then_some(())?;
    let (a, b) = (r.var("?a"), r.var("?b"));
    let a = r.movedim(a, ra, i, ra - 3);
    let b = r.movedim(b, rb, j, rb - 3);
    let ids = [r.var("?c"), r.var("?ta"), r.var("?tb"), r.var("?al")];
    let g = r.node(Tensor::Gemm([a, b, ids[0], ids[1], ids[2], ids[3]]));
    let out = ra.max(rb) - 1;
    let (axis, h) = (r.int(out - 2), r.var("?h"));
    r.node(Tensor::Select([g, axis, h]));
    Some(())
}

fn lift_masked_fill(m: &Match, r: &mut Rhs) -> Option<()> {
    head_var(m, "?h", &["?x", "?m", "?f"])?;
    let x = r.var("?x");
    let mask = invariant_operand(m, r, "?m")?;
    let f = r.var("?f");
    let filled = r.node(Tensor::MaskedFill([x, mask, f]));
    let (axis, h) = (r.var("?a"), r.var("?h"));
    r.node(Tensor::Select([filled, axis, h]));
    Some(())
}

/// Per-head axis `d` as an axis of the batched value whose head axis is `a`.
fn batched_axis(d: usize, a: usize) -> usize {
    d + usize::from(d >= a)
}

fn lift_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    head_var(m, "?h", &["?x"])?;
    let (a, d) = (m.data("?a").axis()?, m.data("?d").axis()?);
    let x = r.var("?x");
    let d = r.int(batched_axis(d, a));
    let s = r.node(Tensor::Softmax([x, d]));
    let (axis, h) = (r.var("?a"), r.var("?h"));
    r.node(Tensor::Select([s, axis, h]));
    Some(())
}

fn lift_transpose(m: &Match, r: &mut Rhs) -> Option<()> {
    head_var(m, "?h", &["?x"])?;
    let a = m.data("?a").axis()?;
    let (i, j) = (m.data("?i").axis()?, m.data("?j").axis()?);
    let x = r.var("?x");
    let (i, j) = (r.int(batched_axis(i, a)), r.int(batched_axis(j, a)));
    let t = r.node(Tensor::Transpose([x, i, j]));
    let (axis, h) = (r.var("?a"), r.var("?h"));
    r.node(Tensor::Select([t, axis, h]));
    Some(())
}

/// For `(concat|stack (for ?v ?s ?e (select ?x ?a ?h)) ?c)`: the head axis and the
/// batched rank, when the loop runs over every head of `?x` with `h` as its variable.
fn whole_loop(m: &Match) -> Option<(usize, usize)> {
    let ctx = m.ctx();
    let var = usize::try_from(m.data("?v").int()?).ok()?;
    let x = m.data("?x");
    let a = m.data("?a").axis()?;
    let over_all =
        ctx.equal(m.data("?s").dim()?, &Poly::int(0)) && ctx.equal(m.data("?e").dim()?, x.shape()?.get(a)?);
    let by_var = *m.data("?h").dim()? == Poly::sym(var);
    (over_all && by_var && !x.depends_on(var)).then_some((a, x.rank()?))
}

fn lift_concat(m: &Match, r: &mut Rhs) -> Option<()> {
    let (a, rank) = whole_loop(m)?;
    let c = m.data("?c").axis()?;
    let mut shape = m.data("?x").shape()?.to_vec();
    let heads = shape.remove(a);
    shape[c] = shape[c].mul(&heads);
    let x = r.var("?x");
    let moved = r.movedim(x, rank, a, c);
    let s = r.shape(shape);
    r.node(Tensor::Reshape([moved, s]));
    Some(())
}

fn lift_stack(m: &Match, r: &mut Rhs) -> Option<()> {
    let (a, rank) = whole_loop(m)?;
    let d = m.data("?c").axis()?;
    let x = r.var("?x");
    r.movedim(x, rank, a, d);
    Some(())
}

/// `?p = linear(x, w1, b1)` and `?q = linear(x, w2, b2)`: both are slices of
/// `linear(x, cat(w1, w2), cat(b1, b2))`.
fn merge_linear() -> Rw {
    let searcher: MultiPattern<Tensor> = "?p = (linear ?x ?w1 ?b1), ?q = (linear ?x ?w2 ?b2)"
        .parse()
        .unwrap();
    Rewrite::new("merge-linear", searcher, MergeLinear).unwrap()
}

struct MergeLinear;

impl Applier<Tensor, Ctx> for MergeLinear {
    fn apply_one(
        &self,
        eg: &mut EG,
        _: Id,
        subst: &Subst,
        _: Option<&PatternAst<Tensor>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let id = |v: &str| subst[Match::var(v)];
        let (p, q) = (id("?p"), id("?q"));
        let Some((o1, o2, axis)) = merge_fits(eg, subst) else {
            return vec![];
        };
        let add = |eg: &mut EG, n: Tensor| eg.add_uncanonical(n);
        let zero = add(eg, Tensor::Int(0));
        let w = add(eg, Tensor::Cat(vec![zero, id("?w1"), id("?w2")].into()));
        let b = match eg[id("?b1")].data.is_none() {
            true => id("?b1"),
            false => add(eg, Tensor::Cat(vec![zero, id("?b1"), id("?b2")].into())),
        };
        let merged = add(eg, Tensor::Linear([id("?x"), w, b]));
        let axis = add(eg, Tensor::Int(axis as i64));
        let [start, mid, end] =
            [Poly::int(0), o1.clone(), o1.add(&o2)].map(|d| add(eg, Tensor::Dim(DimLeaf(d))));
        let first = add(eg, Tensor::Slice([merged, axis, start, mid]));
        let second = add(eg, Tensor::Slice([merged, axis, mid, end]));
        let mut changed = vec![];
        for (old, new) in [(p, first), (q, second)] {
            let ok = fits(&eg.analysis, &eg[old].data, &eg[new].data);
            if ok && eg.union_trusted(old, new, rule) {
                changed.push(old);
            }
        }
        changed
    }

    fn vars(&self) -> Vec<Var> {
        ["?p", "?q", "?x", "?w1", "?b1", "?w2", "?b2"]
            .map(Match::var)
            .to_vec()
    }
}

/// The output sizes of both projections and the axis to slice, when they may merge:
/// load-time weights (and biases, both or neither) in param order, over a run-time input.
fn merge_fits(eg: &EG, subst: &Subst) -> Option<(Poly, Poly, usize)> {
    let d = |v: &str| &eg[subst[Match::var(v)]].data;
    let (w1, w2, x) = (d("?w1"), d("?w2"), d("?x"));
    let weights = |w: &Data| w.load_time && w.deps.is_empty() && !w.params.is_empty();
    (weights(w1) && weights(w2) && !x.load_time).then_some(())?;
    (w1.params.last()? < w2.params.first()?).then_some(())?;
    let (b1, b2) = (d("?b1"), d("?b2"));
    match (b1.is_none(), b2.is_none()) {
        (true, true) => {}
        (false, false) if b1.load_time && b2.load_time => {}
        _ => return None,
    }
    let rank = x.rank()?;
    (rank >= 1).then_some(())?;
    Some((
        w1.shape()?.first()?.clone(),
        w2.shape()?.first()?.clone(),
        rank - 1,
    ))
}
