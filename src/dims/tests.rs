use super::*;
use proptest::prelude::*;

/// The dims of the spec's first program: `B, N, M` free, `D = 512`, `H = 8`, `Dk = D / H`.
fn mha() -> (DimTable, [Poly; 6]) {
    let mut t = DimTable::new();
    let b = t.declare("B", DimKind::Free { value: None });
    let n = t.declare("N", DimKind::Free { value: None });
    let m = t.declare("M", DimKind::Free { value: None });
    let d = t.declare("D", DimKind::Const(512));
    let h = t.declare("H", DimKind::Const(8));
    let dk = t.div(&Poly::sym(d), &Poly::sym(h)).unwrap();
    t.declare("Dk", DimKind::Derived(dk.clone()));
    let [b, n, m, d, h] = [b, n, m, d, h].map(Poly::sym);
    (t, [b, n, m, d, h, dk])
}

#[test]
fn head_count_times_head_size_is_the_model_size() {
    let (t, [_, _, _, d, h, dk]) = mha();
    assert_eq!(h.mul(&dk), d);
    assert_eq!(t.display(&h.mul(&dk)), "D");
}

#[test]
fn slice_length_of_a_head_is_the_head_size() {
    let (mut t, [_, _, _, _, h, dk]) = mha();
    let hv = Poly::sym(t.declare(
        "h",
        DimKind::Loop {
            start: Poly::int(0),
            end: h,
        },
    ));
    let end = hv.add(&Poly::int(1)).mul(&dk);
    assert_eq!(end.sub(&hv.mul(&dk)), dk);
}

#[test]
fn display_folds_derived_dims_and_orders_by_declaration() {
    let (t, [b, n, _, d, h, dk]) = mha();
    assert_eq!(t.display(&n.mul(&dk)), "N * Dk");
    assert_eq!(t.display(&b.mul(&n).mul(&d)), "B * N * D");
    assert_eq!(t.display(&h.mul(&b)), "B * H");
    assert_eq!(t.display(&n.mul(&Poly::int(2)).sub(&Poly::int(1))), "2 * N - 1");
    assert_eq!(t.display(&Poly::int(-1)), "-1");
}

/// `(x - x % k) / k`, how a rounded length is kept, prints as Python's `x // k`.
fn floor(x: &Poly, k: i64) -> Poly {
    let whole = x.sub(&Poly::rem_atom(x, &Poly::int(k)));
    whole.mul(&Poly::term(Ratio::new(1, i128::from(k)), &[]))
}

#[test]
fn floor_divisions_print_as_python_writes_them() {
    let (t, [b, n, ..]) = mha();
    let up = n.add(&Poly::int(1));
    assert_eq!(t.display(&floor(&n, 2)), "N // 2");
    assert_eq!(t.display(&floor(&up, 2)), "(N + 1) // 2");
    assert_eq!(
        t.display(&floor(&up, 2).mul(&Poly::int(4)).mul(&b)),
        "4 * B * ((N + 1) // 2)"
    );
    assert_eq!(t.display(&floor(&n, 3).add(&n)), "N // 3 + N");
    assert_eq!(t.display(&floor(&n, 3).sub(&Poly::int(1))), "N // 3 - 1");
    // A remainder on its own stays one.
    assert_eq!(t.display(&Poly::rem_atom(&n, &Poly::int(2))), "N % 2");
}

#[test]
fn values_never_decide_how_a_dim_prints() {
    let mut t = DimTable::new();
    let d = Poly::sym(t.declare("D", DimKind::Const(16)));
    let h = Poly::sym(t.declare("H", DimKind::Const(4)));
    let dk = t.div(&d, &h).unwrap();
    t.declare("Dk", DimKind::Derived(dk.clone()));
    assert_eq!(t.display(&dk), "Dk");
    assert_eq!(t.display(&h), "H");
    assert!(t.equal(&dk, &h), "equal by value");
}

#[test]
fn division_is_proved_from_values_structure_or_asserts() {
    let (mut t, [b, n, _, d, h, _]) = mha();
    assert!(t.div(&d, &h).is_ok(), "from values");
    assert!(t.div(&n.mul(&h), &h).is_ok(), "from structure");
    assert_eq!(t.div(&n, &h), Err(DivError::NotExact));
    assert_eq!(t.div(&n, &Poly::int(0)), Err(DivError::ByZero));
    t.assume_divides(n.clone(), h.clone());
    assert!(t.div(&n.mul(&b), &h).is_ok(), "from an assert");
}

#[test]
fn a_free_divisor_needs_an_assert() {
    let mut t = DimTable::new();
    let d = Poly::sym(t.declare("D", DimKind::Free { value: None }));
    let h = Poly::sym(t.declare("H", DimKind::Free { value: None }));
    assert_eq!(t.div(&d, &h), Err(DivError::NotExact));
    t.assume_divides(d.clone(), h.clone());
    let dk = t.div(&d, &h).unwrap();
    t.declare("Dk", DimKind::Derived(dk.clone()));
    assert!(t.is_integral(&dk.mul(&Poly::int(3))));
    assert_eq!(t.rem(&d, &h), Ok(Poly::default()));
}

#[test]
fn remainders_of_constants_are_computed() {
    let (t, [_, n, _, d, _, _]) = mha();
    assert_eq!(t.rem(&d, &Poly::int(3)).unwrap().as_int(), Some(2));
    assert!(t.rem(&n, &Poly::int(3)).unwrap().as_int().is_none());
}

#[test]
fn slice_bounds_hold_over_the_whole_loop() {
    let (mut t, [_, _, _, d, h, dk]) = mha();
    let hv = Poly::sym(t.declare(
        "h",
        DimKind::Loop {
            start: Poly::int(0),
            end: h,
        },
    ));
    let end = hv.add(&Poly::int(1)).mul(&dk);
    assert!(t.provably_nonneg(&d.sub(&end)));
    assert!(t.provably_nonneg(&hv.mul(&dk)));
    let too_far = hv.add(&Poly::int(2)).mul(&dk);
    assert!(!t.provably_nonneg(&d.sub(&too_far)));
}

#[test]
fn eval_binds_free_dims() {
    let (t, [b, n, _, d, _, dk]) = mha();
    let e = b.mul(&n).mul(&d).add(&dk);
    assert_eq!(t.eval(&e, &|s| Some(s as i64 + 2)), Some(2 * 3 * 512 + 64));
    assert_eq!(t.eval(&e, &|_| None), None);
}

/// A random dim expression over free dims `a, b, c`, built only from operations whose
/// result is exact algebra (`/` by a single term).
#[derive(Clone, Debug)]
enum E {
    Lit(i64),
    Var(usize),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    DivVar(Box<E>, usize),
}

fn expr() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![(-3i64..4).prop_map(E::Lit), (0usize..3).prop_map(E::Var)];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Add(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Sub(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mul(a.into(), b.into())),
            (inner, 0usize..3).prop_map(|(a, v)| E::DivVar(a.into(), v)),
        ]
    })
}

/// A different expression with the value of `x` (`y` and `v` are material to build it from).
fn rewrite(x: &E, y: &E, v: usize, kind: usize) -> E {
    let (bx, by) = (Box::new(x.clone()), Box::new(y.clone()));
    match kind {
        0 => E::DivVar(Box::new(E::Mul(bx, Box::new(E::Var(v)))), v),
        1 => E::Sub(Box::new(E::Add(bx, by.clone())), by),
        2 => match x {
            E::Mul(a, b) => E::Mul(b.clone(), a.clone()),
            E::Add(a, b) => E::Add(b.clone(), a.clone()),
            other => E::Mul(Box::new(other.clone()), Box::new(E::Lit(1))),
        },
        3 => match x {
            // (a + b) * c = a * c + b * c
            E::Mul(ab, c) => match &**ab {
                E::Add(a, b) => E::Add(
                    Box::new(E::Mul(a.clone(), c.clone())),
                    Box::new(E::Mul(b.clone(), c.clone())),
                ),
                _ => E::Add(bx, Box::new(E::Lit(0))),
            },
            _ => E::Add(bx, Box::new(E::Lit(0))),
        },
        _ => E::Mul(Box::new(E::DivVar(bx, v)), Box::new(E::Var(v))),
    }
}

fn normalize(e: &E) -> Poly {
    match e {
        E::Lit(n) => Poly::int(*n),
        E::Var(v) => Poly::sym(*v),
        E::Add(a, b) => normalize(a).add(&normalize(b)),
        E::Sub(a, b) => normalize(a).sub(&normalize(b)),
        E::Mul(a, b) => normalize(a).mul(&normalize(b)),
        E::DivVar(a, v) => normalize(a).quotient(&Poly::sym(*v)).unwrap(),
    }
}

/// Direct evaluation with exact fractions, independent of the normal form.
fn eval(e: &E, vals: &[i64; 3]) -> Ratio {
    match e {
        E::Lit(n) => Ratio::int(*n as i128),
        E::Var(v) => Ratio::int(vals[*v] as i128),
        E::Add(a, b) => eval(a, vals).add(eval(b, vals)),
        E::Sub(a, b) => eval(a, vals).add(eval(b, vals).neg()),
        E::Mul(a, b) => eval(a, vals).mul(eval(b, vals)),
        E::DivVar(a, v) => eval(a, vals).mul(Ratio::new(1, vals[*v] as i128)),
    }
}

fn eval_poly(p: &Poly, vals: &[i64; 3]) -> Ratio {
    p.substitute(&|s| Some(Poly::int(vals[s]))).as_const().unwrap()
}

proptest! {
    #[test]
    fn normal_form_agrees_with_direct_evaluation(e in expr(), vals in [1i64..50, 1i64..50, 1i64..50]) {
        prop_assert_eq!(eval_poly(&normalize(&e), &vals), eval(&e, &vals));
    }

    /// A substitution of constants multiplies coefficients in place, one of polynomials
    /// multiplies terms out: one dim at a time, and a dim shifted (`s + 1` at `s = v - 1`)
    /// beside constants, each gives the value of all the constants at once.
    #[test]
    fn substituting_in_steps_agrees_with_direct_evaluation(e in expr(), vals in [1i64..50, 1i64..50, 1i64..50], v in 0usize..3) {
        let p = normalize(&e);
        let one = p.substitute(&|s| (s == v).then(|| Poly::int(vals[v])));
        prop_assert_eq!(eval_poly(&one, &vals), eval(&e, &vals));
        let shifted = p.substitute(&|s| match s == v {
            true => Some(Poly::sym(s).add(&Poly::int(1))),
            false => Some(Poly::int(vals[s])),
        });
        let mut before = vals;
        before[v] -= 1;
        prop_assert_eq!(eval_poly(&shifted, &before), eval(&e, &vals));
    }

    /// The value without polynomials is the symbolic substitution's, with opaque
    /// quotients and remainders in the mix and dims at 0 or negative (factors that vanish,
    /// reciprocals of 0). It gives one wherever no `%` is by 0; where a dim has no value
    /// (or a `%` is by 0) it gives none, and the symbolic path decides.
    #[test]
    fn values_without_polynomials_agree_with_substitution(
        x in expr(), y in expr(), vals in [-3i64..9, -3i64..9, -3i64..9], missing in 0usize..4,
    ) {
        let (px, py) = (normalize(&x), normalize(&y));
        let sum = py.add(&Poly::sym(missing % 3)).add(&Poly::int(1));
        let opaque = [
            px.clone(),
            px.quotient(&sum).unwrap_or_default().add(&py),
            Poly::rem_atom(&px, &sum).mul(&py),
            Poly::rem_atom(&px, &Poly::int(0)),
        ];
        for (i, p) in opaque.iter().enumerate() {
            let symbolic = p.substitute(&|s| Some(Poly::int(vals[s]))).as_const();
            match p.value_where(&|s| Some(vals[s])) {
                Some(v) => prop_assert_eq!(Some(v), symbolic),
                None => prop_assert!(i >= 2, "no value for {:?} at {:?}", p, vals),
            }
            let partial = p.value_where(&|s| (s != missing).then(|| vals[s]));
            if missing < 3 && p.syms().contains(&missing) {
                prop_assert_eq!(partial, None);
            }
        }
    }

    #[test]
    fn equal_normal_forms_evaluate_equal(x in expr(), y in expr(), vals in [1i64..50, 1i64..50, 1i64..50]) {
        if normalize(&x) == normalize(&y) {
            prop_assert_eq!(eval(&x, &vals), eval(&y, &vals));
        }
    }

    /// Rewrites that keep the value (commuting, distributing, multiplying and dividing by
    /// a dim) must keep the normal form: this is what makes `H * Dk` equal `D`.
    #[test]
    fn value_preserving_rewrites_keep_the_normal_form(x in expr(), y in expr(), v in 0usize..3, k in 0usize..5) {
        let same = rewrite(&x, &y, v, k);
        prop_assert_eq!(normalize(&same), normalize(&x));
    }

    #[test]
    fn different_normal_forms_differ_somewhere(x in expr(), y in expr()) {
        let (px, py) = (normalize(&x), normalize(&y));
        if px != py {
            // Two different rational functions of degree below 40 cannot agree on every
            // point of this grid of primes-and-friends.
            let points = [2i64, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41];
            let differs = points.iter().any(|&a| points.iter().any(|&b| points.iter().any(|&c| {
                eval(&x, &[a, b, c]) != eval(&y, &[a, b, c])
            })));
            prop_assert!(differs, "{:?} and {:?} agree everywhere tried", px, py);
        }
    }
}

#[test]
fn free_dims_are_at_least_one() {
    let (t, [b, n, _, _, _, _]) = mha();
    assert!(t.provably_nonneg(&b.sub(&Poly::int(1))), "B - 1 >= 0");
    assert!(t.provably_nonneg(&b.mul(&n).sub(&Poly::int(1))), "B * N - 1 >= 0");
    assert!(!t.provably_nonneg(&n.sub(&Poly::int(2))), "N - 2 may be negative");
}

#[test]
fn asserted_inequalities_prove_bounds() {
    let (mut t, [_, n, _, _, _, _]) = mha();
    t.assume_nonneg(n.sub(&Poly::int(2)));
    assert!(t.provably_nonneg(&n.sub(&Poly::int(2))));
    assert!(t.provably_nonneg(&n.sub(&Poly::int(1))), "N - 2 >= 0 and 1 >= 0");
    assert!(!t.provably_nonneg(&n.sub(&Poly::int(3))));
}

/// `B, N` free, `U = 1`, `D = 12`, `H = 3`.
fn issue_dims() -> (DimTable, [Poly; 5]) {
    let mut t = DimTable::new();
    let b = Poly::sym(t.declare("B", DimKind::Free { value: None }));
    let n = Poly::sym(t.declare("N", DimKind::Free { value: None }));
    let u = Poly::sym(t.declare("U", DimKind::Const(1)));
    let d = Poly::sym(t.declare("D", DimKind::Const(12)));
    let h = Poly::sym(t.declare("H", DimKind::Const(3)));
    (t, [b, n, u, d, h])
}

#[test]
fn sizes_equal_to_one_given_the_constants_are_one() {
    let (t, [b, n, u, _, h]) = issue_dims();
    assert!(t.is_one(&u));
    assert!(t.is_one(&Poly::int(10).sub(&h.mul(&Poly::int(3)))), "10 - 3 * H");
    assert!(!t.is_one(&n));
    assert!(!t.is_one(&b.mul(&u)));
}

#[test]
fn sizes_never_one_are_at_least_two_or_at_most_zero() {
    let (t, [b, n, _, d, _]) = issue_dims();
    assert!(t.never_one(&Poly::int(12).mul(&b).mul(&n)));
    assert!(t.never_one(&d));
    assert!(t.never_one(&n.add(&Poly::int(1))));
    assert!(!t.never_one(&n), "N may be 1");
    assert!(!t.never_one(&b.mul(&n)));
    assert!(!t.never_one(&n.sub(&Poly::int(1))), "N - 1 is 1 at N = 2");
}

#[test]
fn sizes_never_one_by_their_residues() {
    let (t, [b, n, _, _, _]) = issue_dims();
    let one = Poly::int(1);
    let consecutive = n.mul(&n).sub(&n);
    assert!(t.never_one(&consecutive), "N * N - N is even");
    assert!(t.never_one(&consecutive.mul(&b)), "so is B * (N * N - N)");
    assert!(
        t.never_one(&Poly::int(3).mul(&n).add(&Poly::int(2))),
        "3 * N + 2 is 2 modulo 3"
    );
    assert!(
        !t.never_one(&consecutive.add(&one)),
        "N * N - N + 1 is 1 at N = 1"
    );
    assert!(!t.never_one(&b.mul(&n).sub(&b)), "B * N - B is 1 at B = 1, N = 2");
    assert!(!t.never_one(&n.mul(&n)), "N * N is 1 at N = 1");
    let squares = b.mul(&n).mul(&n).sub(&b);
    assert!(
        t.never_one(&squares),
        "B * (N * N - 1) needs N * N - 1 = 1 at B = 1"
    );
    let halves = b.mul(&n).mul(&Poly::term(Ratio::new(1, 2), &[]));
    assert!(!t.never_one(&halves), "B * N / 2 is 1 at B = 2, N = 1");
    let half = consecutive.mul(&Poly::term(Ratio::new(1, 2), &[]));
    assert!(!t.never_one(&half), "(N * N - N) / 2 is 1 at N = 2");
}

#[test]
fn products_are_positive_or_possibly_zero() {
    let (t, [b, n, _, d, _]) = issue_dims();
    assert!(t.provably_positive(&b.mul(&n).mul(&d)));
    assert!(!t.provably_positive(&n.sub(&Poly::int(1))), "0 at N = 1");
    assert!(!t.provably_positive(&b.mul(&n.sub(&Poly::int(1)))));
}

#[test]
fn fractions_and_sums_of_constants_simplify_and_declared_dims_stay() {
    let (t, [b, n, _, d, _]) = issue_dims();
    let q = t.div(&b.mul(&n).mul(&d), &b.mul(&n).mul(&Poly::int(12))).unwrap();
    assert_eq!(t.display(&q), "D / 12");
    assert_eq!(t.simplify(&q), Poly::int(1));
    assert_eq!(t.simplify(&d), d, "a constant dim keeps its name");
    assert_eq!(t.simplify(&n), n);
    let (_, [_, _, _, _, h]) = issue_dims();
    assert_eq!(
        t.simplify(&Poly::int(10).sub(&h.mul(&Poly::int(3)))),
        Poly::int(1)
    );
    assert_eq!(t.simplify(&h.mul(&Poly::int(3)).sub(&Poly::int(9))), Poly::int(0));
    let half = t.div(&d, &Poly::int(2)).unwrap();
    assert_eq!(t.simplify(&half), half, "D / 2 keeps its name, though it is 6");
    let rest = d.sub(&Poly::int(4));
    assert_eq!(t.simplify(&rest), rest, "D - 4 keeps its name");
}

#[test]
fn a_quotient_by_a_sum_is_not_an_integer_without_a_fact() {
    let mut t = DimTable::new();
    let n = Poly::sym(t.declare("N", DimKind::Free { value: None }));
    let h = Poly::sym(t.declare("H", DimKind::Free { value: None }));
    let c = Poly::sym(t.declare("C", DimKind::Const(3)));
    let h1 = h.add(&Poly::int(1));
    assert_eq!(t.div(&h, &h1), Err(DivError::NotExact), "H / (H + 1)");
    assert_eq!(t.div(&n.mul(&h), &h1), Err(DivError::NotExact), "N * H / (H + 1)");
    assert_eq!(t.div(&c, &c.add(&Poly::int(1))), Err(DivError::NotExact), "3 / 4");
    assert_eq!(t.div(&h1.mul(&n), &h1), Ok(n.clone()), "a multiple of the sum");
    let h2 = h.sub(&Poly::int(2));
    assert_eq!(
        t.div(&h1.mul(&h2).mul(&n), &h2),
        Ok(h1.mul(&n)),
        "(N * H * H - N * H - 2 * N) / (H - 2)"
    );
    assert_eq!(
        t.div(&h1.mul(&n).add(&Poly::int(1)), &h1),
        Err(DivError::NotExact),
        "a multiple of the sum plus 1"
    );
    assert_eq!(
        t.div(&n.mul(&n), &n.add(&h)),
        Err(DivError::NotExact),
        "N * N / (N + H)"
    );
    t.assume_divides(n.clone(), h1.clone());
    let q = t.div(&n, &h1).expect("asserted");
    assert!(
        t.div(&q.mul(&Poly::int(2)), &Poly::int(1)).is_ok(),
        "2 * N / (H + 1) is an integer"
    );
    assert_eq!(t.div(&h, &h1), Err(DivError::NotExact), "still not H / (H + 1)");
}
