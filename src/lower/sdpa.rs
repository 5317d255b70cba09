//! `scaled_dot_product_attention` as the flash-style attention kernel: the causal mask as a
//! mask of positions (tiles above the diagonal skipped), a boolean mask as the kernel's
//! mask fill, a float mask as a change of the scores (`s + mask`), grouped-query heads read
//! in place (`kv_group`), keys from `cat([cache, new])` read as two segments (`tail`), and a
//! row without keys 0 (`zero_empty_rows`), as PyTorch gives it.

use super::{internal, tiling::attention_blocks, Lowerer, Masking, View};
use crate::ir::{CmpOp, DType, ValueId};
use crate::kernel::{
    Affine, Attention, Binary, Expr, IndexMask, Keep, KernelOp, KeyTail, PlanError, ScoreMod,
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
        // Keys and values from a cache and a tail that fusion left uncopied.
        let parts = |l: &mut Self, x: ValueId| -> Result<(View, Option<View>), PlanError> {
            let cat = l.program.node(x).args.clone();
            match (l.fusion.absorbed[x], cat.as_slice()) {
                (true, &[head, tail]) => Ok((l.view(head)?, Some(l.view(tail)?))),
                _ => Ok((l.view(x)?, None)),
            }
        };
        let ((k, k_tail), (v, v_tail)) = (parts(self, args[1])?, parts(self, args[2])?);
        let scale = self.constant(args[3])?;
        let (n, dv) = (out_shape[r - 2], out_shape[r - 1]);
        let dk = *q.shape.last().ok_or_else(bad)?;
        let m = *self.shape(args[1])?.iter().rev().nth(1).ok_or_else(bad)?;
        let tail_len = k_tail.as_ref().map_or(0, |t| t.shape[t.shape.len() - 2]);
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
        let head = m - tail_len;
        let k = k.expand(&with(&kv_batch, [head, dk])).ok_or_else(bad)?;
        let v = v.expand(&with(&kv_batch, [head, dv])).ok_or_else(bad)?;
        let tail = match (k_tail, v_tail) {
            (Some(kt), Some(vt)) if tail_len > 0 => Some(KeyTail {
                k: kt
                    .expand(&with(&kv_batch, [tail_len, dk]))
                    .ok_or_else(bad)?
                    .operand(),
                v: vt
                    .expand(&with(&kv_batch, [tail_len, dv]))
                    .ok_or_else(bad)?
                    .operand(),
                len: tail_len,
            }),
            _ => None,
        };
        let scores = with(&batch, [n, m]);
        let (mut mask, mut score) = (None, None);
        if let Some(&mid) = args.get(4) {
            match self.program.tensor_type(mid).dtype {
                // A boolean mask keeps where it holds: the rest is filled with -inf.
                DType::Bool => {
                    let masking = Masking {
                        mask: mid,
                        op: CmpOp::Eq,
                        rhs: 0.0,
                        fill: f32::NEG_INFINITY,
                    };
                    mask = self
                        .mask_fill(Some(masking), &scores)?
                        .map(|(view, mp)| mp.kernel(view.operand()));
                }
                DType::F32 => {
                    let added = self.view(mid)?.expand(&scores).ok_or_else(bad)?;
                    score = Some(ScoreMod {
                        inputs: vec![added.operand()],
                        expr: vec![Expr::Input(0), Expr::Input(3), Expr::Binary(Binary::Add, 0, 1)],
                    });
                }
            }
        }
        // `is_causal` keeps j <= i: i - j >= 0.
        let positions = causal.then_some(IndexMask {
            keep: Keep::Atom(Affine { ci: 1, cj: -1, c: 0 }),
            fill: f32::NEG_INFINITY,
        });
        let out = self.temp(out_shape.clone());
        if m == 0 {
            // No keys at all: every row is 0 (the kernel would visit no tile to write it).
            self.map(vec![], vec![Expr::Const(0.0)], &out, self.label(id));
            return Ok(out);
        }
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
            positions,
            kv_group,
            score,
            tail,
            zero_empty_rows: true,
            block: attention_blocks(n, m),
        };
        let a = a.fold_query_groups().unwrap_or(a);
        self.kernel(self.label(id), KernelOp::Attention(Box::new(a)));
        Ok(out)
    }
}
