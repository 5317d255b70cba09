//! Text to token ids, both ways through the Hugging Face `tokenizers` crate: prompts for a
//! language model (a byte-level BPE built from a GGUF's metadata or read from a
//! `tokenizer.json`, and its chat template), and batches of sentences for an encoder, padded
//! and truncated as sentence-transformers does.

mod prompt;
mod sentences;

pub use prompt::{ChatTemplate, PromptTokenizer};
pub use sentences::SentenceTokenizer;
