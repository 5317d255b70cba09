//! Rendering for people and tools: diagnostics as rustc-style text or JSON, and the
//! binding table of `attnc check`. Only the CLI and the REPL call this module.

use crate::diagnostic::{Diagnostic, Severity};
use crate::ir::{BindingKind, Program};
use crate::source::line_col;
use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;
use serde_json::{json, Value};

/// Diagnostics as text: `error[E0203]: message`, the source line with a caret, hints.
pub fn diagnostics_text(file_name: &str, src: &str, diags: &[Diagnostic]) -> String {
    let file = SimpleFile::new(file_name, src);
    let config = term::Config::default();
    let mut out = String::new();
    for d in diags {
        let rendered = term::emit_into_string(&config, &file, &to_codespan(d, src.len()));
        match rendered {
            Ok(text) => out.push_str(&text),
            // Only a span outside the file gets here; show the message without a snippet.
            Err(_) => out.push_str(&format!("{}[{}]: {}\n", d.severity.as_str(), d.code, d.message)),
        }
    }
    out
}

fn to_codespan(d: &Diagnostic, len: usize) -> cs::Diagnostic<()> {
    let clamp = |r: std::ops::Range<usize>| r.start.min(len)..r.end.min(len);
    let mut labels = vec![cs::Label::primary((), clamp(d.span.range()))];
    labels.extend(
        d.labels
            .iter()
            .map(|l| cs::Label::secondary((), clamp(l.span.range())).with_message(&l.message)),
    );
    let severity = match d.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
    };
    cs::Diagnostic::new(severity)
        .with_code(d.code.to_string())
        .with_message(&d.message)
        .with_labels(labels)
        .with_notes(d.hints.iter().map(|h| format!("hint: {h}")).collect())
}

/// One diagnostic as the spec's JSON object.
pub fn diagnostic_json(src: &str, d: &Diagnostic) -> Value {
    let (line, column) = line_col(src, d.span.start);
    json!({
        "code": d.code.to_string(),
        "severity": d.severity.as_str(),
        "message": d.message,
        "line": line,
        "column": column,
    })
}

/// The whole `check --format json` object.
pub fn check_json(src: &str, diags: &[Diagnostic], prog: &Program) -> Value {
    let ok = !diags.iter().any(|d| d.severity == Severity::Error);
    let bindings: Vec<Value> = prog
        .bindings
        .iter()
        .map(|b| {
            let t = prog.tensor_type(b.value);
            let mut obj = json!({
                "name": b.name,
                "shape": prog.shape_text(&t.shape),
                "contiguous": t.is_contiguous(&prog.dims),
            });
            if let Some(sizes) = sizes(prog, &t.shape) {
                obj["sizes"] = json!(sizes);
            }
            obj
        })
        .collect();
    json!({
        "ok": ok,
        "diagnostics": diags.iter().map(|d| diagnostic_json(src, d)).collect::<Vec<_>>(),
        "bindings": bindings,
    })
}

/// Concrete sizes of a shape, when every dim has a value from its declaration or `--dim`.
pub fn sizes(prog: &Program, shape: &[crate::dims::Poly]) -> Option<Vec<i64>> {
    shape.iter().map(|d| prog.dims.value(d)).collect()
}

/// The binding table of `attnc check`: kind, name, shape, layout and sizes, aligned.
pub fn bindings_text(prog: &Program) -> String {
    let rows: Vec<[String; 5]> = prog
        .bindings
        .iter()
        .map(|b| {
            let t = prog.tensor_type(b.value);
            let layout = match t.is_contiguous(&prog.dims) {
                true => "contiguous".to_string(),
                false => format!("non-contiguous, strides {}", prog.shape_text(&t.strides)),
            };
            let sizes = sizes(prog, &t.shape).map_or(String::new(), |s| format!("{s:?}"));
            [
                kind_name(b.kind).to_string(),
                b.name.clone(),
                prog.shape_text(&t.shape),
                layout,
                sizes,
            ]
        })
        .collect();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2), width(3)];
    let mut out = String::new();
    for r in &rows {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn kind_name(k: BindingKind) -> &'static str {
    match k {
        BindingKind::Param => "param",
        BindingKind::Input => "input",
        BindingKind::Let => "let",
        BindingKind::Output => "output",
    }
}
