//! The program as a Graphviz graph (`attnc ir --format dot`).
//!
//! One node per op, labelled as the text form prints it (`%17 = transpose(1, 2)`, the same
//! value numbers) with its symbolic shape, and strides where it is not row-major. The ops
//! the optimizer fuses several source ops into are filled, so a reader sees at a glance
//! what became one kernel; a `for` is a cluster around its body. Like the text form, the
//! graph depends only on the program.

use super::{Op, Program, ValueId};
use crate::hash::HashMap;
use std::fmt::Write as _;

/// The fill of a fused op's node.
const FUSED_FILL: &str = "#ffd8a8";
/// The fill of a param, input or literal: where values come from.
const LEAF_FILL: &str = "#e7f5ff";

impl Program {
    /// The program as a `digraph` in the DOT language.
    pub fn to_dot(&self) -> String {
        let mut g = Graph {
            prog: self,
            names: HashMap::default(),
            out: String::new(),
            edges: String::new(),
        };
        g.out.push_str("digraph program {\n");
        g.out.push_str("  node [shape=box, fontname=\"monospace\"];\n");
        g.nodes(&self.body, 1);
        for o in &self.outputs {
            let v = g.name(o.value);
            let _ = writeln!(
                g.out,
                "  \"out_{0}\" [label=\"output {0}\", shape=oval];",
                escape(&o.name)
            );
            let _ = writeln!(g.edges, "  n{v} -> \"out_{}\";", escape(&o.name));
        }
        g.out.push_str(&g.edges);
        g.out.push_str("}\n");
        g.out
    }
}

/// Whether the optimizer made `op` out of several source ops.
fn is_fused(op: &Op) -> bool {
    matches!(
        op,
        Op::Gemm { .. } | Op::MaskedSoftmax { .. } | Op::Attention { .. } | Op::ScoredAttention { .. }
    )
}

struct Graph<'a> {
    prog: &'a Program,
    /// Value numbers in first-mention order, as the text form numbers them.
    names: HashMap<ValueId, usize>,
    out: String,
    /// Edges go after every node, so that a node is declared inside its cluster first.
    edges: String,
}

impl Graph<'_> {
    fn name(&mut self, id: ValueId) -> usize {
        let next = self.names.len();
        *self.names.entry(id).or_insert(next)
    }

    fn nodes(&mut self, ids: &[ValueId], depth: usize) {
        for &id in ids {
            self.node(id, depth);
        }
    }

    fn node(&mut self, id: ValueId, depth: usize) {
        let node = &self.prog.nodes[id];
        let indent = "  ".repeat(depth);
        let args: Vec<usize> = node.args.iter().map(|&a| self.name(a)).collect();
        let n = self.name(id);
        for (i, a) in args.iter().enumerate() {
            let label = match args.len() > 1 {
                true => format!(" [label=\"{i}\"]"),
                false => String::new(),
            };
            let _ = writeln!(self.edges, "  n{a} -> n{n}{label};");
        }
        if let Op::For { body, result, .. } = &node.op {
            let header = escape(&self.prog.for_header(id));
            let _ = writeln!(self.out, "{indent}subgraph cluster_{n} {{");
            let _ = writeln!(self.out, "{indent}  label=\"%{n} = {header}\";");
            let _ = writeln!(self.out, "{indent}  style=rounded;");
            self.nodes(body, depth + 1);
            let _ = writeln!(self.out, "{indent}}}");
            let r = self.name(*result);
            let _ = writeln!(
                self.out,
                "{indent}n{n} [label=\"%{n} = {header}\", shape=hexagon];"
            );
            let _ = writeln!(self.edges, "  n{r} -> n{n} [label=\"yield\", style=dashed];");
            return;
        }
        let (op, attrs) = self.prog.op_parts(id);
        let ty = self.prog.type_text(self.prog.tensor_type(id));
        let call = match attrs.is_empty() {
            true => format!("%{n} = {op}"),
            false => format!("%{n} = {op}({})", attrs.join(", ")),
        };
        let style = if is_fused(&node.op) {
            format!(", style=filled, fillcolor=\"{FUSED_FILL}\", peripheries=2")
        } else if node.args.is_empty() {
            format!(", style=filled, fillcolor=\"{LEAF_FILL}\"")
        } else {
            String::new()
        };
        let fused = match is_fused(&node.op) {
            true => "\\nfused",
            false => "",
        };
        let _ = writeln!(
            self.out,
            "{indent}n{n} [label=\"{}\\n{}{fused}\"{style}];",
            escape(&call),
            escape(&ty)
        );
    }
}

/// `s` inside a double-quoted DOT string.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
