//! The flash-style attention kernel with a mask of positions and grouped-query heads, built
//! as plans by hand and compared with dense attention in float64: tiles skipped, tested or
//! kept whole must give the dense result, NaN and uniform rows included.

use attnc::ir::CmpOp;
use attnc::kernel::{
    Affine, Attention, Buffer, BufferKind, IndexMask, Keep, Kernel, KernelOp, MaskFill, Operand, Plan,
    TileCounts,
};
use attnc::runtime::jit::{pool, Executable};
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
    block: (usize, usize),
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

    fn scale(&self) -> f32 {
        1.0 / (self.dk as f32).sqrt()
    }

    fn attention(&self) -> Attention {
        let [b, h] = self.batch;
        let (n, m, dk, dv, hk) = (self.n, self.m, self.dk, self.dv, self.heads_kv());
        Attention {
            batch: vec![b, h],
            n,
            m,
            dk,
            dv,
            q: operand(0, &[h * n * dk, n * dk, dk, 1]),
            k: operand(1, &[hk * m * dk, m * dk, dk, 1]),
            v: operand(2, &[hk * m * dv, m * dv, dv, 1]),
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
            block: self.block,
        }
    }

    fn plan(&self) -> Plan {
        let [b, h] = self.batch;
        let (n, m, dk, dv, hk) = (self.n, self.m, self.dk, self.dv, self.heads_kv());
        Plan {
            buffers: vec![
                buffer(BufferKind::Input(0), b * h * n * dk, "q"),
                buffer(BufferKind::Input(1), b * hk * m * dk, "k"),
                buffer(BufferKind::Input(2), b * hk * m * dv, "v"),
                buffer(BufferKind::Input(3), m, "mask"),
                buffer(BufferKind::Output(0), b * h * n * dv, "out"),
            ],
            prologue: vec![],
            kernels: vec![Kernel {
                label: "attention".into(),
                op: KernelOp::Attention(self.attention()),
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
        let masked = self.key_mask.map_or(0, |(k, _)| k);
        vec![
            Tensor::new(vec![b, h, n, dk], random(b * h * n * dk, &mut rng)),
            Tensor::new(vec![b, hk, m, dk], random(b * hk * m * dk, &mut rng)),
            Tensor::new(vec![b, hk, m, dv], random(b * hk * m * dv, &mut rng)),
            Tensor::new(vec![m], (0..m).map(|j| (j < masked) as u8 as f32).collect()),
        ]
    }

    fn run(&self, inputs: &[Tensor], threads: usize) -> Tensor {
        let exe = Executable::from_plan(self.plan()).unwrap();
        let bound = Bound {
            params: vec![],
            inputs: inputs.to_vec(),
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

    /// Runs on 1 and 2 threads (same bits) and compares with the reference.
    fn check(&self, seed: u64) {
        let inputs = self.inputs(seed);
        let got = self.run(&inputs, 1);
        let got2 = self.run(&inputs, 2);
        let bits = |t: &Tensor| t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&got2), "1 and 2 threads differ");
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
    let dense = KernelOp::Attention(c.attention()).bytes();
    c.kv_group = 4;
    let grouped = KernelOp::Attention(c.attention()).bytes();
    // k and v ([16, 5] and [16, 7] per head) are read for 1 head instead of 4.
    assert_eq!(dense - grouped, 3 * 16 * (5 + 7) * 4);
}
