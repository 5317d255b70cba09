//! Text as it is generated: each new token's text, held back while it ends inside a
//! multi-byte character (a byte-level BPE token may carry half of one), as `transformers`'
//! `TextStreamer` holds back text that ends in U+FFFD.

use crate::runtime::RunError;

/// The ids so far and how much of their text has been given out.
#[derive(Default)]
pub struct TextStream {
    ids: Vec<u32>,
    given: usize,
}

impl TextStream {
    /// The text `id` completes, empty while it ends inside a character. `decode` turns ids
    /// into text, replacing an incomplete character with U+FFFD.
    pub fn push(
        &mut self,
        id: u32,
        decode: impl Fn(&[u32]) -> Result<String, RunError>,
    ) -> Result<String, RunError> {
        self.ids.push(id);
        let text = decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        Ok(self.rest(text))
    }

    /// What is still held back (an incomplete character, as U+FFFD).
    pub fn finish(
        &mut self,
        decode: impl Fn(&[u32]) -> Result<String, RunError>,
    ) -> Result<String, RunError> {
        let text = decode(&self.ids)?;
        Ok(self.rest(text))
    }

    fn rest(&mut self, text: String) -> String {
        let new = match text.get(self.given..) {
            Some(new) => new.to_string(),
            None => String::new(),
        };
        self.given = self.given.max(text.len());
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each id is one byte: ids decode as lossy UTF-8, as a byte-level BPE does.
    fn bytes(ids: &[u32]) -> Result<String, RunError> {
        let raw: Vec<u8> = ids.iter().map(|&id| id as u8).collect();
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }

    #[test]
    fn a_character_split_over_tokens_comes_out_whole() {
        let mut stream = TextStream::default();
        let mut pieces = Vec::new();
        for b in "a€b".bytes() {
            pieces.push(stream.push(u32::from(b), bytes).unwrap());
        }
        assert_eq!(pieces, ["a", "", "", "€", "b"]);
        assert_eq!(stream.finish(bytes).unwrap(), "");
    }

    #[test]
    fn an_unfinished_character_is_flushed_at_the_end() {
        let mut stream = TextStream::default();
        assert_eq!(stream.push(u32::from(b'x'), bytes).unwrap(), "x");
        assert_eq!(stream.push(0xe2, bytes).unwrap(), "");
        assert_eq!(stream.finish(bytes).unwrap(), "\u{FFFD}");
    }
}
