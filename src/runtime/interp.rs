//! The reference interpreter: evaluates the checked IR node by node, with the ops of
//! [`super::ops`] on strided values. It is the ground truth the JIT is tested against.
//!
//! Every node's result is compared with the shape its type gives for the bound dims, so a
//! checker bug surfaces as an internal error at the node where it happens, not as a wrong
//! number far away.

use super::gather;
use super::ops;
use super::tensor::{numel, Strided, Tensor};
use super::{Bound, RunError};
use crate::dims::{Poly, Sym};
use crate::ir::{BinaryOp, DType, Node, Op, Program, UnaryOp, ValueId};

/// Runs `program` on `bound`; one contiguous tensor per output, in declaration order.
pub fn interpret(program: &Program, bound: &Bound) -> Result<Vec<(String, Tensor)>, RunError> {
    run(program, bound, None)
}

/// [`interpret`] with every float32 value the program computes (its inputs and params
/// included) moved by one ulp, up or down at random from `seed`: how far an output then
/// moves is how far a backend's own rounding (an `exp` 1 ulp away, a sum in another order)
/// may move it, which the fuzzers' tolerance needs where an output amplifies rounding
/// (`layer_norm` of two nearly equal values).
pub fn interpret_perturbed(
    program: &Program,
    bound: &Bound,
    seed: u64,
) -> Result<Vec<(String, Tensor)>, RunError> {
    run(program, bound, Some(seed | 1))
}

fn run(program: &Program, bound: &Bound, perturb: Option<u64>) -> Result<Vec<(String, Tensor)>, RunError> {
    let mut run = Interp {
        program,
        dims: bound.dims.clone(),
        values: vec![None; program.nodes.len()],
        params: bound.params.iter().cloned().map(Strided::from).collect(),
        inputs: bound.inputs.iter().cloned().map(Strided::from).collect(),
        perturb,
    };
    for &id in &program.body {
        run.eval(id)?;
    }
    program
        .outputs
        .iter()
        .map(|out| Ok((out.name.clone(), run.tensor(out.value)?.to_tensor())))
        .collect()
}

/// What [`Interp::eval_op`] found a node to be: its value, or an op the interpreter runs
/// itself.
enum Eval<'p> {
    Tensor(Strided),
    Loop {
        var: Sym,
        range: (&'p Poly, &'p Poly),
        body: &'p [ValueId],
        result: ValueId,
    },
    Gather,
    IndexCopy {
        axis: usize,
        starts: &'p [Poly],
        ends: &'p [Poly],
    },
}

/// A node's value: a tensor, or the items of a `for`.
#[derive(Clone)]
enum Value {
    Tensor(Strided),
    Seq(Vec<Strided>),
}

struct Interp<'p> {
    program: &'p Program,
    /// The value of every dim, loop variables included while their loop runs.
    dims: Vec<Option<i64>>,
    values: Vec<Option<Value>>,
    params: Vec<Strided>,
    inputs: Vec<Strided>,
    /// The state of the random moves of [`interpret_perturbed`], if it runs.
    perturb: Option<u64>,
}

impl<'p> Interp<'p> {
    fn eval(&mut self, id: ValueId) -> Result<(), RunError> {
        let node = self.program.node(id);
        let found = self
            .eval_op(id, node)
            .ok_or_else(|| internal(id, "its operands do not fit its op"))?;
        let value = match found {
            Eval::Tensor(value) => {
                let expected = self.shape(id)?;
                if value.shape != expected {
                    let what = format!(
                        "it computed shape {:?} where its type says {expected:?}",
                        value.shape
                    );
                    return Err(internal(id, &what));
                }
                match (&mut self.perturb, self.program.tensor_type(id).dtype) {
                    (Some(state), DType::F32) => Value::Tensor(perturbed(&value, state)),
                    _ => Value::Tensor(value),
                }
            }
            Eval::Loop {
                var,
                range,
                body,
                result,
            } => Value::Seq(self.run_loop(var, range, body, result)?),
            Eval::Gather => Value::Tensor(self.gather(id)?),
            Eval::IndexCopy { axis, starts, ends } => {
                let window = self.sizes(starts).zip(self.sizes(ends));
                let window = window.ok_or_else(|| internal(id, "its window has no value"))?;
                Value::Tensor(self.index_copy(id, axis, window)?)
            }
        };
        self.values[id] = Some(value);
        Ok(())
    }

    /// The items of `for var in start..end { body }`: `body` evaluated once per value of
    /// `var`, each time yielding `result`.
    fn run_loop(
        &mut self,
        var: Sym,
        (start, end): (&Poly, &Poly),
        body: &'p [ValueId],
        result: ValueId,
    ) -> Result<Vec<Strided>, RunError> {
        let range = self.int(start).zip(self.int(end));
        let (start, end) = range.ok_or_else(|| internal(result, "its loop range has no value"))?;
        let saved = *self
            .dims
            .get(var)
            .ok_or_else(|| internal(result, "its loop variable is not a dim"))?;
        let mut items = Vec::new();
        for index in start..end {
            self.dims[var] = Some(index);
            for &id in body {
                self.eval(id)?;
            }
            items.push(self.tensor(result)?.clone());
        }
        self.dims[var] = saved;
        Ok(items)
    }

    /// `table[ids]`: one row of `table` per id, each checked to be in range.
    fn gather(&self, id: ValueId) -> Result<Strided, RunError> {
        let node = self.program.node(id);
        let (table, ids) = (self.tensor(node.args[0])?, self.tensor(node.args[1])?);
        let rows = *table
            .shape
            .first()
            .ok_or_else(|| internal(id, "its table is a scalar"))?;
        let mut data = Vec::new();
        for (k, value) in ids.to_vec().into_iter().enumerate() {
            let Some(row) = gather::row(value, rows) else {
                return Err(gather::out_of_range(self.program, id, k, &ids.shape, value, rows));
            };
            let picked = table
                .select(0, row)
                .ok_or_else(|| internal(id, "a row out of its table"))?;
            data.extend(picked.to_vec());
        }
        let shape = [ids.shape.as_slice(), &table.shape[1..]].concat();
        Ok(Tensor::new(shape, data).into())
    }

    /// `x` with the slices the index names along `axis` of the window `starts..ends`
    /// replaced by those of the source, each position checked to be in the window.
    fn index_copy(
        &self,
        id: ValueId,
        axis: usize,
        (starts, ends): (Vec<usize>, Vec<usize>),
    ) -> Result<Strided, RunError> {
        let node = self.program.node(id);
        let x = self.tensor(node.args[0])?;
        let index = self.tensor(node.args[1])?.to_vec();
        let source = self.tensor(node.args[2])?;
        let size = ends[axis].saturating_sub(starts[axis]);
        let mut rows = Vec::with_capacity(index.len());
        for (at, &value) in index.iter().enumerate() {
            let row = gather::row(value, size);
            rows.push(row.ok_or_else(|| gather::copy_out_of_range(self.program, id, at, value, size))?);
        }
        let mut data = x.to_vec();
        let strides = super::tensor::row_major_strides(&x.shape);
        let mut coords = vec![0usize; source.rank()];
        for value in source.to_vec() {
            let flat: usize = (0..coords.len())
                .map(|a| {
                    let c = if a == axis { rows[coords[a]] } else { coords[a] };
                    (starts[a] + c) * strides[a]
                })
                .sum();
            data[flat] = value;
            // The next coordinates of `source` in row-major order.
            for a in (0..coords.len()).rev() {
                coords[a] += 1;
                if coords[a] < source.shape[a] {
                    break;
                }
                coords[a] = 0;
            }
        }
        Ok(Tensor::new(x.shape.clone(), data).into())
    }

    /// The value of every op but a loop, a gather and an index copy, which need the
    /// interpreter itself or can fail with a run-time error: for those, what to do. `None`
    /// when the operands do not fit. One match over every op, so that a new op is a
    /// compile error here.
    fn eval_op(&self, id: ValueId, node: &'p Node) -> Option<Eval<'p>> {
        let expected = || self.shape(id).ok();
        let arg = |i: usize| {
            self.value(*node.args.get(i)?).and_then(|v| match v {
                Value::Tensor(t) => Some(t),
                Value::Seq(_) => None,
            })
        };
        // An operand that may be absent: `Some(None)` where it is.
        let optional = |i: usize| match node.args.get(i) {
            None => Some(None),
            Some(_) => arg(i).map(Some),
        };
        let items = || match self.value(*node.args.first()?)? {
            Value::Seq(items) => Some(items),
            Value::Tensor(_) => None,
        };
        let value = match &node.op {
            Op::For {
                var,
                start,
                end,
                body,
                result,
            } => {
                return Some(Eval::Loop {
                    var: *var,
                    range: (start, end),
                    body,
                    result: *result,
                })
            }
            Op::Gather => return Some(Eval::Gather),
            Op::IndexCopy { axis, starts, ends } => {
                return Some(Eval::IndexCopy {
                    axis: *axis,
                    starts,
                    ends,
                })
            }
            Op::Param(i) => self.params.get(*i).cloned(),
            Op::Input(i) => self.inputs.get(*i).cloned(),
            Op::Literal(v) => Some(scalar(*v as f32)),
            Op::DimValue(p) => Some(scalar(self.int(p)? as f32)),
            Op::Linear => ops::linear(arg(0)?, arg(1)?, optional(2)?),
            Op::MatMul => ops::matmul(arg(0)?, arg(1)?),
            Op::Transpose(a, b) => arg(0)?.transpose(*a, *b),
            Op::Permute(perm) => arg(0)?.permute(perm),
            // The checker proved the view legal, so its values are those of a reshape.
            Op::View(sizes) | Op::Reshape(sizes) => arg(0)?.reshape(self.sizes(sizes)?),
            Op::Contiguous => Some(arg(0)?.contiguous()),
            Op::Expand(sizes) => arg(0)?.expand(&self.sizes(sizes)?),
            Op::Unsqueeze(axis) => arg(0)?.unsqueeze(*axis),
            Op::Squeeze(axis) => arg(0)?.squeeze(*axis),
            Op::Softmax(axis) => ops::softmax(arg(0)?, *axis),
            Op::Where => ops::masked_fill(arg(2)?, arg(0)?, arg(1)?),
            Op::Tri { upper, diagonal } => ops::tri(arg(0)?, *upper, *diagonal),
            Op::Fill(v) => {
                let expected = expected()?;
                Some(Tensor::new(expected.clone(), vec![*v as f32; numel(&expected)]).into())
            }
            Op::Arange { start, step } => {
                let (start, step, expected) = (self.int(start)?, self.int(step)?, expected()?);
                let values = (0..numel(&expected)).map(|i| (start as f64 + i as f64 * step as f64) as f32);
                Some(Tensor::new(expected, values.collect()).into())
            }
            Op::Reduce { op, axes, keepdim } => ops::reduce(arg(0)?, *op, axes, *keepdim),
            Op::MaskedFill => ops::masked_fill(arg(0)?, arg(1)?, arg(2)?),
            Op::Sdpa { causal, gqa } => {
                let scale = arg(3)?.to_vec().first().copied()?;
                let mask = match node.args.len() {
                    4 => None,
                    _ => Some((
                        arg(4)?,
                        self.program.tensor_type(node.args[4]).dtype == DType::Bool,
                    )),
                };
                ops::sdpa([arg(0)?, arg(1)?, arg(2)?], scale, mask, *causal, *gqa)
            }
            Op::Unary(op) => Some(unary(*op, arg(0)?)),
            Op::Binary(op) => binary(*op, arg(0)?, arg(1)?),
            Op::Compare(op) => ops::zip_with(arg(0)?, arg(1)?, |a, b| {
                f32::from(u8::from(ops::holds(*op, a, b)))
            }),
            Op::Slice { axis, start, end } => arg(0)?.slice(*axis, self.size(start)?, self.size(end)?),
            Op::StepSlice {
                axis,
                start,
                step,
                len,
            } => {
                let step = usize::try_from(*step).ok()?;
                arg(0)?.step(*axis, self.size(start)?, step, self.size(len)?)
            }
            Op::Select { axis, index } => arg(0)?.select(*axis, self.size(index)?),
            Op::CatLoop(_) | Op::Stack(_) if items()?.is_empty() => {
                let expected = expected()?;
                Some(Tensor::new(expected.clone(), vec![0.0; numel(&expected)]).into())
            }
            Op::CatLoop(axis) => ops::concat(items()?, *axis),
            Op::Stack(axis) => ops::stack(items()?, *axis),
            Op::Gemm {
                trans_a,
                trans_b,
                alpha,
            } => ops::batched_gemm(arg(0)?, arg(1)?, (*trans_a, *trans_b), optional(2)?, *alpha),
            Op::MaskedSoftmax { scale, fill } => ops::masked_softmax(arg(0)?, optional(1)?, *scale, *fill),
            Op::Attention { scale, fill } => {
                ops::attention([arg(0)?, arg(1)?, arg(2)?], optional(3)?, *scale, *fill)
            }
            Op::ScoredAttention { scale, fill } => {
                ops::scored_attention([arg(0)?, arg(1)?], optional(2)?, *scale, *fill)
            }
            Op::Cat(axis) => {
                let parts: Option<Vec<Strided>> = (0..node.args.len()).map(|i| arg(i).cloned()).collect();
                ops::concat(&parts?, *axis)
            }
        };
        value.map(Eval::Tensor)
    }

    fn value(&self, id: ValueId) -> Option<&Value> {
        self.values.get(id)?.as_ref()
    }

    fn tensor(&self, id: ValueId) -> Result<&Strided, RunError> {
        match self.value(id) {
            Some(Value::Tensor(t)) => Ok(t),
            _ => Err(internal(id, "it is used before it has a tensor value")),
        }
    }

    /// The shape the node's type gives for the current dims.
    fn shape(&self, id: ValueId) -> Result<Vec<usize>, RunError> {
        let shape = &self.program.tensor_type(id).shape;
        self.sizes(shape)
            .ok_or_else(|| internal(id, "its type's shape has no value for the bound dims"))
    }

    fn sizes(&self, polys: &[Poly]) -> Option<Vec<usize>> {
        polys.iter().map(|p| self.size(p)).collect()
    }

    fn size(&self, p: &Poly) -> Option<usize> {
        usize::try_from(self.int(p)?).ok()
    }

    fn int(&self, p: &Poly) -> Option<i64> {
        self.program
            .dims
            .eval(p, &|s| self.dims.get(s).copied().flatten())
    }
}

fn scalar(v: f32) -> Strided {
    Tensor::scalar(v).into()
}

/// A primitive's meaning from the op table, one element at a time.
fn unary(op: UnaryOp, x: &Strided) -> Strided {
    ops::map(x, |v| op.eval(v))
}

fn binary(op: BinaryOp, a: &Strided, b: &Strided) -> Option<Strided> {
    ops::zip_with(a, b, |x, y| op.eval(x, y))
}

/// A program the interpreter cannot run although the checker accepted it: a bug.
/// `value`'s elements, each moved by one ulp up or down as the xorshift `state` draws;
/// zeros, infinities and NaN stay (rounding makes neither from a finite nonzero value, and
/// an infinity moved would be a finite value).
fn perturbed(value: &Strided, state: &mut u64) -> Strided {
    let mut t = value.to_tensor();
    for x in t.data.iter_mut() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let moved = match *state & 1 {
            0 => x.next_up(),
            _ => x.next_down(),
        };
        if *x != 0.0 && moved.is_finite() {
            *x = moved;
        }
    }
    Strided::from(t)
}

fn internal(id: ValueId, what: &str) -> RunError {
    RunError::new(
        None,
        format!("internal error: node {id} cannot be evaluated: {what}"),
    )
    .with_hint("report this: the checker accepted a program the interpreter cannot run")
}

#[cfg(test)]
mod tests;
