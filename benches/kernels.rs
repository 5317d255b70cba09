//! Kernel benchmarks: GEMM GFLOP/s (the `gemm` crate alone, and attnc's GEMM kernel with
//! its bias prologue) beside the FMA peak, the fused softmax's elements per second, each
//! transcendental primitive of a map beside a plain Rust loop over the same scalar function,
//! and a layer_norm row kernel.
//! `cargo bench --bench kernels`; single-threaded unless `ATTNC_THREADS` says otherwise;
//! `ATTNC_NO_TILE=1` sends every tile to the `gemm` crate instead of the AVX-512 tile
//! product. The `(64, 256, 64)` and `(64, 64, 256)` shapes are the attention kernel's tiles.
//! Plain timing, no harness: warm-up, then the median of repeated calls.
//! `cargo bench --bench kernels -- norm` times only the norm feeding a GEMM, three ways
//! (BENCHMARKS.md, "decisions"); `cargo bench --bench kernels -- tile` only the attention
//! kernel's tile products at the seed module's shapes.
//! `-- softmax` only the fused softmax.

use attnc::driver::check_source;
use attnc::ir::CmpOp;
use attnc::kernel::{
    BinaryOp, Buffer, BufferKind, Expr, Gemm, Kernel, KernelOp, Map, MaskFill, Operand, Plan, ReduceOp, Row,
    Softmax, Stage, UnaryOp,
};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, Bound, RunOptions, Tensor};
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// The median seconds of `f` after a warm-up, over at least 0.5 s.
fn time(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        f();
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 5 || start.elapsed() < Duration::from_millis(500) {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A plan of one kernel, `label`, computing `op` over `buffers`; its output is the buffer
/// `out`, read as `shape`.
fn one_kernel(buffers: Vec<Buffer>, label: &str, op: KernelOp, out: usize, shape: Vec<usize>) -> Plan {
    let name = buffers[out].name.clone();
    Plan {
        buffers,
        prologue: vec![],
        kernels: vec![Kernel {
            label: label.into(),
            op,
        }],
        outputs: vec![(name, out, shape)],
        arena_len: 0,
        derived_len: 0,
        flops: 0.0,
    }
}

/// The median seconds of one call of `plan` on `threads` threads, its weights prepared once.
fn seconds_per_call(plan: Plan, bound: &Bound, threads: usize) -> f64 {
    let exe = Executable::from_plan(plan).unwrap();
    let pool = pool(threads).unwrap();
    let prepared = exe.prepare(&bound.params, &pool).unwrap();
    let mut out = Vec::new();
    time(|| exe.run_prepared(bound, &prepared, &pool, &mut out, None).unwrap())
}

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn buffer(kind: BufferKind, len: usize, name: &str) -> Buffer {
    Buffer {
        kind,
        len,
        name: name.into(),
    }
}

fn op(buf: usize, strides: &[usize]) -> Operand {
    Operand {
        buf,
        offset: 0,
        strides: strides.to_vec(),
    }
}

/// `gemm` crate alone: `c [m, n] = a [m, k] @ w [n, k]ᵀ`, one call.
fn gemm_crate(m: usize, n: usize, k: usize) -> f64 {
    let (a, w) = (data(m * k, 1), data(n * k, 2));
    let mut c = vec![0.0f32; m * n];
    // SAFETY: `a` holds m·k floats row-major, `w` n·k row-major (read as its transpose by
    // the strides passed) and `c` m·n row-major: every element the strides reach is inside.
    let s = time(|| unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    });
    2.0 * (m * n * k) as f64 / s / 1e9
}

/// `gemm` crate alone with `w` already transposed (`[k, n]` row-major).
fn gemm_crate_rowmajor(m: usize, n: usize, k: usize) -> f64 {
    let (a, w) = (data(m * k, 1), data(n * k, 2));
    let mut c = vec![0.0f32; m * n];
    // SAFETY: `a` holds m·k floats, `w` k·n and `c` m·n, all row-major as the strides passed
    // say: every element they reach is inside.
    let s = time(|| unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            1,
            n as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    });
    2.0 * (m * n * k) as f64 / s / 1e9
}

/// attnc's GEMM kernel: `linear` with bias, tiled as given; the weight as `[n, k]` read
/// transposed, or (`prepacked`) as `[k, n]` (what the prologue makes of it).
fn gemm_kernel(m: usize, n: usize, k: usize, block: (usize, usize), threads: usize, prepacked: bool) -> f64 {
    let b = if prepacked { op(1, &[n, 1]) } else { op(1, &[1, k]) };
    let plan = one_kernel(
        vec![
            buffer(BufferKind::Input(0), m * k, "x"),
            buffer(BufferKind::Param(0), n * k, "w"),
            buffer(BufferKind::Param(1), n, "b"),
            buffer(BufferKind::Output(0), m * n, "y"),
        ],
        "linear",
        KernelOp::Gemm(Gemm {
            batch: vec![],
            m,
            n,
            k,
            a: op(0, &[k, 1]),
            b,
            c: op(3, &[n, 1]),
            alpha: 1.0,
            bias: Some(op(2, &[1])),
            epilogue: None,
            rope: Vec::new(),
            block,
            packed: None,
        }),
        3,
        vec![m, n],
    );
    let bound = Bound {
        params: vec![
            Tensor::new(vec![n, k], data(n * k, 2)),
            Tensor::new(vec![n], data(n, 3)),
        ],
        inputs: vec![Tensor::new(vec![m, k], data(m * k, 1))],
        dims: vec![],
    };
    let s = seconds_per_call(plan, &bound, threads);
    2.0 * (m * n * k) as f64 / s / 1e9
}

/// One operand of [`tile_products`]: its buffer's length and its strides over the batch of
/// tiles, the tile's rows and its columns.
struct TileOperand {
    len: usize,
    strides: [usize; 3],
}

/// The attention kernel's tile product alone, single thread: `tiles` products of
/// `m × n × k` as one batched GEMM kernel tiled `m × n`, so each task is one call of the
/// tile product with the operands' strides as given; GFLOP/s.
fn tile_products(
    tiles: usize,
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    [a, b, c]: [TileOperand; 3],
) -> f64 {
    let plan = one_kernel(
        vec![
            buffer(BufferKind::Input(0), a.len, "a"),
            buffer(BufferKind::Input(1), b.len, "b"),
            buffer(BufferKind::Output(0), c.len, "c"),
        ],
        "tile",
        KernelOp::Gemm(Gemm {
            batch: vec![tiles],
            m,
            n,
            k,
            a: op(0, &a.strides),
            b: op(1, &b.strides),
            c: op(2, &c.strides),
            alpha,
            bias: None,
            epilogue: None,
            rope: Vec::new(),
            block: (m, n),
            packed: None,
        }),
        2,
        vec![c.len],
    );
    let bound = Bound {
        params: vec![],
        inputs: vec![
            Tensor::new(vec![a.len], data(a.len, 1)),
            Tensor::new(vec![b.len], data(b.len, 2)),
        ],
        dims: vec![],
    };
    let s = seconds_per_call(plan, &bound, 1);
    2.0 * (tiles * m * n * k) as f64 / s / 1e9
}

/// The seed module's attention tiles at L (`N = 2048`, `D = 1024`, `dk = dv = 64`), one
/// query block of 64 rows against every key, in tiles of `keys` (256 without a mask of
/// positions, 64 with one). Scores: `q` read in place from the fused projection (row stride
/// `3·D`, the same block for every tile), `kᵀ` key-contiguous (row stride `N`), each tile
/// to its own scores. `p v`: the probabilities (the same scratch tile each time), `v` read in
/// place (row stride `3·D`), and for comparison `v` with contiguous rows; the output rows at
/// stride `N` (as far apart in the cache's sets as `D` is).
fn attention_tiles(keys: usize) {
    let (n, d, t) = (2048, 1024, 64);
    let tiles = n / keys;
    let scores = tile_products(
        tiles,
        (t, keys, t),
        0.125,
        [
            TileOperand {
                len: t * 3 * d,
                strides: [0, 3 * d, 1],
            },
            TileOperand {
                len: t * n,
                strides: [keys, n, 1],
            },
            TileOperand {
                len: tiles * t * keys,
                strides: [t * keys, keys, 1],
            },
        ],
    );
    let pv = |v_rs: usize| {
        tile_products(
            tiles,
            (t, t, keys),
            1.0,
            [
                TileOperand {
                    len: t * keys,
                    strides: [0, keys, 1],
                },
                TileOperand {
                    len: n * v_rs,
                    strides: [keys * v_rs, v_rs, 1],
                },
                TileOperand {
                    len: t * n,
                    strides: [t, n, 1],
                },
            ],
        )
    };
    let (pv, pv_dense) = (pv(3 * d), pv(t));
    println!("  64 x {keys:<3} key tiles: scale q kT {scores:6.1}   p v {pv:6.1}   p v, v rows contiguous {pv_dense:6.1}");
}

/// The fused scale + mask + softmax over `rows × len`, in elements per second.
fn softmax(rows: usize, len: usize, threads: usize) -> f64 {
    let plan = one_kernel(
        vec![
            buffer(BufferKind::Input(0), rows * len, "x"),
            buffer(BufferKind::Input(1), len, "mask"),
            buffer(BufferKind::Output(0), rows * len, "p"),
        ],
        "softmax",
        KernelOp::Softmax(Softmax {
            shape: vec![rows, len],
            x: op(0, &[len, 1]),
            out: op(2, &[len, 1]),
            scale: 0.125,
            mask: Some(MaskFill {
                mask: op(1, &[0, 1]),
                op: CmpOp::Eq,
                rhs: 0.0,
                fill: -1e9,
            }),
            rows_per_task: (8192 / len).max(1),
        }),
        2,
        vec![rows, len],
    );
    let bound = Bound {
        params: vec![],
        inputs: vec![
            Tensor::new(vec![rows, len], data(rows * len, 1)),
            Tensor::new(vec![len], vec![1.0; len]),
        ],
        dims: vec![],
    };
    let s = seconds_per_call(plan, &bound, threads);
    (rows * len) as f64 / s
}

/// Runs a plan of one kernel over one input of `len` elements (buffer 0) and `extra` (buffer
/// 1, if any), writing `out_len` elements; elements of the input per second.
fn throughput(op: KernelOp, len: usize, extra: Option<Vec<f32>>, out_len: usize, threads: usize) -> f64 {
    let mut buffers = vec![buffer(BufferKind::Input(0), len, "x")];
    let mut inputs = vec![Tensor::new(vec![len], data(len, 1))];
    if let Some(w) = extra {
        buffers.push(buffer(BufferKind::Input(1), w.len(), "w"));
        inputs.push(Tensor::new(vec![w.len()], w));
    }
    let out = buffers.len();
    buffers.push(buffer(BufferKind::Output(0), out_len, "y"));
    let plan = one_kernel(buffers, "bench", op, out, vec![out_len]);
    let bound = Bound {
        params: vec![],
        inputs,
        dims: vec![],
    };
    let s = seconds_per_call(plan, &bound, threads);
    len as f64 / s
}

/// A map of one unary primitive over `rows × len` elements (inputs scaled to [-4, 4]).
fn primitive(u: UnaryOp, rows: usize, len: usize, threads: usize) -> f64 {
    let expr = vec![
        Expr::Input(0),
        Expr::Const(8.0),
        Expr::Binary(BinaryOp::Mul, 0, 1),
        Expr::Unary(u, 2),
    ];
    let map = Map {
        shape: vec![rows, len],
        inputs: vec![op(0, &[len, 1])],
        expr,
        out: op(1, &[len, 1]),
        rows_per_task: (8192 / len).max(1),
    };
    throughput(KernelOp::Map(map), rows * len, None, rows * len, threads)
}

/// A plain Rust loop of `f` over the same elements as [`primitive`], one thread.
fn scalar_loop(f: fn(f32) -> f32, len: usize) -> f64 {
    let x = data(len, 1);
    let mut y = vec![0.0f32; len];
    let s = time(|| {
        for (y, &x) in y.iter_mut().zip(&x) {
            *y = f(std::hint::black_box(x * 8.0));
        }
    });
    std::hint::black_box(&y);
    len as f64 / s
}

/// `layer_norm` over the last axis of `rows × len` with a weight: two sums and the write.
fn layer_norm(rows: usize, len: usize, threads: usize) -> f64 {
    let n = len as f32;
    let centered = vec![
        Expr::Input(0),
        Expr::Reduced(0),
        Expr::Const(n),
        Expr::Binary(BinaryOp::Div, 1, 2),
        Expr::Binary(BinaryOp::Sub, 0, 3),
        Expr::Binary(BinaryOp::Mul, 4, 4),
    ];
    let write = vec![
        Expr::Input(0),
        Expr::Reduced(0),
        Expr::Reduced(1),
        Expr::Const(n),
        Expr::Binary(BinaryOp::Div, 1, 3),
        Expr::Binary(BinaryOp::Div, 2, 3),
        Expr::Const(1e-5),
        Expr::Binary(BinaryOp::Add, 5, 6),
        Expr::Unary(UnaryOp::Rsqrt, 7),
        Expr::Binary(BinaryOp::Sub, 0, 4),
        Expr::Binary(BinaryOp::Mul, 9, 8),
        Expr::Input(1),
        Expr::Binary(BinaryOp::Mul, 10, 11),
    ];
    let sum = |expr| Stage {
        reduce: ReduceOp::Sum,
        expr,
    };
    let row = Row {
        rows: vec![rows],
        n: len,
        inputs: vec![op(0, &[len, 1]), op(1, &[0, 1])],
        stages: vec![sum(vec![Expr::Input(0)]), sum(centered)],
        write,
        out: op(2, &[len, 1]),
        rows_per_task: (8192 / len).max(1),
    };
    throughput(
        KernelOp::Row(row),
        rows * len,
        Some(data(len, 2)),
        rows * len,
        threads,
    )
}

/// A norm over rows of `k` feeding a `k -> n` projection: layer_norm (encoder_M) or
/// rms_norm (llama_S).
#[derive(Clone, Copy)]
struct NormGemm {
    m: usize,
    k: usize,
    n: usize,
    rms: bool,
}

impl NormGemm {
    fn source(&self) -> String {
        let norm = match self.rms {
            true => "rms_norm(x, [K], g, eps=1e-5)",
            false => "layer_norm(x, [K], g, b)",
        };
        format!(
            "dim M = {}, K = {}, N = {}\ninput x: [M, K]\nparam g: [K]\nparam b: [K]\nparam w: [N, K]\noutput y = linear({norm}, w)\n",
            self.m, self.k, self.n
        )
    }

    /// One row normalized, as the row kernel computes it.
    fn normalize(&self, x: &[f32], g: &[f32], b: &[f32], out: &mut [f32]) {
        let k = self.k as f32;
        if self.rms {
            let ss: f32 = x.iter().map(|v| v * v).sum();
            let r = 1.0 / (ss / k + 1e-5).sqrt();
            for ((o, &v), &g) in out.iter_mut().zip(x).zip(g) {
                *o = v * r * g;
            }
        } else {
            let mean = x.iter().sum::<f32>() / k;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / k;
            let r = 1.0 / (var + 1e-5).sqrt();
            for (((o, &v), &g), &b) in out.iter_mut().zip(x).zip(g).zip(b) {
                *o = (v - mean) * r * g + b;
            }
        }
    }
}

/// Raw pointers handed to rayon tasks that write disjoint rows.
#[derive(Clone, Copy)]
struct Rows(*mut f32);
// SAFETY: each task writes only its own block of rows.
unsafe impl Send for Rows {}
// SAFETY: as above.
unsafe impl Sync for Rows {}

impl Rows {
    /// The first element of row `i` of rows of `n`.
    fn row(self, i: usize, n: usize) -> *mut f32 {
        self.0.wrapping_add(i * n)
    }
}

/// `c [rows, n] = a [rows, k] @ w [k, n]`, `a` and `w` row-major, one thread; `c` points at
/// this task's rows of the result, which no other task writes.
fn block_gemm(rows: usize, s: NormGemm, a: &[f32], w: &[f32], c: *mut f32) {
    // SAFETY: `a` holds `rows * k` floats, `w` `k * n`, and `c` points at `rows * n` floats
    // of this task's own rows.
    unsafe {
        gemm::gemm(
            rows,
            s.n,
            s.k,
            c,
            1,
            s.n as isize,
            false,
            a.as_ptr(),
            1,
            s.k as isize,
            w.as_ptr(),
            1,
            s.n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Milliseconds of the norm and the GEMM in Rust over blocks of `rb` rows per task, either
/// as two passes (all rows normalized into memory, then the products) or fused (each task
/// normalizes its rows into a buffer that stays in L2, then multiplies them).
fn norm_gemm_rust(s: NormGemm, rb: usize, fused: bool, threads: usize) -> f64 {
    let (x, w) = (data(s.m * s.k, 1), data(s.k * s.n, 2));
    let (g, b) = (data(s.k, 3), data(s.k, 4));
    let mut normed = vec![0.0f32; s.m * s.k];
    let mut c = vec![0.0f32; s.m * s.n];
    let pool = pool(threads).unwrap();
    let blocks = s.m.div_ceil(rb);
    let rows_of = |blk: usize| (blk * rb, ((blk + 1) * rb).min(s.m));
    let normalize = |(lo, hi): (usize, usize), out: &mut [f32]| {
        for (i, row) in (lo..hi).zip(out.chunks_mut(s.k)) {
            s.normalize(&x[i * s.k..(i + 1) * s.k], &g, &b, row);
        }
    };
    let out = Rows(c.as_mut_ptr());
    let secs = time(|| {
        pool.install(|| {
            if fused {
                (0..blocks).into_par_iter().for_each_init(
                    || vec![0.0f32; rb * s.k],
                    |scratch, blk| {
                        let (lo, hi) = rows_of(blk);
                        normalize((lo, hi), scratch);
                        block_gemm(hi - lo, s, scratch, &w, out.row(lo, s.n));
                    },
                );
            } else {
                normed
                    .par_chunks_mut(rb * s.k)
                    .enumerate()
                    .for_each(|(blk, rows)| normalize(rows_of(blk), rows));
                (0..blocks).into_par_iter().for_each(|blk| {
                    let (lo, hi) = rows_of(blk);
                    block_gemm(hi - lo, s, &normed[lo * s.k..hi * s.k], &w, out.row(lo, s.n));
                });
            }
        })
    });
    std::hint::black_box(&c);
    secs * 1e3
}

/// Milliseconds of attnc's plan for the norm and the projection (a row kernel writing the
/// normalized rows, a GEMM reading them), with the norm's output row-major (today) or
/// column-major (`transposed`: the layout in which the `gemm` crate may skip packing `a`).
fn norm_gemm_plan(s: NormGemm, transposed: bool, threads: usize) -> f64 {
    let program = check_source(&s.source(), &[]).unwrap().program;
    let bound = bind(&program, &RunOptions::default()).unwrap();
    let mut plan = Executable::compile(&program, &bound.dims).unwrap().plan().clone();
    if transposed {
        let column_major = vec![1, s.m];
        let normed = plan.kernels.iter().find_map(|k| match &k.op {
            KernelOp::Row(r) => Some(r.out.buf),
            _ => None,
        });
        for k in &mut plan.kernels {
            match &mut k.op {
                KernelOp::Row(r) => r.out.strides = column_major.clone(),
                KernelOp::Gemm(g) if Some(g.a.buf) == normed => g.a.strides = column_major.clone(),
                _ => {}
            }
        }
    }
    let secs = seconds_per_call(plan, &bound, threads);
    secs * 1e3
}

/// The norm feeding the next GEMM: attnc's plan with the norm's output row-major and
/// column-major, and in Rust, separate passes against the norm fused into each task.
fn norm_into_gemm(threads: usize) {
    println!("norm -> GEMM, {threads} thread(s), median ms");
    let cases = [
        (
            "encoder_M",
            NormGemm {
                m: 4096,
                k: 512,
                n: 1536,
                rms: false,
            },
        ),
        (
            "llama_S",
            NormGemm {
                m: 1024,
                k: 2048,
                n: 2560,
                rms: true,
            },
        ),
    ];
    for (name, s) in cases {
        println!(
            "  {name} {}x{} -> {}: attnc plan, row-major {:7.2} | column-major {:7.2}",
            s.m,
            s.k,
            s.n,
            norm_gemm_plan(s, false, threads),
            norm_gemm_plan(s, true, threads)
        );
        for rb in [64, 128, 256, 512] {
            println!(
                "    Rust, {rb:>3} rows per task: two passes {:7.2} | fused {:7.2}",
                norm_gemm_rust(s, rb, false, threads),
                norm_gemm_rust(s, rb, true, threads)
            );
        }
    }
}

/// The fused softmax's elements per second at three row lengths.
fn softmax_table(threads: usize) {
    println!("softmax (scale, mask, max, exp, sum, normalize), {threads} thread(s)");
    for &(rows, len) in &[(4096, 128), (4096, 512), (1024, 2048)] {
        println!(
            "  {rows:>5} rows x {len:<5}  {:6.2} G elements/s",
            softmax(rows, len, threads) / 1e9
        );
    }
}

fn main() {
    let threads: usize = std::env::var("ATTNC_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    if std::env::args().any(|a| a == "norm") {
        norm_into_gemm(threads);
        return;
    }
    if std::env::args().any(|a| a == "tile") {
        println!("attention tile products, GFLOP/s, 1 thread (the FMA peak: `cargo bench --bench peak`)");
        attention_tiles(256);
        attention_tiles(64);
        return;
    }
    if std::env::args().any(|a| a == "softmax") {
        softmax_table(threads);
        return;
    }
    println!("GEMM GFLOP/s, {threads} thread(s) (the FMA peak: `cargo bench --bench peak`)");
    for &(m, n, k) in &[
        (128, 512, 512),
        (512, 512, 512),
        (4096, 512, 512),
        (2048, 1024, 1024),
        (64, 256, 64),
        (64, 64, 256),
        (16, 64, 64),
    ] {
        println!(
            "  {m:>5}x{n:<4}x{k:<4}  gemm crate {:6.1} (wT) {:6.1} (w [k, n])   attnc kernel {:6.1} (wT) {:6.1} (w [k, n]) {:6.1} (w [k, n], 128x128 tiles)",
            gemm_crate(m, n, k),
            gemm_crate_rowmajor(m, n, k),
            gemm_kernel(m, n, k, (m, n), threads, false),
            gemm_kernel(m, n, k, (m, n), threads, true),
            gemm_kernel(m, n, k, (128.min(m), 128.min(n)), threads, true),
        );
    }
    softmax_table(threads);
    // 64k elements: a call takes well under a millisecond, so on a loaded machine most calls
    // run without being preempted (at 1M elements the medians measured the scheduler).
    let (rows, len) = (64, 1024);
    println!("elementwise primitives over {rows} x {len} in [-4, 4], G elements/s: attnc map, {threads} thread(s) | Rust loop of the scalar function, 1 thread");
    type Scalar = fn(f32) -> f32;
    let scalar: [(UnaryOp, Scalar); 6] = [
        (UnaryOp::Exp, f32::exp),
        (UnaryOp::Tanh, f32::tanh),
        (UnaryOp::Erf, libm::erff),
        (UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (UnaryOp::Log, f32::ln),
        (UnaryOp::Sqrt, f32::sqrt),
    ];
    for (u, f) in scalar {
        println!(
            "  {:8} {:6.3} | {:6.3}",
            u.name(),
            primitive(u, rows, len, threads) / 1e9,
            scalar_loop(f, rows * len) / 1e9
        );
    }
    println!("layer_norm row kernel (two sums, then the write with a weight), {threads} thread(s)");
    for &(rows, len) in &[(4096, 512), (1024, 2048), (16384, 64)] {
        println!(
            "  {rows:>5} rows x {len:<5}  {:6.3} G elements/s",
            layer_norm(rows, len, threads) / 1e9
        );
    }
}
