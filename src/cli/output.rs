//! Writing to stdout without ever hurting the user: a reader that went away (`| head`)
//! ends the command quietly with exit 0, as `head` users expect; any other failure (a full
//! disk) is an `error:` with exit 1. Never a panic, which is what `print!` does on both.

use std::io::{self, Write};

/// Writes `text` to stdout and flushes it; `Err` carries the exit code to end with.
pub fn emit(text: &str) -> Result<(), i32> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(0),
        Err(e) => {
            eprintln!("error: cannot write the output: {e}");
            Err(1)
        }
    }
}

/// `print!` for a command: returns from it with the exit code of [`emit`] when stdout
/// fails.
macro_rules! out {
    ($($arg:tt)*) => {
        if let Err(code) = crate::cli::output::emit(&format!($($arg)*)) {
            return code;
        }
    };
}

/// `println!` for a command, as [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {
        out!("{}\n", format_args!($($arg)*))
    };
}
