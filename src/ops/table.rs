//! Every op a program can call, described once: its names, PyTorch's parameters in
//! PyTorch's order with their defaults, and its rule.
//!
//! The checker binds a call's arguments against [`OpDef::params`] (positional first, then
//! keywords; E0206 for an unknown, repeated or doubly given one), fills in the defaults, and
//! runs the op's [`Rule`]. An elementwise primitive's rule is its [`UnaryOp`]/[`BinaryOp`]
//! itself, so the checker, the interpreter, the e-graph and the lowering all handle it from
//! the primitive alone. Every other op builds IR from primitives (`mean` is `sum / n`,
//! `layer_norm` is reductions and a map), from layout ops, or from one of the special ops
//! (`linear`, `softmax`, ..).

use super::prim::{BinaryOp, ReduceOp, UnaryOp};

/// One op of the language.
pub struct OpDef {
    pub name: &'static str,
    /// Other names for the same op (`cat` for `concat`).
    pub aliases: &'static [&'static str],
    pub params: &'static [Param],
    pub(crate) rule: Rule,
}

/// A parameter, named as PyTorch names it.
pub struct Param {
    pub name: &'static str,
    pub default: Default,
}

/// What a parameter is when a call leaves it out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Default {
    /// It must be given.
    Required,
    /// `*size`: every remaining positional argument (possibly none).
    Variadic,
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'static str),
}

/// How the checker builds an op.
#[derive(Clone, Copy)]
pub(crate) enum Rule {
    /// One elementwise primitive of one operand.
    Unary(UnaryOp),
    /// One elementwise primitive of two broadcast operands.
    Binary(BinaryOp),
    /// `op` over `dim` (params `input, dim, keepdim`).
    Reduce(ReduceOp),
    /// Its own rule, which the checker applies to the arguments bound one per parameter,
    /// defaults filled in, then the variadic tail.
    Check(Own),
}

/// Declares [`Own`], the ops with a rule of their own, each beside the checker's method
/// that checks and builds it, and `apply_own!`, which the checker expands to call that
/// method. The table names the method but imports nothing above it: the name resolves
/// where the checker expands the macro (`check/apply.rs`), so a new rule is one line here.
macro_rules! own_rules {
    ($($variant:ident => $method:ident,)*) => {
        /// The ops with a rule of their own, by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Own {
            $($variant,)*
        }

        /// `$checker.method(args, span)`, the method `own_rules!` gives `$rule`.
        macro_rules! apply_own {
            ($checker:expr, $rule:expr, $args:expr, $span:expr) => {
                match $rule {
                    $($crate::ops::table::Own::$variant => $checker.$method($args, $span),)*
                }
            };
        }
        pub(crate) use apply_own;
    };
}

own_rules! {
    Linear => linear,
    Matmul => matmul_op,
    Transpose => transpose,
    Permute => permute,
    View => view_op,
    Reshape => reshape_op,
    Contiguous => contiguous,
    Expand => expand,
    Flatten => flatten,
    RepeatInterleave => repeat_interleave,
    Unsqueeze => unsqueeze,
    Squeeze => squeeze,
    Concat => concat,
    Stack => stack,
    MaskedFill => masked_fill,
    ScaledDotProductAttention => scaled_dot_product_attention,
    IndexCopy => index_copy,
    IndexCopyInPlace => index_copy_,
    Embedding => embedding,
    Float => float_cast,
    Long => long_cast,
    Bool => bool_cast,
    To => convert_to,
    TypeAs => type_as,
    Normalize => normalize,
    Dropout => dropout,
    Relu => relu,
    Silu => silu,
    Gelu => gelu,
    Clamp => clamp,
    Where => where_op,
    Size => size,
    Ones => ones,
    Zeros => zeros,
    Full => full,
    Arange => arange,
    Tril => tril,
    Triu => triu,
    Split => split,
    Chunk => chunk,
    Mean => mean,
    Var => var,
    Std => std,
    Softmax => softmax,
    LogSoftmax => log_softmax,
    LayerNorm => layer_norm,
    RmsNorm => rms_norm,
}

const fn p(name: &'static str) -> Param {
    Param {
        name,
        default: Default::Required,
    }
}

const fn opt(name: &'static str, default: Default) -> Param {
    Param { name, default }
}

const fn rest(name: &'static str) -> Param {
    Param {
        name,
        default: Default::Variadic,
    }
}

const INPUT: &[Param] = &[p("input")];
const TWO: &[Param] = &[p("input"), p("other")];
const REDUCE: &[Param] = &[
    p("input"),
    opt("dim", Default::None),
    opt("keepdim", Default::Bool(false)),
];
const VAR: &[Param] = &[
    p("input"),
    opt("dim", Default::None),
    opt("unbiased", Default::Bool(true)),
    opt("keepdim", Default::Bool(false)),
    opt("correction", Default::None),
];

macro_rules! op {
    ($name:literal, $params:expr, $rule:expr) => {
        op!($name, [], $params, $rule)
    };
    ($name:literal, [$($alias:literal),*], $params:expr, $rule:expr) => {
        OpDef {
            name: $name,
            aliases: &[$($alias),*],
            params: $params,
            rule: $rule,
        }
    };
}

use Rule::{Binary, Check, Reduce, Unary};

/// The table. To add an elementwise primitive: a line in [`super::prim`] and a line here;
/// an op built from others: a line here, a variant of [`Own`], and its rule in
/// `check/rules.rs` (the compiler points at the arm `check/apply.rs` still needs).
#[rustfmt::skip]
pub static OPS: &[OpDef] = &[
    // contractions
    op!("linear",      &[p("input"), p("weight"), opt("bias", Default::None)], Check(Own::Linear)),
    op!("matmul",      &[p("input"), p("other")],                               Check(Own::Matmul)),
    // layout
    op!("transpose",   &[p("input"), p("dim0"), p("dim1")],                     Check(Own::Transpose)),
    op!("permute",     &[p("input"), rest("dims")],                             Check(Own::Permute)),
    op!("view",        &[p("input"), rest("shape")],                             Check(Own::View)),
    op!("reshape",     &[p("input"), rest("shape")],                            Check(Own::Reshape)),
    op!("contiguous",  INPUT,                                                   Check(Own::Contiguous)),
    op!("expand",      &[p("input"), rest("size")],                             Check(Own::Expand)),
    op!("flatten",     &[p("input"), opt("start_dim", Default::Int(0)), opt("end_dim", Default::Int(-1))], Check(Own::Flatten)),
    op!("repeat_interleave", &[p("input"), p("repeats"), opt("dim", Default::None)], Check(Own::RepeatInterleave)),
    op!("unsqueeze",   &[p("input"), p("dim")],                                 Check(Own::Unsqueeze)),
    op!("squeeze",     &[p("input"), opt("dim", Default::None)],                Check(Own::Squeeze)),
    op!("concat", ["cat"], &[p("tensors"), opt("dim", Default::Int(0))],        Check(Own::Concat)),
    op!("stack",       &[p("tensors"), opt("dim", Default::Int(0))],            Check(Own::Stack)),
    // special
    op!("masked_fill", &[p("input"), p("mask"), p("value")],                    Check(Own::MaskedFill)),
    op!("scaled_dot_product_attention",
        &[p("query"), p("key"), p("value"), opt("attn_mask", Default::None), opt("dropout_p", Default::Float(0.0)),
          opt("is_causal", Default::Bool(false)), opt("scale", Default::None), opt("enable_gqa", Default::Bool(false))],
                                                                                Check(Own::ScaledDotProductAttention)),
    op!("index_copy",  &[p("input"), p("dim"), p("index"), p("source")],        Check(Own::IndexCopy)),
    op!("index_copy_", &[p("input"), p("dim"), p("index"), p("source")],        Check(Own::IndexCopyInPlace)),
    op!("embedding",   &[p("input"), p("weight"), opt("padding_idx", Default::None)], Check(Own::Embedding)),
    op!("float",       INPUT,                                                   Check(Own::Float)),
    op!("long",        ["int"], INPUT,                                          Check(Own::Long)),
    op!("bool",        INPUT,                                                   Check(Own::Bool)),
    op!("to",          &[p("input"), p("dtype")],                               Check(Own::To)),
    op!("type_as",     &[p("input"), p("other")],                               Check(Own::TypeAs)),
    op!("normalize",   &[p("input"), opt("p", Default::Float(2.0)), opt("dim", Default::Int(1)), opt("eps", Default::Float(1e-12))],
                                                                                Check(Own::Normalize)),
    op!("dropout",     &[p("input"), opt("p", Default::Float(0.5))],            Check(Own::Dropout)),
    // elementwise primitives
    op!("neg",         INPUT, Unary(UnaryOp::Neg)),
    op!("abs",         INPUT, Unary(UnaryOp::Abs)),
    op!("sqrt",        INPUT, Unary(UnaryOp::Sqrt)),
    op!("rsqrt",       INPUT, Unary(UnaryOp::Rsqrt)),
    op!("exp",         INPUT, Unary(UnaryOp::Exp)),
    op!("log",         INPUT, Unary(UnaryOp::Log)),
    op!("tanh",        INPUT, Unary(UnaryOp::Tanh)),
    op!("sigmoid",     INPUT, Unary(UnaryOp::Sigmoid)),
    op!("erf",         INPUT, Unary(UnaryOp::Erf)),
    op!("sin",         INPUT, Unary(UnaryOp::Sin)),
    op!("cos",         INPUT, Unary(UnaryOp::Cos)),
    op!("pow",         &[p("input"), p("exponent")], Binary(BinaryOp::Pow)),
    op!("maximum",     TWO, Binary(BinaryOp::Maximum)),
    op!("minimum",     TWO, Binary(BinaryOp::Minimum)),
    // elementwise, built from primitives
    op!("relu",        INPUT, Check(Own::Relu)),
    op!("silu",        INPUT, Check(Own::Silu)),
    op!("gelu",        &[p("input"), opt("approximate", Default::Str("none"))], Check(Own::Gelu)),
    op!("clamp",       &[p("input"), opt("min", Default::None), opt("max", Default::None)], Check(Own::Clamp)),
    op!("where",       &[p("condition"), p("input"), p("other")],               Check(Own::Where)),
    op!("size",        &[p("input"), opt("dim", Default::None)],                Check(Own::Size)),
    // made from sizes
    op!("ones",        &[rest("size")],                                         Check(Own::Ones)),
    op!("zeros",       &[rest("size")],                                         Check(Own::Zeros)),
    op!("full",        &[p("size"), p("fill_value")],                           Check(Own::Full)),
    op!("arange",      &[opt("start", Default::None), opt("end", Default::None), opt("step", Default::Int(1))],
                                                                                Check(Own::Arange)),
    op!("tril",        &[p("input"), opt("diagonal", Default::Int(0))],         Check(Own::Tril)),
    op!("triu",        &[p("input"), opt("diagonal", Default::Int(0))],         Check(Own::Triu)),
    // several results
    op!("split",       &[p("tensor"), p("split_size_or_sections"), opt("dim", Default::Int(0))], Check(Own::Split)),
    op!("chunk",       &[p("input"), p("chunks"), opt("dim", Default::Int(0))], Check(Own::Chunk)),
    // reductions
    op!("sum",         REDUCE, Reduce(ReduceOp::Sum)),
    op!("amax",        REDUCE, Reduce(ReduceOp::Max)),
    op!("amin",        REDUCE, Reduce(ReduceOp::Min)),
    op!("mean",        REDUCE, Check(Own::Mean)),
    op!("var",         VAR,    Check(Own::Var)),
    op!("std",         VAR,    Check(Own::Std)),
    op!("softmax",     &[p("input"), p("dim")],                                 Check(Own::Softmax)),
    op!("log_softmax", &[p("input"), p("dim")],                                 Check(Own::LogSoftmax)),
    op!("layer_norm",  &[p("input"), p("normalized_shape"), opt("weight", Default::None), opt("bias", Default::None), opt("eps", Default::Float(1e-5))],
                                                                                Check(Own::LayerNorm)),
    op!("rms_norm",    &[p("input"), p("normalized_shape"), opt("weight", Default::None), opt("eps", Default::None)],
                                                                                Check(Own::RmsNorm)),
];

/// The op called `name` (or one of its aliases).
pub fn find(name: &str) -> Option<&'static OpDef> {
    OPS.iter()
        .find(|op| op.name == name || op.aliases.contains(&name))
}

impl OpDef {
    /// `layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05)`, as
    /// messages and completion show it.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self.params.iter().map(Param::text).collect();
        format!("{}({})", self.name, params.join(", "))
    }
}

impl Param {
    fn text(&self) -> String {
        match self.default {
            Default::Required => self.name.to_string(),
            Default::Variadic => format!("*{}", self.name),
            Default::None => format!("{}=None", self.name),
            Default::Bool(b) => format!("{}={}", self.name, if b { "True" } else { "False" }),
            Default::Int(n) => format!("{}={n}", self.name),
            Default::Float(x) => format!("{}={x:?}", self.name),
            Default::Str(s) => format!("{}={s:?}", self.name),
        }
    }
}
