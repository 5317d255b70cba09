//! The computed right sides that drop views that do nothing and fuse ops into the
//! engineered ones: GEMMs with their transposes and scales, softmax, attention.

use super::*;

pub(super) fn reshape_noop(m: &Match, r: &mut Rhs) -> Option<()> {
    let same = m
        .ctx()
        .same_shape(m.data("?x").shape()?, m.data("?s").shape_attr()?);
    same.then(|| {
        r.var("?x");
    })
}

pub(super) fn slice_slice(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn slice_noop(m: &Match, r: &mut Rhs) -> Option<()> {
    let ctx = m.ctx();
    let size = m.data("?x").shape()?.get(m.data("?a").axis()?)?;
    let whole = ctx.equal(m.data("?s").dim()?, &Poly::int(0)) && ctx.equal(m.data("?e").dim()?, size);
    whole.then(|| {
        r.var("?x");
    })
}

pub(super) fn matmul_gemm(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn gemm_trans_a(m: &Match, r: &mut Rhs) -> Option<()> {
    last_two(m, "?a")?;
    let ta = 1 - m.data("?ta").int()?;
    let ids = [r.var("?a"), r.var("?b"), r.var("?c")];
    let ta = r.int(ta as usize);
    let (tb, al) = (r.var("?tb"), r.var("?al"));
    r.node(Tensor::Gemm([ids[0], ids[1], ids[2], ta, tb, al]));
    Some(())
}

pub(super) fn gemm_trans_b(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn div_scale(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = constant(m, "?c")?;
    scale_of(m, r, "?x", 1.0 / c)
}

pub(super) fn mul_scale_right(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = constant(m, "?c")?;
    scale_of(m, r, "?x", c)
}

pub(super) fn mul_scale_left(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = constant(m, "?c")?;
    (m.data("?x").konst.is_none()).then_some(())?;
    scale_of(m, r, "?x", c)
}

pub(super) fn scale_scale(m: &Match, r: &mut Rhs) -> Option<()> {
    let c = m.data("?a").float()? * m.data("?b").float()?;
    let x = r.var("?x");
    let c = r.float(c);
    r.node(Tensor::Scale([x, c]));
    Some(())
}

pub(super) fn scale_gemm(m: &Match, r: &mut Rhs) -> Option<()> {
    let alpha = m.data("?al").float()? * m.data("?s").float()?;
    let ids = [r.var("?a"), r.var("?b"), r.var("?c"), r.var("?ta"), r.var("?tb")];
    let al = r.float(alpha);
    r.node(Tensor::Gemm([ids[0], ids[1], ids[2], ids[3], ids[4], al]));
    Some(())
}

pub(super) fn gemm_alpha_to_a(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn scale_linear(m: &Match, r: &mut Rhs) -> Option<()> {
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

pub(super) fn fuse_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    last_axis(m, "?x", "?d")?;
    let x = r.var("?x");
    let none = r.node(Tensor::None);
    let (one, zero) = (r.float(1.0), r.float(0.0));
    r.node(Tensor::MaskedSoftmax([x, none, one, zero]));
    Some(())
}

pub(super) fn fuse_masked_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    last_axis(m, "?x", "?d")?;
    let fill = constant(m, "?f")?;
    let (x, mask) = (r.var("?x"), r.var("?m"));
    let (one, fill) = (r.float(1.0), r.float(fill));
    r.node(Tensor::MaskedSoftmax([x, mask, one, fill]));
    Some(())
}

pub(super) fn fuse_scale_softmax(m: &Match, r: &mut Rhs) -> Option<()> {
    let scale = m.data("?s").float()? * m.data("?t").float()?;
    let (x, mask) = (r.var("?x"), r.var("?m"));
    let (scale, fill) = (r.float(scale), r.var("?f"));
    r.node(Tensor::MaskedSoftmax([x, mask, scale, fill]));
    Some(())
}

pub(super) fn fuse_attention(m: &Match, r: &mut Rhs) -> Option<()> {
    let scale = m.data("?al").float()? * m.data("?s").float()?;
    let ids = [r.var("?q"), r.var("?k"), r.var("?v"), r.var("?m")];
    let (scale, fill) = (r.float(scale), r.var("?f"));
    r.node(Tensor::Attention([ids[0], ids[1], ids[2], ids[3], scale, fill]));
    Some(())
}

pub(super) fn fuse_scored_attention(m: &Match, r: &mut Rhs) -> Option<()> {
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
