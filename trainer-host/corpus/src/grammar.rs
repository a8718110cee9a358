//! A template grammar of short spoken commands for the synthetic ASR corpus
//! ("turn on the kitchen light", "set a timer for five minutes", …).

use rand::seq::IndexedRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

const ROOMS: &[&str] = &[
    "kitchen",
    "bedroom",
    "living room",
    "bathroom",
    "office",
    "garage",
    "hallway",
];
const DEVICES: &[&str] = &[
    "light",
    "lights",
    "lamp",
    "fan",
    "heater",
    "radio",
    "television",
];
const NUMBERS: &[&str] = &[
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "twelve",
    "fifteen",
    "twenty",
    "thirty",
    "forty five",
];
const UNITS: &[&str] = &["seconds", "minutes", "hours"];
const MEDIA: &[&str] = &[
    "some music",
    "the radio",
    "the news",
    "jazz",
    "rock music",
    "a podcast",
];
const WHEN: &[&str] = &["today", "tomorrow", "tonight", "this weekend"];
const PEOPLE: &[&str] = &["mom", "dad", "the office", "john", "mary", "the doctor"];
const OPENABLE: &[&str] = &["garage door", "front door", "window", "blinds", "curtains"];
const CHORES: &[&str] = &[
    "buy milk",
    "call mom",
    "water the plants",
    "take out the trash",
    "feed the cat",
];

/// Draws one command sentence: lower-case words separated by single spaces.
pub fn sentence(rng: &mut ChaCha8Rng) -> String {
    let pick = |rng: &mut ChaCha8Rng, xs: &[&'static str]| *xs.choose(rng).unwrap_or(&xs[0]);
    match rng.random_range(0..10) {
        0 => format!(
            "turn {} the {} {}",
            pick(rng, &["on", "off"]),
            pick(rng, ROOMS),
            pick(rng, DEVICES)
        ),
        1 => format!(
            "set a timer for {} {}",
            pick(rng, NUMBERS),
            pick(rng, UNITS)
        ),
        2 => format!("set the temperature to {} degrees", pick(rng, NUMBERS)),
        3 => format!("play {}", pick(rng, MEDIA)),
        4 => format!("what is the weather {}", pick(rng, WHEN)),
        5 => format!("call {}", pick(rng, PEOPLE)),
        6 => format!("{} the music", pick(rng, &["stop", "pause", "resume"])),
        7 => format!(
            "{} the {}",
            pick(rng, &["open", "close"]),
            pick(rng, OPENABLE)
        ),
        8 => format!("remind me to {} {}", pick(rng, CHORES), pick(rng, WHEN)),
        _ => format!(
            "{} the volume",
            pick(rng, &["increase", "decrease", "raise", "lower"])
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    #[test]
    fn sentences_are_varied_and_clean() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let s: std::collections::HashSet<String> = (0..200).map(|_| sentence(&mut rng)).collect();
        assert!(s.len() > 80, "only {} distinct sentences", s.len());
        for x in &s {
            assert!(x.chars().all(|c| c.is_ascii_lowercase() || c == ' '), "{x}");
            assert!(!x.contains("  ") && !x.starts_with(' ') && !x.ends_with(' '));
        }
    }
}
