//! `attnc run MODEL --tokenizer tokenizer.json --text ".." --text-file F`: text in, vectors
//! out. Texts are tokenized in batches; the weights are read once, and the native backend
//! optimizes once and compiles once per batch shape.

use super::Backend;
use attnc::ir::Program;
use attnc::runtime::hoist::hoist;
use attnc::runtime::jit::{pool, Cache};
use attnc::runtime::tokenize::SentenceTokenizer;
use attnc::runtime::{self, RunError, RunOptions, Tensor};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct TextArgs {
    /// A tokenizer.json: tokenize --text or --text-file into the program's inputs
    /// input_ids, attention_mask and token_type_ids, as sentence-transformers does
    #[arg(long, value_name = "tokenizer.json", conflicts_with = "inputs")]
    pub tokenizer: Option<PathBuf>,
    /// A text to embed (repeatable)
    #[arg(long, requires = "tokenizer")]
    text: Vec<String>,
    /// Texts to embed, one per line (UTF-8)
    #[arg(long, value_name = "FILE", requires = "tokenizer", conflicts_with = "text")]
    text_file: Option<PathBuf>,
    /// Texts tokenized and run together
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
}

/// How a text run computes: the backend and its threads.
pub struct Runner {
    pub backend: Backend,
    pub threads: usize,
}

/// The texts embedded, and the program's outputs for all of them, in order (each output's
/// batches joined along axis 0).
pub struct Embedded {
    pub texts: Vec<String>,
    pub outputs: Vec<(String, Tensor)>,
}

/// The program run on the texts of `args`.
pub fn run(
    program: &Program,
    opts: &RunOptions,
    args: &TextArgs,
    runner: &Runner,
) -> Result<Embedded, RunError> {
    let tokenizer_path = args
        .tokenizer
        .as_deref()
        .ok_or_else(|| RunError::new(None, "no --tokenizer"))?;
    let texts = texts(args)?;
    let tokenizer = SentenceTokenizer::open(tokenizer_path)?;
    let hoisted = hoist(program)?;
    let optimized = attnc::opt::optimize(&hoisted.program).program;
    let mut cache = Cache::new(&optimized);
    let pool = pool(runner.threads)?;
    let mut params = None;
    let mut joined: Vec<(String, Vec<Tensor>)> = Vec::new();
    let progress = std::io::stderr().is_terminal() && texts.len() > args.batch_size as usize;
    for (k, batch) in texts.chunks(args.batch_size as usize).enumerate() {
        let file = tokenizer.encode(batch)?;
        let mut bound = runtime::bind_from(program, opts, &file, params.take())?;
        let outputs = match runner.backend {
            Backend::Interp => runtime::interpret(program, &bound)?,
            Backend::Jit => {
                hoisted.gather_inputs(program, &mut bound)?;
                let exe = cache.get(&bound.dims)?;
                let outputs = exe.run(&bound, &pool)?;
                bound.inputs.truncate(program.inputs.len());
                outputs
            }
        };
        params = Some(bound.params);
        for (i, (name, t)) in outputs.into_iter().enumerate() {
            match joined.get_mut(i) {
                Some((_, parts)) => parts.push(t),
                None => joined.push((name, vec![t])),
            }
        }
        if progress {
            let done = (texts.len()).min((k + 1) * args.batch_size as usize);
            eprint!("\rembedded {done}/{} texts", texts.len());
            let _ = std::io::stderr().flush();
        }
    }
    if progress {
        eprintln!();
    }
    let outputs = joined
        .into_iter()
        .map(|(name, parts)| join(name, parts))
        .collect::<Result<_, _>>()?;
    Ok(Embedded { texts, outputs })
}

/// The texts to embed: `--text`s, or the lines of `--text-file`.
fn texts(args: &TextArgs) -> Result<Vec<String>, RunError> {
    let texts = match &args.text_file {
        Some(path) => read_lines(path)?,
        None => args.text.clone(),
    };
    if texts.is_empty() {
        let e = RunError::new(None, "no text to embed")
            .with_hint("give `--text \"..\"` or a `--text-file` with lines");
        return Err(e);
    }
    Ok(texts)
}

fn read_lines(path: &Path) -> Result<Vec<String>, RunError> {
    let bytes = std::fs::read(path)
        .map_err(|e| RunError::new(None, format!("cannot read `{}`: {e}", path.display())))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        RunError::new(
            None,
            format!("`{}` is not UTF-8 text: byte {at} is not", path.display()),
        )
        .with_hint("convert it to UTF-8, one text per line")
    })?;
    Ok(text.lines().map(str::to_string).collect())
}

/// One output's batches joined along axis 0.
fn join(name: String, parts: Vec<Tensor>) -> Result<(String, Tensor), RunError> {
    let first = parts.first().map(|t| t.shape.clone()).unwrap_or_default();
    if parts.len() == 1 {
        let t = parts.into_iter().next().expect("one part");
        return Ok((name, t));
    }
    if first.is_empty() || parts.iter().any(|t| t.shape[1..] != first[1..]) {
        let message = format!(
            "output `{name}` differs in shape from one batch to the next, so batches cannot be joined"
        );
        return Err(
            RunError::new(None, message).with_hint("give a --batch-size as large as the number of texts")
        );
    }
    let rows: usize = parts.iter().map(|t| t.shape[0]).sum();
    let shape = [&[rows], &first[1..]].concat();
    let data = parts.into_iter().flat_map(|t| t.data.into_vec()).collect();
    Ok((name, Tensor::new(shape, data)))
}

/// Each row of each output: its shape, norm and first values, and the text it embeds.
pub fn text(texts: &[String], outputs: &[(String, Tensor)]) -> String {
    let mut out = String::new();
    for (name, t) in outputs {
        let _ = writeln!(out, "{name}  {:?}", t.shape);
        let width: usize = t.shape.iter().skip(1).product();
        for (i, row) in t.data.chunks(width.max(1)).enumerate().take(texts.len()) {
            let norm = row
                .iter()
                .map(|&x| f64::from(x) * f64::from(x))
                .sum::<f64>()
                .sqrt();
            let first: Vec<String> = row.iter().take(5).map(|x| format!("{x:.6}")).collect();
            let _ = writeln!(
                out,
                "  {i}  norm {norm:.6}  [{}, ..]  {:?}",
                first.join(", "),
                texts[i]
            );
        }
    }
    out
}
