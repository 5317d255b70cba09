//! Session tests without a terminal: one entry in, the reply's text out.

use super::{needs_more, Reply, Session};

/// Run entries in order; the reply to the last.
fn last(entries: &[&str]) -> Reply {
    let mut s = Session::new(&[]);
    let mut reply = Reply::default();
    for e in entries {
        reply = s.entry(e);
    }
    reply
}

const HEADER: &[&str] = &["dim B, N", "dim D = 512, H = 8", "dim Dk = D / H", "input x: [B, N, D]"];

fn after_header(entries: &[&str]) -> Reply {
    let all: Vec<&str> = HEADER.iter().chain(entries).copied().collect();
    last(&all)
}
