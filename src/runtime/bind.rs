//! Binding: from a program and its files to concrete tensors and a value for every dim.
//!
//! The order is fixed so that the first error is the most useful one: the files open, the
//! inputs bind their free dims (E0302, E0301), every needed free dim has a value (E0304),
//! the asserts hold (E0209), the tensors fit (E0305), every input fits its declaration (E0301), and the params are
//! read (E0302, E0303) or drawn.

use super::defaults;
use super::files::Param;
use super::files::{Store, TensorFile};
use super::ops::holds;
use super::tensor::Tensor;
use super::weights::WeightFile;
use super::{Bound, RunError, RunOptions};
use crate::diagnostic::Code;
use crate::dims::{DimKind, DimTable, Poly, Sym};
use crate::ir::{DType, InputDecl, Op, Program, Type};
use safetensors::Dtype;

pub fn bind(program: &Program, opts: &RunOptions) -> Result<Bound, RunError> {
    let input_file = opts.inputs.as_deref().map(TensorFile::open).transpose()?;
    bind_from(program, opts, input_file.as_ref(), None)
}

/// As [`bind`], with the inputs from `input_file` (in place of `opts.inputs`), and the
/// params given when they were read before (a second batch of the same program).
pub fn bind_from(
    program: &Program,
    opts: &RunOptions,
    input_file: Option<&TensorFile>,
    params: Option<Vec<Tensor>>,
) -> Result<Bound, RunError> {
    let weights = match params {
        Some(_) => None,
        None => opts.weights.as_deref().map(WeightFile::open).transpose()?,
    };
    let mut dims = Dims::new(program);
    let read = match input_file {
        Some(file) => Some(dims.bind_inputs(file)?),
        None => None,
    };
    dims.require_needed()?;
    dims.check_asserts()?;
    super::budget::program(program, &dims.all_values(), opts.budget())?;
    let shapes = dims.shapes(program.inputs.iter().map(|d| (&d.name, &d.shape)))?;
    let mut inputs = defaults::inputs(program, &shapes, opts.seed);
    if let Some(tensors) = read {
        for ((decl, t), slot) in program.inputs.iter().zip(tensors).zip(&mut inputs) {
            // A state the file does not hold starts at zeros.
            if let Some(t) = t {
                dims.check_input(decl, &t.shape)?;
                *slot = t;
            }
        }
    }
    let shapes = dims.shapes(program.params.iter().map(|d| (&d.name, &d.shape)))?;
    let params = match (params, &weights) {
        (Some(params), _) => params,
        (None, Some(file)) => read_params(program, file, &shapes)?,
        (None, None) => defaults::params(program, &shapes, opts.seed),
    };
    Ok(Bound {
        params,
        inputs,
        dims: dims.all_values(),
    })
}

/// The value of every dim for inputs of `shapes` (one per input, in declaration order)
/// held in memory: the checks of [`bind`] in its order, E0301, E0304, E0209 and E0305
/// within `budget` bytes, with nothing read or drawn.
pub fn bind_shapes(
    program: &Program,
    shapes: &[&[usize]],
    budget: u64,
) -> Result<Vec<Option<i64>>, RunError> {
    let mut dims = Dims::new(program);
    for (decl, &shape) in program.inputs.iter().zip(shapes) {
        if shape.len() != decl.shape.len() {
            let message = format!(
                "input `{}` has shape {shape:?}, but is declared {} (rank {})",
                decl.name,
                show(&program.dims, &decl.shape),
                decl.shape.len()
            );
            return Err(RunError::new(Some(Code::E0301), message));
        }
        dims.bind_axes(decl, shape)?;
    }
    dims.require_needed()?;
    dims.check_asserts()?;
    super::budget::program(program, &dims.all_values(), budget)?;
    for (decl, shape) in program.inputs.iter().zip(shapes) {
        dims.check_input(decl, shape)?;
    }
    Ok(dims.all_values())
}

/// The shapes of the states, for the dims the other inputs' `shapes` bind (`None` for
/// each state): E0301 and E0304 as [`bind_shapes`] reports them.
pub fn state_shapes(program: &Program, shapes: &[Option<&[usize]>]) -> Result<Vec<Vec<usize>>, RunError> {
    let mut dims = Dims::new(program);
    for (decl, shape) in program.inputs.iter().zip(shapes) {
        if let Some(shape) = shape.filter(|s| s.len() == decl.shape.len()) {
            dims.bind_axes(decl, shape)?;
        }
    }
    dims.require_needed()?;
    let states = program.inputs.iter().filter(|d| d.state);
    dims.shapes(states.map(|d| (&d.name, &d.shape)))
}

/// The shapes of the params from the declarations and `--dim` alone: E0304 when one needs
/// a free dim, whose value only an input's shape could give.
pub fn param_shapes(program: &Program) -> Result<Vec<Vec<usize>>, RunError> {
    let dims = Dims::new(program);
    let unbound = program
        .params
        .iter()
        .flat_map(|d| &d.shape)
        .flat_map(Poly::syms)
        .find(|&s| matches!(program.dims.info(s).kind, DimKind::Free { .. }) && dims.values[s].is_none());
    if let Some(s) = unbound {
        let name = dims.name(s);
        let message = format!("free dim `{name}` has no value, and a param's shape needs it");
        return Err(RunError::new(Some(Code::E0304), message).with_hint(format!(
            "give it a value before the weights are read (`--dim {name}=..`)"
        )));
    }
    dims.shapes(program.params.iter().map(|d| (&d.name, &d.shape)))
}

/// The value of every dim from the declarations and `--dim` alone, reading no file: E0304
/// when a free dim the program needs has none, E0209 when an assert is false.
pub fn bind_dims(program: &Program) -> Result<Vec<Option<i64>>, RunError> {
    let dims = Dims::new(program);
    dims.require_needed()?;
    dims.check_asserts()?;
    Ok(dims.all_values())
}

/// Where a free dim's value came from, for messages.
#[derive(Clone)]
enum Origin {
    Declared,
    Flag,
    Input(String),
}

/// The dims of a program being bound: a value and its origin per dim.
struct Dims<'p> {
    program: &'p Program,
    values: Vec<Option<i64>>,
    origins: Vec<Origin>,
}

impl<'p> Dims<'p> {
    fn new(program: &'p Program) -> Dims<'p> {
        let (values, origins) = program
            .dims
            .iter()
            .map(|(_, info)| match info.kind {
                DimKind::Const(v) => (Some(v), Origin::Declared),
                DimKind::Free { value: Some(v) } => (Some(v), Origin::Flag),
                _ => (None, Origin::Declared),
            })
            .unzip();
        Dims {
            program,
            values,
            origins,
        }
    }

    fn eval(&self, p: &Poly) -> Option<i64> {
        self.program.dims.eval(p, &|s| self.values[s])
    }

    fn name(&self, s: Sym) -> &str {
        &self.program.dims.info(s).name
    }

    /// Reads every input and binds each free dim that is a whole axis of one (`[B, N, D]`
    /// binds `B` and `N`); a second input, or `--dim`, must then agree. A state the file
    /// does not hold is `None`: it starts at zeros.
    fn bind_inputs(&mut self, file: &TensorFile) -> Result<Vec<Option<Tensor>>, RunError> {
        let mut tensors = Vec::new();
        for decl in &self.program.inputs {
            if decl.state && file.get(&decl.name).is_none() {
                tensors.push(None);
                continue;
            }
            let t = read_input(file, decl, &self.program.dims)?;
            self.bind_axes(decl, &t.shape)?;
            tensors.push(Some(t));
        }
        Ok(tensors)
    }

    /// Binds each free dim that is a whole axis of the input `decl`, of `shape`.
    fn bind_axes(&mut self, decl: &InputDecl, shape: &[usize]) -> Result<(), RunError> {
        for (axis, (poly, &size)) in decl.shape.iter().zip(shape).enumerate() {
            if let Some(s) = self.free_sym(poly) {
                self.bind_free(s, size as i64, &decl.name, axis)?;
            }
        }
        Ok(())
    }

    /// The free dim `p` is, if it is exactly one.
    fn free_sym(&self, p: &Poly) -> Option<Sym> {
        let &[s] = p.syms().as_slice() else {
            return None;
        };
        let free = matches!(self.program.dims.info(s).kind, DimKind::Free { .. });
        (free && *p == Poly::sym(s)).then_some(s)
    }

    fn bind_free(&mut self, s: Sym, size: i64, input: &str, axis: usize) -> Result<(), RunError> {
        if size == 0 {
            let message = format!(
                "input `{input}` has size 0 on axis {axis}, the free dim `{}`; a free dim is at least 1",
                self.name(s)
            );
            return Err(RunError::new(Some(Code::E0301), message));
        }
        let from = match (self.values[s], &self.origins[s]) {
            (None, _) => {
                self.values[s] = Some(size);
                self.origins[s] = Origin::Input(input.to_string());
                return Ok(());
            }
            (Some(v), _) if v == size => return Ok(()),
            (Some(v), Origin::Input(other)) => format!("{v} from input `{other}`"),
            (Some(v), _) => format!("{v} from `--dim {}={v}`", self.name(s)),
        };
        let message = format!(
            "input `{input}` has size {size} on axis {axis}, but `{}` is {from}",
            self.name(s)
        );
        Err(RunError::new(Some(Code::E0301), message))
    }

    /// E0304 for the first free dim the program needs that has no value.
    fn require_needed(&self) -> Result<(), RunError> {
        let missing = needed_syms(self.program).into_iter().find(|&s| {
            matches!(self.program.dims.info(s).kind, DimKind::Free { .. }) && self.values[s].is_none()
        });
        match missing {
            None => Ok(()),
            Some(s) => {
                let name = self.name(s);
                Err(
                    RunError::new(Some(Code::E0304), format!("free dim `{name}` has no value")).with_hint(
                        format!("bind it through an input's shape, or give it with `--dim {name}=..`"),
                    ),
                )
            }
        }
    }

    /// E0209 for an assert about free dims that is false for their values.
    fn check_asserts(&self) -> Result<(), RunError> {
        for a in &self.program.asserts {
            let sides = self.eval(&a.lhs).zip(self.eval(&a.rhs));
            if sides.is_some_and(|(l, r)| holds(a.op, l, r)) {
                continue;
            }
            let mut syms = a.lhs.syms();
            syms.extend(a.rhs.syms());
            syms.sort_unstable();
            syms.dedup();
            let values: Vec<String> = syms
                .iter()
                .filter(|&&s| matches!(self.program.dims.info(s).kind, DimKind::Free { .. }))
                .map(|&s| format!("{} = {}", self.name(s), self.values[s].unwrap_or_default()))
                .collect();
            let message = format!("assert `{}` is false for {}", a.text, values.join(", "));
            return Err(RunError::new(Some(Code::E0209), message));
        }
        Ok(())
    }

    /// E0301 when an axis of the input differs from its declared size.
    fn check_input(&self, decl: &InputDecl, shape: &[usize]) -> Result<(), RunError> {
        for (axis, (poly, &size)) in decl.shape.iter().zip(shape).enumerate() {
            let declared = self.eval(poly);
            if declared == Some(size as i64) {
                continue;
            }
            let text = self.program.dims.display(poly);
            let says = match declared {
                Some(v) => format!("its declaration says `{text}` = {v}"),
                None => format!("its declaration `{text}` is not a whole number"),
            };
            let message = format!("input `{}` has size {size} on axis {axis}, but {says}", decl.name);
            let error = RunError::new(Some(Code::E0301), message);
            return Err(match const_sym(&self.program.dims, poly) {
                Some(s) => error.with_hint(format!(
                    "pass `--dim {}={size}` to run the program at the input's size",
                    self.name(s)
                )),
                None => error,
            });
        }
        Ok(())
    }

    /// The sizes of the shapes of named declarations, for the bound dims. A shape too large
    /// to allocate is an error here rather than an abort later.
    fn shapes<'a>(
        &self,
        decls: impl Iterator<Item = (&'a String, &'a Vec<Poly>)>,
    ) -> Result<Vec<Vec<usize>>, RunError> {
        let mut shapes = Vec::new();
        for (name, shape) in decls {
            let sizes = shape
                .iter()
                .map(|p| self.size(p))
                .collect::<Result<Vec<_>, _>>()?;
            let numel = sizes.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
            if numel.is_none_or(|n| n > isize::MAX as usize / size_of::<f32>()) {
                let message = format!("`{name}` of shape {sizes:?} is too large to allocate");
                return Err(RunError::new(Some(Code::E0305), message));
            }
            shapes.push(sizes);
        }
        Ok(shapes)
    }

    fn size(&self, p: &Poly) -> Result<usize, RunError> {
        let value = self.eval(p);
        value.and_then(|v| usize::try_from(v).ok()).ok_or_else(|| {
            let text = self.program.dims.display(p);
            let what = value.map_or("not a whole number".to_string(), |v| v.to_string());
            RunError::new(
                None,
                format!("the size `{text}` is {what} for the bound dims, not a size"),
            )
        })
    }

    /// Every dim's value: constants, bound free dims, and derived dims evaluated.
    fn all_values(&self) -> Vec<Option<i64>> {
        self.program
            .dims
            .iter()
            .map(|(s, info)| match &info.kind {
                DimKind::Derived(p) => self.eval(p),
                _ => self.values[s],
            })
            .collect()
    }
}

/// The input `decl` from `file`: E0302 when it is missing, E0301 when its dtype cannot be
/// read or its rank differs from the declaration's.
fn read_input(file: &TensorFile, decl: &InputDecl, dims: &DimTable) -> Result<Tensor, RunError> {
    let path = file.path().display();
    let entry = file
        .get(&decl.name)
        .ok_or_else(|| missing(file, &format!("input `{}`", decl.name), &decl.name))?;
    let Some(t) = entry.tensor else {
        let message = format!(
            "input `{}` in `{path}` has dtype {:?}, which attnc cannot read",
            decl.name, entry.dtype
        );
        return Err(RunError::new(Some(Code::E0301), message));
    };
    if t.shape.len() != decl.shape.len() {
        let message = format!(
            "input `{}` has shape {:?} in `{path}`, but is declared {} (rank {})",
            decl.name,
            t.shape,
            show(dims, &decl.shape),
            decl.shape.len()
        );
        return Err(RunError::new(Some(Code::E0301), message));
    }
    if decl.dtype == DType::I64 {
        exact_integers(decl, entry.dtype, &t, &path.to_string())?;
    }
    Ok(t)
}

/// The integers float32 holds exactly, which an int64 input is limited to (both backends
/// store it as float32): magnitudes below 2^24.
const EXACT_INTEGERS: f32 = 16_777_216.0;

/// E0301 unless an int64 input's file holds integers; E0306 for one beyond float32's
/// exact integers.
fn exact_integers(decl: &InputDecl, dtype: Dtype, t: &Tensor, path: &str) -> Result<(), RunError> {
    let integral = matches!(
        dtype,
        Dtype::I64
            | Dtype::I32
            | Dtype::I16
            | Dtype::I8
            | Dtype::U8
            | Dtype::U16
            | Dtype::U32
            | Dtype::U64
            | Dtype::BOOL
    );
    if !integral {
        let message = format!(
            "input `{}` in `{path}` has dtype {dtype:?}, but is declared int64",
            decl.name
        );
        return Err(RunError::new(Some(Code::E0301), message).with_hint("store it as I64 or I32"));
    }
    match t.data.iter().position(|v| v.abs() >= EXACT_INTEGERS) {
        None => Ok(()),
        Some(k) => {
            let message = format!(
                "input `{}` holds {} at element {k}, beyond the integers attnc computes exactly (below 2^24 in magnitude)",
                decl.name, t.data[k]
            );
            Err(RunError::new(Some(Code::E0306), message))
        }
    }
}

/// Every param from `file` under its key: E0302 when missing, E0303 when its dtype is not
/// one a param can have or its shape differs from the declaration's (`shapes`, one per
/// param).
pub fn read_params(
    program: &Program,
    file: &dyn Store,
    shapes: &[Vec<usize>],
) -> Result<Vec<Tensor>, RunError> {
    let path = file.describe();
    let mut tensors = Vec::new();
    for (decl, shape) in program.params.iter().zip(shapes) {
        let what = format!("weight `{}` of param `{}`", decl.key, decl.name);
        let t = match file.param(&decl.key)? {
            Param::Tensor(t) => t,
            Param::Missing => return Err(missing(file, &what, &decl.key)),
            Param::Unreadable { dtype, hint } => {
                let message = format!("{what} in {path} has dtype {dtype}, which a param cannot have");
                return Err(RunError::new(Some(Code::E0303), message).with_hint(hint));
            }
        };
        if t.shape != *shape {
            let declared = show(&program.dims, &decl.shape);
            let found = &t.shape;
            let message =
                format!("{what} has shape {found:?} in {path}, but is declared {declared} = {shape:?}");
            let error = RunError::new(Some(Code::E0303), message);
            return Err(match dim_hint(&program.dims, &decl.shape, found) {
                Some(hint) => error.with_hint(hint),
                None => error,
            });
        }
        tensors.push(t);
    }
    Ok(tensors)
}

/// The constant dim `p` is, if it is one (`D`, not `D / H` or a free dim).
fn const_sym(dims: &DimTable, p: &Poly) -> Option<Sym> {
    let &[s] = p.syms().as_slice() else {
        return None;
    };
    let constant = matches!(dims.info(s).kind, DimKind::Const(_));
    (constant && *p == Poly::sym(s)).then_some(s)
}

/// For a weight stored at other sizes than `declared`: the `--dim` that runs the program at
/// the weight's size, when the first axis that differs is a constant dim.
fn dim_hint(dims: &DimTable, declared: &[Poly], found: &[usize]) -> Option<String> {
    if declared.len() != found.len() {
        return None;
    }
    let (poly, size) = declared
        .iter()
        .zip(found)
        .find(|(p, &size)| dims.value(p) != Some(size as i64))?;
    let s = const_sym(dims, poly)?;
    Some(format!(
        "pass `--dim {}={size}` to run the program at the weight's size",
        dims.info(s).name
    ))
}

/// E0302 for `what` (stored under `key`) missing from `file`, with the nearest keys.
fn missing(file: &dyn Store, what: &str, key: &str) -> RunError {
    let message = format!("{what} is missing from {}", file.describe());
    let error = RunError::new(Some(Code::E0302), message);
    let near: Vec<String> = file
        .closest_keys(key, 3)
        .iter()
        .map(|k| format!("`{k}`"))
        .collect();
    match near.as_slice() {
        [] => error.with_hint(format!("add it: {} holds no tensors", file.describe())),
        _ => error.with_hint(format!("did you mean {}?", near.join(", "))),
    }
}

/// A declared shape as the spec prints it: `[B, N, D]`.
fn show(dims: &DimTable, shape: &[Poly]) -> String {
    let parts: Vec<String> = shape.iter().map(|p| dims.display(p)).collect();
    format!("[{}]", parts.join(", "))
}

/// Every dim the program mentions where a value is needed to run it: in declared shapes,
/// in node types and op arguments, and in asserts.
fn needed_syms(program: &Program) -> Vec<Sym> {
    let mut polys: Vec<&Poly> = Vec::new();
    polys.extend(program.params.iter().flat_map(|d| &d.shape));
    polys.extend(program.inputs.iter().flat_map(|d| &d.shape));
    polys.extend(program.asserts.iter().flat_map(|a| [&a.lhs, &a.rhs]));
    for node in &program.nodes {
        match &node.ty {
            Type::Tensor(t) => polys.extend(&t.shape),
            Type::Seq { item, len } => polys.extend(item.shape.iter().chain([len])),
        }
        match &node.op {
            Op::DimValue(p) | Op::Select { index: p, .. } => polys.push(p),
            Op::StepSlice { start, len, .. } => polys.extend([start, len]),
            Op::View(sizes) | Op::Reshape(sizes) | Op::Expand(sizes) => polys.extend(sizes),
            Op::Slice { start, end, .. } | Op::For { start, end, .. } => polys.extend([start, end]),
            _ => {}
        }
    }
    let mut syms: Vec<Sym> = polys.iter().flat_map(|p| p.syms()).collect();
    syms.sort_unstable();
    syms.dedup();
    syms
}

#[cfg(test)]
mod tests;
