//! Program state: `state k_cache: [..]` and the in-place `index_copy_` that writes it.
//!
//! PyTorch's `k_cache[l].index_copy_(2, pos, k)` mutates storage; the IR stays functional, as
//! `torch.func.functionalize` makes it: each write is an [`Op::IndexCopy`] whose result is
//! the state's next version (SSA), the name then stands for that version, and the last
//! version is an output flagged as the state's (what a call leaves behind). A view of the
//! state taken before a write aliases it in PyTorch, so reading it afterwards sees the
//! write: the checker rebuilds such a view on the current version when its name is read.

use super::{Checker, Entry, Value};
use crate::ast::Expr;
use crate::diagnostic::{Code, Diagnostic};
use crate::dims::Poly;
use crate::ir::{DType, Node, Op, OutputDecl, Program, TensorType, ValueId};
use crate::source::Span;

/// One declared state while the program is checked.
#[derive(Clone, Debug)]
pub(super) struct StateInfo {
    /// Its index among the program's inputs.
    pub input: usize,
    pub name: String,
    /// The version the name stands for now.
    pub current: ValueId,
}

/// Where a view of a state leads: its base, the view ops from the base outwards, and
/// whether one of them may have copied (`reshape`, `contiguous`).
struct Chain {
    base: ValueId,
    views: Vec<ValueId>,
    may_copy: bool,
}

impl Checker {
    /// Records the input node `id` as the first version of a state.
    pub(super) fn declare_state(&mut self, input: usize, name: &str, id: ValueId) {
        self.versions.insert(id, self.states.len());
        self.states.push(StateInfo {
            input,
            name: name.to_string(),
            current: id,
        });
    }

    /// `index_copy(input, dim, index, source)`: a fresh tensor, `input` with the slices
    /// `index` names along `dim` replaced by those of `source`.
    pub(crate) fn index_copy(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the input of `index_copy`");
        let (x, copy) = (x?, self.copy_args(args)?);
        let t = self.ty(x).clone();
        let axis = self.copy_operands(&t, &copy, args)?;
        let starts = vec![Poly::int(0); t.rank()];
        let ty = TensorType::row_major(t.shape.clone(), t.dtype);
        let op = Op::IndexCopy {
            axis,
            starts,
            ends: t.shape,
        };
        Some(self.push(op, vec![x, copy.index, copy.source], ty, span))
    }

    /// `x.index_copy_(dim, index, source)` on a state or a view of one made by integer
    /// indexing and slicing: the state's next version, and as the value the view again,
    /// now of that version (PyTorch returns `x`).
    pub(crate) fn index_copy_(&mut self, args: &[&Expr], span: Span) -> Option<Value> {
        let x = self.tensor_arg(args[0], "the receiver of `index_copy_`");
        let (x, copy) = (x?, self.copy_args(args)?);
        let (state, views) = self.written_state(x, args[0].span)?;
        let view = self.ty(x).clone();
        let axis = self.copy_operands(&view, &copy, args)?;
        let base = self.states[state].current;
        let full = self.ty(base).clone();
        let (starts, ends, kept) = self.window(&full.shape, &views);
        // The source at the state's rank: an axis of size 1 where the view indexed one.
        let mut source = copy.source;
        for a in (0..full.rank()).filter(|a| !kept.contains(a)) {
            let ty = super::layout::unsqueezed(&self.prog.dims, self.ty(source), a);
            source = self.push_id(Op::Unsqueeze(a), vec![source], ty, span);
        }
        let op = Op::IndexCopy {
            axis: kept[axis],
            starts,
            ends,
        };
        let ty = TensorType::row_major(full.shape, full.dtype);
        let next = self.push_id(op, vec![base, copy.index, source], ty, span);
        self.set_version(state, next);
        Some(Value::Tensor(self.replay(&views, next)))
    }

    /// The value a name stands for, a view of a state rebuilt on the state's current
    /// version (E0211 where the view may have been a copy).
    pub(super) fn current_value(&mut self, value: Value, span: Span) -> Value {
        match value {
            Value::Tensor(id) => match self.refresh(id, span) {
                Some(id) => Value::Tensor(id),
                None => Value::Error,
            },
            Value::Tuple(items) => {
                Value::Tuple(items.into_iter().map(|v| self.current_value(v, span)).collect())
            }
            other => other,
        }
    }

    /// The outputs a program gets from its states: each state's last version.
    pub(super) fn state_outputs(&self, prog: &mut Program) {
        for s in &self.states {
            prog.outputs.push(OutputDecl {
                name: s.name.clone(),
                value: s.current,
                state: Some(s.input),
                span: prog.inputs[s.input].span,
            });
        }
    }

    /// Each state's current version, to be put back by [`Checker::restore_states`] after a
    /// check whose nodes are dropped again.
    pub(super) fn save_states(&self) -> Vec<ValueId> {
        self.states.iter().map(|s| s.current).collect()
    }

    pub(super) fn restore_states(&mut self, saved: &[ValueId]) {
        for (state, &id) in saved.iter().enumerate() {
            self.set_version(state, id);
        }
        let nodes = self.prog.nodes.len();
        self.versions.retain(|&id, _| id < nodes);
    }

    fn set_version(&mut self, state: usize, id: ValueId) {
        self.versions.insert(id, state);
        self.states[state].current = id;
        let name = self.states[state].name.clone();
        self.scopes[0].insert(name, Entry::Value(Value::Tensor(id)));
    }

    /// `id` itself, or rebuilt on the current version of the state it is a stale view of.
    pub(super) fn refresh(&mut self, id: ValueId, span: Span) -> Option<ValueId> {
        let chain = self.chain(id);
        let Some(&state) = self.versions.get(&chain.base) else {
            return Some(id);
        };
        let current = self.states[state].current;
        if current == chain.base {
            return Some(id);
        }
        if chain.may_copy {
            let name = &self.states[state].name;
            let msg = format!("this value of state `{name}` was taken before an in-place write to it, through an op that may copy");
            let d = Diagnostic::error(Code::E0211, span, msg)
                .with_hint(format!("read `{name}` again after the write"));
            self.report(d);
            return None;
        }
        Some(self.replay(&chain.views, current))
    }

    /// The view ops from `id` down to the value they view.
    fn chain(&self, mut id: ValueId) -> Chain {
        let mut views = Vec::new();
        let mut may_copy = false;
        loop {
            let node = self.prog.node(id);
            match node.op {
                Op::Select { .. }
                | Op::Slice { .. }
                | Op::StepSlice { .. }
                | Op::Transpose(..)
                | Op::Permute(_)
                | Op::View(_)
                | Op::Unsqueeze(_)
                | Op::Squeeze(_)
                | Op::Expand(_) => {}
                Op::Reshape(_) | Op::Contiguous => may_copy = true,
                _ => break,
            }
            views.push(id);
            id = node.args[0];
        }
        views.reverse();
        Chain {
            base: id,
            views,
            may_copy,
        }
    }

    /// The view ops `views` (from the base outwards) again, on `base`.
    fn replay(&mut self, views: &[ValueId], base: ValueId) -> ValueId {
        let mut id = base;
        for &v in views {
            let mut node: Node = self.prog.node(v).clone();
            node.args[0] = id;
            id = self.push_node(node);
        }
        id
    }

    /// The state `x` writes (its index) and the integer indexing and slicing from the
    /// state to `x`; E0210 for any other receiver.
    fn written_state(&mut self, x: ValueId, span: Span) -> Option<(usize, Vec<ValueId>)> {
        let x = self.refresh(x, span)?;
        let chain = self.chain(x);
        let views_ok = chain
            .views
            .iter()
            .all(|&v| matches!(self.prog.node(v).op, Op::Select { .. } | Op::Slice { .. }));
        let state = self.versions.get(&chain.base).copied();
        let Some(state) = state.filter(|_| views_ok) else {
            let msg = "`index_copy_` writes in place, and only a `state` or a view of one made by indexing may be written";
            let d = Diagnostic::error(Code::E0210, span, msg).with_hint(
                "write `index_copy` for a new tensor, or declare the tensor `state` and index it (`cache[l]`)",
            );
            self.report(d);
            return None;
        };
        if self.blocks.len() > 1 {
            let name = &self.states[state].name;
            let msg = format!("state `{name}` is written inside a `for` that makes a sequence");
            let d = Diagnostic::error(Code::E0210, span, msg)
                .with_hint("write it in a loop of statements (`for l in 0..L { .. }` without a value)");
            self.report(d);
            return None;
        }
        Some((state, chain.views))
    }

    /// The window of the state `shape` that `views` (integer indices and slices, from the
    /// state outwards) reach: starts, ends, and the state's axes the view keeps, in order.
    fn window(&self, shape: &[Poly], views: &[ValueId]) -> (Vec<Poly>, Vec<Poly>, Vec<usize>) {
        let mut starts = vec![Poly::int(0); shape.len()];
        let mut ends = shape.to_vec();
        let mut kept: Vec<usize> = (0..shape.len()).collect();
        for &v in views {
            match &self.prog.node(v).op {
                Op::Select { axis, index } => {
                    let a = kept.remove(*axis);
                    starts[a] = starts[a].add(index);
                    ends[a] = starts[a].add(&Poly::int(1));
                }
                Op::Slice { axis, start, end } => {
                    let a = kept[*axis];
                    ends[a] = starts[a].add(end);
                    starts[a] = starts[a].add(start);
                }
                _ => unreachable!("written_state admits indexing and slicing only"),
            }
        }
        (starts, ends, kept)
    }

    /// The `dim`, `index` and `source` of an `index_copy`, as tensors (the dim is read
    /// later, against the input's rank).
    fn copy_args(&mut self, args: &[&Expr]) -> Option<CopyArgs> {
        let index = self.tensor_arg(args[2], "the index of `index_copy`");
        let source = self.tensor_arg(args[3], "the source of `index_copy`");
        Some(CopyArgs {
            index: index?,
            source: source?,
        })
    }

    /// PyTorch's checks of `index_copy` on `x` of type `t`: the axis, an int64 index of
    /// rank 1, a source of `x`'s rank and dtype whose sizes are `x`'s but `len(index)` on
    /// the axis. The axis, non-negative.
    fn copy_operands(&mut self, t: &TensorType, copy: &CopyArgs, args: &[&Expr]) -> Option<usize> {
        let axis = self.axis(args[1], t.rank(), false)?;
        let index = self.ty(copy.index).clone();
        if index.dtype != DType::I64 || index.rank() != 1 {
            let msg = format!(
                "the index of `index_copy` must be int64 of rank 1, found {} {}",
                index.dtype.name(),
                self.shape_text(&index.shape)
            );
            let d = Diagnostic::error(Code::E0208, args[2].span, msg)
                .with_hint("give a rank-1 int64 tensor of positions (`input pos: [N] int64`)");
            self.report(d);
            return None;
        }
        let source = self.ty(copy.source).clone();
        if source.dtype != t.dtype {
            let msg = format!(
                "the source of `index_copy` must have the input's dtype {}, found {}",
                t.dtype.name(),
                source.dtype.name()
            );
            self.error(Code::E0208, args[3].span, msg);
            return None;
        }
        let mut expected = t.shape.clone();
        expected[axis] = index.shape[0].clone();
        let agree = source.rank() == expected.len()
            && source
                .shape
                .iter()
                .zip(&expected)
                .all(|(a, b)| self.prog.dims.equal(a, b));
        if !agree {
            let msg = format!(
                "the source of `index_copy` must be {} (the input's shape, `len(index)` on axis {axis}), found {}",
                self.shape_text(&expected),
                self.shape_text(&source.shape)
            );
            self.error(Code::E0201, args[3].span, msg);
            return None;
        }
        Some(axis)
    }
}

/// The tensor operands of an `index_copy`.
struct CopyArgs {
    index: ValueId,
    source: ValueId,
}
