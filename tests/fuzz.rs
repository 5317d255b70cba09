//! Thousands of randomly mutated example programs: the checker never panics, `attnc check
//! --format json` always exits 0 or 1 with one valid JSON object.
//!
//! The optimizer's fuzz test, the slow one, runs a short budget in CI;
//! `ATTNC_FUZZ_CASES=N` runs N mutations of each example (3000 is the long run).

use attnc::driver::check_source;
use attnc::render;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod common;
use common::{scratch, Rng};

/// Fragments a mutation may insert: the tokens most likely to reach odd checker paths.
const FRAGMENTS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "-1",
    "0",
    "1",
    "@",
    "/",
    "%",
    "*",
    "==",
    ".view(B, -1)",
    ".transpose(0, 1)",
    ".contiguous()",
    "\n",
    "B",
    "N",
    "D",
    "H",
    "Dk",
    "h",
    "x",
    "for h in 0..H {",
    "concat(",
    "stack(",
    "let ",
    "fn f(a: [B]) -> [B] { a }\n",
    "dim Q = D / H\n",
    "assert N % 2 == 0\n",
    ".permute(2, 1, 0)",
    ".squeeze(0)",
    ".unsqueeze(-1)",
    "99999999999999999999",
    "\"",
    "#",
    "$",
];

fn mutate(src: &str, rng: &mut Rng) -> String {
    let mut s = src.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(s.len() + 1);
        match rng.below(4) {
            0 => {
                let end = (at + 1 + rng.below(12)).min(s.len());
                s.drain(at.min(end)..end);
            }
            1 | 2 => {
                let f = FRAGMENTS[rng.below(FRAGMENTS.len())].as_bytes();
                s.splice(at..at, f.iter().copied());
            }
            _ => {
                let lines: Vec<&[u8]> = src.as_bytes().split(|b| *b == b'\n').collect();
                let line = lines[rng.below(lines.len())];
                let mut ins = line.to_vec();
                ins.push(b'\n');
                s.splice(at..at, ins);
            }
        }
    }
    String::from_utf8_lossy(&s).into_owned()
}

fn examples() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    out.sort();
    out
}

#[test]
fn mutated_programs_never_panic_the_checker() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (i, src) in examples().iter().enumerate() {
        for case in 0..1000 {
            let m = mutate(src, &mut rng);
            let result = std::panic::catch_unwind(|| {
                if let Ok(c) = check_source(&m, &[]) {
                    let json = render::check_json(&m, &c.diagnostics, &c.program);
                    let _ = render::diagnostics_text("f.attn", &m, &c.diagnostics);
                    assert_eq!(json["ok"].as_bool(), Some(!c.has_errors()));
                }
            });
            assert!(result.is_ok(), "example {i}, case {case} panics:\n{m}");
        }
    }
}

#[test]
fn the_binary_answers_mutated_programs_with_json_and_exit_0_or_1() {
    let mut rng = Rng(42);
    let temp = scratch("fuzz");
    let dir = temp.path();
    let path = dir.join("case.attn");
    for (i, src) in examples().iter().enumerate() {
        for case in 0..500 {
            let m = mutate(src, &mut rng);
            std::fs::File::create(&path)
                .unwrap()
                .write_all(m.as_bytes())
                .unwrap();
            let o = Command::new(env!("CARGO_BIN_EXE_attnc"))
                .args(["check", "--format", "json"])
                .arg(&path)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let code = o.status.code();
            assert!(
                matches!(code, Some(0 | 1)),
                "example {i}, case {case}: exit {code:?}\n{m}"
            );
            let v: serde_json::Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("example {i}, case {case}: {e}\n{m}"));
            assert_eq!(v["ok"].as_bool(), Some(code == Some(0)));
        }
    }
}

/// How many mutations of each example the optimizer's test runs: `ATTNC_FUZZ_CASES`, or
/// `short`.
fn cases(short: u32) -> u32 {
    std::env::var("ATTNC_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(short)
}

/// Mutated programs that check cleanly optimize without a panic, to programs that compute
/// the same outputs (the reference interpreter on both, at small sizes), each stage within
/// [`STAGE_LIMIT`]. Small sizes means the free dims `B`, `N`, `M` at 2, 3, 4 and the wide
/// constant dims shrunk by [`shrunk_constants`]: what this changes is that the optimizer
/// sees those constants' small values (a rewrite that depends on a size, such as where
/// the cost model prefers one GEMM to two, may choose otherwise than at the written
/// sizes), and a mutation that checks at the written sizes but not at the shrunk ones (a
/// literal `512` standing for `D`) is skipped rather than run. Each case runs the
/// optimizer's saturation, so CI runs a short budget (see the module's doc). The cases
/// are drawn in order from one seed, then run on rayon's threads.
#[test]
fn mutated_programs_optimize_to_equal_programs() {
    use rayon::prelude::*;
    let mut rng = Rng(0x5EED);
    let mut cases_of = Vec::new();
    for (i, src) in examples().iter().enumerate() {
        for case in 0..cases(24) {
            cases_of.push((i, case, mutate(src, &mut rng)));
        }
    }
    // A long run says how far it got (seen with `--nocapture`).
    let done = std::sync::atomic::AtomicUsize::new(0);
    let optimized: usize = cases_of
        .par_iter()
        .map(|(i, case, m)| {
            let ok = optimizes_to_an_equal_program(m, &format!("example {i}, case {case}"));
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(500) {
                eprintln!("{n} of {} cases", cases_of.len());
            }
            usize::from(ok)
        })
        .sum();
    eprintln!(
        "{optimized} of {} cases checked and ran; the slowest stage took {:?} of CPU time",
        cases_of.len(),
        Duration::from_micros(SLOWEST.load(Ordering::Relaxed))
    );
    assert!(
        optimized > 10,
        "only {optimized} mutated programs checked and ran"
    );
}

/// The longest a stage (checking, optimizing, binding, interpreting) of one case may take,
/// by its thread's CPU time (so a loaded machine does not fail it): at the shrunk sizes
/// they take milliseconds, so a second is a stage that loops or grows without bound, a
/// failure by issue 24's rule, as in `fuzz_jit`.
const STAGE_LIMIT: Duration = Duration::from_secs(1);

/// The slowest stage seen, in microseconds, for the summary line.
static SLOWEST: AtomicU64 = AtomicU64::new(0);

/// The CPU time the calling thread has used (a case's stages run on one thread).
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the pointer, which points to a
    // live, properly aligned value for the length of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// `f()`, failing `case` where it took more than [`STAGE_LIMIT`] of CPU time.
fn timed<T>(stage: &str, case: &str, f: impl FnOnce() -> T) -> T {
    let start = thread_cpu();
    let out = f();
    let took = thread_cpu().saturating_sub(start);
    SLOWEST.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
    assert!(
        took <= STAGE_LIMIT,
        "{case}: {stage} took {took:?} of CPU time, more than {STAGE_LIMIT:?}"
    );
    out
}

/// Constant dims above this are widths, shrunk by [`shrunk_constants`]; those at or below
/// it (head and group counts) stay as written.
const WIDE: i64 = 64;

/// Smaller values for the wide constant dims of `dims`, as `--dim` overrides, so that the
/// interpreter runs a mutation in milliseconds rather than minutes (`llama_layer`'s
/// `D = 4096, F = 11008` took 380-455 s a case). Every wide constant is divided by the
/// largest common factor `k` that keeps each constant dividing the constants it divided
/// (so `dim Dk = D / H` and a mutation's `D / H` stay exact) and each wide constant above
/// the narrow ones it was above (so `D / H` stays over 1). Dividing all by one `k` keeps
/// every quotient of two wide dims too.
fn shrunk_constants(dims: &attnc::dims::DimTable) -> Vec<(String, i64)> {
    use attnc::dims::DimKind;
    let consts: Vec<(&str, i64)> = dims
        .iter()
        .filter_map(|(_, d)| match d.kind {
            DimKind::Const(v) => Some((d.name.as_str(), v)),
            _ => None,
        })
        .collect();
    let wide = |v: i64| v > WIDE;
    let common = consts
        .iter()
        .filter(|(_, v)| wide(*v))
        .fold(0, |g, &(_, v)| gcd(g, v));
    // A mutation may write `99999999999999999999`: such a program is left at its sizes.
    let keeps = |k: i64| {
        let new = |v: i64| if wide(v) { v / k } else { v };
        consts.iter().all(|&(_, a)| {
            consts.iter().all(|&(_, b)| {
                let divides = b.checked_rem(a) == Some(0);
                (!divides || new(b).checked_rem(new(a)) == Some(0))
                    && (!(wide(b) && b > a) || new(b) > new(a))
            })
        })
    };
    let k = (1..=common.min(1 << 20))
        .rev()
        .find(|&k| common % k == 0 && keeps(k))
        .unwrap_or(1);
    consts
        .iter()
        .filter(|(_, v)| wide(*v) && k > 1)
        .map(|&(n, v)| (n.to_string(), v / k))
        .collect()
}

fn gcd(a: i64, b: i64) -> i64 {
    match b {
        0 => a,
        _ => gcd(b, a % b),
    }
}

/// Whether `m` checked and ran; panics where its optimized program fails or differs.
fn optimizes_to_an_equal_program(m: &str, case: &str) -> bool {
    use attnc::check::DimOverride;
    use attnc::runtime::{bind, interpret, RunOptions};
    let Ok(plain) = timed("checking", case, || check_source(m, &[])) else {
        return false;
    };
    if plain.has_errors() {
        return false;
    }
    let free = [("B", 2), ("N", 3), ("M", 4)]
        .into_iter()
        .filter(|(n, _)| plain.program.dims.lookup(n).is_some())
        .map(|(n, v)| (n.to_string(), v));
    let sizes: Vec<DimOverride> = free
        .chain(shrunk_constants(&plain.program.dims))
        .map(|(name, value)| DimOverride { name, value })
        .collect();
    let Ok(c) = timed("checking", case, || check_source(m, &sizes)) else {
        return false;
    };
    if c.has_errors() {
        return false;
    }
    let result = timed("optimizing", case, || {
        std::panic::catch_unwind(|| attnc::opt::optimize(&c.program))
    });
    let opt = result.unwrap_or_else(|_| panic!("{case} panics the optimizer:\n{m}"));
    assert!(
        opt.stats.fallback.is_none(),
        "{case}: {:?}\n{m}",
        opt.stats.fallback
    );
    let Ok(bound) = timed("binding", case, || bind(&c.program, &RunOptions::default())) else {
        return false;
    };
    let run = |p| timed("interpreting", case, || interpret(p, &bound));
    let (Ok(want), got) = (run(&c.program), run(&opt.program)) else {
        return false;
    };
    let got = got.unwrap_or_else(|e| panic!("{case}: {e}\n{m}\n{}", opt.program.to_text()));
    for ((name, w), (_, g)) in want.iter().zip(&got) {
        assert_eq!(w.shape, g.shape, "{case}: `{name}`\n{m}");
        let scale = w.data.iter().fold(0f32, |a, x| a.max(x.abs())).max(1e-30);
        let err = w
            .data
            .iter()
            .zip(&g.data)
            .fold(0f32, |a, (x, y)| a.max((x - y).abs()))
            / scale;
        assert!(
            err <= 1e-5 || (err.is_nan() && w.data.iter().any(|x| !x.is_finite())),
            "{case}: `{name}` off by {err}\n{m}\n{}",
            opt.program.to_text()
        );
    }
    true
}
