//! Python values to the runtime's tensors: every dtype rule of the module is here, so that
//! a new dtype of the runtime is one change.
//!
//! An input that is a C-contiguous float32 NumPy array is borrowed as it is. Anything else
//! with a `__dlpack__` (PyTorch, JAX) is first viewed as a NumPy array through
//! `numpy.from_dlpack`, which shares its memory, so a contiguous float32 tensor is not
//! copied either. Other strides, and booleans, integers and other floats, are copied to
//! contiguous float32, as the command line reads them from a file; any other dtype is a
//! `TypeError`.

use crate::runtime::files::Tensors;
use crate::runtime::Tensor;
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use safetensors::Dtype;

/// An input held for a call: a float32, C-contiguous array, borrowed for as long as the
/// call runs (the caller's own array, or the copy a conversion made).
pub struct Held<'py> {
    array: PyReadonlyArrayDyn<'py, f32>,
}

impl Held<'_> {
    pub fn shape(&self) -> Vec<usize> {
        self.array.shape().to_vec()
    }

    /// The elements in row-major order, in place.
    pub fn slice(&self) -> PyResult<&[f32]> {
        self.array
            .as_slice()
            .map_err(|e| PyTypeError::new_err(format!("internal error: {e}")))
    }
}

/// `obj` as a float32 C-contiguous array: borrowed when it already is one (and aligned, as
/// a slice of `f32` must be), else converted.
pub fn input<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    if let Ok(a) = obj.cast::<PyArrayDyn<f32>>() {
        if a.is_c_contiguous() && a.is_aligned() {
            return borrow(a);
        }
    }
    let array = ndarray_of(py, obj)?;
    let descr = array.dtype();
    if store_dtype(&descr).is_none() {
        return Err(unreadable(&descr));
    }
    let converted = to_f32(py, &array)?;
    borrow(converted.cast::<PyArrayDyn<f32>>()?)
}

fn borrow<'py>(a: &Bound<'py, PyArrayDyn<f32>>) -> PyResult<Held<'py>> {
    let array = a
        .try_readonly()
        .map_err(|e| PyTypeError::new_err(format!("cannot read the array: {e}")))?;
    Ok(Held { array })
}

/// `obj` itself when it is a NumPy array, else its `__dlpack__` view.
fn ndarray_of<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        return Ok(a.clone());
    }
    if !obj.hasattr("__dlpack__")? {
        let type_name = obj.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "expected a NumPy array or an object with `__dlpack__`, found `{type_name}`"
        )));
    }
    let numpy = py.import("numpy")?;
    let array = numpy
        .call_method1("from_dlpack", (obj,))
        .map_err(|e| PyTypeError::new_err(format!("cannot read the tensor through `__dlpack__`: {e}")))?;
    Ok(array.cast_into::<PyUntypedArray>()?)
}

/// A C-contiguous, aligned float32 copy. `numpy.require` with `C` and `A`, not
/// `numpy.ascontiguousarray`, which gives back a contiguous float32 array as it is, however
/// misaligned (`numpy.frombuffer(b, numpy.float32, offset=1)`), and a misaligned array
/// cannot be read as a slice of `f32`.
fn to_f32<'py>(py: Python<'py>, array: &Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyAny>> {
    let numpy = py.import("numpy")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", numpy.getattr("float32")?)?;
    kwargs.set_item("requirements", "CA")?;
    numpy.call_method("require", (array,), Some(&kwargs))
}

/// The safetensors dtype of a NumPy dtype attnc reads (what a weight's messages name): by
/// its kind and size, so that either byte order is read (`>f4` as well as `<f4`: the
/// conversion to float32 swaps the bytes), as the module's doc promises of every float.
fn store_dtype(descr: &Bound<'_, PyArrayDescr>) -> Option<Dtype> {
    Some(match (descr.kind(), descr.itemsize()) {
        (b'f', 2) => Dtype::F16,
        (b'f', 4) => Dtype::F32,
        (b'f', 8) => Dtype::F64,
        (b'b', 1) => Dtype::BOOL,
        (b'i', 1) => Dtype::I8,
        (b'i', 2) => Dtype::I16,
        (b'i', 4) => Dtype::I32,
        (b'i', 8) => Dtype::I64,
        (b'u', 1) => Dtype::U8,
        (b'u', 2) => Dtype::U16,
        (b'u', 4) => Dtype::U32,
        (b'u', 8) => Dtype::U64,
        _ => return None,
    })
}

fn unreadable(descr: &Bound<'_, PyArrayDescr>) -> PyErr {
    PyTypeError::new_err(format!(
        "attnc cannot read dtype {descr}: it reads floats, integers and booleans, as float32"
    ))
}

/// A dict of arrays (a PyTorch `state_dict` as it is) as the weights' store. Each keeps
/// the dtype it had, so that an integer weight is the command line's E0303.
pub fn weights(py: Python<'_>, dict: &Bound<'_, PyDict>) -> PyResult<Tensors> {
    let mut entries = Vec::new();
    for (key, value) in dict.iter() {
        let key: String = key.extract().map_err(|_| {
            PyTypeError::new_err("the weights dict's keys must be strings, as in a state_dict")
        })?;
        let array = ndarray_of(py, &value)
            .map_err(|e| PyTypeError::new_err(format!("weight `{key}`: {}", e.value(py))))?;
        let descr = array.dtype();
        let dtype = store_dtype(&descr).ok_or_else(|| unreadable(&descr))?;
        let held = borrow(to_f32(py, &array)?.cast::<PyArrayDyn<f32>>()?)?;
        entries.push((key, dtype, Tensor::new(held.shape(), held.slice()?.to_vec())));
    }
    Ok(Tensors {
        name: "the weights given".to_string(),
        entries,
    })
}
