//! `attnc repl`: a place to try shape transforms without running anything.
//!
//! [`Session`] is all of it but the I/O: it takes one entry (a line, or several while a
//! bracket is open) and answers with a [`Reply`], the text to print, so it is tested
//! without a terminal. [`run`] is the thin loop around it: a rustyline editor with history,
//! completion and multi-line input when stdin is a terminal, plain lines otherwise.
//!
//! A session is one growing text. Every entry and every loaded file is appended to it as a
//! named part (`<repl:3>`, `examples/mha.attn`) and parsed at its offset
//! ([`parser::parse_at`]), so the spans of all entries point into one text: an error inside
//! a function that entry 3 defined and entry 7 calls renders against entry 3, with a label
//! in entry 7 (see [`render::diagnostics_text_parts`]). The checker's state (dims, bindings,
//! functions) persists from entry to entry; an expression, alone or after `:type`, `:ir` or
//! `:opt`, is checked in a scratch copy of it, so looking leaves nothing behind.

use crate::ast::{Expr, Item, Pattern};
use crate::check::{self, Checker, DimOverride, Value};
use crate::diagnostic::Diagnostic;
use crate::dims::Poly;
use crate::ir::{Op, OutputDecl, Program, ValueId};
use crate::lexer::{self, Token};
use crate::parser;
use crate::render;
use show::{dims_text, tensor_line, value_lines};
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;

mod show;
mod terminal;

pub use terminal::{run, Options};

/// The prompt; `--echo` prints it before each entry too.
pub const PROMPT: &str = "attn> ";

/// A file larger than this is not loaded (sources are small; `/dev/zero` is not one).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// What an entry makes the REPL print.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// Results: shapes, IR, listings. Goes to stdout.
    pub out: String,
    /// Diagnostics and messages about the entry. Goes to stderr.
    pub err: String,
    /// The entry was `:quit`.
    pub quit: bool,
}

impl Reply {
    fn out(text: impl Into<String>) -> Reply {
        Reply {
            out: text.into(),
            ..Reply::default()
        }
    }

    fn err(text: impl Into<String>) -> Reply {
        Reply {
            err: text.into(),
            ..Reply::default()
        }
    }
}

/// The REPL's commands, in the order `:help` lists them. Each may be shortened to any
/// prefix of its name (`:t`, `:q`); the first letters differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    Type,
    Ir,
    Opt,
    Dims,
    Load,
    Reset,
    Help,
    Quit,
}

#[rustfmt::skip]
const COMMANDS: &[(Command, &str, &str)] = &[
    (Command::Type,  "type",  ":type EXPR   the shape and layout of EXPR, leaving nothing behind"),
    (Command::Ir,    "ir",    ":ir EXPR     the typed IR of the session with EXPR as its output `out` (only what `out` needs)"),
    (Command::Opt,   "opt",   ":opt EXPR    the optimized IR of that program"),
    (Command::Dims,  "dims",  ":dims        the dims, their values and the facts known about them"),
    (Command::Load,  "load",  ":load FILE   check a file into the session (`:reset` first to load it again)"),
    (Command::Reset, "reset", ":reset       forget everything and start over"),
    (Command::Help,  "help",  ":help        this text"),
    (Command::Quit,  "quit",  ":quit        leave (so does the end of input)"),
];

impl Command {
    /// The command a word (without its `:`) names: a command's name or a prefix of it.
    fn find(word: &str) -> Option<Command> {
        if word.is_empty() {
            return None;
        }
        COMMANDS
            .iter()
            .find(|(_, name, _)| name.starts_with(word))
            .map(|c| c.0)
    }

    fn name(self) -> &'static str {
        COMMANDS.iter().find(|c| c.0 == self).map_or("", |c| c.1)
    }

    /// Whether the argument is an expression, which may go on over several lines.
    fn takes_expr(self) -> bool {
        matches!(self, Command::Type | Command::Ir | Command::Opt)
    }
}

/// One REPL session: the checker's state and the text of every entry so far.
pub struct Session {
    overrides: Vec<DimOverride>,
    checker: Checker,
    /// Every entry and loaded file so far, one after the other, each on its own lines.
    text: String,
    /// `(name, start)` of each part of `text`, in order.
    parts: Vec<(String, usize)>,
    /// How many entries have been read, to name them `<repl:N>`.
    entries: usize,
}

impl Session {
    /// A fresh session; `overrides` give dims values as `--dim` does, once declared.
    pub fn new(overrides: &[DimOverride]) -> Session {
        Session {
            overrides: overrides.to_vec(),
            checker: Checker::new(overrides),
            text: String::new(),
            parts: Vec::new(),
            entries: 0,
        }
    }

    /// Answer one entry: items, statements, bare expressions or a `:command`. An entry
    /// may span several lines (see [`needs_more`]); a blank one does nothing.
    pub fn entry(&mut self, input: &str) -> Reply {
        let input = input.trim_end();
        if input.trim().is_empty() {
            return Reply::default();
        }
        self.entries += 1;
        let name = format!("<repl:{}>", self.entries);
        match input.trim_start().strip_prefix(':') {
            Some(_) => self.command(name, input.trim_start()),
            None => self.source(name, input),
        }
    }

    /// `:load FILE`: check a file into the session; its errors are shown under its name.
    pub fn load(&mut self, path: &Path) -> Reply {
        let src = match read_source(path) {
            Ok(src) => src,
            Err(e) => return Reply::err(format!("error: cannot read `{}`: {e}\n", path.display())),
        };
        let start = self.add_part(path.display().to_string(), &src);
        let (ast, parse_diags) = parser::parse_at(&self.text, start);
        if !parse_diags.is_empty() {
            let mut err = self.render(&parse_diags);
            let _ = writeln!(err, "`{}` has syntax errors and was not loaded", path.display());
            return Reply::err(err);
        }
        self.checker.check_items(&ast.items);
        self.checker.check_uncalled_fns(&ast.items);
        let diags = self.checker.take_diagnostics();
        Reply {
            out: format!("loaded {}{}\n", path.display(), summary(&ast.items)),
            err: self.render(&diags),
            quit: false,
        }
    }

    /// The words tab completion offers: names in scope, ops, keywords and commands.
    pub fn completions(&self) -> Vec<String> {
        let keywords = [
            "dim", "param", "input", "let", "fn", "output", "for", "in", "assert",
        ];
        let names = self.checker.global_names().into_iter().map(str::to_string);
        let mut words: Vec<String> = check::op_names()
            .chain(keywords)
            .map(str::to_string)
            .chain(names)
            .chain(COMMANDS.iter().map(|c| format!(":{}", c.1)))
            .collect();
        words.sort();
        words.dedup();
        words
    }

    fn command(&mut self, name: String, input: &str) -> Reply {
        let body = &input[1..];
        let word_len = body.find(char::is_whitespace).unwrap_or(body.len());
        let (word, rest) = body.split_at(word_len);
        let arg = rest.trim();
        let Some(command) = Command::find(word) else {
            let names = COMMANDS.iter().map(|c| c.1);
            let hint = crate::suggest::closest(word, names)
                .map_or(String::new(), |c| format!("; did you mean `:{c}`?"));
            return Reply::err(format!("unknown command `:{word}`{hint} (`:help` lists them)\n"));
        };
        let wants_arg = command.takes_expr() || command == Command::Load;
        if wants_arg && arg.is_empty() {
            let what = if command == Command::Load { "FILE" } else { "EXPR" };
            return Reply::err(format!("usage: :{} {what}\n", command.name()));
        }
        if !wants_arg && !arg.is_empty() {
            return Reply::err(format!("`:{}` takes no argument\n", command.name()));
        }
        match command {
            Command::Type | Command::Ir | Command::Opt => {
                // The whole entry is the part, so carets line up with what was typed.
                let start = self.add_part(name, input);
                let offset = input.len() - rest.trim_start().len();
                self.inspect(command, start + offset)
            }
            Command::Dims => Reply::out(dims_text(self.checker.program(), &self.overrides)),
            Command::Load => self.load(Path::new(arg)),
            Command::Reset => {
                *self = Session::new(&self.overrides);
                Reply::out("the session is empty again\n")
            }
            Command::Help => Reply::out(help_text()),
            Command::Quit => Reply {
                quit: true,
                ..Reply::default()
            },
        }
    }

    /// Items, statements and bare expressions: each item is checked into the session
    /// and shows what it bound; an expression is checked in a scratch copy and shows its
    /// shape.
    fn source(&mut self, name: String, input: &str) -> Reply {
        let start = self.add_part(name, input);
        let (ast, parse_diags) = parser::parse_at(&self.text, start);
        if !parse_diags.is_empty() {
            return Reply::err(self.render(&parse_diags));
        }
        let mut reply = Reply::default();
        for item in &ast.items {
            let lines = match item {
                Item::Expr(e) => {
                    let (lines, err) = self.expr_lines(e);
                    reply.err += &err;
                    lines
                }
                _ => {
                    let one = std::slice::from_ref(item);
                    self.checker.check_items(one);
                    self.checker.check_uncalled_fns(one);
                    let diags = self.checker.take_diagnostics();
                    reply.err += &self.render(&diags);
                    self.bound_lines(item)
                }
            };
            for line in lines {
                reply.out += &line;
                reply.out.push('\n');
            }
        }
        reply
    }

    /// What an expression entry prints, and its diagnostics: its value's lines, or what
    /// PyTorch would answer: `x.shape` as `torch.Size([B, N, D])  = torch.Size([2, 7, 512])`
    /// and a dim (`x.shape[2]`, `x.size(2)`, `N`) as `N = 7`.
    fn expr_lines(&self, e: &Expr) -> (Vec<String>, String) {
        let mut scratch = self.checker.clone();
        let query = e.shape_of();
        let value = scratch.check_expr(query.unwrap_or(e));
        let mut err = self.render(&scratch.take_diagnostics());
        let prog = scratch.program();
        let lines = match (query, &value) {
            (_, Value::Error) => Vec::new(),
            (Some(_), Value::Tensor(id)) => vec![size_line(prog, &prog.tensor_type(*id).shape)],
            (Some(_), _) => {
                err += "error: only a tensor has a `.shape`\n";
                Vec::new()
            }
            (None, _) => match dim_of(prog, &value) {
                Some(p) => vec![dim_line(prog, p)],
                None => value_lines(prog, &value),
            },
        };
        (lines, err)
    }

    /// `:type`, `:ir` and `:opt` of the expression at `start` in the session's text.
    fn inspect(&mut self, command: Command, start: usize) -> Reply {
        let (ast, parse_diags) = parser::parse_at(&self.text, start);
        if !parse_diags.is_empty() {
            return Reply::err(self.render(&parse_diags));
        }
        let [Item::Expr(e)] = &ast.items[..] else {
            return Reply::err(format!("`:{}` takes one expression\n", command.name()));
        };
        let mut scratch = self.checker.clone();
        let value = scratch.check_expr(e);
        let diags = scratch.take_diagnostics();
        if !diags.is_empty() {
            return Reply::err(self.render(&diags));
        }
        if command == Command::Type {
            return Reply::out(value_lines(scratch.program(), &value).join("\n") + "\n");
        }
        let outputs = match output_values(&value) {
            Ok(outputs) => outputs,
            Err(kind) => {
                let name = command.name();
                return Reply::err(format!(
                    "`:{name}` needs a tensor or a tuple of them, found {kind}\n"
                ));
            }
        };
        let mut prog = scratch.snapshot();
        prog.outputs = outputs
            .iter()
            .enumerate()
            .map(|(i, &value)| OutputDecl {
                name: match outputs.len() {
                    1 => "out".to_string(),
                    _ => format!("out{i}"),
                },
                value,
                state: None,
                span: e.span,
            })
            .collect();
        keep_needed(&mut prog);
        match command {
            Command::Opt => {
                // The optimizer keeps every param and input; show only those used.
                let mut optimized = crate::opt::optimize(&prog).program;
                keep_needed(&mut optimized);
                Reply::out(optimized.to_text())
            }
            _ => Reply::out(prog.to_text()),
        }
    }

    /// What an item bound, one line per name: `q: [B, H, N, Dk]  strides ..`.
    fn bound_lines(&self, item: &Item) -> Vec<String> {
        let prog = self.checker.program();
        let names: Vec<&str> = match item {
            Item::Let(l) => match &l.pattern {
                Pattern::Name(n) => vec![&n.name],
                Pattern::Tuple(names, _) => names.iter().map(|n| n.name.as_str()).collect(),
            },
            Item::Param(p) => vec![&p.name.name],
            Item::Input(i) | Item::State(i) => vec![&i.name.name],
            Item::Output(o) => {
                return prog
                    .outputs
                    .iter()
                    .filter(|out| out.span == o.span)
                    .map(|out| format!("{}: {}", out.name, tensor_line(prog, prog.tensor_type(out.value))))
                    .collect();
            }
            _ => vec![],
        };
        let mut lines = Vec::new();
        for name in names {
            let Some(value) = self.checker.global_value(name) else {
                continue;
            };
            match &value_lines(prog, value)[..] {
                [] => {}
                [one] => lines.push(format!("{name}: {one}")),
                many => {
                    lines.push(format!("{name}:"));
                    lines.extend(many.iter().map(|l| format!("  {l}")));
                }
            }
        }
        lines
    }

    /// Append a part to the session's text; returns where it starts.
    fn add_part(&mut self, name: String, text: &str) -> usize {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
        let start = self.text.len();
        self.parts.push((name, start));
        self.text.push_str(text);
        start
    }

    fn render(&self, diags: &[Diagnostic]) -> String {
        render::diagnostics_text_parts(&self.text, &self.parts, diags)
    }
}

/// Whether `text` is an unfinished entry, so the REPL should read another line into it:
/// a bracket is open, or a `fn` or `for` has not reached its `{` yet (so a signature may
/// wrap before `->`, as in files) and the last line is not blank. A command is one line,
/// except that the expression of `:type`, `:ir` or `:opt` goes on while a bracket is open.
///
/// Brackets count as the parser's layout counts them: a line that starts with a keyword
/// only a statement starts with (`let`, `fn`, ..) closes the `(` and `[` left open above
/// it, so a missing `)` spoils one entry and not the rest of the session.
pub fn needs_more(text: &str) -> bool {
    let trimmed = text.trim_start();
    if let Some(body) = trimmed.strip_prefix(':') {
        let word = body.split(char::is_whitespace).next().unwrap_or("");
        return Command::find(word).is_some_and(Command::takes_expr) && !open_brackets(text).is_empty();
    }
    if !open_brackets(text).is_empty() {
        return true;
    }
    let last_line_blank = text.rsplit('\n').next().is_none_or(|l| l.trim().is_empty());
    if last_line_blank {
        return false;
    }
    let (tokens, _) = lexer::lex(text);
    let count = |kinds: &[Token]| tokens.iter().filter(|(t, _)| kinds.contains(t)).count();
    count(&[Token::Fn, Token::For]) > count(&[Token::LeftBrace])
}

/// Whether `line` starts an entry of its own even while `pending` waits for more: it is a
/// command, or starts with a statement keyword outside any `{ }` block of `pending`. Piped
/// input then answers `pending` as it stands (with its error) and goes on with `line`.
pub fn starts_entry(pending: &str, line: &str) -> bool {
    let trimmed = line.trim_start();
    if let Some(body) = trimmed.strip_prefix(':') {
        let word = body
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("");
        return Command::find(word).is_some();
    }
    let first = lexer::lex(line).0.first().map(|(t, _)| *t);
    first.is_some_and(starts_statement) && !open_brackets(pending).contains(&Token::LeftBrace)
}

/// Keywords that only ever start a statement (as in the parser's layout).
fn starts_statement(token: Token) -> bool {
    use Token::*;
    matches!(token, Dim | Param | Input | Fn | Let | Output | Assert)
}

/// The brackets open at the end of `text`, innermost last, counted as the parser's layout
/// counts them (see [`needs_more`]). Brackets in strings and comments do not count.
fn open_brackets(text: &str) -> Vec<Token> {
    use Token::*;
    let mut open: Vec<Token> = Vec::new();
    let mut line_start = true;
    for (token, _) in lexer::lex(text).0 {
        if line_start && starts_statement(token) {
            while matches!(open.last(), Some(LeftParen | LeftSquare)) {
                open.pop();
            }
        }
        line_start = token == Newline;
        match token {
            LeftParen | LeftSquare | LeftBrace => open.push(token),
            RightParen | RightSquare | RightBrace => {
                let opener = match token {
                    RightParen => LeftParen,
                    RightSquare => LeftSquare,
                    _ => LeftBrace,
                };
                // Close up to the matching opener; a closer that matches none is dropped.
                if let Some(at) = open.iter().rposition(|t| *t == opener) {
                    open.truncate(at);
                }
            }
            _ => {}
        }
    }
    open
}

/// The dim a value is, when it is one (`x.shape[2]`, `x.size(2)`, `N`).
fn dim_of<'p>(prog: &'p Program, value: &Value) -> Option<&'p Poly> {
    match value {
        Value::Tensor(id) => match &prog.node(*id).op {
            Op::DimValue(p) => Some(p),
            _ => None,
        },
        _ => None,
    }
}

/// `N = 7`, or `N  (no value yet: --dim N=.. or an input gives one)`.
fn dim_line(prog: &Program, p: &Poly) -> String {
    let name = prog.dims.display(p);
    match prog.dims.value(p) {
        Some(v) => format!("{name} = {v}"),
        None => format!("{name}  (no value yet: an input or `--dim` gives one at run time)"),
    }
}

/// `torch.Size([B, N, D])`, and `  = torch.Size([2, 7, 512])` when some dims have values
/// (those without stay symbolic).
fn size_line(prog: &Program, shape: &[Poly]) -> String {
    let symbolic: Vec<String> = shape.iter().map(|d| prog.dims.display(d)).collect();
    let sizes: Vec<String> = shape
        .iter()
        .zip(&symbolic)
        .map(|(d, name)| prog.dims.value(d).map_or_else(|| name.clone(), |v| v.to_string()))
        .collect();
    let mut line = format!("torch.Size([{}])", symbolic.join(", "));
    if sizes != symbolic {
        let _ = write!(line, "  = torch.Size([{}])", sizes.join(", "));
    }
    line
}

/// The tensors that become the outputs of `:ir`/`:opt`: a tensor, or each of a tuple's.
/// `Err` names the kind of value that cannot be an output.
fn output_values(value: &Value) -> Result<Vec<ValueId>, String> {
    match value {
        Value::Tensor(id) => Ok(vec![*id]),
        Value::Tuple(parts) if !parts.is_empty() => {
            let parts: Result<Vec<Vec<ValueId>>, String> = parts.iter().map(output_values).collect();
            Ok(parts?.concat())
        }
        Value::Tuple(_) => Err("an empty tuple".to_string()),
        Value::Seq(_) => Err("a sequence (try `concat` or `stack`)".to_string()),
        Value::Range(..) => Err("a range".to_string()),
        Value::Error => Err("an error".to_string()),
    }
}

/// Drop the top-level nodes no output needs (a `for` keeps its whole body).
fn keep_needed(prog: &mut Program) {
    let mut needed = vec![false; prog.nodes.len()];
    let mut stack: Vec<ValueId> = prog.outputs.iter().map(|o| o.value).collect();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut needed[id], true) {
            continue;
        }
        let node = &prog.nodes[id];
        stack.extend(&node.args);
        if let Op::For { body, result, .. } = &node.op {
            stack.extend(body);
            stack.push(*result);
        }
    }
    prog.body.retain(|&id| needed[id]);
}

fn help_text() -> String {
    let mut out = String::from(
        "Enter items (dim, param, input, fn, let, output, assert) and expressions. An expression\n\
         prints its shape and layout, and its sizes when every dim has a value; a binding prints\n\
         the same for its name. Commands:\n",
    );
    for (_, _, line) in COMMANDS {
        let _ = writeln!(out, "  {line}");
    }
    out.push_str(
        "An entry goes on over several lines while a bracket is open, or until a `fn` or `for`\n\
         has its `{` (an empty line ends it). Commands may be shortened: `:t`, `:q`.\n",
    );
    out
}

/// ` (3 dims, 8 params, ..)`: what a loaded file declared.
fn summary(items: &[Item]) -> String {
    let mut counts = [0usize; 6];
    for item in items {
        match item {
            Item::Dim(ds) => counts[0] += ds.len(),
            Item::Param(_) => counts[1] += 1,
            Item::Input(_) | Item::State(_) => counts[2] += 1,
            Item::Fn(_) => counts[3] += 1,
            Item::Let(_) => counts[4] += 1,
            Item::Output(_) => counts[5] += 1,
            Item::Assert(_) | Item::Expr(_) => {}
        }
    }
    let nouns = ["dim", "param", "input", "fn", "let", "output"];
    let parts: Vec<String> = counts
        .iter()
        .zip(nouns)
        .filter(|(n, _)| **n > 0)
        .map(|(n, noun)| format!("{n} {noun}{}", if *n == 1 { "" } else { "s" }))
        .collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!(" ({})", parts.join(", ")),
    }
}

/// A source file's text, refusing huge files and text that is not UTF-8.
fn read_source(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("it is larger than {} MiB", MAX_FILE_BYTES >> 20));
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())
}

#[cfg(test)]
mod tests;
