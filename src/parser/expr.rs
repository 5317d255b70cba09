//! Expressions: precedence climbing over the binary operators, then unary minus,
//! postfix methods and indexing, and primaries.

use super::Parser;
use crate::ast::{BinOp, Expr, ExprKind, Kwarg};
use crate::diagnostic::{Code, Diagnostic};
use crate::lexer::Token::{self, *};
use crate::source::Span;

/// Binding power of the binary operators; higher binds tighter. Range (`:`) is looser
/// than all of them and parsed apart, since it does not chain.
fn binary_op(token: Token) -> Option<(BinOp, u8)> {
    Some(match token {
        EqualEqual => (BinOp::Eq, 1),
        NotEqual => (BinOp::Ne, 1),
        Less => (BinOp::Lt, 1),
        LessEqual => (BinOp::Le, 1),
        Greater => (BinOp::Gt, 1),
        GreaterEqual => (BinOp::Ge, 1),
        Pipe => (BinOp::Or, 2),
        Amp => (BinOp::And, 3),
        Plus => (BinOp::Add, 4),
        Minus => (BinOp::Sub, 4),
        Star => (BinOp::Mul, 5),
        Slash => (BinOp::Div, 5),
        SlashSlash => (BinOp::FloorDiv, 5),
        Percent => (BinOp::Rem, 5),
        At => (BinOp::MatMul, 5),
        _ => return None,
    })
}

const COMPARISON: u8 = 1;
const SUM: u8 = 4;

fn boxed(expr: Expr) -> Box<Expr> {
    Box::new(expr)
}

impl Parser<'_> {
    /// expr = range
    fn parse_expr(&mut self) -> Option<Expr> {
        self.parse_range()
    }

    pub(super) fn expect_expr(&mut self) -> Expr {
        self.parse_expr().unwrap_or_else(|| self.missing("expression"))
    }

    /// range = comparison [ ":" comparison ]
    fn parse_range(&mut self) -> Option<Expr> {
        let start = self.parse_comparison()?;
        if self.maybe_one(Colon).is_none() {
            return Some(start);
        }
        let end = self.expect_comparison();
        let span = start.span.to(end.span);
        let kind = ExprKind::Range(Some(boxed(start)), Some(boxed(end)), None);
        Some(Expr { kind, span })
    }

    /// slice = [ comparison ] ":" [ comparison ] [ ":" [ comparison ] ] | comparison
    ///
    /// Only inside `[ ]`, where either end of a range may be left out and a second `:`
    /// gives a step, as in Python (`x[..., 1::2]`).
    fn expect_slice(&mut self) -> Expr {
        let start = match self.at(Colon) {
            true => None,
            false => Some(self.expect_comparison()),
        };
        let Some(colon) = self.maybe_one(Colon) else {
            return start.unwrap_or_else(|| self.missing("expression"));
        };
        let end = self.slice_part();
        let step = match self.maybe_one(Colon) {
            Some(_) => self.slice_part(),
            None => None,
        };
        let from = start.as_ref().map_or(colon, |e| e.span);
        let span = from.to(self.last);
        let kind = ExprKind::Range(start.map(boxed), end.map(boxed), step.map(boxed));
        Expr { kind, span }
    }

    /// The end or step of a slice, absent before `:`, `,` or `]`.
    fn slice_part(&mut self) -> Option<Expr> {
        match self.peek() {
            Colon | Comma | RightSquare => None,
            _ => Some(self.expect_comparison()),
        }
    }

    /// comparison = sum [ ( "==" | "!=" | "<" | "<=" | ">" | ">=" ) sum ]
    fn parse_comparison(&mut self) -> Option<Expr> {
        self.parse_binary(COMPARISON)
    }

    fn expect_comparison(&mut self) -> Expr {
        self.parse_comparison()
            .unwrap_or_else(|| self.missing("expression"))
    }

    /// sum = product { ( "+" | "-" ) product }
    fn parse_sum(&mut self) -> Option<Expr> {
        self.parse_binary(SUM)
    }

    pub(super) fn expect_sum(&mut self) -> Expr {
        self.parse_sum().unwrap_or_else(|| self.missing("expression"))
    }

    /// product = unary { ( "*" | "/" | "%" | "@" ) unary }, and with [`Self::parse_sum`]
    /// and [`Self::parse_comparison`] one precedence-climbing loop: operators binding at
    /// least `min` are taken, left-associative. A chain of comparisons (`a == b == c`) is
    /// reported once and parsed as if they were left-associative.
    fn parse_binary(&mut self, min: u8) -> Option<Expr> {
        let mut lhs = self.parse_unary()?;
        let mut nested = 0;
        let mut comparisons = 0;
        while let Some((op, power)) = binary_op(self.peek()).filter(|&(_, p)| p >= min) {
            comparisons += usize::from(op.is_comparison());
            if comparisons == 2 {
                let d = Diagnostic::error(Code::E0002, self.span(), "comparison operators cannot be chained")
                    .with_hint("use parentheses to say which comparison comes first");
                self.report(d);
            }
            if !self.enter(false) {
                break;
            }
            nested += 1;
            self.bump();
            let rhs = self
                .parse_binary(power + 1)
                .unwrap_or_else(|| self.missing("expression"));
            let span = lhs.span.to(rhs.span);
            let kind = ExprKind::Binary(op, boxed(lhs), boxed(rhs));
            lhs = Expr { kind, span };
        }
        self.depth -= nested;
        Some(lhs)
    }

    /// unary = ( "-" | "~" ) unary | power
    fn parse_unary(&mut self) -> Option<Expr> {
        let not = match self.peek() {
            Minus => false,
            Tilde => true,
            _ => return self.parse_power(),
        };
        if !self.enter(true) {
            return Some(self.missing("expression"));
        }
        let op = self.bump();
        let operand = self.parse_unary().unwrap_or_else(|| self.missing("expression"));
        self.leave(true);
        let span = op.to(operand.span);
        let kind = match not {
            true => ExprKind::Not(boxed(operand)),
            false => ExprKind::Neg(boxed(operand)),
        };
        Some(Expr { kind, span })
    }

    /// power = postfix [ "**" unary ]: right-associative and tighter than a unary minus on
    /// its left (`-x ** 2` is `-(x ** 2)`), as in Python; `x ** -0.5` is allowed.
    fn parse_power(&mut self) -> Option<Expr> {
        let base = self.parse_postfix()?;
        if !self.at(StarStar) || !self.enter(true) {
            return Some(base);
        }
        self.bump();
        let exponent = self.parse_unary().unwrap_or_else(|| self.missing("expression"));
        self.leave(true);
        let span = base.span.to(exponent.span);
        let kind = ExprKind::Binary(BinOp::Pow, boxed(base), boxed(exponent));
        Some(Expr { kind, span })
    }

    /// postfix = primary { method | index }
    fn parse_postfix(&mut self) -> Option<Expr> {
        if !self.enter(true) {
            return Some(self.missing("expression"));
        }
        let mut expr = self.parse_primary();
        let mut chained = 0;
        while expr.is_some() && matches!(self.peek(), Dot | LeftSquare) && self.enter(false) {
            chained += 1;
            expr = expr.map(|e| match self.peek() {
                Dot => self.parse_method(e),
                _ => self.parse_index(e),
            });
        }
        self.depth -= chained;
        self.leave(true);
        expr
    }

    /// method = "." name [ "(" args ")" ]  (without the call, an attribute: `x.shape`)
    fn parse_method(&mut self, receiver: Expr) -> Expr {
        let dot = self.bump();
        let Some(method) = self.expect_name() else {
            return self.error_node(receiver.span.to(dot));
        };
        if self.peek() != LeftParen {
            let span = receiver.span.to(method.span);
            let kind = ExprKind::Attribute {
                receiver: boxed(receiver),
                name: method,
            };
            return Expr { kind, span };
        }
        let Some(open) = self.expect_one(LeftParen) else {
            return self.error_node(receiver.span.to(method.span));
        };
        let (args, kwargs) = self.parse_call_args();
        let close = self.expect_closing(open, RightParen).unwrap_or(self.last);
        let span = receiver.span.to(close);
        let kind = ExprKind::Method {
            receiver: boxed(receiver),
            method,
            args,
            kwargs,
        };
        Expr { kind, span }
    }

    /// index = "[" slice { "," slice } [ "," ] "]"
    fn parse_index(&mut self, base: Expr) -> Expr {
        let open = self.bump();
        let indices = self.parse_list(RightSquare, |p| Some(p.expect_slice()));
        if indices.is_empty() {
            self.error_expected("expression");
        }
        let close = self.expect_closing(open, RightSquare).unwrap_or(self.last);
        let span = base.span.to(close);
        let kind = ExprKind::Index {
            base: boxed(base),
            indices,
        };
        Expr { kind, span }
    }

    /// primary = int | float | "True" | "False" | "None" | "inf" | "..." | string | call
    ///         | name | tuple | list | for
    fn parse_primary(&mut self) -> Option<Expr> {
        let span = self.span();
        let kind = match self.peek() {
            True | False | NoneLit | Inf | Ellipsis => {
                let token = self.peek();
                self.bump();
                let kind = match token {
                    True => ExprKind::Bool(true),
                    False => ExprKind::Bool(false),
                    NoneLit => ExprKind::NoneLit,
                    Inf => ExprKind::Inf,
                    _ => ExprKind::Ellipsis,
                };
                return Some(Expr { kind, span });
            }
            Str => {
                let s = self.expect_string()?;
                return Some(Expr {
                    kind: ExprKind::Str(s.value),
                    span: s.span,
                });
            }
            LeftSquare => return Some(self.parse_list_literal()),
            Int => {
                self.bump();
                let value = self.text(span).parse();
                value.map_or(ExprKind::Error, ExprKind::Int)
            }
            Float => {
                self.bump();
                let value = self.text(span).parse();
                value.map_or(ExprKind::Error, ExprKind::Float)
            }
            Ident if self.peek_second() == LeftParen => return Some(self.parse_call()),
            Ident => {
                self.bump();
                ExprKind::Name(self.text(span).to_string())
            }
            LeftParen => return Some(self.parse_tuple()),
            // Characters the lexer rejected, and reported: a broken expression.
            Error => {
                self.bump();
                ExprKind::Error
            }
            For => return Some(self.parse_for()),
            _ => return None,
        };
        Some(Expr { kind, span })
    }

    /// call = name "(" args ")"
    fn parse_call(&mut self) -> Expr {
        let func = self.name_here();
        self.bump();
        let open = self.bump();
        let (args, kwargs) = self.parse_call_args();
        let close = self.expect_closing(open, RightParen).unwrap_or(self.last);
        let span = func.span.to(close);
        Expr {
            kind: ExprKind::Call { func, args, kwargs },
            span,
        }
    }

    /// call_args = [ arg { "," arg } [ "," ] ], arg = [ word "=" ] expr: positional
    /// arguments first. Any name or keyword before `=` names a parameter (`dim=-1`).
    fn parse_call_args(&mut self) -> (Vec<Expr>, Vec<Kwarg>) {
        let mut args = Vec::new();
        let mut kwargs: Vec<Kwarg> = Vec::new();
        let items = self.parse_list(RightParen, |p| {
            let named = (p.at(Ident) || p.peek().is_keyword()) && p.peek_second() == Equal;
            if !named {
                return Some((None, p.expect_expr()));
            }
            let name = p.name_here();
            p.bump();
            p.bump();
            Some((Some(name), p.expect_expr()))
        });
        for (name, value) in items {
            match name {
                Some(name) => kwargs.push(Kwarg { name, value }),
                None if !kwargs.is_empty() => {
                    let d = Diagnostic::error(
                        Code::E0002,
                        value.span,
                        "positional argument after a keyword argument",
                    )
                    .with_hint("put the positional arguments first, as Python requires");
                    self.report(d);
                }
                None => args.push(value),
            }
        }
        (args, kwargs)
    }

    /// list = "[" [ expr { "," expr } [ "," ] ] "]"
    fn parse_list_literal(&mut self) -> Expr {
        let open = self.bump();
        let items = self.parse_list(RightSquare, |p| Some(p.expect_expr()));
        let close = self.expect_closing(open, RightSquare).unwrap_or(self.last);
        Expr {
            kind: ExprKind::List(items),
            span: open.to(close),
        }
    }

    /// args = [ expr { "," expr } [ "," ] ]
    fn parse_args(&mut self) -> Vec<Expr> {
        self.parse_list(RightParen, |p| Some(p.expect_expr()))
    }

    /// tuple = "(" expr { "," expr } [ "," ] ")"
    ///
    /// `(e)` is `e` (with the parentheses in its span); `(e,)` is a tuple of one.
    fn parse_tuple(&mut self) -> Expr {
        let open = self.bump();
        let mut items = self.parse_args();
        let trailing_comma = self.after_comma();
        if items.is_empty() {
            self.error_expected("expression");
        }
        let close = self.expect_closing(open, RightParen).unwrap_or(self.last);
        let span = open.to(close);
        if items.is_empty() {
            return self.error_node(span);
        }
        match items.pop() {
            Some(only) if items.is_empty() && !trailing_comma => Expr {
                kind: only.kind,
                span,
            },
            last => Expr {
                kind: ExprKind::Tuple(items.into_iter().chain(last).collect()),
                span,
            },
        }
    }

    /// for = "for" name "in" sum ".." sum block
    fn parse_for(&mut self) -> Expr {
        let start = self.bump();
        self.parse_for_rest(start)
            .unwrap_or_else(|| self.error_node(start.to(self.last)))
    }

    fn parse_for_rest(&mut self, start: Span) -> Option<Expr> {
        let var = self.expect_name()?;
        self.expect_one(In)?;
        let from = self.expect_sum();
        self.expect_one(DotDot)?;
        let to = self.expect_sum();
        let body = self.expect_block()?;
        let span = start.to(body.span);
        let kind = ExprKind::For {
            var,
            start: boxed(from),
            end: boxed(to),
            body,
        };
        Some(Expr { kind, span })
    }
}
