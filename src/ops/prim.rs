//! The elementwise primitives: the scalar ops every backend implements, each with its
//! name (in the IR text, the e-graph and `--stage kernels`) and its float32 meaning.
//!
//! Every elementwise op of the language is one of these or decomposes into them (see
//! [`super::table`]). The meaning given here is PyTorch's on float32, NaN and infinity
//! included; the reference interpreter and constant folding evaluate it, the native
//! backend generates its own code for each primitive and is tested against it.

use std::fmt;
use std::str::FromStr;

/// Declares a primitive enum: one line per op, `Variant "name" meaning`.
macro_rules! primitives {
    (
        $(#[$meta:meta])* $vis:vis enum $name:ident ($($arg:ident),+) {
            $($(#[$doc:meta])* $variant:ident $text:literal => $meaning:expr,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every primitive of this arity, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant),*];

            /// The name in the IR text, the e-graph and the kernel text.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// PyTorch's float32 meaning.
            pub fn eval(self, $($arg: f32),+) -> f32 {
                match self {
                    $($name::$variant => $meaning,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<$name, String> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|op| op.name() == s)
                    .ok_or_else(|| format!("not a {}: {s}", stringify!($name)))
            }
        }
    };
}

/// 2^63: the first float32 beyond int64.
pub const LONG_LIMIT: f32 = 9_223_372_036_854_775_808.0;

primitives! {
    /// Elementwise ops of one float operand.
    pub enum UnaryOp (x) {
        Neg "neg" => -x,
        Abs "abs" => x.abs(),
        Sqrt "sqrt" => x.sqrt(),
        /// `1 / sqrt(x)`: `inf` at 0, NaN below.
        Rsqrt "rsqrt" => 1.0 / x.sqrt(),
        Exp "exp" => x.exp(),
        /// The natural logarithm: `-inf` at 0, NaN below.
        Log "log" => x.ln(),
        Tanh "tanh" => x.tanh(),
        /// `1 / (1 + exp(-x))`, as ATen computes it for float32.
        Sigmoid "sigmoid" => 1.0 / (1.0 + (-x).exp()),
        /// The error function (`libm`'s `erff`, which glibc's `erff` agrees with).
        Erf "erf" => libm::erff(x),
        Sin "sin" => x.sin(),
        Cos "cos" => x.cos(),
        /// `~` on a boolean (stored as 0.0/1.0): 1.0 where `x` is 0, else 0.0.
        Not "not" => f32::from(u8::from(x == 0.0)),
        /// float32 to int64 (`.long()`) as PyTorch converts on the CPU: toward zero, and
        /// NaN, the infinities and values beyond int64 to its minimum, -2^63. An integer
        /// has no sign of zero: `-0.5` gives `+0`.
        Long "long" => if x.abs() < LONG_LIMIT { x.trunc() + 0.0 } else { -LONG_LIMIT },
    }
}

primitives! {
    /// Elementwise ops of two float operands, with PyTorch broadcasting.
    pub enum BinaryOp (a, b) {
        Add "add" => a + b,
        Sub "sub" => a - b,
        Mul "mul" => a * b,
        Div "div" => a / b,
        /// `torch.pow`: C's `powf` (`pow(x, 0) = 1` even for NaN, `pow(-8, 1/3)` is NaN).
        Pow "pow" => a.powf(b),
        /// `torch.maximum`: NaN if either side is NaN; of two zeros, the left one.
        Maximum "maximum" => if a.is_nan() || b.is_nan() { f32::NAN } else if a >= b { a } else { b },
        /// `torch.minimum`: NaN if either side is NaN; of two zeros, the left one.
        Minimum "minimum" => if a.is_nan() || b.is_nan() { f32::NAN } else if a <= b { a } else { b },
        /// `&` of booleans (stored as 0.0/1.0; anything but 0 counts as true).
        And "and" => f32::from(u8::from(a != 0.0 && b != 0.0)),
        /// `|` of booleans.
        Or "or" => f32::from(u8::from(a != 0.0 || b != 0.0)),
    }
}

impl UnaryOp {
    /// Whether the op takes and gives booleans (`~`) rather than floats.
    pub fn is_logical(self) -> bool {
        self == UnaryOp::Not
    }
}

impl BinaryOp {
    /// The operator the op is written with between its operands, for the four arithmetic
    /// ones (`a + b` in the kernel text).
    pub fn infix(self) -> Option<&'static str> {
        match self {
            BinaryOp::Add => Some("+"),
            BinaryOp::Sub => Some("-"),
            BinaryOp::Mul => Some("*"),
            BinaryOp::Div => Some("/"),
            _ => None,
        }
    }

    /// Whether the op takes and gives booleans (`&`, `|`) rather than floats.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }
}

/// How a reduction combines a row: `sum`, `amax`, `amin`. Every other reduction of the
/// language (`mean`, `var`, `std`, the norms) decomposes into these and elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub const ALL: &[ReduceOp] = &[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "amax",
            ReduceOp::Min => "amin",
        }
    }

    /// The value of an empty row: 0 for a sum, -inf/inf for `amax`/`amin` (PyTorch refuses
    /// those on an empty axis; the checker proves the axis is not empty).
    pub fn identity(self) -> f32 {
        match self {
            ReduceOp::Sum => 0.0,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
        }
    }

    /// One step of the reduction: NaN anywhere in a row makes `amax`/`amin` NaN.
    pub fn combine(self, acc: f32, x: f32) -> f32 {
        match self {
            ReduceOp::Sum => acc + x,
            ReduceOp::Max => BinaryOp::Maximum.eval(acc, x),
            ReduceOp::Min => BinaryOp::Minimum.eval(acc, x),
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = String;
    fn from_str(s: &str) -> Result<ReduceOp, String> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|op| op.name() == s)
            .ok_or_else(|| format!("not a reduction: {s}"))
    }
}

#[cfg(test)]
mod tests;
