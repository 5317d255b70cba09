//! Masks that are functions of positions only (`j > i`, a sliding window `i - j >= W`).
//!
//! Such a mask is known for every size, so the attention kernel decides per tile (a block of
//! query rows against a block of keys) whether the mask keeps all of it, none of it, or part
//! of it: it skips the tiles it removes and tests no element of a tile it keeps whole. The
//! decision is interval arithmetic on affine expressions, whose extremes over a rectangle sit
//! at its corners.

use std::fmt;

/// `ci * i + cj * j + c >= 0`, with `i` the query row and `j` the key (both from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Affine {
    pub ci: i64,
    pub cj: i64,
    pub c: i64,
}

/// Where a position is kept: a formula over affine comparisons.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Keep {
    Atom(Affine),
    And(Box<Keep>, Box<Keep>),
    Or(Box<Keep>, Box<Keep>),
    Not(Box<Keep>),
}

/// A mask of positions: where `keep` does not hold, the score becomes `fill`.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexMask {
    pub keep: Keep,
    pub fill: f32,
}

/// Whether a formula holds on every position of a rectangle, or on none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truth {
    pub all: bool,
    pub none: bool,
}

/// What a mask does to one tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    Kept,
    Partial,
    Skipped,
}

/// How many tiles of an attention kernel are kept whole, tested element by element, and
/// skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileCounts {
    pub kept: usize,
    pub partial: usize,
    pub skipped: usize,
}

impl Affine {
    pub fn at(&self, i: i64, j: i64) -> i128 {
        self.ci as i128 * i as i128 + self.cj as i128 * j as i128 + self.c as i128
    }

    /// The least and greatest value over rows `i.0..=i.1` and keys `j.0..=j.1`: at the corner
    /// each coefficient's sign picks.
    pub fn bounds(&self, i: (i64, i64), j: (i64, i64)) -> (i128, i128) {
        let lo = self.at(
            if self.ci >= 0 { i.0 } else { i.1 },
            if self.cj >= 0 { j.0 } else { j.1 },
        );
        let hi = self.at(
            if self.ci >= 0 { i.1 } else { i.0 },
            if self.cj >= 0 { j.1 } else { j.0 },
        );
        (lo, hi)
    }
}

impl Keep {
    pub fn holds(&self, i: i64, j: i64) -> bool {
        match self {
            Keep::Atom(a) => a.at(i, j) >= 0,
            Keep::And(a, b) => a.holds(i, j) && b.holds(i, j),
            Keep::Or(a, b) => a.holds(i, j) || b.holds(i, j),
            Keep::Not(a) => !a.holds(i, j),
        }
    }

    /// Over rows `i.0..=i.1` and keys `j.0..=j.1`. Exact for one comparison; for a formula
    /// it may say "partly" where the truth is "all" or "none" (never the converse), which
    /// costs only an element test.
    pub fn truth(&self, i: (i64, i64), j: (i64, i64)) -> Truth {
        match self {
            Keep::Atom(a) => {
                let (lo, hi) = a.bounds(i, j);
                Truth {
                    all: lo >= 0,
                    none: hi < 0,
                }
            }
            Keep::And(a, b) => {
                let (a, b) = (a.truth(i, j), b.truth(i, j));
                Truth {
                    all: a.all && b.all,
                    none: a.none || b.none,
                }
            }
            Keep::Or(a, b) => {
                let (a, b) = (a.truth(i, j), b.truth(i, j));
                Truth {
                    all: a.all || b.all,
                    none: a.none && b.none,
                }
            }
            Keep::Not(a) => {
                let t = a.truth(i, j);
                Truth {
                    all: t.none,
                    none: t.all,
                }
            }
        }
    }

    /// The comparisons of the formula, each once per occurrence, in order.
    pub fn atoms(&self) -> Vec<Affine> {
        match self {
            Keep::Atom(a) => vec![*a],
            Keep::And(a, b) | Keep::Or(a, b) => [a.atoms(), b.atoms()].concat(),
            Keep::Not(a) => a.atoms(),
        }
    }
}

/// The rows `i0..i0 + len` of a block, as an inclusive range.
fn span(start: usize, block: usize, total: usize) -> (i64, i64) {
    let end = (start + block).min(total);
    (start as i64, end as i64 - 1)
}

impl IndexMask {
    /// What the mask does to the tile of rows `i0..` and keys `j0..` of an `n x m` score
    /// matrix in tiles of `block`.
    pub fn tile(&self, (i0, j0): (usize, usize), (n, m): (usize, usize), block: (usize, usize)) -> Tile {
        let t = self.keep.truth(span(i0, block.0, n), span(j0, block.1, m));
        match (t.all, t.none) {
            (true, _) => Tile::Kept,
            (_, true) => Tile::Skipped,
            _ => Tile::Partial,
        }
    }

    /// Every tile of an `n x m` score matrix, counted by kind.
    pub fn tiles(&self, (n, m): (usize, usize), block: (usize, usize)) -> TileCounts {
        self.tiles_of_keys(n, (0, m), block)
    }

    /// The tiles of `n` rows against keys `keys.0..keys.1`, in blocks from `keys.0`.
    pub fn tiles_of_keys(&self, n: usize, keys: (usize, usize), block: (usize, usize)) -> TileCounts {
        let mut counts = TileCounts::default();
        for i0 in (0..n).step_by(block.0.max(1)) {
            for j0 in (keys.0..keys.1).step_by(block.1.max(1)) {
                match self.tile((i0, j0), (n, keys.1), block) {
                    Tile::Kept => counts.kept += 1,
                    Tile::Partial => counts.partial += 1,
                    Tile::Skipped => counts.skipped += 1,
                }
            }
        }
        counts
    }

    /// Whether every one of the `n` rows keeps at least one of the `m` keys. Only then may
    /// removed tiles be skipped: a row with no key left is uniform under a finite fill
    /// (`-1e9`), which needs every key. Walks the keys of each row in blocks of `block`,
    /// testing elements only in blocks the row keeps in part.
    pub fn every_row_keeps(&self, n: usize, m: usize, block: usize) -> bool {
        let block = block.max(1);
        (0..n as i64).all(|i| {
            (0..m).step_by(block).any(|j0| {
                let j = span(j0, block, m);
                let t = self.keep.truth((i, i), j);
                t.all || (!t.none && (j.0..=j.1).any(|j| self.keep.holds(i, j)))
            })
        })
    }
}

impl fmt::Display for Affine {
    /// `i - j + 3 >= 0` style, terms with a zero coefficient left out.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut text = String::new();
        for (coef, name) in [(self.ci, "i"), (self.cj, "j")] {
            let sign = if coef < 0 { "-" } else { "+" };
            let mag = match coef.unsigned_abs() {
                0 => continue,
                1 => name.to_string(),
                k => format!("{k}*{name}"),
            };
            text = match (text.is_empty(), sign) {
                (true, "-") => format!("-{mag}"),
                (true, _) => mag,
                (false, s) => format!("{text} {s} {mag}"),
            };
        }
        match (text.is_empty(), self.c) {
            (true, c) => write!(f, "{c} >= 0"),
            (false, 0) => write!(f, "{text} >= 0"),
            (false, c) if c < 0 => write!(f, "{text} - {} >= 0", c.unsigned_abs()),
            (false, c) => write!(f, "{text} + {c} >= 0"),
        }
    }
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Keep::Atom(a) => write!(f, "({a})"),
            Keep::And(a, b) => write!(f, "({a} & {b})"),
            Keep::Or(a, b) => write!(f, "({a} | {b})"),
            Keep::Not(a) => write!(f, "~{a}"),
        }
    }
}

#[cfg(test)]
mod tests;
