//! Goal tests: each rule, run alone (or with the few it needs), proves `start => goal`.
//!
//! Terms are written in the optimizer's language: `(input 0 [2,3])` is input 0 of shape
//! `[2, 3]`, `#s0` the dim `s0` (here the loop variable `h` of a loop over 0..3), `1.0` a
//! float, `none` an absent operand.

use attnc::dims::{DimKind, DimTable, Poly};
use attnc::opt::{rules, Ctx, Tensor};
use egg::{test_fn, Rewrite, Runner};

/// The rules of that name.
fn only(names: &[&str]) -> Vec<Rewrite<Tensor, Ctx>> {
    let rules: Vec<_> = rules()
        .into_iter()
        .filter(|r| names.contains(&r.name.as_str()))
        .collect();
    assert_eq!(rules.len(), names.len(), "unknown rule in {names:?}");
    rules
}

/// A runner whose dims know `s0` as a loop variable over `0..3`.
fn heads() -> Runner<Tensor, Ctx> {
    let mut dims = DimTable::new();
    dims.declare(
        "h",
        DimKind::Loop {
            start: Poly::int(0),
            end: Poly::int(3),
        },
    );
    Runner::new(Ctx::new(dims))
}

// Layout: a copy is the same value; views compose.
test_fn! { contiguous_is_the_value_itself, only(&["contiguous-elim"]),
"(contiguous (transpose (input 0 [2,3]) 0 1))" => "(transpose (input 0 [2,3]) 0 1)" }
test_fn! { transpose_twice_is_nothing, only(&["transpose-transpose"]),
"(transpose (transpose (input 0 [2,3,4]) 1 2) 1 2)" => "(input 0 [2,3,4])" }
test_fn! { reshapes_compose, only(&["reshape-reshape"]),
"(reshape (reshape (input 0 [2,3,4]) [6,4]) [24])" => "(reshape (input 0 [2,3,4]) [24])" }
test_fn! { a_reshape_to_its_own_shape_is_nothing, only(&["reshape-noop"]),
"(reshape (input 0 [2,3]) [2,3])" => "(input 0 [2,3])" }
test_fn! { a_slice_of_a_whole_axis_is_nothing, only(&["slice-noop"]),
"(slice (input 0 [10,3]) 1 #0 #3)" => "(input 0 [10,3])" }
test_fn! { slices_compose, only(&["slice-slice"]),
"(slice (slice (input 0 [10,3]) 0 #2 #8) 0 #1 #3)" => "(slice (input 0 [10,3]) 0 #3 #5)" }

// GEMMs and their flags.
test_fn! { a_matmul_is_a_gemm, only(&["matmul-gemm"]),
"(matmul (input 0 [2,3,4]) (input 1 [2,4,5]))"
=> "(gemm (input 0 [2,3,4]) (input 1 [2,4,5]) none 0 0 1.0)" }
test_fn! { a_transposed_right_operand_is_a_flag, only(&["matmul-gemm", "gemm-trans-b"]),
"(matmul (input 0 [2,3,4]) (transpose (input 1 [2,5,4]) 1 2))"
=> "(gemm (input 0 [2,3,4]) (input 1 [2,5,4]) none 0 1 1.0)" }
test_fn! { a_transposed_left_operand_is_a_flag, only(&["matmul-gemm", "gemm-trans-a"]),
"(matmul (transpose (input 0 [4,3]) 0 1) (input 1 [4,5]))"
=> "(gemm (input 0 [4,3]) (input 1 [4,5]) none 1 0 1.0)" }

// Scales.
test_fn! { dividing_by_a_constant_is_a_scale, only(&["div-scale"]),
"(div (input 0 [2,3]) (sqrt (dim #64)))" => "(scale (input 0 [2,3]) 0.125)" }
test_fn! { multiplying_by_a_constant_is_a_scale, only(&["mul-scale", "mul-scale-left"]),
"(add (mul (input 0 [2]) (lit 2.0)) (mul (lit 3.0) (input 0 [2])))"
=> "(add (scale (input 0 [2]) 2.0) (scale (input 0 [2]) 3.0))" }
test_fn! { scales_combine, only(&["scale-scale", "scale-one"]),
"(scale (scale (input 0 [2]) 2.0) 0.5)" => "(input 0 [2])" }
test_fn! { a_scale_of_a_gemm_is_its_alpha, only(&["scale-gemm"]),
"(scale (gemm (input 0 [3,4]) (input 1 [4,5]) none 0 0 1.0) 0.5)"
=> "(gemm (input 0 [3,4]) (input 1 [4,5]) none 0 0 0.5)" }
test_fn! { alpha_moves_into_the_left_operand, only(&["gemm-alpha-to-a"]),
"(gemm (input 0 [3,4]) (input 1 [4,5]) none 0 0 0.5)"
=> "(gemm (scale (input 0 [3,4]) 0.5) (input 1 [4,5]) none 0 0 1.0)" }
test_fn! { scales_move_through_views,
only(&["scale-transpose", "scale-permute", "scale-reshape", "scale-slice", "scale-select"]),
"(outputs (scale (transpose (input 0 [2,3]) 0 1) 2.0) (scale (permute (input 0 [2,3]) [1,0]) 2.0)
              (scale (reshape (input 0 [2,3]) [6]) 2.0) (scale (slice (input 0 [2,3]) 1 #0 #2) 2.0)
              (scale (select (input 0 [2,3]) 0 #1) 2.0))"
=> "(outputs (transpose (scale (input 0 [2,3]) 2.0) 0 1) (permute (scale (input 0 [2,3]) 2.0) [1,0])
                 (reshape (scale (input 0 [2,3]) 2.0) [6]) (slice (scale (input 0 [2,3]) 2.0) 1 #0 #2)
                 (select (scale (input 0 [2,3]) 2.0) 0 #1))" }
test_fn! { a_scaled_projection_scales_its_weights_and_bias, only(&["scale-linear"]),
"(scale (linear (input 0 [2,3]) (param 0 [4,3]) (param 1 [4])) 0.5)"
=> "(linear (input 0 [2,3]) (scale (param 0 [4,3]) 0.5) (scale (param 1 [4]) 0.5))" }
test_fn! { the_attention_scale_folds_into_the_query_weights,
only(&["div-scale", "matmul-gemm", "gemm-trans-b", "scale-gemm", "gemm-alpha-to-a",
       "scale-transpose", "scale-reshape", "scale-linear"]),
"(div (matmul (transpose (reshape (linear (input 0 [2,5,8]) (param 0 [8,8]) (param 1 [8])) [2,5,2,4]) 1 2)
                  (transpose (input 1 [2,2,6,4]) 2 3))
          (sqrt (dim #4)))"
=> "(gemm (transpose (reshape (linear (input 0 [2,5,8]) (scale (param 0 [8,8]) 0.5) (scale (param 1 [8]) 0.5))
                                 [2,5,2,4]) 1 2)
              (input 1 [2,2,6,4]) none 0 1 1.0)" }

// Fusion.
test_fn! { a_softmax_on_the_last_axis_is_fused, only(&["fuse-softmax"]),
"(softmax (input 0 [2,3]) 1)" => "(masked_softmax (input 0 [2,3]) none 1.0 0.0)" }
test_fn! { scale_mask_and_softmax_fuse, only(&["fuse-masked-softmax", "fuse-scale-softmax"]),
"(softmax (masked_fill (scale (input 0 [2,3]) 0.5) (eq (input 1 [2,1]) (lit 0.0)) (neg (lit 1e9))) 1)"
=> "(masked_softmax (input 0 [2,3]) (eq (input 1 [2,1]) (lit 0.0)) 0.5 -1e9)" }
test_fn! { matmul_softmax_matmul_is_attention,
only(&["matmul-gemm", "gemm-trans-b", "fuse-masked-softmax", "fuse-attention"]),
"(matmul (softmax (masked_fill (matmul (input 0 [2,5,4]) (transpose (input 1 [2,6,4]) 1 2))
                                   (eq (input 3 [2,1,6]) (lit 0.0)) (lit -1e9)) 2)
             (input 2 [2,6,3]))"
=> "(attention (input 0 [2,5,4]) (input 1 [2,6,4]) (input 2 [2,6,3]) (eq (input 3 [2,1,6]) (lit 0.0)) 1.0 -1e9)" }
test_fn! { a_where_with_a_scalar_is_a_masked_fill_of_the_negation, only(&["where-masked-fill"]),
"(where (le (input 0 [2,3]) (input 1 [2,3])) (input 2 [2,3]) (lit -1e9))"
=> "(masked_fill (input 2 [2,3]) (not (le (input 0 [2,3]) (input 1 [2,3]))) (lit -1e9))" }
test_fn! { attention_over_changed_scores_is_one_op, only(&["fuse-scored-attention"]),
"(gemm (masked_softmax (tanh (gemm (input 0 [2,5,4]) (input 1 [2,6,4]) none 0 1 0.5)) none 2.0 0.0)
       (input 2 [2,6,3]) none 0 0 1.0)"
=> "(scored_attention (tanh (gemm (input 0 [2,5,4]) (input 1 [2,6,4]) none 0 1 0.5)) (input 2 [2,6,3]) none 2.0 0.0)" }

/// Scores that are no function of a product of queries and keys stay a softmax and a GEMM.
#[test]
fn scores_without_a_product_are_not_attention() {
    let start =
        "(gemm (masked_softmax (tanh (input 0 [2,5,6])) none 1.0 0.0) (input 2 [2,6,3]) none 0 0 1.0)";
    let expr = start.parse().unwrap();
    let runner = Runner::<Tensor, Ctx>::default()
        .with_expr(&expr)
        .run(&only(&["fuse-scored-attention"]));
    let root = &runner.egraph[runner.roots[0]];
    assert!(root
        .nodes
        .iter()
        .all(|n| !matches!(n, Tensor::ScoredAttention(_))));
}

// Heads: loop bodies lift to batched ops; a concat or stack over all heads is a view.
test_fn! { a_projection_by_rows_of_head_h_is_head_h_of_the_projection, only(&["lift-linear"]),
runner = heads(),
"(linear (input 0 [2,5,4]) (slice (param 0 [6,4]) 0 #2*s0 #2*s0+2) (slice (param 1 [6]) 0 #2*s0 #2*s0+2))"
=> "(select (reshape (linear (input 0 [2,5,4]) (param 0 [6,4]) (param 1 [6])) [2,5,3,2]) 2 #s0)" }
test_fn! { a_slice_by_head_is_a_head_of_a_split_axis, only(&["lift-slice"]),
runner = heads(),
"(slice (input 0 [2,5,6]) 2 #2*s0 #2*s0+2)" => "(select (reshape (input 0 [2,5,6]) [2,5,3,2]) 2 #s0)" }
test_fn! { a_per_head_gemm_is_a_head_of_a_batched_gemm, only(&["lift-gemm"]),
runner = heads(),
"(gemm (select (input 0 [2,5,3,4]) 2 #s0) (select (input 1 [2,6,3,4]) 2 #s0) none 0 1 1.0)"
=> "(select (gemm (transpose (input 0 [2,5,3,4]) 1 2) (transpose (input 1 [2,6,3,4]) 1 2) none 0 1 1.0) 1 #s0)" }
test_fn! { a_per_head_mask_gets_a_head_axis, only(&["lift-masked-fill"]),
runner = heads(),
"(masked_fill (select (input 0 [2,3,5,6]) 1 #s0) (eq (input 1 [2,1,6]) (lit 0.0)) (lit -1e9))"
=> "(select (masked_fill (input 0 [2,3,5,6]) (unsqueeze (eq (input 1 [2,1,6]) (lit 0.0)) 1) (lit -1e9)) 1 #s0)" }
test_fn! { per_head_elementwise_ops_are_heads_of_batched_ones,
only(&["lift-exp", "lift-add-left", "lift-mul-right", "lift-sub-both"]),
runner = heads(),
"(outputs (exp (select (input 0 [2,3,5]) 1 #s0)) (add (select (input 0 [2,3,5]) 1 #s0) (input 1 [5]))
              (mul (input 2 [2,1]) (select (input 0 [2,3,5]) 1 #s0))
              (sub (select (input 0 [2,3,5]) 1 #s0) (select (input 3 [2,3,5]) 1 #s0)))"
=> "(outputs (select (exp (input 0 [2,3,5])) 1 #s0) (select (add (input 0 [2,3,5]) (input 1 [5])) 1 #s0)
                 (select (mul (unsqueeze (input 2 [2,1]) 1) (input 0 [2,3,5])) 1 #s0)
                 (select (sub (input 0 [2,3,5]) (input 3 [2,3,5])) 1 #s0))" }
test_fn! { a_per_head_softmax_is_a_head_of_a_softmax, only(&["lift-softmax"]),
runner = heads(),
"(softmax (select (input 0 [2,3,5,6]) 1 #s0) 2)" => "(select (softmax (input 0 [2,3,5,6]) 3) 1 #s0)" }
test_fn! { a_per_head_transpose_is_a_head_of_a_transpose, only(&["lift-transpose"]),
runner = heads(),
"(transpose (select (input 0 [2,3,5,6]) 1 #s0) 1 2)" => "(select (transpose (input 0 [2,3,5,6]) 2 3) 1 #s0)" }
test_fn! { concat_over_all_heads_is_a_transpose_and_a_view, only(&["lift-cat-loop"]),
runner = heads(),
"(cat_loop (for 0 #0 #3 (select (input 0 [2,3,5,4]) 1 #s0)) 2)"
=> "(reshape (transpose (input 0 [2,3,5,4]) 1 2) [2,5,12])" }
test_fn! { stack_over_all_heads_is_a_transpose, only(&["lift-stack"]),
runner = heads(),
"(stack (for 0 #0 #3 (select (input 0 [2,3,5,4]) 1 #s0)) 0)" => "(transpose (input 0 [2,3,5,4]) 0 1)" }

// Slices of rows: an rms_norm and the product after it, asked for the last of 7 rows,
// compute that row only (the norm's weight and the epsilon reach no row axis; the sum
// keeps its axis).
test_fn! { the_last_row_of_a_normed_product_is_the_product_of_the_last_row,
only(&["slice-linear", "slice-mul", "slice-rsqrt", "slice-add", "slice-scale", "slice-sum"]),
"(slice (linear (mul (mul (input 0 [2,7,4])
                          (rsqrt (add (scale (sum (mul (input 0 [2,7,4]) (input 0 [2,7,4])) [2] 1) 0.25) (lit 1e-5))))
                     (param 0 [4]))
                (param 1 [9,4]) none) 1 #6 #7)"
=> "(linear (mul (mul (slice (input 0 [2,7,4]) 1 #6 #7)
                      (rsqrt (add (scale (sum (mul (slice (input 0 [2,7,4]) 1 #6 #7) (slice (input 0 [2,7,4]) 1 #6 #7))
                                               [2] 1) 0.25) (lit 1e-5))))
                 (param 0 [4]))
            (param 1 [9,4]) none)" }
test_fn! { an_operand_broadcast_along_the_rows_is_kept_whole, only(&["slice-add"]),
"(outputs (slice (add (input 0 [2,7,4]) (input 1 [7,1])) 1 #2 #5) (slice (add (input 0 [2,7,4]) (input 2 [1,4])) 1 #2 #5))"
=> "(outputs (add (slice (input 0 [2,7,4]) 1 #2 #5) (slice (input 1 [7,1]) 0 #2 #5))
                 (add (slice (input 0 [2,7,4]) 1 #2 #5) (input 2 [1,4])))" }
test_fn! { a_slice_of_a_reduction_slices_the_axis_it_comes_from, only(&["slice-sum"]),
"(slice (sum (input 0 [2,7,4]) [1] 0) 1 #1 #3)" => "(sum (slice (input 0 [2,7,4]) 2 #1 #3) [1] 0)" }
test_fn! { a_slice_of_a_matmuls_rows_or_batch_slices_its_operands, only(&["slice-matmul"]),
"(outputs (slice (matmul (input 0 [3,5,4]) (input 1 [4,6])) 1 #1 #2) (slice (matmul (input 0 [3,5,4]) (input 2 [3,4,6])) 0 #0 #1))"
=> "(outputs (matmul (slice (input 0 [3,5,4]) 1 #1 #2) (input 1 [4,6]))
                 (matmul (slice (input 0 [3,5,4]) 0 #0 #1) (slice (input 2 [3,4,6]) 0 #0 #1)))" }

/// A slice stays where moving it would not compute a slice of each operand: the columns of
/// a product, a reduced axis, a whole axis, and a head's columns (the lifts' case).
#[test]
fn a_slice_that_is_no_slice_of_rows_stays() {
    let sinks: Vec<_> = rules()
        .into_iter()
        .filter(|r| {
            r.name.as_str().starts_with("slice-") && !["slice-slice", "slice-noop"].contains(&r.name.as_str())
        })
        .collect();
    let applied = |term: &str| -> usize {
        let runner = heads().with_expr(&term.parse().unwrap()).run(&sinks);
        runner
            .iterations
            .iter()
            .map(|i| i.applied.values().sum::<usize>())
            .sum()
    };
    for term in [
        "(slice (linear (input 0 [2,7,4]) (param 0 [9,4]) none) 2 #0 #3)",
        "(slice (matmul (input 0 [5,4]) (input 1 [4,6])) 1 #0 #3)",
        "(slice (sum (input 0 [2,7,4]) [1] 1) 1 #0 #1)",
        "(slice (exp (input 0 [2,7,4])) 1 #0 #7)",
        "(slice (exp (input 0 [2,6,4])) 1 #2*s0 #2*s0+2)",
    ] {
        assert_eq!(applied(term), 0, "{term}");
    }
    // The same slice of rows of the same op does move.
    assert_eq!(applied("(slice (exp (input 0 [2,7,4])) 1 #0 #3)"), 1);
}

// Merged projections and the weights' concatenation.
test_fn! { two_projections_of_one_input_are_one_gemm, only(&["merge-linear"]),
"(outputs (linear (input 0 [2,4]) (param 0 [3,4]) (param 1 [3])) (linear (input 0 [2,4]) (param 2 [5,4]) (param 3 [5])))"
=> "(outputs (slice (linear (input 0 [2,4]) (cat 0 (param 0 [3,4]) (param 2 [5,4])) (cat 0 (param 1 [3]) (param 3 [5]))) 1 #0 #3)
             (slice (linear (input 0 [2,4]) (cat 0 (param 0 [3,4]) (param 2 [5,4])) (cat 0 (param 1 [3]) (param 3 [5]))) 1 #3 #8))" }
test_fn! { three_projections_are_one_gemm_over_weights_in_param_order,
only(&["merge-linear", "cat-flatten-left", "cat-flatten-right", "slice-slice"]),
"(outputs (linear (input 0 [2,4]) (param 0 [4,4]) none) (linear (input 0 [2,4]) (param 1 [4,4]) none)
          (linear (input 0 [2,4]) (param 2 [4,4]) none))"
=> "(outputs (slice (linear (input 0 [2,4]) (cat 0 (param 0 [4,4]) (param 1 [4,4]) (param 2 [4,4])) none) 1 #0 #4)
                 (slice (linear (input 0 [2,4]) (cat 0 (param 0 [4,4]) (param 1 [4,4]) (param 2 [4,4])) none) 1 #4 #8)
                 (slice (linear (input 0 [2,4]) (cat 0 (param 0 [4,4]) (param 1 [4,4]) (param 2 [4,4])) none) 1 #8 #12))" }

/// `merge-linear` matches only pairs of projections that may merge: of one run-time input,
/// load-time weights in param order, biases both given or both absent. A pair in the wrong
/// order, a projection paired with itself, a projection of a load-time value or with a
/// run-time weight, and a pair of which one has a bias are no match.
#[test]
fn merge_linear_matches_only_projections_that_may_merge() {
    let matches = |term: &str| -> Vec<(Option<i64>, Option<i64>)> {
        let runner = heads().with_expr(&term.parse().unwrap());
        let rule = &only(&["merge-linear"])[0];
        let eg = &runner.egraph;
        let int = |id: egg::Id| {
            eg[id].nodes.iter().find_map(|n| match n {
                Tensor::Int(i) => Some(*i),
                _ => None,
            })
        };
        let weight = |id: egg::Id| {
            eg[id].nodes.iter().find_map(|n| match n {
                Tensor::Param([i, _]) => int(*i),
                _ => None,
            })
        };
        let mut pairs: Vec<(Option<i64>, Option<i64>)> = rule
            .search(eg)
            .iter()
            .flat_map(|m| &m.substs)
            .map(|s| {
                (
                    weight(s["?w1".parse().unwrap()]),
                    weight(s["?w2".parse().unwrap()]),
                )
            })
            .collect();
        pairs.sort();
        pairs
    };
    let x = "(input 0 [2,4])";
    assert_eq!(
        matches(&format!(
            "(outputs (linear {x} (param 2 [5,4]) none) (linear {x} (param 0 [3,4]) none)
                      (linear {x} (param 1 [6,4]) none))"
        )),
        [(Some(0), Some(1)), (Some(0), Some(2)), (Some(1), Some(2))]
    );
    assert_eq!(
        matches(&format!(
            "(outputs (linear {x} (param 0 [3,4]) (param 1 [3])) (linear {x} (param 2 [5,4]) none)
                      (linear (param 3 [2,4]) (param 4 [5,4]) none) (linear (param 3 [2,4]) (param 5 [5,4]) none)
                      (linear {x} (input 1 [5,4]) none))"
        )),
        []
    );
}

test_fn! { a_unit_axis_commutes_with_a_comparison, only(&["eq-unsqueeze", "unsqueeze-eq"]),
"(eq (unsqueeze (input 0 [2,3]) 1) (lit 0.0))" => "(unsqueeze (eq (input 0 [2,3]) (lit 0.0)) 1)" }

/// The runner stops on its own on every example, well inside its bounds.
#[test]
fn every_example_saturates_in_a_small_egraph() {
    for name in ["causal", "mha", "mha_heads", "self_attention"] {
        let path = format!("{}/examples/{name}.attn", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(path).unwrap();
        let checked = attnc::driver::check_source(&src, &[]).unwrap();
        let stats = attnc::opt::optimize_and_compare(&checked.program).stats;
        assert_eq!(stats.stop_reason, "saturated", "{name}");
        assert!(stats.nodes < 1_000, "{name}: {} nodes", stats.nodes);
        assert_eq!(stats.refused, 0, "{name}: a rule was refused");
        let before = stats.before.expect("asked for").score();
        assert!(stats.after.score() < before, "{name}: no cheaper");
    }
}

/// No rule merges values of different shapes: a right side of another shape is refused.
#[test]
fn a_right_side_of_another_shape_is_refused() {
    // `reshape-noop` would merge `[6]` with its `[2, 3]` operand if it did not check.
    let expr = "(reshape (input 0 [2,3]) [6])".parse().unwrap();
    let runner = Runner::<Tensor, Ctx>::default().with_expr(&expr).run(&rules());
    let eg = &runner.egraph;
    let root = eg.find(runner.roots[0]);
    let input = eg.lookup_expr(&"(input 0 [2,3])".parse().unwrap()).unwrap();
    assert_ne!(root, eg.find(input));
    assert_eq!(eg.analysis.conflicts, 0);
}

/// The optimizer's time and e-graph size per example, for BENCHMARKS.md:
/// `cargo test --release --test rules -- --ignored --nocapture optimizer_time`.
#[test]
#[ignore = "a measurement, run by hand in release"]
fn optimizer_time() {
    println!("| example | median ms | min ms | iterations | e-nodes | e-classes | stop |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for name in ["causal", "mha", "mha_heads", "self_attention"] {
        let path = format!("{}/examples/{name}.attn", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(path).unwrap();
        let program = attnc::driver::check_source(&src, &[]).unwrap().program;
        let mut times: Vec<f64> = Vec::new();
        let mut last = None;
        for _ in 0..51 {
            let start = std::time::Instant::now();
            let o = attnc::opt::optimize(&program);
            times.push(start.elapsed().as_secs_f64() * 1e3);
            last = Some(o.stats);
        }
        times.sort_by(f64::total_cmp);
        let s = last.unwrap();
        println!(
            "| {name} | {:.2} | {:.2} | {} | {} | {} | {} |",
            times[25], times[0], s.iterations, s.nodes, s.classes, s.stop_reason
        );
    }
}

// Masks written with `where`.
test_fn! { where_with_a_scalar_is_a_masked_fill, only(&["where-eq-masked-fill"]),
"(where (eq (input 0 [3,3]) (lit 1.0)) (input 1 [2,3,3]) (lit -1e9))"
=> "(masked_fill (input 1 [2,3,3]) (ne (input 0 [3,3]) (lit 1.0)) (lit -1e9))" }
