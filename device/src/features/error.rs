//! Why features could not be computed.

/// Errors of the feature front-end. Option errors name the option, its value and what is
/// expected; sample errors name the sample.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FeatureError {
    /// An option is out of range or inconsistent with another.
    #[error("feature option {option} = {value}: expected {expected}")]
    InvalidOption {
        /// The option, spelt as in the config (and the CLI flag).
        option: &'static str,
        /// Its value.
        value: String,
        /// What is expected instead.
        expected: String,
    },
    /// A sample is NaN or infinite.
    #[error("sample {index} is not finite ({value}); features need finite samples")]
    NonFiniteSample {
        /// Index of the sample since the start of the stream.
        index: u64,
        /// Its value.
        value: f32,
    },
    /// No samples were given.
    #[error("no audio samples: features need at least one frame of audio")]
    EmptyInput,
    /// The input is shorter than one frame.
    #[error("{samples} samples give no frame: at least {needed} are needed")]
    TooShort {
        /// Samples given.
        samples: u64,
        /// Samples needed for one frame.
        needed: u64,
    },
    /// Resampling the input to the feature rate failed.
    #[error("resampling to the feature rate: {0}")]
    Resample(#[from] crate::audio::ResampleError),
    /// `push` after `finish`.
    #[error("the feature stream is finished; start a new one (reset) to push more audio")]
    Finished,
}

impl FeatureError {
    /// An [`FeatureError::InvalidOption`].
    pub fn option(
        option: &'static str,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidOption {
            option,
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}
