//! A layer's index as a parameter of its piece.
//!
//! A model with a cache gives each layer its own slice of a state: layer `l` reads
//! `k_cache[l]` and writes `k_cache[l].index_copy_(..)`. Its piece then differs from the
//! next layer's in that one number, and every layer would be optimized on its own. Here the
//! number becomes a dim of the piece, the loop variable `layer` (ranging over the layers'
//! numbers), so the layers are one program, optimized once; the splice puts each layer's
//! number back in its copy.

use super::Piece;
use crate::dims::{DimKind, Poly, Sym};
use crate::ir::{Op, OtherStrides, Program, TensorType, Type, ValueId};

/// Makes the state slices of every piece that slices its states at one constant index
/// slices at the dim `layer`, declared in every piece alike, and records the index as the
/// piece's `layer`.
pub(super) fn generalize(prog: &Program, pieces: &mut [Piece]) {
    let slots = slots(prog);
    let found: Vec<Option<i64>> = pieces.iter().map(|p| index_of(p, &slots)).collect();
    let (Some(&lo), Some(&hi)) = (found.iter().flatten().min(), found.iter().flatten().max()) else {
        return;
    };
    let kind = DimKind::Loop {
        start: Poly::int(lo),
        end: Poly::int(hi + 1),
    };
    for (piece, index) in pieces.iter_mut().zip(found) {
        let layer = piece.program.dims.declare("layer", kind.clone());
        let Some(c) = index else { continue };
        for whole in &slots {
            if let Some(&v) = piece.map.get(whole) {
                let node = &mut piece.program.nodes[v];
                node.op = slice_op(&node.op, &mut |p| at_layer(p, c, layer));
            }
        }
        piece.layer = Some((layer, c));
    }
}

/// The whole program's values that take a slice of a state version (`select`, or the
/// window of an `index_copy`).
fn slots(prog: &Program) -> Vec<ValueId> {
    let slot = |id: ValueId| {
        let node = prog.node(id);
        let sliced = matches!(node.op, Op::Select { .. } | Op::IndexCopy { .. });
        sliced && is_state_version(prog, node.args[0])
    };
    (0..prog.nodes.len()).filter(|&id| slot(id)).collect()
}

/// Whether `id` is a state, or a state after writes.
fn is_state_version(prog: &Program, mut id: ValueId) -> bool {
    loop {
        let node = prog.node(id);
        match node.op {
            Op::Input(i) => return prog.inputs.get(i).is_some_and(|d| d.state),
            Op::IndexCopy { .. } => id = node.args[0],
            _ => return false,
        }
    }
}

/// The one constant index at which `piece` slices its states, if it slices them at one.
fn index_of(piece: &Piece, slots: &[ValueId]) -> Option<i64> {
    let mut found = Vec::new();
    for whole in slots {
        if let Some(&v) = piece.map.get(whole) {
            slice_op(&piece.program.node(v).op, &mut |p| {
                found.extend(p.as_int());
                p.clone()
            });
        }
    }
    let first = *found.first()?;
    found.iter().all(|&c| c == first).then_some(first)
}

/// `p` with the layer's index `c` replaced by the dim `layer`.
fn at_layer(p: &Poly, c: i64, layer: Sym) -> Poly {
    p.sub(&Poly::int(c)).add(&Poly::sym(layer))
}

/// A slice op with `f` applied to its index: a `select`'s, or the start and end of each
/// axis an `index_copy`'s window holds one element of (other than the written axis).
fn slice_op(op: &Op, f: &mut dyn FnMut(&Poly) -> Poly) -> Op {
    match op {
        Op::Select { axis, index } if index.as_int().is_some() => Op::Select {
            axis: *axis,
            index: f(index),
        },
        Op::IndexCopy { axis, starts, ends } => {
            let (mut starts, mut ends) = (starts.clone(), ends.clone());
            for a in (0..starts.len()).filter(|&a| a != *axis) {
                let single = ends[a].sub(&starts[a]) == Poly::int(1);
                if single && starts[a].as_int().is_some() {
                    starts[a] = f(&starts[a]);
                    ends[a] = starts[a].add(&Poly::int(1));
                }
            }
            Op::IndexCopy {
                axis: *axis,
                starts,
                ends,
            }
        }
        op => op.clone(),
    }
}

/// `op` and `ty` with the dim `layer` replaced by `value`, everywhere a dim can appear.
pub(super) fn put_layer(op: &Op, ty: &Type, layer: Sym, value: i64) -> (Op, Type) {
    let f = |p: &Poly| p.substitute(&|s| (s == layer).then(|| Poly::int(value)));
    (op.map_polys(&f), map_type(ty, &f))
}

fn map_type(ty: &Type, f: &dyn Fn(&Poly) -> Poly) -> Type {
    match ty {
        Type::Tensor(t) => Type::Tensor(map_tensor(t, f)),
        Type::Seq { item, len } => Type::Seq {
            item: map_tensor(item, f),
            len: f(len),
        },
    }
}

fn map_tensor(t: &TensorType, f: &dyn Fn(&Poly) -> Poly) -> TensorType {
    let all = |ps: &[Poly]| ps.iter().map(f).collect::<Vec<_>>();
    TensorType {
        shape: all(&t.shape),
        strides: all(&t.strides),
        dtype: t.dtype,
        others: match &t.others {
            OtherStrides::Listed(lists) => OtherStrides::Listed(lists.iter().map(|l| all(l)).collect()),
            others => others.clone(),
        },
    }
}
