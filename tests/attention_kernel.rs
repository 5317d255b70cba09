//! The flash-style attention kernel with a mask of positions, grouped-query heads and score
//! changes (ALiBi, soft-capping), built as plans by hand and compared with dense attention in
//! float64: tiles skipped, tested or kept whole must give the dense result, NaN and uniform
//! rows included.

use attnc::codegen::Shims;
use attnc::ir::CmpOp;
use attnc::kernel::{
    Affine, Attention, BinaryOp, Buffer, BufferKind, Expr, IndexMask, Keep, Kernel, KernelOp, KeyTail,
    MaskFill, Operand, Plan, ScoreMod, TileCounts, UnaryOp,
};
use attnc::runtime::jit::{pool, shims, Executable};
use attnc::runtime::{Bound, Tensor};

mod common;
use common::Rng;

/// One attention problem: `batch` (the last axis the query heads), sizes, masks.
#[derive(Clone)]
struct Case {
    batch: [usize; 2],
    n: usize,
    m: usize,
    dk: usize,
    dv: usize,
    positions: Option<IndexMask>,
    /// Keys `0..masked_keys` are removed by a tensor mask `[m]` (1 = masked), with this fill.
    key_mask: Option<(usize, f32)>,
    kv_group: usize,
    score: Option<Score>,
    /// The last `tail` keys come from a second pair of buffers (a cache and the new keys).
    tail: usize,
    /// A row without keys gives 0 (`scaled_dot_product_attention`), not NaN.
    zero_rows: bool,
    block: (usize, usize),
}

/// A change of the scores, as the peers' modules write it.
#[derive(Clone, Copy)]
enum Score {
    /// `s + slope_h * (j - i)`, slopes `2^(-8 (h + 1) / H)` from an input `[H]`.
    Alibi,
    /// `c * tanh(s / c)`.
    Softcap(f32),
    /// `s + mask[j] * f32::MIN`, the first `k` keys masked (1) in the mask input `[m]`: an
    /// additive padding mask, the same for every row, as BERT's extended mask.
    Padding(usize),
    /// `bias[h, i, j] + s`: a position bias per head, row and key, as T5's.
    Bias,
    /// `s + (bias[h, i, j] + mask[j] * f32::MIN)`, the first `k` keys masked: T5's
    /// attention with its padding mask.
    BiasPadding(usize),
}

impl Score {
    /// The change's kernel form, its input the slopes or the bias at `slopes_buf` (`n` rows
    /// of `m` keys per head) or the mask at `mask_buf`.
    fn kernel(self, slopes_buf: usize, mask_buf: usize, (n, m): (usize, usize)) -> ScoreMod {
        let bias = operand(slopes_buf, &[0, n * m, m, 1]);
        match self {
            Score::Alibi => ScoreMod {
                inputs: vec![operand(slopes_buf, &[0, 1, 0, 0])],
                expr: vec![
                    Expr::Input(0),
                    Expr::Input(1),
                    Expr::Input(2),
                    Expr::Input(3),
                    Expr::Binary(BinaryOp::Sub, 2, 1),
                    Expr::Binary(BinaryOp::Mul, 3, 4),
                    Expr::Binary(BinaryOp::Add, 0, 5),
                ],
            },
            Score::Padding(_) => ScoreMod {
                inputs: vec![operand(mask_buf, &[0, 0, 0, 1])],
                expr: vec![
                    Expr::Input(0),
                    Expr::Input(3),
                    Expr::Const(f32::MIN),
                    Expr::Binary(BinaryOp::Mul, 1, 2),
                    Expr::Binary(BinaryOp::Add, 0, 3),
                ],
            },
            Score::Bias => ScoreMod {
                inputs: vec![bias],
                expr: vec![Expr::Input(3), Expr::Input(0), Expr::Binary(BinaryOp::Add, 0, 1)],
            },
            Score::BiasPadding(_) => ScoreMod {
                inputs: vec![bias, operand(mask_buf, &[0, 0, 0, 1])],
                expr: vec![
                    Expr::Input(0),
                    Expr::Input(3),
                    Expr::Input(4),
                    Expr::Const(f32::MIN),
                    Expr::Binary(BinaryOp::Mul, 2, 3),
                    Expr::Binary(BinaryOp::Add, 1, 4),
                    Expr::Binary(BinaryOp::Add, 0, 5),
                ],
            },
            Score::Softcap(c) => ScoreMod {
                inputs: vec![],
                expr: vec![
                    Expr::Input(0),
                    Expr::Const(c),
                    Expr::Binary(BinaryOp::Div, 0, 1),
                    Expr::Unary(UnaryOp::Tanh, 2),
                    Expr::Binary(BinaryOp::Mul, 1, 3),
                ],
            },
        }
    }

    fn slope(h: usize, heads: usize) -> f32 {
        2f32.powf(-8.0 * (h + 1) as f32 / heads as f32)
    }

    /// A bias value of head `h`, row `i`, key `j`: of both signs, some huge.
    fn bias(h: usize, i: usize, j: usize) -> f32 {
        let x = ((h * 5 + i * 7 + j * 3) % 13) as f32 * 0.5 - 3.0;
        if (i + j) % 9 == 4 {
            x * 1e30
        } else {
            x
        }
    }

    fn reference(self, s: f64, i: usize, j: usize, h: usize, heads: usize) -> f64 {
        let padded = |k: usize| if j < k { f32::MIN } else { 0.0 };
        match self {
            Score::Alibi => s + Score::slope(h, heads) as f64 * (j as f64 - i as f64),
            Score::Softcap(c) => c as f64 * (s / c as f64).tanh(),
            Score::Padding(k) => (s as f32 + padded(k)) as f64,
            Score::Bias => (s as f32 + Score::bias(h, i, j)) as f64,
            Score::BiasPadding(k) => (s as f32 + (Score::bias(h, i, j) + padded(k))) as f64,
        }
    }
}

fn causal() -> Keep {
    Keep::Atom(Affine { ci: 1, cj: -1, c: 0 })
}

/// `i - w < j <= i`.
fn window(w: i64) -> Keep {
    Keep::And(
        Box::new(causal()),
        Box::new(Keep::Atom(Affine {
            ci: -1,
            cj: 1,
            c: w - 1,
        })),
    )
}

fn case(n: usize, m: usize, keep: Option<Keep>, fill: f32, block: (usize, usize)) -> Case {
    Case {
        batch: [2, 3],
        n,
        m,
        dk: 5,
        dv: 7,
        positions: keep.map(|keep| IndexMask { keep, fill }),
        key_mask: None,
        kv_group: 1,
        score: None,
        tail: 0,
        zero_rows: false,
        block,
    }
}

fn random(len: usize, rng: &mut Rng) -> Vec<f32> {
    (0..len)
        .map(|_| (rng.below(2001) as f32 - 1000.0) / 400.0)
        .collect()
}

fn buffer(kind: BufferKind, len: usize, name: &str) -> Buffer {
    Buffer {
        kind,
        len,
        name: name.into(),
    }
}

fn operand(buf: usize, strides: &[usize]) -> Operand {
    Operand {
        buf,
        offset: 0,
        strides: strides.to_vec(),
    }
}

impl Case {
    fn heads_kv(&self) -> usize {
        self.batch[1] / self.kv_group
    }

    /// Whether input 4 is a bias `[h, n, m]` (the score reads it), not the slopes `[h]`.
    fn reads_bias(&self) -> bool {
        matches!(self.score, Some(Score::Bias | Score::BiasPadding(_)))
    }

    /// The length of input 4.
    fn slopes_or_bias(&self) -> usize {
        match self.reads_bias() {
            true => self.batch[1] * self.n * self.m,
            false => self.batch[1],
        }
    }

    fn scale(&self) -> f32 {
        1.0 / (self.dk as f32).sqrt()
    }

    fn attention(&self) -> Attention {
        let [b, h] = self.batch;
        let (n, m, dk, dv, hk, t) = (self.n, self.m, self.dk, self.dv, self.heads_kv(), self.tail);
        Attention {
            batch: vec![b, h],
            n,
            m,
            dk,
            dv,
            q: operand(0, &[h * n * dk, n * dk, dk, 1]),
            k: operand(1, &[hk * (m - t) * dk, (m - t) * dk, dk, 1]),
            v: operand(2, &[hk * (m - t) * dv, (m - t) * dv, dv, 1]),
            out: operand(4, &[h * n * dv, n * dv, dv, 1]),
            scale: self.scale(),
            mask: self.key_mask.map(|(_, fill)| MaskFill {
                mask: operand(3, &[0, 0, 0, 1]),
                op: CmpOp::Ne,
                rhs: 0.0,
                fill,
            }),
            positions: self.positions.clone(),
            kv_group: self.kv_group,
            score: self.score.map(|s| s.kernel(5, 3, (n, m))),
            tail: (t > 0).then(|| KeyTail {
                k: operand(6, &[hk * t * dk, t * dk, dk, 1]),
                v: operand(7, &[hk * t * dv, t * dv, dv, 1]),
                len: t,
            }),
            zero_empty_rows: self.zero_rows,
            split: None,
            ranges: None,
            block: self.block,
        }
    }

    fn plan(&self) -> Plan {
        let [b, h] = self.batch;
        let (n, m, dk, dv, hk, t) = (self.n, self.m, self.dk, self.dv, self.heads_kv(), self.tail);
        Plan {
            buffers: vec![
                buffer(BufferKind::Input(0), b * h * n * dk, "q"),
                buffer(BufferKind::Input(1), b * hk * (m - t) * dk, "k"),
                buffer(BufferKind::Input(2), b * hk * (m - t) * dv, "v"),
                buffer(BufferKind::Input(3), m, "mask"),
                buffer(BufferKind::Output(0), b * h * n * dv, "out"),
                buffer(BufferKind::Input(4), self.slopes_or_bias(), "slopes or bias"),
                buffer(BufferKind::Input(5), b * hk * t * dk, "k_new"),
                buffer(BufferKind::Input(6), b * hk * t * dv, "v_new"),
            ],
            prologue: vec![],
            kernels: vec![Kernel {
                label: "attention".into(),
                op: KernelOp::Attention(Box::new(self.attention())),
            }],
            outputs: vec![("out".into(), 4, vec![b, h, n, dv])],
            arena_len: 0,
            derived_len: 0,
            flops: 0.0,
        }
    }

    fn inputs(&self, seed: u64) -> Vec<Tensor> {
        let [b, h] = self.batch;
        let (n, m, dk, dv, hk) = (self.n, self.m, self.dk, self.dv, self.heads_kv());
        let mut rng = Rng(seed);
        let masked = match self.score {
            Some(Score::Padding(k) | Score::BiasPadding(k)) => k,
            _ => self.key_mask.map_or(0, |(k, _)| k),
        };
        let slopes_or_bias = match self.reads_bias() {
            true => {
                let at = |x: usize| Score::bias(x / (n * m), x % (n * m) / m, x % m);
                Tensor::new(vec![h, n, m], (0..h * n * m).map(at).collect())
            }
            false => Tensor::new(vec![h], (0..h).map(|k| Score::slope(k, h)).collect()),
        };
        vec![
            Tensor::new(vec![b, h, n, dk], random(b * h * n * dk, &mut rng)),
            Tensor::new(vec![b, hk, m, dk], random(b * hk * m * dk, &mut rng)),
            Tensor::new(vec![b, hk, m, dv], random(b * hk * m * dv, &mut rng)),
            Tensor::new(vec![m], (0..m).map(|j| (j < masked) as u8 as f32).collect()),
            slopes_or_bias,
        ]
    }

    /// The keys and values split at `m - tail`: `k`, `v` then the tail's, as the plan's
    /// inputs 1, 2, 5 and 6.
    fn split_keys(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        let mut split = inputs.to_vec();
        let (head, t) = (self.m - self.tail, self.tail);
        for (i, d) in [(1, self.dk), (2, self.dv)] {
            let rows: Vec<&[f32]> = inputs[i].data.chunks(self.m * d).collect();
            let part = |range: std::ops::Range<usize>| -> Vec<f32> {
                rows.iter()
                    .flat_map(|r| r[range.start * d..range.end * d].to_vec())
                    .collect()
            };
            let bh = rows.len();
            split[i] = Tensor::new(vec![bh, head, d], part(0..head));
            split.push(Tensor::new(vec![bh, t, d], part(head..self.m)));
        }
        split
    }

    fn run(&self, inputs: &[Tensor], threads: usize) -> Tensor {
        self.run_with(inputs, threads, shims())
    }

    /// [`Case::run`] with the kernel's code calling `shims`.
    fn run_with(&self, inputs: &[Tensor], threads: usize, shims: Shims) -> Tensor {
        let exe = Executable::from_plan_with(self.plan(), shims).unwrap();
        let bound = Bound {
            params: vec![],
            inputs: self.split_keys(inputs),
            dims: vec![],
        };
        let mut outs = exe.run(&bound, &pool(threads).unwrap()).unwrap();
        outs.remove(0).1
    }

    /// Dense attention in float64: the scores, the position mask, the tensor mask, softmax.
    fn reference(&self, inputs: &[Tensor]) -> Vec<f64> {
        let [b, h] = self.batch;
        let (n, m, dk, dv, hk) = (self.n, self.m, self.dk, self.dv, self.heads_kv());
        let (q, k, v) = (&inputs[0].data, &inputs[1].data, &inputs[2].data);
        let masked = self.key_mask.map_or(0, |(k, _)| k);
        let mut out = vec![0.0; b * h * n * dv];
        for bh in 0..b * h {
            let kvh = (bh / h) * hk + (bh % h) / self.kv_group;
            for i in 0..n {
                let mut s: Vec<f64> = (0..m)
                    .map(|j| {
                        let dot: f64 = (0..dk)
                            .map(|p| q[(bh * n + i) * dk + p] as f64 * k[(kvh * m + j) * dk + p] as f64)
                            .sum();
                        let mut x = (dot * self.scale() as f64) as f32 as f64;
                        if let Some(score) = self.score {
                            x = score.reference(x, i, j, bh % h, h);
                        }
                        if let Some(p) = &self.positions {
                            if !p.keep.holds(i as i64, j as i64) {
                                x = p.fill as f64;
                            }
                        }
                        if let Some((_, fill)) = self.key_mask.filter(|_| j < masked) {
                            x = fill as f64;
                        }
                        x
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if self.zero_rows && max == f64::NEG_INFINITY {
                    continue;
                }
                s.iter_mut().for_each(|x| *x = (*x - max).exp());
                let sum: f64 = s.iter().sum();
                for c in 0..dv {
                    let acc: f64 = (0..m).map(|j| s[j] * v[(kvh * m + j) * dv + c] as f64).sum();
                    out[(bh * n + i) * dv + c] = acc / sum;
                }
            }
        }
        out
    }

    /// Runs on 1 and 2 threads (same bits), with the tile's softmax in the native shim
    /// where this CPU has it and in the generated code (same bits, NaN for NaN), and
    /// compares with the reference.
    fn check(&self, seed: u64) {
        self.check_inputs(&self.inputs(seed));
    }

    /// [`Case::check`] on the given inputs.
    fn check_inputs(&self, inputs: &[Tensor]) {
        let inputs = inputs.to_vec();
        let got = self.run(&inputs, 1);
        let got2 = self.run(&inputs, 2);
        let bits = |t: &Tensor| t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&got2), "1 and 2 threads differ");
        let generated = Shims {
            softmax: None,
            ..shims()
        };
        let nan_as_one = |t: &Tensor| {
            let canonical = |x: &f32| {
                if x.is_nan() {
                    f32::NAN.to_bits()
                } else {
                    x.to_bits()
                }
            };
            t.data.iter().map(canonical).collect::<Vec<_>>()
        };
        let fallback = self.run_with(&inputs, 2, generated);
        assert_eq!(
            nan_as_one(&got),
            nan_as_one(&fallback),
            "the native and generated softmax differ"
        );
        let want = self.reference(&inputs);
        let scale = want
            .iter()
            .filter(|x| x.is_finite())
            .fold(0f64, |m, x| m.max(x.abs()));
        for (idx, (&g, &w)) in got.data.iter().zip(&want).enumerate() {
            let same = if w.is_nan() {
                g.is_nan()
            } else {
                (g as f64 - w).abs() <= 1e-5 * scale + 1e-6
            };
            assert!(same, "element {idx}: got {g}, want {w}");
        }
    }
}

#[test]
fn causal_positions_match_dense_attention_at_odd_sizes() {
    for (n, block) in [
        (1, (64, 256)),
        (7, (4, 4)),
        (33, (8, 16)),
        (33, (64, 256)),
        (300, (64, 128)),
        (300, (64, 256)),
        (300, (16, 192)),
    ] {
        case(n, n, Some(causal()), f32::NEG_INFINITY, block).check(n as u64);
        case(n, n, Some(causal()), -1e9, block).check(n as u64 + 1);
    }
}

#[test]
fn causal_tiles_above_the_diagonal_are_skipped() {
    let c = case(256, 256, Some(causal()), f32::NEG_INFINITY, (64, 64)).attention();
    assert!(c.skips_tiles());
    let t = c.tile_counts().unwrap();
    assert_eq!(
        t,
        TileCounts {
            kept: 6,
            partial: 4,
            skipped: 6
        }
    );
}

#[test]
fn a_sliding_window_matches_dense_attention() {
    for (n, block) in [(20, (4, 8)), (40, (8, 8)), (150, (64, 32))] {
        let c = case(n, n, Some(window(4)), -1e9, block);
        assert!(c.attention().skips_tiles());
        c.check(7);
    }
    // A window of 70 keys: tiles of 256 cut at both ends to the chunks of 64 it meets.
    for fill in [f32::NEG_INFINITY, -1e9] {
        let c = case(300, 300, Some(window(70)), fill, (32, 256));
        assert!(c.attention().skips_tiles());
        c.check(8);
    }
}

/// `j < 64` or `j >= 128`: the first tile of 256 keys is kept whole but for its second
/// chunk, which no row keeps: the tile is visited whole and that chunk tested.
#[test]
fn a_chunk_no_row_keeps_between_kept_ones_is_removed() {
    let ends = Keep::Or(
        Box::new(Keep::Atom(Affine { ci: 0, cj: -1, c: 63 })),
        Box::new(Keep::Atom(Affine {
            ci: 0,
            cj: 1,
            c: -128,
        })),
    );
    for fill in [f32::NEG_INFINITY, -1e9] {
        let c = case(300, 300, Some(ends.clone()), fill, (64, 256));
        assert!(c.attention().skips_tiles());
        c.check(9);
    }
}

#[test]
fn rows_without_keys_keep_pytorch_meaning() {
    // j > i removes every key of the last row: uniform under -1e9, NaN under -inf, and
    // nothing may be skipped.
    let not_causal = || Some(Keep::Not(Box::new(causal())));
    let uniform = case(9, 9, not_causal(), -1e9, (4, 4));
    assert!(!uniform.attention().skips_tiles());
    uniform.check(3);
    let nan = case(9, 9, not_causal(), f32::NEG_INFINITY, (4, 4));
    let got = nan.run(&nan.inputs(3), 1);
    let last_row = |t: &Tensor, bh: usize| t.data[(bh * 9 + 8) * 7..(bh * 9 + 9) * 7].to_vec();
    assert!(last_row(&got, 0).iter().all(|x| x.is_nan()));
    nan.check(3);
}

#[test]
fn rows_without_keys_are_zero_where_the_kernel_says_so() {
    // As `scaled_dot_product_attention`: the last row keeps no key and is 0, whether the
    // positions or a tensor mask remove its keys; the other rows are unchanged.
    let not_causal = || Some(Keep::Not(Box::new(causal())));
    let mut c = case(9, 9, not_causal(), f32::NEG_INFINITY, (4, 4));
    c.zero_rows = true;
    let got = c.run(&c.inputs(5), 1);
    for bh in 0..6 {
        let last = &got.data[(bh * 9 + 8) * 7..(bh * 9 + 9) * 7];
        assert!(last.iter().all(|&x| x == 0.0), "head {bh}: {last:?}");
    }
    c.check(5);
    let mut c = case(6, 10, None, 0.0, (4, 4));
    c.key_mask = Some((10, f32::NEG_INFINITY));
    c.zero_rows = true;
    let got = c.run(&c.inputs(6), 2);
    assert!(got.data.iter().all(|&x| x == 0.0));
    c.check(6);
}

#[test]
fn probabilities_below_the_smallest_normal_float_are_flushed_to_zero() {
    // One key scores 0 and the others -95 (e^-95 is subnormal); the values are 0 at that
    // key and 1 at the others, so the exact output is the subnormal sum of the others'
    // probabilities. The kernel flushes them (no microcode assist in the exp and in p v)
    // and gives 0, on both softmax paths, within the smallest normal float of the exact
    // value. With the high key last, the flushed factor is the first tile's rescale.
    for top in [0, 69] {
        let c = case(3, 70, None, 0.0, (64, 64));
        let mut inputs = c.inputs(1);
        let dk = c.dk as f32;
        inputs[0].data.fill(1.0);
        let score = -95.0 * dk.sqrt() / dk;
        for (row, key) in inputs[1].data.chunks_mut(c.dk).enumerate() {
            key.fill(if row % c.m == top { 0.0 } else { score });
        }
        for (row, value) in inputs[2].data.chunks_mut(c.dv).enumerate() {
            value.fill(if row % c.m == top { 0.0 } else { 1.0 });
        }
        let got = c.run(&inputs, 2);
        assert!(
            got.data.iter().all(|&x| x == 0.0),
            "top key {top}: {:?}",
            &got.data[..7]
        );
        let exact = c.reference(&inputs);
        assert!(exact.iter().all(|&x| x > 0.0 && x < f32::MIN_POSITIVE as f64));
        c.check_inputs(&inputs);
    }
}

#[test]
fn an_infinite_fill_on_the_first_keys_makes_no_nan() {
    // The first key blocks of every row are removed: the running maximum stays -inf until
    // a kept key arrives, and must not turn the sums into NaN.
    let mut c = case(10, 40, None, 0.0, (4, 8));
    c.key_mask = Some((20, f32::NEG_INFINITY));
    c.check(11);
    c.positions = Some(IndexMask {
        keep: causal(),
        fill: f32::NEG_INFINITY,
    });
    c.key_mask = Some((3, f32::NEG_INFINITY));
    c.check(12);
}

#[test]
fn a_padding_mask_with_a_finite_fill_matches_dense_attention() {
    // The seed module's and BERT's key padding mask (`where mask != 0 fill -1e9`), the same
    // for every query row: the native softmax fills its keys as it reads the scores. Keys
    // masked in the first tile only, across tiles, and with a partial last tile and a
    // partial vector of keys.
    for (n, m, masked, block) in [(9, 40, 3, (4, 16)), (5, 67, 37, (8, 32)), (3, 21, 21, (2, 8))] {
        let mut c = case(n, m, None, 0.0, block);
        c.key_mask = Some((masked, -1e9));
        c.check(13);
    }
}

#[test]
fn an_additive_padding_mask_matches_dense_attention() {
    // `s + mask · min`, the mask broadcast over the query rows: the native softmax adds it
    // as it reads the scores. The same sizes as the filled padding mask's test.
    for (n, m, masked, block) in [(9, 40, 3, (4, 16)), (5, 67, 37, (8, 32)), (3, 21, 20, (2, 8))] {
        let mut c = case(n, m, None, 0.0, block);
        c.score = Some(Score::Padding(masked));
        c.check(14);
    }
}

#[test]
fn a_position_bias_per_row_and_key_matches_dense_attention() {
    // T5's bias `[H, N, M]` read by row and key (the native softmax adds it as it reads
    // the scores), alone and with the additive padding mask, at whole and partial tiles.
    for (n, m, masked, block) in [(9, 40, 3, (4, 16)), (5, 67, 37, (8, 32)), (3, 21, 20, (2, 8))] {
        for score in [Score::Bias, Score::BiasPadding(masked)] {
            let mut c = case(n, m, None, 0.0, block);
            c.score = Some(score);
            c.check(15);
        }
    }
}

#[test]
fn grouped_query_heads_read_shared_keys_in_place() {
    for group in [1, 2, 4] {
        let mut c = case(17, 23, None, 0.0, (8, 8));
        c.batch = [2, 4];
        c.kv_group = group;
        c.check(group as u64);
        c.positions = Some(IndexMask {
            keep: causal(),
            fill: -1e9,
        });
        c.check(group as u64 + 10);
    }
}

#[test]
fn a_group_that_does_not_divide_the_heads_is_refused() {
    let mut c = case(4, 4, None, 0.0, (4, 4));
    c.kv_group = 2;
    assert!(Executable::from_plan(c.plan()).is_err());
}

#[test]
fn shared_key_heads_count_once_in_the_bytes_moved() {
    let mut c = case(16, 16, None, 0.0, (8, 8));
    c.batch = [1, 4];
    let dense = KernelOp::Attention(Box::new(c.attention())).bytes();
    c.kv_group = 4;
    let grouped = KernelOp::Attention(Box::new(c.attention())).bytes();
    // k and v ([16, 5] and [16, 7] per head) are read for 1 head instead of 4.
    assert_eq!(dense - grouped, 3 * 16 * (5 + 7) * 4);
}

#[test]
fn alibi_and_soft_capping_change_the_scores_in_the_kernel() {
    for score in [Score::Alibi, Score::Softcap(50.0), Score::Softcap(0.5)] {
        for (n, block) in [(1, (64, 256)), (13, (4, 8)), (70, (64, 32))] {
            let mut c = case(n, n, Some(causal()), -1e9, block);
            c.score = Some(score);
            c.check(n as u64 + 100);
            c.positions = None;
            c.check(n as u64 + 200);
        }
    }
}

#[test]
fn a_score_formula_that_reads_a_missing_input_is_refused() {
    let mut c = case(4, 4, None, 0.0, (4, 4));
    c.score = Some(Score::Alibi);
    let mut plan = c.plan();
    if let KernelOp::Attention(a) = &mut plan.kernels[0].op {
        a.score.as_mut().unwrap().inputs.clear();
    }
    assert!(Executable::from_plan(plan).is_err());
}

#[test]
fn keys_from_a_cache_and_a_tail_match_their_concatenation() {
    for (m, t, block) in [
        (12, 1, (64, 256)),
        (12, 1, (4, 4)),
        (40, 5, (8, 16)),
        (33, 33, (8, 8)),
    ] {
        let mut c = case(1, m, None, 0.0, (1, 1));
        c.block = block;
        c.tail = t;
        c.check(m as u64);
        let mut c = case(m, m, Some(causal()), f32::NEG_INFINITY, block);
        c.tail = t;
        c.score = Some(Score::Alibi);
        c.check(m as u64 + 1);
    }
}

#[test]
fn a_decode_step_reads_each_shared_key_head_once_per_group() {
    // One query row, 8 query heads over 2 key/value heads, keys from a cache and one new.
    let mut c = case(1, 11, None, 0.0, (64, 256));
    c.batch = [1, 8];
    c.kv_group = 4;
    c.tail = 1;
    let folded = c.attention().fold_query_groups().expect("one row in groups of 4");
    assert_eq!(
        (folded.batch.clone(), folded.n, folded.kv_group),
        (vec![1, 2], 4, 1)
    );
    let tasks = |a: Attention| KernelOp::Attention(Box::new(a)).tasks();
    assert_eq!((tasks(c.attention()), tasks(folded.clone())), (8, 2));
    c.check(5);
    // The folded kernel gives the same bits as the unfolded one.
    let inputs = c.inputs(5);
    let mut plan = c.plan();
    plan.kernels[0].op = KernelOp::Attention(Box::new(folded));
    let exe = Executable::from_plan(plan).unwrap();
    let bound = Bound {
        params: vec![],
        inputs: c.split_keys(&inputs),
        dims: vec![],
    };
    let got = exe.run(&bound, &pool(1).unwrap()).unwrap().remove(0).1;
    assert_eq!(got.data, c.run(&inputs, 1).data);
    // A mask of positions reads the row, which the fold would change.
    c.positions = Some(IndexMask {
        keep: causal(),
        fill: -1e9,
    });
    assert!(c.attention().fold_query_groups().is_none());
}
