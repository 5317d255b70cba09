//! Fuzzing that reaches the JIT.
//!
//! 1. Random well-typed programs, built from a table of op generators ([`OPS`]: one row
//!    per op, so a new op is a new row), at random sizes (1 included, and slices that leave
//!    derived sizes of 0), compiled natively as checked and as optimized and run against
//!    the interpreter: `|jit - interp| <= 1e-5 * max|interp| + 1e-6` element by element,
//!    or, for an output that rounding moves far (`layer_norm` of two nearly equal values),
//!    within a few times the distance the interpreter's own value moves when the inputs
//!    move by an ulp or two ([`Spread`]); NaN and infinities in the same places, no crash.
//! 2. Corrupted kernel plans (an offset, a stride or a size moved): `Plan::validate` must
//!    reject every one that would touch memory outside a buffer, which an independent
//!    oracle decides element by element.
//!
//! CI runs a short budget; `ATTNC_FUZZ_CASES=N` runs N cases of each (BENCHMARKS.md
//! records a long run). Cases that once failed stay in [`REGRESSIONS`].

use attnc::check::DimOverride;
use attnc::diagnostic::Code;
use attnc::driver::check_source;
use attnc::ir::Program;
use attnc::kernel::{BufferKind, KernelOp, Operand, Plan};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, interpret_perturbed, Bound, RunOptions, Tensor};
use proptest::prelude::*;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

mod common;
use common::Rng;

/// A tensor in scope: its name, its symbolic shape (dim expressions as the source writes
/// them) and whether it is row-major (a `view` of it is legal).
#[derive(Clone, Debug)]
struct Val {
    name: String,
    shape: Vec<String>,
    contiguous: bool,
}

/// The program being generated.
struct Gen {
    rng: Rng,
    vals: Vec<Val>,
}

/// An expression and the shape and contiguity of its value.
type Made = (String, Vec<String>, bool);

/// One row of the op table: an expression over values in scope, or `None` when none fits.
type OpGen = fn(&mut Gen) -> Option<Made>;

impl Gen {
    fn pick(&mut self, fits: impl Fn(&Val) -> bool) -> Option<Val> {
        let fitting: Vec<Val> = self.vals.iter().filter(|v| fits(v)).cloned().collect();
        match fitting.is_empty() {
            true => None,
            false => Some(fitting[self.rng.below(fitting.len())].clone()),
        }
    }

    fn any(&mut self) -> Option<Val> {
        self.pick(|_| true)
    }

    /// A size to expand to: a dim, or a sum or difference of dims (never below 1).
    fn dim(&mut self) -> String {
        ["N", "N + 1", "B + N - 1", "2 * D - 1"][self.rng.below(4)].to_string()
    }
}

/// `:, :, ..` for the leading axes of a rank-`r` value, then `last` on its last axis.
fn index_last(r: usize, last: &str) -> String {
    let mut parts = vec![":".to_string(); r - 1];
    parts.push(last.to_string());
    parts.join(", ")
}

/// Whether a size is one of the prelude's dims (a slice of it is in range for any value).
fn named(size: &str) -> bool {
    ["B", "N", "D"].contains(&size)
}

/// The product of sizes as the source writes it, each sum in parentheses.
fn product(sizes: &[String]) -> String {
    let factor = |d: &String| match d.contains(' ') {
        true => format!("({d})"),
        false => d.clone(),
    };
    sizes.iter().map(factor).collect::<Vec<_>>().join(" * ")
}

/// Whether a size is at least 1 at every size of the dims: no difference (`N - 1`) and
/// no factor of the empty slice's 0 (`2 * 0`).
fn never_empty(size: &str) -> bool {
    !size.contains('-') && !size.split(" * ").any(|f| f == "0")
}

fn with_last(shape: &[String], last: String) -> Vec<String> {
    let mut s = shape.to_vec();
    *s.last_mut().unwrap() = last;
    s
}

/// The op table. An elementwise result keeps its operands' layout, as in PyTorch, so it
/// counts as contiguous only where they all are. Values stay bounded (no `exp` of a large argument), so both backends see
/// the same finite numbers except where a mask fill makes infinities on purpose.
const OPS: &[(&str, OpGen)] = &[
    ("neg", |g| {
        g.any().map(|a| (format!("-{}", a.name), a.shape, a.contiguous))
    }),
    ("affine", |g| {
        g.any()
            .map(|a| (format!("{} * 0.5 + 1.0", a.name), a.shape, a.contiguous))
    }),
    ("sqrt", |g| {
        g.any()
            .map(|a| (format!("sqrt({0} * {0} + 1.0)", a.name), a.shape, a.contiguous))
    }),
    ("exp", |g| {
        g.any()
            .map(|a| (format!("exp(-({0} * {0}))", a.name), a.shape, a.contiguous))
    }),
    ("add", |g| {
        let a = g.any()?;
        // Same shape, or a trailing part of it: broadcasting.
        let b = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        Some((
            format!("{} + {}", a.name, b.name),
            a.shape,
            a.contiguous && b.contiguous,
        ))
    }),
    ("mul", |g| {
        let a = g.any()?;
        let b = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        Some((
            format!("{} * {}", b.name, a.name),
            a.shape,
            a.contiguous && b.contiguous,
        ))
    }),
    ("div", |g| {
        let a = g.any()?;
        let b = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        Some((
            format!("{} / ({1} * {1} + 1.0)", a.name, b.name),
            a.shape,
            a.contiguous && b.contiguous,
        ))
    }),
    ("matmul", |g| {
        let a = g.pick(|v| v.shape.len() >= 2)?;
        let k = a.shape.last().unwrap().clone();
        let b = g.pick(|v| v.shape.len() == 2 && v.shape[0] == k)?;
        let shape = with_last(&a.shape, b.shape[1].clone());
        Some((format!("{} @ {}", a.name, b.name), shape, true))
    }),
    ("transpose", |g| {
        let a = g.pick(|v| v.shape.len() >= 2)?;
        let mut shape = a.shape.clone();
        let r = shape.len();
        shape.swap(r - 2, r - 1);
        Some((format!("{}.transpose(-2, -1)", a.name), shape, false))
    }),
    ("contiguous", |g| {
        let a = g.pick(|v| !v.contiguous)?;
        Some((format!("{}.contiguous()", a.name), a.shape, true))
    }),
    ("view", |g| {
        // Merges the first two axes, or all but the last; sizes may be sums of dims
        // (`(N + N + 1) * D`), whose products the checker divides exactly.
        let a = g.pick(|v| v.contiguous && v.shape.len() >= 2)?;
        let r = a.shape.len();
        let (merged, kept) = match g.rng.below(2) {
            0 => (product(&a.shape[..2]), &a.shape[2..]),
            _ => (product(&a.shape[..r - 1]), &a.shape[r - 1..]),
        };
        let mut shape = vec![merged];
        shape.extend_from_slice(kept);
        Some((format!("{}.view({})", a.name, shape.join(", ")), shape, true))
    }),
    ("view_sum", |g| {
        // `u: [N + 1, D]` and `t: [N - 1, N + 1]` merged and split again, viewed with `-1`
        // where no axis may be empty (PyTorch cannot solve a `-1` beside a 0).
        let (name, shape) = match g.rng.below(3) {
            0 => ("u.view((N + 1) * D).view(N + 1, D)", vec!["N + 1", "D"]),
            1 => ("u.view(-1, N + 1, D)", vec!["1", "N + 1", "D"]),
            _ => (
                "t.view((N - 1) * (N + 1)).view(N - 1, N + 1)",
                vec!["N - 1", "N + 1"],
            ),
        };
        Some((
            format!("{name} * 0.5"),
            shape.iter().map(|d| d.to_string()).collect(),
            true,
        ))
    }),
    ("softmax", |g| {
        let a = g.any()?;
        Some((format!("{}.softmax(-1)", a.name), a.shape, a.contiguous))
    }),
    ("masked_fill", |g| {
        let a = g.any()?;
        let m = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        let e = format!("{}.masked_fill({} > 0.5, -1e9)", a.name, m.name);
        Some((e, a.shape, a.contiguous && m.contiguous))
    }),
    ("attention", |g| {
        // softmax(q kᵀ · scale, masked) v: the fused attention and softmax kernels.
        let q = g.pick(|v| v.shape.ends_with(&["N".to_string(), "D".to_string()]))?;
        let masked = g.rng.below(2) == 0;
        let scores = format!("({} @ y.transpose(-2, -1) * 0.5)", q.name);
        let scores = match masked {
            true => format!("{scores}.masked_fill(m > 0.5, -1e9)"),
            false => scores,
        };
        Some((format!("{scores}.softmax(-1) @ y"), q.shape, true))
    }),
    ("arange", |g| {
        let a = g.pick(|v| v.shape.last().is_some_and(|d| named(d)))?;
        let e = format!("{} + arange({})", a.name, a.shape.last().unwrap());
        Some((e, a.shape, a.contiguous))
    }),
    ("position_mask", |g| {
        // A causal window from positions, combined with a mask of values.
        let a = g.pick(|v| v.shape.ends_with(&["N".to_string(), "N".to_string()]))?;
        let (i, j) = ("arange(N)[:, None]", "arange(N)[None, :]");
        let keep = format!("(({j} <= {i}) & ({j} > {i} - 2)) | ~({} > 0.5)", a.name);
        let e = format!("{}.masked_fill(~({keep}), -1e9)", a.name);
        Some((e, a.shape, a.contiguous))
    }),
    ("sdpa", |g| {
        // Keys and values `y`; causal, a boolean mask (rows without keys: 0) or a float one.
        let q = g.pick(|v| v.shape.ends_with(&["N".to_string(), "D".to_string()]))?;
        let extra = ["is_causal=True", "attn_mask=m > 0.5", "attn_mask=m", "scale=0.5"][g.rng.below(4)];
        let e = format!("scaled_dot_product_attention({}, y, y, {extra})", q.name);
        Some((e, q.shape, true))
    }),
    ("gqa", |g| {
        // Query heads that are a multiple of `N + 1` key heads: the group size is proved from
        // a sum of dims.
        let q = ["cat([g, g * 0.5], dim=1)", "g.repeat_interleave(2, dim=1)"][g.rng.below(2)];
        let extra = ["", ", is_causal=True", ", scale=0.5"][g.rng.below(3)];
        let e = format!("scaled_dot_product_attention({q}, g, g{extra}, enable_gqa=True)");
        let shape = ["B", "2 * N + 2", "N", "D"]
            .iter()
            .map(|d| d.to_string())
            .collect();
        Some((e, shape, true))
    }),
    ("linear", |g| {
        let a = g.pick(|v| v.shape.last().is_some_and(|d| d == "D"))?;
        Some((format!("linear({}, W, c)", a.name), a.shape, true))
    }),
    ("slice_tail", |g| {
        // `N - 1` is 0 when N = 1: a derived size of 0.
        let a = g.pick(|v| v.shape.last().is_some_and(|d| named(d)))?;
        let last = format!("{} - 1", a.shape.last().unwrap());
        let e = format!("{}[{}]", a.name, index_last(a.shape.len(), "1 :"));
        Some((e, with_last(&a.shape, last), false))
    }),
    ("slice_rows", |g| {
        // Rows of a value with rows and columns: the last (what generation keeps of the
        // logits) or all but the first, which the optimizer moves into the ops before.
        let a = g.pick(|v| v.shape.len() >= 2 && named(&v.shape[v.shape.len() - 2]))?;
        let r = a.shape.len();
        let rows = &a.shape[r - 2];
        let (index, len) = match g.rng.below(2) {
            0 => ("-1 :", "1".to_string()),
            _ => ("1 :", format!("{rows} - 1")),
        };
        let mut parts = vec![":"; r - 2];
        parts.extend([index, ":"]);
        let mut shape = a.shape.clone();
        shape[r - 2] = len;
        Some((format!("{}[{}]", a.name, parts.join(", ")), shape, false))
    }),
    ("slice_empty", |g| {
        let a = g.pick(|v| v.shape.last().is_some_and(|d| named(d)))?;
        let e = format!("{}[{}]", a.name, index_last(a.shape.len(), "0 : 0"));
        Some((e, with_last(&a.shape, "0".into()), false))
    }), // The ops of section 7.2 (issue 10).
    ("reduce", |g| {
        let op = ["sum", "mean", "amax", "amin"][g.rng.below(4)];
        // `amax` and `amin` of no elements raise in PyTorch: only over axes never empty.
        let a = match op.starts_with("am") {
            true => g.pick(|v| v.shape.len() >= 2 && v.shape.iter().all(|d| never_empty(d)))?,
            false => g.pick(|v| v.shape.len() >= 2)?,
        };
        let r = a.shape.len();
        Some(match g.rng.below(3) {
            0 => (
                format!("{}.{op}(-1, keepdim=True)", a.name),
                with_last(&a.shape, "1".into()),
                true,
            ),
            // Axes that no view merges into one: reduced one at a time, natively too.
            1 => {
                let mut shape = with_last(&a.shape, "1".into());
                shape[0] = "1".into();
                (format!("{}.{op}(dim=(0, -1), keepdim=True)", a.name), shape, true)
            }
            _ => (
                format!("{op}({}, dim={})", a.name, r - 2),
                [&a.shape[..r - 2], &a.shape[r - 1..]].concat(),
                true,
            ),
        })
    }),
    ("var", |g| {
        // Over an axis of 1 (N = 1), the unbiased variance divides 0 by 0: NaN on both.
        let a = g.pick(|v| v.shape.len() >= 2)?;
        let e = match g.rng.below(3) {
            0 => format!("{}.var(-1, keepdim=True)", a.name),
            1 => format!("{}.std(-1, keepdim=True, unbiased=False)", a.name),
            _ => format!("var({}, dim=-1, correction=0, keepdim=True)", a.name),
        };
        Some((e, with_last(&a.shape, "1".into()), true))
    }),
    ("activation", |g| {
        let a = g.any()?;
        let f = [
            "relu({})",
            "gelu({})",
            "{}.gelu(approximate=\"tanh\")",
            "silu({})",
            "sigmoid({})",
            "tanh({})",
            "erf({})",
            "abs({})",
            "sin({})",
            "cos({})",
            "log({0} * {0} + 0.5)",
            "rsqrt({0} * {0} + 1.0)",
        ][g.rng.below(12)];
        Some((
            f.replace("{0}", &a.name).replace("{}", &a.name),
            a.shape,
            a.contiguous,
        ))
    }),
    ("norm", |g| {
        let a = g.pick(|v| v.shape.last().is_some_and(|d| d == "D"))?;
        let e = match g.rng.below(3) {
            0 => format!("layer_norm({}, [D], z, z)", a.name),
            1 => format!("layer_norm({}, (D,), eps=1e-6)", a.name),
            _ => format!("rms_norm({}, [D], z)", a.name),
        };
        Some((e, a.shape, true))
    }),
    ("log_softmax", |g| {
        let a = g.any()?;
        Some((format!("{}.log_softmax(dim=-1)", a.name), a.shape, true))
    }),
    ("where", |g| {
        let a = g.any()?;
        let b = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        let e = format!("where({1} > 0.0, {0}, {0} * 2.0)", a.name, b.name);
        Some((e, a.shape, a.contiguous && b.contiguous))
    }),
    ("clamp", |g| {
        let a = g.any()?;
        let e = match g.rng.below(3) {
            0 => format!("{}.clamp(-0.5, 0.5)", a.name),
            1 => format!("clamp({}, min=0.0)", a.name),
            _ => format!("{}.clamp(max=-inf)", a.name),
        };
        Some((e, a.shape, a.contiguous))
    }),
    ("pow", |g| {
        // A negative base to a fractional power is NaN on both backends.
        let a = g.any()?;
        let b = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        let e = match g.rng.below(3) {
            0 => format!("{} ** 2", a.name),
            1 => format!("({0} * {0} + 1.0) ** -0.5", a.name),
            _ => format!("pow({}, {})", a.name, b.name),
        };
        Some((e, a.shape, a.contiguous && b.contiguous))
    }),
    ("maximum", |g| {
        let a = g.any()?;
        let b = g.pick(|b| b.shape.len() <= a.shape.len() && a.shape.ends_with(&b.shape))?;
        let op = ["maximum", "minimum"][g.rng.below(2)];
        Some((
            format!("{op}({}, {})", a.name, b.name),
            a.shape,
            a.contiguous && b.contiguous,
        ))
    }),
    ("tri", |g| {
        let a = g.pick(|v| v.shape.len() >= 2)?;
        let e = match g.rng.below(3) {
            0 => format!("{}.tril()", a.name),
            1 => format!("{}.triu(1)", a.name),
            _ => format!("tril({}, diagonal=-1)", a.name),
        };
        Some((e, a.shape, true))
    }),
    ("cat", |g| {
        let a = g.any()?;
        let b = g.pick(|b| b.shape == a.shape)?;
        let last = a.shape.last()?;
        let e = format!("cat([{}, -{}], dim=-1)", a.name, b.name);
        Some((e, with_last(&a.shape, product(&["2".into(), last.clone()])), true))
    }),
    ("chunk", |g| {
        // Two equal parts of an axis made twice as long by `cat`; the first is `-a`.
        let a = g.pick(|v| v.shape.last().is_some_and(|d| named(d)))?;
        let r = a.shape.len();
        let e = match g.rng.below(2) {
            0 => format!("{FIRST_OF}cat([-{0}, {0}], dim=-1).chunk(2, dim=-1)", a.name),
            _ => format!(
                "{FIRST_OF}cat([-{0}, {0}], dim={1}).split({0}.shape[{1}], {1})",
                a.name,
                r - 1
            ),
        };
        Some((e, a.shape, false))
    }),
    ("expand", |g| {
        // A new leading axis, and an axis of 1 (a kept reduction) repeated N times.
        let a = g.pick(|v| !v.shape.is_empty())?;
        let r = a.shape.len();
        let repeat = a.shape[r - 1] == "1";
        let mut sizes = vec!["-1".to_string(); r];
        let mut shape = a.shape.clone();
        if repeat {
            let n = g.dim();
            sizes[r - 1] = n.clone();
            shape[r - 1] = n;
        }
        if !repeat || g.rng.below(2) == 0 {
            sizes.insert(0, "B".into());
            shape.insert(0, "B".into());
        }
        Some((format!("{}.expand({})", a.name, sizes.join(", ")), shape, false))
    }),
    // The forms of issue 24: lists, tuples, booleans, sums of dims, empty axes.
    ("stack", |g| {
        let a = g.any()?;
        let r = a.shape.len() as i64;
        let d = g.rng.below(a.shape.len() + 1) as i64 - (g.rng.below(2) as i64) * (r + 1);
        let e = format!("stack([{0}, -{0}, {0} * 0.5], dim={d})", a.name);
        let mut shape = a.shape.clone();
        shape.insert(d.rem_euclid(r + 1) as usize, "3".into());
        Some((e, shape, true))
    }),
    ("tuple_item", |g| {
        // One part of a `chunk` or `split` tuple, indexed as PyTorch code indexes it (of
        // an axis never empty: a split size of 0 divides nothing).
        let a = g.pick(|v| v.shape.last().is_some_and(|d| never_empty(d)))?;
        let r = a.shape.len();
        Some(match g.rng.below(3) {
            0 => (
                format!("cat([{0}, -{0}], dim=-1).chunk(2, dim=-1)[1]", a.name),
                a.shape,
                r == 1,
            ),
            1 => {
                let e = format!(
                    "cat([-{0}, {0}], dim={1}).split({0}.shape[-1], dim={1})[-1]",
                    a.name,
                    r - 1
                );
                (e, a.shape, r == 1)
            }
            _ => (format!("{0}.chunk(1, dim=0)[0]", a.name), a.shape, a.contiguous),
        })
    }),
    ("boolean", |g| {
        let a = g.any()?;
        let full = format!("full([{}], True)", a.shape.join(", "));
        // Read as floats (0.0/1.0) at once: values in scope are floats.
        let e = match g.rng.below(3) {
            0 => format!("where({} > 0.0, True, False) * 1.0", a.name),
            1 => format!("where({} > 0.0, False, 0.5)", a.name),
            _ => format!("({full} & ({} > 0.0)) * 1.0", a.name),
        };
        Some((e, a.shape, true))
    }),
    ("reduce_all", |g| {
        let a = g.any()?;
        let op = ["sum", "mean", "amin", "var", "std"][g.rng.below(5)];
        let empty = g.rng.below(2) == 0;
        let all = if empty { "dim=[]" } else { "dim=None" };
        // `amin` of no elements raises in PyTorch: only over sizes never empty.
        let a = match op {
            "amin" => g.pick(|v| v.shape.iter().all(|d| never_empty(d)))?,
            _ => a,
        };
        Some((format!("{}.{op}({all})", a.name), vec![], true))
    }),
    ("correction", |g| {
        // A correction at or beyond the count: the divisor clamps at 0 (NaN or inf).
        let a = g.pick(|v| !v.shape.is_empty())?;
        let c = 1 + g.rng.below(3);
        let op = ["var", "std"][g.rng.below(2)];
        let e = format!("{}.{op}(-1, correction={c}, keepdim=True)", a.name);
        Some((e, with_last(&a.shape, "1".into()), true))
    }),
    ("scalar_softmax", |g| {
        let a = g.any()?;
        let f = ["softmax", "log_softmax"][g.rng.below(2)];
        let d = ["-1", "0"][g.rng.below(2)];
        Some((
            format!("{}.sum().{f}({d}) * {}", a.name, a.name),
            a.shape,
            a.contiguous,
        ))
    }),
    ("dim_number", |g| {
        // `//` and `%` of dims are numbers; `D + 1` and `N - 1` are sizes.
        let a = g.any()?;
        let e = match g.rng.below(3) {
            0 => format!("{} / ((2 * D) // 2 + N % 2)", a.name),
            1 => format!("{} / (B + N)", a.name),
            _ => format!("{} * (N - 1) + (D + 1)", a.name),
        };
        Some((e, a.shape, a.contiguous))
    }),
    ("grow", |g| {
        // `u: [N + 1, D]` joined to a value `[N, D]`: sizes that are sums of dims.
        let a = g.pick(|v| v.shape.len() == 2 && v.shape[1] == "D")?;
        let first = format!("{} + N + 1", a.shape[0]);
        Some((
            format!("cat([{}, u], dim=0)", a.name),
            vec![first, "D".into()],
            true,
        ))
    }),
    ("amax_tail", |g| {
        // `amax` over `t`'s axis of `N + 1`, never empty, after a slice of it that may be.
        let e = ["t.amax(dim=-1)", "t[:, 1 :].amin(dim=-1)"][g.rng.below(2)];
        Some((e.to_string(), vec!["N - 1".to_string()], true))
    }),
    ("repeat_interleave", |g| {
        let a = g.pick(|v| !v.shape.is_empty())?;
        let last = a.shape.last()?;
        let e = format!("{}.repeat_interleave(2, dim=-1)", a.name);
        Some((e, with_last(&a.shape, product(&["2".into(), last.clone()])), true))
    }),
    ("flatten", |g| {
        let a = g.pick(|v| v.shape.len() >= 2)?;
        let merged = product(&a.shape[..2]);
        let mut shape = vec![merged];
        shape.extend_from_slice(&a.shape[2..]);
        Some((format!("{}.flatten(0, 1)", a.name), shape, a.contiguous))
    }),
    ("size", |g| {
        let a = g.any()?;
        let e = match a.shape.len() {
            0 => format!("{} * 0.5", a.name),
            _ => format!("{0} / {0}.shape[-1] + {0}.size(0)", a.name),
        };
        Some((e, a.shape, a.contiguous))
    }),
];

/// Marks an expression whose value is a tuple of two parts: the new value is the first.
const FIRST_OF: &str = "first of ";

/// The declarations every generated program starts from.
const PRELUDE: &str = "dim B, N, D
param W: [D, D]
param c: [D]
input x: [B, N, D]
input y: [N, D]
input z: [D]
input s: [D, N]
input m: [N, N]
input u: [N + 1, D]
input t: [N - 1, N + 1]
input g: [B, N + 1, N, D]
";

/// A random program of `statements` lets over the prelude's values; its last two values
/// are the outputs.
fn program_text(seed: u64, statements: usize) -> String {
    let shape = |s: &[&str]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    let mut g = Gen {
        rng: Rng(seed | 1),
        vals: vec![
            Val {
                name: "x".into(),
                shape: shape(&["B", "N", "D"]),
                contiguous: true,
            },
            Val {
                name: "y".into(),
                shape: shape(&["N", "D"]),
                contiguous: true,
            },
            Val {
                name: "z".into(),
                shape: shape(&["D"]),
                contiguous: true,
            },
            Val {
                name: "s".into(),
                shape: shape(&["D", "N"]),
                contiguous: true,
            },
            Val {
                name: "m".into(),
                shape: shape(&["N", "N"]),
                contiguous: true,
            },
        ],
    };
    let mut src = PRELUDE.to_string();
    let mut made = 0;
    while made < statements {
        let (_, op) = OPS[g.rng.below(OPS.len())];
        let Some((expr, shape, contiguous)) = op(&mut g) else {
            continue;
        };
        let name = format!("v{made}");
        match expr.strip_prefix(FIRST_OF) {
            Some(parts) => src.push_str(&format!("let ({name}, rest_{name}) = {parts}\n")),
            None => src.push_str(&format!("let {name} = {expr}\n")),
        }
        g.vals.push(Val {
            name,
            shape,
            contiguous,
        });
        made += 1;
    }
    for (i, v) in g.vals.iter().rev().take(2).enumerate() {
        src.push_str(&format!("output out{i} = {}\n", v.name));
    }
    src
}

/// `src` checked with values for its free dims; `None` where the checker's only objection
/// is a `view` it refuses (E0203). The generator calls an elementwise result of row-major
/// operands row-major; the checker may be stricter where the stride order could change at
/// sizes of 1, and `tests/layouts.rs` judges those rules against PyTorch's, not this test.
fn checked(src: &str, sizes: [i64; 3]) -> Option<Program> {
    let overrides: Vec<DimOverride> = ["B", "N", "D"]
        .iter()
        .zip(sizes)
        .map(|(n, value)| DimOverride {
            name: n.to_string(),
            value,
        })
        .collect();
    let checked = check_source(src, &overrides).unwrap();
    if checked.has_errors() && checked.diagnostics.iter().all(|d| d.code == Code::E0203) {
        return None;
    }
    assert!(
        !checked.has_errors(),
        "the generator made an ill-typed program:\n{src}\n{:?}",
        checked.diagnostics
    );
    Some(checked.program)
}

/// Where `got` and `want` disagree beyond the tolerance, or in NaN or infinity: each
/// element within `1e-5 * max|want| + 1e-6`, plus [`SPREAD_FACTOR`] times its `spread`
/// where one is given.
fn disagreement(got: &Tensor, want: &Tensor, spread: Option<&[f32]>) -> Option<String> {
    if got.shape != want.shape {
        return Some(format!("shape {:?} against {:?}", got.shape, want.shape));
    }
    let scale = want
        .data
        .iter()
        .filter(|x| x.is_finite())
        .fold(0f32, |m, x| m.max(x.abs()));
    let plain = 1e-5 * scale + 1e-6;
    got.data
        .iter()
        .zip(&want.data)
        .enumerate()
        .find_map(|(i, (&a, &b))| {
            let tolerance = plain + spread.map_or(0.0, |s| SPREAD_FACTOR * s[i]);
            let same = match (a.is_finite(), b.is_finite()) {
                (true, true) => (a - b).abs() <= tolerance,
                _ => a.is_nan() == b.is_nan() && (a.is_nan() || a == b),
            };
            (!same).then(|| format!("element {i}: jit {a}, interpreter {b} (tolerance {tolerance})"))
        })
}

/// How many runs of the perturbed interpreter measure an output's spread: in one run, the
/// two values of a row may move alike (a chance of 1 in 4) and their difference, which
/// decides a normalized row, not at all; in eight, hardly ever.
const PERTURBED_RUNS: u64 = 8;

/// How far from the interpreter's value, in multiples of its spread, a backend's may lie.
const SPREAD_FACTOR: f32 = 4.0;

/// How far each element of each output moves when every value the program computes, its
/// inputs and params included, moves by one ulp up or down at random
/// ([`interpret_perturbed`]): the largest distance from the interpreter's value over
/// [`PERTURBED_RUNS`] runs. A backend's own rounding (an `exp` 1 ulp away, a sum in another
/// order) moves an ill-conditioned element (`layer_norm` of two nearly equal values) about
/// as far as this does, and a well-conditioned one hardly at all; so a wrong value is still
/// caught, and rounding amplified by the output's conditioning is not called one.
struct Spread(Vec<Vec<f32>>);

impl Spread {
    /// The spread of `want`, the interpreter's outputs of `program` on `bound`.
    fn of(program: &Program, bound: &Bound, want: &[(String, Tensor)], seed: u64) -> Result<Spread, String> {
        let mut spread: Vec<Vec<f32>> = want.iter().map(|(_, w)| vec![0.0; w.data.len()]).collect();
        for run in 0..PERTURBED_RUNS {
            let moved = interpret_perturbed(
                program,
                bound,
                seed ^ (run + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            )
            .map_err(|e| format!("perturbed: {e}"))?;
            for ((s, (_, w)), (_, m)) in spread.iter_mut().zip(want).zip(&moved) {
                for ((s, &w), &m) in s.iter_mut().zip(w.data.iter()).zip(m.data.iter()) {
                    // A value that stops being finite says nothing about the finite ones.
                    if (w - m).is_finite() {
                        *s = s.max((w - m).abs());
                    }
                }
            }
        }
        Ok(Spread(spread))
    }
}

/// The first output of `got` that disagrees with `want`: by the plain tolerance, and where
/// it does not hold, by the outputs' [`Spread`] (worked out once, for the first output
/// that needs it).
fn outputs_disagree(
    got: &[(String, Tensor)],
    want: &[(String, Tensor)],
    spread: &mut Option<Spread>,
    of: impl Fn() -> Result<Spread, String>,
) -> Result<Option<String>, String> {
    for (k, ((name, w), (_, a))) in want.iter().zip(got).enumerate() {
        if disagreement(a, w, None).is_none() {
            continue;
        }
        if spread.is_none() {
            *spread = Some(of()?);
        }
        let s = spread.as_ref().map(|s| s.0[k].as_slice());
        if let Some(why) = disagreement(a, w, s) {
            return Ok(Some(format!("`{name}`: {why}")));
        }
    }
    Ok(None)
}

/// The longest a stage (check, bind, interpret, optimize, compile, run) of a generated
/// program may take: they take milliseconds, so one that takes a second is stuck in a loop
/// or grows without bound (issue 24's optimizer did, on `x[-1 :]` of `dim R = 1`).
const STAGE_LIMIT: Duration = Duration::from_secs(1);

/// When a stage started: the wall clock and the process's CPU time.
struct Start(Instant, Duration);

impl Start {
    fn now() -> Start {
        Start(Instant::now(), cpu_time())
    }
}

/// The CPU time this process has used, every thread's.
fn cpu_time() -> Duration {
    // SAFETY: `getrusage` writes one `rusage` through the pointer, which points to a
    // zeroed, properly aligned value that lives until the call returns.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// `Err` naming `stage` where it took longer than [`STAGE_LIMIT`] since `start`: by the
/// wall clock and by the CPU time, the smaller of the two, so that neither a loaded
/// machine (the wall clock runs on) nor other tests' threads (the process's CPU time
/// grows) fail a stage that is quick.
fn timed(stage: &str, start: Start) -> Result<(), String> {
    let took = start.0.elapsed().min(cpu_time().saturating_sub(start.1));
    match took > STAGE_LIMIT {
        true => Err(format!("{stage} took {took:?}, more than {STAGE_LIMIT:?}")),
        false => Ok(()),
    }
}

/// How long a case may run, by the wall clock, before it counts as one that never returns:
/// generous, since the machine may be loaded; a stage that loops never returns at all.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// [`agree_in_time`] on a thread, so that a stage that never returns fails the case after
/// [`HANG_LIMIT`] rather than hanging the test.
fn agree(src: &str, sizes: [i64; 3], seed: u64) -> Result<(), String> {
    let (send, receive) = std::sync::mpsc::channel();
    let owned = src.to_string();
    std::thread::spawn(move || {
        let _ = send.send(agree_in_time(&owned, sizes, seed));
    });
    receive.recv_timeout(HANG_LIMIT).unwrap_or_else(|e| match e {
        RecvTimeoutError::Timeout => Err(format!("a stage ran for {HANG_LIMIT:?} and did not return")),
        RecvTimeoutError::Disconnected => Err("the case panicked (its message is above)".to_string()),
    })
}

/// Runs `src` at `sizes` on both backends (checked and optimized programs) and compares,
/// each stage within [`STAGE_LIMIT`].
fn agree_in_time(src: &str, sizes: [i64; 3], seed: u64) -> Result<(), String> {
    let start = Start::now();
    let Some(program) = checked(src, sizes) else {
        return Ok(());
    };
    timed("check", start)?;
    let opts = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let start = Start::now();
    let bound = bind(&program, &opts).map_err(|e| e.to_string())?;
    timed("bind", start)?;
    let start = Start::now();
    let want = interpret(&program, &bound).map_err(|e| e.to_string())?;
    timed("the interpreter", start)?;
    let start = Start::now();
    let optimized = attnc::opt::optimize(&program).program;
    timed("the optimizer", start)?;
    let mut spread = None;
    for (path, p) in [("typed", &program), ("optimized", &optimized)] {
        let start = Start::now();
        let exe = Executable::compile(p, &bound.dims).map_err(|e| format!("{path}: {e}"))?;
        timed(&format!("{path}: compiling"), start)?;
        let start = Start::now();
        let got = exe
            .run(&bound, &pool(2).unwrap())
            .map_err(|e| format!("{path}: {e}"))?;
        timed(&format!("{path}: running"), start)?;
        let of = || Spread::of(&program, &bound, &want, seed);
        if let Some(why) = outputs_disagree(&got, &want, &mut spread, of)? {
            return Err(format!("{path}: {why} at {sizes:?}"));
        }
    }
    Ok(())
}

fn cases(short: u32) -> u32 {
    std::env::var("ATTNC_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(short)
}

/// Programs found wrong (by the fuzzer or by hand), with their sizes: kept as regression
/// tests. Sources are the prelude's declarations plus these lines.
const REGRESSIONS: &[(&str, [i64; 3])] = &[
    // Derived sizes of 0 stopped the native backend ("writes b1 through a broadcast").
    (
        "let v0 = x[:, :, 0 : 0] * 2.0\noutput a = v0\noutput b = y[:, 1 :] + 1.0\n",
        [2, 1, 3],
    ),
    // A product over an empty inner axis is all zeros.
    (
        "let v0 = y[:, 0 : 0]\noutput a = v0 @ v0.transpose(-2, -1) + 1.0\n",
        [1, 3, 2],
    ),
    (
        "let v0 = s.transpose(-2, -1)\noutput a = (v0[:, 1 :] @ s[1 :]).softmax(-1)\n",
        [1, 2, 1],
    ),
    // A scalar computed from dims after attention: lowered natively from the typed program,
    // it was "used before it is lowered".
    (
        "output a = ((y @ y.transpose(-2, -1) * 0.5).softmax(-1) @ y) / (B + N)\n",
        [2, 3, 4],
    ),
    // A scalar times a constant, run on the host as a scaled copy, came out unscaled.
    (
        "let v1 = z.var(dim=[])\noutput a = stack([v1, -v1, v1 * 0.5], dim=0)\noutput b = z.sum() * 2.0\n",
        [1, 1, 2],
    ),
];

/// Programs of their own declarations, with their sizes, that once hung, were wrongly
/// accepted (issue 24) or were called wrong though right.
const OWN_REGRESSIONS: &[(&str, [i64; 3])] = &[
    // The optimizer looped: `x[-1 :]` of a constant 1 is `x`, and `slice-slice` composed
    // it with itself without end.
    (
        "dim B, N, D\ndim R = 1\ninput x: [R, 4]\noutput o = x[-1 :]\n",
        [2, 3, 4],
    ),
    (
        "dim B, N, D\ndim R = 1\ninput x: [R, 4]\noutput o = x[-1 :][0 : 1][R - 1 :] * 2.0\n",
        [2, 3, 4],
    ),
    // The 20,000-program run stopped at this: `exp` natively is 1 ulp from the
    // interpreter's on some values, and normalizing two nearly equal values amplifies that
    // beyond the plain tolerance (65,536 rows of two: at seed 7, rows 3,331 and 12,045).
    (
        "dim B, N, D\ninput x: [B, N, D]\noutput a = layer_norm(exp(-(x * x)), (D,), eps=1e-6)\n",
        [256, 256, 2],
    ),
];

#[test]
fn own_regressions_agree_in_time() {
    for &(src, sizes) in OWN_REGRESSIONS {
        if let Err(why) = agree(src, sizes, 7) {
            panic!("{why}\n{src}");
        }
    }
}

#[test]
fn regressions_agree() {
    for (i, &(lines, sizes)) in REGRESSIONS.iter().enumerate() {
        let src = format!("{PRELUDE}{lines}");
        if let Err(why) = agree(&src, sizes, 7) {
            panic!("regression {i}: {why}\n{src}");
        }
    }
}

/// `layer_norm(x, (D,), eps=1e-6)` at `D = 2` over rows of two values: the even rows
/// nearly equal (their difference a few ulps, which normalizing amplifies about 500
/// times), the odd ones far apart. The interpreter's outputs on those inputs, on the
/// inputs with the second value of each row 1 ulp higher (as a backend's rounding might
/// leave it), and the spread.
fn rows_of_two() -> (Tensor, Tensor, Spread) {
    let src = format!("{PRELUDE}output a = layer_norm(x, (D,), eps=1e-6)\n");
    let program = checked(&src, [4, 8, 2]).unwrap();
    let mut bound = bind(&program, &RunOptions::default()).unwrap();
    let rows: Vec<[f32; 2]> = (0..32)
        .map(|r| {
            let a = 0.5 + r as f32 / 64.0;
            match r % 2 {
                0 => [a, a.next_up().next_up().next_up()],
                _ => [a, -a],
            }
        })
        .collect();
    let data = rows.iter().flatten().copied().collect();
    bound.inputs[0] = Tensor::new(vec![4, 8, 2], data);
    let want = interpret(&program, &bound).unwrap();
    let moved: Vec<f32> = rows.iter().flat_map(|&[a, b]| [a, b.next_up()]).collect();
    let mut rounded = bound.clone();
    rounded.inputs[0] = Tensor::new(vec![4, 8, 2], moved);
    let got = interpret(&program, &rounded).unwrap();
    let spread = Spread::of(&program, &bound, &want, 7).unwrap();
    (got[0].1.clone(), want[0].1.clone(), spread)
}

#[test]
fn rounding_an_output_amplifies_is_within_its_spread() {
    let (got, want, spread) = rows_of_two();
    assert!(
        disagreement(&got, &want, None).is_some(),
        "the plain tolerance should see the amplified rounding"
    );
    assert_eq!(disagreement(&got, &want, Some(&spread.0[0])), None);
}

#[test]
fn a_wrong_value_is_caught_despite_the_spread() {
    let (got, want, spread) = rows_of_two();
    // An element of a well-conditioned row (odd rows: elements 2..4) 1e-4 off, and one of
    // an ill-conditioned row (about 1e-4, moved by rounding alone by a few 1e-5) 1e-2 off.
    for (i, wrong) in [(2, want.data[2] + 1e-4), (0, want.data[0] + 1e-2)] {
        let mut corrupted = got.clone();
        corrupted.data[i] = wrong;
        let why = disagreement(&corrupted, &want, Some(&spread.0[0]));
        assert!(
            why.as_deref()
                .is_some_and(|w| w.starts_with(&format!("element {i}:"))),
            "{why:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_agree_on_both_backends(
        seed in any::<u64>(),
        statements in 1usize..8,
        sizes in (1i64..=3, 1i64..=5, 1i64..=6),
    ) {
        let src = program_text(seed, statements);
        let sizes = [sizes.0, sizes.1, sizes.2];
        if let Err(why) = agree(&src, sizes, seed) {
            prop_assert!(false, "{why}\n{src}");
        }
    }
}

/// Whether some element an operand reaches over `shape` lies outside `len` elements,
/// decided element by element (exactly, in u128, when the shape is too large to walk).
fn out_of_bounds(op: &Operand, shape: &[usize], len: usize) -> bool {
    if shape.contains(&0) {
        return false;
    }
    let elements: u128 = shape.iter().map(|&n| n as u128).product();
    if elements > 1 << 16 {
        let reach: u128 = shape
            .iter()
            .zip(&op.strides)
            .map(|(&n, &s)| (n as u128 - 1) * s as u128)
            .sum();
        return op.offset as u128 + reach >= len as u128;
    }
    let mut index = vec![0usize; shape.len()];
    loop {
        let at: u128 = op.offset as u128
            + index
                .iter()
                .zip(&op.strides)
                .map(|(&i, &s)| i as u128 * s as u128)
                .sum::<u128>();
        if at >= len as u128 {
            return true;
        }
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return false;
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// Whether the plan touches memory outside a buffer, or a temporary or derived buffer
/// lies outside its region.
fn touches_outside(plan: &Plan) -> bool {
    let kernels = plan.prologue.iter().chain(&plan.kernels);
    let operands = kernels.flat_map(|k| {
        k.op.operands()
            .into_iter()
            .map(|(o, s, _)| (o.clone(), s))
            .collect::<Vec<_>>()
    });
    let outside_buffer = operands
        .into_iter()
        .any(|(o, shape)| match plan.buffers.get(o.buf) {
            Some(b) => o.strides.len() != shape.len() || out_of_bounds(&o, &shape, b.len),
            None => true,
        });
    let outside_region = plan.buffers.iter().any(|b| match b.kind {
        BufferKind::Temp { offset, .. } => offset as u128 + b.len as u128 > plan.arena_len as u128,
        BufferKind::Derived { offset, .. } => offset as u128 + b.len as u128 > plan.derived_len as u128,
        _ => false,
    });
    outside_buffer || outside_region
}

/// Moves one offset, stride or size of `plan` by a random amount.
fn corrupt(plan: &mut Plan, rng: &mut Rng) {
    let amount = match rng.below(4) {
        0 => 1,
        1 => 1 + rng.below(64),
        2 => 1 << rng.below(40),
        _ => usize::MAX - rng.below(4),
    };
    let bump = |x: &mut usize, rng: &mut Rng| {
        *x = match rng.below(2) {
            0 => x.wrapping_add(amount),
            _ => x.saturating_sub(amount),
        }
    };
    let total = plan.prologue.len() + plan.kernels.len();
    if total == 0 || rng.below(8) == 0 {
        // A temporary's place in the arena, or the arena itself.
        let temps: Vec<usize> = (0..plan.buffers.len())
            .filter(|&b| matches!(plan.buffers[b].kind, BufferKind::Temp { .. }))
            .collect();
        match temps.is_empty() {
            true => bump(&mut plan.arena_len, rng),
            false => {
                if let BufferKind::Temp { offset, .. } = &mut plan.buffers[temps[rng.below(temps.len())]].kind
                {
                    bump(offset, rng);
                }
            }
        }
        return;
    }
    let k = rng.below(total);
    let kernel = match k < plan.prologue.len() {
        true => &mut plan.prologue[k],
        false => &mut plan.kernels[k - plan.prologue.len()],
    };
    let sizes: Vec<&mut usize> = match &mut kernel.op {
        KernelOp::Map(m) => m.shape.iter_mut().collect(),
        KernelOp::Softmax(s) => s.shape.iter_mut().collect(),
        KernelOp::Gemm(g) => [&mut g.m, &mut g.n, &mut g.k]
            .into_iter()
            .chain(g.batch.iter_mut())
            .collect(),
        KernelOp::Attention(a) => [&mut a.n, &mut a.m, &mut a.dk, &mut a.dv].into_iter().collect(),
        KernelOp::Row(r) => [&mut r.n].into_iter().chain(r.rows.iter_mut()).collect(),
        KernelOp::Scatter(s) => [&mut s.size].into_iter().chain(s.shape.iter_mut()).collect(),
        KernelOp::KeyRanges(r) => [&mut r.n, &mut r.m, &mut r.rows]
            .into_iter()
            .chain(r.batch.iter_mut())
            .collect(),
    };
    let what = rng.below(3);
    if what == 0 && !sizes.is_empty() {
        let i = rng.below(sizes.len());
        let mut sizes = sizes;
        bump(sizes[i], rng);
        return;
    }
    drop(sizes);
    let mut operands = operands_mut(&mut kernel.op);
    let o = rng.below(operands.len());
    let op = &mut operands[o];
    match (what, op.strides.is_empty()) {
        (1, false) => {
            let s = rng.below(op.strides.len());
            bump(&mut op.strides[s], rng);
        }
        _ => bump(&mut op.offset, rng),
    }
}

fn operands_mut(op: &mut KernelOp) -> Vec<&mut Operand> {
    match op {
        KernelOp::Map(m) => m.inputs.iter_mut().chain([&mut m.out]).collect(),
        KernelOp::Softmax(s) => [&mut s.x, &mut s.out]
            .into_iter()
            .chain(s.mask.iter_mut().map(|m| &mut m.mask))
            .collect(),
        KernelOp::Gemm(g) => [&mut g.a, &mut g.b, &mut g.c]
            .into_iter()
            .chain(g.bias.iter_mut())
            .collect(),
        KernelOp::Attention(a) => [&mut a.q, &mut a.k, &mut a.v, &mut a.out]
            .into_iter()
            .chain(a.mask.iter_mut().map(|m| &mut m.mask))
            .chain(a.ranges.iter_mut())
            .collect(),
        KernelOp::Row(r) => r.inputs.iter_mut().chain([&mut r.out]).collect(),
        KernelOp::Scatter(s) => vec![&mut s.index, &mut s.source, &mut s.out],
        KernelOp::KeyRanges(r) => vec![&mut r.mask.mask, &mut r.out],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn validate_rejects_every_corrupted_plan_that_leaves_its_buffers(
        seed in any::<u64>(),
        statements in 1usize..6,
        sizes in (1i64..=3, 1i64..=4, 1i64..=5),
        corruptions in 1usize..3,
    ) {
        let src = program_text(seed, statements);
        let Some(program) = checked(&src, [sizes.0, sizes.1, sizes.2]) else {
            return Ok(());
        };
        let dims = attnc::runtime::bind_dims(&program).unwrap();
        let optimized = attnc::opt::optimize(&program).program;
        let mut plan = attnc::lower::lower(&optimized, &dims).unwrap();
        prop_assert!(!touches_outside(&plan), "the lowering made an invalid plan:\n{src}");
        let mut rng = Rng(seed.rotate_left(17) | 1);
        for _ in 0..corruptions {
            corrupt(&mut plan, &mut rng);
        }
        if touches_outside(&plan) {
            prop_assert!(plan.validate().is_err(), "validate accepted an out-of-bounds plan:\n{src}\n{plan:?}");
        }
    }
}
