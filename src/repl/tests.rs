//! Session tests without a terminal: one entry in, the reply's text out.

use super::{needs_more, Reply, Session};

/// Run entries in order; the reply to the last.
fn last(entries: &[&str]) -> Reply {
    let mut s = Session::new(&[]);
    let mut reply = Reply::default();
    for e in entries {
        reply = s.entry(e);
    }
    reply
}

const HEADER: &[&str] = &[
    "dim B, N",
    "dim D = 512, H = 8",
    "dim Dk = D / H",
    "input x: [B, N, D]",
];

fn after_header(entries: &[&str]) -> Reply {
    let all: Vec<&str> = HEADER.iter().chain(entries).copied().collect();
    last(&all)
}

#[test]
fn an_entry_goes_on_while_a_bracket_is_open_or_a_block_is_missing() {
    assert!(needs_more("let y = x.view(B,"));
    assert!(needs_more("fn f(a: [B]) -> [B] {"));
    assert!(needs_more("fn f(a: [B, N])"));
    assert!(needs_more("let hs = for h in 0..H"));
    assert!(!needs_more("fn f(a: [B, N])\n"), "an empty line ends it");
    assert!(!needs_more("fn f(a: [B]) -> [B] {\n  a\n}"));
    assert!(!needs_more("let y = x.view(B, -1)"));
    assert!(!needs_more("let s = \"(\" # ["));
    assert!(needs_more(":type x.view(B,"));
    assert!(!needs_more(":load (weird"));
    assert!(!needs_more(":dims"));
}

#[test]
fn an_expression_prints_its_shape_layout_and_sizes() {
    let r = after_header(&["x.view(B, -1, H, Dk).transpose(1, 2)"]);
    assert_eq!(
        r.out,
        "[B, H, N, Dk]  strides [N * D, Dk, D, 1]  non-contiguous\n"
    );
    assert_eq!(r.err, "");
    let r = after_header(&["x.view(B, -1, H, Dk).transpose(1, 2).contiguous()"]);
    assert_eq!(r.out, "[B, H, N, Dk]  contiguous\n");
    assert_eq!(
        last(&["dim D = 4", "param W: [D, 2 * D]", "W"]).out,
        "[D, 2 * D]  contiguous  = [4, 8]\n"
    );
    assert_eq!(last(&["sqrt(4)"]).out, "[]  scalar\n");
}

#[test]
fn dims_names_the_overrides_that_apply_to_no_dim() {
    let overrides: Vec<crate::check::DimOverride> = [("B", 2), ("Dk", 4), ("X", 3)]
        .into_iter()
        .map(|(name, value)| crate::check::DimOverride {
            name: name.to_string(),
            value,
        })
        .collect();
    let mut s = Session::new(&overrides);
    s.entry("dim B, D = 8, H = 2");
    s.entry("dim Dk = D / H");
    assert_eq!(
        s.entry(":dims").out,
        "dim B           # free, 2 from --dim\n\
         dim D = 8       # constant\n\
         dim H = 2       # constant\n\
         dim Dk = D / H  # derived, = 4\n\
         --dim Dk=4      # unused: a derived dim takes no value\n\
         --dim X=3       # unused: no dim has this name yet\n"
    );
}

#[test]
fn sizes_come_from_dim_overrides_too() {
    let overrides = [crate::check::DimOverride {
        name: "B".to_string(),
        value: 3,
    }];
    let mut s = Session::new(&overrides);
    s.entry("dim B");
    assert_eq!(
        s.entry("input x: [B, 2]").out,
        "x: [B, 2]  contiguous  = [3, 2]\n"
    );
}

#[test]
fn bindings_print_each_name() {
    let r = after_header(&["let (a, b) = (x, x.transpose(0, 1))"]);
    assert_eq!(
        r.out,
        "a: [B, N, D]  contiguous\nb: [N, B, D]  strides [D, N * D, 1]  non-contiguous\n"
    );
    let r = after_header(&["let t = (x, 0 : Dk)"]);
    assert_eq!(r.out, "t:\n  (0) [B, N, D]  contiguous\n  (1) range 0 : Dk\n");
    let r = after_header(&["output out = x"]);
    assert_eq!(r.out, "out: [B, N, D]  contiguous\n");
    let r = after_header(&["for h in 0..H { x[:, :, h * Dk : (h + 1) * Dk] }"]);
    assert_eq!(
        r.out,
        "seq[H] of [B, N, Dk]  strides [N * D, D, 1]  non-contiguous\n"
    );
}

#[test]
fn looking_leaves_nothing_behind() {
    let mut s = Session::new(&[]);
    for e in HEADER {
        s.entry(e);
    }
    s.entry(":type x.view(B, -1, H, Dk)");
    s.entry("x.transpose(0, 1)");
    s.entry(":ir for h in 0..H { x }");
    let ir = s.entry(":ir x").out;
    assert!(
        ir.ends_with("%0 = input(x) : [B, N, D]\noutput out = %0\n"),
        "{ir}"
    );
    assert!(!s.entry(":dims").out.contains(" h"));
}

#[test]
fn ir_keeps_only_what_out_needs() {
    let ir = after_header(&["let unused = x.transpose(0, 1)", ":ir x.view(B, -1, H, Dk)"]).out;
    assert!(!ir.contains("transpose"), "{ir}");
    assert!(ir.contains("output out = %1"), "{ir}");
    let ir = after_header(&[":ir (x, x.contiguous())"]).out;
    assert!(ir.contains("output out0 = %0\noutput out1 = %1"), "{ir}");
    let r = after_header(&[":ir 0 : Dk"]);
    assert_eq!(r.err, "`:ir` needs a tensor or a tuple of them, found a range\n");
}

#[test]
fn opt_prints_the_optimized_program_of_an_expression() {
    let r = after_header(&[":opt x.transpose(1, 2).transpose(1, 2).contiguous()"]);
    assert_eq!(r.err, "");
    assert!(
        r.out.contains("output out = %0"),
        "two transposes and a copy are nothing:\n{}",
        r.out
    );
    let r = after_header(&[":opt nope"]);
    assert!(
        r.err.contains("error[E0101]"),
        "errors in the expression come first: {}",
        r.err
    );
}

#[test]
fn an_error_renders_against_its_entry_and_the_session_goes_on() {
    let mut s = Session::new(&[]);
    for e in HEADER {
        s.entry(e);
    }
    let r = s.entry(":type x.view(B, -1, H * Dk).transpose(1, 2).view(B, -1)");
    assert!(r.err.contains("error[E0203]"), "{}", r.err);
    assert!(r.err.contains("<repl:5>:1:"), "{}", r.err);
    assert_eq!(r.out, "");
    let r = s.entry("let y = nope");
    assert!(r.err.contains("┌─ <repl:6>:1:9"), "{}", r.err);
    assert_eq!(s.entry("x").out, "[B, N, D]  contiguous\n");
}

#[test]
fn an_error_in_a_body_renders_where_the_function_was_entered() {
    let mut s = Session::new(&[]);
    for e in HEADER {
        s.entry(e);
    }
    // Fine for the stand-in argument; an error for the argument of the call.
    let f = s.entry("fn f(t: [P, S, T]) -> [P, S * T] {\n  t.view(P, S * T)\n}");
    assert_eq!(f.err, "");
    let r = s.entry("let y = f(x.transpose(1, 2))");
    assert!(r.err.contains("error[E0203]"), "{}", r.err);
    assert!(r.err.contains("┌─ <repl:5>:2:5"), "{}", r.err);
    assert!(r.err.contains("┌─ <repl:6>:1:9"), "{}", r.err);
    assert!(r.err.contains("in this call of `f`"), "{}", r.err);
}

#[test]
fn commands_may_be_shortened_and_unknown_ones_are_named() {
    assert!(last(&[":h"]).out.contains(":dims"));
    assert!(last(&[":q"]).quit);
    assert!(last(&[":quit"]).quit);
    assert_eq!(
        last(&[":dmis"]).err,
        "unknown command `:dmis`; did you mean `:dims`? (`:help` lists them)\n"
    );
    assert_eq!(last(&[":type"]).err, "usage: :type EXPR\n");
    assert_eq!(last(&[":dims now"]).err, "`:dims` takes no argument\n");
    assert_eq!(last(&[":type let y = 1"]).err, "`:type` takes one expression\n");
}

#[test]
fn reset_starts_over() {
    let r = last(&["dim B", ":reset", "dim B", ":dims"]);
    assert_eq!(r.out, "dim B  # free\n");
}

#[test]
fn load_reports_an_unreadable_file() {
    let r = last(&[":load no/such/file.attn"]);
    assert!(
        r.err.starts_with("error: cannot read `no/such/file.attn`"),
        "{}",
        r.err
    );
}

#[test]
fn completions_offer_names_ops_keywords_and_commands() {
    let mut s = Session::new(&[]);
    s.entry("dim Dk = 4");
    s.entry("fn f(a) { a }");
    let words = s.completions();
    for w in ["Dk", "f", "view", "contiguous", "let", ":type", ":load"] {
        assert!(words.iter().any(|x| x == w), "{w} missing from {words:?}");
    }
    assert_eq!(
        super::terminal::complete_word(&words, "con"),
        ["concat", "contiguous"]
    );
    assert_eq!(super::terminal::complete_word(&words, ":l"), [":load"]);
    assert!(super::terminal::complete_word(&words, "").is_empty());
}

#[test]
fn dims_lists_kinds_values_facts_and_asserts() {
    let text = last(&[
        "dim B, N",
        "dim D = 8, H = 2",
        "dim Dk = D / H",
        "assert N % 4 == 0",
        ":dims",
    ])
    .out;
    assert_eq!(
        text,
        "dim B              # free\n\
         dim N              # free\n\
         dim D = 8          # constant\n\
         dim H = 2          # constant\n\
         dim Dk = D / H     # derived, = 4\n\
         fact N % 4 == 0    # used by proofs\n\
         assert N % 4 == 0  # checked at run time\n"
    );
}

#[test]
fn a_statement_keyword_closes_the_brackets_left_open_above_it() {
    assert!(!needs_more("let y = f(x,\nlet z = 1"));
    assert!(
        needs_more("fn f(a) {\n  let t = g(a,\n  let u = 1"),
        "a `{{` stays open"
    );
    assert!(super::starts_entry("let y = f(x,", "let z = 1"));
    assert!(super::starts_entry("let y = f(x,", ":dims"));
    assert!(!super::starts_entry("let y = f(x,", "  y)"));
    assert!(!super::starts_entry("fn f(a) {", "  let t = a"));
    assert!(
        !super::starts_entry("let y = x[", ":, 0]"),
        "a slice is no command"
    );
}

#[test]
fn shape_and_size_answer_as_pytorch_does() {
    let entries = ["dim B, N", "dim D = 512", "input x: [B, N, D]"];
    let mut s = Session::new(&[crate::check::DimOverride {
        name: "N".to_string(),
        value: 7,
    }]);
    for e in entries {
        s.entry(e);
    }
    let r = s.entry("x.shape");
    assert_eq!(r.err, "");
    assert_eq!(r.out, "torch.Size([B, N, D])  = torch.Size([B, 7, 512])\n");
    assert_eq!(s.entry("x.size()").out, r.out);
    assert_eq!(s.entry("x.shape[1]").out, "N = 7\n");
    assert_eq!(s.entry("x.size(2)").out, "D = 512\n");
    assert_eq!(s.entry("x.size(-1)").out, "D = 512\n");
    assert!(s.entry("x.shape[0]").out.starts_with("B  (no value yet"));
    // A shape of a value no longer than the dims it has: none with a value.
    assert_eq!(
        s.entry("x.view(B, N * D).shape").out,
        "torch.Size([B, N * D])  = torch.Size([B, 3584])\n"
    );
    let r = s.entry("(x, x).shape");
    assert!(r.err.contains("only a tensor has a `.shape`"), "{r:?}");
}

#[test]
fn opt_shows_only_the_params_and_inputs_the_expression_uses() {
    let r = after_header(&["param W: [D, D]", "input y: [B, N, D]", ":opt x * 2.0"]);
    assert_eq!(r.err, "");
    assert!(r.out.contains("= input(x)"), "{}", r.out);
    assert!(!r.out.contains("param("), "an unused param:\n{}", r.out);
    assert!(!r.out.contains("input(y)"), "an unused input:\n{}", r.out);
}
