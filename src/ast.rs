//! The abstract syntax tree, exactly as written, with a byte span on every node.
//!
//! The parser builds it and never fails: where the source is broken it records a
//! diagnostic and puts an [`ExprKind::Error`] (or drops the item) so later stages can
//! go on and report independent errors too. Nothing here knows about shapes.

use crate::source::Span;

/// A name as written, with where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// A whole `.attn` file (or one REPL entry): items in source order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub items: Vec<Item>,
}

/// A top-level form.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `dim B, N` or `dim D = 512, H = 8` or `dim Dk = D / H`: one entry per declared name.
    Dim(Vec<DimDecl>),
    /// `assert D % H == 0`
    Assert(Assert),
    /// `param W: [O, I] = "key"`
    Param(Param),
    /// `input x: [B, N, D]`
    Input(Input),
    /// `state k_cache: [L, B, H, C, Dk]`: a tensor kept between calls (its `dtype` is
    /// always absent).
    State(Input),
    /// `fn f(a: [..]) -> [..] { .. }`
    Fn(FnDecl),
    /// `let x = e`, `let x: [..] = e`, `let (a, b) = e`
    Let(Let),
    /// `output name = e`
    Output(Output),
    /// A bare expression (the REPL prints its shape; a file checks it and drops it).
    Expr(Expr),
}

/// One name of a `dim` item. `value` is absent for a free dim.
#[derive(Clone, Debug, PartialEq)]
pub struct DimDecl {
    pub name: Ident,
    pub value: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Assert {
    pub cond: Expr,
    pub span: Span,
}

/// A string literal with its escapes resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct StrLit {
    pub value: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub shape: ShapeAnn,
    /// The key in the weights file; the name when absent.
    pub key: Option<StrLit>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub name: Ident,
    pub shape: ShapeAnn,
    /// `int64`, `bool`, ..: the element type written after the shape (float32 without).
    pub dtype: Option<Ident>,
    pub span: Span,
}

/// `[B, N, D]`: each entry is a dim expression.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeAnn {
    pub dims: Vec<Expr>,
    pub span: Span,
}

/// A declared type: a shape, or a tuple of types (`([B, N, D], [B, H, N, N])`).
#[derive(Clone, Debug, PartialEq)]
pub enum TypeAnn {
    Shape(ShapeAnn),
    Tuple(Vec<TypeAnn>, Span),
}

impl TypeAnn {
    pub fn span(&self) -> Span {
        match self {
            TypeAnn::Shape(s) => s.span,
            TypeAnn::Tuple(_, span) => *span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDecl {
    pub name: Ident,
    pub params: Vec<FnParam>,
    pub ret: Option<TypeAnn>,
    pub body: Block,
    pub span: Span,
}

/// `q: [B, H, N, Dk]`; the annotation may be left out, then any value is accepted.
#[derive(Clone, Debug, PartialEq)]
pub struct FnParam {
    pub name: Ident,
    pub ty: Option<TypeAnn>,
    pub span: Span,
}

/// `{ stmts  value }`: the body of a `fn` or a `for`.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    /// The last expression, which is the block's value.
    pub value: Option<Box<Expr>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let(Let),
    Assert(Assert),
    /// A weight declared where it is used, its key naming loop variables
    /// (`"encoder.layer.{l}.output.dense.weight"`).
    Param(Param),
    /// `x = e`: rebinds a name of an enclosing scope (a loop over layers carries `x`).
    Assign(Assign),
    Expr(Expr),
}

/// `x = e`
#[derive(Clone, Debug, PartialEq)]
pub struct Assign {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Let {
    pub pattern: Pattern,
    pub ty: Option<TypeAnn>,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    Name(Ident),
    /// `(a, b)`
    Tuple(Vec<Ident>, Span),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

impl Expr {
    /// The tensor whose whole shape this expression asks for: `x` of `x.shape` or
    /// `x.size()`.
    pub fn shape_of(&self) -> Option<&Expr> {
        match &self.kind {
            ExprKind::Attribute { receiver, name } if name.name == "shape" => Some(receiver),
            ExprKind::Method {
                receiver,
                method,
                args,
                kwargs,
            } if method.name == "size" && args.is_empty() && kwargs.is_empty() => Some(receiver),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    MatMul,
    /// `**`
    Pow,
    /// `//`
    FloorDiv,
    /// `&`
    And,
    /// `|`
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::MatMul => "@",
            BinOp::Pow => "**",
            BinOp::FloorDiv => "//",
            BinOp::And => "&",
            BinOp::Or => "|",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// `123`
    Int(u64),
    /// `1.5`, `1e-9`, `.5`
    Float(f64),
    /// `True` or `False`.
    Bool(bool),
    /// `None`: an absent argument, or a new axis in indexing.
    NoneLit,
    /// `inf`
    Inf,
    /// `...` in indexing.
    Ellipsis,
    /// `"tanh"`: a string argument.
    Str(String),
    /// A name: a dim, param, input, binding or loop variable.
    Name(String),
    /// `-e`
    Neg(Box<Expr>),
    /// `~e`
    Not(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a : b`; inside `[ ]` either end may be left out (`x[:, 2:]`), a bare `:` is both,
    /// and a third part is the step (`x[..., 1::2]`).
    Range(Option<Box<Expr>>, Option<Box<Expr>>, Option<Box<Expr>>),
    /// `f(args)`
    Call {
        func: Ident,
        args: Vec<Expr>,
        kwargs: Vec<Kwarg>,
    },
    /// `x.f(args)`, which means `f(x, args)`.
    Method {
        receiver: Box<Expr>,
        method: Ident,
        args: Vec<Expr>,
        kwargs: Vec<Kwarg>,
    },
    /// `x.name`: an attribute (`x.shape`, whose `x.shape[d]` is `x.size(d)`).
    Attribute {
        receiver: Box<Expr>,
        name: Ident,
    },
    /// `x[i, a : b, :]`
    Index {
        base: Box<Expr>,
        indices: Vec<Expr>,
    },
    /// `(a, b)`; `(a)` is just `a` and makes no tuple.
    Tuple(Vec<Expr>),
    /// `[a, b, ..]`: a list of tensors or of dims.
    List(Vec<Expr>),
    /// `for h in start..end { body }`
    For {
        var: Ident,
        start: Box<Expr>,
        end: Box<Expr>,
        body: Block,
    },
    /// What the parser leaves where it could not make sense of the source.
    Error,
}

/// `name=value` in a call: a keyword argument, named as PyTorch names the parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Kwarg {
    pub name: Ident,
    pub value: Expr,
}
