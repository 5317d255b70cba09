//! Parser tests: one-line assertions through the helpers below. Expressions are compared
//! as S-expressions: `(+ a (* b c))`, `(.f x a)` for a method, `([] x i)` for indexing,
//! `(: a _)` for a range with its end left out, `?` for [`ExprKind::Error`].

use super::{parse, parse_at};
use crate::ast::{Block, Expr, ExprKind, Item, Pattern, Program, Stmt, TypeAnn};
use crate::diagnostic::{Code, Diagnostic};

/// The first program of the specification, section 1.
const MHA: &str = r#"
# mha.attn: multi-head attention as in "The Annotated Transformer"
dim B, N, M                   # free dims: any size, bound at run time from the inputs
dim D = 512, H = 8            # constant dims: compile-time values (--dim D=768 overrides)
dim Dk = D / H                # derived dim: the checker must prove D % H == 0

param Wq: [D, D] = "linears.0.weight"     # weights, PyTorch layout [out, in]
param bq: [D]    = "linears.0.bias"       # "= key" names the tensor in the weights file
param Wk: [D, D] = "linears.1.weight"
param bk: [D]    = "linears.1.bias"
param Wv: [D, D] = "linears.2.weight"
param bv: [D]    = "linears.2.bias"
param Wo: [D, D] = "linears.3.weight"
param bo: [D]    = "linears.3.bias"

input query: [B, N, D]
input key:   [B, M, D]        # M: key length; equal to N in self-attention
input value: [B, M, D]
input mask:  [B, 1, M]        # 1 keeps a position, 0 masks it

fn attention(q: [B, H, N, Dk], k: [B, H, M, Dk], v: [B, H, M, Dk], mask: [B, 1, Q, M])
        -> ([B, H, N, Dk], [B, H, N, M]) {
    let scores = q @ k.transpose(-2, -1) / sqrt(Dk)
    let p = scores.masked_fill(mask == 0, -1e9).softmax(-1)
    (p @ v, p)
}

let q = linear(query, Wq, bq).view(B, -1, H, Dk).transpose(1, 2)
let k = linear(key,   Wk, bk).view(B, -1, H, Dk).transpose(1, 2)
let v = linear(value, Wv, bv).view(B, -1, H, Dk).transpose(1, 2)
let (x, attn) = attention(q, k, v, mask.unsqueeze(1))
output out  = linear(x.transpose(1, 2).contiguous().view(B, -1, H * Dk), Wo, bo)
output attn = attn
"#;

/// The second program of the specification, section 1: the same module head by head.
const MHA_HEADS: &str = r#"
let heads = for h in 0..H {
    let rows = h * Dk : (h + 1) * Dk
    let q = linear(query, Wq[rows], bq[rows])          # [B, N, Dk]
    let k = linear(key,   Wk[rows], bk[rows])
    let v = linear(value, Wv[rows], bv[rows])
    let p = (q @ k.transpose(-2, -1) / sqrt(Dk)).masked_fill(mask == 0, -1e9).softmax(-1)
    p @ v                                               # [B, N, Dk]
}
output out = linear(concat(heads, -1), Wo, bo)
"#;

// ---- helpers ----

/// `$value` as the given variant, or a panic saying what it is instead.
macro_rules! variant {
    ($value:expr, $variant:path) => {
        variant!($value, $variant(inner) => inner)
    };
    ($value:expr, $pattern:pat => $inner:expr) => {
        match $value {
            $pattern => $inner,
            other => panic!("not {}: {other:?}", stringify!($pattern)),
        }
    };
}

/// Parses `src`, asserting that it has no diagnostics.
fn parse_ok(src: &str) -> Program {
    let (program, diagnostics) = parse(src);
    assert!(diagnostics.is_empty(), "{src:?}: {diagnostics:#?}");
    program
}

/// Item `n` of `src`, which must parse cleanly.
fn item(src: &str, n: usize) -> Item {
    parse_ok(src).items.swap_remove(n)
}

/// The one item of `src`, a bare expression, as an S-expression.
fn expr(src: &str) -> String {
    match &parse_ok(src).items[..] {
        [Item::Expr(e)] => show(e),
        items => panic!("not one expression: {items:?}"),
    }
}

/// The value of `let x = <src>` as an S-expression, for ranges and slices.
fn value(src: &str) -> String {
    let program = parse_ok(&format!("let x = {src}"));
    match &program.items[..] {
        [Item::Let(l)] => show(&l.value),
        items => panic!("not one let: {items:?}"),
    }
}

fn diagnostics(src: &str) -> Vec<Diagnostic> {
    parse(src).1
}

fn codes(src: &str) -> Vec<Code> {
    diagnostics(src).into_iter().map(|d| d.code).collect()
}

fn messages(src: &str) -> Vec<String> {
    diagnostics(src).into_iter().map(|d| d.message).collect()
}

/// What kind each item of `src` is: `["dim", "let", ..]`.
fn item_kinds(src: &str) -> Vec<&'static str> {
    parse(src).0.items.iter().map(item_kind).collect()
}

fn item_kind(item: &Item) -> &'static str {
    match item {
        Item::Dim(_) => "dim",
        Item::Assert(_) => "assert",
        Item::Param(_) => "param",
        Item::Input(_) => "input",
        Item::State(_) => "state",
        Item::Fn(_) => "fn",
        Item::Let(_) => "let",
        Item::Output(_) => "output",
        Item::Expr(_) => "expr",
    }
}

/// Positional arguments, then each keyword argument as a `(= name value)` pseudo-call.
fn with_kwargs(args: &[Expr], kwargs: &[crate::ast::Kwarg]) -> Vec<Expr> {
    let named = kwargs.iter().map(|k| Expr {
        kind: ExprKind::Call {
            func: crate::ast::Ident {
                name: format!("= {}", k.name.name),
                span: k.name.span,
            },
            args: vec![k.value.clone()],
            kwargs: vec![],
        },
        span: k.name.span,
    });
    args.iter().cloned().chain(named).collect()
}

fn show(e: &Expr) -> String {
    let list = |head: String, args: &[Expr]| {
        let args: Vec<String> = args.iter().map(show).collect();
        format!("({head} {})", args.join(" ")).replace(" )", ")")
    };
    let opt = |e: &Option<Box<Expr>>| e.as_deref().map_or("_".to_string(), show);
    match &e.kind {
        ExprKind::Int(n) => n.to_string(),
        ExprKind::Float(x) => format!("{x:?}"),
        ExprKind::Name(name) => name.clone(),
        ExprKind::Neg(x) => format!("(- {})", show(x)),
        ExprKind::Binary(op, a, b) => format!("({} {} {})", op.symbol(), show(a), show(b)),
        ExprKind::Range(a, b, None) => format!("(: {} {})", opt(a), opt(b)),
        ExprKind::Range(a, b, Some(c)) => format!("(: {} {} {})", opt(a), opt(b), show(c)),
        ExprKind::Call { func, args, kwargs } => list(func.name.clone(), &with_kwargs(args, kwargs)),
        ExprKind::Method {
            receiver,
            method,
            args,
            kwargs,
        } => list(
            format!(".{} {}", method.name, show(receiver)),
            &with_kwargs(args, kwargs),
        ),
        ExprKind::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        ExprKind::NoneLit => "None".to_string(),
        ExprKind::Inf => "inf".to_string(),
        ExprKind::Ellipsis => "...".to_string(),
        ExprKind::Str(s) => format!("{s:?}"),
        ExprKind::Not(x) => format!("(~ {})", show(x)),
        ExprKind::List(items) => list("list".to_string(), items),
        ExprKind::Index { base, indices } => list(format!("[] {}", show(base)), indices),
        ExprKind::Attribute { receiver, name } => format!("(.{} {})", name.name, show(receiver)),
        ExprKind::Tuple(items) => list("tuple".to_string(), items),
        ExprKind::For {
            var,
            start,
            end,
            body,
        } => format!(
            "(for {} {} {} {})",
            var.name,
            show(start),
            show(end),
            show_block(body)
        ),
        ExprKind::Error => "?".to_string(),
    }
}

fn show_type(ty: &TypeAnn) -> String {
    match ty {
        TypeAnn::Shape(shape) => {
            let dims: Vec<String> = shape.dims.iter().map(show).collect();
            format!("[{}]", dims.join(" "))
        }
        TypeAnn::Tuple(types, _) if types.len() == 1 => format!("({},)", show_type(&types[0])),
        TypeAnn::Tuple(types, _) => {
            let types: Vec<String> = types.iter().map(show_type).collect();
            format!("({})", types.join(" "))
        }
    }
}

fn show_block(block: &Block) -> String {
    let mut parts: Vec<String> = block.stmts.iter().map(show_stmt).collect();
    parts.extend(block.value.as_deref().map(|v| format!("=> {}", show(v))));
    format!("{{{}}}", parts.join("; "))
}

fn show_stmt(stmt: &Stmt) -> String {
    match stmt {
        Stmt::Let(l) => format!("(let {})", show(&l.value)),
        Stmt::Assert(a) => format!("(assert {})", show(&a.cond)),
        Stmt::Param(p) => format!("(param {} {:?})", p.name.name, p.key.as_ref().map(|k| &k.value)),
        Stmt::Assign(a) => format!("(= {} {})", a.name.name, show(&a.value)),
        Stmt::Expr(e) => show(e),
    }
}

/// Every expression of a program, shown, so that a test can look for `?` in it.
fn show_program(program: &Program) -> String {
    let mut out = String::new();
    for item in &program.items {
        match item {
            Item::Dim(decls) => decls.iter().flat_map(|d| &d.value).for_each(|v| out += &show(v)),
            Item::Assert(a) => out += &show(&a.cond),
            Item::Param(p) => p.shape.dims.iter().for_each(|d| out += &show(d)),
            Item::Input(i) | Item::State(i) => i.shape.dims.iter().for_each(|d| out += &show(d)),
            Item::Fn(f) => out += &show_block(&f.body),
            Item::Let(l) => out += &show(&l.value),
            Item::Output(o) => out += &show(&o.value),
            Item::Expr(e) => out += &show(e),
        }
    }
    out
}

// ---- the specification's programs ----

#[test]
fn mha_parses() {
    assert_eq!(
        item_kinds(MHA),
        [
            "dim", "dim", "dim", "param", "param", "param", "param", "param", "param", "param", "param",
            "input", "input", "input", "input", "fn", "let", "let", "let", "let", "output", "output"
        ]
    );
    assert!(!show_program(&parse_ok(MHA)).contains('?'));
}

#[test]
fn mha_heads_parses() {
    assert_eq!(item_kinds(MHA_HEADS), ["let", "output"]);
    let heads = variant!(item(MHA_HEADS, 0), Item::Let).value;
    let body = variant!(heads.kind, ExprKind::For { body, .. } => body);
    assert_eq!(body.stmts.len(), 5);
    assert_eq!(show(&body.value.unwrap()), "(@ p v)");
}

#[test]
fn dims_declare_one_entry_per_name() {
    let src = "dim B, N, M\ndim D = 512, H = 8\ndim Dk = D / H";
    let free = variant!(item(src, 0), Item::Dim);
    let names: Vec<_> = free.iter().map(|d| d.name.name.as_str()).collect();
    assert_eq!(names, ["B", "N", "M"]);
    assert!(free.iter().all(|d| d.value.is_none()));
    let derived = variant!(item(src, 2), Item::Dim);
    assert_eq!(show(derived[0].value.as_ref().unwrap()), "(/ D H)");
}

#[test]
fn param_key_is_unescaped_and_optional() {
    let src = "param W: [D, D] = \"a\\\"b\\\\c\"\nparam b: [D]";
    assert_eq!(variant!(item(src, 0), Item::Param).key.unwrap().value, "a\"b\\c");
    assert_eq!(variant!(item(src, 1), Item::Param).key, None);
}

#[test]
fn wrapped_fn_signature() {
    let f = variant!(item(MHA, 15), Item::Fn);
    assert_eq!(f.params.len(), 4);
    assert_eq!(show_type(f.ret.as_ref().unwrap()), "([B H N Dk] [B H N M])");
    assert_eq!(show(&f.body.value.unwrap()), "(tuple (@ p v) p)");
}

#[test]
fn fn_params_may_go_unannotated() {
    let f = variant!(item("fn f(a, b: [N],) {\n a + b\n}", 0), Item::Fn);
    assert!(f.params[0].ty.is_none() && f.params[1].ty.is_some() && f.ret.is_none());
}

#[test]
fn let_forms() {
    let src = "let x: [B, N - 1] = y\nlet (a, b) = f(x)\nlet t: ([N], ([M],)) = g()";
    let annotated = variant!(item(src, 0), Item::Let);
    assert_eq!(show_type(&annotated.ty.unwrap()), "[B (- N 1)]");
    let tuple = variant!(item(src, 1), Item::Let).pattern;
    assert!(matches!(tuple, Pattern::Tuple(names, _) if names.len() == 2));
    let nested = variant!(item(src, 2), Item::Let);
    assert_eq!(show_type(&nested.ty.unwrap()), "([N] ([M],))");
}

#[test]
fn assert_and_output() {
    assert_eq!(
        item_kinds("assert D % H == 0\noutput attn = attn"),
        ["assert", "output"]
    );
}

// ---- expressions ----

#[test]
fn precedence() {
    assert_eq!(expr("a + b * c"), "(+ a (* b c))");
    assert_eq!(expr("q @ k / s"), "(/ (@ q k) s)");
    assert_eq!(expr("-x.f()"), "(- (.f x))");
    assert_eq!(expr("a - b - c"), "(- (- a b) c)");
    assert_eq!(expr("-a @ b"), "(@ (- a) b)");
    assert_eq!(expr("a + b == c % 2"), "(== (+ a b) (% c 2))");
    assert_eq!(expr("--1e-9"), "(- (- 1e-9))");
}

#[test]
fn range_is_loosest() {
    assert_eq!(value("h * Dk : (h + 1) * Dk"), "(: (* h Dk) (* (+ h 1) Dk))");
    assert_eq!(value("a == b : c"), "(: (== a b) c)");
}

#[test]
fn postfix_chains() {
    assert_eq!(expr("f(a)[0].g(1, 2)"), "(.g ([] (f a) 0) 1 2)");
    assert_eq!(expr("x.contiguous()"), "(.contiguous x)");
    assert_eq!(expr("f(a, b,)"), "(f a b)");
}

#[test]
fn method_chain_over_lines_inside_parens() {
    let src = "(linear(x, W)\n    .view(B, -1, H, Dk)\n\n    .transpose(1, 2))";
    assert_eq!(expr(src), "(.transpose (.view (linear x W) B (- 1) H Dk) 1 2)");
}

#[test]
fn tuples_and_parentheses() {
    assert_eq!(expr("(a)"), "a");
    assert_eq!(expr("(a, b)"), "(tuple a b)");
    assert_eq!(expr("(a,)"), "(tuple a)");
    assert_eq!(expr("((a + b))"), "(+ a b)");
}

#[test]
fn slices() {
    assert_eq!(value("x[rows]"), "([] x rows)");
    assert_eq!(value("x[:, a : b]"), "([] x (: _ _) (: a b))");
    assert_eq!(value("x[2:]"), "([] x (: 2 _))");
    assert_eq!(value("x[:n, 0]"), "([] x (: _ n) 0)");
}

#[test]
fn slices_with_a_step() {
    assert_eq!(value("x[..., 0::2]"), "([] x ... (: 0 _ 2))");
    assert_eq!(value("x[1:7:3]"), "([] x (: 1 7 3))");
    assert_eq!(value("x[::n]"), "([] x (: _ _ n))");
    assert_eq!(value("x[a:b:]"), "([] x (: a b))");
    assert_eq!(value("x[:5:2, 1]"), "([] x (: _ 5 2) 1)");
}

#[test]
fn for_expression() {
    assert_eq!(value("for h in 0..H {\n  h\n}"), "(for h 0 H {=> h})");
    assert_eq!(
        value("for h in 0..H - 1\n{\n let y = h\n assert h < H\n}"),
        "(for h 0 (- H 1) {(let h); (assert (< h H))})"
    );
    assert_eq!(
        value("concat(for i in 0..2 { i }, 0)"),
        "(concat (for i 0 2 {=> i}) 0)"
    );
}

#[test]
fn spans_cover_the_source() {
    let l = variant!(item("let x = a + b[1]", 0), Item::Let);
    assert_eq!((l.span.range(), l.value.span.range()), (0..16, 8..16));
}

// ---- errors ----

#[test]
fn unexpected_character_is_e0001_only() {
    assert_eq!(codes("let x = $"), [Code::E0001]);
    assert_eq!(codes("let y = a + $ * 2\noutput o = y"), [Code::E0001]);
}

#[test]
fn missing_expression() {
    assert_eq!(messages("let x = = 1"), ["expected expression, found `=`"]);
    assert_eq!(diagnostics("let x = = 1")[0].span.range(), 8..9);
    assert_eq!(messages("output o ="), ["expected expression, found end of file"]);
    // The binding survives with an error value, so its later uses raise nothing.
    assert_eq!(show_program(&parse("let x = )").0), "?");
}

#[test]
fn missing_closer() {
    assert_eq!(
        messages("let x = f(a\nlet y = 2"),
        ["expected `)`, found newline"]
    );
    assert_eq!(
        messages("let x = f(a b)"),
        ["expected `,` or `)`, found name `b`"]
    );
    let unclosed = diagnostics("fn f() {\n a");
    assert_eq!(unclosed[0].message, "expected `}`, found end of file");
    assert_eq!(unclosed[0].labels[0].message, "unclosed `{`");
}

#[test]
fn statements_need_newlines() {
    assert_eq!(
        messages("let x = a let y = b"),
        ["expected newline, found keyword `let`"]
    );
    assert_eq!(messages("let x = a\n+ b"), ["expected expression, found `+`"]);
}

#[test]
fn comparisons_do_not_chain() {
    assert_eq!(
        messages("a == b == c"),
        ["comparison operators cannot be chained"]
    );
    assert_eq!(messages("a < b < c < d").len(), 1);
    assert_eq!(expr("(a == b) == c"), "(== (== a b) c)");
}

#[test]
fn two_errors_are_both_reported() {
    let src = "dim D = 4\nlet x = (1 +\nlet y = x\noutput = y\noutput z = y";
    assert_eq!(codes(src), [Code::E0002, Code::E0002]);
    assert_eq!(item_kinds(src), ["dim", "let", "let", "output"]);
}

#[test]
fn errors_in_a_block_recover_inside_it() {
    let src = "fn f(a) {\n let b = ]\n let c = a a\n b\n}\noutput o = f(1)";
    assert_eq!(codes(src), [Code::E0002, Code::E0002]);
    assert_eq!(item_kinds(src), ["fn", "output"]);
}

#[test]
fn items_are_not_statements() {
    let d = &diagnostics("fn f() {\n dim A\n 1\n}")[0];
    assert_eq!(d.message, "expected statement, found keyword `dim`");
    assert_eq!(d.hints, ["move it to the top level"]);
}

#[test]
fn a_name_after_a_dot_without_a_call_is_an_attribute() {
    assert_eq!(expr("x.shape[-1]"), "([] (.shape x) (- 1))");
    assert_eq!(expr("x.view(B, -1).shape"), "(.shape (.view x B (- 1)))");
    assert_eq!(messages("x."), ["expected name, found end of file"]);
}

#[test]
fn unterminated_string_is_one_error() {
    let src = "param W: [D] = \"w\nparam b: [D]";
    assert_eq!(codes(src), [Code::E0001]);
    let w = variant!(parse(src).0.items.swap_remove(0), Item::Param);
    assert_eq!(w.key.unwrap().value, "w");
}

// ---- pathological input ----

/// `n` copies of `piece`, then `end`.
fn repeat(piece: &str, n: usize, end: &str) -> String {
    piece.repeat(n) + end
}

fn too_deep(src: &str) -> bool {
    messages(src).contains(&"expression nested too deeply".to_string())
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    assert!(too_deep(&repeat("(", 100_000, "")));
    assert!(too_deep(&repeat("x[", 100_000, "")));
    assert!(too_deep(&repeat("-", 100_000, "x")));
    assert!(too_deep(&format!("x{}", ".f()".repeat(100_000))));
    assert!(too_deep(&repeat("a + ", 100_000, "a")));
    assert!(too_deep(&format!("x{}", "[1]".repeat(100_000))));
    assert!(too_deep(&repeat("for h in 0..H {", 100_000, "")));
    assert!(too_deep(&repeat("let x: (", 1, &repeat("(", 100_000, ""))));
}

#[test]
fn nesting_below_the_limit_is_fine() {
    let src = repeat("(", 60, "x") + &")".repeat(60);
    assert_eq!(expr(&src), "x");
    assert!(diagnostics(&repeat("a + ", 200, "a")).is_empty());
    assert!(too_deep(&(repeat("(", 70, "x") + &")".repeat(70))));
}

/// A deterministic xorshift generator, so a failing case can be reproduced.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Parses `src` and checks what must hold for any input: no panic (by getting here),
/// spans inside the source on character boundaries, only syntax-level codes, and no
/// error node without a diagnostic.
fn check_any(src: &str) {
    let (program, diagnostics) = parse(src);
    for d in &diagnostics {
        assert!(src.get(d.span.range()).is_some(), "{src:?}: {d:?}");
        assert!(matches!(d.code, Code::E0001 | Code::E0002), "{src:?}: {d:?}");
    }
    if diagnostics.is_empty() {
        assert!(!show_program(&program).contains('?'), "{src:?}");
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let alphabet = "()[]{},:->.=!<>+-*/%@#\"\\ \n\tabxH019eE_$é;";
    let chars: Vec<char> = alphabet.chars().collect();
    for _ in 0..3000 {
        let len = rng.below(48);
        let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        check_any(&String::from_utf8_lossy(&bytes));
        let text: String = (0..len).map(|_| chars[rng.below(chars.len())]).collect();
        check_any(&text);
    }
}

#[test]
fn random_token_soups_never_panic() {
    let pieces = [
        "dim", "param", "input", "let", "fn", "output", "for", "in", "assert", "x", "H", "0", "1.5", ".5",
        "\"k\"", "(", ")", "[", "]", "{", "}", ",", ":", "->", ".", "..", "=", "==", "!=", "<", "<=", ">",
        ">=", "+", "-", "*", "/", "%", "@", "\n", "\n", "# c\n", "$",
    ];
    let mut rng = Rng(42);
    for _ in 0..4000 {
        let n = 1 + rng.below(40);
        let soup: Vec<&str> = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
        check_any(&soup.join(" "));
    }
}

// ---- parsing at an offset (REPL entries) ----

#[test]
fn parse_at_shifts_every_span_into_the_whole_text() {
    let earlier = "dim B\nlet x = 1\n";
    let entry = "let y = f(x, $)\nlet = 2";
    let whole = format!("{earlier}{entry}");
    let (alone, alone_diags) = parse(entry);
    let (at, at_diags) = parse_at(&whole, earlier.len());
    assert_eq!(show_program(&at), show_program(&alone));
    let shifted: Vec<(usize, usize)> = alone_diags
        .iter()
        .map(|d| (d.span.start + earlier.len(), d.span.end + earlier.len()))
        .collect();
    let found: Vec<(usize, usize)> = at_diags.iter().map(|d| (d.span.start, d.span.end)).collect();
    assert_eq!(found, shifted);
    assert_eq!(codes(entry), at_diags.iter().map(|d| d.code).collect::<Vec<_>>());
    let Item::Let(l) = &at.items[0] else {
        panic!("a let")
    };
    assert_eq!(&whole[l.span.range()], "let y = f(x, $)");
}

#[test]
fn parse_at_an_odd_offset_parses_nothing() {
    assert!(parse_at("let x = 1", 99).0.items.is_empty());
    assert!(parse_at("é", 1).0.items.is_empty());
    assert_eq!(parse_at("x", 0), parse("x"));
}

#[test]
fn a_loop_of_statements_declares_weights_and_assigns() {
    let src = "for l in 0..L {\n    param W: [D, D] = \"layer.{l}.w\"\n    x = x @ W\n}";
    let body = variant!(variant!(item(src, 0), Item::Expr).kind, ExprKind::For { body, .. } => body);
    assert!(body.value.is_none());
    let stmts: Vec<String> = body.stmts.iter().map(show_stmt).collect();
    assert_eq!(stmts, ["(param W Some(\"layer.{l}.w\"))", "(= x (@ x W))"]);
}

#[test]
fn an_input_declares_its_dtype_after_its_shape() {
    let input = variant!(item("input ids: [B, N] int64", 0), Item::Input);
    assert_eq!(input.dtype.unwrap().name, "int64");
    assert_eq!(variant!(item("input x: [B, N]", 0), Item::Input).dtype, None);
}

#[test]
fn state_declares_only_before_a_name_and_stays_a_name_elsewhere() {
    let state = variant!(item("state k_cache: [L, B, C, D]", 0), Item::State);
    assert_eq!(state.name.name, "k_cache");
    assert_eq!(state.shape.dims.len(), 4);
    assert_eq!(item_kind(&item("let state = x", 0)), "let");
    assert_eq!(item_kind(&item("state + 1", 0)), "expr");
    assert_eq!(item_kind(&item("state.index_copy_(0, i, s)", 0)), "expr");
}

#[test]
fn def_is_an_error_with_a_hint_towards_fn() {
    let (_, diagnostics) = parse("def f(x):\n    return x\n");
    assert_eq!(diagnostics[0].code, crate::diagnostic::Code::E0002);
    assert!(
        diagnostics[0].message.contains("`def` is Python's"),
        "{:?}",
        diagnostics[0]
    );
    assert!(
        diagnostics[0].hints[0].starts_with("write `fn"),
        "{:?}",
        diagnostics[0]
    );
}
