//! The runtime: from a checked [`Program`] and optional weights (safetensors or GGUF) and
//! inputs (safetensors) to output tensors.
//!
//! [`bind`] reads the weights and inputs (or draws [`defaults`]), binds every free dim from
//! the inputs' shapes and reports the run-time errors E0209 and E0301–E0305; [`interpret`]
//! evaluates the IR with the reference interpreter, [`jit`] with native code;
//! [`save_outputs`] writes the results.
//! Nothing here prints: errors are [`RunError`] values for the CLI to render.
//!
//! ```no_run
//! # fn demo(program: &attnc::ir::Program) -> Result<(), attnc::runtime::RunError> {
//! use attnc::runtime::{bind, checksum, interpret, save_outputs, RunOptions};
//! let opts = RunOptions { weights: Some("w.safetensors".into()), ..RunOptions::default() };
//! let bound = bind(program, &opts)?;
//! let outputs = interpret(program, &bound)?;
//! for (name, t) in &outputs {
//!     println!("{name}: {:?} checksum {}", t.shape, checksum(t));
//! }
//! save_outputs("out.safetensors".as_ref(), &outputs)?;
//! # Ok(()) }
//! ```

mod bind;
pub mod budget;
pub mod data;
pub mod defaults;
pub mod files;
pub mod function;
pub mod gather;
pub mod generate;
pub mod gguf;
pub mod hoist;
mod interp;
pub mod jit;
mod native;
mod ops;
pub mod tensor;
pub mod tokenize;
pub mod weights;
#[cfg(test)]
mod testutil;

use crate::diagnostic::Code;
use crate::ir::Program;
use std::fmt;
use std::path::{Path, PathBuf};

pub use tensor::Tensor;

/// A run-time error: a code of the spec's section 5 where one applies (file-system and
/// internal errors have none), a lower-case message and hints that start with a verb.
#[derive(Clone, Debug, PartialEq)]
pub struct RunError {
    pub code: Option<Code>,
    pub message: String,
    pub hints: Vec<String>,
}

impl RunError {
    pub fn new(code: Option<Code>, message: impl Into<String>) -> RunError {
        RunError {
            code,
            message: message.into(),
            hints: Vec::new(),
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> RunError {
        self.hints.push(hint.into());
        self
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "error[{code}]: {}", self.message)?,
            None => write!(f, "error: {}", self.message)?,
        }
        for hint in &self.hints {
            write!(f, "\n  = hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RunError {}

/// Where a run's tensors come from (the flags of `attnc run`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// `--weights`: without it every param is drawn as `nn.Linear` initializes it.
    pub weights: Option<PathBuf>,
    /// `--inputs`: without it inputs are drawn from a standard normal (masks all ones).
    pub inputs: Option<PathBuf>,
    /// `--seed` for the drawn tensors.
    pub seed: u64,
    /// `--max-memory`: the budget of E0305 in bytes (`None`: the machine's physical memory).
    pub max_memory: Option<u64>,
}

impl RunOptions {
    /// The memory budget in bytes.
    pub fn budget(&self) -> u64 {
        self.max_memory.unwrap_or_else(budget::physical_memory)
    }
}

/// Everything a program needs to run: one tensor per param and per input, in declaration
/// order, and the value of every dim by [`crate::dims::Sym`] index (constant, free and
/// derived dims; `None` for loop variables).
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    pub params: Vec<Tensor>,
    pub inputs: Vec<Tensor>,
    pub dims: Vec<Option<i64>>,
}

/// Reads or draws the params and inputs of `program` and binds its free dims.
///
/// To bind tensors held in memory instead, many times over, see [`function::Function`].
pub fn bind(program: &Program, opts: &RunOptions) -> Result<Bound, RunError> {
    bind::bind(program, opts)
}

/// As [`bind`], with the inputs from `inputs` (a file made in memory: tokenized text),
/// and `params` read by an earlier bind of the same program when given.
pub fn bind_from(
    program: &Program,
    opts: &RunOptions,
    inputs: &files::TensorFile,
    params: Option<Vec<Tensor>>,
) -> Result<Bound, RunError> {
    bind::bind_from(program, opts, Some(inputs), params)
}

/// The value of every dim from declarations and `--dim` alone (no files read): what
/// `attnc ir --stage kernels|clif` specializes for.
pub fn bind_dims(program: &Program) -> Result<Vec<Option<i64>>, RunError> {
    bind::bind_dims(program)
}

/// Runs `program` on `bound` with the reference interpreter; one contiguous tensor per
/// output, in `program.outputs` order.
pub fn interpret(program: &Program, bound: &Bound) -> Result<Vec<(String, Tensor)>, RunError> {
    interp::interpret(program, bound)
}

/// [`interpret`] with every float32 value computed moved by one ulp at random from `seed`,
/// to measure how far rounding may move each output (the fuzzers' tolerance).
pub fn interpret_perturbed(
    program: &Program,
    bound: &Bound,
    seed: u64,
) -> Result<Vec<(String, Tensor)>, RunError> {
    interp::interpret_perturbed(program, bound, seed)
}

/// Writes the outputs as float32 safetensors, each under its name, atomically.
pub fn save_outputs(path: &Path, outputs: &[(String, Tensor)]) -> Result<(), RunError> {
    files::save(path, outputs)
}

/// The sum of a tensor's elements, accumulated in f64 (what `attnc run` prints).
pub fn checksum(t: &Tensor) -> f64 {
    // A fold from +0.0: `sum` starts at -0.0, which an empty tensor would print.
    t.data.iter().fold(0.0, |s, &x| s + f64::from(x))
}
