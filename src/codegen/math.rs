//! The primitives of a formula ([`Expr`]) on 1 or 4 lanes, each with PyTorch's float32
//! meaning: instructions where Cranelift has them (arithmetic, comparisons, `sqrt`, `abs`,
//! NaN-propagating `maximum`), the vector polynomial of [`Emit::exp`], and otherwise a call
//! per lane into a Rust function ([`Call`]) with libm's accuracy over the whole range.

use super::emit::Emit;
use crate::ir::CmpOp;
use crate::kernel::{Binary, Expr, Unary};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::types::F32X4;
use cranelift_codegen::ir::{InstBuilder, Value};

/// A float function that JIT code calls once per lane, by its symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Tanh,
    Sigmoid,
    Erf,
    Log,
    Sin,
    Cos,
    Pow,
}

impl Call {
    pub const ALL: [Call; 7] = [
        Call::Tanh,
        Call::Sigmoid,
        Call::Erf,
        Call::Log,
        Call::Sin,
        Call::Cos,
        Call::Pow,
    ];

    pub fn symbol(self) -> &'static str {
        match self {
            Call::Tanh => "attnc_tanhf",
            Call::Sigmoid => "attnc_sigmoidf",
            Call::Erf => "attnc_erff",
            Call::Log => "attnc_logf",
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
            Call::Tanh => tanhf as F1 as *const u8,
            Call::Sigmoid => sigmoidf as F1 as *const u8,
            Call::Erf => erff as F1 as *const u8,
            Call::Log => logf as F1 as *const u8,
            Call::Sin => sinf as F1 as *const u8,
            Call::Cos => cosf as F1 as *const u8,
            Call::Pow => powf as F2 as *const u8,
        }
    }
}

extern "C" fn tanhf(x: f32) -> f32 {
    x.tanh()
}

/// PyTorch's formula: `exp(-x)` overflows to `inf` below about -88.7, giving 0.
extern "C" fn sigmoidf(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

extern "C" fn erff(x: f32) -> f32 {
    libm::erff(x)
}

extern "C" fn logf(x: f32) -> f32 {
    x.ln()
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
        Expr::Unary(op, a) => unary(e, op, arg(a)),
        Expr::Binary(Binary::Pow, a, b) => match expr[b] {
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

pub fn unary(e: &mut Emit, op: Unary, x: Value) -> Value {
    let w = width(e, x);
    match op {
        Unary::Neg => e.b.ins().fneg(x),
        Unary::Abs => e.b.ins().fabs(x),
        Unary::Sqrt => e.b.ins().sqrt(x),
        Unary::Rsqrt => {
            let root = e.b.ins().sqrt(x);
            let one = e.splat(1.0, w);
            e.b.ins().fdiv(one, root)
        }
        Unary::Exp => e.exp(x),
        Unary::Not => {
            let zero = e.splat(0.0, w);
            e.cmp_value(FloatCC::Equal, x, zero)
        }
        Unary::Log => per_lane(e, Call::Log, &[x]),
        Unary::Tanh => per_lane(e, Call::Tanh, &[x]),
        Unary::Sigmoid => per_lane(e, Call::Sigmoid, &[x]),
        Unary::Erf => per_lane(e, Call::Erf, &[x]),
        Unary::Sin => per_lane(e, Call::Sin, &[x]),
        Unary::Cos => per_lane(e, Call::Cos, &[x]),
    }
}

pub fn binary(e: &mut Emit, op: Binary, a: Value, b: Value) -> Value {
    match op {
        Binary::Add => e.b.ins().fadd(a, b),
        Binary::Sub => e.b.ins().fsub(a, b),
        Binary::Mul => e.b.ins().fmul(a, b),
        Binary::Div => e.b.ins().fdiv(a, b),
        Binary::Pow => per_lane(e, Call::Pow, &[a, b]),
        Binary::Maximum => extremum(e, FloatCC::GreaterThanOrEqual, a, b),
        Binary::Minimum => extremum(e, FloatCC::LessThanOrEqual, a, b),
        Binary::And | Binary::Or => {
            let w = width(e, a);
            let zero = e.splat(0.0, w);
            let x = e.cmp(FloatCC::NotEqual, a, zero);
            let y = e.cmp(FloatCC::NotEqual, b, zero);
            let both = match op {
                Binary::And => e.b.ins().band(x, y),
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
        -0.5 => unary(e, Unary::Rsqrt, x),
        _ => {
            let c = e.splat(c, w);
            per_lane(e, Call::Pow, &[x, c])
        }
    }
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
