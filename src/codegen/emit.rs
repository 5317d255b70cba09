//! The building blocks every kernel translator uses: counted loops, index arithmetic,
//! loads and stores, and float math on f32 and f32x4 (Cranelift's x86-64 backend has
//! 128-bit vectors only), including a vectorized `exp`.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I32, I32X4, I64};
use cranelift_codegen::ir::{
    ConstantData, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder, MemFlagsData, Signature,
    StackSlotData, StackSlotKind, Type, UserExternalName, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::FuncId;

use super::math::Call;

/// The module's function `id` of signature `sig`, imported into `func` as
/// `Module::declare_func_in_func` imports it, without the module.
pub fn import(func: &mut Function, id: FuncId, sig: &Signature) -> FuncRef {
    let signature = func.import_signature(sig.clone());
    let name = func.declare_imported_user_function(UserExternalName {
        namespace: 0,
        index: id.as_u32(),
    });
    func.import_function(ExtFuncData {
        name: ExternalName::user(name),
        signature,
        colocated: false,
        patchable: false,
    })
}

/// Lanes of a vector.
pub const LANES: usize = 4;

/// `exp_nonpositive_scaled` multiplies by `2^EXP_SCALE_LOG2`: enough to keep `e^-104`
/// normal, small enough that a sum of 2^100 of them stays finite.
pub(crate) const EXP_SCALE_LOG2: u32 = 25;
const EXP_SCALE: f32 = (1 << EXP_SCALE_LOG2) as f32;

/// The smallest scaled `exp` ([`Emit::exp_nonpositive_scaled`]) whose unscaled value is a
/// normal float, `2^(EXP_SCALE_LOG2 - 126)`: below it, the attention's probabilities are
/// flushed to 0 ([`Emit::exp_nonpositive`]).
pub(crate) const EXP_NORMAL_SCALED: f32 = f32::MIN_POSITIVE * EXP_SCALE;

/// `exp`'s range reduction below which every result rounds to 0 (see
/// [`Emit::exp4_reduced`]), its rounding constant `1.5·2^23`, `-ln 2` split in two for an
/// exact reduction, and its degree-5 polynomial: shared with the native tile softmax
/// (`runtime/native/softmax.rs`), which computes the same bits on 512- or 256-bit vectors.
pub(crate) const EXP_LO: f32 = -104.0;
pub(crate) const EXP_MAGIC: f32 = 12_582_912.0;
pub(crate) const EXP_LN2: [f32; 2] = [-0.693_359_4, 2.121_944_4e-4];
pub(crate) const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// A kernel function being built: `fn(args, scratch, begin, end)`.
pub struct Emit<'a> {
    pub b: FunctionBuilder<'a>,
    /// `*const *mut f32`: one pointer per operand, offsets already added.
    pub args: Value,
    /// `*mut f32`: this thread's scratch.
    pub scratch: Value,
    pub begin: Value,
    pub end: Value,
    /// The `attnc_sgemm` microkernel shim.
    pub sgemm: FuncRef,
    /// The `attnc_sgemm_packed` shim's declaration, and its reference in this function once
    /// imported by [`Emit::sgemm_packed`] (so the IR of other kernels does not name it).
    pub packed: (&'a (FuncId, Signature), Option<FuncRef>),
    /// The `attnc_softmax_tile` shim's declaration where the CPU runs it, and its reference
    /// in this function once imported by [`Emit::softmax_tile`].
    pub softmax: (Option<&'a (FuncId, Signature)>, Option<FuncRef>),
    /// The `attnc_epilogue_tile` shim's declaration where the CPU runs it, and its
    /// reference in this function once imported by [`Emit::epilogue_tile`].
    pub epilogue: (Option<&'a (FuncId, Signature)>, Option<FuncRef>),
    /// The module's declaration of each math function ([`Call::ALL`] order).
    pub calls: &'a [(FuncId, Signature)],
    /// Each math function's reference in this function, once imported by [`Emit::call`].
    pub imported: [Option<FuncRef>; Call::ALL.len()],
}

/// Memory that the kernel only reads: it may be loaded early or merged.
fn readonly() -> MemFlagsData {
    MemFlagsData::new().with_notrap().with_readonly().with_can_move()
}

/// Memory the kernel writes: never misaligned for its type, but vectors may be unaligned.
fn plain() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

impl Emit<'_> {
    pub fn int(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    pub fn f32(&mut self, v: f32) -> Value {
        self.b.ins().f32const(v)
    }

    /// `v` in every lane when `w` is 4, a plain f32 when 1. A vector constant comes from
    /// the constant pool (one load, often folded into its user), not from a scalar
    /// materialized and shuffled inside the loop.
    pub fn splat(&mut self, v: f32, w: usize) -> Value {
        match w {
            1 => self.f32(v),
            _ => self.vconst(F32X4, v.to_bits()),
        }
    }

    /// `start, start + 1, ..` as floats on `w` lanes (1 or 4): the positions a lane holds.
    pub fn iota(&mut self, start: Value, w: usize) -> Value {
        let first = self.b.ins().fcvt_from_sint(F32, start);
        if w == 1 {
            return first;
        }
        let bytes: Vec<u8> = (0..4).flat_map(|k| (k as f32).to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        let steps = self.b.ins().vconst(F32X4, c);
        let base = self.b.ins().splat(F32X4, first);
        self.b.ins().fadd(base, steps)
    }

    /// A 128-bit constant with `bits` in each of its four 32-bit lanes.
    pub fn vconst(&mut self, ty: Type, bits: u32) -> Value {
        let bytes: Vec<u8> = (0..4).flat_map(|_| bits.to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(ty, c)
    }

    /// The pointer of operand `i` of the kernel.
    pub fn arg(&mut self, i: usize) -> Value {
        self.b.ins().load(I64, readonly(), self.args, (i * 8) as i32)
    }

    /// `base + index * 4`: the address of element `index` of an f32 array.
    pub fn at(&mut self, base: Value, index: Value) -> Value {
        let bytes = self.b.ins().imul_imm_s(index, 4);
        self.b.ins().iadd(base, bytes)
    }

    /// `base + (i * stride) * 4` with a constant stride.
    pub fn step(&mut self, base: Value, i: Value, stride: usize) -> Value {
        match stride {
            0 => base,
            _ => {
                let bytes = self.b.ins().imul_imm_s(i, (stride * 4) as i64);
                self.b.ins().iadd(base, bytes)
            }
        }
    }

    /// Loads `w` lanes (1 or 4) at `addr`, `stride` elements apart: stride 0 broadcasts one
    /// element, stride 1 is one vector load, a longer stride gathers four scalars.
    pub fn load(&mut self, addr: Value, w: usize, stride: usize, ro: bool) -> Value {
        let flags = if ro { readonly() } else { plain() };
        match (w, stride) {
            (1, _) => self.b.ins().load(F32, flags, addr, 0),
            (_, 0) => {
                let s = self.b.ins().load(F32, flags, addr, 0);
                self.b.ins().splat(F32X4, s)
            }
            (_, 1) => self.b.ins().load(F32X4, flags, addr, 0),
            _ => {
                let first = self.b.ins().load(F32, flags, addr, 0);
                let mut v = self.b.ins().scalar_to_vector(F32X4, first);
                for lane in 1..4u8 {
                    // A stride too long for a 32-bit displacement is added to the address.
                    let bytes = stride.saturating_mul(4 * lane as usize);
                    let x = match i32::try_from(bytes) {
                        Ok(offset) => self.b.ins().load(F32, flags, addr, offset),
                        Err(_) => {
                            let at = self.b.ins().iadd_imm_s(addr, bytes as i64);
                            self.b.ins().load(F32, flags, at, 0)
                        }
                    };
                    v = self.b.ins().insertlane(v, x, lane);
                }
                v
            }
        }
    }

    pub fn store(&mut self, v: Value, addr: Value) {
        self.b.ins().store(plain(), v, addr, 0);
    }

    pub fn min_usize(&mut self, a: Value, b: Value) -> Value {
        let lt = self.b.ins().icmp(IntCC::SignedLessThan, a, b);
        self.b.ins().select(lt, a, b)
    }

    pub fn max_usize(&mut self, a: Value, b: Value) -> Value {
        let lt = self.b.ins().icmp(IntCC::SignedLessThan, a, b);
        self.b.ins().select(lt, b, a)
    }

    /// `for i in lo..hi step step { body(i) }`: a header that tests, a body, an exit.
    pub fn for_range(&mut self, lo: Value, hi: Value, step: i64, mut body: impl FnMut(&mut Self, Value)) {
        let var = self.b.declare_var(I64);
        self.b.def_var(var, lo);
        let header = self.b.create_block();
        let block = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let i = self.b.use_var(var);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, hi);
        self.b.ins().brif(more, block, &[], exit, &[]);
        self.b.switch_to_block(block);
        // The body's only predecessor is the header, which is already filled.
        self.b.seal_block(block);
        body(self, i);
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.def_var(var, next);
        self.b.ins().jump(header, &[]);
        // Both of the header's predecessors (the entry jump, the back edge) exist now.
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        // The exit's only predecessor is the header.
        self.b.seal_block(exit);
    }

    /// `if cond { then() }`.
    pub fn when(&mut self, cond: Value, mut then: impl FnMut(&mut Self)) {
        let block = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(cond, block, &[], join, &[]);
        self.b.switch_to_block(block);
        // Only the branch above leads here.
        self.b.seal_block(block);
        then(self);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        // Both predecessors, the branch and the end of `then`, exist now.
        self.b.seal_block(join);
    }

    /// `v`, computed here and now. Cranelift's mid-end places a pure computation next to
    /// its uses, even inside a loop (a horizontal max was recomputed for every vector of
    /// the row); a trip through a stack slot ends the chain where it is emitted.
    pub fn pin(&mut self, v: Value) -> Value {
        let ty = self.b.func.dfg.value_type(v);
        let data = StackSlotData::new(StackSlotKind::ExplicitSlot, ty.bytes(), 4);
        let slot = self.b.create_sized_stack_slot(data);
        self.b.ins().stack_store(I64, v, slot, 0);
        self.b.ins().stack_load(I64, ty, slot, 0)
    }

    /// A mutable variable of type `ty` holding `init`.
    pub fn var(&mut self, ty: Type, init: Value) -> Variable {
        let v = self.b.declare_var(ty);
        self.b.def_var(v, init);
        v
    }

    /// The row-major multi-index of `flat` over `sizes` (constants), outermost first.
    pub fn unflatten(&mut self, flat: Value, sizes: &[usize]) -> Vec<Value> {
        let mut idx = vec![flat; sizes.len()];
        let mut rest = flat;
        for (i, &n) in sizes.iter().enumerate().rev() {
            if i == 0 {
                idx[0] = rest;
                break;
            }
            idx[i] = self.b.ins().urem_imm_u(rest, n as i64);
            rest = self.b.ins().udiv_imm_u(rest, n as i64);
        }
        idx
    }

    /// `Σ idx[i] * strides[i]` (elements).
    pub fn dot(&mut self, idx: &[Value], strides: &[usize]) -> Value {
        let mut acc = self.int(0);
        for (&i, &s) in idx.iter().zip(strides) {
            if s != 0 {
                let t = self.b.ins().imul_imm_s(i, s as i64);
                acc = self.b.ins().iadd(acc, t);
            }
        }
        acc
    }

    // ---- float math on 1 or 4 lanes -----------------------------------------------------

    fn is_vec(&self, v: Value) -> bool {
        self.b.func.dfg.value_type(v) == F32X4
    }

    /// A comparison as an all-ones/all-zeros mask the width of `x` (f32x4), or a bool (f32).
    pub fn cmp(&mut self, cc: FloatCC, x: Value, y: Value) -> Value {
        let c = self.b.ins().fcmp(cc, x, y);
        match self.is_vec(x) {
            true => self.b.ins().bitcast(F32X4, MemFlagsData::new(), c),
            false => c,
        }
    }

    /// `cond ? a : b` with `cond` from [`Emit::cmp`].
    pub fn pick(&mut self, cond: Value, a: Value, b: Value) -> Value {
        match self.is_vec(a) {
            true => self.b.ins().bitselect(cond, a, b),
            false => self.b.ins().select(cond, a, b),
        }
    }

    /// The larger of `a` and `b` (one `maxps`; no NaN handling).
    pub fn max(&mut self, a: Value, b: Value) -> Value {
        let gt = self.cmp(FloatCC::GreaterThan, a, b);
        self.pick(gt, a, b)
    }

    /// The largest lane of a vector.
    pub fn hmax(&mut self, v: Value) -> Value {
        let lanes: Vec<Value> = (0..4u8).map(|i| self.b.ins().extractlane(v, i)).collect();
        let a = self.max(lanes[0], lanes[1]);
        let b = self.max(lanes[2], lanes[3]);
        self.max(a, b)
    }

    /// The sum of the lanes of a vector.
    pub fn hsum(&mut self, v: Value) -> Value {
        let lanes: Vec<Value> = (0..4u8).map(|i| self.b.ins().extractlane(v, i)).collect();
        let a = self.b.ins().fadd(lanes[0], lanes[1]);
        let b = self.b.ins().fadd(lanes[2], lanes[3]);
        self.b.ins().fadd(a, b)
    }

    /// `1.0` where the comparison holds, else `0.0`, the width of `x`.
    pub fn cmp_value(&mut self, cc: FloatCC, x: Value, y: Value) -> Value {
        let w = if self.is_vec(x) { 4 } else { 1 };
        let c = self.cmp(cc, x, y);
        let (one, zero) = (self.splat(1.0, w), self.splat(0.0, w));
        self.pick(c, one, zero)
    }

    /// `e^x` on one lane, through the vector code.
    pub fn exp1(&mut self, x: Value) -> Value {
        let v = self.b.ins().splat(F32X4, x);
        let e = self.exp4(v);
        self.b.ins().extractlane(e, 0u8)
    }

    /// `e^x` on 1 or 4 lanes.
    pub fn exp(&mut self, x: Value) -> Value {
        match self.is_vec(x) {
            true => self.exp4(x),
            false => self.exp1(x),
        }
    }

    /// `e^x` on f32x4 over the whole float range. Above 89 `x` is clamped to 89, whose
    /// result overflows to infinity as every `x` above 88.72 does. `n` lies in [-150, 128],
    /// beyond the normal exponents, so `2^n` is applied as two normal factors `2^(n/2)`:
    /// the first product is exact and the second rounds once, to infinity above 88.72 and
    /// to a subnormal between -87.34 and -103.97, as the true value does.
    pub fn exp4(&mut self, x: Value) -> Value {
        let hi = self.splat(89.0, 4);
        let over = self.cmp(FloatCC::GreaterThan, x, hi);
        let x = self.b.ins().bitselect(over, hi, x);
        let (y, bits, under) = self.exp4_reduced(x);
        // `t`'s low mantissa bits hold `n`: its bits less the magic number's are `n`.
        let magic_bits = self.vconst(I32X4, EXP_MAGIC.to_bits());
        let n = self.b.ins().isub(bits, magic_bits);
        let half = self.b.ins().iconst(I32, 1);
        let n1 = self.b.ins().sshr(n, half);
        let n2 = self.b.ins().isub(n, n1);
        let y = self.mul_pow2(y, n1);
        let y = self.zero_where(under, y);
        self.mul_pow2(y, n2)
    }

    /// `y` with its lanes where `under` holds set to 0: below -104 `e^x` rounds to 0, and
    /// giving that 0 before the last product, not from it, keeps x86 off its microcode
    /// assist for a product that underflows (about 100 times slower than a normal one, and
    /// taken on every key a mask sets to `-inf` or `finfo.min`).
    fn zero_where(&mut self, under: Value, y: Value) -> Value {
        let zero = self.splat(0.0, 4);
        self.b.ins().bitselect(under, zero, y)
    }

    /// `e^x` on 1 or 4 lanes for `x <= 0`, as the attention kernel's probabilities and
    /// rescale factors take it: `n` lies in [-150, 0], so `2^(n + 25)` is a normal factor
    /// and the product with it exact; the constant `2^-25` then rounds once. A result
    /// below the smallest normal float (`x` below about -87.34) is flushed to 0 before that
    /// product: a subnormal probability costs x86 a microcode assist (about 100 times a
    /// normal product) in this product and in each multiply-add of `p v` that reads it
    /// (1.3 % of the probabilities of MiniLM's first layer, which then ran 1.8 times as
    /// long; BENCHMARKS.md), and what it would add to the output is below `2^-126` times
    /// the values, where the row's largest probability, 1, adds the values themselves.
    pub fn exp_nonpositive(&mut self, x: Value) -> Value {
        let e = self.exp_nonpositive_scaled(x);
        let w = if self.is_vec(x) { LANES } else { 1 };
        let smallest = self.splat(EXP_NORMAL_SCALED, w);
        let tiny = self.cmp(FloatCC::LessThan, e, smallest);
        let zero = self.splat(0.0, w);
        let e = self.pick(tiny, zero, e);
        let unscale = self.splat(EXP_SCALE.recip(), w);
        self.b.ins().fmul(e, unscale)
    }

    /// `e^x · EXP_SCALE` for `x <= 0`, exact up to `e^x`'s rounding, never subnormal (and
    /// exactly 0 below -104, where `e^x` rounds to 0): a softmax that divides by a sum of
    /// these gets its subnormal probabilities at that one rounding, for the cost of an
    /// `exp` that flushes them to 0.
    pub fn exp_nonpositive_scaled(&mut self, x: Value) -> Value {
        let v = match self.is_vec(x) {
            true => x,
            false => self.b.ins().splat(F32X4, x),
        };
        let (y, bits, under) = self.exp4_reduced(v);
        let y = self.zero_where(under, y);
        // Shifted into the exponent field, `t`'s bits leave only `n`'s.
        let shift = self.b.ins().iconst(I32, 23);
        let e = self.b.ins().ishl(bits, shift);
        let bias = self.vconst(I32X4, (127 + EXP_SCALE_LOG2) << 23);
        let e = self.b.ins().iadd(e, bias);
        let pow = self.b.ins().bitcast(F32X4, MemFlagsData::new(), e);
        let e = self.b.ins().fmul(y, pow);
        match self.is_vec(x) {
            true => e,
            false => self.b.ins().extractlane(e, 0u8),
        }
    }

    /// Cephes' `expf` for `x <= 89` up to the scaling: `x = n ln2 + r` with `n` rounded by
    /// the 1.5·2^23 trick, `ln2` split in two for an exact reduction, and a degree-5
    /// polynomial for `e^r`; returns `e^r`, the bits of `t = n + 1.5·2^23` and the lanes
    /// below -104, where every result rounds to 0: `x` is clamped there (so `-inf` is
    /// finite) and the caller zeroes them. NaN passes through every step. Each `fma` takes
    /// a single-use value first, which x86 may overwrite without a copy.
    fn exp4_reduced(&mut self, x: Value) -> (Value, Value, Value) {
        let lo = self.splat(EXP_LO, 4);
        let under = self.cmp(FloatCC::LessThan, x, lo);
        let x = self.b.ins().bitselect(under, lo, x);
        let log2e = self.splat(std::f32::consts::LOG2_E, 4);
        let magic = self.splat(EXP_MAGIC, 4);
        let t = self.b.ins().fma(log2e, x, magic);
        let magic = self.splat(EXP_MAGIC, 4);
        let n = self.b.ins().fsub(t, magic);
        let c1 = self.splat(EXP_LN2[0], 4);
        let r = self.b.ins().fma(c1, n, x);
        let c2 = self.splat(EXP_LN2[1], 4);
        let r = self.b.ins().fma(c2, n, r);
        let mut p = self.splat(EXP_POLY[0], 4);
        for &c in &EXP_POLY[1..] {
            let c = self.splat(c, 4);
            p = self.b.ins().fma(p, r, c);
        }
        let r2 = self.b.ins().fmul(r, r);
        let y = self.b.ins().fma(p, r2, r);
        let one = self.splat(1.0, 4);
        let y = self.b.ins().fadd(y, one);
        let bits = self.b.ins().bitcast(I32X4, MemFlagsData::new(), t);
        (y, bits, under)
    }

    /// `y · 2^n` for `n` in the normal exponents, -126 to 127.
    fn mul_pow2(&mut self, y: Value, n: Value) -> Value {
        let bias = self.vconst(I32X4, 127);
        let e = self.b.ins().iadd(n, bias);
        let shift = self.b.ins().iconst(I32, 23);
        let e = self.b.ins().ishl(e, shift);
        let pow = self.b.ins().bitcast(F32X4, MemFlagsData::new(), e);
        self.b.ins().fmul(y, pow)
    }

    /// `f(args)` on one lane. `f` is imported into the function on first use, so the IR
    /// of a kernel names only the functions it calls.
    pub fn call(&mut self, f: Call, args: &[Value]) -> Value {
        let i = Call::ALL
            .iter()
            .position(|&c| c == f)
            .expect("every call is listed");
        let func_ref = match self.imported[i] {
            Some(r) => r,
            None => {
                let (id, sig) = &self.calls[i];
                let r = self.import(*id, sig);
                self.imported[i] = Some(r);
                r
            }
        };
        let inst = self.b.ins().call(func_ref, args);
        self.b.inst_results(inst)[0]
    }

    /// The module's function `id` of signature `sig`, imported into this function.
    fn import(&mut self, id: FuncId, sig: &Signature) -> FuncRef {
        import(self.b.func, id, sig)
    }

    /// Calls `attnc_sgemm(m, n, k, c, c_rs, c_cs, a, a_rs, a_cs, b, b_rs, b_cs, alpha, acc)`.
    pub fn sgemm(&mut self, args: [Value; 14]) {
        self.b.ins().call(self.sgemm, &args);
    }

    /// Calls `attnc_sgemm_packed(m, n, k, c, c_rs, c_cs, a, a_rs, a_cs, b, alpha, width,
    /// bias, bias_cs, residual, residual_rs, relu)`, `b` the first element of the tile's
    /// panels of `width` columns ([`crate::kernel::Gemm::packed`]), `bias` the tile's first
    /// column's bias and `residual` its first element of a residual, each or null.
    pub fn sgemm_packed(&mut self, args: [Value; 17]) {
        let (decl, imported) = self.packed;
        let func_ref = imported.unwrap_or_else(|| self.import(decl.0, &decl.1));
        self.packed.1 = Some(func_ref);
        self.b.ins().call(func_ref, &args);
    }

    /// An optional shim's reference in this function: `imported`, or its declaration
    /// imported now. Called only where the shim is bound (its `has_..` said so).
    fn optional_shim(
        &mut self,
        (decl, imported): (Option<&(FuncId, Signature)>, Option<FuncRef>),
    ) -> FuncRef {
        imported.unwrap_or_else(|| {
            let (id, sig) = decl.expect("an optional shim is called only where it is bound");
            self.import(*id, sig)
        })
    }

    /// Whether the attention tile's softmax runs in the native shim ([`Emit::softmax_tile`]).
    pub fn has_softmax_tile(&self) -> bool {
        self.softmax.0.is_some()
    }

    /// Calls `attnc_softmax_tile(rows, cols, tile, tile_rs, max, sum, out, out_rs, out_cs,
    /// dv, keys, added, added_rs, later, op, fill)`; only where [`Emit::has_softmax_tile`].
    pub fn softmax_tile(&mut self, args: [Value; 16]) {
        let func_ref = self.optional_shim(self.softmax);
        self.softmax.1 = Some(func_ref);
        self.b.ins().call(func_ref, &args);
    }

    /// Whether GEMM epilogues of the shim's forms run in it ([`Emit::epilogue_tile`]).
    pub fn has_epilogue_tile(&self) -> bool {
        self.epilogue.0.is_some()
    }

    /// Calls `attnc_epilogue_tile(act, rows, cols, c, c_rs, bias, pre, pre_rs, second,
    /// post, post_rs, k0, k1, k2)`; only where [`Emit::has_epilogue_tile`].
    pub fn epilogue_tile(&mut self, args: [Value; 14]) {
        let func_ref = self.optional_shim(self.epilogue);
        self.epilogue.1 = Some(func_ref);
        self.b.ins().call(func_ref, &args);
    }
}
