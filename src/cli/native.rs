//! The native backend's commands: `run --backend jit`, `bench`, `ir --stage kernels|clif`.

use super::{load, render, DimArgs, Format, TensorArgs};
use attnc::check::DimOverride;
use attnc::codegen::Jit;
use attnc::ir::Program;
use attnc::lower;
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
    /// Worker threads (default: one per core)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

fn threads(t: Option<u16>) -> usize {
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
    bound: &Bound,
    t: Option<u16>,
) -> Result<(Vec<(String, Tensor)>, f64), RunError> {
    let (exe, compile_ms) = compile(program, &bound.dims)?;
    Ok((exe.run(bound, &pool(threads(t))?)?, compile_ms))
}

/// The native code of `program`: optimized (the e-graph pass), then lowered and compiled
/// for these dims; with the time all of it took, in ms.
fn compile(program: &Program, dims: &[Option<i64>]) -> Result<(Executable, f64), RunError> {
    let start = Instant::now();
    let optimized = attnc::opt::optimize(program).program;
    let exe = Executable::compile(&optimized, dims)?;
    Ok((exe, start.elapsed().as_secs_f64() * 1e3))
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
pub fn ir(path: &Path, dims: &[DimOverride], clif: bool) -> i32 {
    let program = match checked(path, dims) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let result = runtime::bind_dims(&program).and_then(|dims| {
        let internal = |e: String| RunError::new(None, format!("internal error: {e}"));
        let optimized = attnc::opt::optimize(&program).program;
        let plan = lower::lower(&optimized, &dims).map_err(|e| internal(e.to_string()))?;
        if !clif {
            return Ok(plan.to_text());
        }
        let jit = Jit::new(runtime::jit::sgemm_address()).map_err(internal)?;
        let mut text = String::new();
        for (users, func) in jit.clif(&plan).map_err(internal)? {
            let p = plan.prologue.len();
            let name = |k: usize| match k < p {
                true => format!("p{k}"),
                false => format!("k{}", k - p),
            };
            let names: Vec<String> = users.iter().map(|&k| name(k)).collect();
            let all: Vec<_> = plan.prologue.iter().chain(&plan.kernels).collect();
            let kind = all[users[0]].op.kind();
            text.push_str(&format!("; {kind} kernel of {}\n{func}\n", names.join(", ")));
        }
        Ok(text)
    });
    match result {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// `attnc bench`: compile once, warm up, then time repeated calls.
pub fn bench(args: &BenchArgs) -> i32 {
    let program = match checked(&args.file, &args.dims.dims) {
        Ok(p) => p,
        Err(code) => return code,
    };
    match measure(&program, &args.tensors.options(), threads(args.threads)) {
        Ok(m) => {
            match args.format {
                Format::Json => println!(
                    "{}",
                    serde_json::json!({
                        "median_ms": m.median_ms,
                        "min_ms": m.min_ms,
                        "iters": m.iters,
                        "gflops": m.gflops,
                        "compile_ms": m.compile_ms,
                    })
                ),
                Format::Text => println!(
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
                ),
            }
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// `ATTNC_PROFILE=1`: the mean time of each kernel over `iters` more calls, on stderr.
fn profile(
    exe: &Executable,
    (bound, prepared): (&Bound, &Prepared),
    pool: &rayon::ThreadPool,
    outputs: &mut Vec<(String, Tensor)>,
    iters: usize,
) -> Result<(), RunError> {
    let mut times = vec![0.0; exe.plan.kernels.len()];
    for _ in 0..iters {
        exe.run_prepared(bound, prepared, pool, outputs, Some(&mut times))?;
    }
    for (k, t) in exe.plan.kernels.iter().zip(&times) {
        let ms = t / iters as f64 * 1e3;
        eprintln!(
            "{ms:9.4} ms  {} `{}` ({} tasks)",
            k.op.kind(),
            k.label,
            k.op.tasks()
        );
    }
    Ok(())
}

struct Measured {
    median_ms: f64,
    min_ms: f64,
    iters: usize,
    gflops: f64,
    compile_ms: f64,
    prepare_ms: f64,
    kernels: usize,
    functions: usize,
    threads: usize,
}

fn measure(program: &Program, opts: &RunOptions, threads: usize) -> Result<Measured, RunError> {
    let bound = runtime::bind(program, opts)?;
    let (exe, compile_ms) = compile(program, &bound.dims)?;
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
    if std::env::var_os("ATTNC_PROFILE").is_some() {
        profile(&exe, (&bound, &prepared), &pool, &mut outputs, times.len())?;
    }
    let median_ms = times[times.len() / 2];
    let flops = lower::source_flops(program, &bound.dims);
    Ok(Measured {
        median_ms,
        min_ms: times[0],
        iters: times.len(),
        gflops: flops / (median_ms * 1e-3) / 1e9,
        compile_ms,
        prepare_ms,
        kernels: exe.plan.kernels.len(),
        functions: exe.functions(),
        threads,
    })
}
