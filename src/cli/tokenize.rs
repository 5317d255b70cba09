//! `attnc tokenize`: a prompt's token ids, with the tokenizer of a GGUF file's metadata or a
//! `tokenizer.json`, optionally through the GGUF's chat template.

use attnc::runtime::gguf::GgufFile;
use attnc::runtime::tokenize::{ChatTemplate, PromptTokenizer};
use attnc::runtime::weights::is_gguf;
use attnc::runtime::RunError;
use clap::ArgGroup;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(group(ArgGroup::new("source").required(true).multiple(true).args(["weights", "tokenizer"])))]
pub struct TokenizeArgs {
    /// A GGUF file: its metadata's tokenizer (`tokenizer.ggml.*`) and chat template
    #[arg(long, value_name = "F.gguf")]
    weights: Option<PathBuf>,
    /// A Hugging Face tokenizer.json, used instead of the GGUF's tokenizer
    #[arg(long, value_name = "tokenizer.json")]
    tokenizer: Option<PathBuf>,
    /// The text to tokenize
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as one user message in the GGUF's chat template, ending where the
    /// assistant's answer starts
    #[arg(long)]
    chat: bool,
    /// Print only the ids, space-separated on one line
    #[arg(long)]
    ids: bool,
}

pub fn command(args: &TokenizeArgs) -> i32 {
    let result = tokenizer(args).and_then(|tok| {
        let text = match args.chat {
            true => tok.chat_prompt(&args.prompt)?,
            false => args.prompt.clone(),
        };
        Ok((tok.encode(&text)?, tok))
    });
    let (ids, tok) = match result {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if args.ids {
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        outln!("{}", ids.join(" "));
        return 0;
    }
    let width = ids.iter().map(|id| id.to_string().len()).max().unwrap_or(1);
    for &id in &ids {
        outln!("{id:>width$}  {:?}", tok.token(id).unwrap_or_default());
    }
    0
}

fn tokenizer(args: &TokenizeArgs) -> Result<PromptTokenizer, RunError> {
    let gguf = args.weights.as_deref().map(open_gguf).transpose()?;
    prompt_tokenizer(gguf.as_ref(), args.tokenizer.as_deref())
}

/// The tokenizer the flags name: `--tokenizer` when given, else the GGUF's; the chat
/// template always comes from the GGUF.
pub(super) fn prompt_tokenizer(
    gguf: Option<&GgufFile>,
    json: Option<&Path>,
) -> Result<PromptTokenizer, RunError> {
    match (json, gguf) {
        (Some(json), _) => {
            let chat = gguf.and_then(ChatTemplate::from_gguf);
            Ok(PromptTokenizer::from_json(json)?.with_chat_template(chat))
        }
        (None, Some(file)) => PromptTokenizer::from_gguf(file),
        (None, None) => unreachable!("clap requires `--weights` or `--tokenizer`"),
    }
}

pub(super) fn open_gguf(path: &Path) -> Result<GgufFile, RunError> {
    if path.exists() && !is_gguf(path) {
        let message = format!(
            "`{}` is not a GGUF file: only a GGUF carries a tokenizer",
            path.display()
        );
        return Err(
            RunError::new(None, message).with_hint("give the tokenizer with `--tokenizer tokenizer.json`")
        );
    }
    GgufFile::open(path)
}
