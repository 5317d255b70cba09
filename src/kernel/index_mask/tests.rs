//! The tile decisions against every element of the tile.

use super::*;
use proptest::prelude::*;

fn causal() -> Keep {
    // j <= i
    Keep::Atom(Affine { ci: 1, cj: -1, c: 0 })
}

fn affine() -> impl Strategy<Value = Affine> {
    (-3i64..=3, -3i64..=3, -40i64..=40).prop_map(|(ci, cj, c)| Affine { ci, cj, c })
}

fn keep() -> impl Strategy<Value = Keep> {
    affine().prop_map(Keep::Atom).prop_recursive(3, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Keep::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Keep::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| Keep::Not(Box::new(a))),
        ]
    })
}

proptest! {
    #[test]
    fn a_tile_called_whole_or_empty_is_so_at_every_element(
        keep in keep(), i0 in 0i64..40, j0 in 0i64..40, h in 0i64..12, w in 0i64..12,
    ) {
        let (i, j) = ((i0, i0 + h), (j0, j0 + w));
        let t = keep.truth(i, j);
        let held: Vec<bool> = (i.0..=i.1)
            .flat_map(|a| (j.0..=j.1).map(move |b| (a, b)))
            .map(|(a, b)| keep.holds(a, b))
            .collect();
        if t.all {
            prop_assert!(held.iter().all(|&h| h));
        }
        if t.none {
            prop_assert!(held.iter().all(|&h| !h));
        }
    }

    #[test]
    fn one_comparison_is_decided_exactly(
        a in affine(), i0 in 0i64..40, j0 in 0i64..40, h in 0i64..12, w in 0i64..12,
    ) {
        let (i, j) = ((i0, i0 + h), (j0, j0 + w));
        let keep = Keep::Atom(a);
        let t = keep.truth(i, j);
        let held: Vec<bool> = (i.0..=i.1)
            .flat_map(|x| (j.0..=j.1).map(move |y| (x, y)))
            .map(|(x, y)| keep.holds(x, y))
            .collect();
        prop_assert_eq!(t.all, held.iter().all(|&h| h));
        prop_assert_eq!(t.none, held.iter().all(|&h| !h));
    }

    #[test]
    fn every_row_keeps_agrees_with_the_elements(
        keep in keep(), n in 1usize..30, m in 1usize..30, block in 1usize..9,
    ) {
        let mask = IndexMask { keep, fill: f32::NEG_INFINITY };
        let brute = (0..n as i64).all(|i| (0..m as i64).any(|j| mask.keep.holds(i, j)));
        prop_assert_eq!(mask.every_row_keeps(n, m, block), brute);
    }
}

#[test]
fn causal_attention_skips_the_tiles_above_the_diagonal() {
    let mask = IndexMask {
        keep: causal(),
        fill: f32::NEG_INFINITY,
    };
    // 8 x 8 tiles of 4 x 4: 28 below the diagonal, 8 on it, 28 above.
    let counts = mask.tiles((32, 32), (4, 4));
    assert_eq!(
        counts,
        TileCounts {
            kept: 28,
            partial: 8,
            skipped: 28
        }
    );
    assert!(mask.every_row_keeps(32, 32, 4));
}

#[test]
fn a_window_keeps_a_band() {
    // i - W < j <= i with W = 4: j <= i and i - j - 4 < 0, i.e. j - i + 3 >= 0.
    let keep = Keep::And(
        Box::new(causal()),
        Box::new(Keep::Atom(Affine { ci: -1, cj: 1, c: 3 })),
    );
    let mask = IndexMask { keep, fill: -1e9 };
    let counts = mask.tiles((64, 64), (8, 8));
    // Each row block meets the diagonal tile and, but for the first, the one before it.
    assert_eq!(counts.partial, 8 + 7);
    assert_eq!(counts.kept, 0);
    assert_eq!(counts.skipped, 64 - 15);
}

#[test]
fn a_row_without_keys_is_found() {
    // j > i: row i keeps keys i + 1 .., so the last row keeps none.
    let keep = Keep::Not(Box::new(causal()));
    let mask = IndexMask { keep, fill: -1e9 };
    assert!(!mask.every_row_keeps(10, 10, 4));
    assert!(mask.every_row_keeps(10, 11, 4));
}

#[test]
fn formulas_print_as_comparisons() {
    let keep = Keep::And(
        Box::new(causal()),
        Box::new(Keep::Not(Box::new(Keep::Atom(Affine { ci: 1, cj: -1, c: -4 })))),
    );
    assert_eq!(keep.to_string(), "((i - j >= 0) & ~(i - j - 4 >= 0))");
    assert_eq!(Affine { ci: 0, cj: -2, c: 5 }.to_string(), "-2*j + 5 >= 0");
}
