//! The ops of the language, each described once.
//!
//! [`prim`] holds the elementwise primitives every backend implements; [`table`] holds every
//! op a program can call: its names, PyTorch's parameters with their defaults, its class and
//! its shape rule, from which the checker binds arguments and builds IR.

pub mod prim;
