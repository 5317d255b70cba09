//! What a whole model adds to a block: a loop of statements over layers, unrolled, whose
//! weights are declared where they are used under keys that name the loop variable
//! (`"encoder.layer.{l}.attention.self.query.weight"`), and `x = e`, which carries a value
//! from one layer to the next.
//!
//! `for l in 0..L { x = layer(x, l) }` is PyTorch's `for layer in self.layer: x = layer(x)`;
//! its bounds must be constants, and each iteration checks the body again with `l` bound to
//! its value, so every layer gets its own weights and both backends see a flat program.

use super::{Checker, Entry, Value};
use crate::ast::{self, Expr, ExprKind};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::hash::HashMap;
use crate::ir::{DType, Op, ParamDecl, TensorType};

/// Iterations a loop of statements may unroll to.
const MAX_ITERATIONS: i64 = 1024;

impl Checker {
    /// A bare expression as a statement: a `for` whose body has no value is a loop of
    /// statements; anything else is checked and dropped.
    pub(super) fn expr_stmt(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::For {
                var,
                start,
                end,
                body,
            } if body.value.as_deref().is_none_or(is_in_place) => self.statement_loop(var, start, end, body),
            _ => {
                self.expr(e);
            }
        }
    }

    /// `for l in a..b { stmts }` with constant bounds: the statements once per value.
    fn statement_loop(&mut self, var: &ast::Ident, start: &Expr, end: &Expr, body: &ast::Block) {
        let bound = |c: &mut Checker, e: &Expr| {
            let p = c.dim_expr(e)?;
            let value = c.prog.dims.with_consts(&p).as_int();
            if value.is_none() {
                let msg = format!(
                    "a loop over layers needs constant bounds, and `{}` is not one",
                    c.dim_text(&p)
                );
                let d = Diagnostic::error(Code::E0208, e.span, msg)
                    .with_hint("declare the number of layers as a constant dim: `dim L = 6`");
                c.report(d);
            }
            value
        };
        let (Some(s), Some(e)) = (bound(self, start), bound(self, end)) else {
            return;
        };
        if e - s > MAX_ITERATIONS {
            let msg = format!(
                "a loop over layers unrolls to at most {MAX_ITERATIONS} iterations, not {}",
                e - s
            );
            self.error(Code::E0208, end.span, msg);
            return;
        }
        let first = self.blocks[0].len();
        let mut layers = Vec::new();
        for index in s..e {
            let start = self.blocks[0].len();
            self.scopes.push(HashMap::default());
            self.bind(&var.name, Entry::Dim(Poly::int(index)));
            body.stmts.iter().for_each(|stmt| self.stmt(stmt));
            if let Some(last) = &body.value {
                self.expr_stmt(last);
            }
            self.scopes.pop();
            layers.push(start..self.blocks[0].len());
        }
        // Only a loop at top level is cut into layers, and only the outermost: its
        // iterations replace any an inner loop recorded.
        if self.blocks.len() == 1 {
            self.prog.layers.retain(|r| r.start < first);
            self.prog.layers.extend(layers);
        }
    }

    /// `x = e`: rebinds `x` in the innermost scope that has it; E0101 when none does.
    pub(super) fn assign(&mut self, a: &ast::Assign) {
        let value = self.expr(&a.value);
        let scope = self
            .scopes
            .iter_mut()
            .rev()
            .find(|s| s.contains_key(&a.name.name));
        match scope {
            Some(scope) if matches!(scope.get(&a.name.name), Some(Entry::Value(_))) => {
                scope.insert(a.name.name.clone(), Entry::Value(value));
            }
            Some(_) => {
                let msg = format!("`{}` is a dim or a function, not a value to assign", a.name.name);
                self.error(Code::E0208, a.name.span, msg);
            }
            None => {
                let msg = format!("`{}` is assigned before it is defined", a.name.name);
                let d = Diagnostic::error(Code::E0101, a.name.span, msg)
                    .with_hint(format!("define it first: `let {} = ..`", a.name.name));
                self.report(d);
            }
        }
    }

    /// A `param` inside a block: its key's `{name}`s are replaced by the values of those
    /// names, which must be constants (a layer's index). Two declarations of one key are
    /// one weight.
    pub(super) fn local_param(&mut self, p: &ast::Param) {
        let key = match &p.key {
            Some(k) => self.interpolate(k),
            None => Some(p.name.name.clone()),
        };
        let value = match (key, self.shape_ann(&p.shape)) {
            (Some(key), Some(shape)) => self.param_by_key(p, key, shape),
            _ => Value::Error,
        };
        self.bind(&p.name.name, Entry::Value(value));
    }

    fn param_by_key(&mut self, p: &ast::Param, key: String, shape: Vec<Poly>) -> Value {
        let found = self.prog.params.iter().position(|d| d.key == key);
        let index = match found {
            Some(i) => {
                let known = self.prog.params[i].shape.clone();
                let same = known.len() == shape.len()
                    && known.iter().zip(&shape).all(|(a, b)| self.prog.dims.equal(a, b));
                if !same {
                    let msg = format!(
                        "the weight \"{key}\" is declared {} here and {} before",
                        self.shape_text(&shape),
                        self.shape_text(&known)
                    );
                    let first = self.prog.params[i].span;
                    let d =
                        Diagnostic::error(Code::E0201, p.shape.span, msg).with_label(first, "declared here");
                    self.report(d);
                    return Value::Error;
                }
                i
            }
            None => {
                self.prog.params.push(ParamDecl {
                    name: p.name.name.clone(),
                    key,
                    shape: shape.clone(),
                    span: p.span,
                });
                self.prog.params.len() - 1
            }
        };
        let ty = TensorType::row_major(shape, DType::F32);
        self.push(Op::Param(index), vec![], ty, p.name.span)
    }

    /// The key with each `{name}` replaced by the constant value of `name`.
    fn interpolate(&mut self, key: &ast::StrLit) -> Option<String> {
        let mut out = String::new();
        let mut rest = key.value.as_str();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let Some(close) = rest[open..].find('}') else {
                self.error(Code::E0208, key.span, "a `{` in a key without its `}`");
                return None;
            };
            let name = &rest[open + 1..open + close];
            out.push_str(&self.key_part(name, key.span)?.to_string());
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        Some(out)
    }

    /// The constant value of `name` inside a key.
    fn key_part(&mut self, name: &str, span: crate::source::Span) -> Option<i64> {
        let poly = match self.lookup(name) {
            Some(Entry::Dim(p)) => Some(p.clone()),
            Some(Entry::Value(Value::Tensor(id))) => match &self.prog.node(*id).op {
                Op::DimValue(p) => Some(p.clone()),
                _ => None,
            },
            Some(_) => None,
            None => {
                self.error(Code::E0101, span, format!("unknown name `{name}` in a key"));
                return None;
            }
        };
        let value = poly.and_then(|p| self.prog.dims.with_consts(&p).as_int());
        if value.is_none() {
            let msg = format!("`{name}` in a key must be a constant: a layer's index or a constant dim");
            self.error(Code::E0208, span, msg);
        }
        value
    }
}

/// Whether `e` is a call of an in-place op (`cache[l].index_copy_(..)`): a statement, even
/// as the last line of a loop's body, as in Python.
fn is_in_place(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Method { method, .. } if method.name.ends_with('_'))
}
