//! The computed right sides that take work out of a loop over heads (a `linear`, a slice,
//! a GEMM, a softmax done once on the batched value) and that merge projections of one input.

use super::*;

/// The loop variable of a head index `?h`, when `vars` do not depend on it.
pub(super) fn head_var(m: &Match, h: &str, invariant: &[&str]) -> Option<usize> {
    let var = m.ctx().loop_var(m.data(h).dim()?)?;
    invariant
        .iter()
        .all(|v| !m.data(v).depends_on(var))
        .then_some(var)
}

pub(super) fn lift_linear(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn lift_slice(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn lift_gemm(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn lift_masked_fill(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn lift_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    head_var(m, "?h", &["?x"])?;
    let (a, d) = (m.data("?a").axis()?, m.data("?d").axis()?);
    let x = r.var("?x");
    let d = r.int(batched_axis(d, a));
    let s = r.node(Tensor::Softmax([x, d]));
    let (axis, h) = (r.var("?a"), r.var("?h"));
    r.node(Tensor::Select([s, axis, h]));
    Some(())
}

pub(super) fn lift_transpose(m: &Match, r: &mut Rhs) -> Option<()> {
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

/// For `(cat_loop|stack (for ?v ?s ?e (select ?x ?a ?h)) ?c)`: the head axis and the
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

pub(super) fn lift_cat_loop(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn lift_stack(m: &Match, r: &mut Rhs) -> Option<()> {
    let (a, rank) = whole_loop(m)?;
    let d = m.data("?c").axis()?;
    let x = r.var("?x");
    r.movedim(x, rank, a, d);
    Some(())
}

/// `?p = linear(x, w1, b1)` and `?q = linear(x, w2, b2)`: both are slices of
/// `linear(x, cat(w1, w2), cat(b1, b2))`.
pub(super) fn merge_linear() -> Rw {
    let searcher: MultiPattern<Tensor> = "?p = (linear ?x ?w1 ?b1), ?q = (linear ?x ?w2 ?b2)"
        .parse()
        .unwrap();
    let vars = ["?p", "?q", "?x", "?w1", "?b1", "?w2", "?b2"].map(Match::var);
    Rewrite::new("merge-linear", searcher, MergeLinear(vars)).unwrap()
}

/// The searcher's variables, `?p ?q ?x ?w1 ?b1 ?w2 ?b2`, parsed once: a parse interns the
/// name in egg's symbol table, and this applier runs for every pair of projections at
/// every iteration (2 % of the seed module's compile, `BENCHMARKS.md`, "Session 23").
struct MergeLinear([Var; 7]);

impl Applier<Tensor, Ctx> for MergeLinear {
    fn apply_one(
        &self,
        eg: &mut EG,
        _: Id,
        subst: &Subst,
        _: Option<&PatternAst<Tensor>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let [p, q, x, w1, b1, w2, b2] = self.0.map(|v| subst[v]);
        let Some((o1, o2, axis)) = merge_fits(eg, [x, w1, b1, w2, b2]) else {
            return vec![];
        };
        let add = |eg: &mut EG, n: Tensor| eg.add_uncanonical(n);
        let zero = add(eg, Tensor::Int(0));
        let w = add(eg, Tensor::Cat(vec![zero, w1, w2].into()));
        let b = match eg[b1].data.is_none() {
            true => b1,
            false => add(eg, Tensor::Cat(vec![zero, b1, b2].into())),
        };
        let merged = add(eg, Tensor::Linear([x, w, b]));
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
        self.0.to_vec()
    }
}

/// The output sizes of both projections and the axis to slice, when they may merge:
/// load-time weights (and biases, both or neither) in param order, over a run-time input.
fn merge_fits(eg: &EG, [x, w1, b1, w2, b2]: [Id; 5]) -> Option<(Poly, Poly, usize)> {
    let d = |id: Id| &eg[id].data;
    let (w1, w2, x) = (d(w1), d(w2), d(x));
    let weights = |w: &Data| w.load_time && w.deps.is_empty() && !w.params.is_empty();
    (weights(w1) && weights(w2) && !x.load_time).then_some(())?;
    (w1.params.last()? < w2.params.first()?).then_some(())?;
    let (b1, b2) = (d(b1), d(b2));
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
