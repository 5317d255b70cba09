//! A program as a [`Model`]: `input_ids: [B, N] int64` (B = 1 here), optionally
//! `cache_position: [N] int64`, and `output logits: [B, N, V]`.
//!
//! A program with `state`s (a key/value cache, as `transformers`' `StaticCache`) is
//! [`Cached`]: the prompt is one call of N tokens, each new token one call of N = 1, the
//! function keeping the cache between calls; so two shapes are compiled per generation.
//! A program without is [`Window`]: each step runs the whole window, the tokens so far
//! padded to a capacity fixed up front, so that it is compiled once and never per token.
//! The padding comes after the last real token, so a causal program's logits there do not
//! depend on it.
//!
//! A step needs the logits of its last token only, as `transformers`' `generate` asks
//! with `logits_to_keep=1`: [`last_logits`] makes a cached program compute only those.

use super::Model;
use crate::dims::{DimKind, Poly, Sym};
use crate::ir::{InputDecl, Node, Op, Program, Type};
use crate::runtime::function::{Function, Input};
use crate::runtime::{RunError, Tensor};
use std::collections::BTreeSet;

/// Where generation's tensors are among a program's inputs (states left out: a call does
/// not give them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    pub input_ids: usize,
    pub cache_position: Option<usize>,
    /// Inputs a call gives.
    pub inputs: usize,
}

impl Interface {
    /// The indices of `input_ids` and `cache_position` among `program`'s inputs, or why it
    /// cannot generate.
    pub fn of(program: &Program) -> Result<Interface, RunError> {
        let given: Vec<&InputDecl> = program.inputs.iter().filter(|i| !i.state).collect();
        let input = |name: &str, rank: usize, declare: &str| {
            let found = given.iter().position(|i| i.name == name);
            match found.map(|i| (i, given[i].shape.len())) {
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
        if let Some(other) = given
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
        let logits = program.outputs.iter().find(|o| o.name == "logits");
        if logits.is_none_or(|o| program.tensor_type(o.value).shape.len() != 3) {
            return Err(
                RunError::new(None, "the program has no output `logits` of shape [B, N, V]")
                    .with_hint("name the next-token scores `output logits = ..`"),
            );
        }
        if program.inputs.iter().any(|i| i.state) && cache_position.is_none() {
            return Err(
                RunError::new(None, "the program keeps a state but takes no `cache_position`")
                    .with_hint("declare `input cache_position: [N] int64`, where the new tokens go"),
            );
        }
        Ok(Interface {
            input_ids,
            cache_position,
            inputs: given.len(),
        })
    }

    /// Calls `function` on `ids` (one sequence) at `positions`, with [`Function::call_once`]
    /// where `once`; its logits, `[1, N, V]` or the last position's only, `[1, 1, V]` (see
    /// [`last_logits`]).
    fn call(
        &self,
        function: &Function,
        ids: &[f32],
        positions: &[f32],
        once: bool,
    ) -> Result<Tensor, RunError> {
        let ids_shape = [1, ids.len()];
        let positions_shape = [positions.len()];
        let mut inputs = vec![
            Input {
                shape: &ids_shape,
                data: ids,
            };
            self.inputs
        ];
        if let Some(i) = self.cache_position {
            inputs[i] = Input {
                shape: &positions_shape,
                data: positions,
            };
        }
        let outputs = match once {
            true => function.call_once(&inputs)?,
            false => function.call(&inputs)?,
        };
        let (_, logits) = outputs
            .into_iter()
            .find(|(name, _)| name == "logits")
            .ok_or_else(|| RunError::new(None, "the program gave no output `logits`"))?;
        Ok(logits)
    }
}

/// `program` with its `logits` output cut to the last position, `logits[:, -1:, :]`, when
/// it keeps a cache (a [`Cached`] step's last token is its last position; a [`Window`]'s
/// is not). The optimizer moves the slice through the ops that compute each position
/// alone (`opt::rules::rows`), so the output product and the norm before it run on one
/// row per sequence instead of N. Any other program, or one whose `logits` are not
/// `[B, N, V]`, is returned as it was.
pub fn last_logits(mut program: Program) -> Program {
    if !program.inputs.iter().any(|i| i.state) {
        return program;
    }
    let Some(output) = program.outputs.iter().position(|o| o.name == "logits") else {
        return program;
    };
    let value = program.outputs[output].value;
    let mut ty = program.tensor_type(value).clone();
    let [_, n, _] = &ty.shape[..] else {
        return program;
    };
    let (start, end) = (n.sub(&Poly::int(1)), n.clone());
    // The checker's own condition for `-1 :` (the language's sizes are at least 1).
    if !program.dims.provably_nonneg(&start) || !matches!(program.node(value).ty, Type::Tensor(_)) {
        return program;
    }
    ty.shape[1] = Poly::int(1);
    let span = program.outputs[output].span;
    program.nodes.push(Node {
        op: Op::Slice { axis: 1, start, end },
        args: vec![value],
        ty: Type::Tensor(ty),
        span,
    });
    let sliced = program.nodes.len() - 1;
    program.body.push(sliced);
    program.outputs[output].value = sliced;
    program
}

/// The name of the free dim that only the states' shapes use: the cache's capacity, which
/// no input's shape gives, so the caller must (`None` for a program without states).
pub fn capacity_dim(program: &Program) -> Result<Option<String>, RunError> {
    let syms = |state: bool| -> BTreeSet<Sym> {
        let shapes = program
            .inputs
            .iter()
            .filter(|i| i.state == state)
            .flat_map(|i| &i.shape);
        shapes.flat_map(Poly::syms).collect()
    };
    let given = syms(false);
    let free = |s: &Sym| matches!(program.dims.info(*s).kind, DimKind::Free { .. });
    let names: Vec<String> = syms(true)
        .difference(&given)
        .filter(|s| free(s))
        .map(|&s| program.dims.info(s).name.clone())
        .collect();
    match &names[..] {
        [] => Ok(None),
        [name] => Ok(Some(name.clone())),
        _ => Err(RunError::new(
            None,
            format!(
                "the states' shapes have several dims no input gives: {}",
                names.join(", ")
            ),
        )
        .with_hint("give the cache one capacity dim")),
    }
}

/// A program with a cache: the function keeps it between calls. A prompt of several
/// tokens runs once per generation, each with its own length, so its plan is not kept
/// ([`Function::call_once`]): its weights, laid out for products of many rows, are freed
/// before the one-token steps' plan lays out its own.
pub struct Cached<'f> {
    function: &'f Function,
    interface: Interface,
    capacity: usize,
}

impl<'f> Cached<'f> {
    /// Runs `function`, whose cache holds `capacity` tokens, from an empty cache.
    pub fn new(function: &'f Function, capacity: usize) -> Result<Cached<'f>, RunError> {
        function.reset_state();
        Ok(Cached {
            interface: Interface::of(function.program())?,
            function,
            capacity,
        })
    }
}

impl Model for Cached<'_> {
    fn forward(&mut self, ids: &[u32], start: usize) -> Result<Vec<f32>, RunError> {
        let end = start + ids.len();
        if end > self.capacity {
            let message = format!("{end} tokens do not fit the cache of {}", self.capacity);
            return Err(RunError::new(None, message));
        }
        // int64 values travel as float32, exact below 2^24 (vocabularies are smaller).
        let ids: Vec<f32> = ids.iter().map(|&id| id as f32).collect();
        let positions: Vec<f32> = (start..end).map(|p| p as f32).collect();
        let logits = self
            .interface
            .call(self.function, &ids, &positions, ids.len() > 1)?;
        let last = logits.shape.get(1).map_or(0, |n| n.saturating_sub(1));
        logits_row(&logits, last)
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
        let logits = self.interface.call(self.function, &padded, &positions, false)?;
        logits_row(&logits, end - 1)
    }
}

/// Row `position` of logits of shape `[1, N, V]`.
fn logits_row(logits: &Tensor, position: usize) -> Result<Vec<f32>, RunError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::check_source;

    fn program(src: &str) -> Program {
        let checked = check_source(src, &[]).unwrap();
        assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
        checked.program
    }

    const IDS: &str = "dim B, N, C\ninput input_ids: [B, N] int64\n";

    #[test]
    fn the_capacity_is_the_free_dim_only_the_states_use() {
        let cached = program(&format!(
            "{IDS}input cache_position: [N] int64\nstate k: [B, C, 2]\n\
             output logits = input_ids.float()[:, :, None] + k.sum()\n"
        ));
        assert_eq!(capacity_dim(&cached).unwrap().as_deref(), Some("C"));
        let interface = Interface::of(&cached).unwrap();
        assert_eq!(
            (interface.input_ids, interface.cache_position, interface.inputs),
            (0, Some(1), 2)
        );
        let stateless = program(&format!("{IDS}output logits = input_ids.float()[:, :, None]\n"));
        assert_eq!(capacity_dim(&stateless).unwrap(), None);
        let two = program(&format!(
            "{IDS}dim M\ninput cache_position: [N] int64\nstate k: [C, M]\n\
             output logits = input_ids.float()[:, :, None] + k.sum()\n"
        ));
        let err = capacity_dim(&two).unwrap_err();
        assert_eq!(
            err.message,
            "the states' shapes have several dims no input gives: C, M"
        );
    }

    #[test]
    fn a_cached_programs_logits_are_cut_to_the_last_position_only() {
        let cached = program(&format!(
            "{IDS}input cache_position: [N] int64\nstate k: [B, C, 2]\n\
             output logits = input_ids.float()[:, :, None] + k.sum()\n"
        ));
        let last = last_logits(cached.clone());
        let value = last.outputs[0].value;
        let n = cached.tensor_type(cached.outputs[0].value).shape[1].clone();
        let want = Op::Slice {
            axis: 1,
            start: n.sub(&Poly::int(1)),
            end: n,
        };
        assert_eq!(last.node(value).op, want);
        assert_eq!(last.node(value).args, [cached.outputs[0].value]);
        assert_eq!(last.tensor_type(value).shape[1], Poly::int(1));
        // A window's last token is not its last position: its logits stay whole.
        let stateless = program(&format!("{IDS}output logits = input_ids.float()[:, :, None]\n"));
        let kept = last_logits(stateless.clone());
        assert_eq!(format!("{kept:?}"), format!("{stateless:?}"));
    }

    #[test]
    fn programs_that_cannot_generate_say_why() {
        let message = |src: &str| Interface::of(&program(src)).unwrap_err().message;
        assert_eq!(
            message("dim N\ninput x: [N]\noutput logits = x[None, None, :]\n"),
            "the program has no input `input_ids`"
        );
        assert_eq!(
            message(&format!("{IDS}output logits = input_ids.float()\n")),
            "the program has no output `logits` of shape [B, N, V]"
        );
        assert_eq!(
            message(&format!(
                "{IDS}input x: [N]\noutput logits = input_ids.float()[:, :, None] + x[None, :, None]\n"
            )),
            "the program takes the input `x`, which generation does not give"
        );
        assert_eq!(
            message(&format!(
                "{IDS}state k: [C]\noutput logits = input_ids.float()[:, :, None] + k.sum()\n"
            )),
            "the program keeps a state but takes no `cache_position`"
        );
    }
}
