//! Pricing a refinement's trial without walking the whole program again.
//!
//! A trial switches the node of one to a few classes. Every class whose term does not
//! reach a switched class keeps its type, key and cost, and so does every class its term
//! needs; only the classes above a switched one (and those the new nodes bring in) are
//! laid out again. What the trial's program needs is then the classes walked again plus
//! the base's closures of the unchanged classes where the walk stopped, kept as bitsets.
//! The rank is the one a whole walk gives (the refinement took 5 of MiniLM's 9 ms of
//! extraction walking every class for every trial: `BENCHMARKS.md`).

use super::{Cost, Eval, Rank, Scope};
use crate::hash::{HashMap, HashSet};
use egg::Id;

/// A whole evaluation, by class: what a trial reuses.
pub(super) struct Base<'e> {
    eval: &'e Eval,
    /// A dense index for each class the base program needs.
    index: HashMap<Id, usize>,
    /// For each class (by index), the classes its term needs, itself included.
    closure: Vec<Bits>,
    /// Each class's cost, by index.
    cost: Vec<Cost>,
}

/// A set of dense class indices.
#[derive(Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)])
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn has(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    fn union(&mut self, o: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }

    fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }
}

impl<'e> Base<'e> {
    pub(super) fn new(eval: &'e Eval) -> Base<'e> {
        let mut ids: Vec<Id> = eval.parts.keys().copied().collect();
        ids.sort();
        let index: HashMap<Id, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut closure: Vec<Option<Bits>> = vec![None; ids.len()];
        for i in 0..ids.len() {
            close(eval, &ids, &index, &mut closure, i);
        }
        let cost = ids.iter().map(|id| eval.parts[id].cost).collect();
        Base {
            eval,
            index,
            closure: closure
                .into_iter()
                .map(|b| b.unwrap_or_else(|| Bits::new(ids.len())))
                .collect(),
            cost,
        }
    }

    /// The rank ([`Eval::rank`]) of the program `scope` chooses, which is the base's with
    /// the classes of `switch` switched; `None` when that choice is cyclic or incomplete.
    pub(super) fn trial(&self, scope: Scope, root: Id, switch: &[(Id, usize)]) -> Option<Rank> {
        let switched: Vec<usize> = switch
            .iter()
            .filter_map(|(c, _)| self.index.get(c).copied())
            .collect();
        let mut walk = Walk {
            base: self,
            scope,
            switched,
            kept: Bits::new(self.cost.len()),
            done: HashMap::default(),
            open: HashSet::default(),
        };
        let key = walk.go(root)?.0;
        let kept = walk
            .kept
            .ones()
            .fold(Cost::default(), |acc, i| acc + self.cost[i]);
        let total = walk.done.values().fold(kept, |acc, &(_, _, cost)| acc + cost);
        let size = walk.done.len() + walk.kept.len();
        Some((total.score(), size, key))
    }
}

/// The closure of class `i` (and of every class under it), computed once.
fn close(eval: &Eval, ids: &[Id], index: &HashMap<Id, usize>, closure: &mut Vec<Option<Bits>>, i: usize) {
    if closure[i].is_some() {
        return;
    }
    let mut bits = Bits::new(ids.len());
    bits.set(i);
    // The base is acyclic (an evaluation refuses a cycle), so this recursion ends.
    for kid in &eval.parts[&ids[i]].kids {
        let k = index[kid];
        close(eval, ids, index, closure, k);
        if let Some(under) = &closure[k] {
            bits.union(under);
        }
    }
    closure[i] = Some(bits);
}

/// A trial's walk: classes above a switched one are laid out again, the rest are the
/// base's.
struct Walk<'a, 'e> {
    base: &'a Base<'e>,
    scope: Scope<'a>,
    switched: Vec<usize>,
    /// The base classes the trial's program needs unchanged.
    kept: Bits,
    /// The classes walked again: key, type and cost.
    done: HashMap<Id, (u64, Option<u32>, Cost)>,
    open: HashSet<Id>,
}

impl Walk<'_, '_> {
    /// The key and type of class `id` in the trial's program.
    fn go(&mut self, id: Id) -> Option<(u64, Option<u32>)> {
        let id = self.scope.eg.find(id);
        if let Some(&(key, ty, _)) = self.done.get(&id) {
            return Some((key, ty));
        }
        if let Some(&i) = self.base.index.get(&id) {
            let under = &self.base.closure[i];
            if !self.switched.iter().any(|&s| under.has(s)) {
                self.kept.union(under);
                let part = &self.base.eval.parts[&id];
                return Some((part.key, part.ty));
            }
        }
        if !self.open.insert(id) {
            return None;
        }
        let kids = self.scope.kids(id)?;
        let mut keys = Vec::with_capacity(kids.len());
        let mut types = Vec::with_capacity(kids.len());
        for &c in &kids {
            let (key, ty) = self.go(c)?;
            keys.push(key);
            types.push(ty);
        }
        let part = self.scope.part(id, kids, &types, &keys)?;
        self.open.remove(&id);
        self.done.insert(id, (part.key, part.ty, part.cost));
        Some((part.key, part.ty))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{evaluate, greedy, trips, Choices, Memo, Scope};
    use super::Base;
    use crate::driver::check_source;

    /// Every trial the refinement could make from the greedy choice, switching one class
    /// or two, priced from the base, ranks as the whole program it chooses does, and a
    /// cyclic choice is refused by both.
    #[test]
    fn a_trial_ranks_as_the_whole_program_it_chooses() {
        for file in ["encoder_layer", "gpt2_block", "mha_heads", "llama_layer"] {
            let source = std::fs::read_to_string(format!("examples/{file}.attn")).unwrap();
            let checked = check_source(&source, &[]).unwrap();
            let asked = crate::opt::Asked {
                explanations: false,
                before: false,
            };
            let run = crate::opt::run(&checked.program, asked).unwrap();
            let (eg, root) = (&run.runner.egraph, eg_root(&run));
            let (memo, trips) = (Memo::default(), trips(eg));
            let nodes = greedy(eg, &memo, usize::MAX);
            let no_switch = Choices {
                base: &nodes,
                switch: &[],
            };
            let scope = |nodes| Scope {
                eg,
                memo: &memo,
                nodes,
                trips: &trips,
            };
            let whole = evaluate(scope(&no_switch), root).unwrap();
            let base = Base::new(&whole);
            let mut classes: Vec<_> = whole.parts.keys().copied().collect();
            classes.sort();
            let switches = classes
                .iter()
                .flat_map(|&c| (0..eg[c].len()).map(move |i| (c, i)));
            let mut compared = 0;
            for (n, one) in switches.clone().enumerate() {
                for switch in [vec![one], vec![one, switches.clone().nth(n * 7 % 11).unwrap()]] {
                    let trial = Choices {
                        base: &nodes,
                        switch: &switch,
                    };
                    let scope = Scope {
                        eg,
                        memo: &memo,
                        nodes: &trial,
                        trips: &trips,
                    };
                    let want = evaluate(scope, root).map(|e| e.rank());
                    assert_eq!(base.trial(scope, root, &switch), want, "{file}: {switch:?}");
                    compared += 1;
                }
            }
            assert!(compared > 100, "{file}: {compared} trials");
        }
    }

    fn eg_root(run: &crate::opt::Run) -> egg::Id {
        run.runner.egraph.find(run.root)
    }
}
