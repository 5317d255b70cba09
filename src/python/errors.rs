//! Errors across the boundary: a program's diagnostics become `CompileError`, a run-time
//! error `RunError`, and a Rust panic a `RunError` too, never an abort.

use super::Source;
use crate::diagnostic::Diagnostic as Diag;
use crate::render;
use crate::runtime;
use crate::source::line_col;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

create_exception!(
    attnc,
    CompileError,
    PyException,
    "A program with errors: `.diagnostics` lists them, `str()` renders them as `attnc check` does."
);
create_exception!(
    attnc,
    RunError,
    PyException,
    "A run-time error: `.code` is its code (`E0301`) or None, `str()` the command line's message."
);

/// One diagnostic of a `CompileError`.
#[pyclass(module = "attnc", frozen, get_all)]
pub struct Diagnostic {
    /// `E0201`.
    code: String,
    /// `error` or `warning`.
    severity: String,
    message: String,
    /// 1-based, of the start of the primary span.
    line: usize,
    /// 1-based, in characters.
    column: usize,
    /// The first hint, if any.
    hint: Option<String>,
}

#[pymethods]
impl Diagnostic {
    fn __repr__(&self) -> String {
        format!(
            "<{}[{}] {}:{}: {}>",
            self.severity, self.code, self.line, self.column, self.message
        )
    }
}

/// `CompileError` with the rendered text as its message and one `Diagnostic` per entry.
pub fn compile_error(source: &Source, diags: &[Diag]) -> PyErr {
    let text = render::diagnostics_text(&source.name, &source.text, diags);
    let err = CompileError::new_err(text.trim_end().to_string());
    Python::attach(|py| {
        let list: Vec<Diagnostic> = diags
            .iter()
            .map(|d| {
                let (line, column) = line_col(&source.text, d.span.start);
                Diagnostic {
                    code: d.code.to_string(),
                    severity: format!("{:?}", d.severity).to_lowercase(),
                    message: d.message.clone(),
                    line,
                    column,
                    hint: d.hints.first().cloned(),
                }
            })
            .collect();
        if let Err(e) = err.value(py).setattr("diagnostics", list) {
            return e;
        }
        err
    })
}

/// `RunError` with the command line's message, and `.code`.
pub fn run_error(e: &runtime::RunError) -> PyErr {
    let err = RunError::new_err(e.to_string());
    Python::attach(|py| {
        let code = e.code.map(|c| c.to_string());
        match err.value(py).setattr("code", code) {
            Ok(()) => err,
            Err(e) => e,
        }
    })
}

/// Runs `f`, a panic included, as a `RunError`: a bug of attnc must not abort the caller's
/// interpreter, nor surface as a `BaseException` that `except Exception` misses.
pub fn guard<T>(f: impl FnOnce() -> Result<T, runtime::RunError>) -> PyResult<T> {
    catch(f).map_err(|e| run_error(&e))
}

/// Runs `f` with a panic caught as an internal [`runtime::RunError`]; needs no GIL, so it
/// runs where the GIL is released.
pub fn catch<T>(f: impl FnOnce() -> Result<T, runtime::RunError>) -> Result<T, runtime::RunError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string());
        Err(runtime::RunError::new(None, format!("internal error: {what}"))
            .with_hint("report this with the program and its inputs' shapes"))
    })
}
