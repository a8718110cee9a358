//! Decoding WAV and FLAC files into mono `f32` samples in [-1, 1].

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// Mono audio: samples in [-1, 1] at `sample_rate` Hz.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Samples, one channel (multi-channel files are averaged on read).
    pub samples: Vec<f32>,
    /// Samples per second.
    pub sample_rate: u32,
}

impl Audio {
    /// Duration in seconds.
    pub fn duration_s(&self) -> f64 {
        self.samples.len() as f64 / f64::from(self.sample_rate)
    }
}

/// Why an audio file could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is neither WAV (RIFF/WAVE) nor FLAC.
    #[error("{path}: not a WAV or FLAC file (expected a RIFF/WAVE or fLaC header)")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The file claims to be WAV or FLAC but is malformed or truncated.
    #[error("{path}: malformed {format} data: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// "WAV" or "FLAC".
        format: &'static str,
        /// What the decoder reported.
        reason: String,
    },
    /// A valid file whose encoding hush does not read.
    #[error("{path}: unsupported encoding: {what}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is unsupported, and what is expected instead.
        what: String,
    },
    /// The file holds no samples.
    #[error("{path}: the file holds no audio samples")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file's audio could not be resampled to the rate asked for.
    #[error("{path}: resampling to {to_hz} Hz: {source}")]
    Resample {
        /// The file.
        path: PathBuf,
        /// The rate asked for.
        to_hz: u32,
        /// What the resampler reported.
        source: super::ResampleError,
    },
    /// A float file holds NaN or infinite samples.
    #[error("{path}: sample {index} is not finite ({value})")]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// Index of the first bad sample (interleaved).
        index: usize,
        /// Its value.
        value: f32,
    },
}

/// Largest file hush reads as one clip (1 GiB); larger files are refused before decoding.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Reads a WAV (PCM 8/16/24/32-bit or float 32) or FLAC file, averaging channels to mono.
///
/// The format is found from the file's header, not its name.
pub fn read_audio(path: &Path) -> Result<Audio, AudioError> {
    let io = |source| AudioError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len > MAX_FILE_BYTES {
        return Err(AudioError::Unsupported {
            path: path.to_path_buf(),
            what: format!("file is {len} bytes; at most {MAX_FILE_BYTES} bytes are read"),
        });
    }
    let mut magic = [0u8; 4];
    let got = read_up_to(&mut file, &mut magic).map_err(io)?;
    drop(file);
    let audio = match &magic[..got] {
        b"RIFF" => read_wav(path)?,
        b"fLaC" => read_flac(path)?,
        [] => {
            return Err(AudioError::Empty {
                path: path.to_path_buf(),
            })
        }
        _ => {
            return Err(AudioError::UnknownFormat {
                path: path.to_path_buf(),
            })
        }
    };
    if audio.samples.is_empty() {
        return Err(AudioError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(audio)
}

/// Reads a file like [`read_audio`] and resamples it to `rate` Hz when it is at another
/// rate, so any WAV or FLAC can feed a model trained at `rate`.
pub fn read_audio_at(path: &Path, rate: u32) -> Result<Audio, AudioError> {
    let audio = read_audio(path)?;
    if audio.sample_rate == rate {
        return Ok(audio);
    }
    let samples = super::resample(&audio.samples, audio.sample_rate, rate).map_err(|source| {
        AudioError::Resample {
            path: path.to_path_buf(),
            to_hz: rate,
            source,
        }
    })?;
    Ok(Audio {
        samples,
        sample_rate: rate,
    })
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn read_wav(path: &Path) -> Result<Audio, AudioError> {
    let malformed = |e: hound::Error| match e {
        hound::Error::IoError(source) if source.kind() != std::io::ErrorKind::UnexpectedEof => {
            AudioError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
        hound::Error::Unsupported => AudioError::Unsupported {
            path: path.to_path_buf(),
            what: "WAV sub-format (expected PCM 8/16/24/32-bit or IEEE float 32-bit)".into(),
        },
        other => AudioError::Malformed {
            path: path.to_path_buf(),
            format: "WAV",
            reason: other.to_string(),
        },
    };
    let file = File::open(path).map_err(|source| AudioError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = hound::WavReader::new(BufReader::new(file)).map_err(malformed)?;
    let spec = reader.spec();
    let channels = usize::from(spec.channels);
    if channels == 0 || spec.sample_rate == 0 {
        return Err(AudioError::Malformed {
            path: path.to_path_buf(),
            format: "WAV",
            reason: format!("{} channels at {} Hz", spec.channels, spec.sample_rate),
        });
    }
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => reader
            .into_samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(malformed)?,
        (hound::SampleFormat::Int, bits @ 1..=32) => {
            let scale = 1.0 / (1u64 << (bits - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<Result<_, _>>()
                .map_err(malformed)?
        }
        (format, bits) => {
            return Err(AudioError::Unsupported {
                path: path.to_path_buf(),
                what: format!(
                    "{bits}-bit {format:?} WAV (expected PCM 8/16/24/32-bit or float 32-bit)"
                ),
            })
        }
    };
    if let Some((index, &value)) = interleaved.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(AudioError::NonFinite {
            path: path.to_path_buf(),
            index,
            value,
        });
    }
    Ok(Audio {
        samples: downmix(&interleaved, channels),
        sample_rate: spec.sample_rate,
    })
}

fn read_flac(path: &Path) -> Result<Audio, AudioError> {
    let malformed = |e: claxon::Error| match e {
        claxon::Error::IoError(source) if source.kind() != std::io::ErrorKind::UnexpectedEof => {
            AudioError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
        claxon::Error::Unsupported(what) => AudioError::Unsupported {
            path: path.to_path_buf(),
            what: what.to_string(),
        },
        other => AudioError::Malformed {
            path: path.to_path_buf(),
            format: "FLAC",
            reason: other.to_string(),
        },
    };
    let mut reader = claxon::FlacReader::open(path).map_err(malformed)?;
    let info = reader.streaminfo();
    let channels = info.channels as usize;
    if channels == 0 || info.sample_rate == 0 || info.bits_per_sample == 0 {
        return Err(AudioError::Malformed {
            path: path.to_path_buf(),
            format: "FLAC",
            reason: format!(
                "{} channels, {} bits at {} Hz",
                info.channels, info.bits_per_sample, info.sample_rate
            ),
        });
    }
    let scale = 1.0 / (1u64 << (info.bits_per_sample - 1)) as f32;
    let interleaved: Vec<f32> = reader
        .samples()
        .map(|s| s.map(|v| v as f32 * scale))
        .collect::<Result<_, _>>()
        .map_err(malformed)?;
    if let Some(total) = info.samples {
        let expected = total as usize * channels;
        if interleaved.len() < expected {
            return Err(AudioError::Malformed {
                path: path.to_path_buf(),
                format: "FLAC",
                reason: format!(
                    "truncated: {} of {} samples present",
                    interleaved.len(),
                    expected
                ),
            });
        }
    }
    Ok(Audio {
        samples: downmix(&interleaved, channels),
        sample_rate: info.sample_rate,
    })
}

/// Averages interleaved channels into one.
fn downmix(interleaved: &[f32], channels: usize) -> Vec<f32> {
    if channels == 1 {
        return interleaved.to_vec();
    }
    let inv = 1.0 / channels as f32;
    interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().sum::<f32>() * inv)
        .collect()
}

/// Writes mono audio as 16-bit PCM WAV, rounding and saturating each sample.
///
/// The file is written beside its destination and renamed into place, so a failure
/// never leaves a partial file under `path`.
pub fn write_wav_i16(path: &Path, audio: &Audio) -> Result<(), AudioError> {
    let io = |source| AudioError::Io {
        path: path.to_path_buf(),
        source,
    };
    let wav_err = |e: hound::Error| match e {
        hound::Error::IoError(source) => io(source),
        other => AudioError::Malformed {
            path: path.to_path_buf(),
            format: "WAV",
            reason: other.to_string(),
        },
    };
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: audio.sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let tmp = path.with_extension("wav.partial");
    let mut writer = hound::WavWriter::create(&tmp, spec).map_err(wav_err)?;
    {
        let mut w16 = writer.get_i16_writer(audio.samples.len() as u32);
        for &s in &audio.samples {
            w16.write_sample(to_i16(s));
        }
        w16.flush().map_err(wav_err)?;
    }
    writer.finalize().map_err(wav_err)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Converts a sample in [-1, 1] to 16-bit PCM, rounding to nearest and saturating.
pub(crate) fn to_i16(s: f32) -> i16 {
    (s * 32768.0).round().clamp(-32768.0, 32767.0) as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn wav_round_trip_is_exact_at_16_bits() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.01).sin() * 0.5).collect();
        let audio = Audio {
            samples: samples.clone(),
            sample_rate: 16000,
        };
        let p = dir.path().join("a.wav");
        write_wav_i16(&p, &audio).unwrap();
        let back = read_audio(&p).unwrap();
        assert_eq!(back.sample_rate, 16000);
        assert_eq!(back.samples.len(), 1000);
        for (a, b) in samples.iter().zip(&back.samples) {
            assert!((a - b).abs() <= 0.5 / 32768.0 + 1e-7, "{a} vs {b}");
        }
        assert!(!dir.path().join("a.wav.partial").exists());
    }

    #[test]
    fn other_rates_are_resampled_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("44k.wav");
        let tone: Vec<f32> = (0..44_100)
            .map(|i| (std::f32::consts::TAU * 440.0 * i as f32 / 44_100.0).sin() * 0.5)
            .collect();
        write_wav_i16(
            &p,
            &Audio {
                samples: tone,
                sample_rate: 44_100,
            },
        )
        .unwrap();
        let a = read_audio_at(&p, 16_000).unwrap();
        assert_eq!(a.sample_rate, 16_000);
        assert_eq!(a.samples.len(), 16_000);
        // Still a 440 Hz tone of amplitude 0.5 away from the edges.
        for (i, s) in a.samples.iter().enumerate().take(15_000).skip(1_000) {
            let want = (std::f32::consts::TAU * 440.0 * i as f32 / 16_000.0).sin() * 0.5;
            assert!((s - want).abs() < 2e-3, "sample {i}: {s} vs {want}");
        }
        assert_eq!(read_audio_at(&p, 44_100).unwrap().samples.len(), 44_100);
    }

    #[test]
    fn stereo_is_averaged_to_mono() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.wav");
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 8000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&p, spec).unwrap();
        for _ in 0..10 {
            w.write_sample(16384i16).unwrap();
            w.write_sample(0i16).unwrap();
        }
        w.finalize().unwrap();
        let a = read_audio(&p).unwrap();
        assert_eq!(a.sample_rate, 8000);
        assert_eq!(a.samples, vec![0.25; 10]);
    }

    #[test]
    fn empty_truncated_and_foreign_files_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let empty = write(dir.path(), "empty.wav", b"");
        assert!(matches!(read_audio(&empty), Err(AudioError::Empty { .. })));

        let text = write(dir.path(), "notes.wav", b"hello, this is text");
        let e = read_audio(&text).unwrap_err();
        assert!(matches!(e, AudioError::UnknownFormat { .. }));
        assert!(e.to_string().contains("notes.wav"));

        // A valid header whose data chunk is cut short.
        let good = dir.path().join("good.wav");
        write_wav_i16(
            &good,
            &Audio {
                samples: vec![0.1; 4000],
                sample_rate: 16000,
            },
        )
        .unwrap();
        let bytes = std::fs::read(&good).unwrap();
        let cut = write(dir.path(), "cut.wav", &bytes[..bytes.len() / 2 + 1]);
        let e = read_audio(&cut).unwrap_err();
        assert!(e.to_string().contains("cut.wav"), "{e}");

        let header_only = write(dir.path(), "hdr.wav", &bytes[..20]);
        assert!(read_audio(&header_only).is_err());

        let fake_flac = write(dir.path(), "x.flac", b"fLaC\0\0\0garbage");
        let e = read_audio(&fake_flac).unwrap_err();
        assert!(
            matches!(e, AudioError::Malformed { format: "FLAC", .. }),
            "{e}"
        );

        let missing = dir.path().join("missing.wav");
        assert!(matches!(read_audio(&missing), Err(AudioError::Io { .. })));
    }

    #[test]
    fn a_law_wav_is_an_unsupported_encoding() {
        let dir = tempfile::tempdir().unwrap();
        // A valid RIFF/WAVE header with format tag 6 (A-law), 8 kHz mono, 8 bits.
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF");
        b.extend_from_slice(&(36u32 + 4).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&6u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&8000u32.to_le_bytes());
        b.extend_from_slice(&8000u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&8u16.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&[0xd5; 4]);
        let p = write(dir.path(), "alaw.wav", &b);
        let e = read_audio(&p).unwrap_err();
        assert!(matches!(e, AudioError::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("alaw.wav"));
    }

    #[test]
    fn float_wav_with_nan_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nan.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::create(&p, spec).unwrap();
        w.write_sample(0.5f32).unwrap();
        w.write_sample(f32::NAN).unwrap();
        w.finalize().unwrap();
        assert!(matches!(
            read_audio(&p),
            Err(AudioError::NonFinite { index: 1, .. })
        ));
    }
}
