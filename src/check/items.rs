//! Declarations, statements, function calls and `for` loops.

use super::{Checker, DimOverride, Entry, Value};
use crate::ast::{self, BinOp, Expr, ExprKind, Ident, Item, Stmt, TypeAnn};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::{DimKind, Poly};
use crate::hash::HashMap;
use crate::ir::{
    Binding, BindingKind, CmpOp, DType, DimAssert, InputDecl, Node, Op, OutputDecl, ParamDecl, TensorType,
    Type,
};
use crate::source::Span;
use std::rc::Rc;

/// Functions inline into each other at most this deep.
const MAX_CALL_DEPTH: usize = 64;

/// Why a `--dim` cannot apply to `ast` (a dim given twice, an unknown dim, or a derived
/// one), as a usage message; `None` when every override names a free or constant dim once.
/// A dim given twice is refused rather than one value silently winning over the other.
pub fn dim_override_error(ast: &ast::Program, overrides: &[DimOverride]) -> Option<String> {
    let twice = overrides.iter().enumerate().find_map(|(i, o)| {
        let first = overrides[..i].iter().find(|p| p.name == o.name)?;
        Some(format!(
            "--dim {}: given twice, as {} and {}",
            o.name, first.value, o.value
        ))
    });
    if twice.is_some() {
        return twice;
    }
    let decls: Vec<&ast::DimDecl> = ast
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Dim(ds) => Some(ds.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    overrides
        .iter()
        .find_map(|o| match decls.iter().find(|d| d.name.name == o.name) {
            None => Some(format!(
                "--dim {}: the program declares no dim `{}`",
                o.name, o.name
            )),
            Some(d) => match &d.value {
                Some(v) if !matches!(v.kind, ExprKind::Int(_)) => Some(format!(
                    "--dim {}: `{}` is a derived dim; set the dims it is computed from",
                    o.name, o.name
                )),
                _ => None,
            },
        })
}

impl Checker {
    pub(super) fn item(&mut self, item: &Item) {
        match item {
            Item::Dim(decls) => decls.iter().for_each(|d| self.dim_decl(d)),
            Item::Assert(a) => self.assert(a),
            Item::Param(p) => self.param(p),
            Item::Input(i) => self.input(i, false),
            Item::State(i) => self.input(i, true),
            Item::Fn(f) => self.fn_decl(f),
            Item::Let(l) => self.let_stmt(l),
            Item::Output(o) => self.output(o),
            Item::Expr(e) => self.expr_stmt(e),
        }
    }

    pub(super) fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Let(l) => self.let_stmt(l),
            Stmt::Assert(a) => self.assert(a),
            Stmt::Param(p) => self.local_param(p),
            Stmt::Assign(a) => self.assign(a),
            Stmt::Expr(e) => self.expr_stmt(e),
        }
    }

    /// Claim a global name; E0102 when it is taken.
    fn declare(&mut self, name: &Ident) -> bool {
        if let Some(first) = self.declared.get(&name.name) {
            let d = Diagnostic::error(
                Code::E0102,
                name.span,
                format!("`{}` is defined twice", name.name),
            )
            .with_label(*first, "first defined here");
            self.report(d);
            return false;
        }
        self.declared.insert(name.name.clone(), name.span);
        true
    }

    fn dim_decl(&mut self, d: &ast::DimDecl) {
        if !self.declare(&d.name) {
            return;
        }
        let name = &d.name.name;
        let given = self.overrides.iter().find(|o| o.name == *name).map(|o| o.value);
        let poly = match &d.value {
            None => Poly::sym(self.dims_mut().declare(name, DimKind::Free { value: given })),
            Some(Expr {
                kind: ExprKind::Int(n),
                ..
            }) => {
                let v = given.unwrap_or(i64::try_from(*n).unwrap_or(i64::MAX));
                match self.positive_constant(d, v) {
                    true => Poly::sym(self.dims_mut().declare(name, DimKind::Const(v))),
                    false => Poly::sym(self.dims_mut().declare(name, DimKind::Free { value: None })),
                }
            }
            Some(e) => match self.dim_expr(e) {
                Some(p) if p.as_int().is_some_and(|v| !self.positive_constant(d, v)) => {
                    Poly::sym(self.dims_mut().declare(name, DimKind::Free { value: None }))
                }
                Some(p) => {
                    self.dims_mut().declare(name, DimKind::Derived(p.clone()));
                    p
                }
                // Bound to an error, so its uses fail silently instead of reporting the
                // same mistake again in every shape that mentions it.
                None => {
                    self.bind(name, Entry::Value(Value::Error));
                    return;
                }
            },
        };
        self.bind(name, Entry::Dim(poly));
    }

    /// Whether the constant value `v` of dim `d` is a size; E0208 at its `dim` line when it
    /// is 0 or negative (section 7.1: sizes a program declares are at least 1; only derived
    /// sizes such as `N - 1` may be 0). Declared anyway, so its uses report nothing more.
    fn positive_constant(&mut self, d: &ast::DimDecl, v: i64) -> bool {
        if v >= 1 {
            return true;
        }
        let span = d.value.as_ref().map_or(d.name.span, |e| e.span);
        let message = format!("the constant dim `{}` is {v}; a dim is at least 1", d.name.name);
        self.error(Code::E0208, span, message);
        false
    }

    /// `assert a % b == 0` becomes a divisibility fact; any assert is checked now when the
    /// constant values decide it, and otherwise again at run time.
    fn assert(&mut self, a: &ast::Assert) {
        let ExprKind::Binary(op, l, r) = &a.cond.kind else {
            self.error(Code::E0208, a.cond.span, "an assert needs a comparison of dims");
            return;
        };
        let Some(cmp) = cmp_op(*op) else {
            self.error(Code::E0208, a.cond.span, "an assert needs a comparison of dims");
            return;
        };
        let (lhs, rhs) = match (&l.kind, &r.kind) {
            (ExprKind::Binary(BinOp::Rem, x, y), ExprKind::Int(0)) if cmp == CmpOp::Eq => {
                let (x, y) = (self.dim_expr(x), self.dim_expr(y));
                let (Some(x), Some(y)) = (x, y) else { return };
                self.dims_mut().assume_divides(x.clone(), y.clone());
                (crate::dims::Poly::rem_atom(&x, &y), Poly::int(0))
            }
            _ => {
                let (x, y) = (self.dim_expr(l), self.dim_expr(r));
                let (Some(x), Some(y)) = (x, y) else { return };
                self.assume_comparison(&x, cmp, &y);
                (x, y)
            }
        };
        let text = self.assert_text(&lhs, cmp, &rhs);
        let diff = self.prog.dims.with_consts(&lhs.sub(&rhs));
        match diff.as_const() {
            Some(c) if !cmp.holds(c.cmp(&crate::dims::Ratio::ZERO)) => {
                let values = self.const_values(&lhs.add(&rhs));
                let d = Diagnostic::error(
                    Code::E0209,
                    a.span,
                    format!("assertion `{text}` is false{values}"),
                );
                self.report(d);
            }
            Some(_) => {}
            None => self.prog.asserts.push(DimAssert {
                lhs,
                op: cmp,
                rhs,
                text,
                span: a.span,
            }),
        }
    }

    /// Record what `x cmp y` says about the sizes, for later slice-bound proofs.
    fn assume_comparison(&mut self, x: &Poly, cmp: CmpOp, y: &Poly) {
        let one = Poly::int(1);
        let facts = match cmp {
            CmpOp::Ge => vec![x.sub(y)],
            CmpOp::Gt => vec![x.sub(y).sub(&one)],
            CmpOp::Le => vec![y.sub(x)],
            CmpOp::Lt => vec![y.sub(x).sub(&one)],
            CmpOp::Eq => vec![x.sub(y), y.sub(x)],
            CmpOp::Ne => vec![],
        };
        for f in facts {
            self.dims_mut().assume_nonneg(f);
        }
    }

    /// `" for D = 500, H = 8"`: the constant dims a polynomial mentions, with their values.
    fn const_values(&self, p: &Poly) -> String {
        let parts: Vec<String> = p
            .syms()
            .into_iter()
            .filter_map(|s| match self.prog.dims.info(s).kind {
                DimKind::Const(v) => Some(format!("{} = {v}", self.prog.dims.info(s).name)),
                _ => None,
            })
            .collect();
        match parts.is_empty() {
            true => String::new(),
            false => format!(" for {}", parts.join(", ")),
        }
    }

    fn assert_text(&self, lhs: &Poly, op: CmpOp, rhs: &Poly) -> String {
        format!("{} {} {}", self.dim_text(lhs), op.symbol(), self.dim_text(rhs))
    }

    /// The dims of a shape annotation, or `None` after reporting a bad one.
    pub(super) fn shape_ann(&mut self, s: &ast::ShapeAnn) -> Option<Vec<Poly>> {
        let dims: Vec<Option<Poly>> = s.dims.iter().map(|e| self.dim_expr(e)).collect();
        dims.into_iter().collect()
    }

    fn param(&mut self, p: &ast::Param) {
        let ok = self.declare(&p.name);
        let value = match self.shape_ann(&p.shape) {
            Some(shape) if ok => {
                let index = self.prog.params.len();
                let key = p.key.as_ref().map_or(p.name.name.clone(), |k| k.value.clone());
                let decl = ParamDecl {
                    name: p.name.name.clone(),
                    key,
                    shape: shape.clone(),
                    span: p.span,
                };
                self.prog.params.push(decl);
                let ty = TensorType::row_major(shape, DType::F32);
                self.push(Op::Param(index), vec![], ty, p.name.span)
            }
            _ => Value::Error,
        };
        self.bind_top(&p.name, BindingKind::Param, value);
    }

    /// `input x: [..]`, or with `state` a `state x: [..]`: an input the call writes back.
    fn input(&mut self, i: &ast::Input, state: bool) {
        let ok = self.declare(&i.name);
        let value = match self.shape_ann(&i.shape) {
            Some(shape) if ok => {
                let index = self.prog.inputs.len();
                let dtype = self.input_dtype(i.dtype.as_ref());
                let decl = InputDecl {
                    name: i.name.name.clone(),
                    shape: shape.clone(),
                    dtype,
                    mask_only: false,
                    state,
                    span: i.span,
                };
                self.prog.inputs.push(decl);
                let ty = TensorType::row_major(shape, dtype);
                let value = self.push(Op::Input(index), vec![], ty, i.name.span);
                if let (Value::Tensor(id), true) = (&value, state) {
                    self.declare_state(index, &i.name.name, *id);
                }
                value
            }
            _ => Value::Error,
        };
        let kind = if state {
            BindingKind::State
        } else {
            BindingKind::Input
        };
        self.bind_top(&i.name, kind, value);
    }

    /// The dtype an input declares after its shape; E0208 for a name that is none.
    fn input_dtype(&mut self, name: Option<&Ident>) -> DType {
        let Some(name) = name else { return DType::F32 };
        DType::from_name(&name.name).unwrap_or_else(|| {
            let msg = format!("`{}` is not a dtype", name.name);
            let d = Diagnostic::error(Code::E0208, name.span, msg)
                .with_hint("write `float32`, `int64` (`long`; `int32` is read widened) or `bool`");
            self.report(d);
            DType::F32
        })
    }

    /// Bind a name in the current scope, and list it for `check` when it is a top-level
    /// tensor.
    /// A top-level `let` of a dim is listed among the bindings as the scalar it is in value
    /// position (shape `[]`), as `check` shows every top-level `let`.
    fn list_dim_let(&mut self, name: &Ident, p: &Poly, span: Span) {
        if self.scopes.len() == 1 && self.calls.is_empty() {
            let ty = TensorType::row_major(Vec::new(), DType::F32);
            let value = self.push(Op::DimValue(p.clone()), vec![], ty, span);
            self.bind_top(name, BindingKind::Let, value);
        }
    }

    fn bind_top(&mut self, name: &Ident, kind: BindingKind, value: Value) {
        self.note_value(name.span, &value);
        if let (Value::Tensor(id), true) = (&value, self.scopes.len() == 1 && self.calls.is_empty()) {
            self.prog.bindings.push(Binding {
                name: name.name.clone(),
                kind,
                value: *id,
                span: name.span,
            });
        }
        if kind != BindingKind::Output {
            self.bind(&name.name, Entry::Value(value));
        }
    }

    fn fn_decl(&mut self, f: &ast::FnDecl) {
        if !self.declare(&f.name) {
            return;
        }
        let mut seen: HashMap<&str, Span> = HashMap::default();
        for p in &f.params {
            if let Some(first) = seen.insert(&p.name.name, p.name.span) {
                let msg = format!(
                    "parameter `{}` of `{}` is defined twice",
                    p.name.name, f.name.name
                );
                let d =
                    Diagnostic::error(Code::E0102, p.name.span, msg).with_label(first, "first defined here");
                self.report(d);
            }
        }
        self.bind(&f.name.name, Entry::Fn(Rc::new(f.clone())));
    }

    fn let_stmt(&mut self, l: &ast::Let) {
        if let (ast::Pattern::Tuple(names, span), None) = (&l.pattern, &l.ty) {
            if let Some(x) = l.value.shape_of() {
                return self.unpack_shape(names, *span, x);
            }
        }
        if let (ast::Pattern::Name(n), None) = (&l.pattern, &l.ty) {
            if self.is_dim_only(&l.value) {
                let entry = match self.dim_expr(&l.value) {
                    Some(p) => {
                        self.note_dim(n.span, &p);
                        self.list_dim_let(n, &p, l.value.span);
                        Entry::Dim(p)
                    }
                    None => Entry::Value(Value::Error),
                };
                self.bind(&n.name, entry);
                return;
            }
        }
        let value = self.expr(&l.value);
        if let Some(ann) = &l.ty {
            self.check_declared(&value, ann, l.value.span, "this `let`");
        }
        match &l.pattern {
            ast::Pattern::Name(n) => self.bind_top(n, BindingKind::Let, value),
            ast::Pattern::Tuple(names, span) => {
                let parts = match value {
                    Value::Tuple(parts) if parts.len() == names.len() => parts,
                    Value::Error => vec![Value::Error; names.len()],
                    other => {
                        let found = match &other {
                            Value::Tuple(p) => format!("a tuple of {}", p.len()),
                            v => format!("a {}", v.kind_name()),
                        };
                        let msg = format!("cannot destructure {found} into {} names", names.len());
                        self.error(Code::E0208, *span, msg);
                        vec![Value::Error; names.len()]
                    }
                };
                for (n, v) in names.iter().zip(parts) {
                    self.bind_top(n, BindingKind::Let, v);
                }
            }
        }
    }

    /// `b, n, d = x.shape` (or `x.size()`): each name the dim of its axis, as PyTorch's
    /// `torch.Size` unpacks; E0208 when the counts differ, with Python's message.
    fn unpack_shape(&mut self, names: &[ast::Ident], span: Span, x: &Expr) {
        let shape = self
            .tensor_arg(x, "the owner of `.shape`")
            .map(|t| self.ty(t).shape.clone());
        let dims = match shape {
            Some(shape) if shape.len() == names.len() => shape.into_iter().map(Some).collect(),
            Some(shape) => {
                let (n, m) = (names.len(), shape.len());
                let what = if n < m { "too many" } else { "not enough" };
                let msg = format!("{what} values to unpack (expected {n}, got {m})");
                let d = Diagnostic::error(Code::E0208, span, msg)
                    .with_hint(format!("name one dim for each of the {m} axes"));
                self.report(d);
                vec![None; n]
            }
            None => vec![None; names.len()],
        };
        for (n, p) in names.iter().zip(dims) {
            let entry = match p {
                Some(p) => {
                    self.note_dim(n.span, &p);
                    self.list_dim_let(n, &p, x.span);
                    Entry::Dim(p)
                }
                None => Entry::Value(Value::Error),
            };
            self.bind(&n.name, entry);
        }
    }

    fn output(&mut self, o: &ast::Output) {
        let value = self.expr(&o.value);
        if let Some(state) = self.states.iter().find(|s| s.name == o.name.name) {
            let first = self.prog.inputs[state.input].span;
            let d = Diagnostic::error(
                Code::E0102,
                o.name.span,
                format!(
                    "output `{}` has the name of a state, which a call leaves behind under it",
                    o.name.name
                ),
            )
            .with_label(first, "the state")
            .with_hint("give the output another name");
            self.report(d);
            return;
        }
        if let Some(first) = self.outputs.get(&o.name.name) {
            let d = Diagnostic::error(
                Code::E0102,
                o.name.span,
                format!("output `{}` is defined twice", o.name.name),
            )
            .with_label(*first, "first defined here");
            self.report(d);
            return;
        }
        self.outputs.insert(o.name.name.clone(), o.name.span);
        let Some(id) = self.expect_tensor(&value, o.value.span, "an output") else {
            return;
        };
        self.prog.outputs.push(OutputDecl {
            name: o.name.name.clone(),
            value: id,
            state: None,
            span: o.span,
        });
        self.bind_top(&o.name, BindingKind::Output, value);
    }

    /// E0207 unless `value` has the declared type.
    fn check_declared(&mut self, value: &Value, ann: &TypeAnn, span: Span, what: &str) {
        let Some(declared) = self.type_text(ann) else {
            return;
        };
        if !self.matches_type(value, ann) {
            let found = self.value_text(value);
            let msg = format!("{what} is declared {declared}, but its value is {found}");
            let d = Diagnostic::error(Code::E0207, span, msg).with_label(ann.span(), "declared here");
            self.report(d);
        }
    }

    fn matches_type(&mut self, value: &Value, ann: &TypeAnn) -> bool {
        match (value, ann) {
            (Value::Error, _) => true,
            (Value::Tensor(id), TypeAnn::Shape(s)) => {
                let shape = self.ty(*id).shape.clone();
                let Some(declared) = self.shape_ann(s) else {
                    return true;
                };
                declared.len() == shape.len()
                    && declared
                        .iter()
                        .zip(&shape)
                        .all(|(a, b)| self.prog.dims.equal(a, b))
            }
            (Value::Tuple(parts), TypeAnn::Tuple(anns, _)) => {
                parts.len() == anns.len() && parts.iter().zip(anns).all(|(p, a)| self.matches_type(p, a))
            }
            _ => false,
        }
    }

    fn type_text(&mut self, ann: &TypeAnn) -> Option<String> {
        match ann {
            TypeAnn::Shape(s) => {
                let shape = self.shape_ann(s)?;
                Some(self.shape_text(&shape))
            }
            TypeAnn::Tuple(parts, _) => {
                let texts: Option<Vec<String>> = parts.iter().map(|p| self.type_text(p)).collect();
                Some(format!("({})", texts?.join(", ")))
            }
        }
    }

    pub(super) fn value_text(&self, v: &Value) -> String {
        match v {
            Value::Tensor(id) => self.shape_text(&self.ty(*id).shape),
            Value::Tuple(parts) => {
                let texts: Vec<String> = parts.iter().map(|p| self.value_text(p)).collect();
                format!("({})", texts.join(", "))
            }
            other => format!("a {}", other.kind_name()),
        }
    }

    /// Inline a call of `f`: bind its shape variables from the arguments, check the body
    /// in a scope that sees only the globals, and check the declared result.
    pub(super) fn call_fn(&mut self, f: &ast::FnDecl, name: &Ident, args: &[&Expr], span: Span) -> Value {
        if let Some(msg) = self.uninlinable(f) {
            self.error(Code::E0101, name.span, msg);
            return Value::Error;
        }
        if args.len() != f.params.len() {
            let msg = format!(
                "`{}` takes {} arguments, found {}",
                f.name.name,
                f.params.len(),
                args.len()
            );
            let d = Diagnostic::error(Code::E0206, span, msg).with_label(f.name.span, "defined here");
            self.report(d);
            return Value::Error;
        }
        let values: Vec<Value> = args.iter().map(|a| self.expr(a)).collect();
        if values.contains(&Value::Error) {
            // Its shape variables could not be bound: the body would only echo the error.
            // It counts as called, so it is not checked alone either, where its shape
            // variables would stand in for what the call meant.
            self.called.push(f.name.name.clone());
            return Value::Error;
        }
        let caller_scopes = self.scopes.split_off(1);
        self.scopes.push(HashMap::default());
        for ((p, v), a) in f.params.iter().zip(&values).zip(args) {
            if let Some(ann) = &p.ty {
                self.unify(v, ann, a.span, &p.name.name, &f.name.name);
            }
            self.note_value(p.name.span, v);
            // A dim passed as a number (a layer's index) stays a dim, so it may index.
            let entry = match v {
                Value::Tensor(id) if p.ty.is_none() => match &self.prog.node(*id).op {
                    Op::DimValue(d) => Entry::Dim(d.clone()),
                    _ => Entry::Value(v.clone()),
                },
                _ => Entry::Value(v.clone()),
            };
            self.bind(&p.name.name, entry);
        }
        self.calls.push((f.name.name.clone(), span));
        self.called.push(f.name.name.clone());
        let result = self.block_value(&f.body, "the body of a function");
        if let Some(ret) = &f.ret {
            let at = f.body.value.as_ref().map_or(f.body.span, |v| v.span);
            let what = format!("the result of `{}`", f.name.name);
            self.check_declared(&result, ret, at, &what);
        }
        self.calls.pop();
        self.scopes.truncate(1);
        self.scopes.extend(caller_scopes);
        result
    }

    /// Why a call of `f` cannot be inlined where the calls being inlined now stand: `f` is
    /// among them (it calls itself), or they are [`MAX_CALL_DEPTH`] deep already. Each says
    /// which, so that a long chain of distinct functions is not called recursion.
    fn uninlinable(&self, f: &ast::FnDecl) -> Option<String> {
        let name = &f.name.name;
        if self.calls.iter().any(|(n, _)| n == name) {
            return Some(format!(
                "function `{name}` cannot call itself: functions are inlined"
            ));
        }
        (self.calls.len() >= MAX_CALL_DEPTH).then(|| {
            format!("the call of `{name}` nests calls more than {MAX_CALL_DEPTH} deep: functions are inlined")
        })
    }

    /// Bind the shape variables of `ann` from `value`, then check that they agree (E0201).
    fn unify(&mut self, value: &Value, ann: &TypeAnn, span: Span, param: &str, func: &str) {
        match (value, ann) {
            (Value::Error, _) => {}
            (Value::Tensor(id), TypeAnn::Shape(s)) => {
                let actual = self.ty(*id).shape.clone();
                if actual.len() != s.dims.len() {
                    let msg = format!(
                        "argument `{param}` of `{func}` has rank {} ({}), but the signature says rank {}",
                        actual.len(),
                        self.shape_text(&actual),
                        s.dims.len()
                    );
                    let d = Diagnostic::error(Code::E0201, span, msg).with_label(s.span, "declared here");
                    self.report(d);
                    return;
                }
                for (e, a) in s.dims.iter().zip(&actual) {
                    if let ExprKind::Name(n) = &e.kind {
                        if self.lookup(n).is_none() {
                            self.bind(n, Entry::Dim(a.clone()));
                        }
                    }
                }
                let Some(declared) = self.shape_ann(s) else { return };
                if let Some((d, a)) = declared
                    .iter()
                    .zip(&actual)
                    .find(|(d, a)| !self.prog.dims.equal(d, a))
                {
                    let msg = format!(
                        "argument `{param}` of `{func}` is {}, but the signature says {} (`{}` vs `{}`)",
                        self.shape_text(&actual),
                        self.shape_text(&declared),
                        self.dim_text(a),
                        self.dim_text(d)
                    );
                    let d = Diagnostic::error(Code::E0201, span, msg).with_label(s.span, "declared here");
                    self.report(d);
                }
            }
            (Value::Tuple(parts), TypeAnn::Tuple(anns, _)) if parts.len() == anns.len() => {
                for (p, a) in parts.iter().zip(anns) {
                    self.unify(p, a, span, param, func);
                }
            }
            (other, _) => {
                let msg = format!(
                    "argument `{param}` of `{func}` is {}, which does not fit its signature",
                    self.value_text(other)
                );
                self.error(Code::E0208, span, msg);
            }
        }
    }

    /// Check the statements of a block and return its value.
    fn block_value(&mut self, block: &ast::Block, what: &str) -> Value {
        block.stmts.iter().for_each(|stmt| self.stmt(stmt));
        match &block.value {
            Some(v) => self.expr(v),
            None => {
                self.error(
                    Code::E0208,
                    block.span,
                    format!("{what} must end in an expression, its value"),
                );
                Value::Error
            }
        }
    }

    /// `for var in start..end { body }`: a loop region whose items all have one shape.
    pub(super) fn for_loop(
        &mut self,
        var: &Ident,
        start: &Expr,
        end: &Expr,
        body: &ast::Block,
        span: Span,
    ) -> Value {
        let (s, e) = (self.dim_expr(start), self.dim_expr(end));
        let (Some(s), Some(e)) = (s, e) else {
            return Value::Error;
        };
        let sym = self.dims_mut().declare(
            &var.name,
            DimKind::Loop {
                start: s.clone(),
                end: e.clone(),
            },
        );
        let range = format!(
            "loop variable `{}` in {}..{}",
            var.name,
            self.dim_text(&s),
            self.dim_text(&e)
        );
        self.note(var.span, range);
        self.scopes.push(HashMap::default());
        self.bind(&var.name, Entry::Dim(Poly::sym(sym)));
        self.blocks.push(Vec::new());
        let item = self.block_value(body, "the body of a `for`");
        let nodes = self.blocks.pop().expect("pushed above");
        self.scopes.pop();
        let at = body.value.as_ref().map_or(body.span, |v| v.span);
        let Some(result) = self.expect_tensor(&item, at, "the value of a `for` body") else {
            return Value::Error;
        };
        let item_ty = self.ty(result).clone();
        if item_ty.shape.iter().any(|d| d.syms().contains(&sym)) {
            let msg = format!(
                "the items of this `for` differ in shape: {} depends on `{}`",
                self.shape_text(&item_ty.shape),
                var.name
            );
            self.error(Code::E0201, at, msg);
            return Value::Error;
        }
        let len = e.sub(&s);
        let op = Op::For {
            var: sym,
            start: s,
            end: e,
            body: nodes,
            result,
        };
        let ty = Type::Seq { item: item_ty, len };
        Value::Seq(self.push_node(Node {
            op,
            args: vec![],
            ty,
            span,
        }))
    }

    /// Check each function that no call inlined once, with its shape variables as free
    /// dims; what that builds is dropped again, only its diagnostics are kept. [`check`]
    /// does this after the last item; the REPL right after an entry that defines a function.
    ///
    /// [`check`]: super::check
    pub fn check_uncalled_fns(&mut self, items: &[Item]) {
        for item in items {
            let Item::Fn(f) = item else { continue };
            if self.called.contains(&f.name.name) || self.declared.get(&f.name.name) != Some(&f.name.span) {
                continue;
            }
            let (nodes, dims, body) = (self.prog.nodes.len(), self.prog.dims.len(), self.blocks[0].len());
            let states = self.save_states();
            self.scopes.push(HashMap::default());
            let mut ok = true;
            for p in &f.params {
                let value = match &p.ty {
                    Some(TypeAnn::Shape(s)) => self.placeholder(s),
                    _ => Value::Error,
                };
                ok &= value != Value::Error || p.ty.is_none();
                self.note_value(p.name.span, &value);
                self.bind(&p.name.name, Entry::Value(value));
            }
            if ok {
                let result = self.block_value(&f.body, "the body of a function");
                if let Some(ret) = &f.ret {
                    let at = f.body.value.as_ref().map_or(f.body.span, |v| v.span);
                    self.check_declared(&result, ret, at, &format!("the result of `{}`", f.name.name));
                }
            }
            self.scopes.pop();
            self.prog.nodes.truncate(nodes);
            self.prog.dims.truncate(dims);
            self.blocks[0].truncate(body);
            self.restore_states(&states);
        }
    }

    /// A stand-in argument of an annotated shape, its unknown names made free dims.
    fn placeholder(&mut self, s: &ast::ShapeAnn) -> Value {
        for e in &s.dims {
            if let ExprKind::Name(n) = &e.kind {
                if self.lookup(n).is_none() {
                    let sym = self.dims_mut().declare(n, DimKind::Free { value: None });
                    self.bind(n, Entry::Dim(Poly::sym(sym)));
                }
            }
        }
        match self.shape_ann(s) {
            Some(shape) => {
                let ty = TensorType::row_major(shape, DType::F32);
                // Never evaluated: the node is truncated away with the rest of the check.
                self.push(Op::Literal(0.0), vec![], ty, s.span)
            }
            None => Value::Error,
        }
    }

    /// The nearest name in scope to `name`, for a "did you mean".
    pub(super) fn closest_name(&self, name: &str) -> Option<String> {
        let names = self.scopes.iter().flat_map(|s| s.keys().map(String::as_str));
        crate::suggest::closest(name, names).map(str::to_string)
    }

    pub(super) fn closest_callable(&self, name: &str) -> Option<String> {
        let fns = self.scopes.iter().flat_map(|s| {
            s.iter()
                .filter(|(_, e)| matches!(e, Entry::Fn(_)))
                .map(|(k, _)| k.as_str())
        });
        let ops = super::op_names().map(|op| -> &str { op });
        crate::suggest::closest(name, fns.chain(ops)).map(str::to_string)
    }
}

fn cmp_op(op: BinOp) -> Option<CmpOp> {
    Some(match op {
        BinOp::Eq => CmpOp::Eq,
        BinOp::Ne => CmpOp::Ne,
        BinOp::Lt => CmpOp::Lt,
        BinOp::Le => CmpOp::Le,
        BinOp::Gt => CmpOp::Gt,
        BinOp::Ge => CmpOp::Ge,
        _ => return None,
    })
}
