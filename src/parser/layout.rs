//! Which newlines end a statement.

use crate::lexer::Token::{self, *};
use crate::source::Span;

/// Drops the newlines that do not end a statement: those inside `( )` and `[ ]`, and those
/// before a line that starts with `->` or `{` (so a signature may wrap). Newlines inside a
/// `{ }` nested in parentheses count again. A line starting with a keyword that only ever
/// starts a statement (`let`, `fn`, ..) closes the `(` and `[` left open above it, so that a
/// missing `)` spoils one statement and not the rest of the file. Appends [`Token::Eof`].
pub(super) fn layout(tokens: Vec<(Token, Span)>, end: usize) -> Vec<(Token, Span)> {
    // The first token after each position that is not a newline, found back to front so
    // that long runs of blank lines cost linear time.
    let mut next = vec![tokens.len(); tokens.len() + 1];
    for i in (0..tokens.len()).rev() {
        next[i] = match tokens[i].0 {
            Newline => next[i + 1],
            _ => i,
        };
    }
    let token_at = |i: usize| tokens.get(i).map_or(Eof, |t| t.0);
    let mut out = Vec::with_capacity(tokens.len() + 1);
    let mut open = OpenBrackets::default();
    for (i, &(token, span)) in tokens.iter().enumerate() {
        match token {
            LeftParen | LeftSquare | LeftBrace => open.push(token),
            RightParen | RightSquare | RightBrace => open.close(token),
            Newline => {
                let at = next[i + 1];
                let following = token_at(at);
                // `dim=-1` on a line of its own inside a call is an argument, not an item.
                if starts_statement(following) && token_at(at + 1) != Equal {
                    open.close_parens();
                }
                if open.in_parens() || matches!(following, RArrow | LeftBrace) {
                    continue;
                }
            }
            _ => {}
        }
        out.push((token, span));
    }
    out.push((Eof, Span::new(end, end)));
    out
}

/// Where the blocks whose `{` is never closed end: the positions (in `tokens`, as
/// [`layout`] returns them) of the newlines before the first line indented no deeper than
/// the line of the `{`. Half-typed code is mostly a `{` whose `}` is not written yet; cut
/// there, the block keeps its own statements and the items after it stay items. Blocks
/// whose braces match are never cut, however they are indented.
pub(super) fn block_cuts(tokens: &[(Token, Span)], src: &str) -> Vec<usize> {
    let mut open = Vec::new();
    for (i, (token, _)) in tokens.iter().enumerate() {
        match token {
            LeftBrace => open.push(i),
            RightBrace => {
                open.pop();
            }
            _ => {}
        }
    }
    let mut cuts: Vec<usize> = open
        .into_iter()
        .filter_map(|at| {
            let indent = indentation(src, tokens[at].1.start);
            (at + 1..tokens.len()).find(|&i| {
                let (token, span) = tokens[i];
                let first_on_line = tokens[i - 1].0 == Newline && token != Newline;
                first_on_line
                    && !matches!(token, RightBrace | RightParen | RightSquare | Eof)
                    && column(src, span.start) <= indent
            })
        })
        .map(|line| {
            // The first newline of the run before that line: a block stops at it.
            let mut at = line - 1;
            while at > 0 && tokens[at - 1].0 == Newline {
                at -= 1;
            }
            at
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The byte column of `at` on its line.
fn column(src: &str, at: usize) -> usize {
    at - src[..at].rfind('\n').map_or(0, |nl| nl + 1)
}

/// How far the line holding `at` is indented, in bytes.
fn indentation(src: &str, at: usize) -> usize {
    let start = at - column(src, at);
    src[start..at].len() - src[start..at].trim_start().len()
}

/// Keywords that can only begin a statement, never continue an expression.
fn starts_statement(token: Token) -> bool {
    matches!(token, Dim | Param | Input | Fn | Let | Output | Assert)
}

/// The stack of open brackets of [`layout`], with a count per kind so that a stray closer
/// is dismissed in constant time.
#[derive(Default)]
struct OpenBrackets {
    stack: Vec<Token>,
    counts: [usize; 3],
}

impl OpenBrackets {
    fn kind(token: Token) -> usize {
        match token {
            LeftParen | RightParen => 0,
            LeftSquare | RightSquare => 1,
            _ => 2,
        }
    }

    fn push(&mut self, open: Token) {
        self.counts[Self::kind(open)] += 1;
        self.stack.push(open);
    }

    fn pop(&mut self) {
        if let Some(open) = self.stack.pop() {
            self.counts[Self::kind(open)] -= 1;
        }
    }

    /// Closes up to the matching opener, or ignores a closer that matches none.
    fn close(&mut self, close: Token) {
        let kind = Self::kind(close);
        if self.counts[kind] == 0 {
            return;
        }
        while let Some(&open) = self.stack.last() {
            self.pop();
            if Self::kind(open) == kind {
                break;
            }
        }
    }

    fn close_parens(&mut self) {
        while self.in_parens() {
            self.pop();
        }
    }

    fn in_parens(&self) -> bool {
        matches!(self.stack.last(), Some(LeftParen | LeftSquare))
    }
}
