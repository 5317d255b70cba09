//! Diagnostics: the one type every stage reports problems with.
//!
//! Stages never print. They return `Vec<Diagnostic>` next to whatever they managed to build,
//! and the CLI or the REPL renders them (see `render`).

use crate::source::Span;
use std::fmt;

/// Every error code of the language specification (section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// A character or token the lexer does not accept: `let x = $`.
    E0001,
    /// A syntax error: `let = 3`.
    E0002,
    /// An unknown name: `let y = nope`.
    E0101,
    /// A name defined twice: `dim B` then `dim B`.
    E0102,
    /// Shapes that must agree do not: `[B, N, D] @ [B, N, D]`.
    E0201,
    /// `view`/`reshape` with a different element count, two `-1`s or an unsolvable `-1`.
    E0202,
    /// `view` of a tensor whose strides do not allow it.
    E0203,
    /// An axis out of range: `x.transpose(0, 7)` on a rank-3 tensor.
    E0204,
    /// A division of dims that cannot be proved exact: `dim Dk = N / H` with `N` free.
    E0205,
    /// A wrong number of arguments, or a `permute` that is not a permutation.
    E0206,
    /// A declared shape that differs from the inferred one.
    E0207,
    /// A value of the wrong kind, a non-boolean mask, a bad destructuring or an index out of range.
    E0208,
    /// An `assert` that is false for the constant values (or, at run time, the bound ones).
    E0209,
    /// An in-place op (`index_copy_`) on a value that is not a `state` or a view of one made
    /// by indexing, or a state written inside a `for` that makes a sequence.
    E0210,
    /// A view of a state, taken before an in-place write to it, through an op that may have
    /// copied it (`reshape`, `contiguous`), read after the write.
    E0211,
    /// Run time: an input's shape disagrees with its declaration or another input.
    E0301,
    /// Run time: a weight or input missing from its file.
    E0302,
    /// Run time: a weight whose shape or dtype does not fit its `param`.
    E0303,
    /// A free dim without a value where one is needed.
    E0304,
    /// Run time: the program's tensors do not fit (a size overflows 64 bits, or the memory
    /// the plan needs exceeds `--max-memory`).
    E0305,
    /// Run time: a value of an input that does not fit: an id outside its table, an int64
    /// beyond the integers float32 holds exactly, more tokens than the model has positions.
    E0306,
    /// Run time: a program the native backend does not run (a gather by ids the program
    /// computes, or inside a `for` over heads); the interpreter runs it.
    E0307,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A secondary location with a message, such as the call that inlined a failing body.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One problem found in a program.
///
/// `message` is a lower-case phrase without a final period; `hints` start with a verb.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    pub span: Span,
    pub labels: Vec<Label>,
    pub hints: Vec<String>,
}

impl Diagnostic {
    pub fn error(code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            span,
            labels: Vec::new(),
            hints: Vec::new(),
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hints.push(hint.into());
        self
    }

    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            message: message.into(),
        });
        self
    }
}
