//! `attnc generate`: text from a causal language model program and its GGUF weights,
//! streamed as it is produced: the prompt tokenized with the GGUF's tokenizer (or a
//! `tokenizer.json`), greedy or sampled tokens, prefill and decode speeds on stderr.

use super::output::emit;
use super::tokenize::{open_gguf, prompt_tokenizer};
use super::{load, native, Backend, DimArgs, MemoryArgs};
use attnc::check::DimOverride;
use attnc::ir::Program;
use attnc::render;
use attnc::runtime::function::{self, Function, Weights};
use attnc::runtime::generate::program::{capacity_dim, last_logits, Cached, Interface, Window};
use attnc::runtime::generate::{self, Limits, Sampler, Stats, TextStream};
use attnc::runtime::gguf::GgufFile;
use attnc::runtime::tokenize::PromptTokenizer;
use attnc::runtime::RunError;
use std::path::PathBuf;

/// A cache's capacity is a multiple of this many tokens, so that nearby lengths share
/// compiled plans.
const CACHE_STEP: usize = 256;
/// A window's length is a multiple of this many tokens: small, because every step of a
/// program without a cache runs the whole window.
const WINDOW_STEP: usize = 32;

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// The .attn program: `input_ids: [B, N] int64`, optionally `cache_position: [N] int64`,
    /// and `output logits: [B, N, V]`
    file: PathBuf,
    /// The model's GGUF file: its weights, tokenizer, chat template, end-of-sequence id
    /// and context length
    #[arg(long, value_name = "F.gguf")]
    weights: PathBuf,
    /// The text to continue
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as one user message in the GGUF's chat template
    #[arg(long)]
    chat: bool,
    /// New tokens at most (generation also stops at the end-of-sequence token)
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Sample instead of taking the most likely token: logits divided by this
    #[arg(long)]
    temperature: Option<f32>,
    /// When sampling, keep only the K most likely tokens
    #[arg(long, value_name = "K")]
    top_k: Option<usize>,
    /// When sampling, keep the fewest most likely tokens whose probability reaches P
    #[arg(long, value_name = "P")]
    top_p: Option<f32>,
    /// The seed of sampling: the same seed, the same text
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the new tokens' ids, space-separated, instead of their text
    #[arg(long)]
    ids: bool,
    /// A Hugging Face tokenizer.json, used instead of the GGUF's tokenizer
    #[arg(long, value_name = "tokenizer.json")]
    tokenizer: Option<PathBuf>,
    #[command(flatten)]
    dims: DimArgs,
    /// Worker threads, 1 to 1024 (the interpreter runs on one)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Which backend runs the program
    #[arg(long, value_enum, default_value_t = Backend::Jit)]
    backend: Backend,
    #[command(flatten)]
    memory: MemoryArgs,
}

pub fn command(args: &GenerateArgs) -> i32 {
    let mut exit = 0;
    match run(args, &mut exit) {
        Ok(report) => {
            if exit == 0 {
                eprintln!("{report}");
            }
            exit
        }
        Err(Failed::Exit(code)) => code,
        Err(Failed::Run(_)) if exit != 0 => exit,
        Err(Failed::Run(e)) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Why generation stopped early: an error to print, or an exit code whose message was
/// printed already.
enum Failed {
    Run(RunError),
    Exit(i32),
}

impl From<RunError> for Failed {
    fn from(e: RunError) -> Failed {
        Failed::Run(e)
    }
}

/// The checked program with `extra` among the `--dim`s; its diagnostics printed otherwise.
fn checked_program(args: &GenerateArgs, extra: Option<DimOverride>) -> Result<Program, Failed> {
    let mut dims: Vec<DimOverride> = args.dims.dims.clone();
    dims.extend(extra);
    let (src, checked) = load(&args.file, &dims).map_err(Failed::Exit)?;
    if checked.has_errors() {
        let name = args.file.display().to_string();
        eprint!("{}", render::diagnostics_text(&name, &src, &checked.diagnostics));
        return Err(Failed::Exit(1));
    }
    Ok(checked.program)
}

/// What generation needs from the GGUF besides the weights.
struct Model {
    tokenizer: PromptTokenizer,
    eos: Option<u32>,
    context: Option<usize>,
}

impl Model {
    fn open(args: &GenerateArgs) -> Result<Model, RunError> {
        let gguf = open_gguf(&args.weights)?;
        let tokenizer = prompt_tokenizer(Some(&gguf), args.tokenizer.as_deref())?;
        let eos = gguf.get("tokenizer.ggml.eos_token_id").and_then(|v| v.as_u64());
        Ok(Model {
            tokenizer,
            eos: eos.and_then(|id| u32::try_from(id).ok()),
            context: context_length(&gguf),
        })
    }
}

/// `{architecture}.context_length`, when the metadata has it.
fn context_length(gguf: &GgufFile) -> Option<usize> {
    let arch = gguf.get("general.architecture")?.as_str()?;
    let n = gguf.get(&format!("{arch}.context_length"))?.as_u64()?;
    usize::try_from(n).ok()
}

/// The sampler the flags ask for: greedy unless `--temperature` is given.
fn sampler(args: &GenerateArgs) -> Result<Sampler, RunError> {
    match args.temperature {
        None if args.top_k.is_some() || args.top_p.is_some() => {
            Err(RunError::new(None, "`--top-k` and `--top-p` apply when sampling")
                .with_hint("give `--temperature` too (1.0 samples from the model's distribution)"))
        }
        None => Ok(Sampler::Greedy),
        Some(t) => Sampler::random(t, args.top_k, args.top_p, args.seed).map_err(|m| RunError::new(None, m)),
    }
}

/// The cache's capacity is `generate`'s to set: a `--dim` for it would be replaced, and a
/// user's value must not be dropped without a word.
fn capacity_given(given: &DimOverride) -> RunError {
    let message = format!(
        "`--dim {}={}`: `generate` sets the cache's capacity `{}` from the prompt and `--max-new-tokens`",
        given.name, given.value, given.name
    );
    RunError::new(None, message)
        .with_hint("leave it out; `--max-new-tokens` bounds the tokens the cache holds")
}

/// The cache's capacity or the window's length: the prompt and the new tokens, rounded up
/// to a multiple of `step`, within the context; an error when the prompt alone does not fit.
/// The sum saturates: `--max-new-tokens` may be any `usize`, and a sum that wrapped would
/// be a capacity too small for the prompt.
fn capacity(
    prompt: usize,
    new_tokens: usize,
    step: usize,
    context: Option<usize>,
) -> Result<usize, RunError> {
    let wanted = prompt
        .saturating_add(new_tokens)
        .div_ceil(step)
        .saturating_mul(step);
    match context {
        Some(c) if prompt >= c => Err(RunError::new(
            None,
            format!("the prompt has {prompt} tokens, the model's context only {c}"),
        )
        .with_hint("give a shorter prompt")),
        Some(c) => Ok(wanted.min(c)),
        None => Ok(wanted),
    }
}

/// Generates, streaming to stdout; the speeds line for stderr. `exit` becomes the exit code
/// when stdout fails (0 when its reader went away).
fn run(args: &GenerateArgs, exit: &mut i32) -> Result<String, Failed> {
    let program = checked_program(args, None)?;
    Interface::of(&program)?;
    let mut sampler = sampler(args)?;
    let model = Model::open(args)?;
    let text = match args.chat {
        true => model.tokenizer.chat_prompt(&args.prompt)?,
        false => args.prompt.clone(),
    };
    let prompt = model.tokenizer.encode(&text)?;
    let cache = capacity_dim(&program)?;
    if let Some(given) = cache
        .as_ref()
        .and_then(|c| args.dims.dims.iter().find(|d| &d.name == c))
    {
        return Err(capacity_given(given).into());
    }
    let step = if cache.is_some() { CACHE_STEP } else { WINDOW_STEP };
    let capacity = capacity(prompt.len(), args.max_new_tokens, step, model.context)?;
    let program = match cache {
        Some(name) => {
            let value = i64::try_from(capacity).unwrap_or(i64::MAX);
            checked_program(args, Some(DimOverride { name, value }))?
        }
        None => program,
    };
    let limits = Limits {
        max_new_tokens: args.max_new_tokens.min(capacity.saturating_sub(prompt.len())),
        eos: model.eos,
    };
    let options = function::Options {
        backend: match args.backend {
            Backend::Jit => function::Backend::Jit,
            Backend::Interp => function::Backend::Interp,
        },
        threads: Some(native::threads(args.threads)),
        max_memory: Some(args.memory.budget()),
    };
    // Each step reads the last position's logits only: the program computes no others.
    let function = Function::new(last_logits(program), Weights::File(args.weights.clone()), options)?;
    let mut cached;
    let mut window;
    let lm: &mut dyn generate::Model = match function.has_state() {
        true => {
            cached = Cached::new(&function, capacity)?;
            &mut cached
        }
        false => {
            window = Window::new(&function, capacity)?;
            &mut window
        }
    };
    let mut stream = TextStream::default();
    let decode = |ids: &[u32]| model.tokenizer.decode(ids);
    let mut prefill_compile_ms = None;
    let mut separator = "";
    let stats = generate::generate(lm, &prompt, &mut sampler, limits, |id| {
        prefill_compile_ms.get_or_insert_with(|| compile_ms(&function));
        let piece = match (args.ids, Some(id) == model.eos) {
            (true, _) => format!("{separator}{id}"),
            (false, true) => String::new(),
            (false, false) => stream.push(id, decode)?,
        };
        separator = " ";
        emit(&piece).map_err(|code| stop(exit, code))
    })?;
    let tail = match args.ids {
        true => "\n".to_string(),
        false => stream.finish(decode)? + "\n",
    };
    emit(&tail).map_err(|code| stop(exit, code))?;
    let prefill_compile = prefill_compile_ms.unwrap_or(0.0);
    Ok(report(
        &stats,
        prefill_compile,
        compile_ms(&function) - prefill_compile,
    ))
}

/// Records a failed write's exit code and stops generation.
fn stop(exit: &mut i32, code: i32) -> RunError {
    *exit = code;
    RunError::new(None, "stdout is closed")
}

/// Milliseconds spent compiling so far.
fn compile_ms(function: &Function) -> f64 {
    function.plans().iter().map(|p| p.compile_ms).sum()
}

/// The speeds, compile time left out of each stage's.
fn report(stats: &Stats, prefill_compile_ms: f64, decode_compile_ms: f64) -> String {
    let rate = |tokens: usize, total: std::time::Duration, compile_ms: f64| {
        let secs = (total.as_secs_f64() - compile_ms / 1e3).max(1e-9);
        tokens as f64 / secs
    };
    format!(
        "prefill: {} tokens, {:.1} tokens/s; decode: {} tokens, {:.1} tokens/s; compile {:.0} ms",
        stats.prompt_tokens,
        rate(stats.prompt_tokens, stats.prefill, prefill_compile_ms),
        stats.decode_steps,
        rate(stats.decode_steps, stats.decode, decode_compile_ms),
        prefill_compile_ms + decode_compile_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_rounds_up_within_the_context() {
        assert_eq!(capacity(10, 64, CACHE_STEP, Some(8192)).unwrap(), 256);
        assert_eq!(capacity(200, 64, CACHE_STEP, Some(8192)).unwrap(), 512);
        assert_eq!(capacity(200, 64, WINDOW_STEP, Some(8192)).unwrap(), 288);
        assert_eq!(capacity(200, 64, CACHE_STEP, Some(300)).unwrap(), 300);
        assert_eq!(capacity(5, 5, WINDOW_STEP, None).unwrap(), 32);
        let err = capacity(300, 1, CACHE_STEP, Some(300)).unwrap_err();
        assert_eq!(
            err.message,
            "the prompt has 300 tokens, the model's context only 300"
        );
    }

    /// `--max-new-tokens 18446744073709551614` after a 2-token prompt wrapped the sum to 0:
    /// a capacity of 0, and nothing generated, silently.
    #[test]
    fn capacity_of_the_most_new_tokens_is_the_context() {
        assert_eq!(capacity(2, usize::MAX - 1, CACHE_STEP, Some(8192)).unwrap(), 8192);
        assert_eq!(capacity(2, usize::MAX, WINDOW_STEP, Some(300)).unwrap(), 300);
        assert_eq!(capacity(2, usize::MAX, CACHE_STEP, None).unwrap(), usize::MAX);
    }
}
