//! `attnc lsp`, driven as an editor drives it: framed JSON-RPC over the binary's stdio.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

mod common;
use common::example;

const URI: &str = "file:///project/mha.attn";

struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    /// Notifications read while waiting for a response.
    pending: Vec<Value>,
    next_id: i64,
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_attnc"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, messages) = channel();
        std::thread::spawn(move || loop {
            let mut length = None;
            loop {
                let mut line = String::new();
                if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(n) = line.strip_prefix("Content-Length: ") {
                    length = n.parse::<usize>().ok();
                }
            }
            let mut body = vec![0; length.expect("a Content-Length header")];
            stdout.read_exact(&mut body).unwrap();
            if tx.send(serde_json::from_slice(&body).unwrap()).is_err() {
                return;
            }
        });
        Client {
            child,
            stdin,
            messages,
            pending: Vec::new(),
            next_id: 1,
        }
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn receive(&self) -> Value {
        self.messages
            .recv_timeout(Duration::from_secs(20))
            .expect("the server answers within 20 s")
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let m = self.receive();
            if m["id"] == json!(id) {
                assert!(m.get("error").is_none(), "{m}");
                return m["result"].clone();
            }
            self.pending.push(m);
        }
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next notification of `method`.
    fn notification(&mut self, method: &str) -> Value {
        if let Some(i) = self.pending.iter().position(|m| m["method"] == method) {
            return self.pending.remove(i)["params"].clone();
        }
        loop {
            let m = self.receive();
            if m["method"] == method {
                return m["params"].clone();
            }
            self.pending.push(m);
        }
    }
}

/// The LSP position of the `nth` occurrence of `needle` in `text`, `skip` characters in.
fn at(text: &str, needle: &str, nth: usize, skip: usize) -> Value {
    let offset = text
        .match_indices(needle)
        .nth(nth)
        .expect("the needle is in the text")
        .0
        + skip;
    let line = text[..offset].matches('\n').count();
    let column = offset - text[..offset].rfind('\n').map_or(0, |i| i + 1);
    json!({"line": line, "character": column})
}

fn doc_at(position: Value) -> Value {
    json!({"textDocument": {"uri": URI}, "position": position})
}

fn hover(client: &mut Client, position: Value) -> String {
    let h = client.request("textDocument/hover", doc_at(position));
    h["contents"]["value"].as_str().unwrap_or_default().to_string()
}

#[test]
fn an_editor_session() {
    let text = example("mha.attn");
    let mut client = Client::start();
    let init = client.request(
        "initialize",
        json!({"capabilities": {}, "initializationOptions": {"dims": {"B": 2, "N": 7, "M": 7}}}),
    );
    let caps = &init["capabilities"];
    assert_eq!(caps["hoverProvider"], json!(true), "{init}");
    assert_eq!(caps["definitionProvider"], json!(true), "{init}");
    client.notify("initialized", json!({}));

    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "attn", "version": 1, "text": text}}),
    );
    let published = client.notification("textDocument/publishDiagnostics");
    assert_eq!(published["uri"], URI);
    assert_eq!(published["diagnostics"], json!([]), "{published}");

    // A binding: its shape, strides and, with the configured dims, its sizes.
    let q = hover(&mut client, at(&text, "let q", 0, 4));
    assert!(
        q.contains("q: [B, H, N, Dk]  non-contiguous, strides [N * D, Dk, D, 1]"),
        "{q}"
    );
    assert!(q.contains("sizes [2, 8, 7, 64]"), "{q}");
    // A sub-expression: the op's PyTorch signature and the shape of the call.
    let view = hover(&mut client, at(&text, "view(B, -1, H, Dk)", 0, 1));
    assert!(view.contains("view(input, *shape)"), "{view}");
    assert!(view.contains("[B, N, H, Dk]  contiguous"), "{view}");
    // A dim, with its value.
    let dk = hover(&mut client, at(&text, "sqrt(Dk)", 0, 5));
    assert!(dk.contains("dim Dk = D / H  (= 64)"), "{dk}");

    // Go to the definitions of a function, a dim and a shadowed name.
    let definition = |client: &mut Client, position| {
        let d = client.request("textDocument/definition", doc_at(position));
        assert_eq!(d["uri"], URI, "{d}");
        d["range"]["start"].clone()
    };
    let call = at(&text, "attention(q, k", 0, 0);
    assert_eq!(definition(&mut client, call), at(&text, "attention(q: ", 0, 0));
    assert_eq!(
        definition(&mut client, at(&text, "sqrt(Dk)", 0, 5)),
        at(&text, "Dk = D / H", 0, 0)
    );
    // `q` in the call is the top-level `let q`, not the parameter of `attention`.
    let use_of_q = at(&text, "attention(q, k", 0, 10);
    assert_eq!(definition(&mut client, use_of_q), at(&text, "let q", 0, 4));
    // Inside the function, `q` is its parameter.
    let param = at(&text, "q @ k", 0, 0);
    assert_eq!(
        definition(&mut client, param),
        at(&text, "q: [B, H, N, Dk]", 0, 0)
    );

    // Completion: the ops with PyTorch's parameter names, and the names in scope.
    let items = client.request("textDocument/completion", doc_at(at(&text, "let q", 0, 0)));
    let items = items.as_array().expect("a list of items");
    let detail = |label: &str| {
        items
            .iter()
            .find(|i| i["label"] == label)
            .map(|i| i["detail"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(
        detail("masked_fill").as_deref(),
        Some("masked_fill(input, mask, value)")
    );
    assert_eq!(detail("softmax").as_deref(), Some("softmax(input, dim)"));
    // Straight from the op table: an alias, and the ops added with issue 10.
    assert_eq!(detail("cat").as_deref(), Some("concat(tensors, dim=0)"));
    assert_eq!(detail("expand").as_deref(), Some("expand(input, *size)"));
    assert_eq!(
        detail("repeat_interleave").as_deref(),
        Some("repeat_interleave(input, repeats, dim=None)")
    );
    assert!(
        detail("query").is_some_and(|d| d.contains("[B, N, D]")),
        "{items:?}"
    );

    // A change that breaks a view: the error is published at its line.
    let broken = text.replace(".contiguous().view(B, -1, H * Dk)", ".view(B, -1, H * Dk)");
    client.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": broken}]}),
    );
    let published = client.notification("textDocument/publishDiagnostics");
    assert_eq!(published["version"], 2);
    let diagnostics = published["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 1, "{published}");
    let d = &diagnostics[0];
    assert_eq!(d["code"], "E0203");
    assert_eq!(
        d["range"]["start"]["line"],
        at(&broken, "output out", 0, 0)["line"]
    );
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("hint: call `.contiguous()`"),
        "{d}"
    );

    assert_eq!(client.request("shutdown", Value::Null), Value::Null);
    client.notify("exit", Value::Null);
    let status = client.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Malformed parameters get an error reply (or, for a notification, are ignored), and the
/// server goes on answering.
#[test]
fn malformed_parameters_are_answered_not_fatal() {
    let mut client = Client::start();
    client.request("initialize", json!({"capabilities": {}}));
    client.notify("initialized", json!({}));
    client.notify("textDocument/didOpen", json!({"textDocument": 7}));
    client.send(
        json!({"jsonrpc": "2.0", "id": 99, "method": "textDocument/hover", "params": {"position": "here"}}),
    );
    let reply = loop {
        let m = client.receive();
        if m["id"] == json!(99) {
            break m;
        }
    };
    assert_eq!(reply["error"]["code"], json!(-32602), "{reply}");
    let text = "dim B\ninput x: [B, 4]\noutput y = x * 2.0\n";
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "attn", "version": 1, "text": text}}),
    );
    assert!(hover(&mut client, at(text, "x", 1, 0)).contains("[B, 4]"));
    assert_eq!(client.request("shutdown", Value::Null), Value::Null);
    client.notify("exit", Value::Null);
    assert!(client.child.wait().unwrap().success());
}

/// Starts a server on `text` with the dims of `an_editor_session`.
fn open(text: &str) -> Client {
    let mut client = Client::start();
    client.request(
        "initialize",
        json!({"capabilities": {}, "initializationOptions": {"dims": {"B": 2, "N": 7, "M": 7}}}),
    );
    client.notify("initialized", json!({}));
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "attn", "version": 1, "text": text}}),
    );
    client.notification("textDocument/publishDiagnostics");
    client
}

fn close(mut client: Client) {
    assert_eq!(client.request("shutdown", Value::Null), Value::Null);
    client.notify("exit", Value::Null);
    assert!(client.child.wait().unwrap().success());
}

/// A function typed into the middle of a file one character at a time, as an editor sends
/// it: at every step the names on the other lines keep their hovers (the half-typed line
/// costs only itself), and once it is typed its own names hover too.
#[test]
fn hovers_survive_typing_a_block_character_by_character() {
    let text = example("mha.attn");
    let block = "fn gate(t: [B, N, D]) -> [B, N, D] {\n    let s = t.pow(2).mean(-1, keepdim=True)\n    t * s.rsqrt()\n}\n";
    // On the blank line before `let q`, where an editor's user would type it.
    let insert_at = text.find("\n\nlet q = linear").expect("mha has `let q`") + 1;
    // Names on lines before and after the insertion: bindings, a function's parameter
    // used as a receiver, a function's `let`, a dim.
    let probes: Vec<(&str, usize, usize)> = vec![
        ("query: [B", 0, 0),
        ("scores = q", 0, 0),
        ("q @ k", 0, 0),
        ("k.transpose(-2", 0, 0),
        ("let p", 0, 4),
        ("let q", 0, 4),
        ("let (x, attn)", 0, 5),
        ("x.transpose(1, 2)", 0, 0),
        ("output attn", 0, 7),
        ("sqrt(Dk)", 0, 5),
    ];
    let mut client = open(&text);
    let before: Vec<String> = probes
        .iter()
        .map(|&(needle, nth, skip)| hover(&mut client, at(&text, needle, nth, skip)))
        .collect();
    for (h, (needle, ..)) in before.iter().zip(&probes) {
        assert!(!h.is_empty(), "no hover on `{needle}` in the whole file");
    }
    let mut version = 1;
    for end in (1..=block.len()).filter(|&i| block.is_char_boundary(i)) {
        let typed = format!("{}{}{}", &text[..insert_at], &block[..end], &text[insert_at..]);
        version += 1;
        client.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": URI, "version": version}, "contentChanges": [{"text": typed}]}),
        );
        client.notification("textDocument/publishDiagnostics");
        for (&(needle, nth, skip), want) in probes.iter().zip(&before) {
            // The needles are on other lines than the block, and none is in it.
            let got = hover(&mut client, at(&typed, needle, nth, skip));
            assert_eq!(&got, want, "hover on `{needle}` after typing {:?}", &block[..end]);
        }
    }
    // The typed function, never called: its parameter, as a receiver too, and its `let`
    // have the shapes of its signature.
    let typed = format!("{}{block}{}", &text[..insert_at], &text[insert_at..]);
    for needle in ["t: [B", "t.pow", "t * s"] {
        let h = hover(&mut client, at(&typed, needle, 0, 0));
        assert!(h.contains("t: [B, N, D]  contiguous"), "`{needle}`: {h}");
    }
    let s = hover(&mut client, at(&typed, "let s =", 0, 4));
    assert!(s.contains("s: [B, N, 1]  contiguous"), "{s}");
    close(client);
}

/// A function's names hover with the shapes of each call, and a loop variable with its
/// range.
#[test]
fn names_inside_functions_and_loops_hover() {
    let text = "dim B, N\ndim D = 4, L = 3\ninput x: [B, N, D]\n\
                fn double(t: [B, Q, D]) -> [B, Q, D] {\n    let y = t * 2.0\n    y\n}\n\
                let a = double(x)\n\
                let b = for i in 0..L { x[:, :, i] }\n\
                output o = a\noutput p = b\n";
    let mut client = open(text);
    let t = hover(&mut client, at(text, "t * 2.0", 0, 0));
    assert!(t.contains("t: [B, N, D]  contiguous"), "{t}");
    let y = hover(&mut client, at(text, "let y", 0, 4));
    assert!(y.contains("y: [B, N, D]  contiguous"), "{y}");
    assert!(y.contains("sizes [2, 7, 4]"), "{y}");
    // A shape variable, as the one call unified it.
    let q = hover(&mut client, at(text, "Q, D]", 0, 0));
    assert!(q.contains("Q: dim N  (= 7)"), "{q}");
    let i = hover(&mut client, at(text, "i]", 0, 0));
    assert!(i.contains("loop variable `i` in 0..L"), "{i}");
    close(client);
}

/// A syntax error is published, and the statements around it are still checked: a shape
/// error on another line is published with it.
#[test]
fn a_syntax_error_does_not_hide_the_other_lines() {
    let text = "dim B, N\ndim D = 4\ninput x: [B, N, D]\nlet h = x.\nlet y = x.view(B, N, 3)\noutput o = y\n";
    let mut client = Client::start();
    client.request("initialize", json!({"capabilities": {}}));
    client.notify("initialized", json!({}));
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "attn", "version": 1, "text": text}}),
    );
    let published = client.notification("textDocument/publishDiagnostics");
    let codes: Vec<&str> = published["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes.first(), Some(&"E0002"), "{published}");
    assert!(codes.len() == 2 && codes[1] != "E0002", "{published}");
    let x = hover(&mut client, at(text, "x.view", 0, 0));
    assert!(x.contains("x: [B, N, D]"), "{x}");
    close(client);
}

/// A value that is not float32 shows its dtype beside its shape, as `attnc check` does.
#[test]
fn hover_shows_the_dtype_beside_the_shape() {
    let text = "dim B, N\ninput ids: [B, N] int64\nlet pos = arange(N)\n\
                let keep = pos[None, :] <= ids\nlet x = keep.float()\n\
                output o = x\n";
    let mut client = open(text);
    let ids = hover(&mut client, at(text, "ids:", 0, 0));
    assert!(ids.contains("ids: [B, N] int64  contiguous"), "{ids}");
    let pos = hover(&mut client, at(text, "let pos", 0, 4));
    assert!(pos.contains("pos: [N] int64  contiguous"), "{pos}");
    let keep = hover(&mut client, at(text, "let keep", 0, 4));
    assert!(keep.contains("keep: [B, N] bool  contiguous"), "{keep}");
    let x = hover(&mut client, at(text, "let x", 0, 4));
    assert!(x.contains("x: [B, N]  contiguous"), "{x}");
    close(client);
}
