//! Every op a program can call, described once: its names, PyTorch's parameters in
//! PyTorch's order with their defaults, its class, and its shape rule.
//!
//! The checker binds a call's arguments against [`OpDef::params`] (positional first, then
//! keywords; E0206 for an unknown, repeated or doubly given one), fills in the defaults, and
//! runs the op's [`Rule`]. An elementwise primitive's rule is its [`UnaryOp`]/[`BinaryOp`]
//! itself, so the checker, the interpreter, the e-graph and the lowering all handle it from
//! the primitive alone. Every other op builds IR from primitives (`mean` is `sum / n`,
//! `layer_norm` is reductions and a map), from layout ops, or from one of the special ops
//! (`linear`, `softmax`, ..).

use super::prim::{BinaryOp, ReduceOp, UnaryOp};
use crate::ast::Expr;
use crate::check::{Checker, Value};
use crate::source::Span;

/// One op of the language.
pub struct OpDef {
    pub name: &'static str,
    /// Other names for the same op (`cat` for `concat`).
    pub aliases: &'static [&'static str],
    pub params: &'static [Param],
    pub class: Class,
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

/// How the optimizer and the backend see an op, after the checker has built it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// One primitive map over its (broadcast) operands: fused into `Map` kernels.
    Elementwise,
    /// A reduction over axes, or ops built from reductions and maps (norms, `softmax`).
    Reduction,
    /// Strides only, or a copy (`view`, `transpose`, `cat`).
    Layout,
    /// A GEMM (`linear`, `matmul`).
    Contraction,
    /// Anything else (`dropout`, `masked_fill`'s mask handling).
    Special,
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
    /// Its own shape rule; the arguments come bound, one per parameter, defaults filled in,
    /// then the variadic tail.
    Check(fn(&mut Checker, &[&Expr], Span) -> Option<Value>),
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
    ($name:literal, $params:expr, $class:ident, $rule:expr) => {
        op!($name, [], $params, $class, $rule)
    };
    ($name:literal, [$($alias:literal),*], $params:expr, $class:ident, $rule:expr) => {
        OpDef {
            name: $name,
            aliases: &[$($alias),*],
            params: $params,
            class: Class::$class,
            rule: $rule,
        }
    };
}

use Rule::{Binary, Check, Reduce, Unary};

/// The table. To add an elementwise primitive: a line in [`super::prim`] and a line here;
/// an op built from others: a line here and its rule in `check/rules.rs`.
#[rustfmt::skip]
pub static OPS: &[OpDef] = &[
    // contractions
    op!("linear",      &[p("input"), p("weight"), opt("bias", Default::None)], Contraction, Check(Checker::linear)),
    op!("matmul",      &[p("input"), p("other")],                               Contraction, Check(Checker::matmul_op)),
    // layout
    op!("transpose",   &[p("input"), p("dim0"), p("dim1")],                     Layout, Check(Checker::transpose)),
    op!("permute",     &[p("input"), rest("dims")],                             Layout, Check(Checker::permute)),
    op!("view",        &[p("input"), rest("shape")],                             Layout, Check(Checker::view_op)),
    op!("reshape",     &[p("input"), rest("shape")],                            Layout, Check(Checker::reshape_op)),
    op!("contiguous",  INPUT,                                                   Layout, Check(Checker::contiguous)),
    op!("expand",      &[p("input"), rest("size")],                             Layout, Check(Checker::expand)),
    op!("flatten",     &[p("input"), opt("start_dim", Default::Int(0)), opt("end_dim", Default::Int(-1))], Layout, Check(Checker::flatten)),
    op!("repeat_interleave", &[p("input"), p("repeats"), opt("dim", Default::None)], Layout, Check(Checker::repeat_interleave)),
    op!("unsqueeze",   &[p("input"), p("dim")],                                 Layout, Check(Checker::unsqueeze)),
    op!("squeeze",     &[p("input"), opt("dim", Default::None)],                Layout, Check(Checker::squeeze)),
    op!("concat", ["cat"], &[p("tensors"), opt("dim", Default::Int(0))],        Layout, Check(Checker::concat)),
    op!("stack",       &[p("tensors"), opt("dim", Default::Int(0))],            Layout, Check(Checker::stack)),
    // special
    op!("masked_fill", &[p("input"), p("mask"), p("value")],                    Special, Check(Checker::masked_fill)),
    op!("scaled_dot_product_attention",
        &[p("query"), p("key"), p("value"), opt("attn_mask", Default::None), opt("dropout_p", Default::Float(0.0)),
          opt("is_causal", Default::Bool(false)), opt("scale", Default::None), opt("enable_gqa", Default::Bool(false))],
                                                                                Special, Check(Checker::scaled_dot_product_attention)),
    op!("index_copy",  &[p("input"), p("dim"), p("index"), p("source")],        Special, Check(Checker::index_copy)),
    op!("index_copy_", &[p("input"), p("dim"), p("index"), p("source")],        Special, Check(Checker::index_copy_)),
    op!("embedding",   &[p("input"), p("weight"), opt("padding_idx", Default::None)], Special, Check(Checker::embedding)),
    op!("float",       INPUT,                                                   Special, Check(Checker::float_cast)),
    op!("long",        ["int"], INPUT,                                          Special, Check(Checker::long_cast)),
    op!("bool",        INPUT,                                                   Special, Check(Checker::bool_cast)),
    op!("to",          &[p("input"), p("dtype")],                               Special, Check(Checker::convert_to)),
    op!("type_as",     &[p("input"), p("other")],                               Special, Check(Checker::type_as)),
    op!("normalize",   &[p("input"), opt("p", Default::Float(2.0)), opt("dim", Default::Int(1)), opt("eps", Default::Float(1e-12))],
                                                                                Reduction, Check(Checker::normalize)),
    op!("dropout",     &[p("input"), opt("p", Default::Float(0.5))],            Special, Check(Checker::dropout)),
    // elementwise primitives
    op!("neg",         INPUT, Elementwise, Unary(UnaryOp::Neg)),
    op!("abs",         INPUT, Elementwise, Unary(UnaryOp::Abs)),
    op!("sqrt",        INPUT, Elementwise, Unary(UnaryOp::Sqrt)),
    op!("rsqrt",       INPUT, Elementwise, Unary(UnaryOp::Rsqrt)),
    op!("exp",         INPUT, Elementwise, Unary(UnaryOp::Exp)),
    op!("log",         INPUT, Elementwise, Unary(UnaryOp::Log)),
    op!("tanh",        INPUT, Elementwise, Unary(UnaryOp::Tanh)),
    op!("sigmoid",     INPUT, Elementwise, Unary(UnaryOp::Sigmoid)),
    op!("erf",         INPUT, Elementwise, Unary(UnaryOp::Erf)),
    op!("sin",         INPUT, Elementwise, Unary(UnaryOp::Sin)),
    op!("cos",         INPUT, Elementwise, Unary(UnaryOp::Cos)),
    op!("pow",         &[p("input"), p("exponent")], Elementwise, Binary(BinaryOp::Pow)),
    op!("maximum",     TWO, Elementwise, Binary(BinaryOp::Maximum)),
    op!("minimum",     TWO, Elementwise, Binary(BinaryOp::Minimum)),
    // elementwise, built from primitives
    op!("relu",        INPUT, Elementwise, Check(Checker::relu)),
    op!("silu",        INPUT, Elementwise, Check(Checker::silu)),
    op!("gelu",        &[p("input"), opt("approximate", Default::Str("none"))], Elementwise, Check(Checker::gelu)),
    op!("clamp",       &[p("input"), opt("min", Default::None), opt("max", Default::None)], Elementwise, Check(Checker::clamp)),
    op!("where",       &[p("condition"), p("input"), p("other")],               Elementwise, Check(Checker::where_op)),
    op!("size",        &[p("input"), opt("dim", Default::None)],                Special, Check(Checker::size)),
    // made from sizes
    op!("ones",        &[rest("size")],                                         Special, Check(Checker::ones)),
    op!("zeros",       &[rest("size")],                                         Special, Check(Checker::zeros)),
    op!("full",        &[p("size"), p("fill_value")],                           Special, Check(Checker::full)),
    op!("arange",      &[opt("start", Default::None), opt("end", Default::None), opt("step", Default::Int(1))],
                                                                                Special, Check(Checker::arange)),
    op!("tril",        &[p("input"), opt("diagonal", Default::Int(0))],         Special, Check(Checker::tril)),
    op!("triu",        &[p("input"), opt("diagonal", Default::Int(0))],         Special, Check(Checker::triu)),
    // several results
    op!("split",       &[p("tensor"), p("split_size_or_sections"), opt("dim", Default::Int(0))], Layout, Check(Checker::split)),
    op!("chunk",       &[p("input"), p("chunks"), opt("dim", Default::Int(0))], Layout, Check(Checker::chunk)),
    // reductions
    op!("sum",         REDUCE, Reduction, Reduce(ReduceOp::Sum)),
    op!("amax",        REDUCE, Reduction, Reduce(ReduceOp::Max)),
    op!("amin",        REDUCE, Reduction, Reduce(ReduceOp::Min)),
    op!("mean",        REDUCE, Reduction, Check(Checker::mean)),
    op!("var",         VAR,    Reduction, Check(Checker::var)),
    op!("std",         VAR,    Reduction, Check(Checker::std)),
    op!("softmax",     &[p("input"), p("dim")],                                 Reduction, Check(Checker::softmax)),
    op!("log_softmax", &[p("input"), p("dim")],                                 Reduction, Check(Checker::log_softmax)),
    op!("layer_norm",  &[p("input"), p("normalized_shape"), opt("weight", Default::None), opt("bias", Default::None), opt("eps", Default::Float(1e-5))],
                                                                                Reduction, Check(Checker::layer_norm)),
    op!("rms_norm",    &[p("input"), p("normalized_shape"), opt("weight", Default::None), opt("eps", Default::None)],
                                                                                Reduction, Check(Checker::rms_norm)),
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
