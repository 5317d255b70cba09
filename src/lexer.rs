//! Tokens, produced by a [logos] state machine.
//!
//! Tokens carry no payload: a token is a kind and a [`Span`], and whoever needs the text
//! (an identifier's name, a number's value) re-slices the source through the span. Newlines
//! are tokens because they end statements; the parser decides which of them matter (see
//! `parser::layout`). Lexing never fails: a character the language does not know becomes an
//! E0001 diagnostic and lexing goes on after it.

use crate::diagnostic::{Code, Diagnostic};
use crate::source::Span;
use logos::Logos;

/// What logos reports when no token matches.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum LexError {
    /// No token starts with this character.
    #[default]
    UnexpectedChar,
    /// A `"` with no closing `"` on the same line.
    UnterminatedString,
}

/// One token kind. The doc comment of each variant shows the syntax that produces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Logos)]
#[logos(error = LexError)]
#[logos(skip r"[ \t\r\f]+")]
// A comment ends at the newline, so the greedy repetition reads one line at most.
#[logos(skip(r"#[^\n]*", allow_greedy = true))]
pub enum Token {
    /// `dim`
    #[token("dim")]
    Dim,
    /// `param`
    #[token("param")]
    Param,
    /// `input`
    #[token("input")]
    Input,
    /// `let`
    #[token("let")]
    Let,
    /// `fn`
    #[token("fn")]
    Fn,
    /// `output`
    #[token("output")]
    Output,
    /// `for`
    #[token("for")]
    For,
    /// `in`
    #[token("in")]
    In,
    /// `assert`
    #[token("assert")]
    Assert,

    /// `True`
    #[token("True")]
    True,
    /// `False`
    #[token("False")]
    False,
    /// `None`
    #[token("None")]
    NoneLit,
    /// `inf`
    #[token("inf")]
    Inf,

    /// `query`, `Dk`, `_tmp1`
    #[regex("[A-Za-z_][A-Za-z0-9_]*")]
    Ident,
    /// `123`
    #[regex("[0-9]+")]
    Int,
    /// `1.5`, `1e-9`, `1.5e3`, `.5`; never `1.` so that `0..H` is `0` `..` `H`
    #[regex(r"[0-9]+\.[0-9]+([eE][+-]?[0-9]+)?")]
    #[regex(r"[0-9]+[eE][+-]?[0-9]+")]
    #[regex(r"\.[0-9]+([eE][+-]?[0-9]+)?")]
    Float,
    /// `"linears.0.weight"`, with `\"` and `\\` escapes
    #[token("\"", lex_string)]
    Str,

    /// `(`
    #[token("(")]
    LeftParen,
    /// `)`
    #[token(")")]
    RightParen,
    /// `[`
    #[token("[")]
    LeftSquare,
    /// `]`
    #[token("]")]
    RightSquare,
    /// `{`
    #[token("{")]
    LeftBrace,
    /// `}`
    #[token("}")]
    RightBrace,
    /// `,`
    #[token(",")]
    Comma,
    /// `:`
    #[token(":")]
    Colon,
    /// `->`
    #[token("->")]
    RArrow,
    /// `.`
    #[token(".")]
    Dot,
    /// `..`
    #[token("..")]
    DotDot,
    /// `...`
    #[token("...")]
    Ellipsis,
    /// `=`
    #[token("=")]
    Equal,
    /// `==`
    #[token("==")]
    EqualEqual,
    /// `!=`
    #[token("!=")]
    NotEqual,
    /// `<`
    #[token("<")]
    Less,
    /// `<=`
    #[token("<=")]
    LessEqual,
    /// `>`
    #[token(">")]
    Greater,
    /// `>=`
    #[token(">=")]
    GreaterEqual,
    /// `+`
    #[token("+")]
    Plus,
    /// `-`
    #[token("-")]
    Minus,
    /// `*`
    #[token("*")]
    Star,
    /// `**`
    #[token("**")]
    StarStar,
    /// `/`
    #[token("/")]
    Slash,
    /// `//`
    #[token("//")]
    SlashSlash,
    /// `&`
    #[token("&")]
    Amp,
    /// `|`
    #[token("|")]
    Pipe,
    /// `~`
    #[token("~")]
    Tilde,
    /// `%`
    #[token("%")]
    Percent,
    /// `@`
    #[token("@")]
    At,

    /// A run of characters that start no token, such as `$` or `;`, already reported as
    /// E0001; the parser takes it for a broken expression and reports nothing more.
    Error,
    /// A line break `\n` (a `\r` before it is whitespace).
    #[token("\n")]
    Newline,
    /// The end of the input. Never produced by logos: the parser appends it so that it
    /// always has a token to look at.
    Eof,
}

impl Token {
    /// The fixed text of a keyword or punctuation token, for messages such as
    /// "expected `)`"; `None` for tokens whose text varies.
    pub fn symbol(self) -> Option<&'static str> {
        use Token::*;
        Some(match self {
            Dim => "dim",
            Param => "param",
            Input => "input",
            Let => "let",
            Fn => "fn",
            Output => "output",
            For => "for",
            In => "in",
            Assert => "assert",
            True => "True",
            False => "False",
            NoneLit => "None",
            Inf => "inf",
            LeftParen => "(",
            RightParen => ")",
            LeftSquare => "[",
            RightSquare => "]",
            LeftBrace => "{",
            RightBrace => "}",
            Comma => ",",
            Colon => ":",
            RArrow => "->",
            Dot => ".",
            DotDot => "..",
            Ellipsis => "...",
            Equal => "=",
            EqualEqual => "==",
            NotEqual => "!=",
            Less => "<",
            LessEqual => "<=",
            Greater => ">",
            GreaterEqual => ">=",
            Plus => "+",
            Minus => "-",
            Star => "*",
            StarStar => "**",
            Slash => "/",
            SlashSlash => "//",
            Amp => "&",
            Pipe => "|",
            Tilde => "~",
            Percent => "%",
            At => "@",
            Ident | Int | Float | Str | Error | Newline | Eof => return None,
        })
    }

    pub fn is_keyword(self) -> bool {
        use Token::*;
        matches!(self, Dim | Param | Input | Let | Fn | Output | For | In | Assert)
    }

    /// `True`, `False`, `None` and `inf`: words that are values, never names.
    pub fn is_literal_word(self) -> bool {
        use Token::*;
        matches!(self, True | False | NoneLit | Inf)
    }
}

/// Scans a string after its opening `"`. A string ends at the line's end at the latest, so
/// that a missing `"` spoils one line and not the rest of the file.
fn lex_string(lex: &mut logos::Lexer<Token>) -> Result<(), LexError> {
    let rest = lex.remainder().as_bytes();
    let mut i = 0;
    while i < rest.len() {
        match rest[i] {
            b'"' => {
                lex.bump(i + 1);
                return Ok(());
            }
            b'\n' => break,
            b'\\' if matches!(rest.get(i + 1), Some(b'"' | b'\\')) => i += 2,
            _ => i += 1,
        }
    }
    lex.bump(i);
    Err(LexError::UnterminatedString)
}

/// Splits `src` into tokens. Never fails: unknown characters, unterminated strings, unknown
/// escapes and integers beyond `u64` are reported as E0001 and lexing continues (an unterminated string still yields a
/// [`Token::Str`] running to the end of its line, so the parser sees no second error).
pub fn lex(src: &str) -> (Vec<(Token, Span)>, Vec<Diagnostic>) {
    let mut tokens = Vec::new();
    let mut diagnostics = Vec::new();
    for (result, range) in Token::lexer(src).spanned() {
        let span = Span::from(range);
        match result {
            Ok(token) => {
                match token {
                    Token::Str => check_escapes(src, span, &mut diagnostics),
                    Token::Int if src[span.range()].parse::<u64>().is_err() => diagnostics.push(
                        Diagnostic::error(Code::E0001, span, "integer literal is too large"),
                    ),
                    _ => {}
                }
                tokens.push((token, span));
            }
            Err(LexError::UnterminatedString) => {
                diagnostics.push(
                    Diagnostic::error(Code::E0001, span, "unterminated string")
                        .with_hint("close it with `\"` on the same line"),
                );
                tokens.push((Token::Str, span));
            }
            Err(LexError::UnexpectedChar) => match (tokens.last_mut(), diagnostics.last_mut()) {
                // Right after another bad character: one token and one diagnostic for both.
                (Some((Token::Error, run)), Some(last)) if run.end == span.start => {
                    *run = run.to(span);
                    *last = unexpected_chars(src, *run);
                }
                _ => {
                    diagnostics.push(unexpected_chars(src, span));
                    tokens.push((Token::Error, span));
                }
            },
        }
    }
    (tokens, diagnostics)
}

fn unexpected_chars(src: &str, span: Span) -> Diagnostic {
    let text = src.get(span.range()).unwrap_or("?");
    let noun = if text.chars().count() == 1 {
        "character"
    } else {
        "characters"
    };
    let diagnostic = Diagnostic::error(
        Code::E0001,
        span,
        format!("unexpected {noun} `{}`", text.escape_debug()),
    );
    if text == ";" {
        diagnostic.with_hint("remove the `;`: statements end at the end of a line")
    } else {
        diagnostic
    }
}

/// Reports escapes other than `\"` and `\\`, the only two the language has.
fn check_escapes(src: &str, span: Span, diagnostics: &mut Vec<Diagnostic>) {
    let text = &src[span.range()];
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '\\' {
            continue;
        }
        match chars.next() {
            Some((_, '"' | '\\')) => {}
            Some((j, other)) => {
                let at = Span::new(span.start + i, span.start + j + other.len_utf8());
                let message = format!("unknown escape `\\{}`", other.escape_debug());
                diagnostics.push(
                    Diagnostic::error(Code::E0001, at, message).with_hint("write `\\\\` for a backslash"),
                );
            }
            None => {}
        }
    }
}

/// True when `src` ends inside an unclosed `(`, `[` or `{`: the REPL then reads another
/// line before parsing. Brackets in strings and comments do not count.
pub fn open_brackets(src: &str) -> bool {
    let (tokens, _) = lex(src);
    let mut depth = 0usize;
    for (token, _) in tokens {
        match token {
            Token::LeftParen | Token::LeftSquare | Token::LeftBrace => depth += 1,
            Token::RightParen | Token::RightSquare | Token::RightBrace => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    depth > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use Token::*;

    /// The token kinds of `src`, asserting it lexes without diagnostics.
    fn kinds(src: &str) -> Vec<Token> {
        let (tokens, diagnostics) = lex(src);
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        tokens.into_iter().map(|(t, _)| t).collect()
    }

    /// The texts of the tokens of `src`.
    fn texts(src: &str) -> Vec<&str> {
        lex(src).0.into_iter().map(|(_, s)| &src[s.range()]).collect()
    }

    /// The messages of the diagnostics of `src`.
    fn messages(src: &str) -> Vec<String> {
        lex(src).1.into_iter().map(|d| d.message).collect()
    }

    #[test]
    fn keywords_and_identifiers() {
        assert_eq!(
            kinds("dim param input let fn output for in assert"),
            [Dim, Param, Input, Let, Fn, Output, For, In, Assert]
        );
        assert_eq!(kinds("dims _x input2 In"), [Ident, Ident, Ident, Ident]);
    }

    #[test]
    fn numbers() {
        assert_eq!(
            kinds("123 1.5 1e-9 1.5e3 .5 2E+4"),
            [Int, Float, Float, Float, Float, Float]
        );
        assert_eq!(texts("1.5e3 .5"), ["1.5e3", ".5"]);
    }

    #[test]
    fn range_is_int_dotdot_ident() {
        assert_eq!(kinds("0..H"), [Int, DotDot, Ident]);
        assert_eq!(kinds("0..10"), [Int, DotDot, Int]);
    }

    #[test]
    fn method_is_ident_dot_ident() {
        assert_eq!(kinds("x.view"), [Ident, Dot, Ident]);
        assert_eq!(kinds("1em"), [Int, Ident]);
    }

    #[test]
    fn punctuation() {
        assert_eq!(
            kinds("( ) [ ] { } , : -> . .. = == != < <= > >= + - * / % @"),
            [
                LeftParen,
                RightParen,
                LeftSquare,
                RightSquare,
                LeftBrace,
                RightBrace,
                Comma,
                Colon,
                RArrow,
                Dot,
                DotDot,
                Equal,
                EqualEqual,
                NotEqual,
                Less,
                LessEqual,
                Greater,
                GreaterEqual,
                Plus,
                Minus,
                Star,
                Slash,
                Percent,
                At
            ]
        );
    }

    #[test]
    fn strings_with_escapes() {
        assert_eq!(kinds(r#""a.b" "say \"hi\"" "c:\\""#), [Str, Str, Str]);
        assert_eq!(texts(r#"x = "a\"b""#), ["x", "=", r#""a\"b""#]);
    }

    #[test]
    fn comments_and_newlines() {
        assert_eq!(
            kinds("a # b c\r\n\n# x\nd"),
            [Ident, Newline, Newline, Newline, Ident]
        );
    }

    #[test]
    fn unexpected_character_is_e0001_and_lexing_goes_on() {
        let (tokens, diagnostics) = lex("let x = $ + 1");
        assert_eq!(diagnostics[0].code, Code::E0001);
        assert_eq!(diagnostics[0].message, "unexpected character `$`");
        assert_eq!(diagnostics[0].span, Span::new(8, 9));
        assert_eq!(tokens[3], (Error, Span::new(8, 9)));
        assert_eq!(tokens.len(), 6);
    }

    #[test]
    fn a_run_of_bad_characters_is_one_diagnostic() {
        assert_eq!(
            messages("a $$ b ? c"),
            ["unexpected characters `$$`", "unexpected character `?`"]
        );
    }

    #[test]
    fn non_ascii_characters_are_whole() {
        assert_eq!(messages("é"), ["unexpected character `é`"]);
        assert_eq!(lex("a€b").1[0].span, Span::new(1, 4));
    }

    #[test]
    fn unterminated_string_stops_at_end_of_line() {
        let (tokens, diagnostics) = lex("\"abc\nx");
        assert_eq!(diagnostics[0].message, "unterminated string");
        assert_eq!(
            tokens,
            [
                (Str, Span::new(0, 4)),
                (Newline, Span::new(4, 5)),
                (Ident, Span::new(5, 6))
            ]
        );
    }

    #[test]
    fn unknown_escape_is_e0001() {
        assert_eq!(messages(r#""a\nb""#), ["unknown escape `\\n`"]);
    }

    #[test]
    fn open_brackets_for_the_repl() {
        assert!(open_brackets("let x = f(a,"));
        assert!(open_brackets("fn f() {\n let y = [1"));
        assert!(!open_brackets("let x = f(a)"));
        assert!(!open_brackets("let s = \"(\" # ["));
    }
}
