//! The command line: parse arguments, run a stage, print, pick the exit code.
//!
//! Exit codes: 0 success, 1 a diagnostic (the user's program or files), 2 bad usage.

use attnc::check::DimOverride;
use attnc::driver::{check_source, Checked};
use attnc::render;
use attnc::repl;
use attnc::runtime::{self, RunOptions};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[macro_use]
mod output;
mod embed;
mod generate;
mod native;
mod plot;
mod tokenize;

#[derive(Parser)]
#[command(
    name = "attnc",
    version,
    about = "Compile .attn attention programs: shapes proved before anything runs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and check a program; print every binding with its symbolic shape
    Check {
        /// The .attn source file
        file: PathBuf,
        #[command(flatten)]
        dims: DimArgs,
        /// Output format
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Print one stage's IR as deterministic text
    Ir {
        /// The .attn source file
        file: PathBuf,
        /// Which IR to print
        #[arg(long, value_enum)]
        stage: Stage,
        #[command(flatten)]
        dims: DimArgs,
        /// With `--stage optimized`: add the optimizer's figures (rules fired, stop reason,
        /// e-graph size, cost before and after, time)
        #[arg(long)]
        stats: bool,
        /// With `--stage optimized`: print the chain of rules that proves the optimized
        /// program equal to the source
        #[arg(long)]
        explain: bool,
        #[command(flatten)]
        memory: MemoryArgs,
        /// `dot`: the typed or optimized program as a Graphviz graph, one node per op with
        /// its shape, fused ops filled (`| dot -Tsvg > graph.svg`)
        #[arg(long, value_enum, default_value_t = IrFormat::Text)]
        format: IrFormat,
    },
    /// Compile and run a program; print each output's shape, checksum and the time taken
    Run(RunArgs),
    /// Try shape transforms interactively: items, statements and expressions, each
    /// expression printed with its shape and layout (`:help` lists the commands). Reads
    /// piped stdin too; exits 0 on `:quit` or at the end of input
    Repl {
        /// A .attn file to load first
        file: Option<PathBuf>,
        #[command(flatten)]
        dims: DimArgs,
        /// Print each entry after a prompt before its output, so that a piped session
        /// reads as a transcript
        #[arg(long)]
        echo: bool,
    },
    /// Time the compiled program: warm-up, then the median of repeated calls
    Bench(native::BenchArgs),
    /// Draw attention heatmaps of a `[.., N, M]` tensor from a safetensors file: one batch
    /// element, a grid of heads, a colour bar
    Plot(plot::PlotCommand),
    /// Print a prompt's tokens: the tokenizer and chat template of a GGUF file's metadata,
    /// or a tokenizer.json
    Tokenize(tokenize::TokenizeArgs),
    /// Generate text with a causal language model and its GGUF weights: greedy or sampled,
    /// streamed as it is produced, prefill and decode speeds on stderr
    Generate(generate::GenerateArgs),
    /// A language server on stdin and stdout, for editors: diagnostics, hover with shapes,
    /// go-to-definition, completion
    Lsp,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The .attn source file
    file: PathBuf,
    #[command(flatten)]
    tensors: TensorArgs,
    #[command(flatten)]
    text: embed::TextArgs,
    /// Write every output, as float32, under its output name
    #[arg(short = 'o', long = "output", value_name = "OUT.safetensors")]
    output: Option<PathBuf>,
    #[command(flatten)]
    dims: DimArgs,
    /// Worker threads, 1 to 1024 (the interpreter runs on one)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Which backend runs the program
    #[arg(long, value_enum, default_value_t = Backend::Jit)]
    backend: Backend,
    /// Draw an output's heatmaps into a PNG or SVG file (repeatable)
    #[arg(long, value_name = "OUTPUT=FILE.png", value_parser = plot::parse_target)]
    plot: Vec<(String, PathBuf)>,
    #[command(flatten)]
    plot_args: plot::PlotArgs,
    #[command(flatten)]
    memory: MemoryArgs,
}

#[derive(clap::Args)]
struct MemoryArgs {
    /// The memory budget in bytes: a program whose tensors need more is refused (E0305)
    /// before anything is allocated [default: the machine's physical memory]
    #[arg(long = "max-memory", value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_memory: Option<u64>,
}

impl MemoryArgs {
    fn budget(&self) -> u64 {
        self.max_memory.unwrap_or_else(runtime::budget::physical_memory)
    }
}

/// Where a run's weights and inputs come from: `run` and `bench` take the same flags.
#[derive(clap::Args)]
struct TensorArgs {
    /// Weights, safetensors or GGUF (dequantized to float32 on load); without it every param
    /// is drawn as nn.Linear initializes it
    #[arg(long, value_name = "W.safetensors|W.gguf")]
    weights: Option<PathBuf>,
    /// Inputs (safetensors); without it inputs are drawn from a standard normal, masks all ones
    #[arg(long, value_name = "I.safetensors")]
    inputs: Option<PathBuf>,
    /// Seed for drawn weights and inputs
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl TensorArgs {
    fn options(&self) -> RunOptions {
        RunOptions {
            weights: self.weights.clone(),
            inputs: self.inputs.clone(),
            seed: self.seed,
            ..RunOptions::default()
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// Native code: kernels specialized to the run's shapes, compiled with Cranelift
    Jit,
    /// The reference interpreter: the ground truth, op by op
    Interp,
}

#[derive(clap::Args)]
struct DimArgs {
    /// Give a dim a value: a constant dim's replaces its declaration, a free dim's is used
    /// for display and running only (repeatable)
    #[arg(long = "dim", value_name = "K=V", value_parser = parse_dim)]
    dims: Vec<DimOverride>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IrFormat {
    Text,
    /// Graphviz's DOT language
    Dot,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Stage {
    /// The checked, inlined program with every value's shape
    Typed,
    /// The program after equality saturation: loops lifted, projections merged, ops fused
    Optimized,
    /// The kernel plan for the given dims: kernels, their loops, buffers and bytes
    Kernels,
    /// The verified Cranelift IR of every kernel for the given dims
    Clif,
    /// The machine code of every kernel for the given dims, after register allocation
    Asm,
}

fn parse_dim(s: &str) -> Result<DimOverride, String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected K=V, found `{s}`"))?;
    let value: i64 = value
        .trim()
        .parse()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("the value of `{name}` must be a positive integer, found `{value}`"))?;
    Ok(DimOverride {
        name: name.trim().to_string(),
        value,
    })
}

/// Run the command line and return the process's exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match cli.command {
        Command::Check { file, dims, format } => check(&file, &dims.dims, format),
        Command::Ir {
            file,
            stage,
            dims,
            stats,
            explain,
            memory,
            format,
        } => ir(
            &file,
            &dims.dims,
            stage,
            IrFlags {
                stats,
                explain,
                dot: format == IrFormat::Dot,
            },
            memory.budget(),
        ),
        Command::Run(args) => run(&args),
        Command::Repl { file, dims, echo } => repl::run(&repl::Options {
            file,
            overrides: dims.dims,
            echo,
        }),
        Command::Bench(args) => native::bench(&args),
        Command::Plot(cmd) => plot::command(&cmd),
        Command::Tokenize(args) => tokenize::command(&args),
        Command::Generate(args) => generate::command(&args),
        Command::Lsp => attnc::lsp::run(),
    }
}

/// The source of `path`, or exit code 1 with a message naming the file.
fn read_source(path: &Path) -> Result<String, i32> {
    std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string()))
        .map_err(|e| {
            eprintln!("error: cannot read `{}`: {e}", path.display());
            1
        })
}

/// Read and check a file; `Err` carries the exit code after a usage or I/O error.
fn load(path: &Path, dims: &[DimOverride]) -> Result<(String, Checked), i32> {
    let src = read_source(path)?;
    match check_source(&src, dims) {
        Ok(checked) => Ok((src, checked)),
        Err(usage) => {
            eprintln!("error: {usage}");
            Err(2)
        }
    }
}

fn check(path: &Path, dims: &[DimOverride], format: Format) -> i32 {
    let (src, checked) = match load(path, dims) {
        Ok(x) => x,
        Err(code) => return code,
    };
    match format {
        Format::Json => {
            let obj = render::check_json(&src, &checked.diagnostics, &checked.program);
            outln!("{obj}");
        }
        Format::Text => {
            eprint!(
                "{}",
                render::diagnostics_text(&path.display().to_string(), &src, &checked.diagnostics)
            );
            if !checked.has_errors() {
                out!("{}", render::bindings_text(&checked.program));
            }
        }
    }
    i32::from(checked.has_errors())
}

/// The optimizer's extra outputs of `attnc ir`.
struct IrFlags {
    stats: bool,
    explain: bool,
    /// A Graphviz graph instead of text.
    dot: bool,
}

fn ir(path: &Path, dims: &[DimOverride], stage: Stage, flags: IrFlags, budget: u64) -> i32 {
    if stage != Stage::Optimized && (flags.stats || flags.explain) {
        eprintln!("error: `--stats` and `--explain` apply to `--stage optimized` only");
        return 2;
    }
    if flags.dot
        && (matches!(stage, Stage::Kernels | Stage::Clif | Stage::Asm) || flags.stats || flags.explain)
    {
        eprintln!(
            "error: `--format dot` draws `--stage typed` or `optimized`, without `--stats` or `--explain`"
        );
        return 2;
    }
    if matches!(stage, Stage::Kernels | Stage::Clif | Stage::Asm) {
        return native::ir(path, dims, stage, budget);
    }
    let (src, checked) = match load(path, dims) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if checked.has_errors() {
        eprint!(
            "{}",
            render::diagnostics_text(&path.display().to_string(), &src, &checked.diagnostics)
        );
        return 1;
    }
    match stage {
        Stage::Kernels | Stage::Clif | Stage::Asm => unreachable!("handled above"),
        Stage::Typed if flags.dot => out!("{}", checked.program.to_dot()),
        Stage::Typed => out!("{}", checked.program.to_text()),
        Stage::Optimized if flags.dot => {
            out!("{}", attnc::opt::optimize(&checked.program).program.to_dot())
        }
        Stage::Optimized => {
            let optimized = match flags.stats {
                true => attnc::opt::optimize_and_compare(&checked.program),
                false => attnc::opt::optimize(&checked.program),
            };
            out!("{}", optimized.program.to_text());
            if flags.stats {
                out!("==== STATS ====\n{}", optimized.stats);
            }
            if flags.explain {
                match attnc::opt::explain(&checked.program) {
                    Ok(text) => out!("==== EXPLAIN ====\n{text}"),
                    Err(why) => {
                        eprintln!("error: {why}");
                        return 1;
                    }
                }
            }
        }
    }
    0
}

/// `run --tokenizer ..`: the texts' outputs, printed row by row, and written with `-o`.
fn run_text(program: &attnc::ir::Program, opts: &RunOptions, args: &RunArgs) -> i32 {
    let runner = embed::Runner {
        backend: args.backend,
        threads: native::threads(args.threads),
    };
    let embed::Embedded { texts, outputs } = match embed::run(program, opts, &args.text, &runner) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if let Some(path) = &args.output {
        if let Err(e) = runtime::save_outputs(path, &outputs) {
            eprintln!("{e}");
            return 1;
        }
    }
    out!("{}", embed::text(&texts, &outputs));
    if let Some(path) = &args.output {
        outln!("wrote {}", path.display());
    }
    0
}

fn run(args: &RunArgs) -> i32 {
    let (src, checked) = match load(&args.file, &args.dims.dims) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if checked.has_errors() {
        eprint!(
            "{}",
            render::diagnostics_text(&args.file.display().to_string(), &src, &checked.diagnostics)
        );
        return 1;
    }
    let program = &checked.program;
    let opts = RunOptions {
        max_memory: Some(args.memory.budget()),
        ..args.tensors.options()
    };
    if let Some(Err(e)) = args.output.as_deref().map(runtime::files::output_target) {
        eprintln!("{e}");
        return 1;
    }
    let plot_opts = args.plot_args.options().and_then(|o| {
        plot::check_targets(program, &[], &args.plot, &o)?;
        Ok(o)
    });
    let plot_opts = match plot_opts {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if args.text.tokenizer.is_some() {
        return run_text(program, &opts, args);
    }
    let start = Instant::now();
    let result = runtime::bind(program, &opts).and_then(|bound| {
        plot::check_targets(program, &bound.dims, &args.plot, &plot_opts)?;
        let bound_at = Instant::now();
        let (outputs, compile_ms) = match args.backend {
            Backend::Interp => (runtime::interpret(program, &bound)?, None),
            Backend::Jit => {
                let (outputs, compile_ms) = native::run(program, bound, args.threads, opts.budget())?;
                (outputs, Some(compile_ms))
            }
        };
        Ok((outputs, bound_at, compile_ms))
    });
    let (outputs, bound_at, compile_ms) = match result {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let done = Instant::now();
    if let Some(path) = &args.output {
        if let Err(e) = runtime::save_outputs(path, &outputs) {
            eprintln!("{e}");
            return 1;
        }
    }
    let width = outputs.iter().map(|(n, _)| n.chars().count()).max().unwrap_or(0);
    let shapes: Vec<String> = outputs.iter().map(|(_, t)| format!("{:?}", t.shape)).collect();
    let shape_width = shapes.iter().map(String::len).max().unwrap_or(0);
    for ((name, t), shape) in outputs.iter().zip(&shapes) {
        let (name, shape) = (render::pad(name, width), render::pad(shape, shape_width));
        outln!("{name}  {shape}  checksum {:.6}", runtime::checksum(t));
    }
    if let Some(path) = &args.output {
        outln!("wrote {}", path.display());
    }
    for (name, path) in &args.plot {
        let (_, t) = outputs
            .iter()
            .find(|(n, _)| n == name)
            .expect("checked by plot::check_targets");
        if let Err(e) = plot::draw(t, name, &plot_opts, path) {
            eprintln!("{e}");
            return 1;
        }
        outln!("wrote {}", path.display());
    }
    let backend = match args.backend {
        Backend::Interp => "interp".to_string(),
        Backend::Jit => native::describe(args.threads),
    };
    let run_ms = ms(done - bound_at);
    match compile_ms {
        Some(c) => outln!(
            "time: load {:.3} ms, compile {c:.3} ms, run {:.3} ms ({backend})",
            ms(bound_at - start),
            run_ms - c
        ),
        None => outln!(
            "time: load {:.3} ms, run {run_ms:.3} ms ({backend})",
            ms(bound_at - start)
        ),
    }
    0
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
