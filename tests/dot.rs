//! `attnc ir --format dot`: the program as a Graphviz graph.

use attnc::driver::check_source;
use attnc::ir::Program;
use std::io::Write;
use std::process::{Command, Stdio};

mod common;
use common::{attnc, example, stderr, stdout};

fn typed(name: &str) -> Program {
    let checked = check_source(&example(name), &[]).expect("no overrides");
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    checked.program
}

fn optimized(name: &str) -> Program {
    attnc::opt::optimize(&typed(name)).program
}

/// The node lines of a graph: `nK [label=..]`.
fn node_lines(dot: &str) -> Vec<&str> {
    dot.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('n') && l.contains("[label=") && !l.contains("->"))
        .collect()
}

#[test]
fn the_typed_graph_of_the_head_by_head_example() {
    insta::assert_snapshot!(typed("mha_heads.attn").to_dot());
}

#[test]
fn the_optimized_graph_marks_the_fused_attention() {
    insta::assert_snapshot!(optimized("mha.attn").to_dot());
}

#[test]
fn every_op_is_one_node_with_the_shape_the_text_form_gives_it() {
    for program in [typed("mha_heads.attn"), optimized("self_attention.attn")] {
        let text = program.to_text();
        let dot = program.to_dot();
        let values: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with('%')).collect();
        assert_eq!(node_lines(&dot).len(), values.len(), "{dot}");
        for line in values.iter().filter(|l| !l.contains("= for ")) {
            // `%17 = transpose(%16, 1, 2) : [B, H, N, Dk] strides [..]`
            let (value, ty) = line.trim().split_once(" : ").unwrap();
            let id = value.split_once(' ').unwrap().0;
            let node = node_lines(&dot)
                .into_iter()
                .find(|n| n.contains(&format!("\"{id} = ")))
                .unwrap_or_else(|| panic!("no node for {id} in\n{dot}"));
            assert!(node.contains(&format!("\\n{ty}")), "{node} lacks {ty}");
        }
    }
}

#[test]
fn fused_ops_and_only_they_are_marked() {
    let dot = optimized("self_attention.attn").to_dot();
    for node in node_lines(&dot) {
        let fused = ["= gemm", "= masked_softmax", "= attention"]
            .iter()
            .any(|op| node.contains(op));
        assert_eq!(node.contains("\\nfused"), fused, "{node}");
    }
    assert!(dot.contains("\\nfused"), "self_attention fuses something:\n{dot}");
}

#[test]
fn the_command_prints_the_graph_and_refuses_stages_without_one() {
    let o = attnc(&["ir", "examples/mha.attn", "--stage", "typed", "--format", "dot"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), typed("mha.attn").to_dot());
    let o = attnc(&["ir", "examples/mha.attn", "--stage", "kernels", "--format", "dot"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Graphviz accepts every graph, where it is installed.
#[test]
fn dot_renders_the_graphs() {
    if Command::new("dot").arg("-V").output().is_err() {
        eprintln!("skipped: Graphviz's `dot` is not installed");
        return;
    }
    for program in [typed("mha_heads.attn"), optimized("mha.attn")] {
        let mut child = Command::new("dot")
            .arg("-Tsvg")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dot starts");
        let graph = program.to_dot();
        child.stdin.take().unwrap().write_all(graph.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.is_empty(), "dot: {err}\n{graph}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
    }
}
