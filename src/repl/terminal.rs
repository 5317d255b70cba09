//! The loop around a [`Session`]: the line editor when stdin is a terminal (history,
//! completion, multi-line entries), plain lines otherwise, so sessions can be scripted.

use super::{needs_more, starts_entry, Command, Reply, Session, PROMPT};
use crate::check::DimOverride;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;

/// How [`run`] talks to the outside.
pub struct Options {
    /// Load this file first.
    pub file: Option<PathBuf>,
    pub overrides: Vec<DimOverride>,
    /// Print each entry after the prompt before its reply, so that a piped session's
    /// output reads as a transcript.
    pub echo: bool,
}

/// Run a session on stdin and stdout until `:quit` or the end of input. Always exit code 0:
/// errors are part of a session, not its failure.
pub fn run(options: &Options) -> i32 {
    let mut session = Session::new(&options.overrides);
    if let Some(path) = &options.file {
        if emit(&session.load(path)).is_err() {
            return 0;
        }
    }
    if io::stdin().is_terminal() {
        interactive(&mut session);
    } else {
        piped(&mut session, options.echo);
    }
    0
}

/// Print a reply: diagnostics to stderr, results to stdout, both flushed so that the two
/// interleave in order when they share a pipe.
fn emit(reply: &Reply) -> io::Result<()> {
    let mut err = io::stderr().lock();
    err.write_all(reply.err.as_bytes())?;
    err.flush()?;
    let mut out = io::stdout().lock();
    out.write_all(reply.out.as_bytes())?;
    out.flush()
}

/// Read plain lines (lossily decoded), gathering them while an entry needs more.
fn piped(session: &mut Session, echo: bool) {
    let mut stdin = io::stdin().lock();
    let mut pending = String::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let at_end = matches!(stdin.read_until(b'\n', &mut buf), Ok(0) | Err(_));
        if !at_end {
            let decoded = String::from_utf8_lossy(&buf);
            let line = decoded.trim_end_matches(['\n', '\r']);
            if !pending.is_empty() && starts_entry(&pending, line) {
                if !answer(session, &pending, echo) {
                    return;
                }
                pending.clear();
            }
            if !pending.is_empty() {
                pending.push('\n');
            }
            pending.push_str(line);
            if needs_more(&pending) {
                continue;
            }
        }
        if !answer(session, &pending, echo) {
            return;
        }
        pending.clear();
        if at_end {
            return;
        }
    }
}

/// Answer one piped entry, echoed first when asked; false when the session is over.
fn answer(session: &mut Session, entry: &str, echo: bool) -> bool {
    if entry.trim().is_empty() {
        return true;
    }
    if echo && emit(&Reply::out(format!("{PROMPT}{entry}\n"))).is_err() {
        return false;
    }
    let reply = session.entry(entry);
    emit(&reply).is_ok() && !reply.quit
}

/// The line editor: history, completion, multi-line entries.
fn interactive(session: &mut Session) {
    use rustyline::error::ReadlineError;
    let config = rustyline::Config::builder()
        .max_history_size(1000)
        .map(|b| {
            b.auto_add_history(false)
                .completion_type(rustyline::CompletionType::List)
                .build()
        })
        .unwrap_or_default();
    let Ok(mut editor) = rustyline::Editor::<Helper, rustyline::history::DefaultHistory>::with_config(config)
    else {
        return piped(session, false);
    };
    editor.set_helper(Some(Helper::new(session.completions())));
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!("attnc repl: enter items and expressions; :help lists the commands, :quit leaves");
    loop {
        match editor.readline(PROMPT) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                let reply = session.entry(&line);
                if emit(&reply).is_err() || reply.quit {
                    break;
                }
                if let Some(helper) = editor.helper_mut() {
                    helper.words = session.completions();
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(_) => break,
        }
    }
    if let Some(path) = &history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = editor.save_history(path);
    }
}

/// `$XDG_STATE_HOME/attnc/history`, else `~/.attnc_history`.
fn history_path() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    match var("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
        Some(state) => Some(state.join("attnc").join("history")),
        None => var("HOME").map(|home| home.join(".attnc_history")),
    }
}

/// Tab completion and multi-line input for the line editor.
struct Helper {
    /// Names in scope, ops, keywords and commands, sorted.
    words: Vec<String>,
    files: rustyline::completion::FilenameCompleter,
}

impl Helper {
    fn new(words: Vec<String>) -> Helper {
        Helper {
            words,
            files: rustyline::completion::FilenameCompleter::new(),
        }
    }
}

impl rustyline::completion::Completer for Helper {
    type Candidate = rustyline::completion::Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Self::Candidate>)> {
        let before = &line[..pos];
        if let Some(arg) = before.trim_start().strip_prefix(':') {
            let word = arg.split(char::is_whitespace).next().unwrap_or("");
            if word.len() < arg.len() && Command::find(word) == Some(Command::Load) {
                return self.files.complete(line, pos, ctx);
            }
        }
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .last()
            .map_or(pos, |(i, _)| i);
        let prefix = &before[start..];
        let candidates = complete_word(&self.words, prefix)
            .into_iter()
            .map(|w| rustyline::completion::Pair {
                display: w.to_string(),
                replacement: w.to_string(),
            })
            .collect();
        Ok((start, candidates))
    }
}

/// The words that complete `prefix`: commands after a `:`, other words otherwise.
pub(super) fn complete_word<'w>(words: &'w [String], prefix: &str) -> Vec<&'w str> {
    if prefix.is_empty() {
        return Vec::new();
    }
    words
        .iter()
        .filter(|w| w.starts_with(prefix) && w.starts_with(':') == prefix.starts_with(':'))
        .map(String::as_str)
        .collect()
}

impl rustyline::validate::Validator for Helper {
    fn validate(
        &self,
        ctx: &mut rustyline::validate::ValidationContext,
    ) -> rustyline::Result<rustyline::validate::ValidationResult> {
        use rustyline::validate::ValidationResult::{Incomplete, Valid};
        Ok(if needs_more(ctx.input()) {
            Incomplete
        } else {
            Valid(None)
        })
    }
}

impl rustyline::hint::Hinter for Helper {
    type Hint = String;
}

impl rustyline::highlight::Highlighter for Helper {}

impl rustyline::Helper for Helper {}
