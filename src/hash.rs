//! Maps and sets keyed by the compiler's own values (dims, value ids, e-graph classes,
//! types), hashed as egg hashes its e-graph (FxHash). SipHash's defence against chosen
//! keys buys nothing for keys the compiler makes, and it was about 7 % of the instructions
//! of a model's compile (`BENCHMARKS.md`). Nothing the compiler decides depends on their
//! order of iteration.

pub type HashMap<K, V> = rustc_hash::FxHashMap<K, V>;
pub type HashSet<K> = rustc_hash::FxHashSet<K>;
