use super::*;
use crate::dims::DimKind;

#[test]
fn broadcasting_aligns_from_the_right_and_repeats_ones() {
    assert_eq!(broadcast(&Concrete, &[2, 1, 4], &[3, 1]), Ok(vec![2, 3, 4]));
    assert_eq!(broadcast(&Concrete, &[], &[5]), Ok(vec![5]));
    let err = broadcast(&Concrete, &[2, 3], &[4, 3]).unwrap_err();
    assert_eq!((err.axis, err.left, err.right), (0, 2, 4));
}

#[test]
fn a_free_dim_broadcasts_only_where_it_is_provably_equal() {
    let mut t = DimTable::new();
    let n = Poly::sym(t.declare("N", DimKind::Free { value: None }));
    let u = Poly::sym(t.declare("U", DimKind::Const(1)));
    let (n, u) = (vec![n], vec![u]);
    assert_eq!(broadcast(&t, &n, &u), Ok(n.clone()));
    // `N` may be 1, but is not provably 1: `[N]` and `[3]` do not broadcast.
    assert!(broadcast(&t, &n, &[Poly::int(3)]).is_err());
    assert_eq!(broadcast(&t, &u, &n), Ok(n));
}

#[test]
fn matmul_promotes_vectors_and_broadcasts_batches() {
    assert_eq!(matmul(&Concrete, &[2, 1, 3, 4], &[5, 4, 6]), Ok(vec![2, 5, 3, 6]));
    assert_eq!(matmul(&Concrete, &[4], &[4, 6]), Ok(vec![6]));
    assert_eq!(matmul(&Concrete, &[3, 4], &[4]), Ok(vec![3]));
    assert_eq!(matmul(&Concrete, &[4], &[4]), Ok(vec![]));
    assert_eq!(matmul(&Concrete, &[], &[4]), Err(MatmulError::Scalar));
    assert_eq!(
        matmul(&Concrete, &[3, 4], &[5, 6]),
        Err(MatmulError::Inner { left: 4, right: 5 })
    );
    assert!(matches!(
        matmul(&Concrete, &[2, 3, 4], &[3, 4, 6]),
        Err(MatmulError::Batch(_))
    ));
}

#[test]
fn gemm_reads_transposed_operands() {
    assert_eq!(gemm(&Concrete, &[3, 4], &[6, 4], false, true), Some(vec![3, 6]));
    assert_eq!(gemm(&Concrete, &[4, 3], &[4, 6], true, false), Some(vec![3, 6]));
    assert_eq!(gemm(&Concrete, &[4], &[4, 6], false, false), None);
}

#[test]
fn linear_takes_an_out_in_weight_and_an_out_bias() {
    let b: &[usize] = &[5];
    assert_eq!(linear(&Concrete, &[2, 3, 4], &[5, 4], Some(b)), Ok(vec![2, 3, 5]));
    assert_eq!(
        linear(&Concrete, &[2, 4], &[4, 5], None),
        Err(LinearError::Features)
    );
    assert_eq!(
        linear(&Concrete, &[], &[5, 4], None),
        Err(LinearError::ScalarInput)
    );
    assert_eq!(linear(&Concrete, &[4], &[4], None), Err(LinearError::WeightRank));
    assert_eq!(
        linear(&Concrete, &[4], &[5, 4], Some(&[4])),
        Err(LinearError::Bias)
    );
}

#[test]
fn cat_adds_up_one_axis_and_names_the_part_that_differs() {
    let (a, b, c): (&[usize], &[usize], &[usize]) = (&[2, 3], &[2, 5], &[4, 5]);
    assert_eq!(cat(&Concrete, 1, &[a, b]), Ok(vec![2, 8]));
    assert_eq!(cat(&Concrete, 1, &[a, b, c]), Err(CatError::Part(2)));
    assert_eq!(cat(&Concrete, 2, &[a, b]), Err(CatError::Axis));
}

#[test]
fn joined_items_multiply_or_insert_an_axis() {
    assert_eq!(joined(&Concrete, &[2, 3], &4, 1, false), Some(vec![2, 12]));
    assert_eq!(joined(&Concrete, &[2, 3], &4, 2, true), Some(vec![2, 3, 4]));
    assert_eq!(joined(&Concrete, &[2, 3], &4, 2, false), None);
    assert_eq!(joined(&Concrete, &[2, 3], &4, 3, true), None);
}

#[test]
fn axis_moves_check_their_axes() {
    assert!(is_permutation(&[2, 0, 1], 3));
    assert!(!is_permutation(&[0, 0, 1], 3));
    assert!(!is_permutation(&[0, 1], 3));
    assert_eq!(permuted(&[2, 3, 4], &[2, 0, 1]), vec![4, 2, 3]);
    assert_eq!(transposed(&[2, 3, 4], 0, 2), Some(vec![4, 3, 2]));
    assert_eq!(transposed(&[2, 3], 0, 2), None);
    assert_eq!(unsqueezed(&Concrete, &[2, 3], 2), Some(vec![2, 3, 1]));
    assert_eq!(unsqueezed(&Concrete, &[2, 3], 3), None);
    assert_eq!(reduced(&Concrete, &[2, 3, 4], &[0, 2], true), vec![1, 3, 1]);
    assert_eq!(reduced(&Concrete, &[2, 3, 4], &[0, 2], false), vec![3]);
}

#[test]
fn slices_and_selects_change_one_axis() {
    assert_eq!(sliced(&[2, 8, 4], 1, 3), Some(vec![2, 3, 4]));
    assert_eq!(sliced(&[2, 8], 2, 3), None);
    assert_eq!(dropped(&[2, 8, 4], 1), Some(vec![2, 4]));
    assert_eq!(dropped(&[2], 1), None);
}

#[test]
fn squeeze_drops_an_axis_only_where_it_is_provably_one() {
    let mut t = DimTable::new();
    let n = Poly::sym(t.declare("N", DimKind::Free { value: None }));
    assert_eq!(squeezes(&t, &Poly::int(1)), Some(true));
    assert_eq!(squeezes(&t, &Poly::int(2).mul(&n)), Some(false));
    // `N` is 1 at some sizes only: the rank would depend on them.
    assert_eq!(squeezes(&t, &n), None);
    assert_eq!(squeezes(&Concrete, &3), Some(false));
}

#[test]
fn a_view_keeps_the_element_count() {
    let mut t = DimTable::new();
    let n = Poly::sym(t.declare("N", DimKind::Free { value: None }));
    let two_n = Poly::int(2).mul(&n);
    assert!(keeps_count(
        &t,
        &[two_n.clone(), Poly::int(3)],
        &[n.clone(), Poly::int(6)]
    ));
    let just_n = std::slice::from_ref(&n);
    assert!(!keeps_count(&t, &[two_n], just_n));
    assert_eq!(numel(&Concrete, &[2, 3, 4]), 24);
    assert_eq!(numel(&Concrete, &[]), 1);
    assert!(same_shape(&t, just_n, just_n));
    assert!(!same_shape(&t, just_n, &[n.clone(), Poly::int(1)]));
}

#[test]
fn grouped_query_attention_reads_key_heads_as_query_heads() {
    let (q, k) = ([2, 8, 5, 16], [2, 2, 7, 16]);
    assert_eq!(read_heads(&q, &k, false), Some(vec![2, 2]));
    assert_eq!(read_heads(&q, &k, true), Some(vec![2, 8]));
    // Without heads there is nothing to read as the query's.
    assert_eq!(read_heads(&[5, 16], &[7, 16], true), None);
    assert_eq!(read_heads(&[5, 16], &[7, 16], false), Some(vec![]));
}
