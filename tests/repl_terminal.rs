//! `attnc repl` on a terminal: a pseudo-terminal stands in for one, and five lines are
//! typed at once, as a paste without bracketed paste or tmux's `send-keys` sends them.

mod common;

use common::scratch;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// A pseudo-terminal of 80 by 24: (master, slave).
fn openpty() -> (File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: `master` and `slave` are valid places for the two descriptors; the name
    // buffer and the termios pointer may be null, and `size` lives across the call.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty succeeded, so both are open descriptors that nothing else owns.
    unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

#[test]
fn lines_typed_ahead_on_a_terminal_are_all_answered() {
    let (mut master, slave) = openpty();
    let state = scratch("repl-tty");
    let mut child = Command::new(env!("CARGO_BIN_EXE_attnc"))
        .arg("repl")
        .env("XDG_STATE_HOME", state.path())
        .env("TERM", "xterm")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("the binary runs");
    // Everything the terminal shows, read as it comes.
    let (tx, rx) = channel();
    let mut reader = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut shown = String::new();
    let wait_for = |text: &str, shown: &mut String| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !shown.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(bytes) => shown.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => return false,
            }
        }
        true
    };
    assert!(wait_for("attn> ", &mut shown), "no prompt: {shown:?}");
    // Five lines in one write: the REPL is still answering the first when the rest arrive.
    master
        .write_all(b"dim B, N\ninput x: [B, N]\nx.transpose(0, 1)\nx.unsqueeze(0)\n:quit\n")
        .unwrap();
    let answered = wait_for("[1, B, N]  contiguous", &mut shown);
    let status = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        child.try_wait().unwrap()
    });
    if status.is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(answered, "a typed-ahead line was lost: {shown:?}");
    assert!(shown.contains("x: [B, N]  contiguous"), "{shown:?}");
    assert!(
        shown.contains("[N, B]  strides [1, N]  non-contiguous"),
        "{shown:?}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        ":quit, typed ahead too, ends the session: {shown:?}"
    );
}
