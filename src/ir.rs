//! The checked, shape-typed IR: what the checker produces and every later stage consumes.
//!
//! A program is an arena of [`Node`]s in SSA form. Functions are already inlined; a `for`
//! stays a loop ([`Op::For`]) whose body is a list of nodes evaluated once per value of its
//! variable, so the optimizer can see the per-head structure. Every node carries its full
//! type: symbolic shape and strides (in the program's [`DimTable`]) and dtype. Scalars are
//! rank-0 tensors, as in PyTorch.

use crate::dims::{DimTable, Poly};
pub use crate::ops::prim::{BinaryOp, ReduceOp, UnaryOp};
use crate::source::Span;

mod dot;
mod op;
mod text;

pub use op::{Attr, Op};

/// Index of a node in [`Program::nodes`].
pub type ValueId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// The result of a comparison, or a `bool` input; arithmetic reads it as 0 and 1.
    Bool,
    /// PyTorch's `long`: token ids, masks as a tokenizer returns them. Stored as float32 by
    /// both backends, so exact up to 2^24 in magnitude; inputs beyond that are refused when
    /// they are read.
    I64,
}

impl DType {
    /// PyTorch's name of the dtype (`torch.int64`'s `int64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::Bool => "bool",
            DType::I64 => "int64",
        }
    }

    /// The dtype a name written in a program or after `torch.` means (`long`, `int32`
    /// widened to int64, `float`); `None` for any other name.
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "float32" | "float" => DType::F32,
            "int64" | "long" | "int32" | "int" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }

    /// PyTorch's result type of arithmetic on two operands of these dtypes (bool, then
    /// int64, then float32: the higher category wins).
    pub fn promote(self, other: DType) -> DType {
        let rank = |d: DType| match d {
            DType::Bool => 0,
            DType::I64 => 1,
            DType::F32 => 2,
        };
        if rank(self) >= rank(other) {
            self
        } else {
            other
        }
    }
}

/// Shape, strides (in elements) and dtype of a tensor value, all symbolic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Vec<Poly>,
    /// The strides PyTorch gives the value; where they depend on the sizes, the strides of
    /// the general case.
    pub strides: Vec<Poly>,
    pub dtype: DType,
    /// The strides other sizes give the value (a `reshape` that is a view for some sizes
    /// only, an elementwise result whose operands' order depends on the sizes, a `cat` that
    /// may keep channels-last). A `view` must be legal on each (see `check::layout`).
    pub others: OtherStrides,
}

/// The strides a value may have beside its general ones, at some sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum OtherStrides {
    /// These, each a full list of strides (none: the strides are those for every size).
    #[default]
    None,
    Listed(Vec<Vec<Poly>>),
    /// Too many to follow: no `view` may rely on the strides, so it may only split axes and
    /// add or drop axes of size 1.
    Any,
}

/// The type of a node's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    Tensor(TensorType),
    /// The value of a `for`: `len` tensors of one type.
    Seq {
        item: TensorType,
        len: Poly,
    },
}

/// Elementwise comparison with broadcasting; the result is [`DType::Bool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The name in the IR text and the e-graph (`lt`), as `torch.lt`.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// Whether the comparison holds for `lhs - rhs` ordered this way against zero.
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ord == Equal,
            CmpOp::Ne => ord != Equal,
            CmpOp::Lt => ord == Less,
            CmpOp::Le => ord != Greater,
            CmpOp::Gt => ord == Greater,
            CmpOp::Ge => ord != Less,
        }
    }
}

/// One SSA value.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub args: Vec<ValueId>,
    pub ty: Type,
    /// Where the value was written in the source (inside an inlined function: in its body).
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    pub name: String,
    /// The tensor's key in the weights file.
    pub key: String,
    pub shape: Vec<Poly>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InputDecl {
    pub name: String,
    pub shape: Vec<Poly>,
    /// The declared element type (`input ids: [B, N] int64`); float32 by default.
    pub dtype: DType,
    /// Every use reaches a comparison, so the default value is all ones ("keep everything").
    pub mask_only: bool,
    /// Declared `state`: kept between calls, zeros at first, and written back from the
    /// output of the same name (see [`OutputDecl::state`]).
    pub state: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OutputDecl {
    pub name: String,
    pub value: ValueId,
    /// The final version of this state input: what a call leaves behind in it. A backend
    /// computes it as any output; a caller keeps it rather than showing it.
    pub state: Option<usize>,
    pub span: Span,
}

/// What kind of name a [`Binding`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    Param,
    Input,
    State,
    Let,
    Output,
}

/// A value the program names at top level, for `attnc check` (source order).
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub name: String,
    pub kind: BindingKind,
    pub value: ValueId,
    pub span: Span,
}

/// An `assert` about dims that mentions free dims: checked once they are bound (E0209).
#[derive(Clone, Debug, PartialEq)]
pub struct DimAssert {
    pub lhs: Poly,
    pub op: CmpOp,
    pub rhs: Poly,
    /// The condition as written, for the run-time message.
    pub text: String,
    pub span: Span,
}

/// A checked program: dims, declarations, the node arena and the outputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub dims: DimTable,
    pub params: Vec<ParamDecl>,
    pub inputs: Vec<InputDecl>,
    pub nodes: Vec<Node>,
    /// The top-level nodes in evaluation order (loop bodies are listed in their `For`).
    pub body: Vec<ValueId>,
    pub outputs: Vec<OutputDecl>,
    pub bindings: Vec<Binding>,
    pub asserts: Vec<DimAssert>,
    /// Where `body` holds each iteration of an unrolled loop over layers (positions in
    /// `body`, in order, disjoint), so that the optimizer can work on one layer at a time
    /// and on identical layers once (`opt::layers`).
    pub layers: Vec<std::ops::Range<usize>>,
}

impl Program {
    pub fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id]
    }

    /// The tensor type of a value; sequences answer with their item type.
    pub fn tensor_type(&self, id: ValueId) -> &TensorType {
        match &self.nodes[id].ty {
            Type::Tensor(t) => t,
            Type::Seq { item, .. } => item,
        }
    }
}

impl TensorType {
    /// A fresh row-major tensor of this shape.
    pub fn row_major(shape: Vec<Poly>, dtype: DType) -> TensorType {
        let strides = row_major_strides(&shape);
        TensorType {
            shape,
            strides,
            dtype,
            others: OtherStrides::None,
        }
    }

    /// Whether some sizes give the value other strides than [`TensorType::strides`].
    pub fn varies(&self) -> bool {
        self.others != OtherStrides::None
    }

    /// Every list of strides the value may have, the general one first; `None` where they
    /// are too many to follow.
    pub fn layouts(&self) -> Option<Vec<&[Poly]>> {
        let mut all = vec![self.strides.as_slice()];
        match &self.others {
            OtherStrides::None => {}
            OtherStrides::Listed(others) => all.extend(others.iter().map(Vec::as_slice)),
            OtherStrides::Any => return None,
        }
        Some(all)
    }

    /// The value with one of its possible strides, known exactly.
    pub fn exact(&self, strides: &[Poly]) -> TensorType {
        TensorType {
            shape: self.shape.clone(),
            strides: strides.to_vec(),
            dtype: self.dtype,
            others: OtherStrides::None,
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> Poly {
        self.shape.iter().fold(Poly::int(1), |acc, d| acc.mul(d))
    }

    /// Row-major for every value of the free dims, whichever strides the sizes give (axes of
    /// size 1 given the constants do not count, and a tensor without elements is contiguous,
    /// as in PyTorch's `is_contiguous`).
    pub fn is_contiguous(&self, dims: &DimTable) -> bool {
        // PyTorch's is_contiguous holds for any tensor without elements.
        if self.shape.iter().any(|n| dims.equal(n, &Poly::int(0))) {
            return true;
        }
        self.layouts()
            .is_some_and(|all| all.iter().all(|strides| self.is_row_major(strides, dims)))
    }

    /// Whether `strides`, one list this value may have, are row-major for its shape
    /// (an axis of size 1 may have any stride).
    pub fn is_row_major(&self, strides: &[Poly], dims: &DimTable) -> bool {
        let expected = row_major_strides(&self.shape);
        self.shape
            .iter()
            .zip(strides.iter().zip(&expected))
            .all(|(size, (s, e))| dims.is_one(size) || dims.equal(s, e))
    }
}

/// The strides of a row-major tensor of `shape`.
pub fn row_major_strides(shape: &[Poly]) -> Vec<Poly> {
    let mut strides = vec![Poly::int(1); shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].mul(&shape[i + 1]);
    }
    strides
}
