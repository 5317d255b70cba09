//! The `attnc` binary: the command line in `cli`, everything else in the library.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
