//! What each name stood for where it was bound and where it was used, for the language
//! server's hover. Recorded as text while checking, since the nodes and dims a function
//! checked alone builds are dropped again (see [`Checker::check_uncalled_fns`]).

use super::{Checker, Value};
use crate::dims::Poly;
use crate::source::Span;

/// A name's span and what it stood for there: a value's type (see
/// [`crate::render::tensor_text`]) or a dim's expression. A function's names have one per
/// call, or one with its declared shapes when it is never called.
#[derive(Clone, Debug, PartialEq)]
pub struct NameType {
    pub span: Span,
    pub text: String,
}

impl Checker {
    /// Record from now on what each name stands for (see [`Checker::take_names`]); the
    /// compiler does not need it, the language server does.
    pub fn record_names(&mut self) {
        self.names.get_or_insert_with(Vec::new);
    }

    /// The names recorded so far, in the order they were checked.
    pub fn take_names(&mut self) -> Vec<NameType> {
        self.names.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Note that the name at `span` stands for `value`, when recording.
    pub(super) fn note_value(&mut self, span: Span, value: &Value) {
        if self.names.is_none() {
            return;
        }
        if let Some(text) = self.hover_text(value) {
            self.note(span, text);
        }
    }

    /// Note that the name at `span` stands for the dim expression `p`, when recording.
    pub(super) fn note_dim(&mut self, span: Span, p: &Poly) {
        if self.names.is_some() {
            let value = self
                .prog
                .dims
                .value(p)
                .map_or(String::new(), |v| format!("  (= {v})"));
            let text = format!("dim {}{value}", self.dim_text(p));
            self.note(span, text);
        }
    }

    /// Note a text for the name at `span`, when recording. A function called twice notes
    /// its names twice; the reader drops the repeats.
    pub(super) fn note(&mut self, span: Span, text: String) {
        if let Some(names) = &mut self.names {
            names.push(NameType { span, text });
        }
    }

    fn hover_text(&self, value: &Value) -> Option<String> {
        match value {
            Value::Tensor(id) => Some(crate::render::tensor_text(&self.prog, self.ty(*id))),
            Value::Seq(id) => {
                let node = &self.prog.nodes[*id];
                let crate::ir::Type::Seq { item, len } = &node.ty else {
                    return None;
                };
                let item = crate::render::tensor_text(&self.prog, item);
                Some(format!("{} items of {item}", self.dim_text(len)))
            }
            Value::Tuple(parts) => {
                let texts: Option<Vec<String>> = parts.iter().map(|p| self.hover_text(p)).collect();
                Some(format!("({})", texts?.join(", ")))
            }
            Value::Range(a, b) => Some(format!("range {}..{}", self.dim_text(a), self.dim_text(b))),
            Value::Error => None,
        }
    }
}
