//! The optimizer's tensor language: the checked IR's ops plus the engineered ones.
//!
//! Attributes (axes, flags, floats, dim expressions, shapes) are leaf e-nodes, so rules
//! match and build them like any operand. An absent operand (a bias, a mask) is `none`.
//! Every e-class denotes one *value*: layouts are not part of it (`x` and
//! `x.contiguous()` are one class), so rules are plain equalities of values; the strides
//! of the program that comes out are decided when it is extracted (see `convert`).
//!
//! Leaves print in a raw, parseable form: `#s3*s4^-1` is the dim `D / H` when `D` and `H`
//! are dims 3 and 4, `[s0,s1,512]` a shape, `0.125` a float, `3` an integer.

use crate::dims::{Poly, Ratio, Sym};
use crate::ir::{BinaryOp, ReduceOp, UnaryOp};
use egg::{define_language, Id};
use std::fmt;
use std::str::FromStr;

define_language! {
    /// A tensor program as egg sees it. A node of the checked IR is named as its op
    /// ([`spelling`]) and holds its operands, then the leaves of its `Op::attrs` in their
    /// order (so `convert` needs no code per op); `?` marks an operand that may be `none`.
    pub enum Tensor {
        "none" = None,
        "param" = Param([Id; 2]),            // index, declared shape
        "input" = Input([Id; 2]),            // index, declared shape
        "lit" = Literal(Id),                 // float
        "dim" = DimValue(Id),                // dim
        "linear" = Linear([Id; 3]),          // x, w, bias?
        "matmul" = MatMul([Id; 2]),          // a, b
        "transpose" = Transpose([Id; 3]),    // x, axis, axis (smaller first)
        "permute" = Permute([Id; 2]),        // x, axes
        "reshape" = Reshape([Id; 2]),        // x, shape: `view` and `reshape` alike
        "contiguous" = Contiguous(Id),       // x
        "expand" = Expand([Id; 2]),          // x, shape
        "unsqueeze" = Unsqueeze([Id; 2]),    // x, axis
        "squeeze" = Squeeze([Id; 2]),        // x, axis
        "softmax" = Softmax([Id; 2]),        // x, axis
        "masked_fill" = MaskedFill([Id; 3]), // x, mask, value
        // Elementwise primitives, named as in the op table (`neg`, `exp`, `add`, `maximum`).
        Unary(UnaryOp, [Id; 1]),
        Binary(BinaryOp, [Id; 2]),
        Reduce(ReduceOp, [Id; 3]),          // x, axes (a shape of integers), keepdim (0 or 1)
        "where" = Where([Id; 3]),            // cond, a, b
        "tri" = Tri([Id; 3]),                // x, upper (0 or 1), diagonal
        "fill" = Fill([Id; 2]),              // float, shape
        "arange" = Arange([Id; 3]),          // start (a dim), step (a dim), shape
        "eq" = Eq([Id; 2]),
        "ne" = Ne([Id; 2]),
        "lt" = Lt([Id; 2]),
        "le" = Le([Id; 2]),
        "gt" = Gt([Id; 2]),
        "ge" = Ge([Id; 2]),
        "slice" = Slice([Id; 4]),            // x, axis, start, end
        "step_slice" = StepSlice([Id; 5]),   // x, axis, start, step (an int), len
        "select" = Select([Id; 3]),          // x, axis, index
        "for" = For([Id; 4]),                // var (a dim's index), start, end, item
        "cat_loop" = CatLoop([Id; 2]),       // seq, axis
        "stack" = Stack([Id; 2]),            // seq, axis
        // Opaque to every rule: a state's next version, which no rewrite may copy or move.
        "index_copy" = IndexCopy([Id; 6]),   // x, index, source, axis, starts, ends (shapes)
        "scale" = Scale([Id; 2]),            // x, float: `x * c`
        "gemm" = Gemm([Id; 6]),              // a, b, bias?, trans_a, trans_b, alpha
        "masked_softmax" = MaskedSoftmax([Id; 4]), // x, mask?, scale, fill
        "attention" = Attention([Id; 6]),    // q, k, v, mask?, scale, fill
        "scored_attention" = ScoredAttention([Id; 5]), // scores, v, mask?, scale, fill
        "sdpa" = Sdpa([Id; 7]),              // q, k, v, scale (a value), mask?, causal (0 or 1), gqa (0 or 1)
        "cat" = Cat(Box<[Id]>),              // axis, then the parts
        "outputs" = Outputs(Box<[Id]>),      // the program's outputs, in order
        Int(i64),
        Float(Float),
        Dim(DimLeaf),
        Shape(ShapeLeaf),
    }
}

/// An `f64` attribute, compared and hashed by its bits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Float(u64);

impl Float {
    pub fn new(x: f64) -> Float {
        Float(x.to_bits())
    }

    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl fmt::Debug for Float {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

impl fmt::Display for Float {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

impl FromStr for Float {
    type Err = String;
    fn from_str(s: &str) -> Result<Float, String> {
        // Integers are `Int`s; a float always has a point or an exponent.
        let looks_float = s.contains(['.', 'e', 'E']) || s.ends_with("inf") || s == "NaN";
        match (looks_float, s.parse::<f64>()) {
            (true, Ok(x)) => Ok(Float::new(x)),
            _ => Err(format!("not a float: {s}")),
        }
    }
}

/// A dim expression attribute (a slice bound, an index, a loop bound).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DimLeaf(pub Poly);

impl fmt::Display for DimLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", raw(&self.0))
    }
}

impl FromStr for DimLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<DimLeaf, String> {
        let body = s.strip_prefix('#').ok_or_else(|| format!("not a dim: {s}"))?;
        parse_raw(body).map(DimLeaf)
    }
}

/// A shape attribute (the sizes of a `reshape`, a declared shape, `permute`'s axes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShapeLeaf(pub Vec<Poly>);

impl fmt::Display for ShapeLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(raw).collect();
        write!(f, "[{}]", parts.join(","))
    }
}

impl FromStr for ShapeLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<ShapeLeaf, String> {
        let body = s
            .strip_prefix('[')
            .and_then(|b| b.strip_suffix(']'))
            .ok_or_else(|| format!("not a shape: {s}"))?;
        if body.is_empty() {
            return Ok(ShapeLeaf(Vec::new()));
        }
        body.split(',')
            .map(parse_raw)
            .collect::<Result<_, _>>()
            .map(ShapeLeaf)
    }
}

/// The raw text of a dim expression: terms joined by `+`, each a coefficient and
/// `s<index>^<power>` factors (`3*s0*s4^-1`); opaque quotients print as `q(..)`.
pub fn raw(p: &Poly) -> String {
    let terms: Vec<String> = p
        .terms()
        .map(|(m, c)| {
            let mut parts = Vec::new();
            let coeff = match c.denom() {
                1 => c.numer().to_string(),
                d => format!("{}/{d}", c.numer()),
            };
            let factors: Vec<String> = m
                .atoms()
                .map(|(a, e)| {
                    let base = match a {
                        crate::dims::Atom::Sym(s) => format!("s{s}"),
                        other => format!("q({other:?})").replace(' ', ""),
                    };
                    match e {
                        1 => base,
                        e => format!("{base}^{e}"),
                    }
                })
                .collect();
            if coeff != "1" || factors.is_empty() {
                parts.push(coeff);
            }
            parts.extend(factors);
            parts.join("*")
        })
        .collect();
    match terms.is_empty() {
        true => "0".to_string(),
        false => terms.join("+"),
    }
}

/// Parses [`raw`] text (symbols and rational coefficients only).
pub fn parse_raw(s: &str) -> Result<Poly, String> {
    let bad = || format!("not a dim expression: {s}");
    let mut sum = Poly::int(0);
    for term in s.split('+') {
        let mut coeff = Ratio::ONE;
        let mut factors: Vec<(Sym, i32)> = Vec::new();
        for factor in term.split('*') {
            if let Some(sym) = factor.strip_prefix('s') {
                let (base, power) = sym.split_once('^').unwrap_or((sym, "1"));
                let base: Sym = base.parse().map_err(|_| bad())?;
                factors.push((base, power.parse().map_err(|_| bad())?));
            } else {
                let (n, d) = factor.split_once('/').unwrap_or((factor, "1"));
                let (n, d): (i128, i128) = (n.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
                if d == 0 {
                    return Err(bad());
                }
                coeff = Ratio::new(n * coeff.numer(), d * coeff.denom());
            }
        }
        sum = sum.add(&Poly::term(coeff, &factors));
    }
    Ok(sum)
}

/// The name of an IR op's node, where it is not the op's own: a `view` is a `reshape` here
/// (the e-graph holds values, not layouts), `tril` and `triu` are one `tri` with a flag, and
/// two names are short.
pub fn spelling(op: &str) -> &str {
    match op {
        "view" => "reshape",
        "tril" | "triu" => "tri",
        "literal" => "lit",
        "scaled_dot_product_attention" => "sdpa",
        other => other,
    }
}

impl Tensor {
    /// The integer of an `Int` leaf.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Tensor::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f64> {
        match self {
            Tensor::Float(x) => Some(x.get()),
            _ => None,
        }
    }

    pub fn as_dim(&self) -> Option<&Poly> {
        match self {
            Tensor::Dim(d) => Some(&d.0),
            _ => None,
        }
    }

    pub fn as_shape(&self) -> Option<&[Poly]> {
        match self {
            Tensor::Shape(s) => Some(&s.0),
            _ => None,
        }
    }

    /// Whether this node is an attribute (a leaf that is not a value).
    pub fn is_attr(&self) -> bool {
        matches!(
            self,
            Tensor::None | Tensor::Int(_) | Tensor::Float(_) | Tensor::Dim(_) | Tensor::Shape(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egg::RecExpr;

    #[test]
    fn leaves_print_and_parse_back() {
        let dk = Poly::term(Ratio::ONE, &[(3, 1), (4, -1)]);
        let h = Poly::sym(6).mul(&dk).add(&Poly::int(2));
        for p in [dk.clone(), h, Poly::int(0), Poly::int(-7)] {
            assert_eq!(parse_raw(&raw(&p)).unwrap(), p, "{}", raw(&p));
        }
        let text = "(reshape (input 0 [s0,512]) [s0,8,64])";
        let e: RecExpr<Tensor> = text.parse().unwrap();
        assert_eq!(e.to_string(), text);
        let e: RecExpr<Tensor> = "(scale (lit 1.5) 0.125)".parse().unwrap();
        assert_eq!(e.to_string(), "(scale (lit 1.5) 0.125)");
        let d: RecExpr<Tensor> = "#s3*s4^-1".parse().unwrap();
        assert_eq!(d.as_ref()[0], Tensor::Dim(DimLeaf(dk)));
    }
}
