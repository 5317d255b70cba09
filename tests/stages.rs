//! Data-driven stage tests: one snapshot per example (binding table, typed and optimized IR) and per
//! `tests/ui` program (its rendered diagnostics and JSON).
//!
//! A ui file marks each line that must report an error with a trailing `#~ CODE` comment;
//! the test checks those codes at those lines before it snapshots anything, and every ui file
//! is named after the code it shows.

use attnc::driver::check_source;
use attnc::render;
use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("test input is readable")
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn examples_check_cleanly_and_print_their_shapes() {
    insta::glob!("../examples", "*.attn", |path| {
        let src = read(path);
        let checked = check_source(&src, &[]).expect("no overrides");
        let diags = render::diagnostics_text(&name(path), &src, &checked.diagnostics);
        assert!(!checked.has_errors(), "{} does not check:\n{diags}", name(path));
        let optimized = attnc::opt::optimize_and_compare(&checked.program);
        // The stats but their last line, the time.
        let stats = optimized.stats.to_string();
        let stats = stats.trim_end().rsplit_once('\n').map_or("", |(s, _)| s);
        let snapshot = format!(
            "==== CHECK ====\n{}\n==== TYPED IR ====\n{}\n==== OPTIMIZED IR ====\n{}\n==== STATS ====\n{stats}\n",
            render::bindings_text(&checked.program),
            checked.program.to_text(),
            optimized.program.to_text()
        );
        insta::with_settings!({ omit_expression => true }, {
            insta::assert_snapshot!("example", snapshot);
        });
    });
}

/// The `(line, code)` pairs a ui file marks with `#~ CODE`.
fn marked_errors(src: &str) -> Vec<(u64, String)> {
    src.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            l.split_once("#~ ")
                .map(|(_, code)| (i as u64 + 1, code.trim().to_string()))
        })
        .collect()
}

#[test]
fn ui_programs_report_their_codes_at_the_marked_lines() {
    insta::glob!("ui/*.attn", |path| {
        let src = read(path);
        let checked = check_source(&src, &[]).expect("no overrides");
        let json = render::check_json(&src, &checked.diagnostics, &checked.program);
        let found: Vec<(u64, String)> = json["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["line"].as_u64().unwrap(),
                    d["code"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let expected = marked_errors(&src);
        assert_eq!(found, expected, "{}", name(path));
        let stem = path.file_stem().unwrap().to_string_lossy();
        assert!(
            expected.iter().any(|(_, c)| *c == stem),
            "{} shows no {stem}",
            name(path)
        );
        let text = render::diagnostics_text(&name(path), &src, &checked.diagnostics);
        for (_, code) in &expected {
            assert!(
                text.contains(&format!("error[{code}]")),
                "text lacks {code}:\n{text}"
            );
        }
        insta::with_settings!({ omit_expression => true }, {
            insta::assert_snapshot!("ui", format!("{text}\n==== JSON ====\n{json:#}"));
        });
    });
}

/// The required result of the optimizer: the head-by-head program optimizes to exactly the
/// text of the batched one (`mha.attn` without its `attn` output), byte for byte.
#[test]
fn mha_heads_optimizes_to_the_text_of_mha() {
    let optimized = |src: &str| {
        let checked = check_source(src, &[]).expect("no overrides");
        assert!(!checked.has_errors());
        attnc::opt::optimize(&checked.program).program.to_text()
    };
    let mha = read(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mha.attn"
    )));
    let without_attn: String = mha
        .lines()
        .filter(|l| !l.starts_with("output attn"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(mha, without_attn, "mha.attn has an `attn` output");
    let heads = optimized(&read(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mha_heads.attn"
    ))));
    assert_eq!(heads, optimized(&without_attn));
    assert!(!heads.contains(" for "), "a loop is left:\n{heads}");
    assert_eq!(heads.matches("linear(").count(), 4, "{heads}");
    assert!(heads.contains("attention("), "{heads}");
}
