//! The `unsafe` of running kernels (the only other is the file map of `runtime/data.rs`):
//! calling JIT-compiled kernels through function pointers, and the `extern "C"` GEMM
//! microkernel shim they call.
//!
//! The invariant every block below relies on: a kernel only touches memory through the
//! operand pointers it is given (and its thread's scratch), within the iteration space of
//! its [`KernelOp`], each task within its own part of that space; and [`Plan::validate`]
//! has proved, for the prologue and the main kernels, that this space stays inside each
//! operand's buffer, that the written operand reaches a different element for every index
//! (so tasks on different threads never write one element), that no operand a kernel reads
//! overlaps what it writes (so its `readonly` loads see memory that does not change), and
//! that buffers which may be written never alias one another. An [`super::jit::Executable`]
//! holds its plan privately and validates it before it is built, so a plan cannot change
//! after the proof. [`execute`] checks that every buffer it passes has exactly the plan's
//! length before it calls anything, and that the scratch is as large as the plan asks.

use super::RunError;
use crate::kernel::{BufferKind, Kernel, KernelOp, Plan};
use crew::Crew;
use std::sync::{Mutex, OnceLock};

mod copy;
mod crew;
#[cfg(target_arch = "x86_64")]
mod dot;
#[cfg(target_arch = "x86_64")]
mod epilogue;
#[cfg(target_arch = "x86_64")]
mod exp;
mod finish;
#[cfg(target_arch = "x86_64")]
mod panel;
#[cfg(target_arch = "x86_64")]
mod scatter;
#[cfg(target_arch = "x86_64")]
mod softmax;
#[cfg(target_arch = "x86_64")]
mod strip;
mod tile;
#[cfg(target_arch = "x86_64")]
mod transpose;

/// The low `lanes` bits set (at most 16): the mask of a partial vector of 16 floats.
#[cfg(target_arch = "x86_64")]
fn lane_mask(lanes: usize) -> u16 {
    match lanes {
        0 => 0,
        l if l >= 16 => u16::MAX,
        l => (1u16 << l) - 1,
    }
}

/// The lanes below `lanes` of a vector of 8 floats set (all bits), the others clear: the
/// mask of a partial vector for `maskload`, `maskstore` and `blendv`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lane_mask8(lanes: usize) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let n = lanes.min(8) as i32;
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// Which lanes of a vector of 8 floats a 256-bit routine reads and writes: all of them, or
/// the first few (a row's last, partial vector). A whole vector takes plain loads and
/// stores: on an AMD EPYC, masked stores made a tile product 10 % slower than plain ones
/// (`BENCHMARKS.md`, session 21), so the mask is kept for the partial vector.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
enum Part8 {
    Whole,
    First(std::arch::x86_64::__m256i),
}

#[cfg(target_arch = "x86_64")]
impl Part8 {
    /// The first `lanes` of a vector (all 8 from 8 on).
    #[target_feature(enable = "avx2")]
    fn of(lanes: usize) -> Part8 {
        match lanes {
            8.. => Part8::Whole,
            _ => Part8::First(lane_mask8(lanes)),
        }
    }

    /// The vector at `at`, its lanes outside the part 0.
    ///
    /// # Safety
    /// The part's lanes from `at` are inside their allocation.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load(self, at: *const f32) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: a whole vector is inside the allocation (contract); a masked load reads
        // only the lanes set (a lane whose bit is clear is neither read nor faulted on).
        unsafe {
            match self {
                Part8::Whole => _mm256_loadu_ps(at),
                Part8::First(m) => _mm256_maskload_ps(at, m),
            }
        }
    }

    /// `x`'s lanes in the part written to `at`; the others are not touched.
    ///
    /// # Safety
    /// As for [`Part8::load`].
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store(self, at: *mut f32, x: std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        // SAFETY: as for `load`: a masked store writes only the lanes set.
        unsafe {
            match self {
                Part8::Whole => _mm256_storeu_ps(at, x),
                Part8::First(m) => _mm256_maskstore_ps(at, m, x),
            }
        }
    }
}

/// The vectors the native tile routines run on here (decided once): 512 bits where the CPU
/// has AVX-512F (every routine), else 256 bits where it has AVX2 and FMA (the softmax, the
/// epilogues and the few-row packed product), else none; none under `ATTNC_NO_TILE`.
#[derive(Clone, Copy, PartialEq)]
enum Lanes {
    Sixteen,
    Eight,
}

fn lanes() -> Option<Lanes> {
    static LANES: OnceLock<Option<Lanes>> = OnceLock::new();
    *LANES.get_or_init(|| {
        if std::env::var_os("ATTNC_NO_TILE").is_some() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if tile::available() {
            return Some(Lanes::Sixteen);
        } else if avx2_fma() {
            return Some(Lanes::Eight);
        }
        None
    })
}

/// Whether the AVX-512 tile routines (the tile product and the packed one) run here.
fn use_tile() -> bool {
    lanes() == Some(Lanes::Sixteen)
}

/// Whether the CPU has AVX2 and FMA (the 256-bit routines' instructions).
#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// The shim of the widest [`Lanes`] this CPU runs: `sixteen`'s address or `eight`'s.
#[cfg(target_arch = "x86_64")]
fn widest(sixteen: *const u8, eight: *const u8) -> Option<*const u8> {
    lanes().map(|l| match l {
        Lanes::Sixteen => sixteen,
        Lanes::Eight => eight,
    })
}

/// The address of the attention tile's softmax shim (`softmax::attnc_softmax_tile`) at the
/// widest [`Lanes`] this CPU runs; `None` keeps the softmax in the generated code (no
/// such vectors, `ATTNC_NO_TILE`, or `ATTNC_NO_TILE_SOFTMAX`, which leaves the tile
/// products native: the benchmarks' before and after in one binary).
pub fn softmax_shim() -> Option<*const u8> {
    #[cfg(target_arch = "x86_64")]
    if std::env::var_os("ATTNC_NO_TILE_SOFTMAX").is_none() {
        use softmax::{attnc_softmax_tile as shim, Avx2, Avx512};
        return widest(shim::<Avx512> as *const u8, shim::<Avx2> as *const u8);
    }
    None
}

/// The address of the GEMM tile's epilogue shim (`epilogue::attnc_epilogue_tile`) at the
/// widest [`Lanes`] this CPU runs; `None` keeps every epilogue in the generated code (no
/// such vectors, `ATTNC_NO_TILE`, or `ATTNC_NO_TILE_EPILOGUE`: the benchmarks' before and
/// after in one binary).
pub fn epilogue_shim() -> Option<*const u8> {
    #[cfg(target_arch = "x86_64")]
    if std::env::var_os("ATTNC_NO_TILE_EPILOGUE").is_none() {
        use epilogue::{attnc_epilogue_tile as shim, Avx2, Avx512};
        return widest(shim::<Avx512> as *const u8, shim::<Avx2> as *const u8);
    }
    None
}

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j] (+ c[i, j] when acc != 0)` for an `m × n` tile
/// with a `k`-long inner dim; every matrix strided (row and column stride in elements).
/// Called by JIT code. Where `b` and `c` have unit column strides, `k` is at most 256 and
/// the CPU has AVX-512, the tile product of [`tile`] runs it without packing (the attention
/// kernel's tiles: it measured as fast as `gemm` there, and slower for long `k`). Where
/// the CPU has AVX2 and FMA (with AVX-512 or without), up to 4 rows, and `b` is read by its
/// columns (`b_rs = 1`: a decode step's `q kᵀ` with the key cache in place), [`dot`]'s dot
/// products, which read each key once where the crate packs them first; with more rows
/// and AVX-512, the tile product copying `b`'s columns transposed (`q kᵀ` with the keys in
/// the fused projection's result, where a layout copy of all of them took a kernel);
/// otherwise the `gemm` crate, which picks its AVX-512, AVX2/FMA or scalar kernels at run
/// time. The choice depends on the shape and the CPU only, never on the thread.
///
/// # Safety
/// For every `i < m`, `j < n`, `p < k`, the elements `c + i·c_rs + j·c_cs`,
/// `a + i·a_rs + p·a_cs` and `b + p·b_rs + j·b_cs` are inside their allocations, `c`'s are
/// not read or written by another thread during the call, and no element of `c` is one of
/// `a`'s or `b`'s. The JIT code calls it only with tiles that `Plan::validate` proved inside
/// their buffers (or inside the calling thread's scratch, sized by `KernelOp::scratch`), each
/// task writing its own rows.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn attnc_sgemm(
    m: i64,
    n: i64,
    k: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    alpha: f32,
    acc: i32,
) {
    if m <= 0 || n <= 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let u = |x: i64| x as usize;
        let unsigned = [a_rs, a_cs, b_rs, b_cs, c_rs].iter().all(|&s| s >= 0);
        // Up to 4 rows with `b` read by its columns: the dot products.
        let dot = b_rs == 1 && a_cs == 1 && m <= dot::MAX_M as i64 && lanes().is_some() && avx2_fma();
        let right = match (b_cs, b_rs) {
            (1, _) => Some(tile::Right::Rows(b, u(b_rs))),
            (_, 1) if !dot => Some(tile::Right::Columns(b, u(b_cs))),
            _ => None,
        };
        let tiled = c_cs == 1 && unsigned && k > 0 && k <= tile::MAX_K as i64 && use_tile();
        if let Some(right) = right.filter(|_| tiled) {
            // SAFETY: AVX-512F is available (checked), the strides are not negative
            // (checked), and every element the strides reach is inside its allocation (this
            // function's contract): the contract of `tile::sgemm`, `b`'s row `p` at `b +
            // p·b_rs` (rows contiguous) or its column `j` at `b + j·b_cs`.
            unsafe {
                tile::sgemm(
                    (u(m), u(n), u(k)),
                    (c, u(c_rs)),
                    (a, u(a_rs), u(a_cs)),
                    right,
                    alpha,
                    acc != 0,
                )
            };
            return;
        }
        if dot && c_cs == 1 && unsigned && k > 0 {
            // SAFETY: AVX2 and FMA are available (checked), the strides are not negative
            // (checked), and every element the strides reach is inside its allocation (this
            // function's contract): `dot::sgemm`'s contract, `b`'s row `j` (column `j` of
            // the product) at `b + j·b_cs`.
            unsafe {
                dot::sgemm(
                    (u(m), u(n), u(k)),
                    (c, u(c_rs)),
                    (a, u(a_rs)),
                    (b, u(b_cs)),
                    alpha,
                    acc != 0,
                )
            };
            return;
        }
    }
    // SAFETY: every element the strides reach is inside its allocation and `c` is this
    // call's alone (this function's contract), which is all `gemm::gemm` asks.
    unsafe {
        gemm::gemm(
            m as usize,
            n as usize,
            k.max(0) as usize,
            c,
            c_cs as isize,
            c_rs as isize,
            acc != 0,
            a,
            a_cs as isize,
            a_rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// `c[i, j] = alpha * Σ_p a[i, p] b[p, j]`, then `+ bias[j]`, `+ residual[i, j]` and ReLU
/// (each where given: a pointer not null, `relu` not 0), for an `m × n` tile with a
/// `k`-long inner dim, `b` packed ([`crate::kernel::Gemm::packed`]: `n·k` floats from `b`,
/// panels of `width` columns, the tile's first column a panel's); the bias's column
/// stride is `bias_cs`, the residual's row stride `residual_rs` and its columns
/// contiguous. Called by JIT code. With a unit column stride for `c`: panels of
/// [`crate::kernel::PANEL`] go to [`panel`]'s streaming product, strips of
/// [`crate::kernel::STRIP`] to [`strip`]'s (which applies the rest as it stores each
/// block), each with AVX-512 or with AVX2 and FMA (the same bits); otherwise
/// (`ATTNC_NO_TILE` too) the `gemm` crate, panel by panel. The choice depends on the shape
/// and the CPU only, never on the thread.
///
/// # Safety
/// The `n·k` floats from `b` are inside their allocation, and for strips the
/// [`crate::kernel::PANEL`] after them; for every `i < m`, `j < n`, `p < k`, the elements
/// `c + i·c_rs + j·c_cs`, `a + i·a_rs + p·a_cs` and, unless null, `bias + j·bias_cs` and
/// `residual + i·residual_rs + j` are inside theirs, `c`'s are not read or written by
/// another thread during the call, and no element of `c` is one of the others'. The JIT code
/// calls it only with tiles, panels, biases and residuals that `Plan::validate` proved
/// inside their buffers (and strips with the floats after them), each task writing its own
/// columns.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn attnc_sgemm_packed(
    m: i64,
    n: i64,
    k: i64,
    c: *mut f32,
    c_rs: i64,
    c_cs: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    alpha: f32,
    width: i64,
    bias: *const f32,
    bias_cs: i64,
    residual: *const f32,
    residual_rs: i64,
    relu: i64,
) {
    if m <= 0 || n <= 0 || width <= 0 || bias_cs < 0 || residual_rs < 0 {
        return;
    }
    let u = |x: i64| x.max(0) as usize;
    let finish = finish::Finish {
        bias: (!bias.is_null()).then_some((bias, u(bias_cs))),
        residual: (!residual.is_null()).then_some((residual, u(residual_rs))),
        relu: relu != 0,
    };
    // Whether a native product wrote the tile (else the crate does, below).
    let mut native = false;
    #[cfg(target_arch = "x86_64")]
    if c_cs == 1 && a_rs >= 0 && c_rs >= 0 && a_cs >= 0 {
        let (dims, to_c, of_a) = ((u(m), u(n), u(k)), (c, u(c_rs)), (a, u(a_rs), u(a_cs)));
        native = true;
        match lanes() {
            // SAFETY: the CPU runs the lanes (`lanes` checks), the strides are not negative
            // (checked), and this function's contract is `strip::sgemm`'s.
            Some(l) if u(width) == crate::kernel::STRIP => {
                return unsafe { strip::sgemm(l, dims, to_c, of_a, b, alpha, &finish) };
            }
            // SAFETY: AVX-512F is available (`lanes` checks it), the strides are not
            // negative (checked), and this function's contract is `panel::sgemm`'s.
            Some(Lanes::Sixteen) => unsafe { panel::sgemm(dims, to_c, of_a, b, alpha) },
            // SAFETY: AVX2 and FMA are available (`lanes` checks them), and the rest of
            // `panel::avx2::sgemm`'s contract is this function's, as above.
            Some(Lanes::Eight) => unsafe { panel::avx2::sgemm(dims, to_c, of_a, b, alpha) },
            None => native = false,
        }
    }
    let (n, k, width) = (u(n), u(k), u(width));
    if !native {
        for j in (0..n).step_by(width) {
            let w = (n - j).min(width);
            // SAFETY: the panel of columns `j..j + w` is `k` rows of `w` floats from `b + j·k`,
            // inside the `n·k` from `b`; the columns `j..j + w` of `c` are inside the tile
            // (this function's contract, which is then `attnc_sgemm`'s).
            unsafe {
                attnc_sgemm(
                    m,
                    w as i64,
                    k as i64,
                    c.wrapping_offset(j as isize * c_cs as isize),
                    c_rs,
                    c_cs,
                    a,
                    a_rs,
                    a_cs,
                    b.add(j * k),
                    w as i64,
                    1,
                    alpha,
                    0,
                )
            };
        }
    }
    // SAFETY: the tile and what `finish` reads are inside their allocations (contract).
    unsafe { finish.over((u(m), n), (c, c_rs as isize, c_cs as isize)) };
}

/// Checks a tile product's `c` (row stride `c_rs`; `c0` before the call) in the tests of
/// [`tile`] and [`dot`]: each element of the `m × n` tile has the bits of
/// `sum(i, j) · alpha` (`+ c0` with `acc`), and nothing outside the tile was written.
#[cfg(all(test, target_arch = "x86_64"))]
fn assert_tile(
    (got, c0): (&[f32], &[f32]),
    (m, n, c_rs): (usize, usize, usize),
    (alpha, acc): (f32, bool),
    sum: impl Fn(usize, usize) -> f32,
    what: &str,
) {
    for i in 0..m {
        for j in 0..c_rs {
            let at = i * c_rs + j;
            let want = match j < n {
                true => sum(i, j) * alpha + if acc { c0[at] } else { 0.0 },
                false => c0[at],
            };
            assert_eq!(got[at].to_bits(), want.to_bits(), "{what} acc {acc}: c[{i}, {j}]");
        }
    }
}

/// Below this much arithmetic a call runs on the calling thread alone (measured at shape T,
/// 0.6 MFLOP: 11 µs on one thread, 29 µs handed to a pool of two).
const SMALL: f64 = 4e6;

/// Floats in a 2 MiB huge page.
pub const HUGE_PAGE: usize = (2 << 20) / 4;

/// The part of `mem` that starts on a 2 MiB boundary, asked to be backed by huge pages: the
/// attention kernel reads rows of q, kᵀ and v that lie pages apart, which costs a TLB miss
/// per row with 4 KiB pages. The caller allocates `HUGE_PAGE` floats more than it needs.
pub fn huge_pages(mem: &mut [f32]) -> &mut [f32] {
    let skip = mem.as_ptr().align_offset(HUGE_PAGE * 4).min(mem.len());
    let aligned = &mut mem[skip..];
    #[cfg(target_os = "linux")]
    if aligned.len() >= HUGE_PAGE {
        let len = aligned.len() / HUGE_PAGE * HUGE_PAGE * 4;
        // SAFETY: the range is inside `aligned`, which this function borrows mutably;
        // MADV_HUGEPAGE only changes how the kernel backs the pages, never their contents.
        unsafe { libc::madvise(aligned.as_mut_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    }
    aligned
}

/// The machine's physical memory in bytes (`u64::MAX` where the system does not say).
pub fn physical_memory() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: `sysconf` only reads system configuration; it takes no pointers.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page > 0 {
            return (pages as u64).saturating_mul(page as u64);
        }
    }
    u64::MAX
}

/// Frees the code of `compiled`: a JIT module keeps its memory until told.
pub fn release(compiled: &mut crate::codegen::Compiled) {
    compiled.code.clear();
    compiled.prologue.clear();
    if let Some(module) = compiled.module.take() {
        // SAFETY: the pointers into this module's code were just cleared, and they were
        // only ever used through `execute` by the executable that is being dropped.
        unsafe { module.free_memory() };
    }
}

/// The signature of every kernel: `(args, scratch, begin, end)`.
type KernelFn = unsafe extern "C" fn(*const *mut f32, *mut f32, i64, i64);

/// The operand pointers of one kernel call.
struct Args(Vec<*mut f32>);

// SAFETY: the pointers are only read by kernels, whose tasks write disjoint elements and
// never read what another task of the kernel writes (both proved by `Plan::validate`); the
// memory they point to outlives `execute`, which owns or borrows it for its whole run.
unsafe impl Send for Args {}
// SAFETY: as for `Send`: shared references only read the pointers.
unsafe impl Sync for Args {}

impl Args {
    fn ptr(&self, i: usize) -> *mut f32 {
        self.0[i]
    }

    fn table(&self) -> *const *mut f32 {
        self.0.as_ptr()
    }
}

/// Why a run stopped before its end.
pub enum Stop {
    /// A broken invariant: a bug.
    Internal(String),
    /// A value the program cannot take (a position outside what `index_copy` writes).
    Value(RunError),
}

impl From<String> for Stop {
    fn from(what: String) -> Stop {
        Stop::Internal(what)
    }
}

impl From<&str> for Stop {
    fn from(what: &str) -> Stop {
        Stop::Internal(what.to_string())
    }
}

/// The derived buffers: written by the prologue, read by the main kernels.
pub enum Derived<'a> {
    Write(&'a mut [f32]),
    Read(&'a [f32]),
}

/// The memory of one run: read-only sources, the arena, the outputs, and scratch per thread.
pub struct Memory<'a> {
    pub params: Vec<&'a [f32]>,
    pub inputs: Vec<&'a [f32]>,
    pub derived: Derived<'a>,
    pub arena: &'a mut [f32],
    pub outputs: Vec<&'a mut [f32]>,
    /// One scratch per pool thread, plus one for the calling thread.
    pub scratch: &'a [Mutex<Vec<f32>>],
}

/// Runs every kernel of `plan` in order, the tasks of each spread over `pool`'s threads.
/// `plan` must be valid ([`Plan::validate`]; the executable checks it once, when it is
/// compiled) and `code[i]` the compiled `plan.kernels[i]`. Errors when a buffer's length differs
/// from the plan's (nothing has run then).
/// With `times`, adds each kernel's wall time in seconds to `times[kernel]`.
/// `prologue` selects the kernels run: the prologue's, or the main ones.
pub fn execute(
    plan: &Plan,
    prologue: bool,
    code: &[*const u8],
    mem: Memory,
    pool: &rayon::ThreadPool,
    mut times: Option<&mut [f64]>,
) -> Result<(), Stop> {
    let kernels = if prologue { &plan.prologue } else { &plan.kernels };
    if code.len() != kernels.len() {
        return Err("the compiled code does not match the plan".into());
    }
    let Memory {
        params,
        inputs,
        derived,
        arena,
        mut outputs,
        scratch,
    } = mem;
    let writes = matches!(derived, Derived::Write(_));
    let (derived_ptr, derived_len) = match derived {
        Derived::Write(d) => (d.as_mut_ptr(), d.len()),
        // Main kernels never write a derived buffer (validated), so this memory is only read.
        Derived::Read(d) => (d.as_ptr() as *mut f32, d.len()),
    };
    if prologue != writes {
        return Err("the prologue writes the derived buffers, the main kernels read them".into());
    }
    if arena.len() < plan.arena_len || derived_len < plan.derived_len {
        return Err("the arena is smaller than the plan".into());
    }
    let need = plan.scratch_len();
    if scratch.is_empty() || scratch.iter().any(|s| s.lock().map_or(true, |s| s.len() < need)) {
        return Err("the scratch is smaller than the plan".into());
    }
    let arena_ptr = arena.as_mut_ptr();
    let mut used = vec![false; plan.buffers.len()];
    for k in kernels {
        for (o, _, _) in k.op.operands() {
            used[o.buf] = true;
        }
    }
    let mut bases = Vec::with_capacity(plan.buffers.len());
    for (b, used) in plan.buffers.iter().zip(used) {
        if !used {
            bases.push(std::ptr::null_mut());
            continue;
        }
        let (ptr, len) = match b.kind {
            BufferKind::Param(i) => params.get(i).map(|s| (s.as_ptr() as *mut f32, s.len())),
            BufferKind::Input(i) => inputs.get(i).map(|s| (s.as_ptr() as *mut f32, s.len())),
            BufferKind::Output(i) | BufferKind::State { output: i, .. } => {
                outputs.get_mut(i).map(|s| (s.as_mut_ptr(), s.len()))
            }
            // SAFETY: `offset + len <= arena_len <= arena.len()` (validated), so the
            // pointer stays inside the arena.
            BufferKind::Temp { offset, .. } => Some((unsafe { arena_ptr.add(offset) }, b.len)),
            // SAFETY: `offset + len <= derived_len <= derived.len()` (validated).
            BufferKind::Derived { offset, .. } => Some((unsafe { derived_ptr.add(offset) }, b.len)),
        }
        .ok_or_else(|| format!("no memory for buffer `{}`", b.name))?;
        if len != b.len {
            return Err(Stop::Internal(format!(
                "buffer `{}` has {len} elements, the plan {}",
                b.name, b.len
            )));
        }
        bases.push(ptr);
    }
    let bases = Args(bases);
    let fns: Vec<Option<KernelFn>> = code
        .iter()
        // SAFETY: each pointer that is not null is a finalized function of the signature
        // `KernelFn`, alive for as long as the `Compiled` that the caller holds.
        .map(|&c| (!c.is_null()).then(|| unsafe { std::mem::transmute::<*const u8, KernelFn>(c) }))
        .collect();
    // One thread, or a program so small (shape T: a few µs of work) that waking the pool
    // costs more than it saves: the caller runs every task. Tasks are the same either way.
    let work: f64 = kernels.iter().map(|k| k.op.work()).sum();
    let inline = pool.current_num_threads() == 1 || work < SMALL;
    let mut body = |crew: Option<&Crew>| -> Result<(), Stop> {
        let mut written = scatter::Written::default();
        for (ki, (kernel, &f)) in kernels.iter().zip(&fns).enumerate() {
            let start = times.is_some().then(std::time::Instant::now);
            run_kernel(kernel, f, &bases, scratch, crew, &mut written)?;
            if let (Some(times), Some(start)) = (times.as_deref_mut(), start) {
                times[ki] += start.elapsed().as_secs_f64();
            }
        }
        Ok(())
    };
    if inline {
        return body(None);
    }
    // The pool's other threads help with every kernel of the call, awake in between.
    let helpers = pool.current_num_threads() - 1;
    crew::gather(pool, helpers, |crew| body(Some(crew)))
}

/// What runs a kernel's tasks: its compiled function, or the host's copy of its rows.
#[derive(Clone, Copy)]
enum Work<'a> {
    Code(KernelFn),
    Copy(&'a crate::kernel::Map),
}

/// Runs one kernel of a plan: a scatter on the calling thread (undoing every write of the
/// call so far where its positions are refused, see [`scatter::Written`]), any other kernel's tasks
/// over the crew (or on the calling thread alone without one): its function's, or, with no
/// function, a copy's rows on the host ([`crate::codegen::on_host`]).
fn run_kernel(
    kernel: &Kernel,
    f: Option<KernelFn>,
    bases: &Args,
    scratch: &[Mutex<Vec<f32>>],
    crew: Option<&Crew>,
    written: &mut scatter::Written,
) -> Result<(), Stop> {
    let args = Args(
        kernel
            .op
            .operands()
            .iter()
            .map(|(o, shape, _)| match shape.contains(&0) {
                // An empty operand is never dereferenced, and its offset may lie
                // past its buffer (a slice of an empty tensor): no `add` for it.
                true => bases.ptr(o.buf).wrapping_add(o.offset),
                // SAFETY: the offset is the operand's first element, inside its
                // buffer (validated for every operand whose shape is not empty),
                // and the base points to that buffer (the kernel uses it).
                false => unsafe { bases.ptr(o.buf).add(o.offset) },
            })
            .collect(),
    );
    if let KernelOp::Scatter(s) = &kernel.op {
        // SAFETY: `args` holds the operands of `s` in `operands` order, each a
        // pointer into a buffer that holds every element its strides reach over its
        // shape (validated); the output's buffer is written by no other kernel while
        // this one runs, and its window is a different buffer from the others. The
        // buffers live until `execute` returns.
        if let Err(e) = unsafe { written.run(s, &args.0) } {
            // SAFETY: the windows written are the same live buffers, and no kernel runs
            // any more.
            unsafe { std::mem::take(written).undo() };
            return Err(Stop::Value(e));
        }
    } else {
        let work = match (&kernel.op, f) {
            (_, Some(f)) => Work::Code(f),
            (KernelOp::Map(m), None) if crate::codegen::on_host(&kernel.op) => Work::Copy(m),
            _ => return Err("a kernel that is not a copy has no code".into()),
        };
        let tasks = kernel.op.tasks() as i64;
        let run = |begin: i64, end: i64| {
            let f = match work {
                Work::Code(f) => f,
                Work::Copy(m) => {
                    let (per_task, rows) = (m.rows_per_task, crate::kernel::rows(&m.shape));
                    let (r0, r1) = (begin as usize * per_task, (end as usize * per_task).min(rows));
                    // SAFETY: `args` holds the map's input and output, in `operands`
                    // order, each pointing at its first element inside a buffer that
                    // holds every element its strides reach over the map's shape
                    // (validated); the rows are these tasks', whose writes `validate`
                    // proved disjoint from every other task's and never read by one.
                    return unsafe { copy::rows(m, args.ptr(0), args.ptr(1), r0..r1) };
                }
            };
            let slot = rayon::current_thread_index().map_or(scratch.len() - 1, |i| i.min(scratch.len() - 1));
            let mut s = scratch[slot].lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the module's invariant: the plan is valid, `f` is its compiled
            // kernel, `args` holds a pointer into a buffer of the plan's length for each
            // operand, and `s` is this thread's scratch of `scratch_len` floats (checked
            // in `execute`). Concurrent calls take different task ranges, whose writes
            // `validate` proved disjoint and never read by another task: no race.
            unsafe { f(args.table(), s.as_mut_ptr(), begin, end) }
        };
        let crew = crew.filter(|_| tasks > 1 && !matches!(kernel.op, KernelOp::Map(_) if tasks < 4));
        match crew {
            Some(crew) => {
                let tasks = u32::try_from(tasks)
                    .map_err(|_| Stop::from("a kernel has more tasks than a call runs"))?;
                crew.run(tasks, &|t| run(t, t + 1));
            }
            None if tasks > 0 => run(0, tasks),
            None => {}
        }
    }
    Ok(())
}
