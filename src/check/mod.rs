//! The shape checker: AST in, shape-typed IR out, every shape equation proved.
//!
//! It walks the program once, in source order, building IR nodes as it goes: functions are
//! inlined at each call with their shape variables unified against the arguments, `for`
//! bodies become loop regions. It never stops at the first error: a failed expression
//! yields [`Value::Error`], which later checks accept silently, so only independent errors
//! are reported. Op shape rules live in `ops`, stride rules in `layout`, dim expressions in
//! `dim_expr`, declarations and statements in `items`.

mod apply;
mod args;
mod attention;
mod contraction;
mod creation;
mod dim_expr;
mod dtypes;
mod gather;
mod items;
mod join;
mod layers;
mod movement;
mod names;
pub(crate) mod layout;
mod ops;
mod rules;
mod state;
mod views;

use crate::ast;
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::hash::HashMap;
use crate::ir::{Node, Op, Program, TensorType, Type, ValueId};
use crate::source::Span;
use std::rc::Rc;

pub use items::dim_override_error;
pub use names::NameType;

/// The names of the built-in ops (`linear`, `view`, ..), for completion and help.
pub fn op_names() -> impl Iterator<Item = &'static str> {
    crate::ops::signatures().flat_map(|op| std::iter::once(op.name).chain(op.aliases.iter().copied()))
}

/// A value as the checker sees it: IR tensors plus the compile-time-only kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Tensor(ValueId),
    /// The value of a `for`: an [`Op::For`] node.
    Seq(ValueId),
    Tuple(Vec<Value>),
    /// `a : b`, a range of a dim axis.
    Range(Poly, Poly),
    /// Something already reported as an error; accepted everywhere without a new report.
    Error,
}

impl Value {
    fn kind_name(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Seq(_) => "sequence",
            Value::Tuple(_) => "tuple",
            Value::Range(..) => "range",
            Value::Error => "error",
        }
    }
}

/// What a name in scope stands for.
#[derive(Clone, Debug)]
enum Entry {
    Value(Value),
    /// A dim, a loop variable or a function's shape variable, as its normal form.
    Dim(Poly),
    Fn(Rc<ast::FnDecl>),
}

/// One `--dim K=V` given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimOverride {
    pub name: String,
    pub value: i64,
}

/// The checker's state; it lives across REPL entries, so items can be added one at a time.
/// A clone is a scratch copy: the REPL checks an expression in one to show its type without
/// leaving its nodes behind.
#[derive(Clone)]
pub struct Checker {
    prog: Program,
    diags: Vec<Diagnostic>,
    overrides: Vec<DimOverride>,
    /// Lexical scopes, the globals first.
    scopes: Vec<HashMap<String, Entry>>,
    /// Names that may not be declared twice: dims, params, inputs and functions.
    declared: HashMap<String, Span>,
    outputs: HashMap<String, Span>,
    /// Where new nodes are appended: the top-level body or the innermost `for` body.
    blocks: Vec<Vec<ValueId>>,
    /// Calls being inlined, innermost last: (function name, call span).
    calls: Vec<(String, Span)>,
    called: Vec<String>,
    /// What each name stood for, when asked to record it (see [`Checker::record_names`]).
    names: Option<Vec<NameType>>,
    /// The declared states, in order, with the version each name stands for now.
    states: Vec<state::StateInfo>,
    /// Every version of a state (its first, an input node, and each write's result): the
    /// state it is a version of.
    versions: HashMap<ValueId, usize>,
}

/// Check a whole program. `overrides` must name constant or free dims of the program
/// (see [`dim_override_error`]); others are ignored.
pub fn check(ast: &ast::Program, overrides: &[DimOverride]) -> (Program, Vec<Diagnostic>) {
    let mut checker = Checker::new(overrides);
    checker.check_items(&ast.items);
    checker.check_uncalled_fns(&ast.items);
    checker.finish()
}

impl Checker {
    pub fn new(overrides: &[DimOverride]) -> Checker {
        Checker {
            prog: Program::default(),
            diags: Vec::new(),
            overrides: overrides.to_vec(),
            scopes: vec![HashMap::default()],
            declared: HashMap::default(),
            outputs: HashMap::default(),
            blocks: vec![Vec::new()],
            calls: Vec::new(),
            called: Vec::new(),
            names: None,
            states: Vec::new(),
            versions: HashMap::default(),
        }
    }

    /// The program checked so far (its `body` is filled in by [`Checker::finish`] or
    /// [`Checker::snapshot`]).
    pub fn snapshot(&self) -> Program {
        let mut prog = self.prog.clone();
        prog.body = self.blocks[0].clone();
        self.state_outputs(&mut prog);
        mark_mask_inputs(&mut prog);
        prog
    }

    /// Check items in order, adding them to the program.
    pub fn check_items(&mut self, items: &[ast::Item]) {
        for item in items {
            self.item(item);
        }
    }

    /// Check a bare expression at top level and return its value (for the REPL).
    pub fn check_expr(&mut self, e: &ast::Expr) -> Value {
        self.expr(e)
    }

    /// Diagnostics reported since the last call, deduplicated (a function called twice
    /// reports an error in its body once).
    pub fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        let mut out: Vec<Diagnostic> = Vec::new();
        for d in self.diags.drain(..) {
            let seen = out
                .iter()
                .any(|o| o.code == d.code && o.span == d.span && o.message == d.message);
            if !seen {
                out.push(d);
            }
        }
        out
    }

    pub fn finish(mut self) -> (Program, Vec<Diagnostic>) {
        let diags = self.take_diagnostics();
        (self.snapshot(), diags)
    }

    /// The program's dims, for printing shapes.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// The names defined at top level (dims, params, inputs, functions, `let`s), sorted:
    /// what the REPL completes.
    pub fn global_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.scopes[0].keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The value a top-level name is bound to (a param, an input or a `let`); `None` for a
    /// dim, a function or an unknown name.
    pub fn global_value(&self, name: &str) -> Option<&Value> {
        match self.scopes[0].get(name) {
            Some(Entry::Value(v)) => Some(v),
            _ => None,
        }
    }

    fn error(&mut self, code: Code, span: Span, message: impl Into<String>) {
        self.report(Diagnostic::error(code, span, message));
    }

    /// Record a diagnostic, noting the call that inlined the body it occurred in.
    fn report(&mut self, mut d: Diagnostic) {
        if let Some((name, span)) = self.calls.last() {
            if !span_within(d.span, *span) {
                d = d.with_label(*span, format!("in this call of `{name}`"));
            }
        }
        self.diags.push(d);
    }

    fn lookup(&self, name: &str) -> Option<&Entry> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn bind(&mut self, name: &str, entry: Entry) {
        self.scopes
            .last_mut()
            .expect("the global scope is never popped")
            .insert(name.to_string(), entry);
    }

    /// Append a node to the current block.
    fn push(&mut self, op: Op, args: Vec<ValueId>, ty: TensorType, span: Span) -> Value {
        // An operand that is a view of a state written since it was made reads the write,
        // as the aliasing view does in PyTorch (`c + c.index_copy_(..)`).
        let args = match self.states.is_empty() {
            true => args,
            false => args
                .into_iter()
                .map(|a| self.refresh(a, span).unwrap_or(a))
                .collect(),
        };
        Value::Tensor(self.push_node(Node {
            op,
            args,
            ty: Type::Tensor(ty),
            span,
        }))
    }

    fn push_node(&mut self, node: Node) -> ValueId {
        self.prog.nodes.push(node);
        let id = self.prog.nodes.len() - 1;
        self.blocks
            .last_mut()
            .expect("the top-level block is never popped")
            .push(id);
        id
    }

    fn ty(&self, id: ValueId) -> &TensorType {
        self.prog.tensor_type(id)
    }

    /// A shape as text, as the spec prints shapes: `[B, H, N, Dk]`.
    fn shape_text(&self, shape: &[Poly]) -> String {
        let parts: Vec<String> = shape.iter().map(|d| self.prog.dims.display(d)).collect();
        format!("[{}]", parts.join(", "))
    }

    fn dim_text(&self, d: &Poly) -> String {
        self.prog.dims.display(d)
    }

    /// The tensor of a value, or a report that it is some other kind (None either way
    /// when it is not a tensor).
    fn expect_tensor(&mut self, v: &Value, span: Span, what: &str) -> Option<ValueId> {
        match v {
            Value::Tensor(id) => Some(*id),
            Value::Error => None,
            other => {
                let kind = other.kind_name();
                self.error(
                    Code::E0208,
                    span,
                    format!("{what} must be a tensor, found a {kind}"),
                );
                None
            }
        }
    }

    fn dims_mut(&mut self) -> &mut crate::dims::DimTable {
        &mut self.prog.dims
    }
}

/// Whether `inner` lies inside `outer` (a diagnostic in the call's own arguments needs no
/// "in this call" label).
fn span_within(inner: Span, outer: Span) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// Mark the inputs whose every use reaches a comparison, through layout ops only: these are
/// masks, and `attnc run` fills them with ones by default.
fn mark_mask_inputs(prog: &mut Program) {
    let mut users: Vec<Vec<ValueId>> = vec![Vec::new(); prog.nodes.len()];
    for (id, node) in prog.nodes.iter().enumerate() {
        for &a in &node.args {
            users[a].push(id);
        }
    }
    fn only_masks(prog: &Program, users: &[Vec<ValueId>], id: ValueId) -> bool {
        !users[id].is_empty()
            && users[id].iter().all(|&u| match prog.nodes[u].op {
                Op::Compare(_) => true,
                Op::Transpose(..)
                | Op::Permute(_)
                | Op::View(_)
                | Op::Reshape(_)
                | Op::Contiguous
                | Op::Unsqueeze(_)
                | Op::Expand(_)
                | Op::Squeeze(_)
                | Op::Slice { .. }
                | Op::StepSlice { .. }
                | Op::Select { .. } => only_masks(prog, users, u),
                _ => false,
            })
    }
    let flags: Vec<(usize, bool)> = prog
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(id, n)| match n.op {
            Op::Input(i) => Some((i, only_masks(prog, &users, id))),
            _ => None,
        })
        .collect();
    for (i, flag) in flags {
        prog.inputs[i].mask_only = flag;
    }
}

#[cfg(test)]
mod tests;
