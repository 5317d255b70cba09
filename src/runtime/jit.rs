//! The native backend: a program lowered and compiled for one set of dims (an
//! [`Executable`]), run on a rayon pool; and a [`Cache`] of executables by dims, so that a
//! program is compiled once per shape.

use super::native::{self, Derived, Memory};
use super::{budget, Bound, RunError, Tensor};
use crate::codegen::{Compiled, Jit, Shims};
use crate::ir::Program;
use crate::kernel::{BufferKind, KernelOp, Plan};
use crate::lower;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

/// The derived buffers of an executable for one set of weights: what its prologue computed
/// (weights in the layout its GEMMs prefer, concatenations of weights).
pub struct Prepared {
    derived: Vec<f32>,
}

impl Prepared {
    /// The memory it holds.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&self.derived[..])
    }
}

/// What a plan's prologue computes, whatever the plan numbers its buffers: each prologue
/// kernel as [`KernelOp::code_key`] leaves it (its arithmetic, sizes and strides), with the
/// buffer (kind and length) and offset of each of its operands in [`KernelOp::operands`]'
/// order, and the length of the prepared memory. Two plans of one program whose keys are
/// equal run the same kernels on the same params into the same places of prepared memory,
/// so, a task's arithmetic not depending on its thread, they prepare the same bits: one
/// [`Prepared`] serves both.
#[derive(Clone, Debug, PartialEq)]
pub struct PrologueKey {
    derived_len: usize,
    kernels: Vec<(KernelOp, Vec<Place>)>,
}

/// Where an operand of a prologue kernel lies: its buffer's kind and length, and its offset.
type Place = (Option<(BufferKind, usize)>, usize);

/// A program compiled for one binding of its dims.
///
/// Its plan is private and set once, by the constructors, after [`Plan::validate`] passed:
/// the kernels' memory safety rests on that proof, so nothing may change the plan after it.
pub struct Executable {
    plan: Plan,
    compiled: Compiled,
    /// Milliseconds spent lowering and generating code.
    pub compile_ms: f64,
    /// Where `compile_ms` went.
    pub phases: CompilePhases,
    arena: Mutex<Vec<f32>>,
    /// Scratch per pool thread (grown to the pool's size on first use), plus one.
    scratch: Mutex<Vec<Mutex<Vec<f32>>>>,
}

/// An executable's compile time by phase, in ms.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompilePhases {
    /// The plan: lowering, with the memory budget checked before and after.
    pub lower: f64,
    /// The plan's validation (the proof its kernels stay in bounds).
    pub validate: f64,
    /// Cranelift: every distinct function translated, compiled and finalized.
    pub cranelift: f64,
}

fn internal(what: impl std::fmt::Display) -> RunError {
    RunError::new(None, format!("internal error in the native backend: {what}"))
        .with_hint("report this, and run with `--backend interp` meanwhile")
}

impl Executable {
    /// Lowers and compiles `program` for the dim values `dims` (as in [`Bound::dims`]),
    /// within the machine's physical memory.
    pub fn compile(program: &Program, dims: &[Option<i64>]) -> Result<Executable, RunError> {
        Executable::compile_within(program, dims, budget::physical_memory())
    }

    /// As [`Executable::compile`], with a memory budget in bytes: E0305 when the program's
    /// tensors or its plan do not fit, before anything is allocated.
    pub fn compile_within(
        program: &Program,
        dims: &[Option<i64>],
        budget: u64,
    ) -> Result<Executable, RunError> {
        let start = Instant::now();
        let plan = plan(program, dims, budget)?;
        let lower = start.elapsed().as_secs_f64() * 1e3;
        let mut exe = Executable::from_plan_since(plan, start, budget, shims())?;
        exe.phases.lower = lower;
        Ok(exe)
    }

    /// Compiles a plan made by hand (kernel tests and benchmarks). Its params and inputs
    /// are the `Bound`'s by index, as for a program.
    pub fn from_plan(plan: Plan) -> Result<Executable, RunError> {
        Executable::from_plan_with(plan, shims())
    }

    /// [`Executable::from_plan`] with its code calling `shims`: tests compare the
    /// attention kernel's softmax in the native shim with the generated code's
    /// (`Shims::softmax` set and `None`).
    pub fn from_plan_with(plan: Plan, shims: Shims) -> Result<Executable, RunError> {
        Executable::from_plan_since(plan, Instant::now(), budget::physical_memory(), shims)
    }

    /// The validated plan the executable runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Every executable's plan is validated here, once: the runtime calls kernels of valid
    /// plans only.
    fn from_plan_since(
        plan: Plan,
        start: Instant,
        budget: u64,
        shims: Shims,
    ) -> Result<Executable, RunError> {
        let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
        let validating = Instant::now();
        budget::plan(&plan, budget)?;
        plan.validate().map_err(internal)?;
        let validate = ms(validating);
        let generating = Instant::now();
        let compiled = Jit::new(shims)
            .and_then(|jit| jit.compile(&plan))
            .map_err(internal)?;
        let phases = CompilePhases {
            lower: 0.0,
            validate,
            cranelift: ms(generating),
        };
        let compile_ms = ms(start);
        Ok(Executable {
            phases,
            arena: Mutex::new(vec![0.0; plan.arena_len + native::HUGE_PAGE]),
            scratch: Mutex::new(Vec::new()),
            plan,
            compiled,
            compile_ms,
        })
    }

    /// What the prologue computes ([`PrologueKey`]): executables with equal keys may share
    /// one [`Prepared`].
    pub fn prologue_key(&self) -> PrologueKey {
        let buffers = &self.plan.buffers;
        let kernels = self.plan.prologue.iter().map(|k| {
            let operands = k.op.operands().into_iter().map(|(o, _, _)| {
                let buffer = buffers.get(o.buf).map(|b| (b.kind.clone(), b.len));
                (buffer, o.offset)
            });
            (k.op.code_key(), operands.collect())
        });
        PrologueKey {
            derived_len: self.plan.derived_len,
            kernels: kernels.collect(),
        }
    }

    /// Distinct functions compiled for the plan's kernels.
    pub fn functions(&self) -> usize {
        self.compiled.functions
    }

    /// Each distinct function's kind and the ms Cranelift took for it.
    pub fn function_ms(&self) -> &[(&'static str, f64)] {
        &self.compiled.function_ms
    }

    /// Runs the prologue on `params` (the weights, as in [`Bound::params`]): do this once
    /// per set of weights, then [`Executable::run_prepared`] as often as needed.
    pub fn prepare(&self, params: &[Tensor], pool: &rayon::ThreadPool) -> Result<Prepared, RunError> {
        let mut prepared = Prepared {
            derived: vec![0.0; self.plan.derived_len],
        };
        let derived = Derived::Write(&mut prepared.derived);
        self.execute(true, params, &[], derived, pool, &mut [], None)?;
        Ok(prepared)
    }

    /// Runs on `bound` with `pool`'s threads, the prologue included; one contiguous tensor
    /// per output, in declaration order.
    pub fn run(&self, bound: &Bound, pool: &rayon::ThreadPool) -> Result<Vec<(String, Tensor)>, RunError> {
        let prepared = self.prepare(&bound.params, pool)?;
        let mut outputs = Vec::new();
        self.run_prepared(bound, &prepared, pool, &mut outputs, None)?;
        Ok(outputs)
    }

    /// Runs the main kernels on `bound`, with `prepared` made by [`Executable::prepare`]
    /// from the same `bound.params`. Reuses the tensors of `outputs` when they have the
    /// right shapes (what a benchmark loop or a server does). A state starts from its
    /// input in `bound` when its output's tensor is new, and goes on from what the last run
    /// left in it when the tensor is reused (as a `Function`'s states do). With `times` (one
    /// per main kernel), adds each kernel's wall time in seconds to it.
    pub fn run_prepared(
        &self,
        bound: &Bound,
        prepared: &Prepared,
        pool: &rayon::ThreadPool,
        outputs: &mut Vec<(String, Tensor)>,
        times: Option<&mut [f64]>,
    ) -> Result<(), RunError> {
        let fresh = self.fit_outputs(outputs);
        // A new state's tensor starts from its input: one copy, on a first run only.
        for b in &self.plan.buffers {
            if let BufferKind::State { input, output } = b.kind {
                if !fresh[output] {
                    continue;
                }
                let from = bound
                    .inputs
                    .get(input)
                    .ok_or_else(|| internal("a state without its input"))?;
                outputs[output].1.data.copy_from_slice(&from.data);
            }
        }
        let inputs: Vec<&[f32]> = bound.inputs.iter().map(|t| t.data.as_slice()).collect();
        self.run_borrowed(&bound.params, &inputs, prepared, pool, outputs, times)
    }

    /// As [`Executable::run_prepared`], on inputs borrowed from their owner (row-major, in
    /// declaration order) rather than copied into tensors: what a caller holding its
    /// inputs in memory, such as the Python module, runs. A buffer whose length differs
    /// from the plan's is an error, before any kernel runs.
    pub fn run_borrowed(
        &self,
        params: &[Tensor],
        inputs: &[&[f32]],
        prepared: &Prepared,
        pool: &rayon::ThreadPool,
        outputs: &mut Vec<(String, Tensor)>,
        times: Option<&mut [f64]>,
    ) -> Result<(), RunError> {
        self.fit_outputs(outputs);
        let derived = Derived::Read(&prepared.derived);
        self.execute(false, params, inputs, derived, pool, outputs, times)
    }

    /// Makes `outputs` one tensor of the right shape per output, keeping each that
    /// already fits (a state's value among them), zeros for the others; whether each is
    /// new.
    fn fit_outputs(&self, outputs: &mut Vec<(String, Tensor)>) -> Vec<bool> {
        let mut given = std::mem::take(outputs).into_iter();
        let mut fresh = Vec::new();
        for (name, _, shape) in &self.plan.outputs {
            let (t, new) = match given.next() {
                Some((n, t)) if n == *name && t.shape == *shape => (t, false),
                _ => (
                    Tensor::new(shape.clone(), vec![0.0; shape.iter().product()]),
                    true,
                ),
            };
            fresh.push(new);
            outputs.push((name.clone(), t));
        }
        fresh
    }

    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        prologue: bool,
        params: &[Tensor],
        inputs: &[&[f32]],
        derived: Derived,
        pool: &rayon::ThreadPool,
        outputs: &mut [(String, Tensor)],
        times: Option<&mut [f64]>,
    ) -> Result<(), RunError> {
        let mut arena = self.arena.lock().unwrap_or_else(|e| e.into_inner());
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let need = self.plan.scratch_len().max(1);
        let slots = pool.current_num_threads() + 1;
        if scratch.len() < slots {
            scratch.resize_with(slots, || Mutex::new(Vec::new()));
        }
        for s in scratch.iter() {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            if s.len() < need {
                s.resize(need, 0.0);
            }
        }
        let mem = Memory {
            params: params.iter().map(|t| t.data.as_slice()).collect(),
            inputs: inputs.to_vec(),
            derived,
            arena: native::huge_pages(arena.as_mut_slice()),
            outputs: outputs.iter_mut().map(|(_, t)| t.data.as_mut_slice()).collect(),
            scratch: &scratch,
        };
        let code = if prologue {
            &self.compiled.prologue
        } else {
            &self.compiled.code
        };
        native::execute(&self.plan, prologue, code, mem, pool, times).map_err(|stop| match stop {
            native::Stop::Internal(what) => internal(what),
            native::Stop::Value(error) => error,
        })
    }
}

// SAFETY: the executable's raw parts are the code pointers of `compiled`, which point into
// finalized machine code that nothing writes after `Jit::compile` returned, and the JIT
// module owning that code, which only `Drop` touches (through `&mut self`, so never while
// another thread holds a reference). Everything a run mutates, the arena and the scratch,
// is behind a `Mutex`. So the executable may move to another thread and be run from
// several at once, as the Python module's compiled functions are.
unsafe impl Send for Executable {}
// SAFETY: as for `Send` above: a shared executable is read only, but for its mutexes.
unsafe impl Sync for Executable {}

impl Drop for Executable {
    fn drop(&mut self) {
        native::release(&mut self.compiled);
    }
}

/// Executables of one program by the values of its dims: each shape compiles once.
pub struct Cache<'p> {
    program: &'p Program,
    compiled: HashMap<Vec<Option<i64>>, Rc<Executable>>,
}

impl<'p> Cache<'p> {
    pub fn new(program: &'p Program) -> Cache<'p> {
        Cache {
            program,
            compiled: HashMap::new(),
        }
    }

    /// The executable for `dims`, compiled on first use.
    pub fn get(&mut self, dims: &[Option<i64>]) -> Result<Rc<Executable>, RunError> {
        if let Some(e) = self.compiled.get(dims) {
            return Ok(e.clone());
        }
        let e = Rc::new(Executable::compile(self.program, dims)?);
        self.compiled.insert(dims.to_vec(), e.clone());
        Ok(e)
    }

    /// How many shapes have been compiled.
    pub fn len(&self) -> usize {
        self.compiled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }
}

/// The kernel plan of `program` for `dims`: E0305 when its tensors do not fit `budget`
/// bytes (checked before lowering, so no size wraps on the way, and after).
pub fn plan(program: &Program, dims: &[Option<i64>], budget: u64) -> Result<Plan, RunError> {
    budget::program(program, dims, budget)?;
    let plan = lower::lower(program, dims).map_err(internal)?;
    budget::plan(&plan, budget)?;
    Ok(plan)
}

/// The addresses of the GEMM shims JIT code calls, for [`Jit::new`].
pub fn shims() -> Shims {
    Shims {
        sgemm: native::attnc_sgemm as *const u8,
        packed: native::attnc_sgemm_packed as *const u8,
        softmax: native::softmax_shim(),
        epilogue: native::epilogue_shim(),
    }
}

/// A pool of `threads` workers (at least one).
pub fn pool(threads: usize) -> Result<rayon::ThreadPool, RunError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| RunError::new(None, format!("cannot start {threads} threads: {e}")))
}
