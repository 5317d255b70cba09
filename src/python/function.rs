//! `attnc.compile` and the compiled function: its call, its plans, its pickling.

use super::convert::{self, Held};
use super::{checked, errors, overrides, source};
use crate::runtime::function::{self, Backend, Input, Options, Weights};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::PyArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;

/// A compiled program with its weights: call it with the inputs, by keyword or in
/// declaration order; it returns a dict of output name to NumPy array.
#[pyclass(module = "attnc", frozen)]
pub struct Function {
    function: Arc<function::Function>,
    /// The program's text and the `dims` it was compiled with, for pickling.
    source: String,
    dims: Vec<(String, i64)>,
    backend: Backend,
    threads: Option<usize>,
    max_memory: Option<u64>,
}

/// `attnc.compile(path_or_source, dims=None, weights=None, backend="jit", threads=None,
/// seed=0, max_memory=None)`.
#[pyfunction]
#[pyo3(signature = (path_or_source, dims = None, weights = None, backend = "jit", threads = None, seed = 0, max_memory = None))]
#[allow(clippy::too_many_arguments)]
pub fn compile(
    py: Python<'_>,
    path_or_source: &Bound<'_, PyAny>,
    dims: Option<&Bound<'_, PyDict>>,
    weights: Option<&Bound<'_, PyAny>>,
    backend: &str,
    threads: Option<usize>,
    seed: u64,
    max_memory: Option<u64>,
) -> PyResult<Function> {
    let source = source(path_or_source)?;
    let dims = overrides(dims)?;
    let program = checked(&source, &dims)?.program;
    let backend = match backend {
        "jit" => Backend::Jit,
        "interp" => Backend::Interp,
        other => {
            let message = format!("backend must be \"jit\" or \"interp\", found {other:?}");
            return Err(PyValueError::new_err(message));
        }
    };
    if threads.is_some_and(|t| !(1..=1024).contains(&t)) {
        return Err(PyValueError::new_err("threads must be from 1 to 1024"));
    }
    let weights = match weights {
        None => Weights::Drawn { seed },
        Some(w) if w.is_instance_of::<PyDict>() => Weights::Store(Box::new(convert::weights(py, w.cast()?)?)),
        Some(w) => {
            Weights::File(w.extract::<PathBuf>().map_err(|_| {
                PyTypeError::new_err("weights must be a safetensors path or a dict of arrays")
            })?)
        }
    };
    let options = Options {
        backend,
        threads,
        max_memory,
    };
    let made = py.detach(|| errors::catch(|| function::Function::new(program, weights, options)));
    Ok(Function {
        function: Arc::new(made.map_err(|e| errors::run_error(&e))?),
        source: source.text,
        dims: dims.into_iter().map(|d| (d.name, d.value)).collect(),
        backend,
        threads,
        max_memory,
    })
}

#[pymethods]
impl Function {
    /// Runs the program: inputs by keyword or in declaration order.
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let held = self.arguments(py, args, kwargs)?;
        let shapes: Vec<Vec<usize>> = held.iter().map(Held::shape).collect();
        let data = held.iter().map(Held::slice).collect::<PyResult<Vec<_>>>()?;
        let inputs: Vec<Input> = shapes
            .iter()
            .zip(&data)
            .map(|(shape, data)| Input { shape, data })
            .collect();
        let f = &self.function;
        let outputs = py
            .detach(|| errors::catch(|| f.call(&inputs)))
            .map_err(|e| errors::run_error(&e))?;
        let dict = PyDict::new(py);
        for (name, t) in outputs {
            let array = ArrayD::from_shape_vec(IxDyn(&t.shape), t.data.into_vec())
                .map_err(|e| PyValueError::new_err(format!("internal error: {e}")))?;
            dict.set_item(name, PyArray::from_owned_array(py, array))?;
        }
        Ok(dict)
    }

    /// The addresses of the buffers a call with these arguments hands the kernels, in
    /// declaration order (how the tests see that an input is read in place).
    #[pyo3(signature = (*args, **kwargs))]
    fn _input_addresses<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Vec<usize>> {
        let held = self.arguments(py, args, kwargs)?;
        held.iter().map(|h| Ok(h.slice()?.as_ptr() as usize)).collect()
    }

    /// The inputs' names, in declaration order (states, which the function holds, left
    /// out).
    #[getter]
    fn inputs(&self) -> Vec<String> {
        let inputs = self.function.program().inputs.iter();
        inputs.filter(|d| !d.state).map(|d| d.name.clone()).collect()
    }

    /// The outputs' names, in declaration order (states left out: see `state`).
    #[getter]
    fn outputs(&self) -> Vec<String> {
        let outputs = self.function.program().outputs.iter();
        outputs
            .filter(|o| o.state.is_none())
            .map(|o| o.name.clone())
            .collect()
    }

    /// The value the state `name` holds after the last call, or `None` before the first
    /// call (zeros then) or after `reset_state()`.
    fn state<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyArray<f32, IxDyn>>>> {
        let is_state = self
            .function
            .program()
            .inputs
            .iter()
            .any(|d| d.state && d.name == name);
        if !is_state {
            return Err(PyValueError::new_err(format!(
                "`{name}` is not a state of the program"
            )));
        }
        let Some(t) = self.function.state(name) else {
            return Ok(None);
        };
        let array = ArrayD::from_shape_vec(IxDyn(&t.shape), t.data.into_vec())
            .map_err(|e| PyValueError::new_err(format!("internal error: {e}")))?;
        Ok(Some(PyArray::from_owned_array(py, array)))
    }

    /// Starts every state again from zeros at the next call.
    fn reset_state(&self) {
        self.function.reset_state();
    }

    /// What has been compiled, oldest first: one dict per set of sizes, with `sizes` (every
    /// dim's value), `compile_ms`, `kernels` and `prepared` (whether the plan laid out the
    /// weights itself, `False` where it shares an earlier plan's).
    #[getter]
    fn plans<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.function
            .plans()
            .into_iter()
            .map(|p| {
                let d = PyDict::new(py);
                let sizes = PyDict::new(py);
                for (name, v) in p.sizes {
                    sizes.set_item(name, v)?;
                }
                d.set_item("sizes", sizes)?;
                d.set_item("compile_ms", p.compile_ms)?;
                d.set_item("kernels", p.kernels)?;
                d.set_item("prepared", p.prepared)?;
                Ok(d)
            })
            .collect()
    }

    /// Pickles as the source, the dims, the weights as read and the options: the function
    /// is compiled again where it is unpickled (`attnc._rebuild`).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let rebuild = py.import("attnc")?.getattr("_rebuild")?;
        let dims = PyDict::new(py);
        for (name, v) in &self.dims {
            dims.set_item(name, v)?;
        }
        let weights = PyDict::new(py);
        for (key, t) in self.function.weights() {
            let array = ArrayD::from_shape_vec(IxDyn(&t.shape), t.data.to_vec())
                .map_err(|e| PyValueError::new_err(format!("internal error: {e}")))?;
            weights.set_item(key, PyArray::from_owned_array(py, array))?;
        }
        let backend = match self.backend {
            Backend::Jit => "jit",
            Backend::Interp => "interp",
        };
        let args = (
            &self.source,
            dims,
            weights,
            backend,
            self.threads,
            self.max_memory,
        );
        Ok((rebuild, args.into_pyobject(py)?))
    }

    fn __repr__(&self) -> String {
        format!(
            "<attnc.Function ({}) -> ({}), {} plans>",
            self.inputs().join(", "),
            self.outputs().join(", "),
            self.function.plans().len()
        )
    }
}

impl Function {
    /// The call's arguments in declaration order, each held as float32: `TypeError` for a
    /// missing, unknown or repeated input, as for a Python function.
    fn arguments<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Vec<Held<'py>>> {
        let names = self.inputs();
        if args.len() > names.len() {
            let message = format!(
                "takes {} inputs ({}), {} were given",
                names.len(),
                names.join(", "),
                args.len()
            );
            return Err(PyTypeError::new_err(message));
        }
        let mut slots: Vec<Option<Bound<'py, PyAny>>> = vec![None; names.len()];
        for (slot, arg) in slots.iter_mut().zip(args.iter()) {
            *slot = Some(arg);
        }
        for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
            let key: String = key.extract()?;
            let Some(i) = names.iter().position(|n| *n == key) else {
                let message = format!("unknown input `{key}`: the inputs are {}", names.join(", "));
                return Err(PyTypeError::new_err(message));
            };
            if slots[i].replace(value).is_some() {
                return Err(PyTypeError::new_err(format!("input `{key}` given twice")));
            }
        }
        names
            .iter()
            .zip(slots)
            .map(|(name, slot)| {
                let value = slot.ok_or_else(|| PyTypeError::new_err(format!("missing input `{name}`")))?;
                convert::input(py, &value)
                    .map_err(|e| PyTypeError::new_err(format!("input `{name}`: {}", e.value(py))))
            })
            .collect()
    }
}
