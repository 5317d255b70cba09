//! A polynomial's terms: a map from monomial to coefficient, kept as a vector sorted by
//! monomial.
//!
//! Most sizes are one term (`N`, `8`, `B * N`), which then lives inline and needs no
//! allocation. Sizes are cloned and dropped throughout the checker and the optimizer: as a
//! `BTreeMap`, each one-term size was a 640-byte node, 40 % of the optimizer's allocations.
//! The order, the equality and the hash are those the map had: the terms in monomial
//! order, compared and hashed as a sequence of pairs.

use super::{Monomial, Ratio};
use smallvec::SmallVec;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Terms(SmallVec<[(Monomial, Ratio); 1]>);

impl Terms {
    /// The single term `c * m`.
    pub(super) fn one(m: Monomial, c: Ratio) -> Terms {
        Terms(smallvec::smallvec![(m, c)])
    }

    fn find(&self, m: &Monomial) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(m))
    }

    pub(super) fn get(&self, m: &Monomial) -> Option<&Ratio> {
        self.find(m).ok().map(|i| &self.0[i].1)
    }

    pub(super) fn get_mut(&mut self, m: &Monomial) -> Option<&mut Ratio> {
        self.find(m).ok().map(|i| &mut self.0[i].1)
    }

    /// Sets `m`'s coefficient to `c`, in place of any it had.
    pub(super) fn insert(&mut self, m: Monomial, c: Ratio) {
        match self.find(&m) {
            Ok(i) => self.0[i].1 = c,
            Err(i) => self.0.insert(i, (m, c)),
        }
    }

    pub(super) fn remove(&mut self, m: &Monomial) {
        if let Ok(i) = self.find(m) {
            self.0.remove(i);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Monomial, &Ratio)> {
        self.0.iter().map(|(m, c)| (m, c))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &Monomial> {
        self.0.iter().map(|(m, _)| m)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Ratio> {
        self.0.iter().map(|(_, c)| c)
    }
}

/// Terms in any order; of two with the same monomial the later is kept, as a map's
/// `collect` keeps it.
impl FromIterator<(Monomial, Ratio)> for Terms {
    fn from_iter<I: IntoIterator<Item = (Monomial, Ratio)>>(iter: I) -> Terms {
        let mut terms: SmallVec<[(Monomial, Ratio); 1]> = iter.into_iter().collect();
        if !terms.is_sorted_by(|a, b| a.0 < b.0) {
            terms.sort_by(|a, b| a.0.cmp(&b.0));
            terms.dedup_by(|later, earlier| {
                let same = later.0 == earlier.0;
                if same {
                    std::mem::swap(later, earlier);
                }
                same
            });
        }
        Terms(terms)
    }
}

impl<'a> IntoIterator for &'a Terms {
    type Item = (&'a Monomial, &'a Ratio);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Monomial, Ratio)>,
        fn(&'a (Monomial, Ratio)) -> (&'a Monomial, &'a Ratio),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(m, c)| (m, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dims::{Atom, Poly};

    fn mono(s: usize) -> Monomial {
        Monomial(smallvec::smallvec![(Atom::Sym(s), 1)])
    }

    /// Collected terms come out in monomial order, a repeated monomial with its later
    /// coefficient, as a `BTreeMap` collects them.
    #[test]
    fn collected_terms_are_sorted_and_the_later_of_two_wins() {
        let terms: Terms = [
            (mono(2), Ratio::int(5)),
            (mono(0), Ratio::int(1)),
            (mono(2), Ratio::int(7)),
        ]
        .into_iter()
        .collect();
        let seen: Vec<(Monomial, Ratio)> = terms.iter().map(|(m, c)| (m.clone(), *c)).collect();
        assert_eq!(seen, vec![(mono(0), Ratio::int(1)), (mono(2), Ratio::int(7))]);
    }

    #[test]
    fn insert_keeps_the_order_and_remove_takes_the_term_out() {
        let mut terms = Terms::one(mono(3), Ratio::ONE);
        terms.insert(mono(1), Ratio::int(2));
        terms.insert(mono(3), Ratio::int(4));
        assert_eq!(terms.keys().cloned().collect::<Vec<_>>(), vec![mono(1), mono(3)]);
        assert_eq!(terms.get(&mono(3)), Some(&Ratio::int(4)));
        terms.remove(&mono(1));
        assert_eq!(terms.len(), 1);
        assert_eq!(terms.get(&mono(1)), None);
    }

    /// Sums and products still reach one normal form: `(N + B) * (B + N) - B * B` has its
    /// terms in the order `B * N + N * N` however it was built.
    #[test]
    fn normal_forms_do_not_depend_on_how_a_sum_was_built() {
        let (b, n) = (Poly::sym(0), Poly::sym(1));
        let left = n.add(&b).mul(&b.add(&n)).sub(&b.mul(&b));
        let right = n.mul(&n).add(&Poly::int(2).mul(&b).mul(&n));
        assert_eq!(left, right);
        assert_eq!(left.terms().count(), 2);
    }
}
