//! "Did you mean": the nearest of some names to a misspelt one.

/// The candidate nearest to `name` by edit distance, if it is near enough to be a typo
/// (at most a third of the name's length, and at least one edit).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    nearest(name, candidates, 1)
        .into_iter()
        .find(|c| edit_distance(name, c) <= limit && *c != name)
}

/// The `n` candidates nearest to `name`, nearest first (ties in the candidates' order).
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>, n: usize) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .collect();
    scored.sort_by_key(|(d, _)| *d);
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(n).map(|(_, c)| c).collect()
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_typo_but_not_a_stranger() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("qurey", ["query", "key", "value"]), Some("query"));
        assert_eq!(closest("zzz", ["query", "key"]), None);
        assert_eq!(nearest("linears.0.weigth", ["linears.0.weight", "linears.1.weight", "x"], 2),
            vec!["linears.0.weight", "linears.1.weight"]);
    }
}
