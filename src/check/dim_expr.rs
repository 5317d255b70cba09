//! Dim expressions: the integer sub-language of sizes, axes and ranges.

use super::{Checker, Entry, Value};
use crate::ast::{BinOp, Expr, ExprKind, Kwarg};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::{DivError, Poly};

impl Checker {
    /// The normal form of a dim expression, or `None` after reporting why there is none.
    pub(super) fn dim_expr(&mut self, e: &Expr) -> Option<Poly> {
        if let Some((x, d)) = size_query(e) {
            return self.size_of(x, d);
        }
        match &e.kind {
            ExprKind::Int(n) => match i64::try_from(*n) {
                Ok(n) => Some(Poly::int(n)),
                Err(_) => {
                    self.error(Code::E0208, e.span, format!("integer {n} is too large"));
                    None
                }
            },
            ExprKind::Name(name) => self.dim_name(name, e),
            ExprKind::Neg(x) => Some(self.dim_expr(x)?.neg()),
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.dim_expr(a), self.dim_expr(b));
                self.dim_binary(*op, &a?, &b?, e)
            }
            ExprKind::Error => None,
            _ => {
                self.error(
                    Code::E0208,
                    e.span,
                    "expected a dim expression (dims, integers and `+ - * / %`)",
                );
                None
            }
        }
    }

    /// `x.size(d)`: the symbolic size of axis `d` of `x`.
    pub(super) fn size_of(&mut self, x: &Expr, d: &Expr) -> Option<Poly> {
        let x = self.tensor_arg(x, "the tensor of `size`")?;
        let t = self.ty(x).clone();
        let axis = self.axis(d, t.rank(), false)?;
        Some(t.shape[axis].clone())
    }

    /// Whether `e` is made only of dims, integers, `size` and `+ - * // %`: a `let` of
    /// it binds a dim, usable wherever a dim is.
    pub(super) fn is_dim_only(&self, e: &Expr) -> bool {
        if size_query(e).is_some() {
            return true;
        }
        match &e.kind {
            ExprKind::Int(_) => true,
            ExprKind::Name(n) => matches!(self.lookup(n), Some(Entry::Dim(_))),
            ExprKind::Neg(x) => self.is_dim_only(x),
            ExprKind::Binary(op, a, b) => {
                matches!(
                    op,
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::FloorDiv | BinOp::Rem
                ) && self.is_dim_only(a)
                    && self.is_dim_only(b)
            }
            _ => false,
        }
    }

    fn dim_name(&mut self, name: &str, e: &Expr) -> Option<Poly> {
        match self.lookup(name) {
            Some(Entry::Dim(p)) => {
                let p = p.clone();
                self.note_dim(e.span, &p);
                Some(p)
            }
            Some(Entry::Value(Value::Error)) => None,
            Some(Entry::Value(v)) => {
                let kind = v.kind_name();
                self.error(
                    Code::E0208,
                    e.span,
                    format!("expected a dim expression, found {kind} `{name}`"),
                );
                None
            }
            Some(Entry::Fn(_)) => {
                self.error(
                    Code::E0208,
                    e.span,
                    format!("expected a dim expression, found function `{name}`"),
                );
                None
            }
            None => {
                self.error(Code::E0101, e.span, format!("unknown dim `{name}`"));
                None
            }
        }
    }

    fn dim_binary(&mut self, op: BinOp, a: &Poly, b: &Poly, e: &Expr) -> Option<Poly> {
        match op {
            BinOp::Add => Some(a.add(b)),
            BinOp::Sub => Some(a.sub(b)),
            BinOp::Mul => Some(a.mul(b)),
            // `//` between dims is `/`, with the same proof of exactness.
            BinOp::Div | BinOp::FloorDiv => match self.prog.dims.div(a, b) {
                Ok(q) => Some(q),
                Err(err) => {
                    self.report(self.division_error(err, a, b, e));
                    None
                }
            },
            BinOp::Rem => match self.prog.dims.rem(a, b) {
                Ok(r) => Some(r),
                Err(err) => {
                    self.report(self.division_error(err, a, b, e));
                    None
                }
            },
            _ => {
                let sym = op.symbol();
                self.error(
                    Code::E0208,
                    e.span,
                    format!("`{sym}` is not an operation on dims"),
                );
                None
            }
        }
    }

    /// E0205 for a division that is not provably exact. When the constant values decide it,
    /// the message gives them and the hint names the `--dim` to change; otherwise the hint
    /// is the `assert` that would prove it.
    pub(super) fn division_error(&self, err: DivError, a: &Poly, b: &Poly, e: &Expr) -> Diagnostic {
        let values = (self.const_value(a), self.const_value(b));
        let (a_text, b_text) = (self.dim_text(a), self.dim_text(b));
        match (err, values) {
            (DivError::ByZero, _) => {
                Diagnostic::error(Code::E0205, e.span, format!("division of `{a_text}` by zero"))
            }
            (DivError::NotExact, (Some(va), Some(vb))) => {
                let msg = format!(
                    "{} is not a multiple of {}",
                    valued(&a_text, va),
                    valued(&b_text, vb)
                );
                let d = Diagnostic::error(Code::E0205, e.span, msg);
                match (self.overridden(a), self.overridden(b)) {
                    (Some(name), _) if name == a_text => {
                        let below = va - va.rem_euclid(vb);
                        let near = match below > 0 {
                            true => format!("{below} or {}", below + vb),
                            false => format!("{}", below + vb),
                        };
                        d.with_hint(format!("give `--dim {name}` a multiple of {vb}, such as {near}"))
                    }
                    (Some(name), _) => d.with_hint(format!(
                        "give `--dim {name}` a value that makes `{a_text}` a multiple of {vb}"
                    )),
                    (None, Some(name)) if name == b_text => {
                        d.with_hint(format!("give `--dim {name}` a divisor of {va}"))
                    }
                    (None, Some(name)) => d.with_hint(format!(
                        "give `--dim {name}` a value that makes `{b_text}` divide {va}"
                    )),
                    (None, None) => d,
                }
            }
            (DivError::NotExact, _) => Diagnostic::error(
                Code::E0205,
                e.span,
                format!("cannot prove that `{b_text}` divides `{a_text}`"),
            )
            .with_hint(format!(
                "add `assert {} % {} == 0` above this line if it always holds",
                paren(&a_text, false),
                paren(&b_text, true)
            )),
        }
    }

    /// The value of `p` when it depends on constant dims only.
    fn const_value(&self, p: &Poly) -> Option<i64> {
        self.prog.dims.with_consts(p).as_int()
    }

    /// A constant dim of `p` whose value a `--dim` gave, if any.
    fn overridden(&self, p: &Poly) -> Option<String> {
        p.syms()
            .into_iter()
            .map(|s| &self.prog.dims.info(s).name)
            .find(|name| self.overrides.iter().any(|o| o.name == **name))
            .cloned()
    }

    /// An axis argument: a constant integer, negative counting from the end, for a tensor of
    /// rank `rank`. `insert` allows `rank` itself (an axis that `unsqueeze`/`stack` adds).
    pub(super) fn axis(&mut self, e: &Expr, rank: usize, insert: bool) -> Option<usize> {
        let p = self.dim_expr(e)?;
        let Some(a) = self.prog.dims.with_consts(&p).as_int() else {
            let text = self.dim_text(&p);
            self.error(
                Code::E0204,
                e.span,
                format!("an axis must be a constant integer, found `{text}`"),
            );
            return None;
        };
        let n = rank as i64 + i64::from(insert);
        if a < -n || a >= n {
            let range = if n == 0 {
                "there are none".to_string()
            } else {
                format!("expected {}..={}", -n, n - 1)
            };
            self.error(
                Code::E0204,
                e.span,
                format!("axis {a} is out of range for rank {rank} ({range})"),
            );
            return None;
        }
        Some(if a < 0 { (a + n) as usize } else { a as usize })
    }
}

/// The tensor and axis of a size query, when `e` is one: `x.shape[d]`, `x.size(d)`,
/// `x.size(dim=d)`, `size(x, d)` or `size(x, dim=d)`, all the dim of axis `d` of `x`.
pub(super) fn size_query(e: &Expr) -> Option<(&Expr, &Expr)> {
    match &e.kind {
        ExprKind::Index { base, indices } => {
            let ExprKind::Attribute { receiver, name } = &base.kind else {
                return None;
            };
            match indices.as_slice() {
                [d] if name.name == "shape" && !matches!(d.kind, ExprKind::Range(..)) => Some((receiver, d)),
                _ => None,
            }
        }
        ExprKind::Method {
            receiver,
            method,
            args,
            kwargs,
        } if method.name == "size" => Some((receiver, size_axis(args, kwargs)?)),
        ExprKind::Call { func, args, kwargs } if func.name == "size" => {
            let (x, rest) = args.split_first()?;
            Some((x, size_axis(rest, kwargs)?))
        }
        _ => None,
    }
}

/// The axis argument of `size`, given by position or as `dim=`.
fn size_axis<'e>(args: &'e [Expr], kwargs: &'e [Kwarg]) -> Option<&'e Expr> {
    match (args, kwargs) {
        ([d], []) => Some(d),
        ([], [k]) if k.name.name == "dim" => Some(&k.value),
        _ => None,
    }
}

/// `a` as an operand of `%`: a dividend needs parentheses when it is a sum, a divisor
/// whenever it is not a single name or number.
fn paren(a: &str, divisor: bool) -> String {
    let compound = if divisor {
        a.contains(' ')
    } else {
        a.contains(" + ") || a.contains(" - ")
    };
    if compound {
        format!("({a})")
    } else {
        a.to_string()
    }
}

/// `` `D = 100` `` for a dim, `` `D * 2` = 200 `` for a larger expression.
fn valued(text: &str, value: i64) -> String {
    match text.parse::<i64>() {
        Ok(_) => format!("`{text}`"),
        Err(_) if text.contains(' ') => format!("`{text}` = {value}"),
        Err(_) => format!("`{text} = {value}`"),
    }
}
