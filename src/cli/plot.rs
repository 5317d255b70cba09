//! `attnc plot` and `attnc run --plot`: heatmaps of an output.

use attnc::ir::Program;
use attnc::plot::{self, PlotOptions};
use attnc::runtime::files::{Store, TensorFile};
use attnc::runtime::{RunError, Tensor};
use std::ops::Range;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct PlotCommand {
    /// A safetensors file, as `attnc run -o` writes
    file: PathBuf,
    /// The tensor to draw, `[.., N, M]`
    #[arg(long = "tensor", value_name = "NAME")]
    name: String,
    /// The image to write: PNG or SVG, by its extension
    #[arg(short = 'o', long = "output", value_name = "OUT.png|OUT.svg", value_parser = parse_image)]
    output: PathBuf,
    #[command(flatten)]
    plot: PlotArgs,
}

/// What to draw of a tensor; `plot` and `run --plot` take the same flags.
#[derive(clap::Args)]
pub struct PlotArgs {
    /// The batch element to draw
    #[arg(long, default_value_t = 0)]
    batch: usize,
    /// The heads to draw, `a..b` (end excluded) or one head `a`; all by default
    #[arg(long, value_name = "A..B", value_parser = parse_heads)]
    heads: Option<Range<usize>>,
    /// Tick labels, one per line: the queries' file, then the keys' if they differ
    #[arg(long, value_name = "TOKENS.txt", num_args = 1..=2)]
    labels: Vec<PathBuf>,
}

fn parse_heads(s: &str) -> Result<Range<usize>, String> {
    let number = |t: &str| {
        t.trim()
            .parse::<usize>()
            .map_err(|_| format!("expected `a..b` or `a` with whole numbers, found `{s}`"))
    };
    let heads = match s.split_once("..") {
        Some((a, b)) => number(a)?..number(b)?,
        None => number(s).map(|a| a..a + 1)?,
    };
    match heads.is_empty() {
        true => Err(format!(
            "`{s}` selects no head: the end is excluded, so it must be past the start"
        )),
        false => Ok(heads),
    }
}

/// A plot's file name: one ending in `.png` or `.svg`.
fn parse_image(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    plot::format(&path)?;
    Ok(path)
}

impl PlotArgs {
    /// The options, with the label files read.
    pub fn options(&self) -> Result<PlotOptions, RunError> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path)
                .map(|text| text.lines().map(str::to_string).collect::<Vec<_>>())
                .map_err(|e| RunError::new(None, format!("cannot read `{}`: {e}", path.display())))
        };
        let labels = self.labels.iter().map(read).collect::<Result<Vec<_>, _>>()?;
        let mut labels = labels.into_iter();
        Ok(PlotOptions {
            batch: self.batch,
            heads: self.heads.clone(),
            queries: labels.next(),
            keys: labels.next(),
        })
    }
}

/// Draw `t`, named `name`, into `path`.
pub fn draw(t: &Tensor, name: &str, opts: &PlotOptions, path: &Path) -> Result<(), RunError> {
    let maps = plot::select(t, name, opts)?;
    plot::save(&maps, name, opts, path)
}

/// Check `run --plot` before anything is compiled or run: each target names an output of
/// `program`, and the flags select something of it at the sizes `dims` binds (an output
/// whose sizes are not all bound yet is checked once it is computed). Called before the
/// files are read, with no dims (the constant ones are known), and again after.
pub fn check_targets(
    program: &Program,
    dims: &[Option<i64>],
    targets: &[(String, PathBuf)],
    opts: &PlotOptions,
) -> Result<(), RunError> {
    for (name, _) in targets {
        let Some(output) = program.outputs.iter().find(|o| o.name == *name) else {
            let names: Vec<&str> = program.outputs.iter().map(|o| o.name.as_str()).collect();
            let msg = format!(
                "--plot: the program has no output `{name}` (it has `{}`)",
                names.join("`, `")
            );
            return Err(RunError::new(None, msg));
        };
        let sizes: Option<Vec<usize>> = program
            .tensor_type(output.value)
            .shape
            .iter()
            .map(|p| {
                let v = program.dims.eval(p, &|s| dims.get(s).copied().flatten())?;
                usize::try_from(v).ok()
            })
            .collect();
        if let Some(shape) = sizes {
            plot::selection(&shape, name, opts)?;
        }
    }
    Ok(())
}

/// `attnc plot`.
pub fn command(cmd: &PlotCommand) -> i32 {
    let result = TensorFile::open(&cmd.file).and_then(|file| {
        let entry = file.get(&cmd.name).ok_or_else(|| {
            let near = file.closest_keys(&cmd.name, 3);
            let hint = match near.is_empty() {
                true => String::new(),
                false => format!(" (it has `{}`)", near.join("`, `")),
            };
            let msg = format!("`{}` has no tensor `{}`{hint}", cmd.file.display(), cmd.name);
            RunError::new(None, msg)
        })?;
        let t = entry.tensor.ok_or_else(|| {
            let msg = format!("`{}` in `{}` is not a float tensor", cmd.name, cmd.file.display());
            RunError::new(None, msg)
        })?;
        draw(&t, &cmd.name, &cmd.plot.options()?, &cmd.output)
    });
    match result {
        Ok(()) => {
            outln!("wrote {}", cmd.output.display());
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// `NAME=FILE` of `run --plot`.
pub fn parse_target(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), parse_image(file)?))
        }
        _ => Err(format!("expected OUTPUT=FILE.png, found `{s}`")),
    }
}
