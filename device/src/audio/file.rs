//! Decoding WAV and FLAC files into mono `f32` samples in [-1, 1].

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
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
    let mut wav = WavBlocks::open(path)?;
    // The header's count, bounded: a lying header must not reserve gigabytes.
    let mut samples = Vec::with_capacity(wav.frames_left().min(1 << 22) as usize);
    while wav.read_mono(1 << 16, &mut samples)? > 0 {}
    Ok(Audio {
        samples,
        sample_rate: wav.sample_rate(),
    })
}

/// A WAV file's samples, decoded a block at a time straight from its bytes and averaged to
/// mono (PCM 8/16/24/32-bit or IEEE float 32-bit, as hound reads them). hound reads the
/// header; its sample iterator, one call per sample, cost over twice what computing the
/// features of those samples does (callgrind, `hush-device listen` over a file).
pub struct WavBlocks {
    path: PathBuf,
    file: BufReader<File>,
    encoding: Encoding,
    channels: usize,
    sample_rate: u32,
    frames_left: u64,
    /// Interleaved samples read so far (to name a non-finite one).
    samples_read: u64,
    bytes: Vec<u8>,
    interleaved: Vec<f32>,
}

/// How a WAV file stores one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// 8-bit unsigned, offset by 128.
    U8,
    I16,
    I24,
    /// 24 bits in a 4-byte container (the low three bytes).
    I24In4,
    I32,
    F32,
}

impl Encoding {
    /// The encoding of samples of `bits` valid bits stored in `bytes` bytes, if hush reads it.
    fn of(format: hound::SampleFormat, bytes: u64, bits: u16) -> Option<Self> {
        use hound::SampleFormat::{Float, Int};
        Some(match (format, bytes, bits) {
            (Int, 1, 8) => Self::U8,
            (Int, 2, 16) => Self::I16,
            (Int, 3, 24) => Self::I24,
            (Int, 4, 24) => Self::I24In4,
            (Int, 4, 32) => Self::I32,
            (Float, 4, 32) => Self::F32,
            _ => return None,
        })
    }

    /// Bytes per sample.
    fn width(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::I16 => 2,
            Self::I24 => 3,
            Self::I24In4 | Self::I32 | Self::F32 => 4,
        }
    }

    /// Appends the samples of `bytes` (a whole number of them) to `out`, in [-1, 1]. Each
    /// sample is converted into its place in `out`, grown first, so that the loops are
    /// straight conversions the compiler vectorises.
    fn decode(self, bytes: &[u8], out: &mut Vec<f32>) {
        let start = out.len();
        out.resize(start + bytes.len() / self.width(), 0.0);
        let out = &mut out[start..];
        match self {
            Self::U8 => convert_each(out, bytes, |[b]| (f32::from(b) - 128.0) / 128.0),
            Self::I16 => convert_each(out, bytes, |b| f32::from(i16::from_le_bytes(b)) / 32_768.0),
            // The three bytes as the top of an i32, shifted back down with their sign.
            Self::I24 => convert_each(out, bytes, |[a, b, c]| {
                (i32::from_le_bytes([0, a, b, c]) >> 8) as f32 / 8_388_608.0
            }),
            Self::I24In4 => convert_each(out, bytes, |[a, b, c, _]| {
                (i32::from_le_bytes([0, a, b, c]) >> 8) as f32 / 8_388_608.0
            }),
            Self::I32 => convert_each(out, bytes, |b| {
                i32::from_le_bytes(b) as f32 / 2_147_483_648.0
            }),
            Self::F32 => convert_each(out, bytes, f32::from_le_bytes),
        }
    }

    /// Whether a sample of this encoding can be NaN or infinite (only floats can).
    fn can_be_non_finite(self) -> bool {
        self == Self::F32
    }
}

impl WavBlocks {
    /// Opens the WAV file at `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, AudioError> {
        let io = |source| AudioError::Io {
            path: path.to_path_buf(),
            source,
        };
        let malformed = |reason: String| AudioError::Malformed {
            path: path.to_path_buf(),
            format: "WAV",
            reason,
        };
        let mut file = File::open(path).map_err(io)?;
        let mut magic = [0u8; 12];
        let got = read_up_to(&mut file, &mut magic).map_err(io)?;
        if got < magic.len() || &magic[..4] != b"RIFF" || &magic[8..] != b"WAVE" {
            return Err(malformed(
                "not a WAV file (expected a RIFF/WAVE header)".into(),
            ));
        }
        file.rewind().map_err(io)?;
        // hound reads the header unbuffered and stops at the first byte of the data chunk,
        // whose length is the 4 bytes just before it: the length over hound's sample count
        // is the bytes per sample, which hound does not tell.
        let (spec, samples) = {
            let reader = hound::WavReader::new(&mut file).map_err(|e| match e {
                hound::Error::IoError(source)
                    if source.kind() != std::io::ErrorKind::UnexpectedEof =>
                {
                    io(source)
                }
                hound::Error::Unsupported => AudioError::Unsupported {
                    path: path.to_path_buf(),
                    what: "WAV sub-format (expected PCM 8/16/24/32-bit or IEEE float 32-bit)"
                        .into(),
                },
                other => malformed(other.to_string()),
            })?;
            (reader.spec(), u64::from(reader.len()))
        };
        let channels = usize::from(spec.channels);
        if channels == 0 || spec.sample_rate == 0 {
            return Err(malformed(format!(
                "{} channels at {} Hz",
                spec.channels, spec.sample_rate
            )));
        }
        let data_at = file.stream_position().map_err(io)?;
        let mut len = [0u8; 4];
        file.seek(SeekFrom::Start(data_at - 4)).map_err(io)?;
        file.read_exact(&mut len).map_err(io)?;
        let data_len = u64::from(u32::from_le_bytes(len));
        let width = data_len
            .checked_div(samples)
            .unwrap_or(u64::from(spec.bits_per_sample).div_ceil(8));
        let encoding = Encoding::of(spec.sample_format, width, spec.bits_per_sample).ok_or_else(|| {
            AudioError::Unsupported {
                path: path.to_path_buf(),
                what: format!(
                    "{}-bit {:?} samples in {width} bytes (expected PCM 8/16/24/32-bit or float 32-bit)",
                    spec.bits_per_sample, spec.sample_format
                ),
            }
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            file: BufReader::new(file),
            encoding,
            channels,
            sample_rate: spec.sample_rate,
            frames_left: samples / channels as u64,
            samples_read: 0,
            bytes: Vec::new(),
            interleaved: Vec::new(),
        })
    }

    /// Samples per second.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Channels in the file (averaged to one on read).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Frames (one sample per channel) not read yet.
    pub fn frames_left(&self) -> u64 {
        self.frames_left
    }

    /// Reads up to `frames` frames, averages each to one sample and appends them to `out`.
    /// Returns how many it read: 0 at the end of the data.
    pub fn read_mono(&mut self, frames: usize, out: &mut Vec<f32>) -> Result<usize, AudioError> {
        let frames = frames.min(usize::try_from(self.frames_left).unwrap_or(usize::MAX));
        let samples = frames * self.channels;
        self.bytes.resize(samples * self.encoding.width(), 0);
        let got = read_up_to(&mut self.file, &mut self.bytes).map_err(|source| AudioError::Io {
            path: self.path.clone(),
            source,
        })?;
        if got < self.bytes.len() {
            let whole = self.samples_read + (got / self.encoding.width()) as u64;
            return Err(AudioError::Malformed {
                path: self.path.clone(),
                format: "WAV",
                reason: format!(
                    "truncated: the data chunk ends after {whole} of {} samples",
                    self.samples_read + (self.frames_left * self.channels as u64)
                ),
            });
        }
        // A mono file's samples go straight into `out`; others are averaged from
        // `interleaved`.
        let mono = self.channels == 1;
        let start = out.len();
        let decoded = if mono {
            self.encoding.decode(&self.bytes, out);
            &out[start..]
        } else {
            self.interleaved.clear();
            self.encoding.decode(&self.bytes, &mut self.interleaved);
            &self.interleaved[..]
        };
        let bad = self.encoding.can_be_non_finite().then(|| {
            decoded
                .iter()
                .enumerate()
                .find(|(_, v)| !v.is_finite())
                .map(|(i, &v)| (i, v))
        });
        if let Some((i, value)) = bad.flatten() {
            out.truncate(start);
            return Err(AudioError::NonFinite {
                path: self.path.clone(),
                index: (self.samples_read + i as u64) as usize,
                value,
            });
        }
        if !mono {
            downmix_into(&self.interleaved, self.channels, out);
        }
        self.samples_read += samples as u64;
        self.frames_left -= frames as u64;
        Ok(frames)
    }
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
    let mut samples = Vec::with_capacity(interleaved.len() / channels);
    downmix_into(&interleaved, channels, &mut samples);
    Ok(Audio {
        samples,
        sample_rate: info.sample_rate,
    })
}

/// Converts each sample's `N` bytes into its place in `out` (as many places as samples).
/// The width is a constant, so the loop is a straight conversion the compiler vectorises.
fn convert_each<const N: usize>(out: &mut [f32], bytes: &[u8], f: impl Fn([u8; N]) -> f32) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(N)) {
        // Every chunk has N bytes.
        *o = f(b.try_into().unwrap_or([0; N]));
    }
}

/// Averages interleaved channels into one, appending to `out`.
fn downmix_into(interleaved: &[f32], channels: usize, out: &mut Vec<f32>) {
    if channels == 1 {
        return out.extend_from_slice(interleaved);
    }
    let inv = 1.0 / channels as f32;
    out.extend(
        interleaved
            .chunks_exact(channels)
            .map(|frame| frame.iter().sum::<f32>() * inv),
    );
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

    /// Writes `frames` frames of `channels` channels with hound (`bytes`-byte containers
    /// of `bits` bits) and returns the file and hound's own decoding of it, scaled and
    /// averaged to mono the way hush did it sample by sample: the reference.
    fn hound_file(
        dir: &Path,
        format: hound::SampleFormat,
        bits: u16,
        bytes: u16,
        channels: u16,
        frames: usize,
    ) -> (PathBuf, Vec<f32>) {
        let p = dir.join(format!("{format:?}-{bits}-in-{bytes}-x{channels}.wav"));
        let spec = hound::WavSpec {
            channels,
            sample_rate: 16_000,
            bits_per_sample: bits,
            sample_format: format,
        };
        let ex = hound::WavSpecEx {
            spec,
            bytes_per_sample: bytes,
        };
        let file = std::io::BufWriter::new(File::create(&p).unwrap());
        let mut w = hound::WavWriter::new_with_spec_ex(file, ex).unwrap();
        let top = 1i64 << (bits - 1);
        let mut x = 0x9e37_79b9u64;
        for i in 0..frames * usize::from(channels) {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Full scale at both ends first, then pseudo-random values.
            let v = match i {
                0 => -top,
                1 => top - 1,
                _ => (x >> 11) as i64 % top * if x & 1 == 0 { 1 } else { -1 },
            };
            match format {
                hound::SampleFormat::Int => w.write_sample(v as i32).unwrap(),
                hound::SampleFormat::Float => w.write_sample(v as f32 / top as f32).unwrap(),
            }
        }
        w.finalize().unwrap();
        let r = hound::WavReader::open(&p).unwrap();
        let interleaved: Vec<f32> = match format {
            hound::SampleFormat::Float => r.into_samples::<f32>().map(Result::unwrap).collect(),
            hound::SampleFormat::Int => {
                let scale = 1.0 / (1u64 << (bits - 1)) as f32;
                r.into_samples::<i32>()
                    .map(|v| v.unwrap() as f32 * scale)
                    .collect()
            }
        };
        let inv = 1.0 / f32::from(channels);
        let mono = interleaved
            .chunks_exact(usize::from(channels))
            .map(|f| {
                if channels == 1 {
                    f[0]
                } else {
                    f.iter().sum::<f32>() * inv
                }
            })
            .collect();
        (p, mono)
    }

    #[test]
    fn wav_blocks_decode_every_encoding_as_hound_does() {
        use hound::SampleFormat::{Float, Int};
        let dir = tempfile::tempdir().unwrap();
        let encodings = [
            (Int, 8, 1),
            (Int, 16, 2),
            (Int, 24, 3),
            (Int, 24, 4),
            (Int, 32, 4),
            (Float, 32, 4),
        ];
        for (format, bits, bytes) in encodings {
            for channels in [1, 2, 3] {
                let (p, want) = hound_file(dir.path(), format, bits, bytes, channels, 1001);
                for block in [1, 7, 160, 5000] {
                    let mut wav = WavBlocks::open(&p).unwrap();
                    assert_eq!(
                        (wav.sample_rate(), wav.channels()),
                        (16_000, channels.into())
                    );
                    let mut got = Vec::new();
                    while wav.read_mono(block, &mut got).unwrap() > 0 {}
                    assert_eq!(
                        got, want,
                        "{format:?} {bits} bits in {bytes} bytes, {channels} ch, blocks of {block}"
                    );
                }
                assert_eq!(read_audio(&p).unwrap().samples, want);
            }
        }
    }

    #[test]
    fn wav_blocks_stop_at_the_end_of_the_data_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let (p, want) = hound_file(dir.path(), hound::SampleFormat::Int, 16, 2, 1, 100);
        // A chunk after the audio (as LIST/INFO often is) is not read as samples.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(b"LIST\x06\0\0\0INFOab");
        std::fs::write(&p, &bytes).unwrap();
        let mut wav = WavBlocks::open(&p).unwrap();
        let mut got = Vec::new();
        assert_eq!(wav.read_mono(1000, &mut got).unwrap(), 100);
        assert_eq!(wav.read_mono(1000, &mut got).unwrap(), 0);
        assert_eq!(got, want);
    }

    #[test]
    fn wav_blocks_name_a_truncation_and_a_non_finite_sample() {
        let dir = tempfile::tempdir().unwrap();
        let (p, _) = hound_file(dir.path(), hound::SampleFormat::Int, 16, 2, 2, 100);
        let bytes = std::fs::read(&p).unwrap();
        let cut = write(dir.path(), "cut.wav", &bytes[..bytes.len() - 41]);
        let mut wav = WavBlocks::open(&cut).unwrap();
        let mut got = Vec::new();
        assert_eq!(wav.read_mono(60, &mut got).unwrap(), 60);
        let e = wav.read_mono(60, &mut got).unwrap_err();
        assert!(
            matches!(e, AudioError::Malformed { .. })
                && e.to_string().contains("cut.wav")
                && e.to_string().contains("after 179 of 200 samples"),
            "{e}"
        );

        // A stereo file's blocks are averaged from their own buffer; a mono file's samples
        // are decoded straight into the caller's: either way a refused block leaves
        // nothing of itself there.
        for (channels, bad, value, block) in [(2, 9, f32::INFINITY, 4), (1, 13, f32::NAN, 8)] {
            let p = dir.path().join(format!("bad-{channels}.wav"));
            let spec = hound::WavSpec {
                channels,
                sample_rate: 16_000,
                bits_per_sample: 32,
                sample_format: hound::SampleFormat::Float,
            };
            let mut w = hound::WavWriter::create(&p, spec).unwrap();
            for i in 0..20 {
                w.write_sample(if i == bad { value } else { 0.25 }).unwrap();
            }
            w.finalize().unwrap();
            let mut wav = WavBlocks::open(&p).unwrap();
            let mut got = Vec::new();
            assert_eq!(wav.read_mono(block, &mut got).unwrap(), block);
            match wav.read_mono(block, &mut got) {
                Err(AudioError::NonFinite { index, .. }) => assert_eq!(index, bad),
                other => panic!("{channels} channels: {other:?}"),
            }
            assert_eq!(got, vec![0.25; block], "the refused block is not appended");
        }
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
