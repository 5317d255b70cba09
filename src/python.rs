//! The Python module `attnc` (`--features python`, built by maturin from `pyproject.toml`):
//! `check`, `compile` and the compiled function's call, over the same library the command
//! line drives. The pure-Python half of the package (`python/attnc/`) re-exports these and
//! adds `plot`'s notebook object.
//!
//! Nothing here computes anything the library does not: the front end is
//! [`driver::check_source`], a call is [`runtime::function::Function::call`]. This module
//! only converts: Python values to tensors ([`convert`]), diagnostics and run-time errors
//! to exceptions ([`errors`]).

mod convert;
mod errors;
mod function;

use crate::check::DimOverride;
use crate::driver::{check_source, Checked};
use crate::plot::{self, PlotOptions};
use crate::render;
use crate::runtime::Tensor;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

/// Where a program's text comes from: a file, or the text itself.
struct Source {
    /// How diagnostics name it: the path, or `<source>`.
    name: String,
    text: String,
}

/// `path_or_source`: a `pathlib.Path`, or a `str` naming an existing `.attn` file, is read;
/// any other `str` is the program's text.
fn source(arg: &Bound<'_, PyAny>) -> PyResult<Source> {
    let path = match arg.extract::<String>() {
        Ok(text) if text.contains('\n') || !text.trim_end().ends_with(".attn") => {
            return Ok(Source {
                name: "<source>".to_string(),
                text,
            });
        }
        Ok(text) => PathBuf::from(text.trim_end()),
        Err(_) => arg.extract::<PathBuf>()?,
    };
    let text = std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string()))
        .map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("cannot read `{}`: {e}", path.display()))
        })?;
    Ok(Source {
        name: path.display().to_string(),
        text,
    })
}

/// `dims={"D": 512}` as the command line's `--dim D=512`.
fn overrides(dims: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<DimOverride>> {
    let Some(dims) = dims else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, value) in dims.iter() {
        let name: String = name.extract()?;
        let value: i64 = value.extract()?;
        if value <= 0 {
            let message = format!("the value of `{name}` must be a positive integer, found `{value}`");
            return Err(pyo3::exceptions::PyValueError::new_err(message));
        }
        out.push(DimOverride { name, value });
    }
    Ok(out)
}

/// Parses and checks a program: `CompileError` when it has errors, `ValueError` when `dims`
/// names an unknown or derived dim.
fn checked(source: &Source, dims: &[DimOverride]) -> PyResult<Checked> {
    let checked = check_source(&source.text, dims).map_err(pyo3::exceptions::PyValueError::new_err)?;
    if checked.has_errors() {
        return Err(errors::compile_error(source, &checked.diagnostics));
    }
    Ok(checked)
}

/// One binding of `attnc check`: what it prints, as attributes.
#[pyclass(module = "attnc", frozen, get_all)]
struct Binding {
    /// `param`, `input`, `let` or `output`.
    kind: String,
    name: String,
    /// The symbolic shape, `[B, N, D]`.
    shape: String,
    contiguous: bool,
    /// The strides, symbolic, when the binding is not contiguous.
    strides: Option<String>,
    /// The sizes, when every dim of the shape has a value.
    sizes: Option<Vec<i64>>,
}

#[pymethods]
impl Binding {
    fn __repr__(&self) -> String {
        let sizes = self.sizes.as_ref().map_or(String::new(), |s| format!(" {s:?}"));
        let layout = match &self.strides {
            None => "contiguous".to_string(),
            Some(s) => format!("strides {s}"),
        };
        format!("<{} {}: {} {layout}{sizes}>", self.kind, self.name, self.shape)
    }
}

/// `attnc.check(path_or_source, dims=None)`: the bindings `attnc check` prints.
#[pyfunction]
#[pyo3(signature = (path_or_source, dims = None))]
fn check(path_or_source: &Bound<'_, PyAny>, dims: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<Binding>> {
    let source = source(path_or_source)?;
    let checked = checked(&source, &overrides(dims)?)?;
    let prog = &checked.program;
    let bindings = prog
        .bindings
        .iter()
        .map(|b| {
            let t = prog.tensor_type(b.value);
            let contiguous = t.is_contiguous(&prog.dims);
            Binding {
                kind: render::kind_name(b.kind).to_string(),
                name: b.name.clone(),
                shape: prog.shape_text(&t.shape),
                contiguous,
                strides: (!contiguous).then(|| prog.strides_text(t)),
                sizes: render::sizes(prog, &t.shape),
            }
        })
        .collect();
    Ok(bindings)
}

/// `attnc._plot_png(array, name, batch, heads, queries, keys)`: the PNG `attnc plot`
/// writes, as bytes (`attnc.plot` wraps it for notebooks).
#[pyfunction]
#[pyo3(signature = (array, name, batch = 0, heads = None, queries = None, keys = None))]
fn _plot_png(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
    name: &str,
    batch: usize,
    heads: Option<(usize, usize)>,
    queries: Option<Vec<String>>,
    keys: Option<Vec<String>>,
) -> PyResult<Vec<u8>> {
    let held = convert::input(py, array)?;
    let t = Tensor::new(held.shape(), held.slice()?.to_vec());
    let opts = PlotOptions {
        batch,
        heads: heads.map(|(a, b)| a..b),
        queries,
        keys,
    };
    errors::guard(|| plot::select(&t, name, &opts).and_then(|maps| plot::png(&maps, name, &opts)))
}

#[pymodule]
fn _attnc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CompileError", py.get_type::<errors::CompileError>())?;
    m.add("RunError", py.get_type::<errors::RunError>())?;
    m.add_class::<errors::Diagnostic>()?;
    m.add_class::<Binding>()?;
    m.add_class::<function::Function>()?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(function::compile, m)?)?;
    m.add_function(wrap_pyfunction!(_plot_png, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
