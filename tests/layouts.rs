//! The layout property: random chains of ops on free dims; whenever the checker accepts
//! one, PyTorch (the concrete model of `torch_model`) accepts it at every size tried, 1
//! and 0 included, and where the checker says the strides are known, they are PyTorch's.

use attnc::driver::check_source;
use attnc::ir::{OtherStrides, Program, Type};
use attnc::render;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, RunOptions};
use std::collections::BTreeMap;

mod common;
mod torch_model;
use common::Rng;
use torch_model::{elementwise, fresh, T};

/// A factor of a size: `B`, `N` and `E` free, `U = 1` and `D = 12` constant, a number, a
/// free dim less one (a slice `1:` of it), or a sum of dims (`N + 1`, never 1 nor 0).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Atom {
    B,
    N,
    E,
    U,
    D,
    K(i64),
    BLess1,
    NLess1,
    NPlus1,
}

impl Atom {
    fn text(self) -> String {
        match self {
            Atom::B => "B".into(),
            Atom::N => "N".into(),
            Atom::E => "E".into(),
            Atom::U => "U".into(),
            Atom::D => "D".into(),
            Atom::K(k) => k.to_string(),
            Atom::BLess1 => "(B - 1)".into(),
            Atom::NLess1 => "(N - 1)".into(),
            Atom::NPlus1 => "(N + 1)".into(),
        }
    }

    fn value(self, &Sizes { b, n, e }: &Sizes) -> i64 {
        match self {
            Atom::B => b,
            Atom::N => n,
            Atom::E => e,
            Atom::U => 1,
            Atom::D => 12,
            Atom::K(k) => k,
            Atom::BLess1 => b - 1,
            Atom::NLess1 => n - 1,
            Atom::NPlus1 => n + 1,
        }
    }

    /// The atom an axis of this one size becomes after `[1:]`.
    fn less_one(self) -> Option<Atom> {
        match self {
            Atom::B => Some(Atom::BLess1),
            Atom::N => Some(Atom::NLess1),
            Atom::NPlus1 => Some(Atom::N),
            Atom::D => Some(Atom::K(11)),
            Atom::K(k) if k >= 1 => Some(Atom::K(k - 1)),
            _ => None,
        }
    }
}

/// An axis's size: a product of atoms (none: 1).
type Axis = Vec<Atom>;

fn size_text(axis: &Axis) -> String {
    match axis.is_empty() {
        true => "1".into(),
        false => axis.iter().map(|a| a.text()).collect::<Vec<_>>().join(" * "),
    }
}

/// Values of the free dims.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    b: i64,
    n: i64,
    e: i64,
}

fn size_value(axis: &Axis, at: &Sizes) -> i64 {
    axis.iter().map(|a| a.value(at)).product()
}

/// A tensor operand beside the chain: a declared input, transposed in the expression
/// where `swap` says so.
#[derive(Clone, Debug)]
struct Operand {
    name: String,
    declared: Vec<Axis>,
    swap: Option<(usize, usize)>,
}

impl Operand {
    fn text(&self) -> String {
        match self.swap {
            Some((a, b)) => format!("{}.transpose({a}, {b})", self.name),
            None => self.name.clone(),
        }
    }

    fn model(&self, at: &Sizes) -> T {
        let t = T::row_major(self.declared.iter().map(|a| size_value(a, at)).collect());
        match self.swap {
            Some((i, j)) => t.transpose(i, j),
            None => t,
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    Transpose(usize, usize),
    Permute(Vec<usize>),
    /// Sizes (`None` is `-1`), and whether it is `reshape`.
    View(Vec<Option<Axis>>, bool),
    Contiguous,
    /// Sizes (`None` is `-1`), new leading axes first.
    Expand(Vec<Option<Axis>>),
    /// `flatten(start, end)`.
    Flatten(usize, usize),
    /// `repeat_interleave(2, dim)`.
    RepeatInterleave(usize),
    Unsqueeze(usize),
    Squeeze(usize),
    Slice(usize),
    Select(usize),
    /// `chain OP operand`, or `operand OP chain` when the flag is set.
    Binary(Operand, bool),
    Scalar,
    Exp,
    /// `chain / (chain * chain + 1.0)`.
    Rational,
    Softmax(usize),
    MaskedFill(Operand),
    /// `sum`, `mean`, `amax` or `var` over an axis, with `keepdim` or not.
    Reduce(&'static str, usize, bool),
    LogSoftmax(usize),
    /// `layer_norm` (true) or `rms_norm` over the last axis.
    Norm(bool),
    /// `where(operand > 0, chain, 0.0)`.
    Where(Operand),
    /// `clamp(chain, min=0.0)`.
    Clamp,
    /// `cat([chain, chain], dim)`.
    Cat(usize),
    /// `stack(for h in 0..2 { chain }, dim)`.
    Stack(usize),
    /// The second part of `chunk(chain, 2, dim)` (true, on an even constant axis) or of
    /// `split(chain, [1, size - 1], dim)`, bound by a `let`.
    Part(usize, bool),
    /// `tril` (true) or `triu(.., 1)`.
    Triangle(bool),
}

struct Chain {
    decls: Vec<String>,
    /// `let` lines binding the parts of `split` and `chunk`, after every input.
    lets: Vec<String>,
    expr: String,
    steps: Vec<Step>,
    /// The rank each step was drawn for.
    ranks: Vec<usize>,
    start: Vec<Axis>,
}

/// Draws a chain of `len` steps, tracking the symbolic shape so that most steps fit.
fn draw(rng: &mut Rng, len: usize) -> Chain {
    let starts: [Vec<Axis>; 7] = [
        vec![vec![Atom::B], vec![Atom::NPlus1], vec![Atom::N]],
        vec![vec![Atom::B], vec![Atom::N], vec![Atom::K(4)]],
        vec![vec![Atom::B], vec![Atom::N], vec![Atom::E]],
        vec![vec![Atom::E], vec![Atom::B], vec![Atom::U], vec![Atom::N]],
        vec![vec![Atom::N], vec![Atom::B], vec![Atom::D]],
        vec![vec![Atom::B], vec![Atom::N], vec![Atom::U], vec![Atom::K(3)]],
        vec![vec![Atom::N], vec![Atom::K(2)], vec![Atom::B], vec![Atom::K(3)]],
    ];
    let start = starts[rng.below(starts.len())].clone();
    let mut shape = start.clone();
    let mut decls = vec![format!("input x: {}", shape_text(&shape))];
    let mut expr = "x".to_string();
    let mut lets = Vec::new();
    let mut steps = Vec::new();
    let mut ranks = Vec::new();
    for _ in 0..len {
        let rank = shape.len();
        let step = match rng.below(22) {
            0 | 1 if rank >= 2 => {
                let a = rng.below(rank);
                let b = (a + 1 + rng.below(rank - 1)) % rank;
                Step::Transpose(a, b)
            }
            2 if rank >= 2 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, rng.below(i + 1));
                }
                Step::Permute(perm)
            }
            3 | 4 => Step::View(regroup(rng, &shape), rng.below(3) == 0),
            5 => Step::Contiguous,
            6 => Step::Unsqueeze(rng.below(rank + 1)),
            7 if rank >= 1 => Step::Squeeze(rng.below(rank)),
            8 if rank >= 1 => {
                let a = rng.below(rank);
                match shape[a].as_slice() {
                    [x] if x.less_one().is_some() => Step::Slice(a),
                    _ => Step::Select(a),
                }
            }
            9 | 10 => {
                let name = format!("y{}", decls.len());
                let o = operand(rng, &shape, name);
                decls.push(format!("input {}: {}", o.name, shape_text(&o.declared)));
                Step::Binary(o, rng.below(2) == 0)
            }
            11 => match rng.below(4) {
                0 => Step::Scalar,
                1 => Step::Exp,
                2 => Step::Rational,
                _ if rank >= 1 => Step::Softmax(rng.below(rank)),
                _ => Step::Exp,
            },
            12 => {
                let name = format!("m{}", decls.len());
                let o = operand(rng, &shape, name);
                decls.push(format!("input {}: {}", o.name, shape_text(&o.declared)));
                Step::MaskedFill(o)
            }
            13 => Step::Expand(expanded(rng, &shape)),
            14 if rank >= 1 => {
                let op = ["sum", "mean", "amax", "var"][rng.below(4)];
                Step::Reduce(op, rng.below(rank), rng.below(2) == 0)
            }
            15 if rank >= 1 => match rng.below(2) {
                0 => Step::LogSoftmax(rng.below(rank)),
                _ => Step::Norm(rng.below(2) == 0),
            },
            16 => {
                let name = format!("w{}", decls.len());
                let o = operand(rng, &shape, name);
                decls.push(format!("input {}: {}", o.name, shape_text(&o.declared)));
                Step::Where(o)
            }
            17 if rank >= 1 => match rng.below(3) {
                0 => Step::Clamp,
                1 => Step::Cat(rng.below(rank)),
                _ => Step::Stack(rng.below(rank + 1)),
            },
            18 if rank >= 1 => {
                let a = rng.below(rank);
                match shape[a].as_slice() {
                    [Atom::K(k)] if k % 2 == 0 => Step::Part(a, true),
                    [Atom::D] => Step::Part(a, true),
                    [x] if x.less_one().is_some() => Step::Part(a, false),
                    _ => Step::Clamp,
                }
            }
            19 if rank >= 2 => Step::Triangle(rng.below(2) == 0),
            20 if rank >= 1 => {
                let a = rng.below(rank);
                Step::Flatten(a, a + rng.below(rank - a))
            }
            21 if rank >= 1 => Step::RepeatInterleave(rng.below(rank)),
            _ => Step::Contiguous,
        };
        expr = apply_text(&expr, &step, &shape);
        if let Step::Part(..) = step {
            let name = format!("p{}", lets.len());
            lets.push(format!("let (_{name}, {name}) = {expr}"));
            expr = name;
        }
        ranks.push(shape.len());
        shape = apply_shape(&shape, &step);
        steps.push(step);
    }
    Chain {
        decls,
        lets,
        expr,
        steps,
        ranks,
        start,
    }
}

fn shape_text(shape: &[Axis]) -> String {
    let parts: Vec<String> = shape.iter().map(size_text).collect();
    format!("[{}]", parts.join(", "))
}

/// New sizes over the same atoms in the same order, with axes of size 1 added or dropped
/// here and there and sometimes one size written `-1`.
fn regroup(rng: &mut Rng, shape: &[Axis]) -> Vec<Option<Axis>> {
    let atoms: Vec<Atom> = shape.iter().flatten().copied().collect();
    let mut out: Vec<Axis> = vec![Vec::new()];
    for a in atoms {
        if !out.last().is_some_and(|x| x.is_empty()) && rng.below(2) == 0 {
            out.push(Vec::new());
        }
        out.last_mut().expect("never empty").push(a);
    }
    if rng.below(4) == 0 {
        let at = rng.below(out.len() + 1);
        let unit = if rng.below(2) == 0 { vec![] } else { vec![Atom::U] };
        out.insert(at, unit);
    }
    let mut sizes: Vec<Option<Axis>> = out.into_iter().map(Some).collect();
    if rng.below(3) == 0 {
        let at = rng.below(sizes.len());
        sizes[at] = None;
    }
    sizes
}

/// `expand` sizes for `shape`: axes of size 1 repeat now and then, the others are kept
/// (written out or as `-1`), and sometimes a new leading axis comes first.
fn expanded(rng: &mut Rng, shape: &[Axis]) -> Vec<Option<Axis>> {
    let repeats = [
        vec![Atom::B],
        vec![Atom::N],
        vec![Atom::E],
        vec![Atom::K(3)],
        vec![Atom::NPlus1],
        vec![],
        vec![Atom::U],
    ];
    let mut sizes: Vec<Option<Axis>> = shape
        .iter()
        .map(|a| {
            let one = a.iter().all(|x| matches!(x, Atom::U | Atom::K(1)));
            match rng.below(3) {
                0 if one => Some(repeats[rng.below(repeats.len())].clone()),
                1 => None,
                _ => Some(a.clone()),
            }
        })
        .collect();
    if rng.below(3) == 0 {
        sizes.insert(0, Some(repeats[rng.below(repeats.len())].clone()));
    }
    sizes
}

/// An operand that broadcasts against `shape`: a suffix of its axes, some of them 1 or `U`,
/// declared transposed and transposed back in the expression now and then. Axes sliced
/// from a free dim become 1, since inputs are declared over whole dims.
fn operand(rng: &mut Rng, shape: &[Axis], name: String) -> Operand {
    let drop = rng.below(shape.len().min(2) + 1);
    let mut axes: Vec<Axis> = shape[drop..]
        .iter()
        .map(|a| {
            let sliced = a.iter().any(|x| matches!(x, Atom::BLess1 | Atom::NLess1));
            match rng.below(4) {
                _ if sliced => vec![],
                0 => vec![],
                1 => vec![Atom::U],
                _ => a.clone(),
            }
        })
        .collect();
    let swap = (axes.len() >= 2 && rng.below(2) == 0).then(|| {
        let a = rng.below(axes.len());
        let b = (a + 1 + rng.below(axes.len() - 1)) % axes.len();
        (a.min(b), a.max(b))
    });
    if let Some((a, b)) = swap {
        axes.swap(a, b);
    }
    Operand {
        name,
        declared: axes,
        swap,
    }
}

fn apply_text(expr: &str, step: &Step, shape: &[Axis]) -> String {
    let list = |xs: &[usize]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
    // A postfix op binds tighter than arithmetic: parenthesize what has spaces.
    let e = match expr.contains(' ') {
        true => format!("({expr})"),
        false => expr.to_string(),
    };
    let index = |a: usize, what: &str| {
        let mut parts = vec![":"; a];
        parts.push(what);
        format!("{e}[{}]", parts.join(", "))
    };
    match step {
        Step::Transpose(a, b) => format!("{e}.transpose({a}, {b})"),
        Step::Permute(p) => format!("{e}.permute({})", list(p)),
        Step::View(sizes, reshape) => {
            let parts: Vec<String> = sizes
                .iter()
                .map(|s| s.as_ref().map_or("-1".into(), size_text))
                .collect();
            let op = if *reshape { "reshape" } else { "view" };
            format!("{e}.{op}({})", parts.join(", "))
        }
        Step::Contiguous => format!("{e}.contiguous()"),
        Step::Expand(sizes) => {
            let parts: Vec<String> = sizes
                .iter()
                .map(|s| s.as_ref().map_or("-1".into(), size_text))
                .collect();
            format!("{e}.expand({})", parts.join(", "))
        }
        Step::Flatten(a, b) => format!("{e}.flatten({a}, {b})"),
        Step::RepeatInterleave(d) => format!("{e}.repeat_interleave(2, dim={d})"),
        Step::Unsqueeze(d) => format!("{e}.unsqueeze({d})"),
        Step::Squeeze(d) => format!("{e}.squeeze({d})"),
        Step::Slice(a) => index(*a, &format!("1 : {}", size_text(&shape[*a]))),
        Step::Select(a) => index(*a, "0"),
        Step::Binary(o, false) => format!("{e} * {}", o.text()),
        Step::Binary(o, true) => format!("{} + {e}", o.text()),
        Step::Scalar => format!("{e} * 0.5"),
        Step::Exp => format!("exp({expr})"),
        Step::Rational => format!("{e} / ({e} * {e} + 1.0)"),
        Step::Softmax(d) => format!("{e}.softmax({d})"),
        Step::MaskedFill(o) => format!("{e}.masked_fill({} > 0, 0.0)", o.text()),
        Step::Reduce(op, d, keepdim) => {
            let keep = if *keepdim { ", keepdim=True" } else { "" };
            format!("{e}.{op}({d}{keep})")
        }
        Step::LogSoftmax(d) => format!("{e}.log_softmax({d})"),
        Step::Norm(layer) => {
            let op = if *layer { "layer_norm" } else { "rms_norm" };
            format!("{op}({expr}, [{}])", size_text(&shape[shape.len() - 1]))
        }
        Step::Where(o) => format!("where({} > 0, {expr}, 0.0)", o.text()),
        Step::Clamp => format!("clamp({expr}, min=0.0)"),
        Step::Cat(d) => format!("cat([{expr}, {expr}], dim={d})"),
        // A sequence of a `for`, or a list as PyTorch code writes it: the same strides.
        Step::Stack(d) if d % 2 == 0 => format!("stack([{expr}, {expr}], dim={d})"),
        Step::Stack(d) => format!("stack(for h in 0..2 {{ {expr} }}, {d})"),
        Step::Part(d, true) => format!("chunk({expr}, 2, dim={d})"),
        Step::Part(d, false) => {
            let rest = shape[*d][0].less_one().expect("drawn for a sliceable axis");
            format!("split({expr}, [1, {}], dim={d})", rest.text())
        }
        Step::Triangle(true) => format!("{e}.tril()"),
        Step::Triangle(false) => format!("triu({expr}, 1)"),
    }
}

fn apply_shape(shape: &[Axis], step: &Step) -> Vec<Axis> {
    let mut s = shape.to_vec();
    match step {
        Step::Transpose(a, b) => s.swap(*a, *b),
        Step::Permute(p) => s = p.iter().map(|&a| shape[a].clone()).collect(),
        Step::View(sizes, _) => {
            let known: Vec<Atom> = sizes.iter().flatten().flatten().copied().collect();
            let mut rest: Vec<Atom> = shape.iter().flatten().copied().collect();
            for a in known {
                if let Some(i) = rest.iter().position(|x| *x == a) {
                    rest.remove(i);
                }
            }
            s = sizes
                .iter()
                .map(|x| x.clone().unwrap_or_else(|| rest.clone()))
                .collect();
        }
        Step::Expand(sizes) => {
            let pad = sizes.len() - s.len();
            s = (0..sizes.len())
                .map(|i| sizes[i].clone().unwrap_or_else(|| shape[i - pad].clone()))
                .collect();
        }
        Step::Flatten(a, b) => {
            let merged: Axis = s[*a..=*b].concat();
            s.splice(*a..=*b, [merged]);
        }
        Step::RepeatInterleave(d) => s[*d].push(Atom::K(2)),
        Step::Unsqueeze(d) => s.insert(*d, vec![]),
        Step::Squeeze(d) => {
            let ones = s[*d].iter().all(|a| matches!(a, Atom::U | Atom::K(1)));
            if ones {
                s.remove(*d);
            }
        }
        Step::Slice(a) => s[*a] = vec![s[*a][0].less_one().expect("drawn for a sliceable axis")],
        Step::Select(a) => {
            s.remove(*a);
        }
        Step::Binary(o, _) | Step::MaskedFill(o) | Step::Where(o) => {
            let pad = s.len().saturating_sub(o.declared.len());
            for (i, axis) in s.iter_mut().enumerate().skip(pad) {
                let mut theirs = o.declared.clone();
                if let Some((a, b)) = o.swap {
                    theirs.swap(a, b);
                }
                if axis.iter().all(|a| matches!(a, Atom::U | Atom::K(1))) {
                    *axis = theirs[i - pad].clone();
                }
            }
        }
        Step::Reduce(_, d, true) => s[*d] = vec![],
        Step::Reduce(_, d, false) => {
            s.remove(*d);
        }
        Step::Cat(d) => s[*d] = [s[*d].clone(), vec![Atom::K(2)]].concat(),
        Step::Stack(d) => s.insert(*d, vec![Atom::K(2)]),
        Step::Part(d, true) => s[*d] = halved(&s[*d]),
        Step::Part(d, false) => s[*d] = vec![s[*d][0].less_one().expect("drawn for a sliceable axis")],
        Step::Contiguous
        | Step::Scalar
        | Step::Exp
        | Step::Rational
        | Step::Softmax(_)
        | Step::LogSoftmax(_)
        | Step::Norm(_)
        | Step::Clamp
        | Step::Triangle(_) => {}
    }
    s
}

/// Half of an even constant axis.
fn halved(axis: &Axis) -> Axis {
    match axis.as_slice() {
        [Atom::K(k)] => vec![Atom::K(k / 2)],
        [Atom::D] => vec![Atom::K(6)],
        _ => unreachable!("chunk is drawn for even constant axes"),
    }
}

/// The chain run through the model at the sizes `at`. A step drawn for another rank than
/// its operand's (after a `squeeze` the checker refuses) does not fit.
fn run_model(chain: &Chain, at: &Sizes) -> Result<T, String> {
    let mut t = T::row_major(chain.start.iter().map(|a| size_value(a, at)).collect());
    for (step, &rank) in chain.steps.iter().zip(&chain.ranks) {
        if t.shape.len() != rank {
            return Err(format!(
                "{step:?} was drawn for rank {rank}, not {}",
                t.shape.len()
            ));
        }
        t = match step {
            Step::Transpose(i, j) => t.transpose(*i, *j),
            Step::Permute(p) => t.permute(p),
            Step::View(sizes, reshape) => {
                let sizes: Vec<Option<i64>> = sizes
                    .iter()
                    .map(|s| s.as_ref().map(|a| size_value(a, at)))
                    .collect();
                match reshape {
                    true => t.reshape(&sizes)?,
                    false => t.view(&sizes)?,
                }
            }
            Step::Contiguous => t.contiguous(),
            Step::Expand(sizes) => {
                let sizes: Vec<Option<i64>> = sizes
                    .iter()
                    .map(|s| s.as_ref().map(|a| size_value(a, at)))
                    .collect();
                t.expand(&sizes)?
            }
            Step::Flatten(a, b) => {
                let mut sizes: Vec<Option<i64>> = t.shape.iter().map(|&n| Some(n)).collect();
                let merged = t.shape[*a..=*b].iter().product();
                sizes.splice(*a..=*b, [Some(merged)]);
                match a == b {
                    true => t,
                    false => t.reshape(&sizes)?,
                }
            }
            // ATen: unsqueeze, expand, a contiguous clone, then a view.
            Step::RepeatInterleave(d) => {
                let mut shape = t.shape.clone();
                shape[*d] *= 2;
                fresh(shape)
            }
            Step::Unsqueeze(d) => t.unsqueeze(*d),
            Step::Squeeze(d) => t.squeeze(*d),
            Step::Slice(a) => t.slice(*a, 1, t.shape[*a])?,
            Step::Select(a) => t.select(*a, 0)?,
            Step::Binary(o, false) => elementwise(&[&t, &o.model(at)])?,
            Step::Binary(o, true) => elementwise(&[&o.model(at), &t])?,
            Step::Scalar => elementwise(&[&t, &T::row_major(vec![])])?,
            Step::Exp => elementwise(&[&t])?,
            Step::Rational => {
                let square = elementwise(&[&t, &t])?;
                let denominator = elementwise(&[&square, &T::row_major(vec![])])?;
                elementwise(&[&t, &denominator])?
            }
            Step::Softmax(_) => fresh(t.shape.clone()),
            Step::MaskedFill(o) => {
                let m = elementwise(&[&o.model(at), &T::row_major(vec![])])?;
                fresh(torch_model::broadcast(&[&t.shape, &m.shape])?)
            }
            // `torch.zeros(0, 3).amax(0)` raises "amax(): Expected reduction dim 0 to have
            // non-zero size"; `sum`, `mean` and `var` of no elements run (0, NaN, NaN).
            Step::Reduce("amax", d, _) if t.shape[*d] == 0 => {
                return Err(format!("amax over axis {d} of size 0"));
            }
            Step::Reduce(_, d, keepdim) => {
                let mut shape = t.shape.clone();
                match keepdim {
                    true => shape[*d] = 1,
                    false => _ = shape.remove(*d),
                }
                fresh(shape)
            }
            Step::LogSoftmax(_) | Step::Norm(true) | Step::Triangle(_) => fresh(t.shape.clone()),
            Step::Norm(false) => {
                let mut reduced = t.shape.clone();
                *reduced.last_mut().expect("drawn for rank 1 or more") = 1;
                elementwise(&[&t.contiguous_as_suggested(), &fresh(reduced)])?
            }
            Step::Where(o) => {
                let condition = elementwise(&[&o.model(at), &T::row_major(vec![])])?;
                elementwise(&[&condition, &t, &T::row_major(vec![])])?
            }
            Step::Clamp => elementwise(&[&t])?,
            Step::Cat(d) => torch_model::cat(&[&t, &t], *d),
            Step::Stack(d) => torch_model::stack(&[&t, &t], *d),
            Step::Part(d, true) => t.slice(*d, t.shape[*d] / 2, t.shape[*d])?,
            Step::Part(d, false) => t.slice(*d, 1, t.shape[*d])?,
        };
    }
    Ok(t)
}

/// What PyTorch does with a chain at every size tried.
enum Across {
    /// It raises at some size.
    Raises,
    /// It runs, but its result's rank depends on the sizes: a `squeeze` of an axis that is 1
    /// at some sizes only. The language gives each value one rank, so the checker refuses
    /// it by design (E0201, `LANGUAGE.md`'s `squeeze`).
    RankVaries,
    /// It runs at every size with one rank.
    Runs,
}

fn pytorch_across_sizes(chain: &Chain) -> Across {
    let mut ranks = Vec::new();
    for at in all_sizes() {
        match run_model(chain, &at) {
            Ok(t) => ranks.push(t.shape.len()),
            Err(_) => return Across::Raises,
        }
    }
    match ranks.windows(2).all(|w| w[0] == w[1]) {
        true => Across::Runs,
        false => Across::RankVaries,
    }
}

/// `(B, N)` pairs, each tried with every value of `E` in [`E_SIZES`].
const SIZES: &[(i64, i64)] = &[
    (1, 1),
    (1, 2),
    (2, 1),
    (2, 2),
    (3, 3),
    (1, 7),
    (7, 1),
    (2, 7),
    (7, 3),
    (4, 4),
    (3, 4),
    (12, 5),
    (5, 12),
    (6, 6),
];

const E_SIZES: &[i64] = &[1, 2, 3, 4, 12];

fn all_sizes() -> impl Iterator<Item = Sizes> {
    SIZES
        .iter()
        .flat_map(|&(b, n)| E_SIZES.iter().map(move |&e| Sizes { b, n, e }))
}
/// The checker's shape of output `out` at the sizes, and each list of strides it says the
/// output may have there, where it claims to know them.
fn checked_strides(prog: &Program, at: &Sizes) -> Option<(Vec<i64>, Vec<Vec<i64>>)> {
    let binding = prog.bindings.iter().find(|x| x.name == "out")?;
    let t = prog.tensor_type(binding.value);
    let value = |s: usize| match prog.dims.info(s).name.as_str() {
        "B" => Some(at.b),
        "N" => Some(at.n),
        "E" => Some(at.e),
        _ => None,
    };
    let eval = |ps: &[attnc::dims::Poly]| -> Option<Vec<i64>> {
        ps.iter().map(|p| prog.dims.eval(p, &value)).collect()
    };
    let layouts: Option<Vec<Vec<i64>>> = t.layouts()?.into_iter().map(eval).collect();
    Some((eval(&t.shape)?, layouts?))
}

/// Whether some value of the program has several possible lists of strides.
fn has_several_layouts(prog: &Program) -> bool {
    prog.nodes.iter().any(|n| match &n.ty {
        Type::Tensor(t) => matches!(t.others, OtherStrides::Listed(_)),
        Type::Seq { .. } => false,
    })
}

/// How many chains the property test draws by default.
const DEFAULT_CASES: usize = 10_000;

/// How many chains the property test draws: `ATTNC_LAYOUT_CASES`, or [`DEFAULT_CASES`].
fn cases() -> usize {
    std::env::var("ATTNC_LAYOUT_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Whatever the checker accepts, the model accepts at every size, with the shape and one
/// of the strides the checker says. Where the checker refuses a chain that the model
/// runs at every size with one rank (an over-rejection), it is counted by code and the
/// first few are printed (`--nocapture`); at the default count there is none.
#[test]
fn accepted_chains_run_in_pytorch_at_every_size() {
    let mut rng = Rng(0x5eed_0011);
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let mut over: BTreeMap<String, usize> = BTreeMap::new();
    let mut rank_varies: BTreeMap<String, usize> = BTreeMap::new();
    let mut accepted = 0;
    // Accepted chains with a value of several layouts: the lists are exercised.
    let mut several = 0;
    let cases = cases();
    // How many over-rejections of each code are printed: `ATTNC_LAYOUT_SHOWN`, or 3.
    let shown = std::env::var("ATTNC_LAYOUT_SHOWN")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    for case in 0..cases {
        let len = 1 + rng.below(8);
        let chain = draw(&mut rng, len);
        let src = format!(
            "dim B, N, E\ndim U = 1, D = 12\n{}\n{}\noutput out = {}\n",
            chain.decls.join("\n"),
            chain.lets.iter().map(|l| format!("{l}\n")).collect::<String>(),
            chain.expr
        );
        let checked = check_source(&src, &[]).expect("no overrides");
        if let Some(d) = checked.diagnostics.first() {
            let code = d.code.to_string();
            *refused.entry(code.clone()).or_default() += 1;
            match pytorch_across_sizes(&chain) {
                Across::Raises => {}
                Across::RankVaries => *rank_varies.entry(code).or_default() += 1,
                Across::Runs => {
                    let count = over.entry(code.clone()).or_default();
                    *count += 1;
                    if *count <= shown {
                        println!("over-rejected ({code}): {}\n{src}", d.message);
                    }
                }
            }
            continue;
        }
        accepted += 1;
        several += usize::from(has_several_layouts(&checked.program));
        for at in all_sizes() {
            let t = match run_model(&chain, &at) {
                Ok(t) => t,
                Err(why) => panic!("case {case}: accepted, but PyTorch raises at {at:?}: {why}\n{src}"),
            };
            let Some((shape, strides)) = checked_strides(&checked.program, &at) else {
                continue;
            };
            assert_eq!(shape, t.shape, "case {case}: shape at {at:?}\n{src}");
            if t.shape.iter().product::<i64>() == 0 {
                continue;
            }
            let pytorchs = |strides: &Vec<i64>| {
                (0..t.shape.len()).all(|i| t.shape[i] == 1 || strides[i] == t.strides[i])
            };
            assert!(
                strides.iter().any(pytorchs),
                "case {case}: strides {strides:?}, PyTorch's {:?} at {at:?}\n{src}",
                t.strides
            );
        }
    }
    println!(
        "accepted {accepted} ({several} with a value of several layouts), refused {refused:?}, of which the model runs at every size {over:?} and with a rank that depends on the size {rank_varies:?}"
    );
    assert!(
        accepted > cases / 10,
        "the chains should mostly check: {refused:?}"
    );
    assert!(
        several > cases / 100,
        "few chains reach several layouts: {several}"
    );
    if cases == DEFAULT_CASES {
        assert!(
            over.is_empty(),
            "refused, though the model runs them at every size with one rank: {over:?}"
        );
    }
}

/// The over-rejections of issue 11, each now accepted as PyTorch accepts it for every size.
#[test]
fn programs_pytorch_accepts_at_every_size_check() {
    insta::glob!("ui/accepted/*.attn", |path| {
        let src = std::fs::read_to_string(path).expect("test input is readable");
        let checked = check_source(&src, &[]).expect("no overrides");
        let name = path.file_name().unwrap().to_string_lossy();
        let diags = render::diagnostics_text(&name, &src, &checked.diagnostics);
        assert!(!checked.has_errors(), "{name} does not check:\n{diags}");
        insta::with_settings!({ omit_expression => true }, {
            insta::assert_snapshot!("accepted", render::bindings_text(&checked.program));
        });
    });
}

/// The issue's programs, and the accepted ones above, at sizes where an axis is 1 or 0:
/// the interpreter and the native backend both return PyTorch's (possibly empty) tensors.
#[test]
fn issue_programs_run_on_both_backends_at_sizes_one_and_zero() {
    let mut sources: Vec<String> = vec![
        "dim B, N\ninput x: [B, N, 4]\noutput y = x[:, 1 : N] * 2.0\n".into(),
        "dim B, N\ninput x: [B, N, 4]\noutput y = x[:, 1 : N].contiguous().reshape(B, -1)\n".into(),
        "dim B, N\ninput y: [B, N, 4]\ninput col: [N, 1, 1]\noutput f = col[1 : N] * y.transpose(0, 1)[1 : N]\n".into(),
        "dim B, N\ninput x: [B, N, 4]\noutput p = exp(x[:, 1 : N]).softmax(-1)\n".into(),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/accepted");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    sources.extend(files.iter().map(|f| std::fs::read_to_string(f).unwrap()));
    for src in &sources {
        for (b, n) in [(1, 1), (2, 1), (1, 3), (2, 3)] {
            let program = common::program(src, &[("B", b), ("N", n), ("E", 3 - b)]);
            let bound = bind(&program, &RunOptions::default()).unwrap();
            let want = interpret(&program, &bound).unwrap();
            let optimized = attnc::opt::optimize(&program).program;
            for native in [&program, &optimized] {
                let exe = Executable::compile(native, &bound.dims).unwrap();
                let got = exe.run(&bound, &pool(1).unwrap()).unwrap();
                for ((name, w), (_, g)) in want.iter().zip(&got) {
                    assert_eq!(g.shape, w.shape, "`{name}` at B = {b}, N = {n}:\n{src}");
                    if !w.data.is_empty() {
                        let error = common::relative_error(g, w);
                        assert!(
                            error < 1e-5,
                            "`{name}` off by {error} at B = {b}, N = {n}:\n{src}"
                        );
                    }
                }
            }
        }
    }
}
