//! Softmax and attention kernels: the masks and score changes they apply, the softmax
//! kernel, and the flash-style attention kernel with its extras (positions, a score change
//! computed tile by tile, a KV cache read in place, grouped heads).

use super::fuse::SoftmaxPat;
use super::tiling::attention_blocks;
use super::{internal, Lowerer, View};
use crate::ir::{BinaryOp, Op, ValueId};
use crate::kernel::{
    Attention, Expr, IndexMask, KernelOp, KeyTail, MaskFill, Operand, PlanError, ScoreMod, Softmax,
};

/// What a mask does to scores: where `mask op rhs` holds, the score becomes `fill`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Masking {
    pub(super) mask: ValueId,
    pub(super) op: crate::ir::CmpOp,
    pub(super) rhs: f32,
    pub(super) fill: f32,
}

impl Masking {
    pub(super) fn kernel(&self, mask: Operand) -> MaskFill {
        MaskFill {
            mask,
            op: self.op,
            rhs: self.rhs,
            fill: self.fill,
        }
    }
}

/// The keys of an attention kernel: `kᵀ` as the source writes it (`q @ k.transpose(-2, -1)`),
/// or `k` itself, as the optimizer's fused op takes it.
#[derive(Clone, Copy, Debug)]
pub(super) enum KeyOperand {
    Transposed(ValueId),
    Keys(ValueId),
}

/// What an attention kernel computes besides its two products (see [`Attention`]).
#[derive(Default)]
pub(super) struct Extras {
    pub(super) positions: Option<IndexMask>,
    /// The score change: its formula and the tensors it reads.
    pub(super) score: Option<(Vec<Expr>, Vec<ValueId>)>,
    /// The `cat` nodes of keys and values read as cache and tail.
    pub(super) tail: Option<[ValueId; 2]>,
    /// Keys and values of fewer heads, and how many query heads share each.
    pub(super) group: Option<([ValueId; 2], usize)>,
}

impl Lowerer<'_> {
    /// The mask of an optimizer's attention op: a mask of positions when fusion found one,
    /// else the kernel's masking; and keys read as cache and tail when fusion found them.
    pub(super) fn attention_masking(
        &self,
        id: ValueId,
        mask: Option<ValueId>,
        fill: f64,
    ) -> (Option<Masking>, Extras) {
        let extras = Extras {
            positions: self.fusion.positions.get(&id).map(|keep| IndexMask {
                keep: keep.clone(),
                fill: self.fusion.fills.get(&id).copied().unwrap_or(fill as f32),
            }),
            score: None,
            tail: self.fusion.tails.get(&id).copied(),
            group: self.fusion.groups.get(&id).copied(),
        };
        let masking = match extras.positions {
            Some(_) => None,
            None => mask.map(|m| self.bool_masking(m, fill)),
        };
        (masking, extras)
    }

    /// `softmax(masked_fill(s * scale, mask, fill), -1) @ v`: one attention kernel that
    /// computes the score change where fusion found one, else the scores, a softmax and a
    /// GEMM.
    pub(super) fn scored_attention(
        &mut self,
        id: ValueId,
        args: &[ValueId],
        scale: f32,
        fill: f64,
    ) -> Result<View, PlanError> {
        let (mask, mut extras) = self.attention_masking(id, args.get(2).copied(), fill);
        let bad = || internal(format!("node {id}: scored attention operands do not fit"));
        let Some(plan) = self.fusion.scores.get(&id).cloned() else {
            let mask = args.get(2).map(|&m| self.bool_masking(m, fill));
            let axis = self.shape(args[0])?.len().checked_sub(1).ok_or_else(bad)?;
            let p = self.softmax(id, axis, args[0], scale, mask)?;
            let v = self.view(args[1])?;
            let out = self.gemm(id, &p, &v, 1.0, None)?;
            return out.reshape(&self.shape(id)?).ok_or_else(bad);
        };
        let gemm = self.program.node(plan.gemm);
        let (Op::Gemm { trans_b, alpha, .. }, &[q, k]) = (&gemm.op, gemm.args.as_slice()) else {
            return Err(bad());
        };
        let keys = if *trans_b {
            KeyOperand::Keys(k)
        } else {
            KeyOperand::Transposed(k)
        };
        let mut expr = plan.expr;
        if scale != 1.0 {
            let root = expr.len() - 1;
            expr.push(Expr::Const(scale));
            expr.push(Expr::Binary(BinaryOp::Mul, root, root + 1));
        }
        // Scores that are the GEMM's alone (the rest was a mask of positions) need no change.
        extras.score = (expr != [Expr::Input(0)]).then_some((expr, plan.tensors));
        self.attention(id, [q, args[1]], keys, *alpha as f32, mask, extras)
    }

    /// A bool mask of the optimizer's fused ops as the kernels' masking: a comparison with
    /// a constant that fusion absorbed is tested inside the kernel; any other bool tensor
    /// (stored as 0 or 1) masks where it is not 0.
    pub(super) fn bool_masking(&self, m: ValueId, fill: f64) -> Masking {
        let node = self.program.node(m);
        match (&node.op, node.args.as_slice()) {
            (Op::Compare(op), &[x, c]) if self.fusion.absorbed[m] => Masking {
                mask: x,
                op: *op,
                rhs: self.constant(c).unwrap_or(0.0),
                fill: fill as f32,
            },
            _ => Masking {
                mask: m,
                op: crate::ir::CmpOp::Ne,
                rhs: 0.0,
                fill: fill as f32,
            },
        }
    }

    /// The constants of a softmax pattern: `(x, scale, masking)`.
    pub(super) fn resolve(&self, pat: SoftmaxPat) -> Result<(ValueId, f32, Option<Masking>), PlanError> {
        let scale = pat.scale.map(|s| self.scale(s)).transpose()?.unwrap_or(1.0);
        let mask = match pat.mask {
            Some(m) => Some(Masking {
                mask: m.mask,
                op: m.op,
                rhs: self.constant(m.rhs)?,
                fill: self.constant(m.fill)?,
            }),
            None => None,
        };
        Ok((pat.x, scale, mask))
    }

    /// The mask's kernel operand over `shape` (it broadcasts), and what it does.
    pub(super) fn mask_fill(
        &mut self,
        m: Option<Masking>,
        shape: &[usize],
    ) -> Result<Option<(View, Masking)>, PlanError> {
        let Some(m) = m else { return Ok(None) };
        let v = self.view(m.mask)?;
        let v = v
            .expand(shape)
            .ok_or_else(|| internal(format!("the mask does not broadcast to {shape:?}")))?;
        Ok(Some((v, m)))
    }

    /// `softmax(masked_fill(x * scale, mask op rhs, fill), axis)` into a fresh buffer: the
    /// entry point for a fused scale-mask-softmax op (`mask` broadcasts to `x`).
    pub(super) fn softmax(
        &mut self,
        id: ValueId,
        axis: usize,
        x: ValueId,
        scale: f32,
        mask: Option<Masking>,
    ) -> Result<View, PlanError> {
        let x = self.view(x)?;
        let shape = x.shape.clone();
        let mask = self.mask_fill(mask, &shape)?;
        let out = self.temp(shape.clone());
        // Move the softmax axis last in every operand; the buffers keep their layout.
        let mut perm: Vec<usize> = (0..shape.len()).filter(|&a| a != axis).collect();
        perm.push(axis);
        let bad = || internal(format!("node {id}: bad softmax axis"));
        let permuted = |v: &View| v.permute(&perm).map(|v| v.operand()).ok_or_else(bad);
        let mask = match &mask {
            Some((v, m)) => Some(m.kernel(permuted(v)?)),
            None => None,
        };
        let len = shape.get(axis).copied().ok_or_else(bad)?.max(1);
        let s = Softmax {
            shape: perm.iter().map(|&p| shape[p]).collect(),
            x: permuted(&x)?,
            out: permuted(&out)?,
            scale,
            mask,
            rows_per_task: (8192 / len).max(1),
        };
        self.kernel(self.label(id), KernelOp::Softmax(s));
        Ok(out)
    }

    /// `softmax(masked_fill(scale * q @ kt, mask op rhs, fill), -1) @ v` into a fresh
    /// buffer of node `id`'s shape, flash style: the entry point for a fused attention op.
    /// `q [.., n, dk]`, `kt [.., dk, m]` (kᵀ, as the source writes it), `v [.., m, dv]` and
    /// the mask (to `[.., n, m]`) broadcast over the batch axes of the result.
    pub(super) fn attention(
        &mut self,
        id: ValueId,
        [q, v]: [ValueId; 2],
        keys: KeyOperand,
        scale: f32,
        mask: Option<Masking>,
        extras: Extras,
    ) -> Result<View, PlanError> {
        let out_shape = self.shape(id)?;
        let bad = || internal(format!("node {id}: attention operands do not fit"));
        let r = out_shape.len();
        let batch = out_shape[..r - 2].to_vec();
        // Keys and values of fewer heads: query head `h` reads head `h / group`.
        let (keys, v, group) = match (extras.group, keys) {
            (Some(([k0, v0], g)), KeyOperand::Keys(_)) if r >= 3 => (KeyOperand::Keys(k0), v0, g),
            _ => (keys, v, 1),
        };
        let mut kv_batch = batch.clone();
        if let Some(heads) = kv_batch.last_mut() {
            *heads /= group;
        }
        let with_kv = |tail: [usize; 2]| [kv_batch.as_slice(), &tail].concat();
        // Keys and values joined from a cache: the first parts are `k` and `v`, the second
        // the tail.
        let transposed = |k: View| {
            let rk = k.shape.len();
            rk.checked_sub(2)
                .and_then(|a| k.transpose(a, rk - 1))
                .ok_or_else(bad)
        };
        let q = self.view(q)?;
        let (kt_id, mut kt, v, tail) = match (extras.tail, keys) {
            (Some([kc, vc]), KeyOperand::Keys(_)) => {
                let ((k0, k1), (v0, v1)) = (self.cat_parts(kc)?, self.cat_parts(vc)?);
                (None, transposed(k0)?, v0, Some((k1, v1)))
            }
            (_, KeyOperand::Transposed(kt)) => (Some(kt), self.view(kt)?, self.view(v)?, None),
            (_, KeyOperand::Keys(k)) => (Some(k), transposed(self.view(k)?)?, self.view(v)?, None),
        };
        // The tile product reads kᵀ key-contiguous, or each key's row contiguous (copying
        // each panel transposed, once per block of query rows): the projection writes it
        // so where it can, else one layout copy (not one per tile). A cache is read as it is.
        let rk = kt.strides.len();
        let unit = |axis: usize| kt.strides.get(axis) == Some(&1);
        let (heads, positioned) = (batch.iter().product(), extras.positions.is_some());
        let rows = attention_blocks(out_shape[r - 2], 1, heads, positioned).0;
        let in_place = rk >= 2 && unit(rk - 2) && out_shape[r - 2].div_ceil(rows) <= IN_PLACE_QUERY_BLOCKS;
        let read_as_is = rk < 2 || unit(rk - 1) || in_place || kt.numel() <= 1;
        if let Some(kt_id) = kt_id.filter(|_| !read_as_is) {
            kt = match self.relayout(kt_id, &kt) {
                Some(v) => v,
                None => self.copy(&kt, format!("{} (kT layout)", self.label(id))),
            };
        }
        let (n, dv) = (out_shape[r - 2], out_shape[r - 1]);
        let dk = *q.shape.last().ok_or_else(bad)?;
        let head = *kt.shape.last().ok_or_else(bad)?;
        let with = |tail: [usize; 2]| [batch.as_slice(), &tail].concat();
        let tail = match tail {
            Some((tk, tv)) => {
                let len = *tk.shape.get(r - 2).ok_or_else(bad)?;
                let k = tk.expand(&with_kv([len, dk])).ok_or_else(bad)?;
                let v = tv.expand(&with_kv([len, dv])).ok_or_else(bad)?;
                Some(KeyTail {
                    k: k.operand(),
                    v: v.operand(),
                    len,
                })
            }
            None => None,
        };
        let m = head + tail.as_ref().map_or(0, |t| t.len);
        let q = q.expand(&with([n, dk])).ok_or_else(bad)?;
        let k = kt
            .expand(&with_kv([dk, head]))
            .and_then(|k| k.transpose(r - 2, r - 1))
            .ok_or_else(bad)?;
        let v = v.expand(&with_kv([head, dv])).ok_or_else(bad)?;
        let mask = self
            .mask_fill(mask, &with([n, m]))?
            .map(|(view, mp)| mp.kernel(view.operand()));
        let score = match extras.score {
            Some((expr, tensors)) => {
                let mut inputs = Vec::new();
                for t in tensors {
                    let view = self.view(t)?.expand(&with([n, m])).ok_or_else(bad)?;
                    inputs.push(view.operand());
                }
                Some(ScoreMod { inputs, expr })
            }
            None => None,
        };
        let out = self.temp(out_shape.clone());
        let a = Attention {
            batch,
            n,
            m,
            dk,
            dv,
            q: q.operand(),
            k: k.operand(),
            v: v.operand(),
            out: out.operand(),
            scale,
            mask,
            block: attention_blocks(n, m, heads, positioned),
            positions: extras.positions,
            kv_group: group,
            score,
            tail,
            zero_empty_rows: false,
            split: None,
            ranges: None,
        };
        self.attention_kernel(self.label(id), a);
        Ok(out)
    }
}

/// Blocks of query rows up to which the attention kernel reads each key where the
/// projection wrote it, copying a tile's panel of keys transposed for every block, rather
/// than after a layout copy of all the keys: the transposes cost a block each, the layout
/// copy a kernel of its own. Seed module at 2 threads, builds taking turns (`BENCHMARKS.md`,
/// "Keys read in place"): 1, 2 and 4 blocks a head 2–8 % faster in place, 8 and 32 blocks
/// 2–6 % slower.
const IN_PLACE_QUERY_BLOCKS: usize = 4;
