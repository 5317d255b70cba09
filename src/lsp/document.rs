//! One open file as the language server sees it: checked once per change, then asked for
//! diagnostics, hovers, definitions and completions.

use super::position::LineIndex;
use crate::ast::{self, Block, Expr, ExprKind, Ident, Item, Pattern, Stmt, TypeAnn};
use crate::check::{self, DimOverride};
use crate::diagnostic::Severity;
use crate::dims::DimKind;
use crate::driver::Checked;
use crate::ir::{Program, Type};
use crate::lexer::{self, Token};
use crate::ops;
use crate::source::Span;
use lsp_types::{
    CompletionItem, CompletionItemKind, Diagnostic, DiagnosticSeverity, NumberOrString, Position, Range,
};

/// What a name is declared as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DefKind {
    Dim,
    Value,
    Fn,
    /// A name in a function's signature that is not a declared dim.
    ShapeVar,
    LoopVar,
}

/// A declaration: where its name is, and where it can be used.
#[derive(Clone, Debug)]
struct Def {
    name: String,
    kind: DefKind,
    span: Span,
    /// The region the name is visible in, from `visible_from` on (a `let` is visible after
    /// its statement, so `let q = q.transpose(1, 2)` reads the `q` before it).
    scope: Span,
    visible_from: usize,
    /// For a function, its signature's text.
    signature: Option<String>,
}

pub struct Document {
    pub text: String,
    checked: Checked,
    /// What each name stood for where it was bound or used (see [`check::NameType`]).
    names: Vec<check::NameType>,
    defs: Vec<Def>,
}

impl Document {
    /// Parse and check `text`, with those `dims` that name a free or constant dim of it.
    /// Unlike `attnc check`, a file with syntax errors is checked too: the parser recovers
    /// at statement boundaries, and every statement it kept is checked and hovered, so a
    /// half-typed line costs only itself.
    pub fn new(text: String, dims: &[DimOverride]) -> Document {
        let (ast, mut diagnostics) = crate::parser::parse(&text);
        let usable: Vec<DimOverride> = dims
            .iter()
            .filter(|d| check::dim_override_error(&ast, std::slice::from_ref(d)).is_none())
            .cloned()
            .collect();
        let mut checker = check::Checker::new(&usable);
        checker.record_names();
        checker.check_items(&ast.items);
        checker.check_uncalled_fns(&ast.items);
        let names = checker.take_names();
        let (program, checked) = checker.finish();
        diagnostics.extend(checked);
        diagnostics.sort_by_key(|d| d.span.start);
        let checked = Checked { program, diagnostics };
        let mut defs = Defs {
            text: &text,
            all: Span::new(0, text.len()),
            out: Vec::new(),
        };
        defs.items(&ast.items);
        let defs = defs.out;
        Document {
            text,
            checked,
            names,
            defs,
        }
    }

    fn program(&self) -> &Program {
        &self.checked.program
    }

    /// The checker's diagnostics, hints and labels folded into the message.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        let index = LineIndex::new(&self.text);
        self.checked
            .diagnostics
            .iter()
            .map(|d| {
                let mut message = d.message.clone();
                for label in &d.labels {
                    let line = index.position(label.span.start).line + 1;
                    message.push_str(&format!("\n{} (line {line})", label.message));
                }
                for hint in &d.hints {
                    message.push_str(&format!("\nhint: {hint}"));
                }
                let severity = match d.severity {
                    Severity::Error => DiagnosticSeverity::ERROR,
                    Severity::Warning => DiagnosticSeverity::WARNING,
                };
                Diagnostic {
                    range: index.range(d.span),
                    severity: Some(severity),
                    code: Some(NumberOrString::String(d.code.to_string())),
                    source: Some("attnc".to_string()),
                    message,
                    ..Diagnostic::default()
                }
            })
            .collect()
    }

    /// The identifier at `offset` (the cursor inside it or just after it).
    fn ident_at(&self, offset: usize) -> Option<(String, Span)> {
        let (tokens, _) = lexer::lex(&self.text);
        tokens
            .into_iter()
            .find(|(t, s)| *t == Token::Ident && s.start <= offset && offset <= s.end)
            .map(|(_, s)| (self.text[s.range()].to_string(), s))
    }

    /// The declaration the name at `offset` refers to.
    fn resolve(&self, name: &str, offset: usize) -> Option<&Def> {
        let candidates = self.defs.iter().filter(|d| d.name == name);
        if let Some(d) = candidates
            .clone()
            .find(|d| d.span.start <= offset && offset <= d.span.end)
        {
            return Some(d);
        }
        candidates
            .filter(|d| d.scope.start <= offset && offset <= d.scope.end && d.visible_from <= offset)
            .min_by_key(|d| (d.scope.end - d.scope.start, usize::MAX - d.span.start))
    }

    /// Where the name at `offset` is declared.
    pub fn definition(&self, position: Position) -> Option<Range> {
        let index = LineIndex::new(&self.text);
        let offset = index.offset(position);
        let (name, _) = self.ident_at(offset)?;
        self.resolve(&name, offset).map(|d| index.range(d.span))
    }

    /// Markdown for the name or sub-expression at `position`: a value's shape, layout and
    /// sizes, a dim's definition and value, a function's or op's signature.
    pub fn hover(&self, position: Position) -> Option<(String, Range)> {
        let index = LineIndex::new(&self.text);
        let offset = index.offset(position);
        let ident = self.ident_at(offset);
        if let Some((name, span)) = &ident {
            if let Some(text) = self.resolve(name, offset).and_then(|d| self.def_text(d, *span)) {
                return Some((code_block(&text), index.range(*span)));
            }
        }
        let (id, span) = self.node_at(offset)?;
        let mut text = self.type_text(id)?;
        if let Some((name, _)) = &ident {
            if let Some(op) = ops::table::find(name) {
                text = format!("{}\n{text}", op.signature());
            }
        }
        Some((code_block(&text), index.range(span)))
    }

    /// What the name at `at`, declared by `d`, stands for.
    fn def_text(&self, d: &Def, at: Span) -> Option<String> {
        match d.kind {
            DefKind::Dim => Some(self.dim_text(&d.name)),
            DefKind::Fn => d.signature.clone(),
            DefKind::LoopVar => self
                .name_text(d, at)
                .or_else(|| Some(format!("loop variable `{}`", d.name))),
            DefKind::ShapeVar => self.name_text(d, at).or_else(|| {
                Some(format!(
                    "shape variable `{}`: unified with the argument's dim at each call",
                    d.name
                ))
            }),
            DefKind::Value => self.name_text(d, at).or_else(|| self.binding_text(d)),
        }
    }

    /// What the checker recorded for the name at `at` (a use) or, failing that, at its
    /// declaration: `x: [B, N, D]  contiguous`, one line per distinct type a function's
    /// calls gave it.
    fn name_text(&self, d: &Def, at: Span) -> Option<String> {
        let recorded = |span: Span| {
            let mut texts: Vec<&str> = Vec::new();
            for n in self.names.iter().filter(|n| n.span == span) {
                if !texts.contains(&n.text.as_str()) {
                    texts.push(&n.text);
                }
            }
            texts
        };
        // A loop variable is the same dim at every use: its declaration says its range.
        let mut texts = match d.kind {
            DefKind::LoopVar => Vec::new(),
            _ => recorded(at),
        };
        if texts.is_empty() {
            texts = recorded(d.span);
        }
        if texts.is_empty() {
            return None;
        }
        let named = |t: &&str| match d.kind {
            DefKind::LoopVar => t.to_string(),
            _ => format!("{}: {t}", d.name),
        };
        Some(texts.iter().map(named).collect::<Vec<_>>().join("\n"))
    }

    /// A top-level binding's name and type.
    fn binding_text(&self, d: &Def) -> Option<String> {
        let b = self.program().bindings.iter().find(|b| b.span == d.span)?;
        Some(format!("{}: {}", b.name, self.type_text(b.value)?))
    }

    /// The innermost tensor-valued node whose source contains `offset`.
    fn node_at(&self, offset: usize) -> Option<(usize, Span)> {
        self.program()
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.ty, Type::Tensor(_)) && n.span.start <= offset && offset < n.span.end)
            .min_by_key(|(_, n)| n.span.end - n.span.start)
            .map(|(id, n)| (id, n.span))
    }

    /// `[B, H, N, Dk]  non-contiguous, strides [..]` and a line with the sizes where every
    /// dim has a value.
    fn type_text(&self, id: usize) -> Option<String> {
        let prog = self.program();
        let Type::Tensor(t) = &prog.nodes.get(id)?.ty else {
            return None;
        };
        Some(crate::render::tensor_text(prog, t))
    }

    /// `dim D = 512`, `dim Dk = D / H  (= 64)`, `dim B  (free, = 2)`.
    fn dim_text(&self, name: &str) -> String {
        let dims = &self.program().dims;
        let Some(s) = dims.lookup(name) else {
            return format!("dim {name}");
        };
        match &dims.info(s).kind {
            DimKind::Free { value: Some(v) } => format!("dim {name}  (free, = {v})"),
            DimKind::Free { value: None } => format!("dim {name}  (free)"),
            DimKind::Const(v) => format!("dim {name} = {v}"),
            DimKind::Derived(p) => {
                let value = dims.value(p).map_or(String::new(), |v| format!("  (= {v})"));
                format!("dim {name} = {}{value}", dims.display_definition(s))
            }
            DimKind::Loop { .. } => format!("loop variable `{name}`"),
        }
    }

    /// The ops, with their PyTorch parameters, and the names visible at `position`.
    pub fn completions(&self, position: Position) -> Vec<CompletionItem> {
        let offset = LineIndex::new(&self.text).offset(position);
        // Every name of every op in the table, aliases included (`cat` as well as `concat`).
        let ops = ops::signatures().flat_map(|op| {
            std::iter::once(op.name)
                .chain(op.aliases.iter().copied())
                .map(move |name| CompletionItem {
                    label: name.to_string(),
                    kind: Some(CompletionItemKind::FUNCTION),
                    detail: Some(op.signature()),
                    ..CompletionItem::default()
                })
        });
        let mut names: Vec<CompletionItem> = Vec::new();
        for d in &self.defs {
            let visible = d.scope.start <= offset && offset <= d.scope.end && d.visible_from <= offset;
            if !visible || names.iter().any(|n| n.label == d.name) {
                continue;
            }
            let (kind, detail) = match d.kind {
                DefKind::Fn => (CompletionItemKind::FUNCTION, d.signature.clone()),
                DefKind::Dim | DefKind::ShapeVar | DefKind::LoopVar => {
                    (CompletionItemKind::CONSTANT, Some(self.dim_text(&d.name)))
                }
                DefKind::Value => (CompletionItemKind::VARIABLE, self.binding_text(d)),
            };
            names.push(CompletionItem {
                label: d.name.clone(),
                kind: Some(kind),
                detail,
                ..CompletionItem::default()
            });
        }
        ops.chain(names).collect()
    }
}

fn code_block(text: &str) -> String {
    format!("```attn\n{text}\n```")
}

/// Collects the declarations of a program with their scopes.
struct Defs<'a> {
    text: &'a str,
    /// The whole file: the scope of a top-level name.
    all: Span,
    out: Vec<Def>,
}

impl Defs<'_> {
    fn add(&mut self, name: &Ident, kind: DefKind, scope: Span, visible_from: usize) {
        self.out.push(Def {
            name: name.name.clone(),
            kind,
            span: name.span,
            scope,
            visible_from,
            signature: None,
        });
    }

    fn items(&mut self, items: &[Item]) {
        for item in items {
            match item {
                Item::Dim(decls) => {
                    for d in decls {
                        self.add(&d.name, DefKind::Dim, self.all, d.span.end);
                    }
                }
                Item::Param(p) => self.add(&p.name, DefKind::Value, self.all, p.span.end),
                Item::Input(i) | Item::State(i) => self.add(&i.name, DefKind::Value, self.all, i.span.end),
                Item::Fn(f) => self.function(f),
                Item::Let(l) => {
                    self.expr(&l.value);
                    self.pattern(&l.pattern, self.all, l.span.end);
                }
                Item::Output(o) => {
                    self.expr(&o.value);
                    self.add(&o.name, DefKind::Value, self.all, o.span.end);
                }
                Item::Expr(e) => self.expr(e),
                Item::Assert(_) => {}
            }
        }
    }

    fn function(&mut self, f: &ast::FnDecl) {
        // Calls may come before or after it: a function is visible in the whole file.
        self.add(&f.name, DefKind::Fn, self.all, 0);
        let header = self.text[f.span.start..f.body.span.start].trim_end();
        self.out.last_mut().expect("just added").signature = Some(header.to_string());
        let dims: Vec<String> = self
            .out
            .iter()
            .filter(|d| d.kind == DefKind::Dim)
            .map(|d| d.name.clone())
            .collect();
        let mut shape_names = Vec::new();
        for p in &f.params {
            self.add(&p.name, DefKind::Value, f.span, f.span.start);
            shape_idents(p.ty.as_ref(), &mut shape_names);
        }
        shape_idents(f.ret.as_ref(), &mut shape_names);
        for (name, span) in shape_names {
            let known = dims.contains(&name)
                || self
                    .out
                    .iter()
                    .any(|d| d.kind == DefKind::ShapeVar && d.name == name && d.scope == f.span);
            if !known {
                let ident = Ident { name, span };
                self.add(&ident, DefKind::ShapeVar, f.span, f.span.start);
            }
        }
        self.block(&f.body);
    }

    fn pattern(&mut self, p: &Pattern, scope: Span, visible_from: usize) {
        match p {
            Pattern::Name(n) => self.add(n, DefKind::Value, scope, visible_from),
            Pattern::Tuple(names, _) => {
                for n in names {
                    self.add(n, DefKind::Value, scope, visible_from);
                }
            }
        }
    }

    fn block(&mut self, b: &Block) {
        for s in &b.stmts {
            match s {
                Stmt::Let(l) => {
                    self.expr(&l.value);
                    self.pattern(&l.pattern, b.span, l.span.end);
                }
                Stmt::Expr(e) => self.expr(e),
                Stmt::Assign(a) => self.expr(&a.value),
                Stmt::Assert(_) | Stmt::Param(_) => {}
            }
        }
        if let Some(v) = &b.value {
            self.expr(v);
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::For {
                var,
                start,
                end,
                body,
            } => {
                self.expr(start);
                self.expr(end);
                self.add(var, DefKind::LoopVar, body.span, body.span.start);
                self.block(body);
            }
            ExprKind::Neg(x) | ExprKind::Not(x) => self.expr(x),
            ExprKind::Binary(_, a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Range(a, b, c) => {
                for x in [a, b, c].into_iter().flatten() {
                    self.expr(x);
                }
            }
            ExprKind::Tuple(args) | ExprKind::List(args) => args.iter().for_each(|a| self.expr(a)),
            ExprKind::Call { args, kwargs, .. } => {
                args.iter().for_each(|a| self.expr(a));
                kwargs.iter().for_each(|k| self.expr(&k.value));
            }
            ExprKind::Method {
                receiver,
                args,
                kwargs,
                ..
            } => {
                self.expr(receiver);
                args.iter().for_each(|a| self.expr(a));
                kwargs.iter().for_each(|k| self.expr(&k.value));
            }
            ExprKind::Attribute { receiver, .. } => self.expr(receiver),
            ExprKind::Index { base, indices } => {
                self.expr(base);
                indices.iter().for_each(|a| self.expr(a));
            }
            ExprKind::Int(_)
            | ExprKind::Float(_)
            | ExprKind::Bool(_)
            | ExprKind::NoneLit
            | ExprKind::Inf
            | ExprKind::Ellipsis
            | ExprKind::Str(_)
            | ExprKind::Name(_)
            | ExprKind::Error => {}
        }
    }
}

/// The names a shape annotation mentions as whole dims (`Q` in `[B, 1, Q, M]`), in order.
fn shape_idents(ann: Option<&TypeAnn>, out: &mut Vec<(String, Span)>) {
    match ann {
        Some(TypeAnn::Shape(s)) => {
            for e in &s.dims {
                if let ExprKind::Name(n) = &e.kind {
                    if !out.iter().any(|(m, _)| m == n) {
                        out.push((n.clone(), e.span));
                    }
                }
            }
        }
        Some(TypeAnn::Tuple(parts, _)) => parts.iter().for_each(|p| shape_idents(Some(p), out)),
        None => {}
    }
}
