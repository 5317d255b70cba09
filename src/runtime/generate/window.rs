//! A program as a [`Model`]: `input_ids: [B, N] int64` (B = 1 here), optionally
//! `cache_position: [N] int64`, and `output logits: [B, N, V]`. Without a cache, each step
//! runs the whole window: the tokens so far, padded to a capacity fixed up front, so that the
//! program is compiled once and never per token. The padding comes after the last real
//! token, so a causal program's logits there do not depend on it.

use super::Model;
use crate::ir::Program;
use crate::runtime::function::{Function, Input};
use crate::runtime::RunError;

/// Where generation's tensors are among a program's inputs and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    pub input_ids: usize,
    pub cache_position: Option<usize>,
    pub logits: usize,
}

impl Interface {
    /// The indices of `input_ids`, `cache_position` and `logits` in `program`, or why it
    /// cannot generate.
    pub fn of(program: &Program) -> Result<Interface, RunError> {
        let input = |name: &str, rank: usize, declare: &str| {
            let found = program.inputs.iter().position(|i| i.name == name);
            match found.map(|i| (i, program.inputs[i].shape.len())) {
                Some((i, r)) if r == rank => Ok(Some(i)),
                Some((_, r)) => Err(RunError::new(
                    None,
                    format!("the program's input `{name}` has {r} axes, generation gives it {rank}"),
                )
                .with_hint(format!("declare `{declare}`"))),
                None => Ok(None),
            }
        };
        let input_ids = input("input_ids", 2, "input input_ids: [B, N] int64")?.ok_or_else(|| {
            RunError::new(None, "the program has no input `input_ids`")
                .with_hint("declare the tokens as `input input_ids: [B, N] int64`")
        })?;
        let cache_position = input("cache_position", 1, "input cache_position: [N] int64")?;
        if let Some(other) = program
            .inputs
            .iter()
            .find(|i| i.name != "input_ids" && i.name != "cache_position")
        {
            let message = format!(
                "the program takes the input `{}`, which generation does not give",
                other.name
            );
            return Err(RunError::new(None, message)
                .with_hint("take only `input_ids` and `cache_position` (the tokens' positions)"));
        }
        let logits = program.outputs.iter().position(|o| o.name == "logits");
        let logits = logits.filter(|&o| program.tensor_type(program.outputs[o].value).shape.len() == 3);
        let logits = logits.ok_or_else(|| {
            RunError::new(None, "the program has no output `logits` of shape [B, N, V]")
                .with_hint("name the next-token scores `output logits = ..`")
        })?;
        Ok(Interface {
            input_ids,
            cache_position,
            logits,
        })
    }
}

/// A stateless program run over the whole window at each step.
pub struct Window<'f> {
    function: &'f Function,
    interface: Interface,
    capacity: usize,
    tokens: Vec<f32>,
}

impl<'f> Window<'f> {
    /// Runs `function` on windows of `capacity` tokens.
    pub fn new(function: &'f Function, capacity: usize) -> Result<Window<'f>, RunError> {
        Ok(Window {
            interface: Interface::of(function.program())?,
            function,
            capacity,
            tokens: Vec::new(),
        })
    }
}

impl Model for Window<'_> {
    fn forward(&mut self, ids: &[u32], start: usize) -> Result<Vec<f32>, RunError> {
        let end = start + ids.len();
        if end > self.capacity {
            let message = format!("{end} tokens do not fit the window of {}", self.capacity);
            return Err(RunError::new(None, message));
        }
        self.tokens.truncate(start);
        // int64 values travel as float32, exact below 2^24 (vocabularies are smaller).
        self.tokens.extend(ids.iter().map(|&id| id as f32));
        let mut padded = self.tokens.clone();
        padded.resize(self.capacity, 0.0);
        let positions: Vec<f32> = (0..self.capacity).map(|p| p as f32).collect();
        let ids_shape = [1, self.capacity];
        let positions_shape = [self.capacity];
        let mut inputs = vec![
            Input {
                shape: &ids_shape,
                data: &padded,
            };
            self.function.program().inputs.len()
        ];
        if let Some(i) = self.interface.cache_position {
            inputs[i] = Input {
                shape: &positions_shape,
                data: &positions,
            };
        }
        let outputs = self.function.call(&inputs)?;
        last_row(&outputs[self.interface.logits].1, end - 1)
    }
}

/// Row `position` of logits of shape `[1, N, V]`.
fn last_row(logits: &crate::runtime::Tensor, position: usize) -> Result<Vec<f32>, RunError> {
    match logits.shape[..] {
        [1, n, v] if position < n && v > 0 => Ok(logits.data[position * v..(position + 1) * v].to_vec()),
        _ => Err(RunError::new(
            None,
            format!(
                "the output `logits` has shape {:?}, not [1, N, V] with N > {position}",
                logits.shape
            ),
        )),
    }
}
