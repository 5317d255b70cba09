//! How the REPL shows values and dims: one line per tensor, with its layout and sizes.

use crate::check::{DimOverride, Value};
use crate::dims::DimKind;
use crate::ir::{DType, Program, TensorType, Type};
use crate::render;
use std::fmt::Write as _;

/// A value as the REPL shows it, one line per tensor: `[B, N, D]  contiguous`; the parts
/// of a tuple as `(0) ..`, `(1) ..`; nothing for an error (its diagnostic said it all).
pub(super) fn value_lines(prog: &Program, value: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    push_value_lines(prog, value, "", &mut lines);
    lines
}

fn push_value_lines(prog: &Program, value: &Value, path: &str, lines: &mut Vec<String>) {
    let line = match value {
        Value::Tensor(id) => tensor_line(prog, prog.tensor_type(*id)),
        Value::Seq(id) => match &prog.node(*id).ty {
            Type::Seq { item, len } => {
                format!("seq[{}] of {}", prog.dims.display(len), tensor_line(prog, item))
            }
            Type::Tensor(t) => tensor_line(prog, t),
        },
        Value::Range(a, b) => format!("range {} : {}", prog.dims.display(a), prog.dims.display(b)),
        Value::Tuple(parts) if !parts.is_empty() => {
            for (i, part) in parts.iter().enumerate() {
                let path = match path {
                    "" => i.to_string(),
                    outer => format!("{outer}.{i}"),
                };
                push_value_lines(prog, part, &path, lines);
            }
            return;
        }
        Value::Tuple(_) => "()".to_string(),
        Value::Error => return,
    };
    match path {
        "" => lines.push(line),
        path => lines.push(format!("({path}) {line}")),
    }
}

/// `[B, H, N, Dk]  strides [N * D, Dk, D, 1]  non-contiguous`, or `[B, N, D]  contiguous`,
/// or `[]  scalar`; then `  bool` for a mask and `  = [2, 7, 512]` when every dim has a
/// value.
pub(super) fn tensor_line(prog: &Program, t: &TensorType) -> String {
    let mut line = prog.shape_text(&t.shape);
    if t.rank() == 0 {
        line.push_str("  scalar");
    } else if t.is_contiguous(&prog.dims) {
        line.push_str("  contiguous");
    } else if t.varies() {
        let _ = write!(line, "  {}", prog.layout_text(t));
    } else {
        let _ = write!(line, "  strides {}  non-contiguous", prog.strides_text(t));
    }
    if t.dtype != DType::F32 {
        line.push_str("  ");
        line.push_str(t.dtype.name());
    }
    if let Some(sizes) = render::sizes(prog, &t.shape).filter(|s| !s.is_empty()) {
        let _ = write!(line, "  = {sizes:?}");
    }
    line
}

/// `:dims`: every dim as declared, with its kind and value, then the facts, the asserts
/// left for run time and the `--dim`s that apply to no dim.
pub(super) fn dims_text(prog: &Program, overrides: &[DimOverride]) -> String {
    let dims = &prog.dims;
    let mut rows: Vec<(String, String)> = Vec::new();
    for (s, info) in dims.iter() {
        let value = dims.value(&dims.use_of(s));
        let (decl, note) = match &info.kind {
            DimKind::Free { value: None } => (format!("dim {}", info.name), "free".to_string()),
            DimKind::Free { value: Some(v) } => {
                (format!("dim {}", info.name), format!("free, {v} from --dim"))
            }
            DimKind::Const(v) => (format!("dim {} = {v}", info.name), "constant".to_string()),
            DimKind::Derived(_) => {
                let decl = format!("dim {} = {}", info.name, dims.display_definition(s));
                let note = value.map_or("derived".to_string(), |v| format!("derived, = {v}"));
                (decl, note)
            }
            DimKind::Loop { .. } => continue,
        };
        rows.push((decl, note));
    }
    for (a, b) in dims.facts() {
        let fact = format!("{} % {} == 0", dims.display(a), dims.display(b));
        rows.push((format!("fact {fact}"), "used by proofs".to_string()));
    }
    for a in &prog.asserts {
        rows.push((format!("assert {}", a.text), "checked at run time".to_string()));
    }
    for o in overrides {
        let why = match dims.lookup(&o.name).map(|s| &dims.info(s).kind) {
            None | Some(DimKind::Loop { .. }) => "no dim has this name yet",
            Some(DimKind::Derived(_)) => "a derived dim takes no value",
            Some(_) => continue,
        };
        rows.push((format!("--dim {}={}", o.name, o.value), format!("unused: {why}")));
    }
    if rows.is_empty() {
        return "no dims yet\n".to_string();
    }
    let width = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    rows.iter()
        .map(|(decl, note)| format!("{}  # {note}\n", crate::render::pad(decl, width)))
        .collect()
}
