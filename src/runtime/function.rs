//! A program compiled once and called many times on tensors held in memory: the entry
//! point of a caller that keeps what it compiled, such as the Python module.
//!
//! A [`Function`] reads (or draws) its weights once, when it is made; each call binds the
//! free dims from its inputs' shapes, compiles the program for those sizes on first use
//! and keeps the executable, with its prologue already run on the weights. The weights are
//! prepared (laid out as the GEMMs prefer) once per model, not once per shape: a plan
//! whose prologue computes what an earlier plan's did ([`PrologueKey`]) shares its
//! prepared memory, so a decode plan after a prefill plan prepares nothing. Inputs are
//! borrowed, never copied; outputs are fresh tensors the caller owns. A function is
//! `Send` and `Sync`: calls from several threads at once are safe, and a shape is compiled
//! once however many threads ask for it.
//!
//! A shape the caller will not call again soon (generation's prompt) is called with
//! [`Function::call_once`]: its plan is not kept, and the weights its prologue prepared are
//! held aside only until the next plan compiles, which shares them where its prologue
//! computes the same thing and frees them before preparing its own otherwise. So a
//! prompt's plan laying the weights out for products of many rows and the decode plan's
//! packed panels never sit in memory together.
//!
//! A program with `state`s keeps each state's tensor between calls: zeros at the first
//! call (of the size that call's dims give), then what the last call left in it. The
//! native backend writes a call's new slices into that tensor in place (it is the output
//! of the state's last version, donated), so no call copies a state. Calls on a function
//! with states are serialized; [`Function::reset_state`] starts again from zeros.

use super::files::Store;
use super::hoist::{hoist, Hoisted};
use super::jit::{pool, Executable, Prepared, PrologueKey};
use super::{bind, budget, defaults, Bound, RunError, Tensor};
use crate::ir::Program;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where a function's weights come from.
pub enum Weights {
    /// Drawn as `nn.Linear` initializes them, from this seed (no `--weights`).
    Drawn { seed: u64 },
    /// A safetensors or GGUF file (told apart by GGUF's magic bytes).
    File(PathBuf),
    /// Named tensors in memory, or any other [`Store`].
    Store(Box<dyn Store + Send>),
}

/// Which backend runs a function's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Native code, compiled for each set of sizes.
    Jit,
    /// The reference interpreter (inputs are copied into its tensors).
    Interp,
}

/// How a function runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub backend: Backend,
    /// Worker threads of the native backend (default: one per core).
    pub threads: Option<usize>,
    /// The memory budget in bytes (default: the machine's physical memory).
    pub max_memory: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            backend: Backend::Jit,
            threads: None,
            max_memory: None,
        }
    }
}

/// One input of a call: a row-major buffer and its shape, borrowed from the caller.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub shape: &'a [usize],
    pub data: &'a [f32],
}

/// What was compiled for one set of sizes, for a caller to show (`f.plans` in Python).
#[derive(Clone, Debug, PartialEq)]
pub struct PlanInfo {
    /// Every named dim's value, in declaration order.
    pub sizes: Vec<(String, i64)>,
    /// Milliseconds spent optimizing, lowering, compiling and running the prologue (when
    /// it ran: see `prepared`).
    pub compile_ms: f64,
    /// The plan's kernels, prologue included.
    pub kernels: usize,
    /// Whether the plan ran its prologue: `false` when it shares the weights an earlier
    /// plan prepared, its prologue computing the same thing.
    pub prepared: bool,
}

/// An executable with its prologue run on the function's weights.
struct Ready {
    /// The input shapes it was compiled for: they determine every dim (free dims are bound
    /// from them, and checked against them), so a call with these shapes needs no binding.
    shapes: Vec<Vec<usize>>,
    exe: Executable,
    /// The weights as its prologue lays them out, shared with every plan of the function
    /// whose prologue has the same key.
    prepared: Arc<Prepared>,
    prologue: PrologueKey,
}

/// A checked program with its weights, compiled per set of sizes on first use.
pub struct Function {
    program: Program,
    params: Vec<Tensor>,
    /// The program the native backend compiles: its gathers by input ids done on the host.
    hoisted: Option<Hoisted>,
    options: Options,
    budget: u64,
    pool: rayon::ThreadPool,
    /// What was compiled; the lock is held while a new shape compiles, so that it compiles
    /// once.
    plans: Mutex<Plans>,
    /// Each state's tensor, in declaration order; empty before the first call and after a
    /// reset. Its lock serializes the calls of a function with states.
    states: Mutex<Vec<Tensor>>,
}

/// The values of every dim, as in [`Bound::dims`].
type Dims = Vec<Option<i64>>;

/// A function's plans.
#[derive(Default)]
struct Plans {
    /// The plans kept, by the values of every dim, oldest first. Shapes and dims determine
    /// each other, so neither repeats.
    kept: Vec<(Dims, Arc<Ready>)>,
    /// The weights the last plan not kept prepared ([`Function::call_once`]), until the
    /// next plan compiles.
    spare: Option<(PrologueKey, Arc<Prepared>)>,
    /// Every plan compiled, kept or not, oldest first.
    compiled: Vec<PlanInfo>,
}

/// Whether a call keeps the plan it compiles.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Plan,
    Once,
}

impl Function {
    /// Reads or draws the weights of `program` (which must have no errors): E0302, E0303
    /// and E0304 here, as `attnc run` reports them, rather than at the first call.
    pub fn new(program: Program, weights: Weights, options: Options) -> Result<Function, RunError> {
        let shapes = bind::param_shapes(&program)?;
        let params = match weights {
            Weights::Drawn { seed } => defaults::params(&program, &shapes, seed),
            Weights::File(path) => {
                let file = super::weights::WeightFile::open(&path)?;
                bind::read_params(&program, &file, &shapes)?
            }
            Weights::Store(store) => bind::read_params(&program, store.as_ref(), &shapes)?,
        };
        let threads = options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let hoisted = match options.backend {
            Backend::Jit => Some(hoist(&program)?),
            Backend::Interp => None,
        };
        Ok(Function {
            hoisted,
            budget: options.max_memory.unwrap_or_else(budget::physical_memory),
            pool: pool(threads)?,
            program,
            params,
            options,
            plans: Mutex::new(Plans::default()),
            states: Mutex::new(Vec::new()),
        })
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Each param's weight under its key, as read: enough, with the source and the dims,
    /// to make the function again elsewhere (the Python module's pickling).
    pub fn weights(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.program
            .params
            .iter()
            .map(|d| d.key.as_str())
            .zip(&self.params)
    }

    /// Runs the function on `inputs`, one per declared input in order, states left out
    /// (the function holds them): E0301, E0304, E0209 and E0305 as `attnc run` reports
    /// them. One contiguous tensor per output, in declaration order, states left out (see
    /// [`Function::state`]).
    pub fn call(&self, inputs: &[Input]) -> Result<Vec<(String, Tensor)>, RunError> {
        self.call_keeping(inputs, Keep::Plan)
    }

    /// [`Function::call`] for a shape the caller will not call again soon: a plan compiled
    /// for it is dropped after the call, and its prepared weights go when the next plan
    /// compiles, unless that plan shares them (see the module's documentation). A shape
    /// already kept runs its kept plan.
    pub fn call_once(&self, inputs: &[Input]) -> Result<Vec<(String, Tensor)>, RunError> {
        self.call_keeping(inputs, Keep::Once)
    }

    fn call_keeping(&self, inputs: &[Input], keep: Keep) -> Result<Vec<(String, Tensor)>, RunError> {
        let declared = self.program.inputs.iter().filter(|d| !d.state);
        if inputs.len() != declared.clone().count() {
            let message = format!(
                "the program takes {} inputs, {} were given",
                declared.count(),
                inputs.len()
            );
            return Err(RunError::new(None, message));
        }
        for (decl, input) in declared.zip(inputs) {
            let numel = input.shape.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
            if numel != Some(input.data.len()) {
                let message = format!(
                    "input `{}` has shape {:?} but {} elements",
                    decl.name,
                    input.shape,
                    input.data.len()
                );
                return Err(RunError::new(None, message));
            }
        }
        if !self.has_state() {
            return self.run(inputs, &mut Vec::new(), keep);
        }
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if states.is_empty() {
            *states = self.zero_states(inputs)?;
        }
        self.run(inputs, &mut states, keep)
    }

    /// Whether the program declares a `state`.
    pub fn has_state(&self) -> bool {
        self.program.inputs.iter().any(|d| d.state)
    }

    /// The value a state holds now (after the last call), by name; `None` for a name that
    /// is no state, or before the first call (zeros then).
    pub fn state(&self, name: &str) -> Option<Tensor> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let index = self
            .program
            .inputs
            .iter()
            .filter(|d| d.state)
            .position(|d| d.name == name)?;
        states.get(index).cloned()
    }

    /// Starts every state again from zeros at the next call (whose dims may then differ).
    pub fn reset_state(&self) {
        self.states.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// One call on `inputs` (states left out) and the states in `states`, which the call
    /// updates.
    fn run(
        &self,
        inputs: &[Input],
        states: &mut [Tensor],
        keep: Keep,
    ) -> Result<Vec<(String, Tensor)>, RunError> {
        if self.options.backend == Backend::Interp {
            let all = self.with_states(inputs, states);
            let shapes: Vec<&[usize]> = all.iter().map(|i| i.shape).collect();
            let dims = bind::bind_shapes(&self.program, &shapes, self.budget)?;
            let mut outputs = self.interpret(&all, dims)?;
            self.keep_states(&mut outputs, states);
            return Ok(outputs);
        }
        let all = self.with_states(inputs, states);
        let ready = self.ready(&all, keep)?;
        let gathered = self.gather(&all)?;
        drop(all);
        // A state's storage is the tensor of its output, not its input.
        let mut given = inputs.iter();
        let mut data: Vec<&[f32]> = self
            .program
            .inputs
            .iter()
            .map(|d| match d.state {
                true => &[][..],
                false => given.next().map_or(&[][..], |i| i.data),
            })
            .collect();
        data.extend(gathered.iter().map(|t| &t.data[..]));
        let mut held = states.iter_mut();
        let mut outputs: Vec<(String, Tensor)> = Vec::new();
        for o in &self.program.outputs {
            let t = match o.state.and_then(|_| held.next()) {
                Some(slot) => std::mem::replace(slot, Tensor::scalar(0.0)),
                None => Tensor::scalar(0.0),
            };
            outputs.push((o.name.clone(), t));
        }
        let run = ready.exe.run_borrowed(
            &self.params,
            &data,
            &ready.prepared,
            &self.pool,
            &mut outputs,
            None,
        );
        // The states go back to the function whatever happened.
        self.keep_states(&mut outputs, states);
        run.map(|()| outputs)
    }

    /// Moves the states' outputs out of `outputs` into `states` (in declaration order).
    fn keep_states(&self, outputs: &mut Vec<(String, Tensor)>, states: &mut [Tensor]) {
        let flags: Vec<bool> = self.program.outputs.iter().map(|o| o.state.is_some()).collect();
        if outputs.len() != flags.len() {
            return;
        }
        let mut held = states.iter_mut();
        let mut kept = Vec::new();
        for ((name, t), state) in outputs.drain(..).zip(flags) {
            // A slot is taken by a state's output only, whatever the order of the outputs.
            match state.then(|| held.next()).flatten() {
                Some(slot) => *slot = t,
                None => kept.push((name, t)),
            }
        }
        *outputs = kept;
    }

    /// Every input of the program: `inputs` with each state's tensor in its place.
    fn with_states<'a>(&self, inputs: &[Input<'a>], states: &'a [Tensor]) -> Vec<Input<'a>> {
        let (mut given, mut held) = (inputs.iter(), states.iter());
        self.program
            .inputs
            .iter()
            .filter_map(|d| match d.state {
                true => held.next().map(|t| Input {
                    shape: &t.shape,
                    data: &t.data,
                }),
                false => given.next().copied(),
            })
            .collect()
    }

    /// Zeros for every state, of the sizes the dims of `inputs` (and the declared values)
    /// give: E0304 when a state needs a dim no input binds.
    fn zero_states(&self, inputs: &[Input]) -> Result<Vec<Tensor>, RunError> {
        let mut given = inputs.iter();
        let shapes: Vec<Option<&[usize]>> = self
            .program
            .inputs
            .iter()
            .map(|d| match d.state {
                true => None,
                false => given.next().map(|i| i.shape),
            })
            .collect();
        let shapes = bind::state_shapes(&self.program, &shapes)?;
        Ok(shapes
            .into_iter()
            .map(|s| Tensor::new(s.clone(), vec![0.0; s.iter().product()]))
            .collect())
    }

    /// The rows the program gathers by its inputs' ids: the hoisted program's extra inputs.
    fn gather(&self, inputs: &[Input]) -> Result<Vec<Tensor>, RunError> {
        let Some(hoisted) = &self.hoisted else {
            return Ok(Vec::new());
        };
        let inputs: Vec<(&[usize], &[f32])> = inputs.iter().map(|i| (i.shape, i.data)).collect();
        hoisted.gather(&self.program, &self.params, &inputs)
    }

    fn interpret(&self, inputs: &[Input], dims: Vec<Option<i64>>) -> Result<Vec<(String, Tensor)>, RunError> {
        let bound = Bound {
            params: self.params.clone(),
            inputs: inputs
                .iter()
                .map(|i| Tensor::new(i.shape.to_vec(), i.data.to_vec()))
                .collect(),
            dims,
        };
        super::interpret(&self.program, &bound)
    }

    /// The executable for the shapes of `inputs`: found by the shapes alone when they were
    /// seen before (binding evaluates the program's shapes, which would cost a small
    /// program's call several times its kernels), else bound, compiled and prepared, and
    /// kept as `keep` says.
    fn ready(&self, inputs: &[Input], keep: Keep) -> Result<Arc<Ready>, RunError> {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let seen = plans.kept.iter().find(|(_, ready)| {
            ready.shapes.len() == inputs.len() && ready.shapes.iter().zip(inputs).all(|(s, i)| s == i.shape)
        });
        if let Some((_, ready)) = seen {
            return Ok(ready.clone());
        }
        let shapes: Vec<&[usize]> = inputs.iter().map(|i| i.shape).collect();
        let dims = &bind::bind_shapes(&self.program, &shapes, self.budget)?;
        let start = Instant::now();
        let hoisted = self.hoisted.as_ref().map_or(&self.program, |h| &h.program);
        let optimized = crate::opt::optimize(hoisted);
        let exe = Executable::compile_within(&optimized.program, dims, self.budget)?;
        let prologue = exe.prologue_key();
        let (prepared, fresh) = match plans.shared(&prologue) {
            Some(prepared) => (prepared, false),
            None => {
                // Freed before the new weights are laid out, not after.
                plans.spare = None;
                (Arc::new(exe.prepare(&self.params, &self.pool)?), true)
            }
        };
        let plan = exe.plan();
        let info = PlanInfo {
            sizes: self.named_sizes(dims),
            compile_ms: start.elapsed().as_secs_f64() * 1e3,
            kernels: plan.prologue.len() + plan.kernels.len(),
            prepared: fresh,
        };
        plans.compiled.push(info);
        let shapes = shapes.iter().map(|s| s.to_vec()).collect();
        let ready = Arc::new(Ready {
            shapes,
            exe,
            prepared,
            prologue,
        });
        match keep {
            Keep::Plan => plans.kept.push((dims.to_vec(), ready.clone())),
            Keep::Once => plans.spare = Some((ready.prologue.clone(), ready.prepared.clone())),
        }
        Ok(ready)
    }

    /// The named dims' values (loop variables have none).
    fn named_sizes(&self, dims: &[Option<i64>]) -> Vec<(String, i64)> {
        self.program
            .dims
            .iter()
            .filter_map(|(s, info)| Some((info.name.clone(), dims.get(s).copied().flatten()?)))
            .collect()
    }

    /// The memory the function holds for weights its plans laid out, each layout once
    /// however many plans share it.
    pub fn prepared_bytes(&self) -> usize {
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .prepared_bytes()
    }

    /// What has been compiled, oldest first, the plans of [`Function::call_once`] included.
    pub fn plans(&self) -> Vec<PlanInfo> {
        let plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.compiled.clone()
    }
}

impl Plans {
    /// The prepared weights held, by the kept plans then aside, with their prologue's key
    /// (a set shared by several plans appears once for each).
    fn held(&self) -> impl Iterator<Item = (&PrologueKey, &Arc<Prepared>)> {
        let kept = self
            .kept
            .iter()
            .map(|(_, ready)| (&ready.prologue, &ready.prepared));
        kept.chain(self.spare.iter().map(|(key, prepared)| (key, prepared)))
    }

    /// The bytes of the prepared weights held, each set once however many plans share it.
    fn prepared_bytes(&self) -> usize {
        let mut held: Vec<&Arc<Prepared>> = self.held().map(|(_, prepared)| prepared).collect();
        held.sort_by_key(|p| Arc::as_ptr(p));
        held.dedup_by(|a, b| Arc::ptr_eq(a, b));
        held.iter().map(|p| p.bytes()).sum()
    }

    /// The weights prepared by a kept plan or held aside whose prologue has `key`.
    fn shared(&self, key: &PrologueKey) -> Option<Arc<Prepared>> {
        self.held()
            .find(|(k, _)| *k == key)
            .map(|(_, prepared)| prepared.clone())
    }
}
