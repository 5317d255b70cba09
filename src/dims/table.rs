//! The dims of a program and what is known about them: declarations, facts from
//! `assert`s, the proofs that a division is exact or an expression non-negative, and
//! how dims print.

use super::{Atom, Monomial, Poly, Ratio, Sym};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What a declared dim is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

/// The part of a table some answers depend on (see [`DimTable::context`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Context {
    kinds: Vec<(Sym, DimKind)>,
    /// The one-term quotients known to be integers, which divisions read from every
    /// derived dim of the table.
    quotients: Vec<Monomial>,
    divides: Vec<(Poly, Poly)>,
    nonneg: Vec<Poly>,
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

    /// What the table's answers about `polys` read: the kind of each dim they use, of the
    /// dims those kinds, the facts and the known integral quotients use in turn, and every
    /// fact. Two tables with the same
    /// context answer every question about `polys` alike, so an answer can be remembered
    /// across tables (the checker's, which changes as it goes, and the optimizer's).
    pub fn context<'a>(&self, polys: impl IntoIterator<Item = &'a Poly>) -> Context {
        let quotients: Vec<Monomial> = self.integral_quotients().collect();
        let as_polys: Vec<Poly> = quotients
            .iter()
            .map(|m| Poly(super::Terms::one(m.clone(), Ratio::ONE)))
            .collect();
        let facts = self.divides.iter().flat_map(|(a, b)| [a, b]).chain(&self.nonneg);
        let mut todo: Vec<Sym> = polys.into_iter().flat_map(Poly::syms).collect();
        todo.extend(facts.chain(&as_polys).flat_map(Poly::syms));
        let mut kinds = BTreeMap::new();
        while let Some(s) = todo.pop() {
            let Some(info) = self.dims.get(s).filter(|_| !kinds.contains_key(&s)) else {
                continue;
            };
            match &info.kind {
                DimKind::Derived(p) => todo.extend(p.syms()),
                DimKind::Loop { start, end } => todo.extend(start.syms().into_iter().chain(end.syms())),
                DimKind::Free { .. } | DimKind::Const(_) => {}
            }
            kinds.insert(s, info.kind.clone());
        }
        Context {
            kinds: kinds.into_iter().collect(),
            quotients,
            divides: self.divides.clone(),
            nonneg: self.nonneg.clone(),
        }
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

    /// [`DimTable::with_consts`], borrowed where `p` names no constant dim (as the sizes a
    /// layout proof compares do, their values put in once): nothing to copy to read it.
    pub fn consts_in<'a>(&self, p: &'a Poly) -> Cow<'a, Poly> {
        match p.any_sym(&|s| matches!(self.dims[s].kind, DimKind::Const(_))) {
            true => Cow::Owned(self.with_consts(p)),
            false => Cow::Borrowed(p),
        }
    }

    /// Whether `a` and `b` are equal for every value of the free dims: symbolically, or
    /// once constant dims take their values.
    pub fn equal(&self, a: &Poly, b: &Poly) -> bool {
        a == b || self.consts_in(&a.sub(b)).is_zero()
    }

    /// Whether `p` is 1 for every value of the free dims, given the constant dims' values
    /// (`U` with `dim U = 1`, `H * 3 - 8` with `H = 3`).
    pub fn is_one(&self, p: &Poly) -> bool {
        self.consts_in(p).as_int() == Some(1)
    }

    /// Whether `p`, a size, is 1 for no value of the free dims: provably at least 2
    /// (`12 * B * N`), provably at most 0, or never 1 by its residues (`2 * N - 2` and
    /// `N * N - N` are even, so 0 or at least 2).
    pub fn never_one(&self, p: &Poly) -> bool {
        self.provably_nonneg(&p.sub(&Poly::int(2)))
            || self.provably_nonneg(&p.neg())
            || self.consts_in(p).never_one_by_factors()
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
        let folded = self.consts_in(p);
        if let Some(answer) = self.nonneg_quickly(&folded) {
            return answer;
        }
        let mut cases = vec![folded.into_owned()];
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
        let known = |s: Sym| match self.dims[s].kind {
            DimKind::Const(v) => Some(v),
            _ => value(s),
        };
        if let Some(v) = p.value_where(&known) {
            return v.as_int().and_then(|n| i64::try_from(n).ok());
        }
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
        if let Some(name) = self.name_of(p) {
            return name.to_string();
        }
        match p.floor_split() {
            Some(split) => self.display_floor(split),
            None => self.display_folding(p, self.dims.len()),
        }
    }

    /// `c * (x // k) + rest`, as Python writes a floor division (see [`Poly::floor_split`]).
    fn display_floor(&self, (c, x, k, rest): (Poly, Poly, i64, Poly)) -> String {
        let floor = format!("{} // {k}", self.operand(&x));
        let term = match c.is_one() {
            true => floor,
            false => format!("{} * ({floor})", self.display(&c)),
        };
        if rest.is_zero() {
            return term;
        }
        let rest = self.display(&rest);
        match rest.strip_prefix('-') {
            Some(negated) => format!("{term} - {negated}"),
            None => format!("{term} + {rest}"),
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
