//! Building IR programs by hand for the runtime's tests, while the checker is elsewhere.

use crate::dims::{DimKind, Poly, Sym};
use crate::ir::{
    BinaryOp, CmpOp, DType, InputDecl, Node, Op, OutputDecl, ParamDecl, Program, TensorType, Type, UnaryOp,
    ValueId,
};
use crate::source::Span;

/// A shape written in a test: constants (`[2, 3]`) or dim expressions.
pub trait Shape {
    fn polys(&self) -> Vec<Poly>;
}

impl<const N: usize> Shape for [i64; N] {
    fn polys(&self) -> Vec<Poly> {
        self.iter().map(|&n| Poly::int(n)).collect()
    }
}

impl Shape for Vec<Poly> {
    fn polys(&self) -> Vec<Poly> {
        self.clone()
    }
}

impl<const N: usize> Shape for [Poly; N] {
    fn polys(&self) -> Vec<Poly> {
        self.to_vec()
    }
}

/// Appends nodes to a [`Program`]; nodes go to the top-level body, or to the body of the
/// loop being built by [`Builder::for_loop`].
#[derive(Default)]
pub struct Builder {
    program: Program,
    body: Vec<ValueId>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    pub fn int(&self, n: i64) -> Poly {
        Poly::int(n)
    }

    pub fn dim(&mut self, name: &str, kind: DimKind) -> Poly {
        Poly::sym(self.program.dims.declare(name, kind))
    }

    pub fn free(&mut self, name: &str) -> Poly {
        self.dim(name, DimKind::Free { value: None })
    }

    pub fn constant(&mut self, name: &str, value: i64) -> Poly {
        self.dim(name, DimKind::Const(value))
    }

    /// `dim name = a / b`, proved exact by the dims' values.
    pub fn derived(&mut self, name: &str, a: &Poly, b: &Poly) -> Poly {
        let q = self.program.dims.div(a, b).expect("exact division");
        self.dim(name, DimKind::Derived(q.clone()));
        q
    }

    pub fn sym(&self, name: &str) -> Sym {
        self.program.dims.lookup(name).expect("declared dim")
    }

    pub fn param(&mut self, name: &str, shape: &impl Shape) -> ValueId {
        self.param_key(name, name, shape)
    }

    pub fn param_key(&mut self, name: &str, key: &str, shape: &impl Shape) -> ValueId {
        let shape = shape.polys();
        self.program.params.push(ParamDecl {
            name: name.into(),
            key: key.into(),
            shape: shape.clone(),
            span: Span::default(),
        });
        self.node(Op::Param(self.program.params.len() - 1), &[], &shape)
    }

    pub fn input(&mut self, name: &str, shape: &impl Shape) -> ValueId {
        self.input_decl(name, shape, false)
    }

    pub fn mask_input(&mut self, name: &str, shape: &impl Shape) -> ValueId {
        self.input_decl(name, shape, true)
    }

    fn input_decl(&mut self, name: &str, shape: &impl Shape, mask_only: bool) -> ValueId {
        let shape = shape.polys();
        self.program.inputs.push(InputDecl {
            name: name.into(),
            shape: shape.clone(),
            dtype: DType::F32,
            mask_only,
            state: false,
            span: Span::default(),
        });
        self.node(Op::Input(self.program.inputs.len() - 1), &[], &shape)
    }

    /// A node of a float32 (a boolean for comparisons) row-major result of `shape`.
    pub fn node(&mut self, op: Op, args: &[ValueId], shape: &impl Shape) -> ValueId {
        let dtype = match op {
            Op::Compare(_) => DType::Bool,
            _ => DType::F32,
        };
        let ty = Type::Tensor(TensorType::row_major(shape.polys(), dtype));
        self.push(op, args, ty)
    }

    /// A node of a rank-0 float32 result.
    pub fn scalar(&mut self, op: Op, args: &[ValueId]) -> ValueId {
        self.node(op, args, &Vec::new())
    }

    fn push(&mut self, op: Op, args: &[ValueId], ty: Type) -> ValueId {
        self.program.nodes.push(Node {
            op,
            args: args.to_vec(),
            ty,
            span: Span::default(),
        });
        let id = self.program.nodes.len() - 1;
        self.body.push(id);
        id
    }

    /// `for var in start..end { body }` whose items have shape `item`; `body` builds the
    /// loop's nodes and returns the item.
    pub fn for_loop(
        &mut self,
        var: &str,
        (start, end): (Poly, Poly),
        item: &impl Shape,
        body: impl FnOnce(&mut Builder, Poly) -> ValueId,
    ) -> ValueId {
        let kind = DimKind::Loop {
            start: start.clone(),
            end: end.clone(),
        };
        let sym = self.program.dims.declare(var, kind);
        let outer = std::mem::take(&mut self.body);
        let result = body(self, Poly::sym(sym));
        let inner = std::mem::replace(&mut self.body, outer);
        let ty = Type::Seq {
            item: TensorType::row_major(item.polys(), DType::F32),
            len: end.sub(&start),
        };
        let op = Op::For {
            var: sym,
            start,
            end,
            body: inner,
            result,
        };
        self.push(op, &[], ty)
    }

    pub fn output(&mut self, name: &str, value: ValueId) {
        self.program.outputs.push(OutputDecl {
            name: name.into(),
            value,
            state: None,
            span: Span::default(),
        });
    }

    pub fn finish(mut self) -> Program {
        self.program.body = self.body;
        self.program
    }
}

/// A fresh directory for one test, named after `name`, removed with everything in it when
/// dropped, however the test ends.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("attnc-{name}-"))
        .tempdir()
        .unwrap()
}

/// A reference fixture, kept in the repository under `tests/fixtures` (its README says where
/// the files came from and how to make them again).
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Which mask the attention program takes, as in the fixtures.
#[derive(Clone, Copy, PartialEq)]
pub enum Mask {
    /// `mask: [B, 1, M]`
    Padding,
    /// `mask: [B, N, M]`
    Causal,
    None,
}

/// The projected, head-split `[B, H, len, Dk]` of `x: [B, len, D]` by layer `i`.
fn project(b: &mut Builder, x: ValueId, layer: (ValueId, ValueId), len: &Poly) -> ValueId {
    let [bb, d, h] = ["B", "D", "H"].map(|n| Poly::sym(b.sym(n)));
    let dk = b.program.dims.use_of(b.sym("Dk"));
    let y = b.node(Op::Linear, &[x, layer.0, layer.1], &[bb.clone(), len.clone(), d]);
    let sizes = vec![bb.clone(), len.clone(), h.clone(), dk.clone()];
    let v = b.node(Op::View(sizes.clone()), &[y], &sizes);
    b.node(Op::Transpose(1, 2), &[v], &[bb, h, len.clone(), dk])
}

/// The four `nn.Linear` layers of the fixtures as params `[D, D]` and `[D]`.
fn layers(b: &mut Builder) -> Vec<(ValueId, ValueId)> {
    let d = Poly::sym(b.sym("D"));
    (0..4)
        .map(|i| {
            let w = b.param_key(
                &format!("W{i}"),
                &format!("linears.{i}.weight"),
                &[d.clone(), d.clone()],
            );
            let bias = b.param_key(&format!("b{i}"), &format!("linears.{i}.bias"), &vec![d.clone()]);
            (w, bias)
        })
        .collect()
}

/// The inputs of the attention programs.
struct Inputs {
    q: ValueId,
    k: ValueId,
    v: ValueId,
    mask: Option<ValueId>,
}

/// The dims `B, N, M` free, `D`, `H` constant, `Dk = D / H`; and the inputs.
fn mha_inputs(b: &mut Builder, d: i64, h: i64, mask: Mask) -> Inputs {
    let [bb, n, m] = ["B", "N", "M"].map(|name| b.free(name));
    let dd = b.constant("D", d);
    let hh = b.constant("H", h);
    b.derived("Dk", &dd, &hh);
    let q = b.input("query", &[bb.clone(), n.clone(), dd.clone()]);
    let k = b.input("key", &[bb.clone(), m.clone(), dd.clone()]);
    let v = b.input("value", &[bb.clone(), m.clone(), dd]);
    let mask = match mask {
        Mask::Padding => Some(b.mask_input("mask", &[bb, Poly::int(1), m])),
        Mask::Causal => Some(b.mask_input("mask", &[bb, n, m])),
        Mask::None => None,
    };
    Inputs { q, k, v, mask }
}

/// `scores.masked_fill(mask == 0, -1e9)` with `mask` of the shape `cmp`.
fn fill_masked(b: &mut Builder, scores: ValueId, mask: ValueId, cmp: Vec<Poly>, out: Vec<Poly>) -> ValueId {
    let zero = b.scalar(Op::Literal(0.0), &[]);
    let keep = b.node(Op::Compare(CmpOp::Eq), &[mask, zero], &cmp);
    let fill = b.scalar(Op::Literal(-1e9), &[]);
    b.node(Op::MaskedFill, &[scores, keep, fill], &out)
}

/// The spec's first program: multi-head attention as The Annotated Transformer writes it
/// (view → transpose → matmul → / sqrt(Dk) → masked_fill → softmax → matmul → transpose →
/// contiguous → view → linear), with outputs `out` and `attn`.
pub fn mha(d: i64, h: i64, mask: Mask) -> Program {
    let mut b = Builder::new();
    let Inputs { q, k, v, mask } = mha_inputs(&mut b, d, h, mask);
    let layers = layers(&mut b);
    let [bb, n, m, dd, hh] = ["B", "N", "M", "D", "H"].map(|name| Poly::sym(b.sym(name)));
    let dk = b.program.dims.use_of(b.sym("Dk"));
    let q = project(&mut b, q, layers[0], &n);
    let k = project(&mut b, k, layers[1], &m);
    let v = project(&mut b, v, layers[2], &m);
    let kt = b.node(
        Op::Transpose(2, 3),
        &[k],
        &[bb.clone(), hh.clone(), dk.clone(), m.clone()],
    );
    let scores_shape = vec![bb.clone(), hh.clone(), n.clone(), m.clone()];
    let s = b.node(Op::MatMul, &[q, kt], &scores_shape);
    let dkv = b.scalar(Op::DimValue(dk.clone()), &[]);
    let root = b.scalar(Op::Unary(UnaryOp::Sqrt), &[dkv]);
    let mut s = b.node(Op::Binary(BinaryOp::Div), &[s, root], &scores_shape);
    if let Some(mask_in) = mask {
        let mut shape = b.program.inputs[3].shape.clone();
        shape.insert(1, Poly::int(1));
        let mask4 = b.node(Op::Unsqueeze(1), &[mask_in], &shape);
        s = fill_masked(&mut b, s, mask4, shape, scores_shape.clone());
    }
    let p = b.node(Op::Softmax(3), &[s], &scores_shape);
    let x = b.node(
        Op::MatMul,
        &[p, v],
        &[bb.clone(), hh.clone(), n.clone(), dk.clone()],
    );
    let xt = b.node(
        Op::Transpose(1, 2),
        &[x],
        &[bb.clone(), n.clone(), hh.clone(), dk.clone()],
    );
    let xc = b.node(Op::Contiguous, &[xt], &[bb.clone(), n.clone(), hh.clone(), dk]);
    let merged = vec![bb.clone(), n.clone(), dd.clone()];
    let xv = b.node(Op::View(merged.clone()), &[xc], &merged);
    let out = b.node(Op::Linear, &[xv, layers[3].0, layers[3].1], &merged);
    b.output("out", out);
    b.output("attn", p);
    b.finish()
}

/// The spec's second program, head by head: `for h in 0..H` over row slices of the
/// projections, the heads concatenated before the output projection. Output `out` only.
pub fn mha_heads(d: i64, h: i64, mask: Mask) -> Program {
    let mut b = Builder::new();
    let Inputs { q, k, v, mask } = mha_inputs(&mut b, d, h, mask);
    let layers = layers(&mut b);
    let [bb, n, m, dd, hh] = ["B", "N", "M", "D", "H"].map(|name| Poly::sym(b.sym(name)));
    let dk = b.program.dims.use_of(b.sym("Dk"));
    let head = vec![bb.clone(), n.clone(), dk.clone()];
    let range = (Poly::int(0), hh);
    let heads = b.for_loop("h", range, &head.clone(), |b, hv| {
        let (start, end) = (hv.mul(&dk), hv.add(&Poly::int(1)).mul(&dk));
        let rows = |b: &mut Builder, (w, bias): (ValueId, ValueId)| {
            let slice = Op::Slice {
                axis: 0,
                start: start.clone(),
                end: end.clone(),
            };
            let w = b.node(slice.clone(), &[w], &[dk.clone(), dd.clone()]);
            (w, b.node(slice, &[bias], &vec![dk.clone()]))
        };
        let proj = |b: &mut Builder, x, layer, len: &Poly| {
            let layer = rows(b, layer);
            b.node(
                Op::Linear,
                &[x, layer.0, layer.1],
                &[bb.clone(), len.clone(), dk.clone()],
            )
        };
        let q = proj(b, q, layers[0], &n);
        let k = proj(b, k, layers[1], &m);
        let v = proj(b, v, layers[2], &m);
        let kt = b.node(Op::Transpose(1, 2), &[k], &[bb.clone(), dk.clone(), m.clone()]);
        let scores = vec![bb.clone(), n.clone(), m.clone()];
        let s = b.node(Op::MatMul, &[q, kt], &scores);
        let dkv = b.scalar(Op::DimValue(dk.clone()), &[]);
        let root = b.scalar(Op::Unary(UnaryOp::Sqrt), &[dkv]);
        let mut s = b.node(Op::Binary(BinaryOp::Div), &[s, root], &scores);
        if let Some(mask_in) = mask {
            let shape = b.program.inputs[3].shape.clone();
            s = fill_masked(b, s, mask_in, shape, scores.clone());
        }
        let p = b.node(Op::Softmax(2), &[s], &scores);
        b.node(Op::MatMul, &[p, v], &head)
    });
    let merged = vec![bb, n, dd];
    let x = b.node(Op::CatLoop(2), &[heads], &merged);
    let out = b.node(Op::Linear, &[x, layers[3].0, layers[3].1], &merged);
    b.output("out", out);
    b.finish()
}
