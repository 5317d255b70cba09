//! Dim expressions: the integer sub-language of sizes, axes and ranges.

use super::{Checker, Entry, Value};
use crate::ast::{BinOp, Expr, ExprKind};
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::{DivError, Poly};

impl Checker {
    /// The normal form of a dim expression, or `None` after reporting why there is none.
    pub(super) fn dim_expr(&mut self, e: &Expr) -> Option<Poly> {
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

    fn dim_name(&mut self, name: &str, e: &Expr) -> Option<Poly> {
        match self.lookup(name) {
            Some(Entry::Dim(p)) => Some(p.clone()),
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
            BinOp::Div => match self.prog.dims.div(a, b) {
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

    /// E0205 for a division that is not provably exact, with the `assert` that would fix it.
    pub(super) fn division_error(&self, err: DivError, a: &Poly, b: &Poly, e: &Expr) -> Diagnostic {
        let (a, b) = (self.dim_text(a), self.dim_text(b));
        match err {
            DivError::ByZero => Diagnostic::error(Code::E0205, e.span, format!("division of `{a}` by zero")),
            DivError::NotExact => Diagnostic::error(
                Code::E0205,
                e.span,
                format!("cannot prove that `{b}` divides `{a}`"),
            )
            .with_hint(format!(
                "add `assert {} % {} == 0` above this line if it always holds",
                paren(&a, false),
                paren(&b, true)
            )),
        }
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
