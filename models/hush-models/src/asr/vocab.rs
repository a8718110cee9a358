//! The character vocabulary of hush's CTC models: blank (index 0), space, apostrophe,
//! `a`–`z`. Transcripts are normalised ([`normalize_transcript`]) before they are
//! encoded, so a corpus written in capitals (LibriSpeech) and one in lower case give the
//! same targets.

use crate::ModelError;

/// Index of the CTC blank.
pub const BLANK: usize = 0;

/// The output symbols in index order: `<blank>`, space, apostrophe, `a`–`z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocabulary {
    symbols: Vec<String>,
}

impl Default for Vocabulary {
    fn default() -> Self {
        Self::characters()
    }
}

impl Vocabulary {
    /// The standard character set: 29 symbols.
    pub fn characters() -> Self {
        let mut symbols = vec!["<blank>".to_string(), " ".to_string(), "'".to_string()];
        symbols.extend(('a'..='z').map(|c| c.to_string()));
        Self { symbols }
    }

    /// A vocabulary read back from `model.json`: it must be exactly
    /// [`Vocabulary::characters`] (the only one the decoders and the trainer know).
    pub fn from_symbols(symbols: &[String]) -> Result<Self, String> {
        let v = Self::characters();
        if symbols != v.symbols.as_slice() {
            return Err(format!(
                "vocabulary {symbols:?} is not hush's character set (<blank>, space, \
                 apostrophe, a-z)"
            ));
        }
        Ok(v)
    }

    /// Every symbol, index order (as `model.json` stores them).
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    /// Number of outputs (blank included).
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether there are no symbols (never, for a built vocabulary).
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The indices of a normalised transcript ([`normalize_transcript`]); an error names
    /// the first character outside the vocabulary.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>, ModelError> {
        text.chars()
            .map(|c| match c {
                ' ' => Ok(1),
                '\'' => Ok(2),
                'a'..='z' => Ok(3 + (c as usize - 'a' as usize)),
                _ => Err(ModelError::BadBatch {
                    reason: format!("character {c:?} of {text:?} is not in the vocabulary"),
                }),
            })
            .collect()
    }

    /// The text of a label sequence (blanks and unknown indices are skipped).
    pub fn decode(&self, labels: &[usize]) -> String {
        labels
            .iter()
            .filter(|&&i| i != BLANK)
            .filter_map(|&i| self.symbols.get(i))
            .map(String::as_str)
            .collect()
    }
}

/// Lower case; letters, apostrophes and spaces kept; any other character (digits,
/// punctuation) becomes a word break; runs of spaces collapse to one; trimmed.
pub fn normalize_transcript(text: &str) -> String {
    let mapped: String = text
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_ascii_lowercase() || c == '\'' {
                c
            } else {
                ' '
            }
        })
        .collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let v = Vocabulary::characters();
        assert_eq!(v.len(), 29);
        assert_eq!(v.symbols()[BLANK], "<blank>");
        let t = normalize_transcript("  SET a TIMER, for  don't!  ");
        assert_eq!(t, "set a timer for don't");
        let ids = v.encode(&t).unwrap();
        assert_eq!(ids[0], 3 + ('s' as usize - 'a' as usize));
        assert_eq!(v.decode(&ids), t);
        assert!(v.encode("x1").unwrap_err().to_string().contains("'1'"));
        assert!(Vocabulary::from_symbols(&["a".to_string()]).is_err());
        assert_eq!(Vocabulary::from_symbols(v.symbols()).unwrap(), v);
    }
}
