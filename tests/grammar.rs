//! The editor grammar (`grammar/attn.tmLanguage.json`) highlights every op of the table:
//! each name and alias appears in both of its op lists, as a call and after a dot.

use std::path::Path;

#[test]
fn the_textmate_grammar_names_every_op_of_the_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("grammar/attn.tmLanguage.json");
    let text = std::fs::read_to_string(path).unwrap();
    let grammar: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut lists: Vec<Vec<String>> = Vec::new();
    collect_op_lists(&grammar, &mut lists);
    assert_eq!(lists.len(), 2, "the call and the method pattern");
    for op in attnc::ops::signatures() {
        for name in std::iter::once(op.name).chain(op.aliases.iter().copied()) {
            for list in &lists {
                assert!(
                    list.iter().any(|n| n == name),
                    "`{name}` is not highlighted as an op"
                );
            }
        }
    }
}

/// The alternatives of every `match` pattern that lists ops (the ones naming `linear`).
fn collect_op_lists(v: &serde_json::Value, out: &mut Vec<Vec<String>>) {
    match v {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::String(m)) = map.get("match") {
                if let Some(start) = m.find("(linear|") {
                    let rest = &m[start + 1..];
                    let end = rest.find(')').unwrap();
                    out.push(rest[..end].split('|').map(str::to_string).collect());
                }
            }
            map.values().for_each(|x| collect_op_lists(x, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|x| collect_op_lists(x, out)),
        _ => {}
    }
}
