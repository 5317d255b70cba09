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

/// Edit distance over characters, counting a swap of neighbours as one edit (optimal
/// string alignment), since `qurey` for `query` is the commonest typo.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_typo_but_not_a_stranger() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("qurey", ["query", "key", "value"]), Some("query"));
        assert_eq!(closest("zzz", ["query", "key"]), None);
        assert_eq!(
            nearest(
                "linears.0.weigth",
                ["linears.0.weight", "linears.1.weight", "x"],
                2
            ),
            vec!["linears.0.weight", "linears.1.weight"]
        );
    }
}
