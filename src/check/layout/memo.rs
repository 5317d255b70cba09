//! The elementwise layout proof, remembered for the whole process (and, by [`Answers`], the
//! other proofs that a loop's every layer asks again of the same types).
//!
//! The proof follows TensorIterator's order at every size (each combination of free dims at
//! 1, each stride it cannot know): about a millisecond for a 4-d `add` with a broadcast
//! operand, where checking any other op takes microseconds. The same operands come back
//! many times in one compile: every call of a function, every head's `rope`, the checker
//! and then the optimizer's extraction of the same program. An answer depends only on the
//! operands' types, the result's shape, what the dim table knows about their dims
//! ([`DimTable::context`]) and what the proof asked of `known` (whether an operand's
//! strides are PyTorch's on its axes of size 1, which its history decides, not its type).
//! With the first three as its key and the last kept beside each answer, it holds for any
//! table: the checker's, which changes as it goes, the optimizer's, and the next program's.

use super::Layout;
use crate::dims::{Context, DimTable, Poly};
use crate::hash::HashMap;
use crate::ir::TensorType;
use std::cell::OnceCell;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// At most this many answers are kept; then the memo starts over, so that a process that
/// compiles program after program (the language server, the Python module) stays small.
const PROOFS_KEPT: usize = 4096;

/// What an answer depends on: the operands' types, the result's shape, the table's context.
type Key = (Vec<TensorType>, Vec<Poly>, Context);

/// One answer, with what its proof asked of `known` on the way (`None`: never asked): it
/// holds for any call whose `known` answers those questions alike, since the proof is the
/// same function of the key and of those answers.
#[derive(Clone)]
struct Proof {
    asked: Vec<Option<bool>>,
    laid: Layout,
}

static PROOFS: Mutex<Option<HashMap<Key, Vec<Proof>>>> = Mutex::new(None);

/// `prove(known)`'s answer for `operands` and `shape` under `dims`, worked out once for each
/// set of answers of `known` it reads. `known` is asked lazily, each operand at most once
/// (it walks the program back, which costs more than most proofs).
pub(super) fn remembered(
    dims: &DimTable,
    operands: &[&TensorType],
    shape: &[Poly],
    known: &dyn Fn(usize) -> bool,
    prove: impl FnOnce(&dyn Fn(usize) -> bool) -> Layout,
) -> Layout {
    let context = dims.context(operands.iter().flat_map(|t| sizes(t)).chain(shape));
    let key: Key = (
        operands.iter().map(|&t| t.clone()).collect(),
        shape.to_vec(),
        context,
    );
    let answers: Vec<OnceCell<bool>> = operands.iter().map(|_| OnceCell::new()).collect();
    let ask = |i: usize| *answers[i].get_or_init(|| known(i));
    // A panic elsewhere while the lock was held leaves the map whole: it is only read or
    // extended by one complete entry.
    let lock = || PROOFS.lock().unwrap_or_else(PoisonError::into_inner);
    // The candidates are copied out, so that `known` never runs under the lock.
    let candidates = lock().as_ref().and_then(|m| m.get(&key).cloned());
    let agrees = |p: &Proof| {
        p.asked
            .iter()
            .enumerate()
            .all(|(i, a)| a.is_none_or(|a| a == ask(i)))
    };
    if let Some(found) = candidates.into_iter().flatten().find(agrees) {
        return found.laid;
    }
    // Proved without the lock: another thread may prove the same at once, to the same end.
    let laid = prove(&ask);
    // What was asked, by the proof or by the comparisons above: an answer recorded with
    // more questions than its proof read holds in fewer places, never wrongly.
    let asked = answers.iter().map(|a| a.get().copied()).collect();
    let mut proofs = lock();
    let proofs = proofs.get_or_insert_with(HashMap::default);
    if proofs.len() >= PROOFS_KEPT {
        proofs.clear();
    }
    let proof = Proof {
        asked,
        laid: laid.clone(),
    };
    proofs.entry(key).or_default().push(proof);
    laid
}

/// Every size a type's layout answers may read: its shape and each list of strides it may
/// have (what the table's context of a remembered answer is made from).
pub(super) fn sizes(t: &TensorType) -> impl Iterator<Item = &Poly> + '_ {
    let others = t.layouts().into_iter().flatten().flatten();
    t.shape.iter().chain(&t.strides).chain(others)
}

/// A process-wide table of answers that are functions of their key, started over past
/// [`PROOFS_KEPT`] entries. Each answer is worked out without the lock (another thread may
/// work out the same at once, to the same end).
pub(super) struct Answers<K, V>(Mutex<Option<HashMap<K, V>>>);

impl<K: Hash + Eq, V: Clone> Answers<K, V> {
    pub const fn new() -> Self {
        Answers(Mutex::new(None))
    }

    /// The answer for `key`, from `prove()` the first time.
    pub fn get_or_prove(&self, key: K, prove: impl FnOnce() -> V) -> V {
        // A panic elsewhere while the lock was held leaves the map whole.
        let lock = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = lock().as_ref().and_then(|m| m.get(&key).cloned()) {
            return found;
        }
        let answer = prove();
        let mut answers = lock();
        let answers = answers.get_or_insert_with(HashMap::default);
        if answers.len() >= PROOFS_KEPT {
            answers.clear();
        }
        answers.insert(key, answer.clone());
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::super::elementwise_order;
    use crate::dims::{DimKind, DimTable, Poly};
    use crate::ir::{DType, TensorType};

    /// `y + x` under a table where `N` is `kind`: `y: [B, 1, 4]` is
    /// `randn(4, B).t().unsqueeze(1)`, strides `[1, 4 * B, B]`, and `x: [B, N, 4]` is
    /// row-major.
    fn add_with(kind: DimKind) -> (DimTable, TensorType, TensorType, Vec<Poly>) {
        let mut t = DimTable::new();
        let b = Poly::sym(t.declare("B", DimKind::Free { value: None }));
        let n = Poly::sym(t.declare("N", kind));
        let x = TensorType::row_major(vec![b.clone(), n.clone(), Poly::int(4)], DType::F32);
        let y = TensorType {
            strides: vec![Poly::int(1), b.mul(&Poly::int(4)), b.clone()],
            ..TensorType::row_major(vec![b.clone(), Poly::int(1), Poly::int(4)], DType::F32)
        };
        (t, x, y, vec![b, n, Poly::int(4)])
    }

    #[test]
    fn an_answer_is_remembered_only_under_the_same_facts() {
        // PyTorch: `(y + x).stride()` is `(1, 12, 3)` at `B = 3, N = 1` (it follows `y`) and
        // `(8, 4, 1)` at `N = 2`: the free `N` gives both layouts, the constant `N = 5` only
        // the general one.
        let (free, x, y, shape) = add_with(DimKind::Free { value: None });
        let (five, x5, y5, shape5) = add_with(DimKind::Const(5));
        assert_eq!((&x, &y, &shape), (&x5, &y5, &shape5), "one key but for the table");
        let general = elementwise_order(&five, &[&y, &x], &shape);
        let any_n = elementwise_order(&free, &[&y, &x], &shape);
        assert_ne!(general, any_n);
        assert_eq!(elementwise_order(&five, &[&y, &x], &shape), general);
        assert_eq!(elementwise_order(&free, &[&y, &x], &shape), any_n);
    }
}
