//! Text to the tensors a Hugging Face tokenizer returns (`input_ids`, `attention_mask`,
//! `token_type_ids`), tokenized as sentence-transformers tokenizes: each text stripped of
//! surrounding whitespace, truncated at `max_seq_length` (from `sentence_bert_config.json`
//! beside `tokenizer.json`, which overrides the truncation and fixed padding the tokenizer
//! file itself carries), and padded to the longest text of the batch.

use crate::runtime::files::TensorFile;
use crate::runtime::RunError;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// A tokenizer file set up as sentence-transformers uses it.
pub struct SentenceTokenizer {
    inner: Tokenizer,
    /// Tokens a text is truncated to, the special tokens included.
    pub max_length: usize,
}

/// Where the tokenized text comes from, in messages (no file holds it).
const TOKENIZED: &str = "the tokenized text";

impl SentenceTokenizer {
    /// The tokenizer of `path` (a `tokenizer.json`), its `max_seq_length` read from the
    /// `sentence_bert_config.json` beside it when there is one (else the file's own
    /// truncation, else 512).
    pub fn open(path: &Path) -> Result<SentenceTokenizer, RunError> {
        let mut inner = Tokenizer::from_file(path).map_err(|e| {
            RunError::new(None, format!("`{}` is not a tokenizer file: {e}", path.display()))
                .with_hint("give the `tokenizer.json` the model ships")
        })?;
        let own = inner.get_truncation().map(|t| t.max_length);
        let max_length = match max_seq_length(path)? {
            Some(n) => n,
            None => own.unwrap_or(512),
        };
        let padding = inner.get_padding().cloned().unwrap_or_default();
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_to_multiple_of: None,
            ..padding
        }));
        let truncation = TruncationParams {
            max_length,
            ..TruncationParams::default()
        };
        inner
            .with_truncation(Some(truncation))
            .map_err(|e| RunError::new(None, format!("cannot truncate at {max_length} tokens: {e}")))?;
        Ok(SentenceTokenizer { inner, max_length })
    }

    /// The batch of `texts` as a safetensors file in memory, its tensors int64 `[B, N]`.
    pub fn encode(&self, texts: &[String]) -> Result<TensorFile, RunError> {
        let stripped: Vec<&str> = texts.iter().map(|t| t.trim()).collect();
        let encodings = self
            .inner
            .encode_batch(stripped, true)
            .map_err(|e| RunError::new(None, format!("cannot tokenize the text: {e}")))?;
        let n = encodings.first().map_or(0, |e| e.len());
        let shape = vec![encodings.len(), n];
        let columns = [
            (
                "input_ids",
                encodings
                    .iter()
                    .flat_map(|e| e.get_ids().to_vec())
                    .collect::<Vec<u32>>(),
            ),
            (
                "attention_mask",
                encodings
                    .iter()
                    .flat_map(|e| e.get_attention_mask().to_vec())
                    .collect(),
            ),
            (
                "token_type_ids",
                encodings.iter().flat_map(|e| e.get_type_ids().to_vec()).collect(),
            ),
        ];
        let bytes: Vec<(&str, Vec<u8>)> = columns
            .iter()
            .map(|(name, values)| {
                (
                    *name,
                    values.iter().flat_map(|&v| i64::from(v).to_le_bytes()).collect(),
                )
            })
            .collect();
        let internal = |e: safetensors::SafeTensorError| RunError::new(None, format!("internal error: {e}"));
        let mut views = Vec::new();
        for (name, data) in &bytes {
            views.push((
                *name,
                TensorView::new(Dtype::I64, shape.clone(), data).map_err(internal)?,
            ));
        }
        let file = safetensors::serialize(views, None).map_err(internal)?;
        TensorFile::from_bytes(Path::new(TOKENIZED), file)
    }
}

/// `max_seq_length` of the `sentence_bert_config.json` beside `tokenizer`, if there is one.
fn max_seq_length(tokenizer: &Path) -> Result<Option<usize>, RunError> {
    let config: PathBuf = tokenizer.with_file_name("sentence_bert_config.json");
    let Ok(text) = std::fs::read_to_string(&config) else {
        return Ok(None);
    };
    let bad = || {
        RunError::new(
            None,
            format!("`{}` has no whole `max_seq_length`", config.display()),
        )
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|_| bad())?;
    match json.get("max_seq_length") {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n >= 2)
            .map(Some)
            .ok_or_else(bad),
    }
}
