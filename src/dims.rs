//! Symbolic dims: a normal form in which equal dim expressions compare equal.
//!
//! A dim expression is normalized to a [`Poly`]: a sum of terms, each a rational coefficient
//! times a [`Monomial`], a product of [`Atom`]s raised to integer (possibly negative) powers.
//! Atoms are the dims that have no definition (free dims, constant dims, loop variables);
//! a derived dim (`dim Dk = D / H`) is replaced by its definition, so `H * Dk` and `D` have
//! the same normal form `D`. Negative powers make `D / H` a monomial, so every division by a
//! single term is exact algebra; whether it is an *integer* is a separate proof obligation,
//! discharged by [`DimTable::div`] from constant values, `assert`s or structure.
//! Division by a sum of terms, and `%` that cannot be proved zero, become opaque atoms.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Index of a dim in its [`DimTable`], in declaration order.
pub type Sym = usize;

/// A reduced fraction with a positive denominator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: i128,
    den: i128,
}

impl Ratio {
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };
    pub const ONE: Ratio = Ratio { num: 1, den: 1 };

    pub fn new(num: i128, den: i128) -> Ratio {
        assert!(den != 0, "zero denominator");
        let g = gcd(num.unsigned_abs(), den.unsigned_abs()).max(1) as i128;
        let sign = if den < 0 { -1 } else { 1 };
        Ratio {
            num: sign * num / g,
            den: sign * den / g,
        }
    }

    pub fn int(n: i128) -> Ratio {
        Ratio { num: n, den: 1 }
    }

    pub fn is_zero(self) -> bool {
        self.num == 0
    }

    pub fn as_int(self) -> Option<i128> {
        (self.den == 1).then_some(self.num)
    }

    pub fn numer(self) -> i128 {
        self.num
    }

    pub fn denom(self) -> i128 {
        self.den
    }

    /// Arithmetic saturates instead of overflowing: dims are small, and a saturated value
    /// only makes a proof fail, never succeed wrongly, because equal inputs saturate alike.
    fn add(self, o: Ratio) -> Ratio {
        let num = self
            .num
            .saturating_mul(o.den)
            .saturating_add(o.num.saturating_mul(self.den));
        Ratio::new(num, self.den.saturating_mul(o.den))
    }

    fn mul(self, o: Ratio) -> Ratio {
        Ratio::new(self.num.saturating_mul(o.num), self.den.saturating_mul(o.den))
    }

    fn recip(self) -> Option<Ratio> {
        (self.num != 0).then(|| Ratio::new(self.den, self.num))
    }

    fn neg(self) -> Ratio {
        Ratio {
            num: -self.num,
            den: self.den,
        }
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// An indivisible factor of a monomial.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    /// A free dim, a constant dim or a loop variable.
    Sym(Sym),
    /// `a / b` where `b` is a sum of terms that does not divide `a` algebraically.
    Quot(Box<Poly>, Box<Poly>),
    /// `a % b` that could not be proved zero.
    Rem(Box<Poly>, Box<Poly>),
}

/// A product of atoms with non-zero integer exponents, sorted by atom.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Monomial(Vec<(Atom, i32)>);

impl Monomial {
    fn mul(&self, other: &Monomial) -> Monomial {
        let mut map: BTreeMap<Atom, i32> = self.0.iter().cloned().collect();
        for (a, e) in &other.0 {
            *map.entry(a.clone()).or_insert(0) += e;
        }
        Monomial(map.into_iter().filter(|(_, e)| *e != 0).collect())
    }

    fn recip(&self) -> Monomial {
        Monomial(self.0.iter().map(|(a, e)| (a.clone(), -e)).collect())
    }

    fn degree(&self) -> i32 {
        self.0.iter().map(|(_, e)| e).sum()
    }

    /// Whether `other` is `self` times a monomial of non-negative powers.
    fn divides(&self, other: &Monomial) -> bool {
        self.0.iter().all(|(a, e)| {
            let found = other.0.binary_search_by(|(b, _)| b.cmp(a));
            found.is_ok_and(|i| other.0[i].1 >= *e)
        })
    }

    fn has_negative(&self) -> bool {
        self.0.iter().any(|(_, e)| *e < 0)
    }

    pub fn atoms(&self) -> impl Iterator<Item = (&Atom, i32)> {
        self.0.iter().map(|(a, e)| (a, *e))
    }
}

/// The normal form of a dim expression: a sum of rational multiples of monomials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Poly(BTreeMap<Monomial, Ratio>);

impl Ord for Ratio {
    fn cmp(&self, o: &Ratio) -> Ordering {
        (self.num.saturating_mul(o.den)).cmp(&o.num.saturating_mul(self.den))
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Ratio) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Poly {
    pub fn int(n: i64) -> Poly {
        Poly::ratio(Ratio::int(n as i128))
    }

    fn ratio(r: Ratio) -> Poly {
        let mut p = Poly::default();
        if !r.is_zero() {
            p.0.insert(Monomial::default(), r);
        }
        p
    }

    pub fn sym(s: Sym) -> Poly {
        Poly::atom(Atom::Sym(s))
    }

    /// `c * s0^e0 * s1^e1 * ..` (exponents may be negative): one term, as written.
    pub fn term(c: Ratio, factors: &[(Sym, i32)]) -> Poly {
        let mono = Monomial(vec![]).mul(&Monomial(
            factors.iter().map(|&(s, e)| (Atom::Sym(s), e)).collect(),
        ));
        let mut p = Poly::default();
        if !c.is_zero() {
            p.0.insert(mono, c);
        }
        p
    }

    fn atom(a: Atom) -> Poly {
        let mut p = Poly::default();
        p.0.insert(Monomial(vec![(a, 1)]), Ratio::ONE);
        p
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    /// The value when the polynomial is a constant.
    pub fn as_const(&self) -> Option<Ratio> {
        match self.0.len() {
            0 => Some(Ratio::ZERO),
            1 => self.0.get(&Monomial::default()).copied(),
            _ => None,
        }
    }

    /// The integer value when the polynomial is an integer constant.
    pub fn as_int(&self) -> Option<i64> {
        self.as_const()?.as_int().and_then(|n| i64::try_from(n).ok())
    }

    /// True when this is the literal constant 1 (the only size broadcasting treats as 1).
    pub fn is_one(&self) -> bool {
        self.as_int() == Some(1)
    }

    pub fn add(&self, other: &Poly) -> Poly {
        let mut out = self.0.clone();
        for (m, c) in &other.0 {
            let sum = out.get(m).copied().unwrap_or(Ratio::ZERO).add(*c);
            if sum.is_zero() {
                out.remove(m);
            } else {
                out.insert(m.clone(), sum);
            }
        }
        Poly(out)
    }

    pub fn neg(&self) -> Poly {
        Poly(self.0.iter().map(|(m, c)| (m.clone(), c.neg())).collect())
    }

    pub fn sub(&self, other: &Poly) -> Poly {
        self.add(&other.neg())
    }

    pub fn mul(&self, other: &Poly) -> Poly {
        let mut out = Poly::default();
        for (m1, c1) in &self.0 {
            for (m2, c2) in &other.0 {
                let mut term = Poly::default();
                term.0.insert(m1.mul(m2), c1.mul(*c2));
                out = out.add(&term);
            }
        }
        out
    }

    /// The single term of a one-term polynomial.
    fn single_term(&self) -> Option<(&Monomial, Ratio)> {
        match self.0.len() {
            1 => self.0.iter().next().map(|(m, c)| (m, *c)),
            _ => None,
        }
    }

    /// `self / other` as algebra, ignoring whether the result is an integer: exact when
    /// `other` is one term; otherwise an opaque quotient atom (or the cancelled constant
    /// when `self` is a constant multiple of `other`).
    fn quotient(&self, other: &Poly) -> Option<Poly> {
        if other.is_zero() {
            return None;
        }
        if let Some((m, c)) = other.single_term() {
            let mut inv = Poly::default();
            inv.0.insert(m.recip(), c.recip()?);
            return Some(self.mul(&inv));
        }
        if let Some(k) = self.constant_multiple_of(other) {
            return Some(Poly::ratio(k));
        }
        if let Some(q) = self.exact_quotient(other) {
            return Some(q);
        }
        Some(Poly::atom(Atom::Quot(
            Box::new(self.clone()),
            Box::new(other.clone()),
        )))
    }

    /// `q` such that `self == q * other` as polynomials, where `other` is a factor of
    /// `self` (`(N * N + N) / (N + 1)` is `N`): long division by leading terms in graded
    /// lexicographic order, after both are multiplied by one monomial that clears their
    /// negative powers. Where `other` divides `self`, every leading term of the remainder is
    /// a multiple of `other`'s, so the division ends with remainder 0; a leading term that
    /// is not, or more steps than `self` has terms times [`DIVISION_STEPS`], means `other`
    /// is no factor.
    fn exact_quotient(&self, other: &Poly) -> Option<Poly> {
        let clear = self.clearing_monomial(other);
        let (mut rest, divisor) = (self.times(&clear), other.times(&clear));
        let (lead, lead_c) = divisor.leading_term()?;
        let mut q = Poly::default();
        for _ in 0..self.0.len().saturating_mul(DIVISION_STEPS) {
            let Some((m, c)) = rest.leading_term() else {
                // Coefficients saturate: the product must give `self` back.
                return (q.mul(other) == *self).then_some(q);
            };
            let factor = m.mul(&lead.recip());
            if factor.has_negative() {
                return None;
            }
            let term = Poly(BTreeMap::from([(factor, c.mul(lead_c.recip()?))]));
            rest = rest.sub(&term.mul(&divisor));
            q = q.add(&term);
        }
        None
    }

    /// The monomial that, multiplied into `self` and `other`, leaves no negative power in
    /// either.
    fn clearing_monomial(&self, other: &Poly) -> Monomial {
        let mut lowest: BTreeMap<Atom, i32> = BTreeMap::new();
        for (m, _) in self.0.iter().chain(&other.0) {
            for (a, e) in &m.0 {
                let low = lowest.entry(a.clone()).or_insert(0);
                *low = (*low).min(*e);
            }
        }
        Monomial(
            lowest
                .into_iter()
                .filter(|(_, e)| *e < 0)
                .map(|(a, e)| (a, -e))
                .collect(),
        )
    }

    /// Every term multiplied by the monomial `m`.
    fn times(&self, m: &Monomial) -> Poly {
        Poly(self.0.iter().map(|(t, c)| (t.mul(m), *c)).collect())
    }

    /// The term whose monomial is largest in graded lexicographic order.
    fn leading_term(&self) -> Option<(&Monomial, Ratio)> {
        self.0
            .iter()
            .max_by(|(a, _), (b, _)| graded_lex(a, b))
            .map(|(m, c)| (m, *c))
    }

    /// `k` such that `self == k * other`, if there is one.
    fn constant_multiple_of(&self, other: &Poly) -> Option<Ratio> {
        let (m, c) = other.0.iter().next()?;
        let k = self.0.get(m)?.mul(c.recip()?);
        (other.mul(&Poly::ratio(k)) == *self).then_some(k)
    }

    /// Replace atoms by values where `value` knows them; opaque atoms are evaluated when
    /// their parts become constant.
    pub fn substitute(&self, value: &dyn Fn(Sym) -> Option<Poly>) -> Poly {
        let mut out = Poly::default();
        for (m, c) in &self.0 {
            // The dims that keep their symbol stay one monomial, taken over as it is: a
            // stride `N^k` costs no `k` multiplications.
            let mut kept = Vec::new();
            let mut term = Poly::ratio(*c);
            for (atom, e) in &m.0 {
                let base = match atom {
                    Atom::Sym(s) => match value(*s) {
                        Some(v) => v,
                        None => {
                            kept.push((atom.clone(), *e));
                            continue;
                        }
                    },
                    Atom::Quot(a, b) => {
                        let (a, b) = (a.substitute(value), b.substitute(value));
                        match (a.as_const(), b.as_const()) {
                            (Some(x), Some(y)) if !y.is_zero() => {
                                Poly::ratio(x.mul(y.recip().unwrap_or(Ratio::ZERO)))
                            }
                            _ => a.quotient(&b).unwrap_or_default(),
                        }
                    }
                    Atom::Rem(a, b) => {
                        let (a, b) = (a.substitute(value), b.substitute(value));
                        match (int_of(&a), int_of(&b)) {
                            (Some(x), Some(y)) if y != 0 => Poly::int(x.rem_euclid(y)),
                            _ => Poly::atom(Atom::Rem(Box::new(a), Box::new(b))),
                        }
                    }
                };
                term = term.mul(&base.pow(*e));
            }
            if !kept.is_empty() {
                term = term.mul(&Poly(BTreeMap::from([(Monomial(kept), Ratio::ONE)])));
            }
            out = out.add(&term);
        }
        out
    }

    fn pow(&self, e: i32) -> Poly {
        if e < 0 {
            let inv = Poly::int(1).quotient(self).unwrap_or_default();
            return inv.pow(-e);
        }
        (0..e).fold(Poly::int(1), |acc, _| acc.mul(self))
    }

    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, Ratio)> {
        self.0.iter().map(|(m, c)| (m, *c))
    }

    /// The largest integer that divides `self` for every value of its dims: the gcd of its
    /// coefficients where each is an integer and each term a product of dims with positive
    /// exponents (so an integer), else 1.
    fn integer_factor(&self) -> u128 {
        let integral = self.0.iter().all(|(m, c)| {
            c.as_int().is_some() && m.0.iter().all(|(a, e)| *e > 0 && matches!(a, Atom::Sym(_)))
        });
        match integral {
            true => self
                .0
                .iter()
                .fold(0, |g, (_, c)| gcd(g, c.numer().unsigned_abs())),
            false => 1,
        }
    }

    /// `(a, b)` with `self == a * s + b`, when `s` appears only to the first power and
    /// outside opaque atoms.
    fn split_linear(&self, s: Sym) -> Option<(Poly, Poly)> {
        let (mut a, mut b) = (Poly::default(), Poly::default());
        for (m, c) in &self.0 {
            let rest: Vec<(Atom, i32)> = m.0.iter().filter(|(x, _)| *x != Atom::Sym(s)).cloned().collect();
            let term = Poly(BTreeMap::from([(Monomial(rest), *c)]));
            match m.0.iter().find(|(x, _)| *x == Atom::Sym(s)) {
                None if term.syms().contains(&s) => return None,
                None => b = b.add(&term),
                Some((_, 1)) => a = a.add(&term),
                Some(_) => return None,
            }
        }
        Some((a, b))
    }

    /// The remainder `a % b` kept opaque, to be evaluated once the dims have values (an
    /// `assert a % b == 0` about free dims is checked again at run time through it).
    pub fn rem_atom(a: &Poly, b: &Poly) -> Poly {
        Poly::atom(Atom::Rem(Box::new(a.clone()), Box::new(b.clone())))
    }

    /// Every symbol this polynomial mentions, opaque atoms included.
    pub fn syms(&self) -> Vec<Sym> {
        let mut out = Vec::new();
        for m in self.0.keys() {
            for (a, _) in &m.0 {
                match a {
                    Atom::Sym(s) => out.push(*s),
                    Atom::Quot(x, y) | Atom::Rem(x, y) => {
                        out.extend(x.syms());
                        out.extend(y.syms());
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// How many steps of [`Poly::exact_quotient`] each term of the dividend allows.
const DIVISION_STEPS: usize = 4;

/// Monomials by total degree, then by the exponent of the first atom (in atom order)
/// where they differ: a monomial order, so that a product's leading term is the product of
/// the leading terms.
fn graded_lex(a: &Monomial, b: &Monomial) -> Ordering {
    a.degree().cmp(&b.degree()).then_with(|| {
        let exponents = |m: &Monomial| m.0.iter().cloned().collect::<BTreeMap<Atom, i32>>();
        let (ea, eb) = (exponents(a), exponents(b));
        let atoms: std::collections::BTreeSet<&Atom> = ea.keys().chain(eb.keys()).collect();
        let first = atoms
            .into_iter()
            .map(|x| ea.get(x).unwrap_or(&0).cmp(eb.get(x).unwrap_or(&0)))
            .find(|o| o.is_ne());
        first.unwrap_or(Ordering::Equal)
    })
}

fn int_of(p: &Poly) -> Option<i64> {
    p.as_int()
}

/// What a declared dim is.
#[derive(Clone, Debug, PartialEq)]
pub enum DimKind {
    /// `dim B`: any size; `value` comes from `--dim` or an input and is for display and
    /// running only, never for proofs.
    Free { value: Option<i64> },
    /// `dim D = 512` (after `--dim` overrides).
    Const(i64),
    /// `dim Dk = D / H`: replaced by its normal form wherever it is used.
    Derived(Poly),
    /// `h` of `for h in start..end`: `start <= h < end`.
    Loop { start: Poly, end: Poly },
}

#[derive(Clone, Debug, PartialEq)]
pub struct DimInfo {
    pub name: String,
    pub kind: DimKind,
}

/// Why a division of dims was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum DivError {
    /// The divisor is zero (or evaluates to zero).
    ByZero,
    /// Neither values, `assert`s nor structure prove the division exact.
    NotExact,
}

/// The dims of a program and the facts known about them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DimTable {
    dims: Vec<DimInfo>,
    /// `(a, b)`: `b` divides `a`, from `assert a % b == 0` or a proved division.
    divides: Vec<(Poly, Poly)>,
    /// `p`: `p >= 0`, from an asserted inequality (`assert N >= 2` gives `N - 2`).
    nonneg: Vec<Poly>,
}

impl DimTable {
    pub fn new() -> DimTable {
        DimTable::default()
    }

    pub fn declare(&mut self, name: &str, kind: DimKind) -> Sym {
        self.dims.push(DimInfo {
            name: name.to_string(),
            kind,
        });
        self.dims.len() - 1
    }

    /// Forget every dim declared after the first `len` (facts are kept: they mention only
    /// older dims or none that matter).
    pub fn truncate(&mut self, len: usize) {
        self.dims.truncate(len);
        self.divides
            .retain(|(a, b)| a.syms().iter().chain(&b.syms()).all(|s| *s < len));
    }

    pub fn lookup(&self, name: &str) -> Option<Sym> {
        self.dims.iter().rposition(|d| d.name == name)
    }

    pub fn info(&self, s: Sym) -> &DimInfo {
        &self.dims[s]
    }

    pub fn set_kind(&mut self, s: Sym, kind: DimKind) {
        self.dims[s].kind = kind;
    }

    pub fn iter(&self) -> impl Iterator<Item = (Sym, &DimInfo)> {
        self.dims.iter().enumerate()
    }

    pub fn len(&self) -> usize {
        self.dims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }

    /// The known divisibility facts, as `(dividend, divisor)` pairs.
    pub fn facts(&self) -> &[(Poly, Poly)] {
        &self.divides
    }

    /// Record that `p >= 0` (an asserted inequality).
    pub fn assume_nonneg(&mut self, p: Poly) {
        if !self.nonneg.contains(&p) {
            self.nonneg.push(p);
        }
    }

    /// Record that `b` divides `a` (an `assert a % b == 0`).
    pub fn assume_divides(&mut self, a: Poly, b: Poly) {
        if !self.divides.contains(&(a.clone(), b.clone())) {
            self.divides.push((a, b));
        }
    }

    /// The normal form of a use of dim `s`.
    pub fn use_of(&self, s: Sym) -> Poly {
        match &self.dims[s].kind {
            DimKind::Derived(p) => p.clone(),
            _ => Poly::sym(s),
        }
    }

    /// The value of a constant dim.
    fn const_value(&self, s: Sym) -> Option<Poly> {
        match self.dims[s].kind {
            DimKind::Const(v) => Some(Poly::int(v)),
            _ => None,
        }
    }

    /// `p` with every constant dim replaced by its value.
    pub fn with_consts(&self, p: &Poly) -> Poly {
        p.substitute(&|s| self.const_value(s))
    }

    /// Whether `a` and `b` are equal for every value of the free dims: symbolically, or
    /// once constant dims take their values.
    pub fn equal(&self, a: &Poly, b: &Poly) -> bool {
        a == b || self.with_consts(&a.sub(b)).is_zero()
    }

    /// Whether `p` is 1 for every value of the free dims, given the constant dims' values
    /// (`U` with `dim U = 1`, `H * 3 - 8` with `H = 3`).
    pub fn is_one(&self, p: &Poly) -> bool {
        self.with_consts(p).as_int() == Some(1)
    }

    /// Whether `p`, a size, is 1 for no value of the free dims: provably at least 2
    /// (`12 * B * N`), provably at most 0, or a multiple of an integer at least 2
    /// (`2 * N - 2`, which is 0 or at least 2).
    pub fn never_one(&self, p: &Poly) -> bool {
        self.provably_nonneg(&p.sub(&Poly::int(2)))
            || self.provably_nonneg(&p.neg())
            || self.with_consts(p).integer_factor() >= 2
    }

    /// Whether `p` is at least 1 for every value of the free dims: a size that is never 0.
    pub fn provably_positive(&self, p: &Poly) -> bool {
        self.provably_nonneg(&p.sub(&Poly::int(1)))
    }

    /// `p` as the integer 0 or 1 where it is a fraction or a sum of constant dims that
    /// their values make 0 or 1 (the `-1` of `x.view(-1, B * N * 12)` on `[B, N, D]`,
    /// `D = 12`, is `D / 12`, that is 1; the slice `H * 3 : 10` with `H = 3` has size 1),
    /// since those sizes broadcast or are empty; else `p`, so that a size computed in the
    /// program keeps the names it was computed from (`arange(0, Dh, 2)` has `Dh / 2`
    /// elements, not 64) and `D` and `Dk` still print as themselves.
    pub fn simplify(&self, p: &Poly) -> Poly {
        let fraction = p.terms().any(|(_, c)| c.as_int().is_none());
        let sum = p.terms().count() > 1;
        match self.with_consts(p).as_int() {
            Some(n @ (0 | 1)) if fraction || sum => Poly::int(n),
            _ => p.clone(),
        }
    }

    /// `a / b`, proved to be an integer for every value of the free dims.
    pub fn div(&self, a: &Poly, b: &Poly) -> Result<Poly, DivError> {
        if self.with_consts(b).is_zero() {
            return Err(DivError::ByZero);
        }
        let q = a.quotient(b).ok_or(DivError::ByZero)?;
        if self.is_integral(&q) || self.divides_by_fact(a, b) {
            Ok(q)
        } else {
            Err(DivError::NotExact)
        }
    }

    /// `a % b`: zero when the division is provably exact, the constant remainder when both
    /// are constants, an opaque atom otherwise.
    pub fn rem(&self, a: &Poly, b: &Poly) -> Result<Poly, DivError> {
        if self.with_consts(b).is_zero() {
            return Err(DivError::ByZero);
        }
        if self.div(a, b).is_ok() {
            return Ok(Poly::default());
        }
        let (ca, cb) = (self.with_consts(a), self.with_consts(b));
        match (ca.as_int(), cb.as_int()) {
            (Some(x), Some(y)) => Ok(Poly::int(x.rem_euclid(y))),
            _ => Ok(Poly::atom(Atom::Rem(Box::new(a.clone()), Box::new(b.clone())))),
        }
    }

    /// Whether `b` divides `a` by a recorded fact: `a = m * x` and `b * n = y` for a fact
    /// `y | x` and integral `m`, `n`.
    fn divides_by_fact(&self, a: &Poly, b: &Poly) -> bool {
        self.divides.iter().any(|(x, y)| {
            let m = a.quotient(x);
            let n = y.quotient(b);
            matches!((m, n), (Some(m), Some(n)) if self.is_integral_plain(&m) && self.is_integral_plain(&n))
        })
    }

    /// Whether `p` is an integer for every value of the free dims.
    pub fn is_integral(&self, p: &Poly) -> bool {
        self.is_integral_plain(p) || self.is_integral_plain(&self.with_consts(p))
    }

    /// Integer coefficients over monomials that are each known integers: non-negative
    /// powers of atoms, or a known-exact quotient (a derived dim, a fact) times such. An
    /// opaque quotient `a / b` is an integer only by a fact: `H / (H + 1)` is a fraction.
    fn is_integral_plain(&self, p: &Poly) -> bool {
        p.terms().all(|(m, c)| {
            c.as_int().is_some()
                && m.atoms().all(|(a, _)| self.is_integral_atom(a))
                && (!m.has_negative() || self.is_integral_monomial(m))
        })
    }

    /// A free dim, a loop variable and a remainder are integers; a quotient by a sum is one
    /// where a recorded fact proves it exact by structure alone (without other quotients,
    /// so that the proof cannot recurse).
    fn is_integral_atom(&self, a: &Atom) -> bool {
        let Atom::Quot(x, y) = a else {
            return true;
        };
        let simple = |p: &Poly| {
            p.terms().all(|(m, c)| {
                c.as_int().is_some()
                    && !m.has_negative()
                    && m.atoms().all(|(a, _)| !matches!(a, Atom::Quot(..)))
            })
        };
        self.divides.iter().any(|(fx, fy)| {
            let m = x.quotient(fx);
            let n = fy.quotient(y);
            matches!((m, n), (Some(m), Some(n)) if simple(&m) && simple(&n))
        })
    }

    /// A monomial with negative powers is integral when it is a product of known-integral
    /// quotients (the definitions of derived dims and the facts) and non-negative powers.
    fn is_integral_monomial(&self, m: &Monomial) -> bool {
        let known: Vec<Monomial> = self.integral_quotients().collect();
        let mut rest = m.clone();
        for q in &known {
            while rest.has_negative() && reduces(&rest, q) {
                rest = rest.mul(&q.recip());
            }
        }
        !rest.has_negative()
    }

    /// One-term quotients known to be integers, each as a monomial.
    fn integral_quotients(&self) -> impl Iterator<Item = Monomial> + '_ {
        let derived = self.dims.iter().filter_map(|d| match &d.kind {
            DimKind::Derived(p) => p
                .single_term()
                .and_then(|(m, c)| (c == Ratio::ONE && m.has_negative()).then(|| m.clone())),
            _ => None,
        });
        let facts = self.divides.iter().filter_map(|(x, y)| {
            let q = x.quotient(y)?;
            let (m, c) = q.single_term()?;
            (c == Ratio::ONE && m.has_negative()).then(|| m.clone())
        });
        derived.chain(facts)
    }

    /// Whether `p >= 0` for every value of the free dims (each at least 1) and every loop
    /// variable in its range: by structure, or as an asserted inequality plus something
    /// non-negative by structure.
    pub fn provably_nonneg(&self, p: &Poly) -> bool {
        self.nonneg_by_structure(p) || self.nonneg.iter().any(|f| self.nonneg_by_structure(&p.sub(f)))
    }

    /// Sufficient, not complete: `p` must be linear in each loop variable, which is
    /// replaced by the end of its range that makes `p` smallest (by the sign of its
    /// coefficient); each free dim `s` becomes `1 + s'`; what is left must have
    /// non-negative coefficients over atoms, all of which are non-negative.
    fn nonneg_by_structure(&self, p: &Poly) -> bool {
        if let Some(answer) = self.nonneg_quickly(&self.with_consts(p)) {
            return answer;
        }
        let mut cases = vec![self.with_consts(p)];
        for s in p.syms() {
            let DimKind::Loop { start, end } = &self.dims[s].kind else {
                continue;
            };
            let last = end.sub(&Poly::int(1));
            let mut next = Vec::new();
            for q in &cases {
                let Some((coeff, _)) = q.split_linear(s) else {
                    return false;
                };
                let ends: Vec<&Poly> = if all_nonneg(&coeff) {
                    vec![start]
                } else if all_nonneg(&coeff.neg()) {
                    vec![&last]
                } else {
                    vec![start, &last]
                };
                for v in ends {
                    next.push(self.with_consts(&q.substitute(&|t| (t == s).then(|| v.clone()))));
                }
            }
            cases = next;
        }
        cases.iter().all(|q| all_nonneg(&self.shift_free_dims(q)))
    }

    /// The answer of `nonneg_by_structure` for `q`, a polynomial over free dims to positive
    /// powers, where it is quick to find: `Some(true)` where every negative term is covered
    /// by positive terms that are multiples of it (a multiple is at least as large, every
    /// free dim being at least 1); `Some(false)` where the terms of the highest degree sum
    /// to a negative number (then `q` is negative where every free dim is large and equal,
    /// so no structural proof exists). `None` otherwise. Both take time about linear in the
    /// size of `q`, where the structural proof expands `(s + 1)^k`: comparing the strides
    /// `N^k` and `N^(k+1)` of a rank-30,000 tensor must not.
    fn nonneg_quickly(&self, q: &Poly) -> Option<bool> {
        let free = |m: &Monomial| {
            m.atoms().all(|(a, e)| {
                e > 0 && matches!(a, Atom::Sym(s) if matches!(self.dims[*s].kind, DimKind::Free { .. }))
            })
        };
        const SMALL: i128 = 1 << 100;
        let small = |c: Ratio| c.num.unsigned_abs() < SMALL as u128 && c.den < SMALL;
        if !q.terms().all(|(m, c)| free(m) && small(c)) {
            return None;
        }
        let mut positive: Vec<(&Monomial, Ratio)> = q.terms().filter(|(_, c)| *c > Ratio::ZERO).collect();
        let covered = q.terms().filter(|(_, c)| *c < Ratio::ZERO).all(|(m, c)| {
            let mut need = c.neg();
            for (_, left) in positive.iter_mut().filter(|(pm, _)| m.divides(pm)) {
                let take = need.min(*left);
                (*left, need) = (left.add(take.neg()), need.add(take.neg()));
            }
            need <= Ratio::ZERO
        });
        if covered {
            return Some(true);
        }
        let mut by_degree: BTreeMap<i32, Ratio> = BTreeMap::new();
        for (m, c) in q.terms() {
            let sum = by_degree.entry(m.degree()).or_insert(Ratio::ZERO);
            *sum = sum.add(c);
        }
        let top = by_degree.values().rev().find(|c| **c != Ratio::ZERO);
        top.is_some_and(|c| *c < Ratio::ZERO).then_some(false)
    }

    /// `q` with each free dim `s` replaced by `s + 1` (so that the new `s` ranges over
    /// `s >= 0`), where `s` appears only to non-negative powers and outside opaque atoms.
    fn shift_free_dims(&self, q: &Poly) -> Poly {
        let mut out = q.clone();
        for s in q.syms() {
            let free = matches!(self.dims[s].kind, DimKind::Free { .. });
            let plain = out.terms().all(|(m, _)| {
                m.atoms().all(|(a, e)| match a {
                    Atom::Sym(t) => *t != s || e > 0,
                    Atom::Quot(x, y) | Atom::Rem(x, y) => !x.syms().contains(&s) && !y.syms().contains(&s),
                })
            });
            if free && plain {
                let shifted = Poly::sym(s).add(&Poly::int(1));
                out = out.substitute(&|t| (t == s).then(|| shifted.clone()));
            }
        }
        out
    }

    /// The value of `p` when every atom has one: constant dims their value, the others from
    /// `value` (free dims bound at run time, loop variables). `None` when something has no
    /// value or the result is not an integer.
    pub fn eval(&self, p: &Poly, value: &dyn Fn(Sym) -> Option<i64>) -> Option<i64> {
        let q = p.substitute(&|s| match self.dims[s].kind {
            DimKind::Const(v) => Some(Poly::int(v)),
            _ => value(s).map(Poly::int),
        });
        q.as_int()
    }

    /// The value of `p` from declarations alone: constant dims, and free dims that have a
    /// value from `--dim`.
    pub fn value(&self, p: &Poly) -> Option<i64> {
        self.eval(p, &|s| match self.dims[s].kind {
            DimKind::Free { value } => value,
            _ => None,
        })
    }

    /// Text of a dim expression, as the spec prints shapes: the declared dim it equals
    /// symbolically where there is one, else the normal form with derived dims folded back.
    pub fn display(&self, p: &Poly) -> String {
        match self.name_of(p) {
            Some(name) => name.to_string(),
            None => self.display_folding(p, self.dims.len()),
        }
    }

    /// The definition of derived dim `s`, folding only dims declared before it
    /// (`dim Dk = D / H` prints as `D / H`, not as `Dk`).
    pub fn display_definition(&self, s: Sym) -> String {
        match &self.dims[s].kind {
            DimKind::Derived(p) => self.display_folding(p, s),
            DimKind::Const(v) => v.to_string(),
            _ => self.dims[s].name.clone(),
        }
    }

    fn display_folding(&self, p: &Poly, fold: usize) -> String {
        let mut terms: Vec<(&Monomial, Ratio)> = p.terms().collect();
        if terms.is_empty() {
            return "0".to_string();
        }
        // Highest degree first, constants last; ties in declaration order.
        terms.sort_by(|(a, _), (b, _)| b.degree().cmp(&a.degree()).then(a.cmp(b)));
        let mut out = String::new();
        for (i, (m, c)) in terms.iter().enumerate() {
            let (neg, mag) = if c.num < 0 { (true, c.neg()) } else { (false, *c) };
            match (i, neg) {
                (0, true) => out.push('-'),
                (0, false) => {}
                (_, true) => out.push_str(" - "),
                (_, false) => out.push_str(" + "),
            }
            out.push_str(&self.display_term(m, mag, fold));
        }
        out
    }

    /// The name of a declared dim (not a loop variable) whose normal form is `p`.
    fn name_of(&self, p: &Poly) -> Option<&str> {
        self.dims.iter().enumerate().find_map(|(s, d)| {
            let same = match &d.kind {
                DimKind::Derived(q) => q == p,
                DimKind::Loop { .. } => false,
                _ => *p == Poly::sym(s),
            };
            same.then_some(d.name.as_str())
        })
    }

    fn display_term(&self, m: &Monomial, c: Ratio, fold: usize) -> String {
        let mut factors: Vec<String> = Vec::new();
        let mut rest = m.clone();
        // Fold derived dims back in (`N * D / H` prints as `N * Dk`).
        for d in &self.dims[..fold] {
            if let DimKind::Derived(q) = &d.kind {
                if let Some((qm, Ratio::ONE)) = q.single_term() {
                    if qm.has_negative() {
                        while reduces(&rest, qm) {
                            rest = rest.mul(&qm.recip());
                            factors.push(d.name.clone());
                        }
                    }
                }
            }
        }
        let mut num: Vec<(String, i32)> = Vec::new();
        let mut den: Vec<(String, i32)> = Vec::new();
        for (a, e) in &rest.0 {
            let text = self.display_atom(a);
            if *e > 0 {
                num.push((text, *e));
            } else {
                den.push((text, -e));
            }
        }
        let mut parts: Vec<String> = Vec::new();
        if c.num != 1 || (num.is_empty() && factors.is_empty()) {
            parts.push(c.num.to_string());
        }
        for (t, e) in &num {
            parts.extend(std::iter::repeat_n(t.clone(), *e as usize));
        }
        parts.extend(factors);
        let mut out = parts.join(" * ");
        for (t, e) in &den {
            for _ in 0..*e {
                let _ = write!(out, " / {t}");
            }
        }
        if c.den != 1 {
            let _ = write!(out, " / {}", c.den);
        }
        out
    }

    fn display_atom(&self, a: &Atom) -> String {
        match a {
            Atom::Sym(s) => self.dims[*s].name.clone(),
            Atom::Quot(x, y) => format!("{} / {}", self.operand(x), self.operand(y)),
            Atom::Rem(x, y) => format!("{} % {}", self.operand(x), self.operand(y)),
        }
    }
}

fn all_nonneg(p: &Poly) -> bool {
    p.terms().all(|(_, c)| c >= Ratio::ZERO)
}

impl DimTable {
    /// An operand of `/` or `%` in an opaque atom: parenthesized unless a name or number.
    fn operand(&self, p: &Poly) -> String {
        let text = self.display(p);
        match text.contains(' ') {
            true => format!("({text})"),
            false => text,
        }
    }
}

/// Whether dividing `m` by `q` moves every exponent of `q`'s atoms toward zero without
/// passing it: `q` is then a factor of `m` in the sense of "integral quotient".
fn reduces(m: &Monomial, q: &Monomial) -> bool {
    q.0.iter().all(|(a, eq)| {
        let em = m.0.iter().find(|(b, _)| b == a).map_or(0, |(_, e)| *e);
        if *eq < 0 {
            em <= *eq
        } else {
            em >= *eq
        }
    })
}

#[cfg(test)]
mod tests;
