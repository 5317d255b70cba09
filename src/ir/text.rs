//! The deterministic text form of the typed IR (`attnc ir --stage typed`).
//!
//! Values are renumbered `%0, %1, ..` in the order they are printed, so the text depends
//! only on the program, never on how the checker happened to allocate nodes. Strides are
//! printed only where a value is not row-major.

use super::{Attr, DType, Op, Program, TensorType, Type, ValueId};
use crate::dims::{DimKind, Poly};
use crate::hash::HashMap;
use std::fmt::Write as _;

impl Program {
    /// The program as text: dims, run-time asserts, every node, the outputs.
    pub fn to_text(&self) -> String {
        let mut p = Printer {
            prog: self,
            names: HashMap::default(),
            out: String::new(),
        };
        p.dims();
        p.nodes(&self.body, 0);
        for o in &self.outputs {
            let v = p.name(o.value);
            let kind = if o.state.is_some() { "state" } else { "output" };
            let _ = writeln!(p.out, "{kind} {} = {v}", o.name);
        }
        p.out
    }

    /// A shape as the spec prints it: `[B, H, N, Dk]`.
    pub fn shape_text(&self, shape: &[Poly]) -> String {
        let parts: Vec<String> = shape.iter().map(|d| self.dims.display(d)).collect();
        format!("[{}]", parts.join(", "))
    }

    /// A value's strides: `[N * D, 1, D]`, or each list the sizes may give it
    /// (`[4, 4 * B, 1] or [4 * N, 4, 1]`), or the general one and `or any at some sizes`
    /// where they are too many to follow.
    pub fn strides_text(&self, t: &TensorType) -> String {
        match t.layouts() {
            Some(all) => {
                let all: Vec<String> = all.iter().map(|s| self.shape_text(s)).collect();
                all.join(" or ")
            }
            None => format!("{} or any at some sizes", self.shape_text(&t.strides)),
        }
    }

    /// What is known of a value's layout, in PyTorch's words: `contiguous`,
    /// `non-contiguous, strides [..]`, or where the sizes decide it, the general layout
    /// then what the others are (`contiguous, or any strides at some sizes`).
    pub fn layout_text(&self, t: &TensorType) -> String {
        if t.is_contiguous(&self.dims) {
            return "contiguous".to_string();
        }
        let general = match t.is_row_major(&t.strides, &self.dims) {
            true => "contiguous".to_string(),
            false => format!("non-contiguous, strides {}", self.shape_text(&t.strides)),
        };
        match t.layouts() {
            None => format!("{general}, or any strides at some sizes"),
            Some(all) if all.len() > 1 => {
                let others: Vec<String> = all[1..].iter().map(|s| self.shape_text(s)).collect();
                format!("{general}, or strides {} at some sizes", others.join(" or "))
            }
            Some(_) => general,
        }
    }

    /// A tensor type: its shape, then its strides where it is not row-major (each list it
    /// may have where sizes give it several), and `bool` for masks.
    pub fn type_text(&self, t: &TensorType) -> String {
        let mut s = self.shape_text(&t.shape);
        if !t.is_contiguous(&self.dims) {
            let _ = write!(s, " strides {}", self.strides_text(t));
        }
        if t.dtype != DType::F32 {
            s.push(' ');
            s.push_str(t.dtype.name());
        }
        s
    }
}

struct Printer<'a> {
    prog: &'a Program,
    names: HashMap<ValueId, usize>,
    out: String,
}

impl Printer<'_> {
    fn dims(&mut self) {
        let dims = &self.prog.dims;
        for (s, d) in dims.iter() {
            let line = match &d.kind {
                DimKind::Free { .. } => format!("dim {}", d.name),
                DimKind::Const(v) => format!("dim {} = {v}", d.name),
                DimKind::Derived(_) => format!("dim {} = {}", d.name, dims.display_definition(s)),
                DimKind::Loop { .. } => continue,
            };
            let _ = writeln!(self.out, "{line}");
        }
        for a in &self.prog.asserts {
            let _ = writeln!(self.out, "assert {}", a.text);
        }
    }

    fn name(&mut self, id: ValueId) -> String {
        let next = self.names.len();
        format!("%{}", self.names.entry(id).or_insert(next))
    }

    fn nodes(&mut self, ids: &[ValueId], depth: usize) {
        for &id in ids {
            self.node(id, depth);
        }
    }

    fn node(&mut self, id: ValueId, depth: usize) {
        let node = &self.prog.nodes[id];
        let indent = "  ".repeat(depth);
        let args: Vec<String> = node.args.iter().map(|&a| self.name(a)).collect();
        let name = self.name(id);
        if let Op::For { body, result, .. } = &node.op {
            let header = self.prog.for_header(id);
            let _ = writeln!(self.out, "{indent}{name} = {header} {{");
            self.nodes(body, depth + 1);
            let result = self.name(*result);
            let _ = writeln!(self.out, "{indent}  yield {result}");
            let _ = writeln!(self.out, "{indent}}}");
            return;
        }
        let (op, attrs) = self.prog.op_parts(id);
        let all: Vec<String> = args.into_iter().chain(attrs).collect();
        let ty = self.prog.type_text(self.prog.tensor_type(id));
        let _ = writeln!(self.out, "{indent}{name} = {op}({}) : {ty}", all.join(", "));
    }
}

impl Program {
    /// `for h in 0..H : seq[H] [B, N, Dk]`: a loop node's variable, range and type.
    pub(super) fn for_header(&self, id: ValueId) -> String {
        let node = &self.nodes[id];
        let (Op::For { var, start, end, .. }, Type::Seq { item, len }) = (&node.op, &node.ty) else {
            unreachable!("only a for is a sequence")
        };
        let d = |p: &Poly| self.dims.display(p);
        let var = &self.dims.info(*var).name;
        format!(
            "for {var} in {}..{} : seq[{}] {}",
            d(start),
            d(end),
            d(len),
            self.type_text(item)
        )
    }

    /// The op name of a node that is not a `for`, and its attributes as text: what
    /// follows its arguments in `%3 = transpose(%2, 1, 2)`. A param shows its name and key,
    /// an input its name (a state input as `state`).
    pub(super) fn op_parts(&self, id: ValueId) -> (&'static str, Vec<String>) {
        let node = &self.nodes[id];
        match &node.op {
            Op::Param(i) => {
                let p = &self.params[*i];
                return ("param", vec![p.name.clone(), format!("{:?}", p.key)]);
            }
            Op::Input(i) if self.inputs[*i].state => return ("state", vec![self.inputs[*i].name.clone()]),
            Op::Input(i) => return ("input", vec![self.inputs[*i].name.clone()]),
            _ => {}
        }
        let operands: Vec<&TensorType> = node.args.iter().map(|&a| self.tensor_type(a)).collect();
        let attrs = node.op.attrs(&operands, &self.tensor_type(id).shape);
        (
            node.op.name(),
            attrs.iter().filter_map(|a| self.attr_text(a)).collect(),
        )
    }

    /// An attribute as text; `None` for one the text leaves out.
    fn attr_text(&self, attr: &Attr) -> Option<String> {
        let d = |p: &Poly| self.dims.display(p);
        Some(match attr {
            Attr::Int(i) => i.to_string(),
            Attr::Float(x) => format!("{x:?}"),
            Attr::Bool(b) => b.to_string(),
            Attr::Dim(p) => d(p),
            Attr::Shape(s) => self.shape_text(s),
            Attr::Axes(axes) => {
                let axes: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
                format!("[{}]", axes.join(", "))
            }
            Attr::Range(start, end) => format!("{}..{}", d(start), d(end)),
            Attr::Ranges(ranges) => {
                let ranges: Vec<String> = ranges
                    .iter()
                    .map(|(s, e)| format!("{}..{}", d(s), d(e)))
                    .collect();
                format!("[{}]", ranges.join(", "))
            }
            Attr::Order(axes) => {
                let axes: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
                axes.join(", ")
            }
            Attr::Flag(word, true) => word.to_string(),
            Attr::Flag(_, false) | Attr::Implied(_) => return None,
            Attr::Named(name, value) => format!("{name}={}", self.attr_text(value)?),
        })
    }
}
