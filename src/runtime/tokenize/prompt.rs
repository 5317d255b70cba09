//! Text to token ids: a `tokenizers` tokenizer built from a GGUF file's metadata or read from
//! a `tokenizer.json`, and the chat template a GGUF carries.
//!
//! From a GGUF, the tokenizer is built as `transformers` builds it
//! (`integrations/gguf/gguf_tokenizer_mapping.py`, 5.24): for `tokenizer.ggml.model = gpt2`,
//! a byte-level BPE over `tokenizer.ggml.tokens` (respelled in the byte alphabet where a
//! token is not) and `tokenizer.ggml.merges`, GPT-2's pre-tokenizer (`ByteLevel` with its
//! regex, no prefix space), control tokens (type 3) matched whole as special tokens and
//! user-defined ones (type 4) as added tokens, and no BOS. The pre-tokenizers `transformers`
//! gives another split regex (`llama-bpe`, `qwen2`, ..) are refused rather than guessed.
//!
//! The chat template is rendered with minijinja as `apply_chat_template(messages,
//! add_generation_prompt=True)` renders it with Jinja2: blocks trimmed and left-stripped,
//! loop controls, Python's string methods, the special tokens as variables.

use crate::runtime::gguf::{GgufFile, Value};
use crate::runtime::RunError;
use std::path::Path;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// The fuel a chat template's render may spend (minijinja's unit: about one instruction, or
/// 64 bytes of data made). The template is the GGUF file's, and two nested loops over
/// `range(10000)` ran for hours, or wrote its output until the system ran out of memory;
/// this bounds a render to about a second and 64 MB. A chat template renders one message in
/// a few hundred, and a prompt as long as a command line takes (128 KiB) in some thousands.
const TEMPLATE_FUEL: u64 = 1_000_000;

/// GGUF's token types that become added tokens.
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// Pre-tokenizers that `transformers` splits with a regex of their own, which attnc does
/// not carry: a file naming one is refused.
const OTHER_SPLITS: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "dbrx",
    "smaug-bpe",
    "tekken",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "megrez",
    "qwen35",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "minimax-m2",
];

/// A tokenizer, and the chat template and special tokens that came with it.
pub struct PromptTokenizer {
    tokenizer: Tokenizer,
    chat: Option<ChatTemplate>,
}

/// A Jinja chat template and the special tokens it may name (`bos_token`, `eos_token`, ..).
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    pub source: String,
    pub specials: Vec<(&'static str, String)>,
}

impl PromptTokenizer {
    /// The tokenizer and chat template of a GGUF file's metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<PromptTokenizer, RunError> {
        let tokenizer = gguf_tokenizer(file)?;
        Ok(PromptTokenizer {
            tokenizer,
            chat: ChatTemplate::from_gguf(file),
        })
    }

    /// The tokenizer of a `tokenizer.json`; it carries no chat template.
    pub fn from_json(path: &Path) -> Result<PromptTokenizer, RunError> {
        let tokenizer = Tokenizer::from_file(path).map_err(|e| {
            RunError::new(
                None,
                format!("cannot read `{}`: not a tokenizer.json ({e})", path.display()),
            )
        })?;
        Ok(PromptTokenizer {
            tokenizer,
            chat: None,
        })
    }

    /// Uses `chat` as the chat template.
    pub fn with_chat_template(mut self, chat: Option<ChatTemplate>) -> PromptTokenizer {
        self.chat = chat;
        self
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// The ids of `text`, special tokens in it matched whole, as `tokenizer(text)` gives them.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, RunError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| RunError::new(None, format!("cannot tokenize the prompt: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The vocabulary's spelling of token `id` (`Ġworld`), as `convert_ids_to_tokens` gives it.
    pub fn token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// The text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, RunError> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| RunError::new(None, format!("cannot decode token ids: {e}")))
    }

    /// The prompt a chat model sees for one user message, ending where the assistant's
    /// answer starts.
    pub fn chat_prompt(&self, user: &str) -> Result<String, RunError> {
        let chat = self.chat.as_ref().ok_or_else(|| {
            RunError::new(None, "the tokenizer has no chat template")
                .with_hint("give `--weights` a GGUF file whose metadata holds `tokenizer.chat_template`")
        })?;
        chat.render(user)
    }
}

impl ChatTemplate {
    /// `tokenizer.chat_template`, with the special tokens the metadata names by id.
    pub fn from_gguf(file: &GgufFile) -> Option<ChatTemplate> {
        let source = file.get("tokenizer.chat_template")?.as_str()?.to_string();
        let tokens = file.get("tokenizer.ggml.tokens").and_then(Value::as_array);
        let specials = [
            ("bos_token", "bos_token_id"),
            ("eos_token", "eos_token_id"),
            ("unk_token", "unknown_token_id"),
            ("pad_token", "padding_token_id"),
        ];
        let specials = specials
            .into_iter()
            .filter_map(|(name, key)| {
                let id = file.get(&format!("tokenizer.ggml.{key}"))?.as_u64()?;
                let token = tokens?.get(usize::try_from(id).ok()?)?.as_str()?;
                Some((name, token.to_string()))
            })
            .collect();
        Some(ChatTemplate { source, specials })
    }

    /// The template rendered for one user message, with the generation prompt.
    pub fn render(&self, user: &str) -> Result<String, RunError> {
        let fail = |e: minijinja::Error| {
            let mut message = format!("cannot apply the chat template: {e}");
            if let Some(detail) = e.detail() {
                message = format!("{message} ({detail})");
            }
            let error = RunError::new(None, message);
            match e.kind() {
                minijinja::ErrorKind::OutOfFuel => error.with_hint(format!(
                    "the template does more than {TEMPLATE_FUEL} steps of work for one message: it is not a chat template"
                )),
                _ => error,
            }
        };
        let mut env = minijinja::Environment::new();
        env.set_fuel(Some(TEMPLATE_FUEL));
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(fail)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<(), minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    message,
                ))
            },
        );
        let message = minijinja::context! { role => "user", content => user };
        let mut ctx = std::collections::BTreeMap::from([
            ("messages", minijinja::Value::from(vec![message])),
            ("add_generation_prompt", minijinja::Value::from(true)),
        ]);
        ctx.extend(
            self.specials
                .iter()
                .map(|(k, v)| (*k, minijinja::Value::from(v.as_str()))),
        );
        env.render_str(&self.source, ctx).map_err(fail)
    }
}

/// The byte-level BPE of a GGUF's `tokenizer.ggml.*` metadata.
fn gguf_tokenizer(file: &GgufFile) -> Result<Tokenizer, RunError> {
    let path = file.path().display();
    let fail = |what: String| {
        RunError::new(None, format!("cannot build a tokenizer from `{path}`: {what}"))
            .with_hint("give one with `--tokenizer tokenizer.json`")
    };
    let model = file.get("tokenizer.ggml.model").and_then(Value::as_str);
    match model {
        Some("gpt2") => {}
        None => return Err(fail("its metadata holds no `tokenizer.ggml.model`".into())),
        Some(other) => {
            return Err(fail(format!(
                "tokenizer model `{other}` (only `gpt2`, byte-level BPE, is read)"
            )))
        }
    }
    let pre = file.get("tokenizer.ggml.pre").and_then(Value::as_str);
    if let Some(pre) = pre.filter(|p| OTHER_SPLITS.contains(p)) {
        return Err(fail(format!(
            "pre-tokenizer `{pre}` splits text with a regex attnc does not carry"
        )));
    }
    let tokens = strings(file, "tokenizer.ggml.tokens").map_err(fail)?;
    let merges = strings(file, "tokenizer.ggml.merges").map_err(fail)?;
    let types = file.get("tokenizer.ggml.token_type").and_then(Value::as_array);
    let spelling = byte_alphabet();
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (respell(t, &spelling), id as u32))
        .collect();
    let pairs = merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split(' ').collect::<Vec<_>>()[..] {
            [a, b] => Ok((a.to_string(), b.to_string())),
            _ => Err(fail(format!(
                "merge {i} `{m}` is not two tokens separated by a space"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    let typed = |kind: i64| -> Vec<&str> {
        let Some(types) = types else { return Vec::new() };
        tokens
            .iter()
            .zip(types)
            .filter(|(_, t)| integer(t) == Some(kind))
            .map(|(token, _)| token.as_str())
            .collect()
    };
    let spelled = |t: &&str| t.chars().all(in_alphabet);
    let control: Vec<AddedToken> = typed(CONTROL)
        .into_iter()
        .filter(spelled)
        .map(|t| AddedToken::from(t, true).normalized(false))
        .collect();
    tokenizer.add_special_tokens(&control);
    let user: Vec<AddedToken> = typed(USER_DEFINED)
        .into_iter()
        .filter(spelled)
        .map(|t| AddedToken::from(t, false).normalized(false))
        .collect();
    tokenizer.add_tokens(&user);
    Ok(tokenizer)
}

/// The metadata array of strings under `key`.
fn strings<'f>(file: &'f GgufFile, key: &str) -> Result<Vec<&'f String>, String> {
    let items = file
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("its metadata holds no array `{key}`"))?;
    items
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s),
            _ => Err(format!("`{key}` holds something other than strings")),
        })
        .collect()
}

fn integer(v: &Value) -> Option<i64> {
    match *v {
        Value::I32(t) => Some(t.into()),
        Value::I64(t) => Some(t),
        _ => v.as_u64().and_then(|t| i64::try_from(t).ok()),
    }
}

/// The bytes GPT-2's alphabet spells by themselves; the 68 others get U+0100 on, in order.
fn printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff)
}

/// Whether `c` is a char of GPT-2's byte alphabet.
fn in_alphabet(c: char) -> bool {
    u8::try_from(c).map_or((0x100..0x144).contains(&u32::from(c)), printable)
}

/// GPT-2's byte alphabet: byte `b` is spelled by the char at index `b`.
fn byte_alphabet() -> Vec<char> {
    let mut next = 256;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                char::from(b)
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap_or(char::REPLACEMENT_CHARACTER)
            }
        })
        .collect()
}

/// `token` as the byte-level vocabulary spells it: itself when every char is in the
/// alphabet, else each of its UTF-8 bytes spelled.
fn respell(token: &str, spelling: &[char]) -> String {
    if token.chars().all(in_alphabet) {
        token.to_string()
    } else {
        token.bytes().map(|b| spelling[usize::from(b)]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_alphabet_is_gpt2s() {
        let a = byte_alphabet();
        assert_eq!(
            (a[b'A' as usize], a[b' ' as usize], a[b'\n' as usize]),
            ('A', 'Ġ', 'Ċ')
        );
        assert_eq!((a[0], a[0xad]), ('\u{100}', 'Ń'));
        let alphabet: std::collections::HashSet<char> = a.iter().copied().collect();
        let mut chars = (0..0x200).filter_map(char::from_u32);
        assert!(chars.all(|c| in_alphabet(c) == alphabet.contains(&c)));
        assert_eq!(respell("héllo", &a), "héllo");
        assert_eq!(respell("a b", &a), "aĠb");
    }

    #[test]
    fn a_template_renders_with_python_methods_and_specials() {
        let chat = ChatTemplate {
            source: "{{ bos_token }}{% for m in messages %}{{ m['role'] | upper }}: {{ m.content.strip() }}\n{% endfor %}\n{% if add_generation_prompt %}A:{% endif %}".into(),
            specials: vec![("bos_token", "<s>".into())],
        };
        assert_eq!(chat.render("  hi  ").unwrap(), "<s>USER: hi\nA:");
        let failing = ChatTemplate {
            source: "{{ raise_exception('no system role') }}".into(),
            specials: Vec::new(),
        };
        let message = failing.render("x").unwrap_err().message;
        assert!(message.contains("no system role"), "{message}");
    }

    /// A template is the GGUF file's: one that loops 9 million times (or for hours, or
    /// writes until memory runs out) is refused once it has spent its fuel.
    #[test]
    fn a_template_that_does_too_much_work_is_refused() {
        let busy = ChatTemplate {
            source: "{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}".into(),
            specials: Vec::new(),
        };
        let err = busy.render("x").unwrap_err();
        assert!(err.message.contains("ran out of fuel"), "{}", err.message);
        assert!(err.hints[0].contains("not a chat template"), "{:?}", err.hints);
    }
}
