//! The command line: parse arguments, run a stage, print, pick the exit code.
//!
//! Exit codes: 0 success, 1 a diagnostic (the user's program or files), 2 bad usage.

use attnc::check::DimOverride;
use attnc::driver::{check_source, Checked};
use attnc::render;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};

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
    },
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
enum Stage {
    /// The checked, inlined program with every value's shape
    Typed,
    /// The program after equality saturation: loops lifted, projections merged, ops fused
    Optimized,
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
        } => ir(&file, &dims.dims, stage, IrFlags { stats, explain }),
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
            println!("{obj}");
        }
        Format::Text => {
            eprint!(
                "{}",
                render::diagnostics_text(&path.display().to_string(), &src, &checked.diagnostics)
            );
            if !checked.has_errors() {
                print!("{}", render::bindings_text(&checked.program));
            }
        }
    }
    i32::from(checked.has_errors())
}

/// The optimizer's extra outputs of `attnc ir`.
struct IrFlags {
    stats: bool,
    explain: bool,
}

fn ir(path: &Path, dims: &[DimOverride], stage: Stage, flags: IrFlags) -> i32 {
    if stage == Stage::Typed && (flags.stats || flags.explain) {
        eprintln!("error: `--stats` and `--explain` apply to `--stage optimized` only");
        return 2;
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
        Stage::Typed => print!("{}", checked.program.to_text()),
        Stage::Optimized => {
            let optimized = attnc::opt::optimize(&checked.program);
            print!("{}", optimized.program.to_text());
            if flags.stats {
                print!("==== STATS ====\n{}", optimized.stats);
            }
            if flags.explain {
                match attnc::opt::explain(&checked.program) {
                    Ok(text) => print!("==== EXPLAIN ====\n{text}"),
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
