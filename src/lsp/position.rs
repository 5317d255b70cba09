//! Byte offsets to LSP positions and back. LSP counts columns in UTF-16 code units, the
//! compiler in bytes.

use crate::source::Span;
use lsp_types::{Position, Range};

/// The start offset of every line of a text.
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> LineIndex<'a> {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { text, starts }
    }

    pub fn position(&self, offset: usize) -> Position {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let column: usize = self.text[start..]
            .char_indices()
            .take_while(|(i, _)| start + i < offset)
            .map(|(_, c)| c.len_utf16())
            .sum();
        Position::new(line as u32, column as u32)
    }

    pub fn range(&self, span: Span) -> Range {
        Range::new(self.position(span.start), self.position(span.end))
    }

    /// The byte offset of `p`, clamped to its line (and to the text).
    pub fn offset(&self, p: Position) -> usize {
        let Some(&start) = self.starts.get(p.line as usize) else {
            return self.text.len();
        };
        let mut units = 0;
        for (i, c) in self.text[start..].char_indices() {
            if units >= p.character as usize || c == '\n' {
                return start + i;
            }
            units += c.len_utf16();
        }
        self.text.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_utf16_units() {
        let text = "ab\n\u{e9}\u{1F600}x\n";
        let index = LineIndex::new(text);
        assert_eq!(index.position(0), Position::new(0, 0));
        assert_eq!(index.position(3), Position::new(1, 0));
        // é is one unit, the emoji two.
        assert_eq!(index.position(9), Position::new(1, 3));
        assert_eq!(index.offset(Position::new(1, 3)), 9);
        assert_eq!(index.offset(Position::new(1, 99)), 10);
        assert_eq!(index.offset(Position::new(9, 0)), text.len());
    }
}
