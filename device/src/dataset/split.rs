//! Speaker-disjoint train/validation/test splits.
//!
//! Without list files, a speaker's split is a hash of the speaker id, exactly as the
//! Speech Commands dataset defines it (`which_set` in its README and TensorFlow's
//! `input_data.py`): SHA-1 of the id, taken modulo 2^27, as a percentage; below 10 % is
//! validation, below 20 % test. Every clip of a speaker therefore lands in one split.

/// A part of a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Split {
    /// Training data.
    Train,
    /// Held out for model selection and early stopping.
    Validation,
    /// Held out for the final report.
    Test,
}

impl Split {
    /// Lower-case name: `train`, `validation`, `test`.
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Validation => "validation",
            Split::Test => "test",
        }
    }
}

const VALIDATION_PERCENT: f64 = 10.0;
const TESTING_PERCENT: f64 = 10.0;
const MAX_NUM_WAVS_PER_CLASS: u64 = (1 << 27) - 1;

/// The split of a speaker under the Speech Commands hash rule.
pub fn split_of_speaker(speaker: &str) -> Split {
    let digest = sha1_smol::Sha1::from(speaker.as_bytes()).digest().bytes();
    // int(hex, 16) % 2^27 is the low 27 bits of the big-endian digest.
    let tail = u32::from_be_bytes([digest[16], digest[17], digest[18], digest[19]]);
    let value = u64::from(tail) & MAX_NUM_WAVS_PER_CLASS;
    let percent = value as f64 % (MAX_NUM_WAVS_PER_CLASS + 1) as f64
        * (100.0 / MAX_NUM_WAVS_PER_CLASS as f64);
    if percent < VALIDATION_PERCENT {
        Split::Validation
    } else if percent < VALIDATION_PERCENT + TESTING_PERCENT {
        Split::Test
    } else {
        Split::Train
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_python_rule() {
        for (speaker, expected) in REFERENCE {
            assert_eq!(split_of_speaker(speaker), *expected, "speaker {speaker}");
        }
    }

    /// Made with Python's hashlib by the rule of TensorFlow's
    /// `speech_commands/input_data.py` (`which_set`):
    /// `pct = (int(sha1(s).hexdigest(), 16) % 2**27) * (100 / (2**27 - 1))`;
    /// the percentage is in each comment.
    const REFERENCE: &[(&str, Split)] = &[
        ("0a7c2a8d", Split::Train),      // 56.836
        ("bb05582b", Split::Test),       // 18.133
        ("c1d39ce8", Split::Train),      // 39.799
        ("a1b2c3d4", Split::Validation), // 3.334
        ("speaker7", Split::Test),       // 11.990
        ("ffff0000", Split::Train),      // 98.257
        ("5e3dde6b", Split::Test),       // 10.988
        ("x", Split::Validation),        // 4.498
    ];
}
