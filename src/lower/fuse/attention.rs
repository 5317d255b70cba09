//! The attention kernels' decisions: which parts of an attention the kernel computes
//! itself (a mask of positions, a score change, keys and values joined from a cache) and
//! which `softmax(..(q @ kᵀ)..) @ v` become one attention kernel.

use super::*;

/// Whether every query row keeps a key under `keep`, with `rows` rows (the queries' second
/// last axis) and `keys` keys (the keys' second last axis, or the scores' last).
fn every_row_keeps(pos: &Positions, [rows, keys]: [(ValueId, usize); 2], keep: &Keep) -> bool {
    let size = |(x, back): (ValueId, usize)| pos.sizes(x).and_then(|s| s.iter().rev().nth(back).copied());
    let (Some(n), Some(m)) = (size(rows), size(keys)) else {
        return false;
    };
    let mask = IndexMask {
        keep: keep.clone(),
        fill: f32::NEG_INFINITY,
    };
    mask.every_row_keeps(n as usize, m as usize, 64)
}

/// A float mask of positions added to an attention's scores.
struct AddedMask {
    /// The scores without the mask.
    scores: ValueId,
    mask: ValueId,
    /// Where the mask adds 0.
    keep: Keep,
    /// What it adds elsewhere.
    fill: f32,
}

impl Decider<'_> {
    /// The parts of an optimizer's attention op that its kernel computes itself: the score
    /// change, a mask of positions, and keys and values joined from a cache.
    pub(super) fn attention_parts(&mut self, id: ValueId) {
        let args = self.args(id).to_vec();
        let pos = Positions {
            program: self.program,
            dims: self.values,
        };
        let (mask, keys) = match self.op(id) {
            Op::Attention { .. } => (args.get(3).copied(), Some(args[1])),
            _ => {
                let added = self.added_positions(&pos, id, &args);
                let scores = added.as_ref().map_or(args[0], |a| a.scores);
                let plan = scores::plan(&pos, scores, &|x| self.free(x));
                let keys = plan.as_ref().and_then(|p| match self.op(p.gemm) {
                    Op::Gemm { trans_b: true, .. } => Some(self.args(p.gemm)[1]),
                    _ => None,
                });
                if let (Some(added), Some(_)) = (added, &plan) {
                    self.absorbed[args[0]] = true;
                    self.absorb_tree(added.mask);
                    self.attention.positions.insert(id, added.keep);
                    self.attention.fills.insert(id, added.fill);
                }
                if let Some(plan) = plan {
                    for &x in &plan.inlined {
                        self.absorbed[x] = true;
                    }
                    for &x in &plan.positional {
                        self.absorb_tree(x);
                    }
                    self.attention.scores.insert(id, plan);
                }
                (args.get(2).copied(), keys)
            }
        };
        // The mask says where to fill; the kernel's formula, where to keep.
        match mask.and_then(|m| Some((m, pos.keep(m)?))) {
            Some((m, filled)) => {
                self.absorb_tree(m);
                self.attention.positions.insert(id, positions::not(filled));
            }
            None => self.absorb_mask_compare(id),
        }
        let mut values = args[if matches!(self.op(id), Op::Attention { .. }) {
            2
        } else {
            1
        }];
        let mut keys = keys;
        if let Some(k) = keys {
            if let (Some((k0, g)), Some((v0, h))) = (self.repeated_heads(k), self.repeated_heads(values)) {
                if g == h {
                    // The repeated copy is never made where nothing else reads it.
                    for (mut x, src) in [(k, k0), (values, v0)] {
                        while x != src && self.free(x) {
                            self.absorbed[x] = true;
                            x = self.args(x)[0];
                        }
                    }
                    self.attention.groups.insert(id, ([k0, v0], g));
                    (keys, values) = (Some(k0), v0);
                }
            }
        }
        if let Some(k) = keys {
            self.joined_tail(id, k, values);
        }
    }

    /// The scores of `scored_attention(args..)` written `scores + mask` (or `mask + scores`)
    /// where the mask is a float mask of positions ([`Positions::additive`]), broadcast over
    /// batch and heads: the kernel computes it as its mask of positions, with the value the
    /// mask adds as the fill, and skips the tiles it removes. As for
    /// `scaled_dot_product_attention`, a finite fill only where every row keeps a key (a row
    /// that keeps none is uniform only up to the rounding of `s + fill`), and the softmax's
    /// scale must not change the fill (1, or a positive scale of `-inf`).
    fn added_positions(&self, pos: &Positions, id: ValueId, args: &[ValueId]) -> Option<AddedMask> {
        let &Op::ScoredAttention { scale, .. } = self.op(id) else {
            return None;
        };
        let (&Op::Binary(BinaryOp::Add), &[a, b]) = (self.op(args[0]), self.args(args[0])) else {
            return None;
        };
        if args.len() != 2 || !self.free(args[0]) {
            return None;
        }
        let (scores, mask, (keep, fill)) = match (pos.additive(a), pos.additive(b)) {
            (_, Some(found)) => (a, b, found),
            (Some(found), None) => (b, a, found),
            (None, None) => return None,
        };
        let kept = match fill.is_infinite() {
            true => scale > 0.0,
            false => scale == 1.0 && every_row_keeps(pos, [(args[0], 1), (args[0], 0)], &keep),
        };
        kept.then_some(AddedMask {
            scores,
            mask,
            keep,
            fill,
        })
    }

    /// `scaled_dot_product_attention`'s parts its kernel computes itself beyond what the op
    /// says: a boolean mask that is a function of positions (it keeps where it holds), and
    /// keys and values joined from a cache.
    pub(super) fn sdpa_parts(&mut self, id: ValueId) {
        let args = self.args(id).to_vec();
        let pos = Positions {
            program: self.program,
            dims: self.values,
        };
        if let Some(&m) = args.get(4) {
            let found = match self.program.tensor_type(m).dtype {
                DType::Bool => pos.keep(m).map(|keep| (keep, f32::NEG_INFINITY)),
                _ => pos.additive(m).filter(|(keep, fill)| {
                    fill.is_infinite() || every_row_keeps(&pos, [(args[0], 1), (args[1], 1)], keep)
                }),
            };
            if let Some((keep, fill)) = found {
                self.absorb_tree(m);
                self.attention.positions.insert(id, keep);
                self.attention.fills.insert(id, fill);
            }
        }
        self.joined_tail(id, args[1], args[2]);
    }

    /// Records keys `k` and values `v` of attention `id` as cache and tail where each is a
    /// `cat` of two parts along the keys.
    fn joined_tail(&mut self, id: ValueId, k: ValueId, v: ValueId) {
        if !self.joined_keys(k, v) {
            return;
        }
        // A join something else reads (an output: the next step's cache) is made once, and
        // the kernel reads its two parts from it.
        for x in [k, v] {
            self.absorbed[x] = self.free(x);
            // A unit batch axis over the join.
            if let (true, Op::Unsqueeze(_), &[c]) = (self.absorbed[x], self.op(x), self.args(x)) {
                self.absorbed[c] = self.free(c);
            }
        }
        self.attention.tails.insert(id, [k, v]);
    }

    /// Keys or values whose heads repeat each of fewer heads `G` times, as Hugging Face's
    /// `repeat_kv` writes them: `x[:, :, None].expand(.., Hkv, G, m, d).reshape(.., Hkv * G,
    /// m, d)`; `x` and `G`. Head `h` of the result is head `h / G` of `x`, which the attention
    /// kernel reads in place (`kv_group`).
    fn repeated_heads(&self, x: ValueId) -> Option<(ValueId, usize)> {
        let (Op::Reshape(_) | Op::View(_), &[e]) = (self.op(x), self.args(x)) else {
            return None;
        };
        // The optimizer writes a reshape that must copy as a view of a `contiguous`.
        let e = match (self.op(e), self.args(e)) {
            (Op::Contiguous, &[c]) => c,
            _ => e,
        };
        let (Op::Expand(_), &[u]) = (self.op(e), self.args(e)) else {
            return None;
        };
        let (&Op::Unsqueeze(a), &[src]) = (self.op(u), self.args(u)) else {
            return None;
        };
        let pos = Positions {
            program: self.program,
            dims: self.values,
        };
        let (out, expanded, from) = (pos.sizes(x)?, pos.sizes(e)?, pos.sizes(src)?);
        let r = out.len();
        let h = r.checked_sub(3)?;
        let fits = a == h + 1
            && expanded.len() == r + 1
            && from.len() == r
            && expanded[..h] == out[..h]
            && expanded[h + 2..] == out[h + 1..]
            && expanded[h].checked_mul(expanded[h + 1]) == Some(out[h])
            && from[h] == expanded[h];
        fits.then_some(())?;
        let group = usize::try_from(expanded[h + 1]).ok()?;
        (group > 1).then_some((src, group))
    }

    /// Whether keys `k [.., m, dk]` and values `v [.., m, dv]` are each `cat([cache, new])`
    /// along `m`, of the same lengths.
    fn joined_keys(&self, k: ValueId, v: ValueId) -> bool {
        let rank = |x: ValueId| self.program.tensor_type(x).rank();
        let split = |x: ValueId| {
            // A unit batch axis over the join (`enable_gqa`'s grouping) keeps it one.
            let x = match (self.op(x), self.args(x)) {
                (&Op::Unsqueeze(a), &[c]) if a + 3 <= rank(x) => c,
                _ => x,
            };
            match (self.op(x), self.args(x)) {
                (Op::Cat(axis), &[a, b]) if *axis + 2 == rank(x) => {
                    let len = |p: ValueId| self.program.tensor_type(p).shape[*axis].clone();
                    Some((len(a), len(b)))
                }
                _ => None,
            }
        };
        match (split(k), split(v)) {
            (Some((a, b)), Some((c, d))) => self.dims.equal(&a, &c) && self.dims.equal(&b, &d),
            _ => false,
        }
    }

    /// `softmax(..(q @ kt)..) @ v` over the last axis, with every operand at least a matrix.
    pub(super) fn attention(&mut self, id: ValueId) -> Option<Fused> {
        let &[p, v] = self.args(id) else {
            return None;
        };
        let Op::Softmax(axis) = *self.op(p) else {
            return None;
        };
        let rank = |x: ValueId| self.program.tensor_type(x).rank();
        if !self.free(p) || axis + 1 != rank(p) || rank(v) < 2 {
            return None;
        }
        let pat = self.softmax(p);
        let scores = pat.x;
        let operands = match (self.op(scores), self.args(scores)) {
            (Op::MatMul, &[q, kt]) if self.free(scores) && rank(q) >= 2 && rank(kt) >= 2 => Some((q, kt)),
            _ => None,
        };
        let Some((q, kt)) = operands else {
            // Not attention after all: the softmax keeps what it absorbed.
            self.fused.insert(p, Fused::Softmax(pat));
            return None;
        };
        self.absorbed[p] = true;
        self.absorbed[scores] = true;
        Some(Fused::Attention {
            q,
            kt,
            v,
            softmax: pat,
        })
    }
}
