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
    let vars = ["?p", "?q", "?x", "?w1", "?b1", "?w2", "?b2"].map(Match::var);
    Rewrite::new("merge-linear", LinearPairs(vars), MergeLinear(vars)).unwrap()
}

/// The searcher of `?p = (linear ?x ?w1 ?b1), ?q = (linear ?x ?w2 ?b2)` where the two may
/// merge ([`joinable`]): the matches egg's `MultiPattern` found, in its order, less the pairs
/// the applier refused. The multi-pattern ran its program from every class and, for each
/// `linear`, scanned every class for the second one, and every pair of projections of one
/// input matched at every iteration (a third of the seed module's searching, and 1,007
/// applications of which 66 could merge: `BENCHMARKS.md`, "Session 24"). Here the
/// `linear`s are listed once and paired by input.
struct LinearPairs([Var; 7]);

impl LinearPairs {
    /// Each `linear` node's class and operands, in the order of the classes and of their
    /// nodes, with its input class canonical.
    fn linears(eg: &EG) -> Vec<(Id, [Id; 3])> {
        eg.classes()
            .flat_map(|c| {
                c.nodes.iter().filter_map(move |n| match n {
                    Tensor::Linear([x, w, b]) => Some((c.id, [eg.find(*x), *w, *b])),
                    _ => None,
                })
            })
            .collect()
    }

    /// The matches whose `?p` is `class`, at most `limit`.
    fn pairs(
        &self,
        eg: &EG,
        linears: &[(Id, [Id; 3])],
        class: Id,
        limit: usize,
    ) -> Option<SearchMatches<'static, Tensor>> {
        let [p, q, x, w1, b1, w2, b2] = self.0;
        let mut substs = Vec::new();
        for (_, [x1, first_w, first_b]) in linears.iter().filter(|(c, _)| *c == class) {
            let pairs = linears
                .iter()
                .filter(|(_, [x2, w2, b2])| x2 == x1 && joinable(eg, [*x1, *first_w, *first_b, *w2, *b2]));
            for (second, [_, second_w, second_b]) in pairs {
                if substs.len() == limit {
                    break;
                }
                let mut s = Subst::with_capacity(7);
                let ids = [class, *second, *x1, *first_w, *first_b, *second_w, *second_b];
                for (var, id) in [p, q, x, w1, b1, w2, b2].into_iter().zip(ids) {
                    s.insert(var, id);
                }
                substs.push(s);
            }
        }
        (!substs.is_empty()).then_some(SearchMatches {
            eclass: class,
            substs,
            ast: None,
        })
    }
}

impl Searcher<Tensor, Ctx> for LinearPairs {
    fn search_eclass_with_limit(
        &self,
        eg: &EG,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Tensor>> {
        self.pairs(eg, &Self::linears(eg), eg.find(eclass), limit)
    }

    fn search_with_limit(&self, eg: &EG, mut limit: usize) -> Vec<SearchMatches<'_, Tensor>> {
        let linears = Self::linears(eg);
        let mut classes: Vec<Id> = linears.iter().map(|(c, _)| *c).collect();
        classes.dedup();
        let mut found = Vec::new();
        for class in classes {
            if limit == 0 {
                break;
            }
            if let Some(m) = self.pairs(eg, &linears, class, limit) {
                limit -= m.substs.len();
                found.push(m);
            }
        }
        found
    }

    fn vars(&self) -> Vec<Var> {
        self.0.to_vec()
    }
}

/// The searcher's variables, `?p ?q ?x ?w1 ?b1 ?w2 ?b2`, parsed once: a parse interns the
/// name in egg's symbol table, and this applier runs for every pair that may merge at every
/// iteration (parsing at each was 2 % of the seed module's compile, `BENCHMARKS.md`,
/// "Session 23").
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
        let Some((o1, o2, axis)) = merge_sizes(eg, [x, w1, w2]) else {
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

/// Whether two projections of one input may merge: load-time weights (and biases, both or
/// neither) in param order, over a run-time input. Asked by the searcher, so that a pair
/// that may not merge is never a match (nine in ten of the seed module's pairs).
fn joinable(eg: &EG, [x, w1, b1, w2, b2]: [Id; 5]) -> bool {
    let d = |id: Id| &eg[id].data;
    let (w1, w2, x) = (d(w1), d(w2), d(x));
    let weights = |w: &Data| w.load_time && w.deps.is_empty() && !w.params.is_empty();
    let in_order = matches!((w1.params.last(), w2.params.first()), (Some(a), Some(b)) if a < b);
    let (b1, b2) = (d(b1), d(b2));
    let biases = match (b1.is_none(), b2.is_none()) {
        (true, true) => true,
        (false, false) => b1.load_time && b2.load_time,
        _ => false,
    };
    weights(w1) && weights(w2) && !x.load_time && in_order && biases
}

/// The output sizes of both projections and the axis to slice.
fn merge_sizes(eg: &EG, [x, w1, w2]: [Id; 3]) -> Option<(Poly, Poly, usize)> {
    let d = |id: Id| &eg[id].data;
    let rank = d(x).rank()?;
    (rank >= 1).then_some(())?;
    Some((
        d(w1).shape()?.first()?.clone(),
        d(w2).shape()?.first()?.clone(),
        rank - 1,
    ))
}
