//! Corpus tools: the synthetic multi-speaker corpus generator ([`synth`]), corpus
//! statistics ([`stats`]) and federated partitioners ([`partition`]).
//!
//! Reading corpora is not here: the readers live in [`hush_device::dataset`] so that a
//! device and the host read the same layouts with the same code.

mod cyrillic;
pub mod grammar;
pub mod noise;
pub mod partition;
pub mod stats;
pub mod synth;
mod tools;
pub mod voices;

pub use synth::{synthesize, CorpusKind, OutputFormat, SynthConfig, SynthError, SynthSummary};
pub use tools::missing_tools;

/// Mixes seed words into one 64-bit seed (SplitMix64 finaliser), so that every clip gets
/// its own random stream whatever order the parallel jobs run in.
pub(crate) fn mix_seed(parts: &[u64]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15;
    for &p in parts {
        h ^= p
            .wrapping_add(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(h << 6)
            .wrapping_add(h >> 2);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h = z ^ (z >> 31);
    }
    h
}
