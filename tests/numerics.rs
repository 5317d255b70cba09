//! Differential numerics: for every example at several sizes (odd ones included), the
//! reference interpreter gives the same outputs for the optimized program as for the
//! source, within 1e-5 of the largest element.

use attnc::runtime::{bind, interpret, RunOptions};

mod common;
use common::{program, relative_error};

/// The sizes tried: every one a program declares is used (D and H replace constants).
const SIZES: &[&[(&str, i64)]] = &[
    &[("B", 2), ("N", 5), ("M", 6)],
    &[("B", 1), ("N", 7), ("M", 7), ("D", 12), ("H", 3)],
    &[("B", 3), ("N", 4), ("M", 9), ("D", 16), ("H", 4)],
    &[("B", 2), ("N", 1), ("M", 3), ("D", 6), ("H", 2)],
];

/// Sizes for examples whose dims need more than `SIZES` gives: the Llama layer's head
/// dim is halved by rotate_half, and its (and the decode step's) query heads are a
/// multiple of its key heads.
#[rustfmt::skip]
const GQA_SIZES: &[&[(&str, i64)]] = &[
    &[("B", 2), ("N", 5), ("M", 6), ("D", 32), ("H", 4), ("Hkv", 2), ("F", 48)],
    &[("B", 1), ("N", 1), ("M", 1), ("D", 12), ("H", 3), ("Hkv", 1), ("F", 8)],
    &[("B", 1), ("N", 7), ("M", 9), ("D", 16), ("H", 4), ("Hkv", 4), ("F", 20)],
];

/// Sizes for the step with a key/value cache: its capacity `C` too (the positions, all
/// ones by default, repeat, so the last of equal ones must win in both programs).
#[rustfmt::skip]
const CACHE_SIZES: &[&[(&str, i64)]] = &[
    &[("B", 1), ("N", 5), ("C", 8), ("D", 32), ("H", 4), ("Hkv", 2), ("I", 48), ("L", 2)],
    &[("B", 2), ("N", 1), ("C", 3), ("D", 12), ("H", 3), ("Hkv", 1), ("I", 8)],
];

fn examples() -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "attn"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn optimized_programs_compute_what_their_sources_compute() {
    for (name, src) in examples() {
        let sizes_of = match name.as_str() {
            "llama_layer.attn" | "gqa_decode.attn" => GQA_SIZES,
            "kv_cache_step.attn" => CACHE_SIZES,
            _ => SIZES,
        };
        for sizes in sizes_of {
            let source = program(&src, sizes);
            let optimized = attnc::opt::optimize(&source);
            assert!(
                optimized.stats.fallback.is_none(),
                "{name}: {:?}",
                optimized.stats.fallback
            );
            for seed in [0, 1] {
                let mut bound = bind(
                    &source,
                    &RunOptions {
                        seed,
                        ..RunOptions::default()
                    },
                )
                .unwrap();
                // Masks default to all ones; mask some positions so that filling matters.
                for (decl, t) in source.inputs.iter().zip(&mut bound.inputs) {
                    if decl.mask_only {
                        let n = t.data.len();
                        for (i, v) in t.data.iter_mut().enumerate() {
                            *v =
                                f32::from(u8::from(!(i * 7 + seed as usize).is_multiple_of(3) || i + 1 == n));
                        }
                    }
                }
                let want = interpret(&source, &bound).unwrap();
                let got = interpret(&optimized.program, &bound)
                    .unwrap_or_else(|e| panic!("{name} {sizes:?}: {e}\n{}", optimized.program.to_text()));
                for ((out, w), (_, g)) in want.iter().zip(&got) {
                    let err = relative_error(g, w);
                    assert!(err <= 1e-5, "{name} {sizes:?} seed {seed}: `{out}` off by {err}");
                }
            }
        }
    }
}

/// Programs beside the examples, for what they do not show: loops the rules cannot lift,
/// stacks, copies before views, permutes, projections without bias.
const PROGRAMS: &[&str] = &[
    // A loop over column slices (not rows of a weight) stays a loop; stack joins it.
    "dim B, N\ndim D = 8, H = 2\ndim Dk = D / H\ninput x: [B, N, D]\n\
     let ys = for h in 0..H { x[:, :, h * Dk : (h + 1) * Dk].softmax(-1) * 2 }\n\
     output y = stack(ys, 0)\noutput z = concat(ys, 1)",
    // Heads stacked instead of concatenated, projections without bias.
    "dim B, N\ndim D = 12, H = 3\ndim Dk = D / H\nparam W: [D, D]\ninput x: [B, N, D]\n\
     let heads = for h in 0..H {\n  let q = linear(x, W[h * Dk : (h + 1) * Dk])\n  (q @ q.transpose(-2, -1)).softmax(-1) @ q\n}\n\
     output s = stack(heads, 1)",
    // A transpose that must be copied before a view, and a permute.
    "dim B, N\ndim D = 6\nparam W: [D, D]\nparam b: [D]\ninput x: [B, N, D]\n\
     let y = linear(x, W, b).transpose(1, 2).reshape(B, D * N)\n\
     output y = y\noutput p = x.permute(2, 0, 1) / 4",
    // A loop that does not start at 0 cannot become a view of a batched value: it stays.
    "dim B\ndim D = 8, H = 4\ndim Dk = D / H\ninput x: [B, D]\n\
     let ys = for h in 1..H { x[:, h * Dk : (h + 1) * Dk].exp() }\noutput y = concat(ys, 1)",
    // Two projections of one input, one with a scale after it.
    "dim B, N\ndim D = 4\nparam W1: [D, D]\nparam b1: [D]\nparam W2: [D, D]\nparam b2: [D]\ninput x: [B, N, D]\n\
     output y = linear(x, W1, b1) * 3\noutput z = linear(x, W2, b2).softmax(-1)",
];

#[test]
fn other_programs_compute_the_same_optimized() {
    for (i, src) in PROGRAMS.iter().enumerate() {
        let source = program(src, &[("B", 2), ("N", 3)]);
        let optimized = attnc::opt::optimize(&source);
        if src.contains("1..H") {
            assert!(
                optimized.program.to_text().contains("for h in 1..H"),
                "program {i}: the loop is gone"
            );
        }
        assert!(
            optimized.stats.fallback.is_none(),
            "program {i}: {:?}",
            optimized.stats.fallback
        );
        let bound = bind(&source, &RunOptions::default()).unwrap();
        let want = interpret(&source, &bound).unwrap();
        let got = interpret(&optimized.program, &bound)
            .unwrap_or_else(|e| panic!("program {i}: {e}\n{}", optimized.program.to_text()));
        for ((out, w), (_, g)) in want.iter().zip(&got) {
            let err = relative_error(g, w);
            assert!(
                err <= 1e-5,
                "program {i}: `{out}` off by {err}\n{}",
                optimized.program.to_text()
            );
        }
    }
}
