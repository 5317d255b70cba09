//! The primitives of a formula ([`Expr`]) on 1 or 4 lanes, each with PyTorch's float32
//! meaning: instructions where Cranelift has them (arithmetic, comparisons, `sqrt`, `abs`,
//! NaN-propagating `maximum`), f32x4 polynomials with a libm's range handling (`exp`,
//! `tanh`, `erf`, `sigmoid`, `log`), and otherwise a call per lane into a Rust function
//! ([`Call`]).

use super::emit::Emit;
use crate::ir::CmpOp;
use crate::kernel::{BinaryOp, Expr, UnaryOp};
use crate::ops::prim::LONG_LIMIT;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::types::{F32X4, I32, I32X4};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};

/// A float function that JIT code calls once per lane, by its symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Sin,
    Cos,
    Pow,
}

impl Call {
    pub const ALL: [Call; 3] = [Call::Sin, Call::Cos, Call::Pow];

    pub fn symbol(self) -> &'static str {
        match self {
            Call::Sin => "attnc_sinf",
            Call::Cos => "attnc_cosf",
            Call::Pow => "attnc_powf",
        }
    }

    /// How many f32 arguments it takes (it returns one f32).
    pub fn arity(self) -> usize {
        match self {
            Call::Pow => 2,
            _ => 1,
        }
    }

    /// The address of the Rust function, for the JIT's symbol table.
    pub fn address(self) -> *const u8 {
        type F1 = extern "C" fn(f32) -> f32;
        type F2 = extern "C" fn(f32, f32) -> f32;
        match self {
            Call::Sin => sinf as F1 as *const u8,
            Call::Cos => cosf as F1 as *const u8,
            Call::Pow => powf as F2 as *const u8,
        }
    }
}

extern "C" fn sinf(x: f32) -> f32 {
    x.sin()
}

extern "C" fn cosf(x: f32) -> f32 {
    x.cos()
}

extern "C" fn powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}

/// The float condition code of a comparison (`!=` is true for NaN, as in Rust).
pub fn float_cc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
    }
}

/// The formula's value on `w` lanes, given each input's lanes. `known[i]`, where present,
/// is node `i`'s value already computed (a row kernel's per-row values); a formula with
/// [`Expr::Reduced`] nodes must have them all known.
pub fn eval(e: &mut Emit, expr: &[Expr], inputs: &[Value], known: &[Option<Value>], w: usize) -> Value {
    let mut v: Vec<Value> = Vec::with_capacity(expr.len());
    for (i, n) in expr.iter().enumerate() {
        let x = match known.get(i).copied().flatten() {
            Some(x) => x,
            None => node(e, expr, n, &|a| v[a], inputs, w),
        };
        v.push(x);
    }
    *v.last().expect("a formula has a node")
}

/// The value of node `n` of `expr` on `w` lanes; `arg(a)` is the value of node `a`.
pub fn node(
    e: &mut Emit,
    expr: &[Expr],
    n: &Expr,
    arg: &dyn Fn(usize) -> Value,
    inputs: &[Value],
    w: usize,
) -> Value {
    match *n {
        Expr::Input(i) => inputs[i],
        Expr::Const(c) => e.splat(c, w),
        Expr::Reduced(k) => unreachable!("stage {k}'s result is computed by the row kernel"),
        Expr::Index(a) => unreachable!("the index along axis {a} is computed by the map kernel"),
        Expr::Unary(op, a) => unary(e, op, arg(a)),
        Expr::Binary(BinaryOp::Pow, a, b) => match expr[b] {
            Expr::Const(c) => pow_const(e, arg(a), c),
            _ => per_lane(e, Call::Pow, &[arg(a), arg(b)]),
        },
        Expr::Binary(op, a, b) => binary(e, op, arg(a), arg(b)),
        Expr::Compare(op, a, b) => e.cmp_value(float_cc(op), arg(a), arg(b)),
        Expr::Select(c, a, b) => {
            let zero = e.splat(0.0, w);
            let set = e.cmp(FloatCC::NotEqual, arg(c), zero);
            e.pick(set, arg(a), arg(b))
        }
    }
}

fn width(e: &Emit, x: Value) -> usize {
    match e.b.func.dfg.value_type(x) == F32X4 {
        true => 4,
        false => 1,
    }
}

pub fn unary(e: &mut Emit, op: UnaryOp, x: Value) -> Value {
    let w = width(e, x);
    match op {
        UnaryOp::Neg => e.b.ins().fneg(x),
        UnaryOp::Abs => e.b.ins().fabs(x),
        UnaryOp::Sqrt => e.b.ins().sqrt(x),
        UnaryOp::Rsqrt => {
            let root = e.b.ins().sqrt(x);
            let one = e.splat(1.0, w);
            e.b.ins().fdiv(one, root)
        }
        UnaryOp::Exp => e.exp(x),
        UnaryOp::Not => {
            let zero = e.splat(0.0, w);
            e.cmp_value(FloatCC::Equal, x, zero)
        }
        UnaryOp::Log => on_vector(e, x, log4),
        UnaryOp::Tanh => on_vector(e, x, tanh4),
        UnaryOp::Sigmoid => on_vector(e, x, sigmoid4),
        UnaryOp::Erf => on_vector(e, x, erf4),
        UnaryOp::Sin => per_lane(e, Call::Sin, &[x]),
        UnaryOp::Cos => per_lane(e, Call::Cos, &[x]),
        UnaryOp::Long => {
            let toward_zero = e.b.ins().trunc(x);
            let zero = e.splat(0.0, w);
            let unsigned = e.b.ins().fadd(toward_zero, zero);
            let size = e.b.ins().fabs(x);
            let limit = e.splat(LONG_LIMIT, w);
            let fits = e.cmp(FloatCC::LessThan, size, limit);
            let min = e.splat(-LONG_LIMIT, w);
            e.pick(fits, unsigned, min)
        }
    }
}

pub fn binary(e: &mut Emit, op: BinaryOp, a: Value, b: Value) -> Value {
    match op {
        BinaryOp::Add => e.b.ins().fadd(a, b),
        BinaryOp::Sub => e.b.ins().fsub(a, b),
        BinaryOp::Mul => e.b.ins().fmul(a, b),
        BinaryOp::Div => e.b.ins().fdiv(a, b),
        BinaryOp::Pow => per_lane(e, Call::Pow, &[a, b]),
        BinaryOp::Maximum => extremum(e, FloatCC::GreaterThanOrEqual, a, b),
        BinaryOp::Minimum => extremum(e, FloatCC::LessThanOrEqual, a, b),
        BinaryOp::And | BinaryOp::Or => {
            let w = width(e, a);
            let zero = e.splat(0.0, w);
            let x = e.cmp(FloatCC::NotEqual, a, zero);
            let y = e.cmp(FloatCC::NotEqual, b, zero);
            let both = match op {
                BinaryOp::And => e.b.ins().band(x, y),
                _ => e.b.ins().bor(x, y),
            };
            let (one, zero) = (e.splat(1.0, w), e.splat(0.0, w));
            e.pick(both, one, zero)
        }
    }
}

/// `torch.maximum` (`keep` is `>=`) or `torch.minimum` (`<=`): `a` where `a keep b`, else
/// `b`, and NaN where either is NaN.
fn extremum(e: &mut Emit, keep: FloatCC, a: Value, b: Value) -> Value {
    let first = e.cmp(keep, a, b);
    let pick = e.pick(first, a, b);
    let nan = e.cmp(FloatCC::Unordered, a, b);
    let either = e.b.ins().fadd(a, b);
    e.pick(nan, either, pick)
}

/// `x ** c` as PyTorch computes a power with a constant exponent: the exponents it
/// special-cases exactly as it does, every other one through `powf`.
fn pow_const(e: &mut Emit, x: Value, c: f32) -> Value {
    let w = width(e, x);
    let one = e.splat(1.0, w);
    match c {
        0.0 => one,
        1.0 => x,
        2.0 => e.b.ins().fmul(x, x),
        3.0 => {
            let sq = e.b.ins().fmul(x, x);
            e.b.ins().fmul(sq, x)
        }
        -1.0 => e.b.ins().fdiv(one, x),
        -2.0 => {
            let sq = e.b.ins().fmul(x, x);
            e.b.ins().fdiv(one, sq)
        }
        0.5 => e.b.ins().sqrt(x),
        -0.5 => unary(e, UnaryOp::Rsqrt, x),
        _ => {
            let c = e.splat(c, w);
            per_lane(e, Call::Pow, &[x, c])
        }
    }
}

/// `f` on 1 or 4 lanes through its f32x4 form.
fn on_vector(e: &mut Emit, x: Value, f: fn(&mut Emit, Value) -> Value) -> Value {
    if width(e, x) == 4 {
        return f(e, x);
    }
    let v = e.b.ins().splat(F32X4, x);
    let y = f(e, v);
    e.b.ins().extractlane(y, 0u8)
}

/// `c[0] z^k + c[1] z^(k-1) + .. + c[k]` on f32x4 by Horner's rule, one `fma` a step.
fn horner(e: &mut Emit, z: Value, coeffs: &[f32]) -> Value {
    let mut p = e.splat(coeffs[0], 4);
    for &c in &coeffs[1..] {
        let c = e.splat(c, 4);
        p = e.b.ins().fma(p, z, c);
    }
    p
}

/// `r` with the sign of `x`, for an `r` whose sign bit is clear.
fn with_sign_of(e: &mut Emit, r: Value, x: Value) -> Value {
    let sign_bit = e.splat(-0.0, 4);
    let sign = e.b.ins().band(x, sign_bit);
    e.b.ins().bor(r, sign)
}

/// `min(a, hi)` for `a >= 0`, NaN kept (one `minps`-like select).
fn at_most(e: &mut Emit, a: Value, hi: f32) -> Value {
    let hi = e.splat(hi, 4);
    let over = e.cmp(FloatCC::GreaterThan, a, hi);
    e.b.ins().bitselect(over, hi, a)
}

/// Cephes' `tanhf` on f32x4: `x + x³ P(x²)` below 0.625, `1 - 2 / (e^2|x| + 1)` with the
/// sign of `x` above (|x| clamped at 10; beyond 9.01 the result rounds to ±1 in float32,
/// so `1 + tanh` of a large negative argument is exactly 0, as PyTorch's). Within
/// `2^-23 |tanh x|` of the true value (`tests/kernels.rs` sweeps every magnitude); NaN
/// stays NaN, a subnormal or signed zero comes back unchanged.
fn tanh4(e: &mut Emit, x: Value) -> Value {
    const P: [f32; 5] = [
        -0.005_704_988_7,
        0.020_639_088,
        -0.053_739_715,
        0.133_314_42,
        -0.333_332_8,
    ];
    let z = e.b.ins().fmul(x, x);
    let p = horner(e, z, &P);
    let zx = e.b.ins().fmul(z, x);
    let small = e.b.ins().fma(zx, p, x);
    let a = e.b.ins().fabs(x);
    let a = at_most(e, a, 10.0);
    let two_a = e.b.ins().fadd(a, a);
    let ex = e.exp4(two_a);
    let one = e.splat(1.0, 4);
    let d = e.b.ins().fadd(ex, one);
    let two = e.splat(2.0, 4);
    let q = e.b.ins().fdiv(two, d);
    let big = e.b.ins().fsub(one, q);
    let big = with_sign_of(e, big, x);
    let a = e.b.ins().fabs(x);
    let cut = e.splat(0.625, 4);
    let below = e.cmp(FloatCC::LessThan, a, cut);
    e.b.ins().bitselect(below, small, big)
}

/// `erf4`'s polynomials, `P` below 1 and `Q` above: shared with the native GEMM epilogue
/// (`runtime/native/epilogue.rs`), which computes the same bits on 512-bit vectors.
pub(crate) const ERF_SMALL: [f32; 7] = [
    7.898_139e-5,
    -0.000_802_433_5,
    0.005_190_051_6,
    -0.026_854_808,
    0.112_836_12,
    -0.376_126_3,
    0.128_379_17,
];
pub(crate) const ERF_LARGE: [f32; 9] = [
    -0.012_078_412,
    0.041_466_44,
    -0.003_244_636_3,
    -0.210_605_46,
    0.474_972_55,
    -0.462_063_1,
    0.039_473_75,
    0.559_415_4,
    0.000_246_990_27,
];

/// `erf` on f32x4, odd, on `a = |x|` clamped at 4 (where it is 1 in float32): below 1,
/// `a + a P(a²)`; above, `1 - e^(-a²) Q(1 / a)`. `P` (degree 6) and `Q` (degree 8) are
/// least-squares fits in relative error; the result is within `2^-23 |erf x|` of the true
/// value (`tests/kernels.rs` sweeps every magnitude). NaN stays NaN, a subnormal or signed
/// zero comes back as the true value.
fn erf4(e: &mut Emit, x: Value) -> Value {
    let a = e.b.ins().fabs(x);
    let a = at_most(e, a, 4.0);
    let z = e.b.ins().fmul(a, a);
    let p = horner(e, z, &ERF_SMALL);
    let small = e.b.ins().fma(p, a, a);
    let one = e.splat(1.0, 4);
    let t = e.b.ins().fdiv(one, a);
    let q = horner(e, t, &ERF_LARGE);
    let neg_z = e.b.ins().fneg(z);
    let ex = e.exp4(neg_z);
    let neg_ex = e.b.ins().fneg(ex);
    let big = e.b.ins().fma(neg_ex, q, one);
    let below = e.cmp(FloatCC::LessThan, a, one);
    let r = e.b.ins().bitselect(below, small, big);
    with_sign_of(e, r, x)
}

/// `sigmoid` on f32x4 as PyTorch computes it, `1 / (1 + e^-x)` in float32, over the whole
/// range: `exp4` gives the large `e^-x` below -87 (so subnormal results) and infinity
/// below -88.72284 (so 0), as PyTorch's `exp` does.
fn sigmoid4(e: &mut Emit, x: Value) -> Value {
    let neg = e.b.ins().fneg(x);
    let ex = e.exp4(neg);
    let one = e.splat(1.0, 4);
    let d = e.b.ins().fadd(ex, one);
    e.b.ins().fdiv(one, d)
}

/// Cephes' `logf` on f32x4: `x = m 2^k` with `m` in [√½, √2) from the bits of `x`
/// (subnormals scaled by 2^25 first), `log(m)` by a degree-8 polynomial in `m - 1`, and
/// `k ln 2` added in two parts. `log(0)` is `-inf`, `log(inf)` is `inf`, and a negative `x`
/// or NaN gives NaN, as in libm.
fn log4(e: &mut Emit, x: Value) -> Value {
    const P: [f32; 9] = [
        7.037_683_6e-2,
        -1.151_461e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_4e-1,
        -2.499_999_4e-1,
        0.333_333_3,
    ];
    let tiny = e.splat(f32::MIN_POSITIVE, 4);
    let sub = e.cmp(FloatCC::LessThan, x, tiny);
    let scale = e.splat(33_554_432.0, 4); // 2^25
    let scaled = e.b.ins().fmul(x, scale);
    let y = e.b.ins().bitselect(sub, scaled, x);
    let bits = e.b.ins().bitcast(I32X4, MemFlagsData::new(), y);
    // The exponent of `y`, as for a mantissa in [0.5, 1).
    let shift = e.b.ins().iconst(I32, 23);
    let biased = e.b.ins().ushr(bits, shift);
    let bias = e.vconst(I32X4, 126);
    let k = e.b.ins().isub(biased, bias);
    let k = e.b.ins().fcvt_from_sint(F32X4, k);
    let minus25 = e.splat(-25.0, 4);
    let zero = e.splat(0.0, 4);
    let adjust = e.b.ins().bitselect(sub, minus25, zero);
    let k = e.b.ins().fadd(k, adjust);
    let mantissa = e.vconst(I32X4, 0x807f_ffff);
    let m = e.b.ins().band(bits, mantissa);
    let half = e.vconst(I32X4, 0x3f00_0000);
    let m = e.b.ins().bor(m, half);
    let m = e.b.ins().bitcast(F32X4, MemFlagsData::new(), m);
    // m in [0.5, 1): below √½ take 2m - 1 and k - 1, else m - 1.
    let root_half = e.splat(std::f32::consts::FRAC_1_SQRT_2, 4);
    let low = e.cmp(FloatCC::LessThan, m, root_half);
    let one = e.splat(1.0, 4);
    let twice = e.b.ins().fadd(m, m);
    let m = e.b.ins().bitselect(low, twice, m);
    let m = e.b.ins().fsub(m, one);
    let k_low = e.b.ins().fsub(k, one);
    let k = e.b.ins().bitselect(low, k_low, k);
    let z = e.b.ins().fmul(m, m);
    let p = horner(e, m, &P);
    let pm = e.b.ins().fmul(p, m);
    let y = e.b.ins().fmul(pm, z);
    let c2 = e.splat(-2.121_944_4e-4, 4);
    let y = e.b.ins().fma(c2, k, y);
    let minus_half = e.splat(-0.5, 4);
    let y = e.b.ins().fma(minus_half, z, y);
    let r = e.b.ins().fadd(m, y);
    let c1 = e.splat(0.693_359_4, 4);
    let r = e.b.ins().fma(c1, k, r);
    // The edges: 0 gives -inf, inf gives inf, below 0 and NaN give NaN.
    let ninf = e.splat(f32::NEG_INFINITY, 4);
    let is_zero = e.cmp(FloatCC::Equal, x, zero);
    let r = e.b.ins().bitselect(is_zero, ninf, r);
    let inf = e.splat(f32::INFINITY, 4);
    let is_inf = e.cmp(FloatCC::Equal, x, inf);
    let r = e.b.ins().bitselect(is_inf, inf, r);
    let nan = e.splat(f32::NAN, 4);
    let bad = e.cmp(FloatCC::UnorderedOrLessThan, x, zero);
    e.b.ins().bitselect(bad, nan, r)
}

/// `f(args..)` computed one lane at a time by a call.
fn per_lane(e: &mut Emit, f: Call, args: &[Value]) -> Value {
    if width(e, args[0]) == 1 {
        return e.call(f, args);
    }
    let mut out: Option<Value> = None;
    for lane in 0..4u8 {
        let lanes: Vec<Value> = args.iter().map(|&a| e.b.ins().extractlane(a, lane)).collect();
        let y = e.call(f, &lanes);
        out = Some(match out {
            None => e.b.ins().scalar_to_vector(F32X4, y),
            Some(v) => e.b.ins().insertlane(v, y, lane),
        });
    }
    out.expect("four lanes")
}
