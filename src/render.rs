//! Rendering for people and tools: diagnostics as rustc-style text or JSON, and the
//! binding table of `attnc check`. Only the CLI and the REPL call this module.

use crate::diagnostic::{Diagnostic, Severity};
use crate::ir::{BindingKind, DType, Program};
use crate::source::{line_col, Span};
use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::{Files, SimpleFile, SimpleFiles};
use codespan_reporting::term;
use serde_json::{json, Value};
use std::ops::Range;

/// Diagnostics as text: `error[E0203]: message`, the source line with a caret, hints.
pub fn diagnostics_text(file_name: &str, src: &str, diags: &[Diagnostic]) -> String {
    let file = SimpleFile::new(file_name, src);
    let clamp = |s: Span| ((), s.start.min(src.len())..s.end.min(src.len()));
    diags.iter().map(|d| emit(&file, d, clamp)).collect()
}

/// Diagnostics as text over one text made of named parts, the way the REPL keeps a
/// session: every entry and loaded file is a part of one growing text, so that spans of
/// different entries never collide. `parts` are `(name, start)` in increasing order of
/// start, each running to the next one's start (the last to the end of `src`). Each span
/// is shown in the part it starts in, named after it, with lines and columns counted from
/// that part's start; otherwise exactly as [`diagnostics_text`] shows it.
pub fn diagnostics_text_parts(src: &str, parts: &[(String, usize)], diags: &[Diagnostic]) -> String {
    let mut files = SimpleFiles::new();
    let mut starts = Vec::new();
    for (i, (name, start)) in parts.iter().enumerate() {
        let end = parts.get(i + 1).map_or(src.len(), |p| p.1);
        let text = src.get(*start..end).unwrap_or("");
        starts.push(*start);
        files.add(name.as_str(), text);
    }
    if starts.is_empty() {
        return diagnostics_text("", src, diags);
    }
    let locate = |s: Span| {
        let part = starts
            .partition_point(|&start| start <= s.start)
            .saturating_sub(1);
        let len = files.get(part).map_or(0, |f| f.source().len());
        let local = |pos: usize| pos.saturating_sub(starts[part]).min(len);
        (part, local(s.start)..local(s.end.max(s.start)))
    };
    diags.iter().map(|d| emit(&files, d, locate)).collect()
}

/// One diagnostic rendered as rustc does; `locate` finds the file and range of a span.
fn emit<'f, F: Files<'f>>(
    files: &'f F,
    d: &Diagnostic,
    locate: impl Fn(Span) -> (F::FileId, Range<usize>),
) -> String {
    let config = term::Config::default();
    match term::emit_into_string(&config, files, &to_codespan(d, locate)) {
        Ok(text) => text,
        // Only a span outside the file gets here; show the message without a snippet.
        Err(_) => format!("{}[{}]: {}\n", d.severity.as_str(), d.code, d.message),
    }
}

fn to_codespan<Id>(d: &Diagnostic, locate: impl Fn(Span) -> (Id, Range<usize>)) -> cs::Diagnostic<Id> {
    let (file, range) = locate(d.span);
    let mut labels = vec![cs::Label::primary(file, range)];
    labels.extend(d.labels.iter().map(|l| {
        let (file, range) = locate(l.span);
        cs::Label::secondary(file, range).with_message(&l.message)
    }));
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
fn diagnostic_json(src: &str, d: &Diagnostic) -> Value {
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

/// What a hover shows of a tensor: `[B, H, N, Dk]  non-contiguous, strides [..]`, and a
/// second line with the sizes where every dim has a value.
pub fn tensor_text(prog: &Program, t: &crate::ir::TensorType) -> String {
    let layout = prog.layout_text(t);
    let mut text = format!("{}  {layout}", shape_and_dtype(prog, t));
    if let Some(sizes) = sizes(prog, &t.shape) {
        text.push_str(&format!("\nsizes {sizes:?}"));
    }
    text
}

/// `[B, N] int64`: the shape, and the dtype beside it unless it is float32 (PyTorch's
/// default, which it does not print either).
fn shape_and_dtype(prog: &Program, t: &crate::ir::TensorType) -> String {
    match t.dtype {
        DType::F32 => prog.shape_text(&t.shape),
        other => format!("{} {}", prog.shape_text(&t.shape), other.name()),
    }
}

/// The binding table of `attnc check`: kind, name, shape, layout and sizes, aligned.
pub fn bindings_text(prog: &Program) -> String {
    let rows: Vec<[String; 5]> = prog
        .bindings
        .iter()
        .map(|b| {
            let t = prog.tensor_type(b.value);
            let layout = prog.layout_text(t);
            let sizes = sizes(prog, &t.shape).map_or(String::new(), |s| format!("{s:?}"));
            [
                kind_name(b.kind).to_string(),
                b.name.clone(),
                shape_and_dtype(prog, t),
                layout,
                sizes,
            ]
        })
        .collect();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2), width(3)];
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = (0..4).map(|i| pad(&r[i], widths[i])).collect();
        let line = format!("{}  {}  {}  {}  {}", cells[0], cells[1], cells[2], cells[3], r[4]);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `text` padded with spaces to `width` characters. `format!`'s own width (`{:w$}`) panics
/// past 65,535, which a long name or a high-rank shape reaches.
pub fn pad(text: &str, width: usize) -> String {
    let fill = width.saturating_sub(text.chars().count());
    let mut s = String::with_capacity(text.len() + fill);
    s.push_str(text);
    s.extend(std::iter::repeat_n(' ', fill));
    s
}

/// The word `attnc check` prints for a binding's kind.
pub fn kind_name(k: BindingKind) -> &'static str {
    match k {
        BindingKind::Param => "param",
        BindingKind::Input => "input",
        BindingKind::State => "state",
        BindingKind::Let => "let",
        BindingKind::Output => "output",
    }
}
