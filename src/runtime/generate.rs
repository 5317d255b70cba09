//! Text generation with a causal language model: the loop that runs the prompt (prefill),
//! then one token at a time (decode), choosing each next token with a [`Sampler`] and
//! stopping at the end-of-sequence id or after a number of new tokens.
//!
//! A model is anything that gives the logits of the last of some new tokens ([`Model`]);
//! [`program`] runs a program through a [`Function`](super::function::Function), with its
//! key/value cache or over a window, compiled per shape and never per token.

mod sample;
mod stream;
pub mod program;

pub use sample::{argmax, Sampler};
pub use stream::TextStream;

use super::RunError;
use std::time::{Duration, Instant};

/// A causal language model, step by step.
pub trait Model {
    /// The logits of the last of `ids`, the tokens at positions `start..start + ids.len()`,
    /// those before `start` being the ones given to earlier calls.
    fn forward(&mut self, ids: &[u32], start: usize) -> Result<Vec<f32>, RunError>;
}

/// When generation stops.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// New tokens at most.
    pub max_new_tokens: usize,
    /// The end-of-sequence id: generation stops after it.
    pub eos: Option<u32>,
}

/// What a generation did and how long it took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// The prompt's tokens the prefill ran: none when no token was asked for.
    pub prompt_tokens: usize,
    pub prefill: Duration,
    /// New tokens, the end-of-sequence one included.
    pub new_tokens: usize,
    /// Steps after the prefill (one per new token but the last).
    pub decode_steps: usize,
    pub decode: Duration,
}

impl Stats {
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    pub fn decode_tokens_per_second(&self) -> f64 {
        self.decode_steps as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// Generates after `prompt` (not empty), giving each new id to `emit` as it is chosen.
pub fn generate(
    model: &mut dyn Model,
    prompt: &[u32],
    sampler: &mut Sampler,
    limits: Limits,
    mut emit: impl FnMut(u32) -> Result<(), RunError>,
) -> Result<Stats, RunError> {
    if prompt.is_empty() {
        return Err(RunError::new(None, "the prompt has no tokens").with_hint("give a prompt with some text"));
    }
    // No prefill runs, so none is counted: its tokens over no time were 2e9 tokens/s.
    if limits.max_new_tokens == 0 {
        return Ok(Stats::default());
    }
    let mut stats = Stats {
        prompt_tokens: prompt.len(),
        ..Stats::default()
    };
    let start = Instant::now();
    let mut logits = model.forward(prompt, 0)?;
    stats.prefill = start.elapsed();
    loop {
        let id = sampler.pick(&logits);
        stats.new_tokens += 1;
        emit(id)?;
        if Some(id) == limits.eos || stats.new_tokens == limits.max_new_tokens {
            return Ok(stats);
        }
        let start = Instant::now();
        logits = model.forward(&[id], prompt.len() + stats.new_tokens - 1)?;
        stats.decode += start.elapsed();
        stats.decode_steps += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts modulo the vocabulary: the next token is the last one plus one, and checks
    /// that it is given the positions the loop promises.
    struct Counter {
        vocab: usize,
        seen: usize,
        calls: Vec<(usize, usize)>,
    }

    impl Model for Counter {
        fn forward(&mut self, ids: &[u32], start: usize) -> Result<Vec<f32>, RunError> {
            assert_eq!(start, self.seen, "positions continue where the last call ended");
            self.seen += ids.len();
            self.calls.push((start, ids.len()));
            let mut logits = vec![0.0; self.vocab];
            logits[(*ids.last().unwrap() as usize + 1) % self.vocab] = 1.0;
            Ok(logits)
        }
    }

    fn run(prompt: &[u32], limits: Limits) -> (Vec<u32>, Stats, Vec<(usize, usize)>) {
        let mut model = Counter {
            vocab: 6,
            seen: 0,
            calls: Vec::new(),
        };
        let mut ids = Vec::new();
        let stats = generate(&mut model, prompt, &mut Sampler::Greedy, limits, |id| {
            ids.push(id);
            Ok(())
        })
        .unwrap();
        (ids, stats, model.calls)
    }

    #[test]
    fn prefill_once_then_one_token_a_step() {
        let limits = Limits {
            max_new_tokens: 4,
            eos: None,
        };
        let (ids, stats, calls) = run(&[0, 1], limits);
        assert_eq!(ids, [2, 3, 4, 5]);
        assert_eq!(calls, [(0, 2), (2, 1), (3, 1), (4, 1)]);
        assert_eq!(
            (stats.prompt_tokens, stats.new_tokens, stats.decode_steps),
            (2, 4, 3)
        );
    }

    #[test]
    fn stops_after_the_end_of_sequence_id() {
        let limits = Limits {
            max_new_tokens: 10,
            eos: Some(0),
        };
        let (ids, stats, _) = run(&[3], limits);
        assert_eq!(ids, [4, 5, 0]);
        assert_eq!(stats.decode_steps, 2);
    }

    #[test]
    fn no_new_tokens_runs_nothing_and_an_empty_prompt_is_an_error() {
        let limits = Limits {
            max_new_tokens: 0,
            eos: None,
        };
        let (ids, stats, calls) = run(&[1], limits);
        assert!(ids.is_empty() && calls.is_empty());
        assert_eq!(stats.prefill_tokens_per_second(), 0.0);
        let mut model = Counter {
            vocab: 2,
            seen: 0,
            calls: Vec::new(),
        };
        let err = generate(&mut model, &[], &mut Sampler::Greedy, limits, |_| Ok(())).unwrap_err();
        assert_eq!(err.message, "the prompt has no tokens");
    }
}
