//! The ops of the language, each described once.
//!
//! [`prim`] holds the elementwise primitives every backend implements; [`table`] holds every
//! op a program can call: its names, PyTorch's parameters with their defaults and
//! its shape rule, from which the checker binds arguments and builds IR.

pub mod prim;
pub mod table;

pub use table::{Default, OpDef, Param};

/// Every op with its parameters and defaults, in table order: for completion and help
/// (`ops::signatures().map(OpDef::signature)` gives `softmax(input, dim)`, ..).
pub fn signatures() -> impl Iterator<Item = &'static OpDef> {
    table::OPS.iter()
}
