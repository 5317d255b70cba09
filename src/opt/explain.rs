//! Why the optimized program equals the source (`attnc ir --stage optimized --explain`).
//!
//! The optimizer runs again with egg's explanations on, and egg proves the extracted term
//! equal to the source term: a chain of rewrites, each one rule applied forward or
//! backward somewhere in the whole program. Each step of the chain is a whole program,
//! so a long chain prints as its rules only, consecutive repeats folded.

use super::convert;
use super::lang::Tensor;
use crate::ir;
use egg::FlatTerm;
use std::fmt::Write as _;

/// Above this many characters, the steps' terms are left out.
const FULL_LIMIT: usize = 8_000;

/// The explanation as text; `Err` when the optimizer could not run.
pub fn explain(prog: &ir::Program) -> Result<String, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| explained(prog)))
        .unwrap_or_else(|_| Err("internal error in the optimizer's explanation".into()))
}

fn explained(prog: &ir::Program) -> Result<String, String> {
    let asked = super::Asked {
        explanations: true,
        before: false,
    };
    let mut run = super::guarded(prog, asked)?;
    let eg = &run.runner.egraph;
    if eg.analysis.conflicts > 0 {
        return Err("the optimizer kept the source program, so there is nothing to explain".into());
    }
    let root = eg.find(run.root);
    let optimized = convert::chosen_expr(eg, &run.extraction, root);
    let mut explanation = run.runner.egraph.explain_equivalence(&run.source, &optimized);
    let strings = explanation.get_flat_strings();
    let flat = explanation.make_flat_explanation();
    let steps: Vec<(String, bool)> = flat.iter().skip(1).filter_map(rule_of).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "the optimized program equals the source by {} rewrites (egg's explanation):",
        steps.len()
    );
    let total: usize = strings.iter().map(String::len).sum();
    if total <= FULL_LIMIT {
        for s in &strings {
            let _ = writeln!(out, "  {s}");
        }
        return Ok(out);
    }
    let _ = writeln!(
        out,
        "each step rewrites one part of the whole program ({total} characters in all, too large to print), so only its rule is shown"
    );
    let mut i = 0;
    let mut n = 0;
    while i < steps.len() {
        let run_len = steps[i..].iter().take_while(|s| **s == steps[i]).count();
        n += 1;
        let (name, forward) = &steps[i];
        let dir = if *forward { "" } else { " (backward)" };
        let times = if run_len > 1 {
            format!(" ×{run_len}")
        } else {
            String::new()
        };
        let _ = writeln!(out, "  {n:>3}. {name}{dir}{times}");
        i += run_len;
    }
    Ok(out)
}

/// The rule a step of a flat explanation applies, and whether forward.
fn rule_of(term: &FlatTerm<Tensor>) -> Option<(String, bool)> {
    if let Some(r) = term.forward_rule {
        return Some((r.to_string(), true));
    }
    if let Some(r) = term.backward_rule {
        return Some((r.to_string(), false));
    }
    term.children.iter().find_map(rule_of)
}
