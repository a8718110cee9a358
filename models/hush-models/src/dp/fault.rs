//! Test-only privacy faults: switches that break one privacy invariant on purpose, so that
//! the empirical privacy audit (`hush-host audit privacy`) can be shown to catch each bug
//! it is meant to catch.
//!
//! The same mechanism as the federated core's crash points (`hush_fl::fault`): a cargo
//! feature, `privacy-faults`, that no default or release build enables (`hush-host`'s
//! tests turn it on through a dev-dependency, and a test checks that `cargo build -p
//! hush-host` resolves without it), and an environment variable, `HUSH_PRIVACY_FAULT`,
//! that names the fault. Without the feature every switch is a constant "no fault" and
//! the variable is never read.
//!
//! | `HUSH_PRIVACY_FAULT` | what breaks | where |
//! |---|---|---|
//! | `noise-0.1` | every mechanism's noise is a tenth of its scale | [`crate::dp::GaussianMechanism::privatize`], [`crate::dp::GaussianNoise::draw`], [`crate::dp::LaplaceNoise::draw`] |
//! | `no-noise` | no noise at all | the same |
//! | `no-clip` | contributions are neither clipped nor checked against their bound | [`crate::dp::ClipBounds::factors`], [`crate::dp::ClipBounds::check`] |
//! | `double-count` | a federated round adds every accepted update twice | `hush_fl::aggregate::Aggregator::add` |
//!
//! A fault that divides by the realised count instead of the expected one is not offered:
//! it barely changes the true ε, so no audit can see it; the invariant's own test
//! (`ExpectedCount`) covers it.

/// The environment variable naming the fault (read once per process).
pub const PRIVACY_FAULT_ENV: &str = "HUSH_PRIVACY_FAULT";

/// One deliberate privacy bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivacyFault {
    /// Noise at a tenth of its calibrated scale.
    NoiseTenth,
    /// No noise.
    NoNoise,
    /// No clipping and no receiver check.
    NoClip,
    /// Every federated update summed twice.
    DoubleCount,
}

impl PrivacyFault {
    /// Every fault, in the order the audit reports them.
    pub const ALL: [PrivacyFault; 4] = [
        PrivacyFault::NoiseTenth,
        PrivacyFault::NoNoise,
        PrivacyFault::NoClip,
        PrivacyFault::DoubleCount,
    ];

    /// The name `HUSH_PRIVACY_FAULT` takes.
    pub fn name(self) -> &'static str {
        match self {
            PrivacyFault::NoiseTenth => "noise-0.1",
            PrivacyFault::NoNoise => "no-noise",
            PrivacyFault::NoClip => "no-clip",
            PrivacyFault::DoubleCount => "double-count",
        }
    }

    /// The fault of that name, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Whether this build has the privacy-fault switches.
pub fn enabled() -> bool {
    cfg!(feature = "privacy-faults")
}

/// The fault this process runs with: `None` in every build without the `privacy-faults`
/// feature; with it, what `HUSH_PRIVACY_FAULT` names (read once; an unknown name aborts
/// with a message, so a typo cannot pass for a fault-free run).
pub fn active() -> Option<PrivacyFault> {
    #[cfg(feature = "privacy-faults")]
    {
        static ACTIVE: std::sync::OnceLock<Option<PrivacyFault>> = std::sync::OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let name = std::env::var(PRIVACY_FAULT_ENV).ok()?;
            if name.is_empty() {
                return None;
            }
            match PrivacyFault::from_name(&name) {
                Some(f) => {
                    eprintln!("hush: privacy fault `{name}` is ON: this run's ε is a lie");
                    Some(f)
                }
                None => {
                    let known: Vec<&str> = PrivacyFault::ALL.iter().map(|f| f.name()).collect();
                    eprintln!(
                        "hush: {PRIVACY_FAULT_ENV}={name}: unknown fault (expected one of {})",
                        known.join(", ")
                    );
                    std::process::abort();
                }
            }
        })
    }
    #[cfg(not(feature = "privacy-faults"))]
    None
}

/// Whether `fault` is the active one.
#[inline]
pub fn is(fault: PrivacyFault) -> bool {
    active() == Some(fault)
}

/// The factor on the noise's standard deviation: 1 without a noise fault.
pub fn noise_scale() -> f64 {
    match active() {
        Some(PrivacyFault::NoiseTenth) => 0.1,
        Some(PrivacyFault::NoNoise) => 0.0,
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_default_build_has_no_fault() {
        for f in PrivacyFault::ALL {
            assert_eq!(PrivacyFault::from_name(f.name()), Some(f));
        }
        assert_eq!(PrivacyFault::from_name("noise"), None);
        if !enabled() {
            assert_eq!(active(), None);
            assert_eq!(noise_scale(), 1.0);
        }
    }
}
