//! Issue #13's GEMM bar: the blocks' GEMMs within 10 % of the `gemm` crate's GFLOP/s on the
//! same shapes. Each GEMM kernel of the three blocks' plans (and of the seed module's at M),
//! exactly as `attnc bench` runs it (its shape, weight layout, task split, bias and
//! epilogue), is timed alone, as planned and without its bias and epilogue, and beside it
//! one call of the `gemm` crate on the same product with the crate's own parallelism:
//! alternately, in rounds, in one run.
//! `cargo bench --bench gemm_bar`; 2 threads unless `ATTNC_THREADS` says otherwise;
//! `ATTNC_ROUNDS` rounds (default 3), the median round shown; `ATTNC_BLOCKS=llama_S,..`
//! picks blocks.

use attnc::check::DimOverride;
use attnc::driver::check_source;
use attnc::kernel::{BufferKind, Gemm, KernelOp, Plan};
use attnc::runtime::jit::{self, pool, Executable};
use attnc::runtime::{bind, Bound, RunOptions};
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
fn time(threads: usize, mut f: impl FnMut()) -> (f64, f64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        f();
    }
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while wall.len() < 5 || start.elapsed() < Duration::from_millis(400) {
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
fn crate_time((m, n, k): (usize, usize, usize), threads: usize, pool: &rayon::ThreadPool) -> (f64, f64) {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0.0f32; m * n];
    let parallelism = match threads {
        1 => gemm::Parallelism::None,
        t => gemm::Parallelism::Rayon(t),
    };
    pool.install(|| {
        time(threads, || {
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
        })
    })
}

/// The crate's product for a kernel's: the batch of a paired epilogue (or any batch over
/// one shared `a`) is one product of `batch · n` columns, as its weights lie side by side.
fn crate_shape(g: &Gemm) -> (usize, usize, usize) {
    let batch: usize = g.batch.iter().product();
    (g.m, batch * g.n, g.k)
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
