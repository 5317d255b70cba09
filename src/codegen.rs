//! Code generation: every kernel of a [`Plan`] translated to Cranelift IR and compiled to
//! machine code for this CPU (`attnc ir --stage clif` prints the IR, `--stage asm` the
//! machine code).
//!
//! Every kernel has one signature, `fn(args: *const *mut f32, scratch: *mut f32,
//! begin: i64, end: i64)`: it runs tasks `begin..end`; `args` holds one pointer per operand
//! (buffer base plus the operand's offset, in the order of [`KernelOp::operands`]) and
//! `scratch` the calling thread's scratch. Every size and stride is a constant in the code.
//! Kernels that differ only in their operands' buffers and offsets share one function.
//!
//! GEMM tiles call `attnc_sgemm`, an `extern "C"` shim over the `gemm` crate (declared as
//! an import and bound to the shim's address; `attnc_sgemm_packed` where `b` is packed), so the JIT code does the loops, the
//! prologues and the softmax arithmetic, and the microkernel does the tile products. The
//! float functions without a vector form yet (`sin`, `cos`, `pow`) are imported the
//! same way, as Rust `extern "C"` functions called once per lane ([`math::Call`]).

mod attention;
mod emit;
mod gemm;
mod key_ranges;
mod map;
mod math;
mod place;
mod row;
mod softmax;
mod tile_epilogue;
mod visible;

use crate::hash::HashMap;
use crate::kernel::{KernelOp, Plan};
use crate::side_by_side::side_by_side;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::{AbiParam, Function, InstBuilder, Signature, Type, UserFuncName};
use cranelift_codegen::isa::{OwnedTargetIsa, TargetFrontendConfig, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module, ModuleReloc};
use emit::Emit;
pub(crate) use emit::{EXP_LN2, EXP_LO, EXP_MAGIC, EXP_NORMAL_SCALED, EXP_POLY, EXP_SCALE_LOG2};
pub(crate) use math::{ERF_LARGE, ERF_SMALL};
pub(crate) use softmax::KeyChange;
pub use tile_epilogue::Activation;

/// The name JIT code calls the GEMM microkernel shim by.
pub const SGEMM_SYMBOL: &str = "attnc_sgemm";

/// The name JIT code calls the shim for a packed `b` by ([`crate::kernel::Gemm::packed`]).
pub const PACKED_SYMBOL: &str = "attnc_sgemm_packed";

/// The name JIT code calls the attention tile's softmax by ([`Shims::softmax`]).
pub const SOFTMAX_SYMBOL: &str = "attnc_softmax_tile";

/// The name JIT code calls the GEMM tile's epilogue by ([`Shims::epilogue`]).
pub const EPILOGUE_SYMBOL: &str = "attnc_epilogue_tile";

/// The addresses of the microkernel shims JIT code calls.
#[derive(Clone, Copy, Debug)]
pub struct Shims {
    /// `attnc_sgemm`: strided operands ([`emit::Emit::sgemm`]).
    pub sgemm: *const u8,
    /// `attnc_sgemm_packed`: a packed `b` ([`emit::Emit::sgemm_packed`]).
    pub packed: *const u8,
    /// `attnc_softmax_tile`, the attention tile's online softmax on 512- or 256-bit vectors
    /// ([`emit::Emit::softmax_tile`]), where this CPU runs it; without it the generated
    /// code computes the softmax itself.
    pub softmax: Option<*const u8>,
    /// `attnc_epilogue_tile`, a GEMM tile's bias and epilogue on 512-bit vectors where
    /// they are one of its forms ([`emit::Emit::epilogue_tile`]), where this CPU runs it;
    /// without it the generated code applies every epilogue itself.
    pub epilogue: Option<*const u8>,
}

/// Compiled kernels: one code pointer per kernel of the plan, and the module that owns the
/// code (it must outlive every call through the pointers).
pub struct Compiled {
    /// `None` only once the runtime has freed the code (when its executable is dropped).
    pub module: Option<JITModule>,
    /// `prologue[i]` runs `plan.prologue[i]`; null for a copy, which runs on the host
    /// ([`on_host`]), scaled or not.
    pub prologue: Vec<*const u8>,
    /// `code[i]` runs `plan.kernels[i]`, as `prologue`.
    pub code: Vec<*const u8>,
    /// Distinct functions compiled (kernels with equal code share one).
    pub functions: usize,
    /// Each distinct function's kind and the ms Cranelift took to compile it.
    pub function_ms: Vec<(&'static str, f64)>,
}

/// A code generator: the ISA of this CPU, a JIT module, and what a kernel's function
/// imports from it.
pub struct Jit {
    /// Owns the generated code and resolves `attnc_sgemm`.
    module: JITModule,
    /// The module's functions a kernel may call.
    imports: Imports,
}

/// The module's imports a kernel's function may call, with their signatures: all that
/// translating a kernel needs from the module, so that kernels are translated on the
/// threads that compile them ([`compile_all`]).
struct Imports {
    /// The microkernel shim.
    sgemm: (FuncId, Signature),
    /// The packed shim.
    packed: (FuncId, Signature),
    /// Each math function of [`math::Call::ALL`].
    calls: Vec<(FuncId, Signature)>,
    /// The tile softmax shim, where [`Shims`] has one.
    softmax: Option<(FuncId, Signature)>,
    /// The tile epilogue shim, where [`Shims`] has one.
    epilogue: Option<(FuncId, Signature)>,
    /// Every kernel's signature.
    kernel: Signature,
    config: TargetFrontendConfig,
}

/// The host ISA, with the flags the JIT needs.
pub fn isa(opt: &str) -> Result<OwnedTargetIsa, String> {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| f.set(k, v).map_err(|e| e.to_string());
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    set(&mut flags, "opt_level", opt)?;
    set(&mut flags, "enable_verifier", "false")?;
    let builder = cranelift_native::builder().map_err(|e| format!("this CPU is not supported: {e}"))?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| e.to_string())
}

/// A signature of `count` parameters of each type, in order. The shims' parameters: a
/// kernel's 4 pointers and indices; `attnc_sgemm`'s 12 sizes, pointers and strides, `alpha`
/// and `acc`; `attnc_sgemm_packed`'s 10, `alpha` and 6 more (the panels' width, the bias,
/// a residual and ReLU); `attnc_softmax_tile`'s 13, two flags and the fill;
/// `attnc_epilogue_tile`'s 11 and 3 constants.
fn signature(module: &JITModule, params: &[(Type, usize)]) -> Signature {
    let mut sig = module.make_signature();
    for &(ty, count) in params {
        sig.params.extend((0..count).map(|_| AbiParam::new(ty)));
    }
    sig
}

fn kernel_signature(module: &JITModule) -> Signature {
    signature(module, &[(I64, 4)])
}

/// `symbol` declared as an import of `module` with `sig`.
fn import(module: &mut JITModule, symbol: &str, sig: &Signature) -> Result<FuncId, String> {
    module
        .declare_function(symbol, Linkage::Import, sig)
        .map_err(|e| e.to_string())
}

/// `symbol` imported with `params`, with its signature (an optional shim's).
fn imported(
    module: &mut JITModule,
    symbol: &str,
    params: &[(Type, usize)],
) -> Result<(FuncId, Signature), String> {
    let sig = signature(module, params);
    Ok((import(module, symbol, &sig)?, sig))
}

impl Jit {
    /// A generator whose code calls `shims` for tile products.
    pub fn new(shims: Shims) -> Result<Jit, String> {
        let mut builder = JITBuilder::with_isa(isa("speed")?, default_libcall_names());
        builder.symbol(SGEMM_SYMBOL, shims.sgemm);
        builder.symbol(PACKED_SYMBOL, shims.packed);
        if let Some(softmax) = shims.softmax {
            builder.symbol(SOFTMAX_SYMBOL, softmax);
        }
        if let Some(epilogue) = shims.epilogue {
            builder.symbol(EPILOGUE_SYMBOL, epilogue);
        }
        for f in math::Call::ALL {
            builder.symbol(f.symbol(), f.address());
        }
        let mut module = JITModule::new(builder);
        let sgemm = imported(&mut module, SGEMM_SYMBOL, &[(I64, 12), (F32, 1), (I32, 1)])?;
        let mut calls = Vec::new();
        for f in math::Call::ALL {
            let mut sig = signature(&module, &[(F32, f.arity())]);
            sig.returns.push(AbiParam::new(F32));
            let id = import(&mut module, f.symbol(), &sig)?;
            calls.push((id, sig));
        }
        // Declared last, so the math functions keep their ids in the IR's text.
        let packed = imported(&mut module, PACKED_SYMBOL, &[(I64, 10), (F32, 1), (I64, 6)])?;
        let softmax = shims
            .softmax
            .map(|_| imported(&mut module, SOFTMAX_SYMBOL, &[(I64, 13), (I32, 2), (F32, 1)]))
            .transpose()?;
        let epilogue = shims
            .epilogue
            .map(|_| imported(&mut module, EPILOGUE_SYMBOL, &[(I64, 11), (F32, 3)]))
            .transpose()?;
        let imports = Imports {
            sgemm,
            packed,
            calls,
            softmax,
            epilogue,
            kernel: kernel_signature(&module),
            config: module.target_config(),
        };
        Ok(Jit { module, imports })
    }

    /// The distinct kernels of `plan`: for each kernel (prologue first), the index of its
    /// code in the list, `None` for one that runs on the host ([`on_host`]). Kernels are
    /// compared by their `Debug` text, not `==`: under `==` a NaN constant (`gelu`'s guard
    /// in a GEMM's epilogue) differs from itself, and every layer of a model would get a
    /// function of its own.
    fn distinct(plan: &Plan) -> (Vec<KernelOp>, Vec<Option<usize>>) {
        let mut keys: Vec<KernelOp> = Vec::new();
        let mut texts: HashMap<String, usize> = HashMap::default();
        let mut which = Vec::new();
        for k in plan.prologue.iter().chain(&plan.kernels) {
            if on_host(&k.op) {
                which.push(None);
                continue;
            }
            let key = k.op.code_key();
            let i = *texts.entry(format!("{key:?}")).or_insert_with(|| {
                keys.push(key);
                keys.len() - 1
            });
            which.push(Some(i));
        }
        (keys, which)
    }

    /// Compiles every kernel of `plan`: each distinct function declared here, then
    /// translated and compiled to machine code on this thread and helpers
    /// ([`compile_all`]), then defined in the module in order.
    pub fn compile(mut self, plan: &Plan) -> Result<Compiled, String> {
        let (keys, which) = Jit::distinct(plan);
        let ids = self.declare_all(keys.len())?;
        let machine = compile_all(self.module.isa(), &self.imports, &keys, &ids, false);
        let mut function_ms = Vec::new();
        for (i, (code, key)) in machine.into_iter().zip(&keys).enumerate() {
            let code = code.map_err(|e| format!("kernel {i}: {e}"))?;
            self.module
                .define_function_bytes(code.id, code.alignment, &code.bytes, &code.relocs)
                .map_err(|e| format!("kernel {i}: {e:?}"))?;
            function_ms.push((key.kind(), code.ms));
        }
        self.module.finalize_definitions().map_err(|e| e.to_string())?;
        let mut code: Vec<*const u8> = which
            .iter()
            .map(|i| i.map_or(std::ptr::null(), |i| self.module.get_finalized_function(ids[i])))
            .collect();
        let main = code.split_off(plan.prologue.len());
        Ok(Compiled {
            module: Some(self.module),
            prologue: code,
            code: main,
            functions: keys.len(),
            function_ms,
        })
    }

    /// The verified Cranelift IR of every distinct kernel of `plan`, before optimization:
    /// `(indices of the kernels that share it, prologue first, text)`.
    pub fn clif(self, plan: &Plan) -> Result<Vec<(Vec<usize>, String)>, String> {
        let (keys, which) = Jit::distinct(plan);
        let flags = settings::Flags::new(settings::builder());
        let mut out = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let func = translate(&self.imports, key, i as u32);
            cranelift_codegen::verify_function(&func, &flags)
                .map_err(|e| format!("kernel {i} does not verify: {e}"))?;
            let users = (0..which.len()).filter(|&k| which[k] == Some(i)).collect();
            out.push((users, display(&func)));
        }
        Ok(out)
    }

    /// The machine code of every distinct kernel of `plan`, as Cranelift's VCode text after
    /// register allocation: `(indices of the kernels that share it, prologue first, text)`.
    /// For reading what the vector code became (`attnc ir --stage asm`); never printed by
    /// a compile.
    pub fn asm(mut self, plan: &Plan) -> Result<Vec<(Vec<usize>, String)>, String> {
        let (keys, which) = Jit::distinct(plan);
        let ids = self.declare_all(keys.len())?;
        let machine = compile_all(self.module.isa(), &self.imports, &keys, &ids, true);
        let mut out = Vec::new();
        for (i, code) in machine.into_iter().enumerate() {
            let code = code.map_err(|e| format!("kernel {i}: {e}"))?;
            let users = (0..which.len()).filter(|&k| which[k] == Some(i)).collect();
            out.push((users, code.vcode.unwrap_or_default()));
        }
        Ok(out)
    }

    /// Declares `count` local functions, one per distinct kernel, in order.
    fn declare_all(&mut self, count: usize) -> Result<Vec<FuncId>, String> {
        (0..count)
            .map(|i| {
                self.module
                    .declare_function(&format!("kernel{i}"), Linkage::Local, &self.imports.kernel)
                    .map_err(|e| e.to_string())
            })
            .collect()
    }
}

/// The IR of one kernel, as function `index` of the module.
fn translate(imports: &Imports, op: &KernelOp, index: u32) -> Function {
    let mut func = Function::with_name_signature(UserFuncName::user(1, index), imports.kernel.clone());
    let mut builder_ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut builder_ctx);
    let sgemm = emit::import(b.func, imports.sgemm.0, &imports.sgemm.1);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    // The entry block has no predecessors.
    b.seal_block(entry);
    let p = b.block_params(entry).to_vec();
    let mut e = Emit {
        b,
        args: p[0],
        scratch: p[1],
        begin: p[2],
        end: p[3],
        sgemm,
        packed: (&imports.packed, None),
        softmax: (imports.softmax.as_ref(), None),
        epilogue: (imports.epilogue.as_ref(), None),
        calls: &imports.calls,
        imported: [None; math::Call::ALL.len()],
    };
    match op {
        KernelOp::Gemm(g) => gemm::translate(&mut e, g),
        KernelOp::Softmax(s) => softmax::translate(&mut e, s),
        KernelOp::Attention(a) => attention::translate(&mut e, a),
        KernelOp::Map(m) => map::translate(&mut e, m),
        KernelOp::Row(r) => row::translate(&mut e, r),
        // The executor writes it on the host: its compiled function does nothing.
        KernelOp::Scatter(_) => {}
        KernelOp::KeyRanges(k) => key_ranges::translate(&mut e, k),
    }
    e.b.ins().return_(&[]);
    e.b.finalize(imports.config);
    func
}

/// Whether a kernel runs on the host, with no machine code: a copy, or a copy times a
/// constant, whose function cost 0.3–0.5 ms of Cranelift each (0.6–0.7 for a process's
/// first) and ran no faster than the host's loop (`runtime::native::copy`): a third as
/// fast for `kᵀ`'s layout, whose 4 × 4 blocks the generated code gathered a float at a time.
pub fn on_host(op: &KernelOp) -> bool {
    matches!(op, KernelOp::Map(m) if m.is_copy() || m.scale().is_some())
}

/// Translates each kernel of `keys` as the function of its id and compiles it to machine
/// code, in their order, on every core ([`side_by_side`]): translating on the compiling
/// threads, not all before them on this one, took the seed module's Cranelift stage from
/// 3.0 to 2.8 ms at best, and its median over 15 runs from 3.9 to 2.9 ms.
fn compile_all(
    isa: &dyn TargetIsa,
    imports: &Imports,
    keys: &[KernelOp],
    ids: &[FuncId],
    disasm: bool,
) -> Vec<Result<Machine, String>> {
    let work = |(key, &id): (&KernelOp, &FuncId)| {
        let start = std::time::Instant::now();
        let func = translate(imports, key, id.as_u32());
        Machine::compile(isa, id, func, disasm, start)
    };
    side_by_side(keys.iter().zip(ids).collect(), work)
        .into_iter()
        .map(|m| m.unwrap_or_else(|| Err("a compile thread failed".into())))
        .collect()
}

/// One function's machine code, ready to be defined in the module.
struct Machine {
    id: FuncId,
    bytes: Vec<u8>,
    alignment: u64,
    relocs: Vec<ModuleReloc>,
    /// The code as Cranelift's VCode text, for [`Jit::asm`].
    vcode: Option<String>,
    /// The ms its translation and compilation took.
    ms: f64,
}

impl Machine {
    /// Compiles `func` for `isa` (as `JITModule::define_function` does, less the
    /// definition, which needs the module), timed from `start`.
    fn compile(
        isa: &dyn TargetIsa,
        id: FuncId,
        func: Function,
        disasm: bool,
        start: std::time::Instant,
    ) -> Result<Machine, String> {
        let mut ctx = Context::for_function(func);
        ctx.set_disasm(disasm);
        ctx.compile(isa, &mut ControlPlane::default())
            .map_err(|e| format!("{:?}", e.inner))?;
        let code = ctx.compiled_code().ok_or("no code was compiled")?;
        let alignment = u64::from(code.buffer.alignment)
            .max(u64::from(isa.function_alignment().minimum))
            .max(isa.symbol_alignment());
        let bytes = code.code_buffer().to_vec();
        let vcode = code.vcode.clone();
        let relocs = code
            .buffer
            .relocs()
            .iter()
            .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, id))
            .collect();
        Ok(Machine {
            id,
            bytes,
            alignment,
            relocs,
            vcode,
            ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }
}

fn display(f: &Function) -> String {
    f.display().to_string()
}
