//! The front end as one call: source text to a checked program and its diagnostics.

use crate::check::{self, DimOverride};
use crate::diagnostic::{Diagnostic, Severity};
use crate::ir::Program;
use crate::parser;

/// A checked program with everything found wrong with it.
pub struct Checked {
    pub program: Program,
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.severity == Severity::Error)
    }
}

/// Parse and check `src`. A program with syntax errors is not checked (its errors would
/// mostly echo the syntax errors). `Err` is a usage error: an override naming an unknown or
/// derived dim.
pub fn check_source(src: &str, overrides: &[DimOverride]) -> Result<Checked, String> {
    let (ast, parse_diags) = parser::parse(src);
    if !parse_diags.is_empty() {
        return Ok(Checked {
            program: Program::default(),
            diagnostics: parse_diags,
        });
    }
    if let Some(err) = check::dim_override_error(&ast, overrides) {
        return Err(err);
    }
    let (program, diagnostics) = check::check(&ast, overrides);
    Ok(Checked { program, diagnostics })
}
