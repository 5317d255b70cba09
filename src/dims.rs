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

use smallvec::{smallvec, SmallVec};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use terms::Terms;

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
        // Nearly every size is an integer: already reduced, no division to find that.
        if den == 1 {
            return Ratio { num, den };
        }
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

    /// `v^e` as [`Poly::pow`] forms it for a constant: repeated products, from the
    /// reciprocal for a negative `e`, and 0 for 0 to any power.
    fn pow(v: Ratio, e: i32) -> Ratio {
        let base = match e < 0 {
            true => match v.recip() {
                Some(r) => Ratio::ONE.mul(r),
                None => return Ratio::ZERO,
            },
            false => v,
        };
        match e {
            0 => Ratio::ONE,
            _ => (1..e.unsigned_abs()).fold(base, |acc, _| acc.mul(base)),
        }
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

/// A term of a polynomial with integer coefficients: the coefficient, and each dim's index
/// with its (positive) exponent.
type IntegerTerm = (i128, Vec<(usize, u32)>);

/// At most this many combinations of residues are tried by [`never_one_modulo`].
const RESIDUES_TRIED: u128 = 4096;

/// Whether no residues modulo `q` of `k` dims make the sum of `terms` 1 modulo `q`, trying
/// each of the `q^k` combinations (none beyond [`RESIDUES_TRIED`]).
fn never_one_modulo(terms: &[IntegerTerm], k: usize, q: i128) -> bool {
    let count = u32::try_from(k).ok().and_then(|k| (q as u128).checked_pow(k));
    if count.is_none_or(|n| n > RESIDUES_TRIED) {
        return false;
    }
    let residue = |values: &[i128]| -> i128 {
        let term = |(c, factors): &IntegerTerm| {
            factors.iter().fold(c.rem_euclid(q), |acc, &(i, e)| {
                (0..e).fold(acc, |acc, _| acc * values[i] % q)
            })
        };
        terms.iter().map(term).fold(0, |acc, t| (acc + t) % q)
    };
    let mut values = vec![0i128; k];
    loop {
        if residue(&values) == 1 {
            return false;
        }
        // The next combination, counting in base `q`.
        let Some(i) = values.iter().position(|&v| v + 1 < q) else {
            return true;
        };
        values[i] += 1;
        values[..i].fill(0);
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    // In 64 bits where both fit: a 128-bit remainder is a library call.
    if let (Ok(x), Ok(y)) = (u64::try_from(a), u64::try_from(b)) {
        return u128::from(gcd64(x, y));
    }
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn gcd64(mut a: u64, mut b: u64) -> u64 {
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

/// A product of atoms with non-zero integer exponents, sorted by atom. Most are one dim or
/// none (a constant's), held inline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Monomial(SmallVec<[(Atom, i32); 1]>);

impl Monomial {
    /// The product of `factors`, in any order, an atom possibly more than once.
    fn of(factors: impl IntoIterator<Item = (Atom, i32)>) -> Monomial {
        let mut all: SmallVec<[(Atom, i32); 4]> = factors.into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: SmallVec<[(Atom, i32); 1]> = SmallVec::new();
        for (a, e) in all {
            match out.last_mut() {
                Some((last, sum)) if *last == a => *sum += e,
                _ => out.push((a, e)),
            }
        }
        out.retain(|(_, e)| *e != 0);
        Monomial(out)
    }

    fn mul(&self, other: &Monomial) -> Monomial {
        Monomial::of(self.0.iter().chain(&other.0).cloned())
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
pub struct Poly(Terms);

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
        let mono = Monomial::of(factors.iter().map(|&(s, e)| (Atom::Sym(s), e)));
        let mut p = Poly::default();
        if !c.is_zero() {
            p.0.insert(mono, c);
        }
        p
    }

    fn atom(a: Atom) -> Poly {
        let mut p = Poly::default();
        p.0.insert(Monomial(smallvec![(a, 1)]), Ratio::ONE);
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
        let mut out = self.clone();
        for (m, c) in &other.0 {
            out.add_term(Cow::Borrowed(m), *c);
        }
        out
    }

    /// Adds `c * m` in place: a sum built term by term costs one map update a term, where
    /// `add` would copy the sum so far for each. A borrowed `m` is copied only where it is
    /// new to the sum.
    fn add_term(&mut self, m: Cow<Monomial>, c: Ratio) {
        match self.0.get_mut(&m) {
            Some(old) => {
                let sum = old.add(c);
                match sum.is_zero() {
                    true => {
                        self.0.remove(&m);
                    }
                    false => *old = sum,
                }
            }
            None if c.is_zero() => {}
            None => {
                self.0.insert(m.into_owned(), c);
            }
        }
    }

    /// Adds every term of `other` in place.
    fn add_assign(&mut self, other: &Poly) {
        for (m, c) in &other.0 {
            self.add_term(Cow::Borrowed(m), *c);
        }
    }

    pub fn neg(&self) -> Poly {
        Poly(self.0.iter().map(|(m, c)| (m.clone(), c.neg())).collect())
    }

    pub fn sub(&self, other: &Poly) -> Poly {
        self.add(&other.neg())
    }

    pub fn mul(&self, other: &Poly) -> Poly {
        // A constant factor only scales the coefficients (most products in a proof are a
        // size times a constant dim's value, or a substituted term times its coefficient):
        // the terms keep their monomials, which the general loop would rebuild one by one.
        if let Some(k) = other.constant_factor() {
            return Poly(self.0.iter().map(|(m, c)| (m.clone(), c.mul(k))).collect());
        }
        if let Some(k) = self.constant_factor() {
            return Poly(other.0.iter().map(|(m, c)| (m.clone(), k.mul(*c))).collect());
        }
        let mut out = Poly::default();
        for (m1, c1) in &self.0 {
            for (m2, c2) in &other.0 {
                out.add_term(Cow::Owned(m1.mul(m2)), c1.mul(*c2));
            }
        }
        out
    }

    /// The value of a constant other than 0, whose products keep every term (a product
    /// of two non-zero rationals is never 0).
    fn constant_factor(&self) -> Option<Ratio> {
        match self.single_term() {
            Some((m, c)) if m.0.is_empty() => Some(c),
            _ => None,
        }
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
            let term = Poly(Terms::one(factor, c.mul(lead_c.recip()?)));
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
        // Most substitutions (a table's constant dims, a size-1 scenario's dims) touch none
        // of a polynomial's atoms; a normal form is then its own result.
        if !self.any_sym(&|s| value(s).is_some()) {
            return self.clone();
        }
        let mut out = Poly::default();
        for (m, c) in &self.0 {
            // The dims that keep their symbol stay one monomial, taken over as it is: a
            // stride `N^k` costs no `k` multiplications.
            let mut kept = SmallVec::new();
            let mut term = Factor::Const(*c);
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
                            (Some(x), Some(y)) if x.checked_rem_euclid(y).is_some() => {
                                Poly::int(x.rem_euclid(y))
                            }
                            _ => Poly::atom(Atom::Rem(Box::new(a), Box::new(b))),
                        }
                    }
                };
                term = term.times(&base, *e);
            }
            match term {
                Factor::Const(k) if k.is_zero() => {}
                Factor::Const(k) => out.add_term(Cow::Owned(Monomial(kept)), k),
                Factor::Poly(mut term) => {
                    if !kept.is_empty() {
                        term = term.mul(&Poly(Terms::one(Monomial(kept), Ratio::ONE)));
                    }
                    out.add_assign(&term);
                }
            }
        }
        out
    }

    /// The value of the polynomial where every atom has one (`value` of each dim), as
    /// [`Poly::substitute`] then [`Poly::as_const`] give it: term by term in the same order,
    /// with the same saturating arithmetic, but without building a polynomial for each
    /// dim's value and each term (sizes are evaluated once per tensor and kernel, and this
    /// was a few per cent of a model's compile). `None` where an atom keeps its symbol
    /// (a dim without a value, a `%` of values that are not integers, or by 0): the
    /// symbolic path decides those, where a term can still vanish by a factor of 0.
    pub fn value_where(&self, value: &dyn Fn(Sym) -> Option<i64>) -> Option<Ratio> {
        let mut sum = Ratio::ZERO;
        for (m, c) in &self.0 {
            let mut term = *c;
            for (atom, e) in &m.0 {
                let base = match atom {
                    Atom::Sym(s) => Ratio::int(i128::from(value(*s)?)),
                    Atom::Quot(a, b) => {
                        let (x, y) = (a.value_where(value)?, b.value_where(value)?);
                        y.recip().map_or(Ratio::ZERO, |r| x.mul(r))
                    }
                    Atom::Rem(a, b) => {
                        let int = |r: Ratio| r.as_int().and_then(|n| i64::try_from(n).ok());
                        let (x, y) = (int(a.value_where(value)?)?, int(b.value_where(value)?)?);
                        Ratio::int(i128::from(x.checked_rem_euclid(y)?))
                    }
                };
                term = term.mul(Ratio::pow(base, *e));
            }
            if !term.is_zero() {
                sum = sum.add(term);
            }
        }
        Some(sum)
    }

    /// Whether `pred` holds for a symbol anywhere in the polynomial, opaque atoms included.
    fn any_sym(&self, pred: &dyn Fn(Sym) -> bool) -> bool {
        self.0.keys().flat_map(|m| &m.0).any(|(a, _)| match a {
            Atom::Sym(s) => pred(*s),
            Atom::Quot(x, y) | Atom::Rem(x, y) => x.any_sym(pred) || y.any_sym(pred),
        })
    }

    fn pow(&self, e: i32) -> Poly {
        if e < 0 {
            let inv = Poly::int(1).quotient(self).unwrap_or_default();
            return inv.pow(-e);
        }
        match e {
            0 => Poly::int(1),
            // Nearly every exponent in a size is 1: no product to form.
            _ => (1..e).fold(self.clone(), |acc, _| acc.mul(self)),
        }
    }

    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, Ratio)> {
        self.0.iter().map(|(m, c)| (m, *c))
    }

    /// Whether `self`, a size, is 1 for no values of its dims: by its residues
    /// ([`Poly::never_one_by_residues`]), or, where a dim `s` divides every term and the
    /// coefficients are integers, by `self` at `s = 1`, since `s * q = 1` in integers with
    /// `s >= 0` needs `s = 1` (`B * N * N - B` is 1 only where `N * N - 1` is, which it never
    /// is modulo 3).
    pub(crate) fn never_one_by_factors(&self) -> bool {
        let integers = self.0.values().all(|c| c.as_int().is_some());
        self.never_one_by_residues()
            || integers
                && self.syms().into_iter().any(|s| {
                    let factor = |m: &Monomial| m.0.iter().any(|(a, e)| *a == Atom::Sym(s) && *e > 0);
                    self.0.keys().all(factor)
                        && self
                            .substitute(&|t| (t == s).then(|| Poly::int(1)))
                            .never_one_by_factors()
                })
    }

    /// Whether `self` is 1 for no integer values of its dims, by a residue argument: every
    /// coefficient shares a factor at least 2 (`2 * N - 2`), or for a small prime `q` no
    /// residues of the dims modulo `q` make `self` 1 modulo `q` (`N * N - N`, a product of
    /// consecutive integers, is always even; `3 * N + 2` is 2 modulo 3). Only for integer
    /// coefficients over dims with positive exponents, which keep a value's residue a
    /// function of the dims' residues; `false` otherwise, or where the dims are too many to
    /// try every residue.
    fn never_one_by_residues(&self) -> bool {
        let syms = self.syms();
        let term = |(m, c): (&Monomial, &Ratio)| -> Option<IntegerTerm> {
            let factors = m.0.iter().map(|(a, e)| match a {
                Atom::Sym(s) if *e > 0 => Some((syms.binary_search(s).ok()?, *e as u32)),
                _ => None,
            });
            Some((c.as_int()?, factors.collect::<Option<_>>()?))
        };
        let Some(terms) = self.0.iter().map(term).collect::<Option<Vec<_>>>() else {
            return false;
        };
        let factor = terms.iter().fold(0, |g, (c, _)| gcd(g, c.unsigned_abs()));
        factor >= 2
            || [2, 3, 5, 7]
                .into_iter()
                .any(|q| never_one_modulo(&terms, syms.len(), q))
    }

    /// `(a, b)` with `self == a * s + b`, when `s` appears only to the first power and
    /// outside opaque atoms.
    fn split_linear(&self, s: Sym) -> Option<(Poly, Poly)> {
        let (mut a, mut b) = (Poly::default(), Poly::default());
        for (m, c) in &self.0 {
            let rest = m.0.iter().filter(|(x, _)| *x != Atom::Sym(s)).cloned().collect();
            let term = Poly(Terms::one(Monomial(rest), *c));
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

    /// A floor division in `self`, for display: `(c, x, k, rest)` with
    /// `self == c * (x - x % k) / k + rest`, found from a term `-(c / k) * (x % k)` (`k` an
    /// integer of at least 2, `c` one term), so that a rounded length such as
    /// `ceil(N / 2) = (N + 1) / 2 - ((N + 1) % 2) / 2` reads as Python's `(N + 1) // 2`.
    /// `rest` holds no such term, and every new term in it comes from inside `x`.
    pub(crate) fn floor_split(&self) -> Option<(Poly, Poly, i64, Poly)> {
        self.0.iter().find_map(|(m, &c)| {
            if c >= Ratio::ZERO {
                return None;
            }
            let (i, x, k) = m.0.iter().enumerate().find_map(|(i, (a, e))| match a {
                Atom::Rem(x, k) if *e == 1 => Some((i, x, k.as_int().filter(|k| *k >= 2)?)),
                _ => None,
            })?;
            let mut outer = m.clone();
            outer.0.remove(i);
            let per = Poly(Terms::one(outer, c.neg()));
            let rem = Poly::rem_atom(x, &Poly::int(k));
            let rest = self.sub(&per.mul(x)).add(&per.mul(&rem));
            let c = per.mul(&Poly::int(k));
            Some((c, (**x).clone(), k, rest))
        })
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

/// A term of [`Poly::substitute`] as it is multiplied out: a constant while every value
/// substituted into it so far is one (most substitutions put constant dims' values in, and
/// a coefficient multiplied in place costs no maps), else a polynomial. Each product is the
/// one [`Poly::mul`] and [`Poly::pow`] would form, in the same order, so the result is too.
enum Factor {
    Const(Ratio),
    Poly(Poly),
}

impl Factor {
    /// This factor times `base^e`.
    fn times(self, base: &Poly, e: i32) -> Factor {
        match (self, base.as_const()) {
            (Factor::Const(k), Some(v)) => Factor::Const(k.mul(Ratio::pow(v, e))),
            (Factor::Const(k), None) => Factor::Poly(Poly::ratio(k).mul(&base.pow(e))),
            (Factor::Poly(p), _) => Factor::Poly(p.mul(&base.pow(e))),
        }
    }
}

fn int_of(p: &Poly) -> Option<i64> {
    p.as_int()
}

mod table;
mod terms;
pub use table::{Context, DimInfo, DimKind, DimTable, DivError};

#[cfg(test)]
mod tests;
