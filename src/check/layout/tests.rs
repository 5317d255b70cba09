//! `view` legality against PyTorch's rule. The table's verdicts are PyTorch's (from
//! `shared/notes/VIEW.md` and ATen's `computeStride`); `pytorch_view_strides` is that
//! function transcribed for concrete sizes, so the symbolic decision can be compared with
//! it on many sizes.

use super::*;
use crate::dims::DimKind;
use crate::ir::DType;

/// `B, N, H` free, `Dk = 64` constant, and a few more free dims for permutations.
fn dims() -> (DimTable, Vec<Poly>) {
    let mut t = DimTable::new();
    let names = ["B", "N", "H", "C"];
    let mut syms: Vec<Poly> = names
        .iter()
        .map(|n| Poly::sym(t.declare(n, DimKind::Free { value: None })))
        .collect();
    syms.push(Poly::sym(t.declare("Dk", DimKind::Const(64))));
    (t, syms)
}

fn permuted(base: &[Poly], perm: &[usize]) -> TensorType {
    let rm = TensorType::row_major(base.to_vec(), DType::F32);
    TensorType {
        shape: perm.iter().map(|&a| rm.shape[a].clone()).collect(),
        strides: perm.iter().map(|&a| rm.strides[a].clone()).collect(),
        dtype: DType::F32,
        others: OtherStrides::None,
    }
}

/// ATen's `computeStride` for concrete sizes: the strides of the view, or `None`.
fn pytorch_view_strides(old_shape: &[i64], old_strides: &[i64], new_shape: &[i64]) -> Option<Vec<i64>> {
    let mut new_strides = vec![0; new_shape.len()];
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for tensor_d in (0..old_shape.len()).rev() {
        tensor_numel *= old_shape[tensor_d];
        if tensor_d == 0
            || (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
        {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(new_strides)
}

struct Case {
    /// Axes of a row-major `[B, N, H, Dk]`, in the order the input tensor has them.
    perm: [usize; 4],
    /// The view's sizes, as products of the base axes (indices into `[B, N, H, Dk]`),
    /// with `Split(a, k)` for a factor `k` of constant axis `a`.
    view: &'static [&'static [Part]],
    legal: bool,
}

#[derive(Clone, Copy)]
enum Part {
    Axis(usize),
    Const(i64),
}
use Part::{Axis, Const};

const B: Part = Axis(0);
const N: Part = Axis(1);
const H: Part = Axis(2);
const DK: Part = Axis(4);

/// Base axes: 0 = B, 1 = N, 2 = H, 4 = Dk (index 3, `C`, is unused here).
const CASES: &[Case] = &[
    // VIEW.md's table, x row-major [B, N, H, Dk].
    Case {
        perm: [0, 1, 2, 3],
        view: &[&[B], &[N], &[H, DK]],
        legal: true,
    },
    Case {
        perm: [0, 2, 1, 3],
        view: &[&[B], &[H], &[N], &[Const(2)], &[Const(32)]],
        legal: true,
    },
    Case {
        perm: [0, 2, 1, 3],
        view: &[&[B], &[H], &[N, DK]],
        legal: false,
    },
    Case {
        perm: [0, 2, 1, 3],
        view: &[&[B, H], &[N], &[DK]],
        legal: false,
    },
    Case {
        perm: [0, 2, 1, 3],
        view: &[&[B], &[H], &[N], &[DK]],
        legal: true,
    },
    Case {
        perm: [0, 1, 2, 3],
        view: &[&[B, N, H, DK]],
        legal: true,
    },
    Case {
        perm: [1, 0, 2, 3],
        view: &[&[N, B], &[H, DK]],
        legal: false,
    },
    Case {
        perm: [1, 0, 2, 3],
        view: &[&[N], &[B], &[H, DK]],
        legal: true,
    },
    Case {
        perm: [0, 1, 3, 2],
        view: &[&[B, N], &[DK], &[H]],
        legal: true,
    },
    Case {
        perm: [0, 1, 3, 2],
        view: &[&[B], &[N], &[DK, H]],
        legal: false,
    },
    Case {
        perm: [2, 0, 1, 3],
        view: &[&[H], &[B, N], &[DK]],
        legal: true,
    },
    Case {
        perm: [2, 0, 1, 3],
        view: &[&[H], &[B, N, DK]],
        legal: false,
    },
    Case {
        perm: [3, 0, 1, 2],
        view: &[&[DK], &[B, N, H]],
        legal: true,
    },
    Case {
        perm: [3, 0, 1, 2],
        view: &[&[Const(2)], &[Const(32), B], &[N, H]],
        legal: false,
    },
    Case {
        perm: [0, 2, 1, 3],
        view: &[&[B], &[H], &[N], &[Const(1)], &[DK]],
        legal: true,
    },
];

/// The base axes of the tensor `[B, N, H, Dk]` as dims (index 3 of the table is `Dk`).
fn base(syms: &[Poly]) -> Vec<Poly> {
    vec![syms[0].clone(), syms[1].clone(), syms[2].clone(), syms[4].clone()]
}

fn part_poly(syms: &[Poly], p: Part) -> Poly {
    match p {
        Axis(a) => syms[a].clone(),
        Const(k) => Poly::int(k),
    }
}

/// The symbolic sizes of a case's view.
fn view_shape(syms: &[Poly], case: &Case) -> Vec<Poly> {
    case.view
        .iter()
        .map(|parts| {
            parts
                .iter()
                .fold(Poly::int(1), |acc, p| acc.mul(&part_poly(syms, *p)))
        })
        .collect()
}

fn part_value(vals: &[i64; 5], p: Part) -> i64 {
    match p {
        Axis(a) => vals[a],
        Const(k) => k,
    }
}

#[test]
fn symbolic_view_legality_matches_the_table() {
    let (t, syms) = dims();
    for (i, case) in CASES.iter().enumerate() {
        let x = permuted(&base(&syms), &case.perm);
        let shape = view_shape(&syms, case);
        let got = view_strides(&t, &x, &shape).is_some();
        assert_eq!(got, case.legal, "case {i}");
    }
}

#[test]
fn symbolic_view_legality_matches_pytorch_on_concrete_sizes() {
    let (t, syms) = dims();
    let sizes: [[i64; 5]; 4] = [
        [2, 3, 5, 7, 64],
        [4, 9, 2, 3, 64],
        [3, 2, 7, 2, 64],
        [6, 5, 4, 2, 64],
    ];
    for (i, case) in CASES.iter().enumerate() {
        let x = permuted(&base(&syms), &case.perm);
        let shape = view_shape(&syms, case);
        let symbolic = view_strides(&t, &x, &shape);
        for vals in &sizes {
            let base_vals = [vals[0], vals[1], vals[2], vals[4]];
            let mut rm = [1i64; 4];
            for a in (0..3).rev() {
                rm[a] = rm[a + 1] * base_vals[a + 1];
            }
            let old_shape: Vec<i64> = case.perm.iter().map(|&a| base_vals[a]).collect();
            let old_strides: Vec<i64> = case.perm.iter().map(|&a| rm[a]).collect();
            let new_shape: Vec<i64> = case
                .view
                .iter()
                .map(|parts| parts.iter().map(|p| part_value(vals, *p)).product())
                .collect();
            let torch = pytorch_view_strides(&old_shape, &old_strides, &new_shape);
            assert_eq!(symbolic.is_some(), torch.is_some(), "case {i} at {vals:?}");
            if let (Some(s), Some(c)) = (&symbolic, &torch) {
                let evaluated: Vec<i64> = s
                    .iter()
                    .map(|p| t.eval(p, &|sym| Some(vals[sym])).expect("all dims bound"))
                    .collect();
                // Strides of size-1 axes are arbitrary; compare the others.
                for (k, size) in new_shape.iter().enumerate() {
                    if *size != 1 {
                        assert_eq!(evaluated[k], c[k], "case {i} axis {k} at {vals:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn elementwise_results_keep_a_dense_operands_order() {
    let (t, syms) = dims();
    let x = permuted(&base(&syms), &[0, 2, 1, 3]);
    let s = elementwise_order(&t, &[&x], &x.shape);
    assert_eq!(s, Layout::exact(x.strides.clone()));
    let rm = TensorType::row_major(x.shape.clone(), DType::F32);
    assert_eq!(fresh_row_major(&t, &[&x], &x.shape).strides, rm.strides);
}

#[test]
fn a_reshape_that_copies_except_where_a_dim_is_one_is_row_major() {
    // `x.transpose(1, 2).reshape(B, N, H * Dk)`: a view only at `N = 1`, row-major there.
    let (t, syms) = dims();
    let x = permuted(&base(&syms), &[0, 2, 1, 3]);
    let x = TensorType {
        shape: vec![
            x.shape[0].clone(),
            x.shape[2].clone(),
            x.shape[1].clone(),
            x.shape[3].clone(),
        ],
        strides: vec![
            x.strides[0].clone(),
            x.strides[2].clone(),
            x.strides[1].clone(),
            x.strides[3].clone(),
        ],
        ..x
    };
    let (b, n, h, dk) = (&syms[0], &syms[1], &syms[2], &syms[4]);
    let merged = reshape(&t, &x, &[b.clone(), n.clone(), h.mul(dk)]);
    assert_eq!(merged.others, OtherStrides::None, "{merged:?}");
    let same: Vec<Poly> = x.shape.clone();
    let kept = reshape(&t, &x, &same);
    assert_eq!(kept.strides, x.strides, "the same shape is a view");
}

#[test]
fn a_reshape_that_is_a_view_where_sizes_coincide_may_have_any_strides() {
    // `[4, N]` in memory order `[N, 4]` viewed as `[N, 4]` is the transposed view at N = 4.
    let (t, syms) = dims();
    let n = &syms[1];
    let rm = TensorType::row_major(vec![n.clone(), Poly::int(4)], DType::F32);
    let x = TensorType {
        shape: vec![Poly::int(4), n.clone()],
        strides: vec![rm.strides[1].clone(), rm.strides[0].clone()],
        ..rm
    };
    assert_eq!(
        reshape(&t, &x, &[n.clone(), Poly::int(4)]).others,
        OtherStrides::Any
    );
    // `z[:, 0 : 4, 0, :]` of `z: [B, N, 2, C]`: its first two axes meet at N = 4.
    let (b, c) = (&syms[0], &syms[3]);
    let z = TensorType::row_major(vec![b.clone(), n.clone(), Poly::int(2), c.clone()], DType::F32);
    let s = TensorType {
        shape: vec![b.clone(), Poly::int(4), c.clone()],
        strides: vec![z.strides[0].clone(), z.strides[1].clone(), z.strides[3].clone()],
        ..z
    };
    assert_eq!(
        reshape(&t, &s, &[b.mul(&Poly::int(4)), c.clone()]).others,
        OtherStrides::Any
    );
}

/// `exact::order_is_exact` against PyTorch 2.15's strides. `x[:, 1 : N].unsqueeze(2) + y`
/// (`y: [1, 1, 1]`) is row-major on every axis wherever it is not empty (at `N = 2`,
/// `(3, 3, 3, 3, 1)`); `w.transpose(1, 2) > 0` of `w: [1, 3, 1]` has strides `(3, 1, 1)`,
/// which the row-major formula `(3, 3, 1)` is not: TensorIterator swaps the axis of 3
/// past the axis of size 1 on equal strides.
#[test]
fn an_elementwise_order_is_exact_on_axes_of_size_one_only_where_the_sort_gives_it() {
    let (t, s) = dims();
    let (b, n) = (&s[0], &s[1]);
    let one = Poly::int(1);
    let three = Poly::int(3);
    let m = n.sub(&one);
    let sliced = TensorType {
        shape: vec![b.clone(), m.clone(), one.clone(), one.clone(), three.clone()],
        strides: vec![
            n.mul(&three),
            three.clone(),
            three.clone(),
            three.clone(),
            one.clone(),
        ],
        dtype: DType::F32,
        others: OtherStrides::None,
    };
    let y = TensorType::row_major(vec![one.clone(); 3], DType::F32);
    let sum = TensorType::row_major(sliced.shape.clone(), DType::F32);
    assert!(exact::order_is_exact(&t, &[&y, &sliced], &sum));
    let transposed = TensorType {
        shape: vec![one.clone(), one.clone(), three.clone()],
        strides: vec![three.clone(), one.clone(), one.clone()],
        dtype: DType::F32,
        others: OtherStrides::None,
    };
    let zero = TensorType::row_major(Vec::new(), DType::F32);
    let row_major = TensorType::row_major(transposed.shape.clone(), DType::F32);
    assert!(!exact::order_is_exact(&t, &[&transposed, &zero], &row_major));
    let swapped = TensorType {
        strides: transposed.strides.clone(),
        ..row_major
    };
    assert!(exact::order_is_exact(&t, &[&transposed, &zero], &swapped));
}
