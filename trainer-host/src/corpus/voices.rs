//! The voice catalogue and how a synthetic speaker is drawn from it.
//!
//! A speaker is a base voice of a TTS engine plus its own pitch, speaking rate and
//! vocal-tract-length warp (a spectral scaling that keeps duration: sox `speed` then
//! `tempo`). Recorded-donor voices (flite and festival, built from real recordings) are
//! the closest to human speech we have, so every other speaker uses one; the rest come
//! from espeak-ng's accents × variants. All engines are free software whose output may be
//! redistributed (espeak-ng GPL-3 — its output is not covered; flite BSD-style; festival
//! voices kal/ked and CMU ARCTIC slt under free licences).

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
}

impl Engine {
    /// Name as written in `speakers.tsv`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Espeak => "espeak-ng",
            Engine::Flite => "flite",
            Engine::Festival => "festival",
        }
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
    /// Pitch: espeak-ng `-p` (0–99), flite target F0 in Hz, festival sox shift in cents.
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

/// Draws speaker `index` of a corpus. Even indices use recorded-donor voices, odd ones
/// espeak-ng; the rest is random from `rng`.
pub fn draw_speaker(index: usize, rng: &mut ChaCha8Rng) -> Speaker {
    let id = format!("{:08x}", rng.random::<u32>());
    let speed = rng.random_range(0.85f32..1.18);
    let warp = rng.random_range(0.88f32..1.13);
    let f0_factor = rng.random_range(0.82f32..1.22);
    if index.is_multiple_of(2) {
        let (engine, voice, f0) = DONORS[(index / 2) % DONORS.len()];
        let pitch = match engine {
            Engine::Flite => (f0 * f0_factor).round(),
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
        let k = index / 2;
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
