//! `attnc repl` through the binary, with piped stdin: one snapshot per scripted session in
//! `tests/repl/*.repl`, and a few hundred mutated lines that must not upset it.
//!
//! Sessions run with `--echo`, so each snapshot is a transcript: every entry after the
//! prompt, then what it printed, stdout and stderr interleaved as a terminal shows them. A
//! first line `# attnc repl ARGS` gives the command line's other arguments.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

mod common;
use common::Rng;

const PROMPT: &str = "attn> ";

/// Run `attnc repl --echo ARGS` on `input`; (exit code, stdout and stderr as one text).
fn repl(args: &[&str], input: &[u8]) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().expect("a pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_attnc"))
        .arg("repl")
        .arg("--echo")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::piped())
        .stdout(writer.try_clone().expect("a second writer"))
        .stderr(writer)
        .spawn()
        .expect("the binary runs");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    // Written from a thread, so that a long reply cannot fill the pipe while we write.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut out = Vec::new();
    reader.read_to_end(&mut out).expect("the output is readable");
    feeder.join().expect("the feeder finishes");
    let status = child.wait().expect("the binary exits");
    (status.code(), String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn scripted_sessions() {
    insta::glob!("repl/*.repl", |path| {
        let script = std::fs::read_to_string(path).expect("the session is readable");
        let (args, input) = match script.strip_prefix("# attnc repl ") {
            Some(rest) => rest.split_once('\n').unwrap_or((rest, "")),
            None => ("", script.as_str()),
        };
        let args: Vec<&str> = args.split_whitespace().collect();
        let (code, transcript) = repl(&args, input.as_bytes());
        assert_eq!(code, Some(0), "{transcript}");
        assert!(!transcript.contains("panicked"), "{transcript}");
        let command = format!("$ attnc repl --echo {}", args.join(" "));
        insta::with_settings!({ omit_expression => true }, {
            insta::assert_snapshot!("session", format!("{}\n{transcript}", command.trim_end()));
        });
    });
}

#[test]
fn quit_stops_reading_and_errors_do_not_change_the_exit_code() {
    let (code, out) = repl(&[], b"let y = nope\n:quit\n:dims\n");
    assert_eq!(code, Some(0));
    assert!(out.contains("error[E0101]"), "{out}");
    assert!(!out.contains("no dims yet"), "{out}");
}

#[test]
fn an_unreadable_file_argument_is_reported_and_the_session_goes_on() {
    let (code, out) = repl(&["no/such/file.attn"], b"sqrt(4)\n");
    assert_eq!(code, Some(0));
    assert!(out.contains("cannot read `no/such/file.attn`"), "{out}");
    assert!(out.contains("[]  scalar"), "{out}");
}

#[test]
fn bad_dim_arguments_are_usage_errors() {
    let (code, _) = repl(&["--dim", "B=0"], b"");
    assert_eq!(code, Some(2));
}

/// A line of an example, of a session script, a command or random bytes, mutated.
fn random_line(rng: &mut Rng, lines: &[String]) -> Vec<u8> {
    const PIECES: &[&str] = &[
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "-1",
        "0",
        "@",
        "/",
        "%",
        "==",
        ".view(B, -1)",
        ".transpose(0, 1)",
        ".contiguous()",
        "for h in 0..H {",
        "fn g(a) {",
        ":type ",
        ":ir ",
        ":opt ",
        ":dims",
        ":reset",
        ":load examples/mha.attn",
        ":load tests",
        ":help",
        ":",
        ":x",
        "x",
        "q",
        "Dk",
        "\"",
        "#",
        "$",
        "é",
        "\t",
    ];
    let mut line = lines[rng.below(lines.len())].clone().into_bytes();
    for _ in 0..rng.below(4) {
        let at = rng.below(line.len() + 1);
        match rng.below(5) {
            0 => {
                let end = (at + 1 + rng.below(8)).min(line.len());
                line.drain(at.min(end)..end);
            }
            1 => line.insert(at, rng.below(256) as u8),
            _ => {
                let piece = PIECES[rng.below(PIECES.len())].as_bytes();
                line.splice(at..at, piece.iter().copied());
            }
        }
    }
    const COMMANDS: &[&str] = &[
        ":type ", ":t ", ":ir ", ":opt ", ":load ", ":dims ", ":reset", ":help ",
    ];
    if rng.below(4) == 0 {
        let command = COMMANDS[rng.below(COMMANDS.len())].as_bytes();
        line.splice(0..0, command.iter().copied());
    }
    line.retain(|b| *b != b'\n');
    if String::from_utf8_lossy(&line).trim_start().starts_with(":q") {
        line.insert(0, b'#'); // `:quit` would end the session early
    }
    line.push(b'\n');
    line
}

#[test]
fn hundreds_of_mutated_lines_never_panic_it() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut lines: Vec<String> = Vec::new();
    for dir in ["examples", "tests/repl"] {
        let mut files: Vec<_> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(f).unwrap();
            lines.extend(
                text.lines()
                    .filter(|l| !l.starts_with(":quit"))
                    .map(str::to_string),
            );
        }
    }
    let mut rng = Rng(0x5EED_0000_0000_0006);
    for round in 0..6 {
        let mut input = Vec::new();
        for _ in 0..150 {
            input.extend(random_line(&mut rng, &lines));
        }
        let (code, out) = repl(&[], &input);
        let shown = String::from_utf8_lossy(&input);
        assert!(
            !out.contains("panicked"),
            "round {round}:\n{out}\ninput:\n{shown}"
        );
        assert_eq!(code, Some(0), "round {round}:\n{out}\ninput:\n{shown}");
        let answered = out.matches(PROMPT).count();
        assert!(answered > 50, "round {round}: only {answered} entries:\n{out}");
    }
}

/// The walk-through in the README is a transcript of this binary, so it cannot rot.
#[test]
fn the_documented_session_is_what_the_binary_prints() {
    let doc = include_str!("../README.md");
    let block = doc
        .split("```\n")
        .find(|b| b.starts_with("$ attnc repl --dim"))
        .expect("a fenced session in the README");
    let (command, transcript) = block.split_once('\n').expect("a command line");
    let args = command.strip_prefix("$ attnc repl ").expect("`$ attnc repl ..`");
    let args: Vec<&str> = args.split_whitespace().collect();
    let input: String = transcript
        .lines()
        .filter_map(|l| l.strip_prefix(PROMPT))
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, out) = repl(&args, input.as_bytes());
    assert_eq!(code, Some(0));
    assert_eq!(out, transcript);
}
