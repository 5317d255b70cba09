//! The optimizer: equality saturation with egg, from the checked program to the engineered
//! one (`attnc ir --stage optimized`).
//!
//! The program becomes one term ([`convert`]); the rules ([`rules`]) grow the e-graph with
//! equal programs, within bounds on nodes, iterations and time; the extractor ([`cost`])
//! picks the cheapest, which goes back to an [`ir::Program`] that the interpreter and the
//! backends run like any other. [`explain`] tells, with egg's explanations, which rules
//! prove the result equal to the source.
//!
//! ```
//! # let src = std::fs::read_to_string("examples/mha_heads.attn").unwrap();
//! let checked = attnc::driver::check_source(&src, &[]).unwrap();
//! let optimized = attnc::opt::optimize(&checked.program);
//! assert!(!optimized.program.to_text().contains("for h"));
//! println!("{}", optimized.stats);
//! ```

mod analysis;
mod convert;
mod cost;
mod explain;
mod lang;
mod layers;
mod layout;
mod rules;

pub use analysis::{Ctx, Data, Kind, Ty, EG};
pub use cost::{Cost, NOMINAL};
pub use explain::explain;
pub use lang::{DimLeaf, Float, ShapeLeaf, Tensor};
pub use rules::rules;

use crate::ir;
use egg::{Runner, StopReason};
use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The runner's bounds: the examples saturate far below them. They count nodes and
/// iterations, never time, so the optimized program does not depend on the machine's
/// speed; the node bound grows with the program (`NODES_PER_SOURCE_NODE` times its nodes),
/// so the e-graph's memory stays linear in the program. Stopping at a bound still gives a
/// correct program: every e-class only ever holds equal values.
pub const NODE_LIMIT: usize = 20_000;
pub const NODES_PER_SOURCE_NODE: usize = 4;
pub const ITER_LIMIT: usize = 40;

/// The optimized program and how it was found.
pub struct Optimized {
    pub program: ir::Program,
    pub stats: Stats,
}

/// What the optimizer did, for `--stats`.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Each rule that fired and how many times, by name.
    pub rules: Vec<(String, usize)>,
    pub stop_reason: String,
    pub iterations: usize,
    pub nodes: usize,
    pub classes: usize,
    /// The source program's cost, where it was asked for ([`optimize_and_compare`]).
    pub before: Option<Cost>,
    pub after: Cost,
    /// Rule applications refused because they would have changed a shape.
    pub refused: usize,
    /// Why the source was kept, when it was.
    pub fallback: Option<String>,
    pub time: Duration,
    /// Where `time` went.
    pub phases: Phases,
    /// For a model optimized a layer at a time: its pieces, and how many were distinct
    /// (optimized; the figures above are theirs, the costs those of every piece).
    pub pieces: Option<(usize, usize)>,
}

/// The optimizer's time by phase, for `--stats` and `attnc bench --profile`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Phases {
    /// The program as a term, added to a fresh e-graph (the analysis of every node).
    pub build: Duration,
    /// Equality saturation: the rules' searches, applications and rebuilds.
    pub saturate: Duration,
    /// Extraction, of the source's cost and of the cheapest program.
    pub extract: Duration,
    /// The extracted term back to a program.
    pub convert: Duration,
}

impl std::ops::Add for Phases {
    type Output = Phases;
    fn add(self, o: Phases) -> Phases {
        Phases {
            build: self.build + o.build,
            saturate: self.saturate + o.saturate,
            extract: self.extract + o.extract,
            convert: self.convert + o.convert,
        }
    }
}

impl fmt::Display for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "build {:.1}, saturate {:.1}, extract {:.1}, convert {:.1} ms",
            ms(self.build),
            ms(self.saturate),
            ms(self.extract),
            ms(self.convert)
        )
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((all, distinct)) = self.pieces {
            writeln!(f, "pieces: {all}, {distinct} distinct (a layer at a time)")?;
        }
        writeln!(f, "stop reason: {}", self.stop_reason)?;
        writeln!(f, "iterations: {}", self.iterations)?;
        writeln!(f, "e-graph: {} nodes, {} classes", self.nodes, self.classes)?;
        writeln!(f, "rules fired:")?;
        for (name, n) in &self.rules {
            writeln!(f, "  {name:<22} {n}")?;
        }
        if self.refused > 0 {
            writeln!(f, "applications refused (shape): {}", self.refused)?;
        }
        let nominal = format!("free dims at {NOMINAL}");
        let before = self.before.as_ref().map(|c| ("before", c));
        for (what, c) in before.into_iter().chain([("after", &self.after)]) {
            writeln!(
                f,
                "cost {what}: {} flops, {} bytes, {} kernels ({nominal})",
                c.flops, c.bytes, c.kernels
            )?;
        }
        if let Some(why) = &self.fallback {
            writeln!(f, "kept the source program: {why}")?;
        }
        // One line, the last: it varies from run to run (the stage snapshots leave it out).
        writeln!(
            f,
            "time: {:.3} ms ({})",
            self.time.as_secs_f64() * 1e3,
            self.phases
        )
    }
}

/// A runner over `prog`'s dims, bounded by nodes and iterations (see [`NODE_LIMIT`]) for a
/// source term of `source_nodes` nodes.
fn runner(prog: &ir::Program, explanations: bool, source_nodes: usize) -> Runner<Tensor, Ctx> {
    let nodes = NODE_LIMIT.max(NODES_PER_SOURCE_NODE.saturating_mul(source_nodes));
    let runner = Runner::new(Ctx::new(prog.dims.clone()))
        .with_node_limit(nodes)
        .with_iter_limit(ITER_LIMIT)
        .with_time_limit(Duration::MAX)
        .with_scheduler(Bounded { matches: nodes });
    match explanations {
        true => runner.with_explanations_enabled(),
        false => runner,
    }
}

/// egg's simple scheduler with each rule's matches in one iteration capped at the node
/// bound. The runner checks its bounds only between rules, and a rule whose matches pair
/// e-nodes of one class (`slice-slice`) can find quadratically many in one search: capped,
/// no iteration adds more than a bounded number of nodes, so saturation always ends.
struct Bounded {
    matches: usize,
}

impl egg::RewriteScheduler<Tensor, Ctx> for Bounded {
    fn search_rewrite<'a>(
        &mut self,
        _iteration: usize,
        egraph: &EG,
        rewrite: &'a egg::Rewrite<Tensor, Ctx>,
    ) -> Vec<egg::SearchMatches<'a, Tensor>> {
        rewrite.search_with_limit(egraph, self.matches)
    }
}

fn stop_text(reason: &Option<StopReason>) -> String {
    match reason {
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit ({n})"),
        Some(StopReason::NodeLimit(n)) => format!("node limit ({n})"),
        Some(StopReason::TimeLimit(s)) => format!("time limit ({s} s)"),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".into(),
    }
}

/// A run: the source term, the saturated e-graph and its extraction.
struct Run {
    source: egg::RecExpr<Tensor>,
    runner: Runner<Tensor, Ctx>,
    root: egg::Id,
    extraction: cost::Extraction,
    before: Option<Cost>,
    phases: Phases,
}

/// What a run works out beyond the optimized program.
#[derive(Clone, Copy)]
struct Asked {
    /// The e-graph's explanations (`--explain`).
    explanations: bool,
    /// The source program's cost (an extraction of the unsaturated e-graph, which proves
    /// the source's layouts again: a third of llama_S's optimization).
    before: bool,
}

fn run(prog: &ir::Program, asked: Asked) -> Result<Run, String> {
    let mut phases = Phases::default();
    let mut clock = Instant::now();
    let mut lap = |phase: &mut Duration| {
        *phase += clock.elapsed();
        clock = Instant::now();
    };
    let source = convert::to_expr(prog)?;
    let mut runner = runner(prog, asked.explanations, source.as_ref().len()).with_expr(&source);
    let root = *runner.roots.last().ok_or("no root")?;
    runner.egraph.rebuild();
    lap(&mut phases.build);
    let before = match asked.before {
        true => Some(
            cost::extract(&runner.egraph, root)
                .ok_or("the source has no cost")?
                .total,
        ),
        false => None,
    };
    lap(&mut phases.extract);
    let mut runner = runner.run(rules_for(&source));
    runner.egraph.rebuild();
    lap(&mut phases.saturate);
    let extraction = cost::extract(&runner.egraph, root).ok_or("no term was extracted")?;
    lap(&mut phases.extract);
    Ok(Run {
        source,
        runner,
        root,
        extraction,
        before,
        phases,
    })
}

/// The rules that can fire on `source`. The per-head lifts (`lift-*`, most of the table:
/// one per elementwise op and side) all need a loop variable, which only a `for` brings:
/// a program without one skips them, and saturates in fewer searches.
fn rules_for(source: &egg::RecExpr<Tensor>) -> Vec<&'static rules::Rw> {
    let loops = source.as_ref().iter().any(|n| matches!(n, Tensor::For(_)));
    match loops {
        true => table(true).iter().collect(),
        false => table(false).iter().filter(|r| !rules::is_lift(r)).collect(),
    }
}

/// The whole rule table, or one without the lifts where `lifts` is false and the whole
/// table is not built yet (the lifts' patterns were 10 % of the seed module's
/// optimization).
///
/// The tables are built once per process and shared: parsing their patterns was 2 % of
/// MiniLM's compile under `perf`, paid again for each piece of a model.
fn table(lifts: bool) -> &'static [rules::Rw] {
    match (lifts, ALL.get()) {
        (true, _) => ALL.get_or_init(rules),
        (false, Some(all)) => all,
        (false, None) => NO_LIFTS.get_or_init(|| rules::rules_with(false)),
    }
}

/// The whole rule table and the one without the lifts, each built once ([`table`]).
static ALL: OnceLock<Vec<rules::Rw>> = OnceLock::new();
static NO_LIFTS: OnceLock<Vec<rules::Rw>> = OnceLock::new();

/// Whether `prog` has a `for`, which is what [`rules_for`] asks of its term. A `for` the
/// term leaves out only costs building the whole table, whose rules less the lifts are
/// the same.
fn has_loops(prog: &ir::Program) -> bool {
    prog.nodes.iter().any(|n| matches!(n.op, ir::Op::For { .. }))
}

/// `run`, with a panic (a bug, never expected) turned into an error.
///
/// egg times its iterations and rebuilds with `quanta`, whose clock calibrates itself on
/// first use: a busy loop of at least half a millisecond, up to 200 ms where other
/// processes share the cores (40 % of a llama layer's compile, measured under load). The
/// runner's bounds count nodes and iterations, never time, and egg's timings are never
/// read, so it runs on a mock clock, which needs no calibration.
fn guarded(prog: &ir::Program, asked: Asked) -> Result<Run, String> {
    let (clock, _) = quanta::Clock::mock();
    quanta::with_clock(&clock, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(prog, asked)))
            .unwrap_or_else(|_| Err("internal error in the optimizer".into()))
    })
}

/// Optimizes `prog`. It never fails: where something goes wrong (a rule bug shows as a
/// merge of different shapes), the source program is returned and the stats say why.
///
/// A model whose layers the checker unrolled is optimized a layer at a time, each distinct
/// layer once (see [`layers`]); any other program as one term. The stats leave the source's
/// cost out ([`optimize_and_compare`] works it out too).
pub fn optimize(prog: &ir::Program) -> Optimized {
    optimize_asking(prog, false)
}

/// [`optimize`], with the source program's cost in the stats beside the result's (`attnc
/// ir --stats`).
pub fn optimize_and_compare(prog: &ir::Program) -> Optimized {
    optimize_asking(prog, true)
}

fn optimize_asking(prog: &ir::Program, before: bool) -> Optimized {
    let start = Instant::now();
    let whole = |p: &ir::Program| optimize_whole(p, before);
    match layers::optimize(prog, whole) {
        Some(mut optimized) => {
            optimized.stats.time = start.elapsed();
            optimized
        }
        None => whole(prog),
    }
}

/// Optimizes `prog` as one term.
///
/// Extraction and conversion recurse along the program's chains of values, so the work
/// runs on a thread whose stack grows with the program (a 3,000-statement chain needs more
/// than a test thread's 2 MiB).
fn optimize_whole(prog: &ir::Program, before: bool) -> Optimized {
    let stack = STACK_BASE.saturating_add(STACK_PER_NODE.saturating_mul(prog.nodes.len()));
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .stack_size(stack)
            .spawn_scoped(scope, || optimize_here(prog, before));
        // This thread would only wait for the worker: it builds the rule table the worker
        // needs (parsing the patterns, 0.46 ms at the seed module, once per process) while
        // the worker converts the program and builds its e-graph, and the worker waits
        // only for what is left of it.
        table(has_loops(prog));
        match worker {
            Ok(handle) => handle.join().unwrap_or_else(|_| optimize_failed(prog)),
            Err(_) => optimize_here(prog, before),
        }
    })
}

/// The optimizer thread's stack: a base, and room for each node of the program.
const STACK_BASE: usize = 8 << 20;
const STACK_PER_NODE: usize = 4 << 10;

/// The source program, when the optimizer thread itself failed (a bug, never expected).
fn optimize_failed(prog: &ir::Program) -> Optimized {
    let stats = Stats {
        fallback: Some("internal error in the optimizer".into()),
        ..Stats::default()
    };
    Optimized {
        program: prog.clone(),
        stats,
    }
}

fn optimize_here(prog: &ir::Program, before: bool) -> Optimized {
    let start = Instant::now();
    let mut stats = Stats::default();
    let asked = Asked {
        explanations: false,
        before,
    };
    let result = guarded(prog, asked).and_then(|run| {
        let eg = &run.runner.egraph;
        stats.stop_reason = stop_text(&run.runner.stop_reason);
        stats.iterations = run.runner.iterations.len();
        stats.nodes = eg.total_number_of_nodes();
        stats.classes = eg.number_of_classes();
        stats.refused = eg.analysis.refused;
        stats.rules = fired(&run.runner);
        stats.before = run.before;
        stats.phases = run.phases;
        if eg.analysis.conflicts > 0 {
            return Err(format!("{} merges of different shapes", eg.analysis.conflicts));
        }
        stats.after = run.extraction.total;
        let start = Instant::now();
        let program = convert::lower(eg, &run.extraction, eg.find(run.root), prog);
        stats.phases.convert = start.elapsed();
        program
    });
    let program = match result {
        Ok(p) => p,
        Err(why) => {
            stats.fallback = Some(why);
            stats.after = stats.before.unwrap_or_default();
            prog.clone()
        }
    };
    stats.time = start.elapsed();
    Optimized { program, stats }
}

/// The rules that fired, with how often, by name.
fn fired(runner: &Runner<Tensor, Ctx>) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            if *n > 0 {
                *counts.entry(name.to_string()).or_default() += n;
            }
        }
    }
    counts.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(src: &str) -> egg::RecExpr<Tensor> {
        let checked = crate::driver::check_source(src, &[]).unwrap();
        convert::to_expr(&checked.program).unwrap()
    }

    #[test]
    fn only_a_program_with_a_loop_gets_the_per_head_lifts() {
        let lifts = |t: &egg::RecExpr<Tensor>| {
            rules_for(t)
                .iter()
                .filter(|r| r.name.as_str().starts_with("lift-"))
                .count()
        };
        let flat = term(&std::fs::read_to_string("examples/self_attention.attn").unwrap());
        let heads = term(&std::fs::read_to_string("examples/mha_heads.attn").unwrap());
        assert_eq!(lifts(&flat), 0);
        assert!(lifts(&heads) > 0);
        assert_eq!(rules_for(&heads).len(), rules().len());
    }

    /// The table built without the lifts is the whole table's rules that are not lifts, in
    /// the same order: a program without a loop gets the same rules either way.
    #[test]
    fn the_table_without_lifts_is_the_whole_table_less_its_lifts() {
        let names = |rs: &[&rules::Rw]| rs.iter().map(|r| r.name.to_string()).collect::<Vec<_>>();
        let (all, no_lifts) = (rules(), rules::rules_with(false));
        let kept: Vec<&rules::Rw> = all.iter().filter(|r| !rules::is_lift(r)).collect();
        assert_eq!(names(&no_lifts.iter().collect::<Vec<_>>()), names(&kept));
        assert!(kept.len() < all.len());
    }
}
