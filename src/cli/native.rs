//! The native backend's commands: `run --backend jit`, `bench`, `ir --stage kernels|clif|asm`.

use super::{load, render, DimArgs, Format, MemoryArgs, Stage, TensorArgs};
use attnc::check::DimOverride;
use attnc::codegen::Jit;
use attnc::ir::Program;
use attnc::kernel::Plan;
use attnc::lower;
use attnc::runtime::hoist::hoist;
use attnc::runtime::jit::{pool, Executable, Prepared};
use attnc::runtime::{self, Bound, RunError, RunOptions, Tensor};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The .attn source file
    file: PathBuf,
    #[command(flatten)]
    tensors: TensorArgs,
    #[command(flatten)]
    dims: DimArgs,
    /// Worker threads, 1 to 1024 (default: one per core)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    #[command(flatten)]
    memory: MemoryArgs,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also time each kernel: its time, GFLOP/s, GB/s and share of the whole, as a table
    #[arg(long)]
    profile: bool,
}

pub(super) fn threads(t: Option<u16>) -> usize {
    t.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    )
}

/// What `run` prints as the backend.
pub fn describe(t: Option<u16>) -> String {
    format!("jit, {} threads", threads(t))
}

/// Compiles `program` for `bound`'s dims and runs it; the outputs, and the ms that
/// compiling took.
pub fn run(
    program: &Program,
    mut bound: Bound,
    t: Option<u16>,
    budget: u64,
) -> Result<(Vec<(String, Tensor)>, f64), RunError> {
    let hoisted = hoist(program)?;
    hoisted.gather_inputs(program, &mut bound)?;
    let (exe, time) = compile(&hoisted.program, &bound.dims, budget)?;
    Ok((exe.run(&bound, &pool(threads(t))?)?, time.total_ms))
}

/// What compiling a program took: in all, and the optimizer's figures (the executable
/// holds the rest, see [`CompileTime::text`]).
struct CompileTime {
    total_ms: f64,
    optimizer: attnc::opt::Stats,
}

impl CompileTime {
    /// Each phase's ms, by name, for `bench --format json`.
    fn phases(&self, exe: &Executable) -> Vec<(&'static str, f64)> {
        let p = &exe.phases;
        vec![
            ("optimize", self.optimizer.time.as_secs_f64() * 1e3),
            ("lower", p.lower),
            ("validate", p.validate),
            ("cranelift", p.cranelift),
        ]
    }

    /// `optimize 41.2 ms (..), lower 3.1 ms, cranelift 9.8 ms (..)`, for `bench --profile`.
    fn text(&self, exe: &Executable) -> String {
        let o = &self.optimizer;
        let p = &exe.phases;
        let slowest = exe
            .function_ms()
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(String::new(), |(kind, ms)| {
                format!("; slowest: {kind} {ms:.1} ms")
            });
        format!(
            "compile {:.1} ms: optimize {:.1} ms (egg {} iterations, {} nodes; {}), lower {:.1} ms, \
             validate {:.1} ms, cranelift {:.1} ms ({} functions for {} kernels{slowest})",
            self.total_ms,
            o.time.as_secs_f64() * 1e3,
            o.iterations,
            o.nodes,
            o.phases,
            p.lower,
            p.validate,
            p.cranelift,
            exe.functions(),
            exe.plan().prologue.len() + exe.plan().kernels.len(),
        )
    }
}

/// The native code of `program`: optimized (the e-graph pass), then lowered and compiled
/// for these dims; with the time it took.
fn compile(
    program: &Program,
    dims: &[Option<i64>],
    budget: u64,
) -> Result<(Executable, CompileTime), RunError> {
    let start = Instant::now();
    let optimized = attnc::opt::optimize(program);
    let exe = Executable::compile_within(&optimized.program, dims, budget)?;
    let time = CompileTime {
        total_ms: start.elapsed().as_secs_f64() * 1e3,
        optimizer: optimized.stats,
    };
    Ok((exe, time))
}

/// A checked program, or the exit code after printing why there is none.
fn checked(path: &Path, dims: &[DimOverride]) -> Result<Program, i32> {
    let (src, checked) = load(path, dims)?;
    if checked.has_errors() {
        eprint!(
            "{}",
            render::diagnostics_text(&path.display().to_string(), &src, &checked.diagnostics)
        );
        return Err(1);
    }
    Ok(checked.program)
}

/// `attnc ir --stage kernels|clif`: the plan, or the Cranelift IR of every kernel.
pub fn ir(path: &Path, dims: &[DimOverride], stage: Stage, budget: u64) -> i32 {
    let program = match checked(path, dims) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let result = runtime::bind_dims(&program).and_then(|dims| {
        let internal = |e: String| RunError::new(None, format!("internal error: {e}"));
        runtime::budget::program(&program, &dims, budget)?;
        let optimized = attnc::opt::optimize(&hoist(&program)?.program).program;
        let plan = runtime::jit::plan(&optimized, &dims, budget)?;
        let jit = || Jit::new(runtime::jit::shims()).map_err(internal);
        let functions = match stage {
            Stage::Clif => jit()?.clif(&plan).map_err(internal)?,
            Stage::Asm => jit()?.asm(&plan).map_err(internal)?,
            _ => return Ok(plan.to_text()),
        };
        Ok(functions_text(&plan, functions))
    });
    match result {
        Ok(text) => {
            out!("{text}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Each distinct function's text under a line naming its kind and the kernels that share
/// it (`p0` for the prologue's first, `k3` for the plan's fourth).
fn functions_text(plan: &Plan, functions: Vec<(Vec<usize>, String)>) -> String {
    let p = plan.prologue.len();
    let name = |k: usize| match k < p {
        true => format!("p{k}"),
        false => format!("k{}", k - p),
    };
    let all: Vec<_> = plan.prologue.iter().chain(&plan.kernels).collect();
    let mut text = String::new();
    for (users, func) in functions {
        let names: Vec<String> = users.iter().map(|&k| name(k)).collect();
        let kind = all[users[0]].op.kind();
        text.push_str(&format!("; {kind} kernel of {}\n{func}\n", names.join(", ")));
    }
    text
}

/// `attnc bench`: compile once, warm up, then time repeated calls.
pub fn bench(args: &BenchArgs) -> i32 {
    let program = match checked(&args.file, &args.dims.dims) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let opts = RunOptions {
        max_memory: Some(args.memory.budget()),
        ..args.tensors.options()
    };
    match measure(&program, &opts, threads(args.threads), args.profile) {
        Ok(m) => {
            match args.format {
                Format::Json => outln!("{}", json(&m)),
                Format::Text => {
                    outln!(
                        "median {:.4} ms, min {:.4} ms over {} calls; {:.2} GFLOP/s; compile {:.2} ms \
                         ({} kernels, {} functions, {} threads); weights prepared once in {:.3} ms",
                        m.median_ms,
                        m.min_ms,
                        m.iters,
                        m.gflops,
                        m.compile_ms,
                        m.kernels,
                        m.functions,
                        m.threads,
                        m.prepare_ms
                    );
                    if let Some(p) = &m.profile {
                        outln!("{}", m.compile);
                        out!("{}", profile_table(p));
                    }
                }
            }
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn json(m: &Measured) -> serde_json::Value {
    let mut v = serde_json::json!({
        "median_ms": m.median_ms,
        "min_ms": m.min_ms,
        "iters": m.iters,
        "gflops": m.gflops,
        "compile_ms": m.compile_ms,
    });
    for (phase, ms) in &m.compile_phases {
        v[format!("{phase}_ms")] = serde_json::json!(ms);
    }
    if let Some(p) = &m.profile {
        let total = p.kernels_ms();
        v["profile_step_ms"] = serde_json::json!(p.step_ms);
        v["profile_kernels_ms"] = serde_json::json!(total);
        v["profile"] = p
            .kernels
            .iter()
            .map(|r| {
                serde_json::json!({
                    "kernel": r.name, "label": r.label, "ms": r.ms, "share": r.ms / total,
                    "gflops": r.gflops(), "gbps": r.gbps(), "tasks": r.tasks,
                })
            })
            .collect();
    }
    v
}

/// The profiled calls: each kernel's mean time, and the mean time of a whole call, which
/// holds the kernels' and what runs between them.
struct Profile {
    kernels: Vec<KernelTime>,
    step_ms: f64,
}

impl Profile {
    /// The kernels' time per call, summed.
    fn kernels_ms(&self) -> f64 {
        self.kernels.iter().map(|r| r.ms).sum()
    }
}

/// One kernel's mean time per call, with what it computes and moves.
struct KernelTime {
    name: String,
    label: String,
    ms: f64,
    flops: f64,
    bytes: usize,
    tasks: usize,
}

impl KernelTime {
    /// `None` for a kernel without a matrix product.
    fn gflops(&self) -> Option<f64> {
        (self.flops > 0.0).then(|| self.flops / (self.ms * 1e-3) / 1e9)
    }

    fn gbps(&self) -> f64 {
        self.bytes as f64 / (self.ms * 1e-3) / 1e9
    }
}

/// Each kernel's mean time, and a call's, over `iters` more calls.
fn profile(
    exe: &Executable,
    (bound, prepared): (&Bound, &Prepared),
    pool: &rayon::ThreadPool,
    outputs: &mut Vec<(String, Tensor)>,
    iters: usize,
) -> Result<Profile, RunError> {
    let mut times = vec![0.0; exe.plan().kernels.len()];
    let start = Instant::now();
    for _ in 0..iters {
        exe.run_prepared(bound, prepared, pool, outputs, Some(&mut times))?;
    }
    let step_ms = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
    let rows = exe.plan().kernels.iter().zip(&times).enumerate();
    let kernels = rows
        .map(|(i, (k, t))| KernelTime {
            name: format!("k{i} {}", k.op.kind()),
            label: k.label.clone(),
            ms: t / iters as f64 * 1e3,
            flops: k.op.flops(),
            bytes: k.op.bytes(),
            tasks: k.op.tasks(),
        })
        .collect();
    Ok(Profile { kernels, step_ms })
}

/// The profile as a table, the slowest kernel first, with a total line and the whole call's
/// time: what a call spends outside its kernels is the difference.
fn profile_table(p: &Profile) -> String {
    let total = p.kernels_ms();
    let mut sorted: Vec<&KernelTime> = p.kernels.iter().collect();
    sorted.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    let mut out = format!(
        "{:<16} {:>10} {:>7} {:>9} {:>8} {:>6}  computes\n",
        "kernel", "ms", "share", "GFLOP/s", "GB/s", "tasks"
    );
    for r in sorted {
        let gflops = r.gflops().map_or("-".to_string(), |g| format!("{g:.1}"));
        out += &format!(
            "{:<16} {:>10.4} {:>6.1}% {:>9} {:>8.1} {:>6}  {}\n",
            r.name,
            r.ms,
            100.0 * r.ms / total,
            gflops,
            r.gbps(),
            r.tasks,
            r.label
        );
    }
    out += &format!("{:<16} {:>10.4} {:>6.1}%\n", "total", total, 100.0);
    out += &format!(
        "{:<16} {:>10.4}  a whole call, of which the kernels are {:.1}%\n",
        "call",
        p.step_ms,
        100.0 * total / p.step_ms
    );
    out
}

struct Measured {
    median_ms: f64,
    min_ms: f64,
    iters: usize,
    gflops: f64,
    compile_ms: f64,
    /// The compile time's breakdown, as text and by phase.
    compile: String,
    compile_phases: Vec<(&'static str, f64)>,
    prepare_ms: f64,
    kernels: usize,
    functions: usize,
    threads: usize,
    profile: Option<Profile>,
}

fn measure(
    program: &Program,
    opts: &RunOptions,
    threads: usize,
    with_profile: bool,
) -> Result<Measured, RunError> {
    let budget = opts.max_memory.unwrap_or_else(runtime::budget::physical_memory);
    let mut bound = runtime::bind(program, opts)?;
    let hoisted = hoist(program)?;
    hoisted.gather_inputs(program, &mut bound)?;
    let (exe, compile_time) = compile(&hoisted.program, &bound.dims, budget)?;
    let pool = pool(threads)?;
    let start = Instant::now();
    let prepared = exe.prepare(&bound.params, &pool)?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut outputs = Vec::new();
    // Warm-up: caches, page faults, the pool's threads; at least 3 calls or 0.2 s.
    let start = Instant::now();
    let mut warm = 0;
    while warm < 3 || start.elapsed() < Duration::from_millis(200) {
        exe.run_prepared(&bound, &prepared, &pool, &mut outputs, None)?;
        warm += 1;
    }
    // Timed calls: at least 10 and 1 s, at most 10000.
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 10 || (start.elapsed() < Duration::from_secs(1) && times.len() < 10_000) {
        let t = Instant::now();
        exe.run_prepared(&bound, &prepared, &pool, &mut outputs, None)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let profile = match with_profile {
        true => Some(profile(
            &exe,
            (&bound, &prepared),
            &pool,
            &mut outputs,
            times.len(),
        )?),
        false => None,
    };
    let median_ms = times[times.len() / 2];
    let flops = lower::source_flops(program, &bound.dims);
    Ok(Measured {
        median_ms,
        min_ms: times[0],
        iters: times.len(),
        gflops: flops / (median_ms * 1e-3) / 1e9,
        compile_ms: compile_time.total_ms,
        compile: compile_time.text(&exe),
        compile_phases: compile_time.phases(&exe),
        prepare_ms,
        kernels: exe.plan().kernels.len(),
        functions: exe.functions(),
        threads,
        profile,
    })
}
