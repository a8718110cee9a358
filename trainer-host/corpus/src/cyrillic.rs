//! English words spelled in Cyrillic, for RHVoice's Russian and Ukrainian voices.
//!
//! Those voices read only their own language's letters, so they are handed each Speech
//! Commands word as a Russian or Ukrainian speaker would write what they hear ("лефт" for
//! `left`, "гоу" for `go`), and speak it with their language's sounds: English with a
//! Russian or Ukrainian accent. The spellings are by hand, one per word and language; a word
//! without one is refused rather than guessed.

/// (English, Russian, Ukrainian) spellings of every Speech Commands v2 word.
const SPELLINGS: &[(&str, &str, &str)] = &[
    ("yes", "йес", "єс"),
    ("no", "ноу", "ноу"),
    ("up", "ап", "ап"),
    ("down", "даун", "даун"),
    ("left", "лефт", "лефт"),
    ("right", "райт", "райт"),
    ("on", "он", "он"),
    ("off", "оф", "оф"),
    ("stop", "стоп", "стоп"),
    ("go", "гоу", "гоу"),
    ("zero", "зироу", "зіроу"),
    ("one", "уан", "уан"),
    ("two", "ту", "ту"),
    ("three", "сри", "срі"),
    ("four", "фо", "фо"),
    ("five", "файв", "файв"),
    ("six", "сикс", "сікс"),
    ("seven", "севен", "севен"),
    ("eight", "эйт", "ейт"),
    ("nine", "найн", "найн"),
    ("bed", "бед", "бед"),
    ("bird", "бёрд", "берд"),
    ("cat", "кэт", "кет"),
    ("dog", "дог", "дог"),
    ("happy", "хэппи", "хеппі"),
    ("house", "хаус", "хаус"),
    ("marvin", "марвин", "марвін"),
    ("sheila", "шила", "шіла"),
    ("tree", "три", "трі"),
    ("wow", "уау", "уау"),
    ("backward", "бэкворд", "бекворд"),
    ("forward", "форворд", "форворд"),
    ("follow", "фоллоу", "фоллоу"),
    ("learn", "лёрн", "лерн"),
    ("visual", "вижуал", "віжуал"),
];

/// The alphabet an RHVoice voice reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Letters {
    Latin,
    Russian,
    Ukrainian,
}

/// What voice `voice` of RHVoice reads: its English voices Latin, the rest Cyrillic.
pub(crate) fn letters(voice: &str) -> Letters {
    match voice {
        "anatol" | "natalia" => Letters::Ukrainian,
        "aleksandr" | "anna" | "elena" | "irina" => Letters::Russian,
        _ => Letters::Latin,
    }
}

/// `word` as `letters` spell it (Latin: the text itself, whatever it is), or `None` for a
/// word with no Cyrillic spelling here.
pub(crate) fn spell(word: &str, letters: Letters) -> Option<&str> {
    if letters == Letters::Latin {
        return Some(word);
    }
    let (_, russian, ukrainian) = SPELLINGS.iter().find(|(en, _, _)| *en == word)?;
    Some(if letters == Letters::Russian {
        russian
    } else {
        ukrainian
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{CORE_WORDS, UNKNOWN_WORDS};

    #[test]
    fn every_speech_commands_word_is_spelled_in_both_alphabets() {
        for &w in CORE_WORDS.iter().chain(UNKNOWN_WORDS) {
            for letters in [Letters::Russian, Letters::Ukrainian] {
                let s = spell(w, letters).unwrap_or_else(|| panic!("{w}"));
                assert!(
                    s.chars()
                        .all(|c| ('а'..='я').contains(&c) || "ёєії".contains(c)),
                    "{w}: {s}"
                );
            }
            assert_eq!(spell(w, Letters::Latin), Some(w));
        }
        assert_eq!(SPELLINGS.len(), CORE_WORDS.len() + UNKNOWN_WORDS.len());
        // The letters each language has and the other lacks.
        assert_eq!(spell("yes", Letters::Ukrainian), Some("єс"));
        assert_eq!(spell("cat", Letters::Russian), Some("кэт"));
        assert_eq!(spell("computer", Letters::Russian), None);
        assert_eq!(
            spell("the red house", Letters::Latin),
            Some("the red house")
        );
    }

    #[test]
    fn voices_read_their_languages_letters() {
        assert_eq!(letters("bdl"), Letters::Latin);
        assert_eq!(letters("anna"), Letters::Russian);
        assert_eq!(letters("natalia"), Letters::Ukrainian);
    }
}
