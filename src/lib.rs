//! attnc: a compiler for `.attn`, a small tensor language for multi-head attention.
//!
//! The pipeline is the architecture, one module per stage, data flowing one way:
//! source → [`lexer`] → [`parser`] ([`ast`]) → [`check`] ([`ir`], sizes from [`dims`],
//! shape rules from [`shape`]) → [`opt`] (e-graph) → [`lower`] ([`kernel`] plan) →
//! [`codegen`] (Cranelift) → [`runtime`] (the JIT's executables, or the reference
//! interpreter straight from the IR). Stages never print; they return values and
//! [`diagnostic::Diagnostic`]s, which [`render`] turns into text or JSON for the CLI and
//! the [`repl`].

pub mod source;
pub mod diagnostic;
pub mod lexer;
pub mod ast;
pub mod parser;
pub mod dims;
pub mod hash;
pub mod shape;
pub mod size;
pub mod ops;
pub mod ir;
pub mod check;
pub mod opt;
pub mod lower;
pub mod kernel;
pub mod codegen;
pub mod side_by_side;
pub mod runtime;
pub mod plot;
pub mod lsp;
pub mod suggest;
pub mod driver;
pub mod render;
pub mod repl;
#[cfg(feature = "python")]
mod python;
