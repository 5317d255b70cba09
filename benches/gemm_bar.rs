//! Issue #13's GEMM bar: the blocks' GEMMs within 10 % of the `gemm` crate's GFLOP/s on the
//! same shapes. Each GEMM kernel of the three blocks' plans (and of the seed module's at M),
//! exactly as `attnc bench` runs it (its shape, weight layout, task split, bias and
//! epilogue), is timed alone, as planned and without its bias and epilogue, and beside it
//! one call of the `gemm` crate on the same product with the crate's own parallelism:
//! alternately, in rounds, in one run.
//! `cargo bench --bench gemm_bar`; 2 threads unless `ATTNC_THREADS` says otherwise;
//! `ATTNC_ROUNDS` rounds (default 3), the median round shown; `ATTNC_BLOCKS=llama_S,..`
//! picks blocks.
//!
//! `cargo bench --bench gemm_bar -- packed`: the product from weights packed once (`Gemm::packed`:
//! panels of few rows, `runtime/native/panel.rs`, or strips of many, `runtime/native/strip.rs`,
//! as the lowering packs them) against the same product from `[in, out]`
//! weights (the `gemm` crate per tile, packing at every call) and one call of the crate, at
//! the models' shapes with many rows, hot (the weights in cache from the call before) and
//! cold (the caches swept between calls), on 1 and 2 threads. `-- few`: the same table at
//! the few-row shapes of one short sentence and of a short prompt; `-- medium`: at 33 to 128
//! rows, just past the lowering's packed threshold.

use attnc::check::DimOverride;
use attnc::driver::check_source;
use attnc::kernel::{Buffer, BufferKind, Gemm, Kernel, KernelOp, Operand, Plan, PANEL, STRIP};
use attnc::runtime::jit::{self, pool, Executable};
use attnc::runtime::{bind, Bound, RunOptions, Tensor};
use std::time::{Duration, Instant};

/// A block's name, its example and its dims.
type Block = (&'static str, &'static str, &'static [(&'static str, i64)]);

/// The blocks of `benches/blocks.py` at the dims, and the seed module at shape M.
const BLOCKS: &[Block] = &[
    (
        "encoder_M",
        "encoder_layer.attn",
        &[("B", 8), ("N", 512), ("D", 512), ("H", 8), ("F", 2048)],
    ),
    (
        "gpt2_S",
        "gpt2_block.attn",
        &[("B", 1), ("N", 1024), ("D", 768), ("H", 12)],
    ),
    (
        "self_attention_M",
        "self_attention.attn",
        &[("B", 8), ("N", 512), ("D", 512), ("H", 8)],
    ),
    (
        "llama_S",
        "llama_layer.attn",
        &[
            ("B", 1),
            ("N", 1024),
            ("D", 2048),
            ("H", 32),
            ("Hkv", 4),
            ("F", 5632),
        ],
    ),
];

/// Seconds of CPU time the process has used, over all its threads.
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid `timespec` for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Per call of `f` after a warm-up, over at least 0.4 s and 5 calls: the median wall
/// seconds, and the median CPU seconds of every thread divided by `threads` (on a shared
/// machine the wall time counts the neighbours' share of the cores; the CPU time does not).
fn time(threads: usize, f: impl FnMut()) -> (f64, f64) {
    time_swept(threads, f, &mut [])
}

/// As [`time`], writing all of `sweep` (untimed) before each call: with a sweep larger
/// than the caches, every call starts cold.
fn time_swept(threads: usize, mut f: impl FnMut(), sweep: &mut [u8]) -> (f64, f64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        f();
    }
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while wall.len() < 5 || start.elapsed() < Duration::from_millis(400) {
        sweep.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        let (t, c) = (Instant::now(), cpu_seconds());
        f();
        cpu.push((cpu_seconds() - c) / threads as f64);
        wall.push(t.elapsed().as_secs_f64());
    }
    (median(wall), median(cpu))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The block's optimized plan and its drawn params and inputs.
fn block_plan(file: &str, dims: &[(&str, i64)]) -> (Plan, Bound) {
    let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(path).unwrap();
    let dims: Vec<DimOverride> = dims
        .iter()
        .map(|&(name, value)| DimOverride {
            name: name.into(),
            value,
        })
        .collect();
    let program = check_source(&src, &dims).unwrap().program;
    let bound = bind(&program, &RunOptions::default()).unwrap();
    let optimized = attnc::opt::optimize(&program).program;
    let plan = jit::plan(&optimized, &bound.dims, u64::MAX).unwrap();
    (plan, bound)
}

/// The block's plan with kernel `i` alone (the prologue kept: it lays out the weights),
/// each temporary in an arena place of its own, live for that one kernel.
fn alone(plan: &Plan, i: usize, g: Gemm) -> Executable {
    let mut plan = plan.clone();
    let mut arena = 0;
    for buf in &mut plan.buffers {
        if let BufferKind::Temp { .. } = buf.kind {
            buf.kind = BufferKind::Temp {
                offset: arena,
                live: (0, 0),
            };
            arena += buf.len;
        }
    }
    plan.arena_len = arena;
    let mut kernel = plan.kernels[i].clone();
    kernel.op = KernelOp::Gemm(g);
    plan.kernels = vec![kernel];
    Executable::from_plan(plan).unwrap()
}

/// Seconds per call of an executable on `pool`.
fn run_time(exe: &Executable, bound: &Bound, pool: &rayon::ThreadPool) -> (f64, f64) {
    let prepared = exe.prepare(&bound.params, pool).unwrap();
    let mut out = Vec::new();
    time(pool.current_num_threads(), || {
        exe.run_prepared(bound, &prepared, pool, &mut out, None).unwrap()
    })
}

/// Seconds per call of one `gemm` crate call of `c [m, n] = a [m, k] @ b [k, n]`, all
/// row-major, with the crate's own parallelism over `threads`.
fn crate_time(shape: (usize, usize, usize), threads: usize, pool: &rayon::ThreadPool) -> (f64, f64) {
    crate_time_swept(shape, threads, pool, &mut [])
}

/// As [`crate_time`], writing all of `sweep` before each call ([`time_swept`]).
fn crate_time_swept(
    (m, n, k): (usize, usize, usize),
    threads: usize,
    pool: &rayon::ThreadPool,
    sweep: &mut [u8],
) -> (f64, f64) {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0.0f32; m * n];
    let parallelism = match threads {
        1 => gemm::Parallelism::None,
        t => gemm::Parallelism::Rayon(t),
    };
    pool.install(|| {
        time_swept(
            threads,
            || {
                // SAFETY: `a`, `b` and `c` hold m·k, k·n and m·n floats, row-major, as the
                // strides passed say.
                unsafe {
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
                        b.as_ptr(),
                        1,
                        n as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        parallelism,
                    )
                }
            },
            sweep,
        )
    })
}

/// The crate's product for a kernel's: the batch of a paired epilogue (or any batch over
/// one shared `a`) is one product of `batch · n` columns, as its weights lie side by side.
fn crate_shape(g: &Gemm) -> (usize, usize, usize) {
    let batch: usize = g.batch.iter().product();
    (g.m, batch * g.n, g.k)
}

/// Few-row products at MiniLM's (one sentence of 16 tokens) and SmolLM2's (8 and 16 new
/// tokens) shapes: `-- few`.
const FEW_SHAPES: &[(usize, usize, usize)] = &[
    (16, 1152, 384),
    (16, 384, 384),
    (16, 1536, 384),
    (16, 384, 1536),
    (12, 1536, 384),
    (8, 1536, 384),
    (16, 960, 576),
    (16, 576, 1536),
    (8, 960, 576),
];

/// Products of 33 to 128 rows, past the packed threshold: SmolLM2's chat prompt of 37
/// tokens and prompts up to 128, the seed module at S (QKV merged, out): `-- medium`.
const MEDIUM_SHAPES: &[(usize, usize, usize)] = &[
    (37, 960, 576),
    (37, 1536, 576),
    (37, 576, 1536),
    (64, 960, 576),
    (64, 1536, 576),
    (64, 576, 1536),
    (128, 960, 576),
    (128, 1536, 576),
    (128, 576, 1536),
    (128, 1536, 512),
    (128, 512, 512),
];

/// The models' products with many rows: MiniLM at 32 × 128 and 8 × 256 tokens (QKV
/// merged, out, up, down), SmolLM2's prefill of 512 (o, QKV merged, gate/up, down, tied
/// output).
const PACKED_SHAPES: &[(usize, usize, usize)] = &[
    (4096, 1152, 384),
    (4096, 384, 384),
    (4096, 1536, 384),
    (4096, 384, 1536),
    (2048, 1152, 384),
    (2048, 384, 1536),
    (512, 576, 576),
    (512, 960, 576),
    (512, 1536, 576),
    (512, 576, 1536),
    (512, 49152, 576),
];

/// `b [k, n]` row-major laid out as [`Gemm::packed`] says: panels of `width` columns, each
/// `k` rows of its width, and for strips [`PANEL`] floats more.
fn pack(b: &[f32], k: usize, n: usize, width: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * k + PANEL);
    for j in (0..n).step_by(width) {
        let w = (n - j).min(width);
        for p in 0..k {
            out.extend_from_slice(&b[p * n + j..p * n + j + w]);
        }
    }
    if width == STRIP {
        out.extend([0.0; PANEL]);
    }
    out
}

/// `y [m, n] = x [m, k] @ w [k, n]` as one planned GEMM kernel, tiled as the lowering
/// tiles it, reading `w` packed as the lowering packs it for `m` rows, or row-major; and
/// its data.
fn product((m, n, k): (usize, usize, usize), packed: bool) -> (Executable, Bound) {
    let op = |buf, strides: &[usize]| Operand {
        buf,
        offset: 0,
        strides: strides.to_vec(),
    };
    let mut g = Gemm {
        batch: vec![],
        m,
        n,
        k,
        a: op(0, &[k, 1]),
        b: op(1, &[n, 1]),
        c: op(2, &[n, 1]),
        alpha: 1.0,
        bias: None,
        epilogue: None,
        rope: Vec::new(),
        block: (m, n),
        packed: None,
    };
    g.block = attnc::lower::gemm_blocks(&g);
    // Packed where the lowering packs: panels of few rows, strips of more where the column
    // blocks start at one.
    let width = if m <= attnc::lower::PACKED_ROWS {
        PANEL
    } else {
        STRIP
    };
    let starts = g.block.1.is_multiple_of(width) || g.block.1 >= n;
    if packed && starts {
        (g.b, g.packed) = (op(1, &[1, k]), Some(width));
    }
    let packed = g.packed;
    let w_len = k * n + if packed == Some(STRIP) { PANEL } else { 0 };
    let buffer = |kind, len, name: &str| Buffer {
        kind,
        len,
        name: name.into(),
    };
    let plan = Plan {
        buffers: vec![
            buffer(BufferKind::Input(0), m * k, "x"),
            buffer(BufferKind::Param(0), w_len, "w"),
            buffer(BufferKind::Output(0), m * n, "y"),
        ],
        prologue: vec![],
        kernels: vec![Kernel {
            label: "x @ w".into(),
            op: KernelOp::Gemm(g),
        }],
        outputs: vec![("y".into(), 2, vec![m, n])],
        arena_len: 0,
        derived_len: 0,
        flops: 2.0 * (m * n * k) as f64,
    };
    let data = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + seed) % 11) as f32 * 0.1 - 0.5)
            .collect()
    };
    let w = data(k * n, 3);
    let w = match packed {
        Some(width) => pack(&w, k, n, width),
        None => w,
    };
    let bound = Bound {
        params: vec![Tensor::new(vec![w.len()], w)],
        inputs: vec![Tensor::new(vec![m, k], data(m * k, 1))],
        dims: vec![],
    };
    (Executable::from_plan(plan).unwrap(), bound)
}

/// The table of `-- packed`: GFLOP/s of CPU time per thread (of wall time in parentheses).
fn packed_table(rounds: usize, shapes: &[(usize, usize, usize)]) {
    println!(
        "Products from packed weights, GFLOP/s of CPU time per thread (in parentheses: of wall time), medians of \
         {rounds} alternating rounds; cold: 512 MiB written between calls"
    );
    println!("| m × n × k | threads | cache | packed | `[in, out]`, crate per tile | crate, one call | packed / best other |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut sweep = vec![0u8; 512 << 20];
    for &shape in shapes {
        let flops = 2.0 * (shape.0 * shape.1 * shape.2) as f64;
        let (packed, packed_data) = product(shape, true);
        let (plain, plain_data) = product(shape, false);
        for threads in [1, 2] {
            let pool = pool(threads).unwrap();
            let (p1, p2) = (
                packed.prepare(&packed_data.params, &pool).unwrap(),
                plain.prepare(&plain_data.params, &pool).unwrap(),
            );
            for cold in [false, true] {
                let sweep = if cold { &mut sweep[..] } else { &mut [][..] };
                let mut out = Vec::new();
                let mut t: [Vec<(f64, f64)>; 3] = Default::default();
                for _ in 0..rounds {
                    t[0].push(time_swept(
                        threads,
                        || {
                            packed
                                .run_prepared(&packed_data, &p1, &pool, &mut out, None)
                                .unwrap()
                        },
                        sweep,
                    ));
                    t[1].push(time_swept(
                        threads,
                        || {
                            plain
                                .run_prepared(&plain_data, &p2, &pool, &mut out, None)
                                .unwrap()
                        },
                        sweep,
                    ));
                    t[2].push(crate_time_swept(shape, threads, &pool, sweep));
                }
                let gf = |t: &[(f64, f64)], cpu: bool| {
                    flops / median(t.iter().map(|&(w, c)| if cpu { c } else { w }).collect()) / 1e9
                };
                let cells: Vec<String> = t
                    .iter()
                    .map(|t| format!("{:.1} ({:.1})", gf(t, true), gf(t, false)))
                    .collect();
                let best = gf(&t[1], true).max(gf(&t[2], true));
                println!(
                    "| {} × {} × {} | {threads} | {} | {} | {} | {} | {:.2} |",
                    shape.0,
                    shape.1,
                    shape.2,
                    if cold { "cold" } else { "hot" },
                    cells[0],
                    cells[1],
                    cells[2],
                    gf(&t[0], true) / best
                );
            }
        }
    }
}

fn main() {
    let threads: usize = std::env::var("ATTNC_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let rounds: usize = std::env::var("ATTNC_ROUNDS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(3);
    let wanted =
        std::env::var("ATTNC_BLOCKS").unwrap_or_else(|_| "encoder_M,gpt2_S,self_attention_M,llama_S".into());
    if std::env::args().any(|a| a == "packed") {
        return packed_table(rounds, PACKED_SHAPES);
    }
    if std::env::args().any(|a| a == "medium") {
        return packed_table(rounds, MEDIUM_SHAPES);
    }
    if std::env::args().any(|a| a == "few") {
        return packed_table(rounds, FEW_SHAPES);
    }
    let pool = pool(threads).unwrap();
    println!(
        "GEMM kernels of the blocks, {threads} thread(s), GFLOP/s of CPU time per thread (in parentheses: of \
         wall time), medians of {rounds} alternating rounds; ratio = attnc as planned / gemm crate"
    );
    println!(
        "| block | kernel | batch × m × n × k | tiles (tasks) | epilogue | attnc as planned | attnc bare | gemm crate | ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &(name, file, dims) in BLOCKS
        .iter()
        .filter(|(name, ..)| wanted.split(',').any(|w| w == *name))
    {
        let (plan, bound) = block_plan(file, dims);
        for (i, kernel) in plan.kernels.iter().enumerate() {
            let KernelOp::Gemm(g) = &kernel.op else {
                continue;
            };
            if g.batch.iter().product::<usize>() > 2 {
                continue; // attention's batched products are the attention kernel's
            }
            let bare = Gemm {
                bias: None,
                epilogue: None,
                rope: Vec::new(),
                ..g.clone()
            };
            let (planned, bare) = (alone(&plan, i, g.clone()), alone(&plan, i, bare));
            let shape = crate_shape(g);
            let flops = 2.0 * (shape.0 * shape.1 * shape.2) as f64;
            let (mut t_planned, mut t_bare, mut t_crate) = (vec![], vec![], vec![]);
            for _ in 0..rounds {
                t_planned.push(run_time(&planned, &bound, &pool));
                t_bare.push(run_time(&bare, &bound, &pool));
                t_crate.push(crate_time(shape, threads, &pool));
            }
            let gf = |t: &[(f64, f64)], cpu: bool| {
                flops / median(t.iter().map(|&(w, c)| if cpu { c } else { w }).collect()) / 1e9
            };
            let cells: Vec<String> = [&t_planned[..], &t_bare, &t_crate]
                .iter()
                .map(|t| format!("{:.1} ({:.1})", gf(t, true), gf(t, false)))
                .collect();
            let ratio = |cpu| gf(&t_planned, cpu) / gf(&t_crate, cpu);
            let tasks = kernel.op.tasks();
            let epilogue = match (&g.bias, &g.epilogue) {
                (None, None) => "-".to_string(),
                (bias, ep) => {
                    let mut parts = vec![];
                    if bias.is_some() {
                        parts.push("bias".to_string());
                    }
                    if let Some(ep) = ep {
                        parts.push(format!(
                            "{} ops{}",
                            ep.expr.len(),
                            if ep.pair { ", paired" } else { "" }
                        ));
                    }
                    parts.join(" + ")
                }
            };
            println!(
                "| {name} | k{i} {} | {:?} × {} × {} × {} | {}×{} ({tasks}) | {epilogue} | {} | {} | {} | {:.2} ({:.2}) |",
                kernel.label, g.batch, g.m, g.n, g.k, g.block.0, g.block.1, cells[0], cells[1], cells[2], ratio(true), ratio(false)
            );
        }
    }
}
