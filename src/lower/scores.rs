//! Score changes computed inside the attention kernel: the optimizer's `scored_attention`
//! takes scores a program computed (`50.0 * tanh(q @ kᵀ / 50.0)`, `q @ kᵀ + slopes[:, None,
//! None] * (j - i)`); where they are an elementwise function of one `q @ kᵀ`, that function
//! becomes the kernel's [`crate::kernel::ScoreMod`], applied to each tile of scores, so the
//! scores are never stored.
//!
//! The formula's leaves are the score, the row `i` and key `j` (for values that are functions
//! of positions only, see [`super::positions`]), constants, and tensors read through their
//! strides over the scores' shape (a per-head slope has stride 0 along rows and keys).

use super::positions::Positions;
use crate::ir::{CmpOp, Op, ValueId};
use crate::kernel::{Affine, BinaryOp, Expr, Keep, ScoreMod, UnaryOp};

/// A score change, found once by fusion and built into a kernel by the lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct ScorePlan {
    /// The GEMM `q @ kᵀ` (times its alpha) that is the formula's score.
    pub gemm: ValueId,
    /// The formula: [`Expr::Input`] 0 is the score, 1 the row, 2 the key, `3 + t` the
    /// element of `tensors[t]`.
    pub expr: Vec<Expr>,
    pub tensors: Vec<ValueId>,
    /// The elementwise nodes (and the GEMM) the kernel computes: no kernel of their own.
    pub inlined: Vec<ValueId>,
    /// The values of positions the formula computes from `i` and `j`.
    pub positional: Vec<ValueId>,
}

/// The score change of scores `s`, when it is an elementwise function of one GEMM of the
/// scores' shape. `free` says which nodes nothing else reads (only those are computed in
/// the kernel).
pub fn plan(pos: &Positions, s: ValueId, free: &dyn Fn(ValueId) -> bool) -> Option<ScorePlan> {
    let mut b = Builder {
        pos,
        free,
        scores: pos.program.tensor_type(s).shape.clone(),
        plan: ScorePlan {
            gemm: usize::MAX,
            expr: Vec::new(),
            tensors: Vec::new(),
            inlined: Vec::new(),
            positional: Vec::new(),
        },
    };
    b.walk(s)?;
    (b.plan.gemm != usize::MAX).then_some(b.plan)
}

struct Builder<'a, 'p> {
    pos: &'a Positions<'p>,
    free: &'a dyn Fn(ValueId) -> bool,
    scores: Vec<crate::dims::Poly>,
    plan: ScorePlan,
}

impl Builder<'_, '_> {
    fn push(&mut self, e: Expr) -> usize {
        self.plan.expr.push(e);
        self.plan.expr.len() - 1
    }

    /// Appends `id`'s formula; returns its node.
    fn walk(&mut self, id: ValueId) -> Option<usize> {
        let program = self.pos.program;
        let node = program.node(id);
        if program.tensor_type(id).rank() == 0 {
            if let Some(c) = self.pos.scalar(id) {
                return Some(self.push(Expr::Const(c)));
            }
        }
        if let Some(a) = self.pos.affine(id) {
            self.plan.positional.push(id);
            return Some(self.affine(a));
        }
        // An additive mask of positions (`full([N, N], min).triu(1)`): computed, not read.
        if let Some((keep, yes, no)) = self.pos.two_valued(id) {
            self.plan.positional.push(id);
            let holds = self.keep(&keep);
            let (yes, no) = (self.push(Expr::Const(yes)), self.push(Expr::Const(no)));
            return Some(self.push(Expr::Select(holds, yes, no)));
        }
        let inline = (self.free)(id);
        if inline && self.plan.gemm == usize::MAX && self.is_scores(id) {
            self.plan.gemm = id;
            self.plan.inlined.push(id);
            return Some(self.push(Expr::Input(0)));
        }
        if !(inline && node.op.is_elementwise()) {
            let t = match self.plan.tensors.iter().position(|&t| t == id) {
                Some(t) => t,
                None => {
                    self.plan.tensors.push(id);
                    self.plan.tensors.len() - 1
                }
            };
            return Some(self.push(Expr::Input(ScoreMod::LEAVES + t)));
        }
        self.plan.inlined.push(id);
        let mut a = Vec::new();
        for &x in &node.args {
            a.push(self.walk(x)?);
        }
        let e = match (&node.op, a.as_slice()) {
            (Op::Unary(u), &[x]) => Expr::Unary(*u, x),
            (Op::Binary(op), &[x, y]) => Expr::Binary(*op, x, y),
            (Op::Compare(c), &[x, y]) => Expr::Compare(*c, x, y),
            (Op::MaskedFill, &[x, m, v]) => Expr::Select(m, v, x),
            (Op::Where, &[c, x, y]) => Expr::Select(c, x, y),
            _ => return None,
        };
        Some(self.push(e))
    }

    /// A GEMM `q @ kᵀ` (or `q @ kt`) of the scores' whole shape, without a bias.
    fn is_scores(&self, id: ValueId) -> bool {
        let program = self.pos.program;
        let node = program.node(id);
        let shape = &program.tensor_type(id).shape;
        let whole = shape.len() == self.scores.len()
            && shape
                .iter()
                .zip(&self.scores)
                .all(|(a, b)| program.dims.equal(a, b));
        matches!(node.op, Op::Gemm { trans_a: false, .. }) && node.args.len() == 2 && whole
    }

    /// 1.0 where `keep` holds at the row and key, else 0.0.
    fn keep(&mut self, keep: &Keep) -> usize {
        match keep {
            Keep::Atom(a) => {
                let x = self.affine(*a);
                let zero = self.push(Expr::Const(0.0));
                self.push(Expr::Compare(CmpOp::Ge, x, zero))
            }
            Keep::And(a, b) | Keep::Or(a, b) => {
                let (a2, b2) = (self.keep(a), self.keep(b));
                let op = if matches!(keep, Keep::And(..)) {
                    BinaryOp::And
                } else {
                    BinaryOp::Or
                };
                self.push(Expr::Binary(op, a2, b2))
            }
            Keep::Not(a) => {
                let a = self.keep(a);
                self.push(Expr::Unary(UnaryOp::Not, a))
            }
        }
    }

    /// `ci * i + cj * j + c`, exact in float32 (see [`Positions::affine`]).
    fn affine(&mut self, a: Affine) -> usize {
        let mut acc = None;
        for (k, leaf) in [(a.ci, 1), (a.cj, 2)] {
            if k == 0 {
                continue;
            }
            let mut term = self.push(Expr::Input(leaf));
            if k != 1 {
                let k = self.push(Expr::Const(k as f32));
                term = self.push(Expr::Binary(BinaryOp::Mul, term, k));
            }
            acc = Some(match acc {
                Some(sum) => self.push(Expr::Binary(BinaryOp::Add, sum, term)),
                None => term,
            });
        }
        match (acc, a.c) {
            (Some(sum), 0) => sum,
            (Some(sum), c) => {
                let c = self.push(Expr::Const(c as f32));
                self.push(Expr::Binary(BinaryOp::Add, sum, c))
            }
            (None, c) => self.push(Expr::Const(c as f32)),
        }
    }
}
