//! `scaled_dot_product_attention` as the flash-style attention kernel: the causal mask as a
//! mask of positions (tiles above the diagonal skipped), a boolean mask as the kernel's
//! mask fill, a float mask of positions that adds 0 where it keeps and `-inf` (or a large
//! negative value) elsewhere as a mask of positions too, any other float mask as a change
//! of the scores (`s + mask`), grouped-query heads read in place (`kv_group`), keys from
//! `cat([cache, new])` read as two segments (`tail`), and a row without keys 0
//! (`zero_empty_rows`), as PyTorch gives it.

use super::{internal, tiling::attention_blocks, Lowerer, Masking, View};
use crate::ir::{CmpOp, DType, ValueId};
use crate::kernel::{
    Affine, Attention, BinaryOp, Expr, IndexMask, Keep, KeyTail, MaskFill, PlanError, ScoreMod,
};

impl Lowerer<'_> {
    /// Node `id`, `Sdpa { causal, gqa }` of `args` `[q, k, v, scale]` (then the mask).
    pub(super) fn sdpa(
        &mut self,
        id: ValueId,
        args: &[ValueId],
        causal: bool,
        gqa: bool,
    ) -> Result<View, PlanError> {
        let bad = || internal(format!("node {id}: attention operands do not fit"));
        let out_shape = self.shape(id)?;
        let r = out_shape.len();
        let batch = out_shape[..r - 2].to_vec();
        let q = self.view(args[0])?;
        // Keys and values joined from a cache: the first parts are `k` and `v`, the second
        // the tail (see `fuse`).
        let ((k, v), joined) = match self.fusion.tails.get(&id).copied() {
            Some([kc, vc]) => {
                let ((k0, k1), (v0, v1)) = (self.cat_parts(kc)?, self.cat_parts(vc)?);
                ((k0, v0), Some((k1, v1)))
            }
            None => ((self.view(args[1])?, self.view(args[2])?), None),
        };
        let scale = self.constant(args[3])?;
        let (n, dv) = (out_shape[r - 2], out_shape[r - 1]);
        let dk = *q.shape.last().ok_or_else(bad)?;
        let head = *k.shape.iter().rev().nth(1).ok_or_else(bad)?;
        let tail_len = joined
            .as_ref()
            .map_or(Some(0), |(k1, _)| k1.shape.iter().rev().nth(1).copied());
        let m = head + tail_len.ok_or_else(bad)?;
        let heads = |x: &View| x.shape.iter().rev().nth(2).copied();
        let kv_group = match gqa {
            true => heads(&q)
                .zip(heads(&k))
                .and_then(|(hq, hk)| hq.checked_div(hk))
                .ok_or_else(bad)?,
            false => 1,
        };
        let mut kv_batch = batch.clone();
        if let Some(h) = kv_batch.last_mut() {
            *h /= kv_group;
        }
        let with = |b: &[usize], tail: [usize; 2]| [b, &tail].concat();
        let q = q.expand(&with(&batch, [n, dk])).ok_or_else(bad)?;
        let k = k.expand(&with(&kv_batch, [head, dk])).ok_or_else(bad)?;
        let v = v.expand(&with(&kv_batch, [head, dv])).ok_or_else(bad)?;
        let tail = match joined {
            Some((k1, v1)) => Some(KeyTail {
                k: k1
                    .expand(&with(&kv_batch, [m - head, dk]))
                    .ok_or_else(bad)?
                    .operand(),
                v: v1
                    .expand(&with(&kv_batch, [m - head, dv]))
                    .ok_or_else(bad)?
                    .operand(),
                len: m - head,
            }),
            None => None,
        };
        // A mask of positions (boolean, or a float one that adds 0 or a fill) is computed
        // in the kernel, not read.
        let keep = self.fusion.positions.get(&id).cloned();
        let scores = with(&batch, [n, m]);
        let read_mask = args.get(4).filter(|_| keep.is_none());
        let (mask, score) = match read_mask {
            Some(&mid) => self.sdpa_mask(id, mid, &scores)?,
            None => (None, None),
        };
        // `is_causal` keeps j <= i: i - j >= 0.
        let causal = causal.then_some(Keep::Atom(Affine { ci: 1, cj: -1, c: 0 }));
        let keep = match (causal, keep) {
            (Some(a), Some(b)) => Some(Keep::And(Box::new(a), Box::new(b))),
            (a, b) => a.or(b),
        };
        let fill = self.fusion.fills.get(&id).copied();
        let positions = keep.map(|keep| IndexMask {
            keep,
            fill: fill.unwrap_or(f32::NEG_INFINITY),
        });
        let out = self.temp(out_shape.clone());
        if m == 0 {
            // No keys at all: every row is 0 (the kernel would visit no tile to write it).
            self.map(vec![], vec![Expr::Const(0.0)], &out, self.label(id));
            return Ok(out);
        }
        let block = attention_blocks(n, m, batch.iter().product(), positions.is_some());
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
            block,
            positions,
            kv_group,
            score,
            tail,
            zero_empty_rows: true,
            split: None,
            ranges: None,
        };
        self.attention_kernel(self.label(id), a);
        Ok(out)
    }

    /// The mask `mid` node `id`'s SDPA reads (one that is not a mask of positions), over `scores`: a
    /// boolean mask keeps where it holds (the rest is filled with -inf) and is the kernel's
    /// mask fill; a float or integer one is added to the scores. `Err` where it does not
    /// broadcast to them.
    fn sdpa_mask(
        &mut self,
        id: ValueId,
        mid: ValueId,
        scores: &[usize],
    ) -> Result<(Option<MaskFill>, Option<ScoreMod>), PlanError> {
        Ok(match self.program.tensor_type(mid).dtype {
            DType::Bool => {
                let masking = Masking {
                    mask: mid,
                    op: CmpOp::Eq,
                    rhs: 0.0,
                    fill: f32::NEG_INFINITY,
                };
                let mask = self
                    .mask_fill(Some(masking), scores)?
                    .map(|(view, mp)| mp.kernel(view.operand()));
                (mask, None)
            }
            DType::F32 | DType::I64 => {
                let bad = || internal(format!("node {id}: attention operands do not fit"));
                let added = self.view(mid)?.expand(scores).ok_or_else(bad)?;
                let score = ScoreMod {
                    inputs: vec![added.operand()],
                    expr: vec![Expr::Input(0), Expr::Input(3), Expr::Binary(BinaryOp::Add, 0, 1)],
                };
                (None, Some(score))
            }
        })
    }
}
