//! The flash-style attention kernel with masks of positions: causal attention with the mask
//! given as a dense `[N, N]` input against the same mask known from positions (tiles above
//! the diagonal skipped), and a sliding window, at the attention shapes of the peer cases
//! `causal_L` (16 heads, N = 2048, Dk = 64) and `window_L` (8 heads, N = 4096, W = 256).
//! GFLOP/s count the two products over visible (query, key) pairs only.
//! `cargo bench --bench attention`; `ATTNC_THREADS` threads (default 2); each case is timed
//! in three rounds, interleaved with the others, and the median round is reported.

use attnc::ir::CmpOp;
use attnc::kernel::{
    Affine, Attention, Buffer, BufferKind, IndexMask, Keep, Kernel, KernelOp, MaskFill, Operand, Plan,
};
use attnc::runtime::jit::{pool, Executable, Prepared};
use attnc::runtime::{Bound, Tensor};
use rayon::ThreadPool;
use std::time::{Duration, Instant};

/// How a case masks its scores.
#[derive(Clone)]
enum Masking {
    /// A `[n, m]` 0/1 input, 0 = removed, filled with -1e9 (the seed's form).
    Dense(Keep),
    /// The same mask known from positions.
    Positions(Keep),
}

struct Case {
    name: String,
    heads: usize,
    n: usize,
    dk: usize,
    masking: Masking,
    block: (usize, usize),
}

struct Ready {
    exe: Executable,
    bound: Bound,
    prepared: Prepared,
    visible: f64,
}

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn operand(buf: usize, strides: &[usize]) -> Operand {
    Operand {
        buf,
        offset: 0,
        strides: strides.to_vec(),
    }
}

fn buffer(kind: BufferKind, len: usize, name: &str) -> Buffer {
    Buffer {
        kind,
        len,
        name: name.into(),
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

impl Case {
    fn keep(&self) -> &Keep {
        match &self.masking {
            Masking::Dense(k) | Masking::Positions(k) => k,
        }
    }

    fn prepare(&self, pool: &ThreadPool) -> Ready {
        let (h, n, dk) = (self.heads, self.n, self.dk);
        let per_head = [n * dk, dk, 1];
        let (mask, positions) = match &self.masking {
            Masking::Dense(_) => (
                Some(MaskFill {
                    mask: operand(3, &[0, n, 1]),
                    op: CmpOp::Eq,
                    rhs: 0.0,
                    fill: -1e9,
                }),
                None,
            ),
            Masking::Positions(keep) => (
                None,
                Some(IndexMask {
                    keep: keep.clone(),
                    fill: -1e9,
                }),
            ),
        };
        let attention = Attention {
            batch: vec![h],
            n,
            m: n,
            dk,
            dv: dk,
            q: operand(0, &per_head),
            k: operand(1, &per_head),
            v: operand(2, &per_head),
            out: operand(4, &per_head),
            scale: 0.125,
            mask,
            positions,
            kv_group: 1,
            score: None,
            tail: None,
            zero_empty_rows: false,
            split: None,
            ranges: None,
            block: self.block,
        };
        let plan = Plan {
            buffers: vec![
                buffer(BufferKind::Input(0), h * n * dk, "q"),
                buffer(BufferKind::Input(1), h * n * dk, "k"),
                buffer(BufferKind::Input(2), h * n * dk, "v"),
                buffer(BufferKind::Input(3), n * n, "mask"),
                buffer(BufferKind::Output(0), h * n * dk, "out"),
            ],
            prologue: vec![],
            kernels: vec![Kernel {
                label: self.name.clone(),
                op: KernelOp::Attention(Box::new(attention)),
            }],
            outputs: vec![("out".into(), 4, vec![h, n, dk])],
            arena_len: 0,
            derived_len: 0,
            flops: 0.0,
        };
        let keep = self.keep();
        let mask: Vec<f32> = (0..n * n)
            .map(|x| keep.holds((x / n) as i64, (x % n) as i64) as u8 as f32)
            .collect();
        let visible = mask.iter().sum::<f32>() as f64;
        let bound = Bound {
            params: vec![],
            inputs: vec![
                Tensor::new(vec![h, n, dk], data(h * n * dk, 1)),
                Tensor::new(vec![h, n, dk], data(h * n * dk, 2)),
                Tensor::new(vec![h, n, dk], data(h * n * dk, 3)),
                Tensor::new(vec![n, n], mask),
            ],
            dims: vec![],
        };
        let exe = Executable::from_plan(plan).unwrap();
        let prepared = exe.prepare(&bound.params, pool).unwrap();
        Ready {
            exe,
            bound,
            prepared,
            visible,
        }
    }
}

/// The median seconds of one call over at least `budget`, after a warm-up call.
fn time(r: &Ready, pool: &ThreadPool, budget: Duration) -> f64 {
    let mut out = Vec::new();
    let mut call = || {
        r.exe
            .run_prepared(&r.bound, &r.prepared, pool, &mut out, None)
            .unwrap()
    };
    call();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed() < budget {
        let t = Instant::now();
        call();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let threads: usize = std::env::var("ATTNC_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let pool = pool(threads).unwrap();
    let case = |name: &str, heads, n, masking, block| Case {
        name: name.into(),
        heads,
        n,
        dk: 64,
        masking,
        block,
    };
    let cases = [
        case(
            "causal_L, dense mask",
            16,
            2048,
            Masking::Dense(causal()),
            (64, 256),
        ),
        case(
            "causal_L, positions",
            16,
            2048,
            Masking::Positions(causal()),
            (64, 256),
        ),
        case(
            "causal_L, positions, 64 keys",
            16,
            2048,
            Masking::Positions(causal()),
            (64, 64),
        ),
        case(
            "causal_L, positions, 128 keys",
            16,
            2048,
            Masking::Positions(causal()),
            (64, 128),
        ),
        case(
            "window_L, positions",
            8,
            4096,
            Masking::Positions(window(256)),
            (64, 256),
        ),
        case(
            "window_L, positions, 64 keys",
            8,
            4096,
            Masking::Positions(window(256)),
            (64, 64),
        ),
        case(
            "window_L, positions, 128 keys",
            8,
            4096,
            Masking::Positions(window(256)),
            (64, 128),
        ),
    ];
    let ready: Vec<Ready> = cases.iter().map(|c| c.prepare(&pool)).collect();
    let mut rounds = vec![Vec::new(); cases.len()];
    for _ in 0..3 {
        for (r, times) in ready.iter().zip(&mut rounds) {
            times.push(time(r, &pool, Duration::from_millis(700)));
        }
    }
    println!("attention kernel, {threads} thread(s), median of 3 interleaved rounds");
    let dense = {
        let mut t = rounds[0].clone();
        t.sort_by(f64::total_cmp);
        t[1]
    };
    for ((c, r), times) in cases.iter().zip(&ready).zip(&mut rounds) {
        times.sort_by(f64::total_cmp);
        let t = times[1];
        let gflops = 4.0 * (c.heads * c.dk) as f64 * r.visible / t / 1e9;
        println!(
            "  {:<32} {:8.2} ms  {:6.1} GFLOP/s (visible pairs)  {:5.2}x the dense-mask causal_L",
            c.name,
            t * 1e3,
            gflops,
            dense / t
        );
    }
}
