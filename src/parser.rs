//! Recursive descent from tokens to the [`ast`](crate::ast), with precedence climbing for
//! binary operators. The grammar is `grammar/attn.ebnf`; each rule there is one function
//! here, named after it.
//!
//! Parsing never fails. A syntax error is reported as E0002 at the offending token, the
//! parser marks itself as recovering (which silences the follow-on errors of the same
//! statement), finishes the statement as best it can, and skips to the next newline at
//! bracket depth 0 or the `}` closing the current block. A missing expression becomes an
//! [`ExprKind::Error`], so `let x = <broken>` still binds `x` and later uses of `x` raise no
//! second error.
//!
//! Submodules: `layout` decides which newlines end a statement, `expr` parses expressions,
//! `tokens` holds the token-level helpers and error reporting.
//!
//! Naming conventions (after gleam's parser):
//! - `parse_x` parses an x if one starts here. `None` means none does, or, when the form
//!   started but broke off, that the error is reported and the parser is recovering.
//! - `expect_x` parses an x that must be here, reporting "expected x, found .." if absent.
//! - `maybe_one` consumes one token if it is the one asked for.

use crate::ast::{
    self, Block, DimDecl, ExprKind, FnDecl, FnParam, Item, Pattern, Program, ShapeAnn, Stmt, TypeAnn,
};
use crate::diagnostic::Diagnostic;
use crate::lexer::{self, Token};
use crate::source::Span;
use layout::{block_cuts, layout};
use std::mem;
use Token::*;

mod expr;
mod layout;
#[cfg(test)]
mod tests;
mod tokens;

/// How deeply expression and type nodes may nest, counting every node that wraps another
/// (so `a + a + .. + a` and `x.f().f()..` count too). Later stages recurse over the tree,
/// and so does its `Drop`; the bound keeps any input from overflowing their stack.
const MAX_DEPTH: usize = 256;

/// How deeply brackets, blocks and unary minus may nest. The parser recurses for each
/// level, using about 10 KiB of stack per level in a debug build; 64 levels stay well
/// inside a 2 MiB test thread and far beyond what a real program needs.
const MAX_NESTING: usize = 64;

/// Parses a whole file or REPL entry. Never fails and never panics: what cannot be parsed
/// is reported and left out (or stood in for by [`ExprKind::Error`]). The diagnostics,
/// lexical (E0001) and syntactic (E0002), come in source order.
pub fn parse(src: &str) -> (Program, Vec<Diagnostic>) {
    parse_at(src, 0)
}

/// Parses the tail of `src` from byte `start` on, with every span (of the AST and the
/// diagnostics) an offset into the whole of `src`. The REPL keeps its session as one
/// growing text and parses each entry at its offset, so that the spans of all entries, and
/// of the functions one entry defines and a later one calls, point into one text.
/// `parse_at(src, 0)` is `parse(src)`; a `start` past the end or off a character boundary
/// parses nothing.
pub fn parse_at(src: &str, start: usize) -> (Program, Vec<Diagnostic>) {
    let start = if src.is_char_boundary(start) {
        start
    } else {
        src.len()
    };
    let shift = |span: Span| Span::new(span.start + start, span.end + start);
    let (mut tokens, mut diagnostics) = lexer::lex(&src[start..]);
    for (_, span) in &mut tokens {
        *span = shift(*span);
    }
    for d in &mut diagnostics {
        d.span = shift(d.span);
        for label in &mut d.labels {
            label.span = shift(label.span);
        }
    }
    let tokens = layout(tokens, src.len());
    let mut parser = Parser {
        src,
        cuts: block_cuts(&tokens, src),
        tokens,
        pos: 0,
        last: Span::new(start, start),
        depth: 0,
        nesting: 0,
        recovering: false,
        diagnostics: Vec::new(),
    };
    let program = parser.parse_program();
    diagnostics.append(&mut parser.diagnostics);
    diagnostics.sort_by_key(|d| d.span.start);
    (program, diagnostics)
}

struct Parser<'src> {
    src: &'src str,
    /// Ends with [`Token::Eof`], which is never consumed.
    tokens: Vec<(Token, Span)>,
    /// Where blocks left open end (see [`block_cuts`]), sorted.
    cuts: Vec<usize>,
    pos: usize,
    /// The span of the last consumed token: where a node ends when its closer is missing.
    last: Span,
    /// How many wrapping nodes enclose the current one (see [`MAX_DEPTH`]).
    depth: usize,
    /// How many of those the parser is recursing through (see [`MAX_NESTING`]).
    nesting: usize,
    /// Set by the first error of a statement; silences errors until the statement is
    /// skipped, since they are mostly echoes of the first.
    recovering: bool,
    diagnostics: Vec<Diagnostic>,
}

impl Parser<'_> {
    // ---- items ----

    /// program = { item newline }
    fn parse_program(&mut self) -> Program {
        let mut items = Vec::new();
        loop {
            self.skip_newlines();
            if self.at(Eof) {
                break;
            }
            items.extend(self.parse_item());
            self.finish_statement(false);
        }
        Program { items }
    }

    /// item = dim | assert | param | input | state | fn | let | output | expr
    fn parse_item(&mut self) -> Option<Item> {
        match self.peek() {
            // `state` is a keyword only where a declaration starts, so it stays a name.
            Ident if self.name_here().name == "state" && self.peek_second() == Ident => {
                self.parse_state().map(Item::State)
            }
            Dim => self.parse_dim().map(Item::Dim),
            Assert => Some(Item::Assert(self.parse_assert())),
            Param => self.parse_param().map(Item::Param),
            Input => self.parse_input().map(Item::Input),
            Fn => self.parse_fn().map(Item::Fn),
            Let => self.parse_let().map(Item::Let),
            Output => self.parse_output().map(Item::Output),
            Ident if self.name_here().name == "def" => {
                let d = Diagnostic::error(
                    crate::diagnostic::Code::E0002,
                    self.span(),
                    "`def` is Python's: a function of this language is an `fn`",
                )
                .with_hint(
                    "write `fn name(x: [B, N, D]) -> [B, N, D] { .. }`, its last expression its value",
                );
                self.error(d);
                None
            }
            _ => Some(self.expect_expr())
                .filter(|e| e.kind != ExprKind::Error)
                .map(Item::Expr),
        }
    }

    /// dim = "dim" dim_decl { "," dim_decl }
    ///
    /// A broken entry keeps the ones before it, so their later uses raise no errors.
    fn parse_dim(&mut self) -> Option<Vec<DimDecl>> {
        self.bump();
        let mut decls = vec![self.parse_dim_decl()?];
        while self.maybe_one(Comma).is_some() {
            match self.parse_dim_decl() {
                Some(decl) => decls.push(decl),
                None => break,
            }
        }
        Some(decls)
    }

    /// dim_decl = name [ "=" expr ]
    fn parse_dim_decl(&mut self) -> Option<DimDecl> {
        let name = self.expect_name()?;
        let value = self.maybe_one(Equal).map(|_| self.expect_expr());
        let span = value.as_ref().map_or(name.span, |v| name.span.to(v.span));
        Some(DimDecl { name, value, span })
    }

    /// assert = "assert" expr
    fn parse_assert(&mut self) -> ast::Assert {
        let start = self.bump();
        let cond = self.expect_expr();
        let span = start.to(cond.span);
        ast::Assert { cond, span }
    }

    /// param = "param" name ":" shape [ "=" string ]
    fn parse_param(&mut self) -> Option<ast::Param> {
        let start = self.bump();
        let name = self.expect_name()?;
        self.expect_one(Colon)?;
        let shape = self.expect_shape()?;
        let key = self.maybe_one(Equal).and_then(|_| self.expect_string());
        let span = start.to(self.last);
        Some(ast::Param {
            name,
            shape,
            key,
            span,
        })
    }

    /// input = "input" name ":" shape [ name ]
    fn parse_input(&mut self) -> Option<ast::Input> {
        let start = self.bump();
        let name = self.expect_name()?;
        self.expect_one(Colon)?;
        let shape = self.expect_shape()?;
        let dtype = match self.at(Ident) {
            true => Some(self.expect_name()?),
            false => None,
        };
        let span = start.to(dtype.as_ref().map_or(shape.span, |d| d.span));
        Some(ast::Input {
            name,
            shape,
            dtype,
            span,
        })
    }

    /// state = "state" name ":" shape
    fn parse_state(&mut self) -> Option<ast::Input> {
        let start = self.bump();
        let name = self.expect_name()?;
        self.expect_one(Colon)?;
        let shape = self.expect_shape()?;
        Some(ast::Input {
            name,
            span: start.to(shape.span),
            shape,
            dtype: None,
        })
    }

    /// fn = "fn" name "(" [ fn_param { "," fn_param } [ "," ] ] ")" [ "->" type ] block
    fn parse_fn(&mut self) -> Option<FnDecl> {
        let start = self.bump();
        let name = self.expect_name()?;
        let open = self.expect_one(LeftParen)?;
        let params = self.parse_list(RightParen, Self::parse_fn_param);
        self.expect_closing(open, RightParen)?;
        let ret = match self.maybe_one(RArrow) {
            Some(_) => Some(self.expect_type()?),
            None => None,
        };
        let body = self.expect_block()?;
        let span = start.to(body.span);
        Some(FnDecl {
            name,
            params,
            ret,
            body,
            span,
        })
    }

    /// fn_param = name [ ":" type ]
    fn parse_fn_param(&mut self) -> Option<FnParam> {
        let name = self.expect_name()?;
        let ty = match self.maybe_one(Colon) {
            Some(_) => Some(self.expect_type()?),
            None => None,
        };
        let span = ty.as_ref().map_or(name.span, |t| name.span.to(t.span()));
        Some(FnParam { name, ty, span })
    }

    /// let = "let" pattern [ ":" type ] "=" expr
    fn parse_let(&mut self) -> Option<ast::Let> {
        let start = self.bump();
        let pattern = self.expect_pattern()?;
        let ty = match self.maybe_one(Colon) {
            Some(_) => Some(self.expect_type()?),
            None => None,
        };
        self.expect_one(Equal)?;
        let value = self.expect_expr();
        let span = start.to(value.span);
        Some(ast::Let {
            pattern,
            ty,
            value,
            span,
        })
    }

    /// pattern = name | "(" name { "," name } [ "," ] ")"
    fn expect_pattern(&mut self) -> Option<Pattern> {
        let Some(open) = self.maybe_one(LeftParen) else {
            return self.expect_name().map(Pattern::Name);
        };
        let names = self.parse_list(RightParen, Self::expect_name);
        let close = self.expect_closing(open, RightParen)?;
        Some(Pattern::Tuple(names, open.to(close)))
    }

    /// output = "output" name "=" expr
    fn parse_output(&mut self) -> Option<ast::Output> {
        let start = self.bump();
        let name = self.expect_name()?;
        self.expect_one(Equal)?;
        let value = self.expect_expr();
        let span = start.to(value.span);
        Some(ast::Output { name, value, span })
    }

    // ---- types ----

    /// type = shape | "(" type { "," type } [ "," ] ")"
    ///
    /// `(T)` is `T`, as `(e)` is `e`; `(T,)` is a tuple of one.
    fn expect_type(&mut self) -> Option<TypeAnn> {
        match self.peek() {
            LeftSquare => self.expect_shape().map(TypeAnn::Shape),
            LeftParen if self.enter(true) => {
                let ty = self.parse_tuple_type();
                self.leave(true);
                ty
            }
            LeftParen => None,
            _ => {
                self.error_expected("shape");
                None
            }
        }
    }

    fn parse_tuple_type(&mut self) -> Option<TypeAnn> {
        let open = self.bump();
        let mut types = self.parse_list(RightParen, Self::expect_type);
        let trailing_comma = self.after_comma();
        if types.is_empty() {
            self.error_expected("shape");
        }
        let close = self.expect_closing(open, RightParen)?;
        if types.len() == 1 && !trailing_comma {
            return types.pop();
        }
        Some(TypeAnn::Tuple(types, open.to(close)))
    }

    /// shape = "[" [ sum { "," sum } [ "," ] ] "]"
    fn expect_shape(&mut self) -> Option<ShapeAnn> {
        let open = self.expect_one(LeftSquare)?;
        let dims = self.parse_list(RightSquare, |p| Some(p.expect_sum()));
        let close = self.expect_closing(open, RightSquare)?;
        Some(ShapeAnn {
            dims,
            span: open.to(close),
        })
    }

    // ---- blocks ----

    /// block = "{" { statement newline } "}"
    ///
    /// The last statement, when it is an expression, is the block's value.
    fn expect_block(&mut self) -> Option<Block> {
        let open = self.expect_one(LeftBrace)?;
        let outer = mem::take(&mut self.recovering);
        let mut stmts = Vec::new();
        loop {
            if self.at_cut() {
                break;
            }
            self.skip_newlines();
            if self.at(RightBrace) || self.at(Eof) {
                break;
            }
            stmts.extend(self.parse_statement());
            self.finish_statement(true);
        }
        let close = self.expect_closing(open, RightBrace);
        self.recovering |= outer;
        let value = match stmts.pop() {
            Some(Stmt::Expr(e)) => Some(Box::new(e)),
            other => {
                stmts.extend(other);
                None
            }
        };
        Some(Block {
            stmts,
            value,
            span: open.to(close.unwrap_or(self.last)),
        })
    }

    /// statement = let | assert | param | name "=" expr | expr
    fn parse_statement(&mut self) -> Option<Stmt> {
        match self.peek() {
            Let => self.parse_let().map(Stmt::Let),
            Assert => Some(Stmt::Assert(self.parse_assert())),
            Param => self.parse_param().map(Stmt::Param),
            Dim | Input | Fn | Output => {
                let d = self.expected("statement").with_hint("move it to the top level");
                self.error(d);
                None
            }
            _ => {
                let e = Some(self.expect_expr()).filter(|e| e.kind != ExprKind::Error)?;
                match (&e.kind, self.at(Equal)) {
                    (ExprKind::Name(n), true) => {
                        self.bump();
                        let name = ast::Ident {
                            name: n.clone(),
                            span: e.span,
                        };
                        let value = self.expect_expr();
                        let span = e.span.to(value.span);
                        Some(Stmt::Assign(ast::Assign { name, value, span }))
                    }
                    _ => Some(Stmt::Expr(e)),
                }
            }
        }
    }

    /// Ends a statement: it must be followed by a newline (or the end of the block or
    /// file). After an error, skips the rest of the statement and stops recovering.
    fn finish_statement(&mut self, in_block: bool) {
        let at_end = match self.peek() {
            Newline | Eof => true,
            RightBrace => in_block,
            _ => false,
        };
        if !at_end {
            self.error_expected("newline");
        }
        if self.recovering {
            self.skip_statement(in_block);
            self.recovering = false;
        }
    }

    /// Skips to the next newline at bracket depth 0, or to the `}` that closes the current
    /// block (not consumed). At the top level a stray `}` is skipped like any token.
    fn skip_statement(&mut self, in_block: bool) {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Eof => return,
                Newline if depth == 0 => return,
                RightBrace if depth == 0 && in_block => return,
                LeftParen | LeftSquare | LeftBrace => depth += 1,
                RightParen | RightSquare | RightBrace => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.bump();
        }
    }
}
