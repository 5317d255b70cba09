//! Token-level helpers shared by the grammar rules: looking ahead, consuming, lists,
//! closers, names, strings, and reporting errors.

use super::{Parser, MAX_DEPTH, MAX_NESTING};
use crate::ast::{Expr, ExprKind, Ident, StrLit};
use crate::diagnostic::{Code, Diagnostic};
use crate::lexer::Token::{self, *};
use crate::source::Span;

impl Parser<'_> {
    // ---- tokens and names ----

    /// Items separated by `,`, with an optional trailing `,`, up to (not including) `close`.
    /// Stops at the first item that is missing or broken.
    pub(super) fn parse_list<T>(
        &mut self,
        close: Token,
        mut item: impl FnMut(&mut Self) -> Option<T>,
    ) -> Vec<T> {
        let mut items = Vec::new();
        while !self.at(close) && !self.at(Eof) {
            match item(self) {
                Some(x) => items.push(x),
                None => break,
            }
            if self.maybe_one(Comma).is_none() {
                break;
            }
        }
        items
    }

    /// The closer of a bracketed list. Inside a list, a token other than the closer
    /// could also have been a `,`, so the message names both; at a line's end it
    /// names only the closer, the likelier fix.
    pub(super) fn expect_closing(&mut self, open: Span, close: Token) -> Option<Span> {
        if let Some(span) = self.maybe_one(close) {
            return Some(span);
        }
        let symbol = close.symbol().unwrap_or("?");
        let what = match self.peek() {
            Newline | Eof => format!("`{symbol}`"),
            _ if close == RightBrace => format!("`{symbol}`"),
            _ => format!("`,` or `{symbol}`"),
        };
        let mut d = self.expected(&what);
        if self.at(Eof) || self.at_cut() {
            let label = format!("unclosed `{}`", self.text(open));
            d = d.with_label(open, label);
        }
        self.error(d);
        None
    }

    pub(super) fn expect_name(&mut self) -> Option<Ident> {
        if !self.at(Ident) {
            self.error_expected("name");
            return None;
        }
        let name = self.name_here();
        self.bump();
        Some(name)
    }

    pub(super) fn name_here(&self) -> Ident {
        let span = self.span();
        let name = self.text(span).to_string();
        Ident { name, span }
    }

    /// A string literal with `\"` and `\\` resolved. The lexer has reported any other
    /// escape and a missing closing quote; both are kept as written.
    pub(super) fn expect_string(&mut self) -> Option<StrLit> {
        if !self.at(Str) {
            self.error_expected("string");
            return None;
        }
        let span = self.bump();
        let value = unescape(self.text(span));
        Some(StrLit { value, span })
    }

    pub(super) fn expect_one(&mut self, token: Token) -> Option<Span> {
        let span = self.maybe_one(token);
        if span.is_none() {
            self.error_expected(&format!("`{}`", token.symbol().unwrap_or("?")));
        }
        span
    }

    pub(super) fn maybe_one(&mut self, token: Token) -> Option<Span> {
        self.at(token).then(|| self.bump())
    }

    pub(super) fn skip_newlines(&mut self) {
        while self.maybe_one(Newline).is_some() {}
    }

    pub(super) fn peek(&self) -> Token {
        self.tokens[self.pos].0
    }

    pub(super) fn peek_second(&self) -> Token {
        self.tokens.get(self.pos + 1).map_or(Eof, |t| t.0)
    }

    pub(super) fn span(&self) -> Span {
        self.tokens[self.pos].1
    }

    pub(super) fn at(&self, token: Token) -> bool {
        self.peek() == token
    }

    /// Whether a block left open ends here (see [`super::layout::block_cuts`]).
    pub(super) fn at_cut(&self) -> bool {
        self.cuts.binary_search(&self.pos).is_ok()
    }

    pub(super) fn after_comma(&self) -> bool {
        self.pos > 0 && self.tokens[self.pos - 1].0 == Comma
    }

    /// Consumes the current token (never [`Token::Eof`]) and returns its span.
    pub(super) fn bump(&mut self) -> Span {
        let span = self.span();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
            self.last = span;
        }
        span
    }

    pub(super) fn text(&self, span: Span) -> &str {
        &self.src[span.range()]
    }

    // ---- errors ----

    /// Counts one more node wrapping the current one, or reports that there are too many.
    /// `recursive` when the parser recurses to parse it (brackets, blocks, unary minus,
    /// types) rather than loops (chains of operators, methods and indexing); recursion has
    /// the lower bound, [`MAX_NESTING`], as each level takes kilobytes of stack in a debug
    /// build. Undone by [`Self::leave`].
    pub(super) fn enter(&mut self, recursive: bool) -> bool {
        if self.depth < MAX_DEPTH && (!recursive || self.nesting < MAX_NESTING) {
            self.depth += 1;
            self.nesting += usize::from(recursive);
            return true;
        }
        let d = Diagnostic::error(Code::E0002, self.span(), "expression nested too deeply")
            .with_hint("split it into several `let` bindings");
        self.error(d);
        false
    }

    pub(super) fn leave(&mut self, recursive: bool) {
        self.depth -= 1;
        self.nesting -= usize::from(recursive);
    }

    /// Reports that `what` was expected here and returns the node standing in for it.
    pub(super) fn missing(&mut self, what: &str) -> Expr {
        self.error_expected(what);
        self.error_node(self.span())
    }

    pub(super) fn error_node(&self, span: Span) -> Expr {
        Expr {
            kind: ExprKind::Error,
            span,
        }
    }

    pub(super) fn error_expected(&mut self, what: &str) {
        let d = self.expected(what);
        self.error(d);
    }

    /// "expected `what`, found <the current token>", at the current token.
    pub(super) fn expected(&self, what: &str) -> Diagnostic {
        let found = self.describe_current();
        Diagnostic::error(
            Code::E0002,
            self.span(),
            format!("expected {what}, found {found}"),
        )
    }

    pub(super) fn describe_current(&self) -> String {
        let text = self.text(self.span());
        match self.peek() {
            Newline => "newline".to_string(),
            Eof => "end of file".to_string(),
            Ident => format!("name `{text}`"),
            Int => format!("integer `{text}`"),
            Float => format!("number `{text}`"),
            Str => "string".to_string(),
            token if token.is_keyword() => format!("keyword `{text}`"),
            _ => format!("`{text}`"),
        }
    }

    /// Reports the first error of a statement and starts recovering. At a character the
    /// lexer rejected the lexer has said all there is to say, so this only recovers.
    pub(super) fn error(&mut self, diagnostic: Diagnostic) {
        if !self.at(Error) {
            self.report(diagnostic);
        }
        self.recovering = true;
    }

    /// Reports an error after which parsing can go on as if nothing happened.
    pub(super) fn report(&mut self, diagnostic: Diagnostic) {
        if !self.recovering {
            self.diagnostics.push(diagnostic);
        }
    }
}

/// The contents of a string token: after the opening `"`, up to the closing one if any.
fn unescape(text: &str) -> String {
    let mut value = String::new();
    let mut chars = text.chars().skip(1);
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => value.push(e),
                other => value.extend(std::iter::once('\\').chain(other)),
            },
            c => value.push(c),
        }
    }
    value
}
