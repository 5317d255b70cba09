//! Values that are functions of positions only, found in the IR for one set of dims.
//!
//! A number such as `j - i` or `arange(M)[None, :] - W` is an exact integer affine function
//! of the scores' query row `i` and key `j` ([`Lin`]); a boolean such as `(j > i) | (i - j >=
//! W)`, or `ones(N, N).tril() == 0`, is a formula over comparisons of them ([`Keep`]). The
//! attention kernel then computes a mask from `i` and `j` rather than reading one, and skips
//! the tiles it removes; a score change reads `i` and `j` rather than a bias tensor.
//!
//! Axes are aligned from the right, as broadcasting aligns them: a value's last axis is the
//! key `j`, the one before it the row `i`; any other axis it varies along makes it no
//! function of positions.

use crate::ir::{BinaryOp, CmpOp, DType, Op, Program, UnaryOp, ValueId};
use crate::kernel::{Affine, Keep};

/// Values beyond this magnitude are not exact in float32, where the reference computes.
const EXACT: i64 = 1 << 24;

/// What the analysis needs of the program: its nodes and the value of each dim.
pub struct Positions<'p> {
    pub program: &'p Program,
    pub dims: &'p [Option<i64>],
}

/// `Σ coef[a] * index[a] + c` over a value's axes (left to right), all integers.
#[derive(Clone, Debug, PartialEq)]
struct Lin {
    coef: Vec<i64>,
    c: i64,
}

impl Lin {
    fn constant(rank: usize, c: i64) -> Lin {
        Lin {
            coef: vec![0; rank],
            c,
        }
    }

    fn is_constant(&self) -> bool {
        self.coef.iter().all(|&k| k == 0)
    }

    /// `self op other` term by term, broadcast from the right.
    fn zip(&self, other: &Lin, op: fn(i64, i64) -> Option<i64>) -> Option<Lin> {
        let rank = self.coef.len().max(other.coef.len());
        let at = |l: &Lin, a: usize| {
            let pad = rank - l.coef.len();
            if a < pad {
                0
            } else {
                l.coef[a - pad]
            }
        };
        let coef = (0..rank)
            .map(|a| op(at(self, a), at(other, a)))
            .collect::<Option<Vec<_>>>()?;
        Some(Lin {
            coef,
            c: op(self.c, other.c)?,
        })
    }

    fn scaled(&self, k: i64) -> Option<Lin> {
        let coef = self
            .coef
            .iter()
            .map(|&a| a.checked_mul(k))
            .collect::<Option<_>>()?;
        Some(Lin {
            coef,
            c: self.c.checked_mul(k)?,
        })
    }

    /// `(ci, cj, c)` over the scores' row and key, when it varies along no other axis.
    fn over_scores(&self) -> Option<Affine> {
        let r = self.coef.len();
        let at = |back: usize| if back < r { self.coef[r - 1 - back] } else { 0 };
        let others = self.coef.iter().take(r.saturating_sub(2)).all(|&k| k == 0);
        others.then_some(Affine {
            ci: at(1),
            cj: at(0),
            c: self.c,
        })
    }
}

/// The formula that always holds (`truth`) or never does.
fn always(truth: bool) -> Keep {
    Keep::Atom(Affine {
        ci: 0,
        cj: 0,
        c: if truth { 0 } else { -1 },
    })
}

/// `~k`, without a double negation.
pub fn not(k: Keep) -> Keep {
    match k {
        Keep::Not(inner) => *inner,
        k => Keep::Not(Box::new(k)),
    }
}

impl Positions<'_> {
    fn op(&self, id: ValueId) -> &Op {
        &self.program.node(id).op
    }

    fn args(&self, id: ValueId) -> &[ValueId] {
        &self.program.node(id).args
    }

    /// The concrete sizes of `id`'s shape.
    pub fn sizes(&self, id: ValueId) -> Option<Vec<i64>> {
        let dims = &self.program.dims;
        let value = |s| self.dims.get(s).copied().flatten();
        self.program
            .tensor_type(id)
            .shape
            .iter()
            .map(|p| dims.eval(p, &value))
            .collect()
    }

    fn size(&self, p: &crate::dims::Poly) -> Option<i64> {
        let value = |s| self.dims.get(s).copied().flatten();
        self.program.dims.eval(p, &value)
    }

    /// The value of a rank-0 constant (literals, dims and arithmetic on them), computed in
    /// float32 as the interpreter computes it.
    pub fn scalar(&self, id: ValueId) -> Option<f32> {
        let a = |i: usize| self.scalar(self.args(id)[i]);
        match self.op(id) {
            Op::Literal(v) => Some(*v as f32),
            Op::DimValue(p) => self.size(p).map(|v| v as f32),
            Op::Unary(u) => Some(u.eval(a(0)?)),
            Op::Binary(b) => Some(b.eval(a(0)?, a(1)?)),
            _ => None,
        }
    }

    /// Every element of `id`, when they are all one number (a scalar, `ones(..)`).
    fn uniform(&self, id: ValueId) -> Option<f32> {
        match self.op(id) {
            Op::Fill(v) => Some(*v as f32),
            _ if self.program.tensor_type(id).rank() == 0 => self.scalar(id),
            _ => None,
        }
    }

    /// `id` as an exact integer affine function of its own indices.
    fn lin(&self, id: ValueId) -> Option<Lin> {
        let rank = self.program.tensor_type(id).rank();
        if let Some(v) = self.uniform(id) {
            let exact = v.fract() == 0.0 && (v.abs() as i64) < EXACT;
            return exact.then(|| Lin::constant(rank, v as i64));
        }
        let arg = |i: usize| self.lin(self.args(id)[i]);
        let mut lin = match self.op(id) {
            Op::Arange { start, step } => Lin {
                coef: vec![self.size(step)?],
                c: self.size(start)?,
            },
            Op::Expand(_) => {
                let (l, from) = (arg(0)?, self.sizes(self.args(id)[0])?);
                let mut coef = vec![0; rank.checked_sub(from.len())?];
                coef.extend(l.coef);
                Lin { coef, c: l.c }
            }
            Op::Unsqueeze(a) => {
                let mut l = arg(0)?;
                (*a <= l.coef.len()).then(|| l.coef.insert(*a, 0))?;
                l
            }
            Op::Squeeze(a) => {
                let mut l = arg(0)?;
                (*a < l.coef.len()).then(|| l.coef.remove(*a))?;
                l
            }
            Op::Transpose(a, b) => {
                let mut l = arg(0)?;
                (*a < rank && *b < rank).then(|| l.coef.swap(*a, *b))?;
                l
            }
            Op::Permute(perm) => {
                let l = arg(0)?;
                let coef = perm
                    .iter()
                    .map(|&p| l.coef.get(p).copied())
                    .collect::<Option<_>>()?;
                Lin { coef, c: l.c }
            }
            Op::View(_) | Op::Reshape(_) => self.reshaped(id, arg(0)?)?,
            Op::Contiguous => arg(0)?,
            Op::Slice { axis, start, .. } => {
                let l = arg(0)?;
                let shift = l.coef.get(*axis)?.checked_mul(self.size(start)?)?;
                Lin {
                    c: l.c.checked_add(shift)?,
                    ..l
                }
            }
            Op::Select { axis, index } => {
                let mut l = arg(0)?;
                let shift = l.coef.get(*axis)?.checked_mul(self.size(index)?)?;
                l.coef.remove(*axis);
                Lin {
                    c: l.c.checked_add(shift)?,
                    ..l
                }
            }
            Op::Unary(UnaryOp::Neg) => arg(0)?.scaled(-1)?,
            Op::Binary(op) => {
                let (a, b) = (arg(0)?, arg(1)?);
                match op {
                    BinaryOp::Add => a.zip(&b, i64::checked_add)?,
                    BinaryOp::Sub => a.zip(&b, i64::checked_sub)?,
                    // A constant factor of a higher rank only broadcasts the product.
                    BinaryOp::Mul if b.is_constant() => {
                        a.scaled(b.c)?.zip(&b.scaled(0)?, i64::checked_add)?
                    }
                    BinaryOp::Mul if a.is_constant() => {
                        b.scaled(a.c)?.zip(&a.scaled(0)?, i64::checked_add)?
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        // An axis of size 1 has index 0 (broadcasting repeats it): it adds nothing.
        let sizes = self.sizes(id)?;
        (lin.coef.len() == rank).then_some(())?;
        for (k, n) in lin.coef.iter_mut().zip(sizes) {
            if n == 1 {
                *k = 0;
            }
        }
        Some(lin)
    }

    /// A view that only inserts or removes axes of size 1 keeps the coefficients of the
    /// others, in order.
    fn reshaped(&self, id: ValueId, l: Lin) -> Option<Lin> {
        let from = self.sizes(self.args(id)[0])?;
        let to = self.sizes(id)?;
        let kept: Vec<(i64, i64)> = from
            .iter()
            .zip(&l.coef)
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &k)| (n, k))
            .collect();
        let sizes: Vec<i64> = to.iter().copied().filter(|&n| n != 1).collect();
        (kept.iter().map(|p| p.0).eq(sizes.iter().copied())).then_some(())?;
        let mut coefs = kept.into_iter().map(|p| p.1);
        let coef = to
            .iter()
            .map(|&n| if n == 1 { 0 } else { coefs.next().unwrap_or(0) })
            .collect();
        Some(Lin { coef, c: l.c })
    }

    /// Whether the values of `l` over `id`'s shape stay exact in float32.
    fn exact(&self, id: ValueId, l: &Lin) -> bool {
        let reach = self.sizes(id).and_then(|sizes| {
            sizes
                .iter()
                .zip(&l.coef)
                .try_fold(l.c.checked_abs()?, |acc, (&n, &k)| {
                    acc.checked_add(k.checked_abs()?.checked_mul((n - 1).max(0))?)
                })
        });
        reach.is_some_and(|r| r < EXACT)
    }

    /// The number `id` as `ci * i + cj * j + c` over the scores' row `i` and key `j`.
    pub fn affine(&self, id: ValueId) -> Option<Affine> {
        let l = self.lin(id)?;
        self.exact(id, &l).then_some(())?;
        l.over_scores()
    }

    /// Where the boolean `id` holds, as a formula of the scores' row and key.
    pub fn keep(&self, id: ValueId) -> Option<Keep> {
        let keep = |i: usize| self.keep(self.args(id)[i]).map(Box::new);
        match (self.op(id), self.args(id)) {
            (Op::Compare(op), &[a, b]) => self.compare(*op, a, b),
            (Op::Unary(UnaryOp::Not), _) => Some(not(*keep(0)?)),
            (Op::Binary(BinaryOp::And), _) => Some(Keep::And(keep(0)?, keep(1)?)),
            (Op::Binary(BinaryOp::Or), _) => Some(Keep::Or(keep(0)?, keep(1)?)),
            // Views of a mask that keep its last two axes last (`m[None, None]`): its value
            // at the scores' row and key.
            (Op::Unsqueeze(a), &[x]) => {
                let r = self.program.tensor_type(x).rank();
                (*a <= r - r.min(2)).then(|| self.keep(x))?
            }
            (Op::Expand(_) | Op::Contiguous, &[x]) => self.keep(x),
            _ => None,
        }
    }

    fn compare(&self, op: CmpOp, a: ValueId, b: ValueId) -> Option<Keep> {
        if let (Some(a), Some(b)) = (self.affine(a), self.affine(b)) {
            let d = Affine {
                ci: a.ci.checked_sub(b.ci)?,
                cj: a.cj.checked_sub(b.cj)?,
                c: a.c.checked_sub(b.c)?,
            };
            return Some(affine_compare(op, d));
        }
        // One side takes two values, the other is a constant: `ones(N, N).tril() == 0`.
        let (two, c, op) = match (self.two_valued(a), self.uniform(b)) {
            (Some(t), Some(c)) => (t, c, op),
            _ => (self.two_valued(b)?, self.uniform(a)?, flip(op)),
        };
        let (k, yes, no) = two;
        let holds = |x: f32| op.holds(x.partial_cmp(&c).unwrap_or(std::cmp::Ordering::Less));
        let nan = yes.is_nan() || no.is_nan() || c.is_nan();
        Some(match (holds(yes), holds(no)) {
            _ if nan => return None,
            (true, true) => always(true),
            (false, false) => always(false),
            (true, false) => k,
            (false, true) => not(k),
        })
    }

    /// A value that is `yes` where `k` holds and `no` elsewhere (`full(.., c).triu(1)`, a
    /// comparison of positions as 1.0 or 0.0).
    pub fn two_valued(&self, id: ValueId) -> Option<(Keep, f32, f32)> {
        match (self.op(id), self.args(id)) {
            (&Op::Tri { upper, diagonal }, &[x]) => {
                let v = self.uniform(x)?;
                // tril keeps `j - i <= d`, triu `j - i >= d`.
                let (ci, cj) = if upper { (-1, 1) } else { (1, -1) };
                let c = if upper { diagonal.checked_neg()? } else { diagonal };
                Some((Keep::Atom(Affine { ci, cj, c }), v, 0.0))
            }
            (Op::Where, &[cond, a, b]) => Some((self.keep(cond)?, self.uniform(a)?, self.uniform(b)?)),
            _ if self.program.tensor_type(id).dtype == DType::Bool => Some((self.keep(id)?, 1.0, 0.0)),
            // Arithmetic of a two-valued side and a uniform one (`(1.0 - causal) * -1e9`),
            // each value computed as the interpreter computes it.
            (&Op::Binary(op), &[a, b]) => match (self.two_valued(a), self.two_valued(b)) {
                (Some((k, yes, no)), _) => {
                    let c = self.uniform(b)?;
                    Some((k, op.eval(yes, c), op.eval(no, c)))
                }
                (None, Some((k, yes, no))) => {
                    let c = self.uniform(a)?;
                    Some((k, op.eval(c, yes), op.eval(c, no)))
                }
                (None, None) => None,
            },
            _ => None,
        }
    }

    /// A float mask added to the scores that removes what it does not keep: 0 (of either
    /// sign: `s + -0.0` is `s`) where it keeps, and elsewhere `fill`, `-inf` or a finite
    /// value at most [`REMOVES`] (`(1.0 - causal) * -1e9`, `full(.., min).triu(1)`). Where a
    /// row keeps a key, such a finite fill weighs `exp(s + fill - max)`, 0 in float32 unless
    /// the row's scores span 1e9, as a removed score does; the caller must check that every
    /// row keeps one (a row that keeps none is uniform only up to the rounding of `s + fill`).
    pub fn additive(&self, id: ValueId) -> Option<(Keep, f32)> {
        let (k, yes, no) = self.two_valued(id)?;
        let (keep, fill) = match (yes == 0.0, no == 0.0) {
            (true, false) => (k, no),
            (false, true) => (not(k), yes),
            _ => return None,
        };
        (fill <= REMOVES).then_some((keep, fill))
    }
}

/// The largest value an additive mask may add where it removes a score: `exp(-1e9)` and
/// anything smaller is 0 in float32 by a wide margin.
const REMOVES: f32 = -1e9;

/// `d op 0` for an integer-valued `d`.
fn affine_compare(op: CmpOp, d: Affine) -> Keep {
    let neg = Affine {
        ci: -d.ci,
        cj: -d.cj,
        c: -d.c,
    };
    let minus_one = |a: Affine| Affine { c: a.c - 1, ..a };
    let ge = Keep::Atom(d);
    let le = Keep::Atom(neg);
    match op {
        CmpOp::Ge => ge,
        CmpOp::Gt => Keep::Atom(minus_one(d)),
        CmpOp::Le => le,
        CmpOp::Lt => Keep::Atom(minus_one(neg)),
        CmpOp::Eq => Keep::And(Box::new(ge), Box::new(le)),
        CmpOp::Ne => not(Keep::And(Box::new(ge), Box::new(le))),
    }
}

/// `c op x` as `x op' c`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        op => op,
    }
}
