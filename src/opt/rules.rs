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
use egg::{
    rewrite as rw, Applier, ENodeOrVar, Id, Language, PatternAst, Rewrite, SearchMatches, Searcher, Subst,
    Symbol, Var,
};
use std::borrow::Cow;

mod fuse;
mod heads;
mod rows;

use fuse::{
    div_scale, fuse_attention, fuse_masked_softmax, fuse_scale_softmax, fuse_scored_attention, fuse_softmax,
    gemm_alpha_to_a, gemm_trans_a, gemm_trans_b, matmul_gemm, mul_scale_left, mul_scale_right, reshape_noop,
    scale_gemm, scale_linear, scale_scale, slice_noop, slice_slice,
};
use heads::{
    head_var, lift_cat_loop, lift_gemm, lift_linear, lift_masked_fill, lift_slice, lift_softmax, lift_stack,
    lift_transpose, merge_linear,
};

pub type Rw = Rewrite<Tensor, Ctx>;

/// The rules, in the order the runner tries them.
pub fn rules() -> Vec<Rw> {
    rules_with(true)
}

/// Whether a rule is a per-head lift (`lift-*`), which only a loop gives work.
pub fn is_lift(rule: &Rw) -> bool {
    rule.name.as_str().starts_with("lift-")
}

/// [`rules`], or without the per-head lifts: the same rules, in the same order, less those
/// [`is_lift`] names. The lifts are most of the table (one per elementwise op and side), so a
/// program without a loop does not parse their patterns.
#[rustfmt::skip]
pub fn rules_with(lifts: bool) -> Vec<Rw> {
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
        rw!("lift-cat-loop";       "(cat_loop (for ?v ?s ?e (select ?x ?a ?h)) ?c)" => { Computed(lift_cat_loop) }),
        rw!("lift-stack";          "(stack (for ?v ?s ?e (select ?x ?a ?h)) ?c)"  => { Computed(lift_stack) }),

        // Merged projections: two projections of one input by load-time weights are one
        // projection by the weights concatenated (once, at load time), then sliced. The
        // weights go in param order, so Q, K and V of self-attention become one [3D, D].
        rw!("cat-flatten-left";    "(cat ?a (cat ?a ?x ?y) ?z)"                   => { same("(cat ?a ?x ?y ?z)") }),
        rw!("cat-flatten-right";   "(cat ?a ?x (cat ?a ?y ?z))"                   => { same("(cat ?a ?x ?y ?z)") }),
    ];
    rules.push(merge_linear());
    // Slices of rows move toward the inputs through ops that compute each row alone, so a
    // program asked for some rows (the last position's logits) computes only those.
    rules.extend(rows::sink_rules());
    rules.retain(|r| lifts || !is_lift(r));
    if lifts {
        rules.extend(elementwise_lifts());
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

/// Per-head elementwise ops lift like masked_fill (see `LiftElementwise`): every
/// elementwise primitive of the op table lifts the same way, from either side or both.
#[rustfmt::skip]
fn elementwise_lifts() -> Vec<Rw> {
    let mut rules = Vec::new();
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
    if present(eg, eclass, subst, rhs) {
        return vec![];
    }
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

/// Whether every node of `rhs` is in the e-graph already, its root in `eclass`: the rule was
/// applied to this match in an earlier iteration (egg searches every match again at each),
/// so the union would change nothing. Found by lookups alone, where [`dry_run`] infers the
/// right side's shapes: applications were a tenth of the seed module's compile, and these
/// repeats half of that (`BENCHMARKS.md`, "Session 23"). A lookup that misses (a node not
/// yet there, or a class not yet rebuilt) only means the full application runs.
fn present(eg: &EG, eclass: Id, subst: &Subst, rhs: &PatternAst<Tensor>) -> bool {
    let mut ids: Vec<Id> = Vec::with_capacity(rhs.as_ref().len());
    for n in rhs.as_ref() {
        let id = match n {
            ENodeOrVar::Var(v) => subst[*v],
            ENodeOrVar::ENode(node) => {
                let node = node.clone().map_children(|c| ids[usize::from(c)]);
                match eg.lookup(node) {
                    Some(id) => id,
                    None => return false,
                }
            }
        };
        ids.push(id);
    }
    ids.last().is_some_and(|&root| eg.find(root) == eg.find(eclass))
}

/// The data the root of `rhs` would have, computed without adding anything. A variable's
/// data is the matched class's, borrowed: a shape is a map per size, and most rules try
/// many matches that `fits` then refuses.
fn dry_run(eg: &EG, subst: &Subst, rhs: &PatternAst<Tensor>) -> Data {
    let mut datas: Vec<Cow<Data>> = Vec::with_capacity(rhs.as_ref().len());
    for n in rhs.as_ref() {
        let d = match n {
            ENodeOrVar::Var(v) => Cow::Borrowed(&eg[subst[*v]].data),
            ENodeOrVar::ENode(node) => Cow::Owned(eg.analysis.compute(node, |c| &*datas[usize::from(c)])),
        };
        datas.push(d);
    }
    datas.pop().expect("a right side has a root").into_owned()
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
