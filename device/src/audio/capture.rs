//! Microphone capture through cpal (feature `mic`): list input devices, open one at its
//! native configuration, move samples out of the callback through the lock-free
//! [`super::ring`], and resample them to the model rate on the reading side.
//!
//! The callback only converts to `f32`, averages channels and enqueues: no allocation, no
//! lock, no resampling. Samples lost to a full ring are counted
//! ([`Capture::overruns`]), and stream errors reported by the backend are counted too.
//!
//! ```no_run
//! use hush_device::audio::capture::{Capture, CaptureConfig};
//! let mut mic = Capture::start(&CaptureConfig { device: None, target_rate: 16_000 })?;
//! let mut samples = Vec::new();
//! while samples.len() < 16_000 {
//!     mic.read(&mut samples)?;
//!     std::thread::sleep(std::time::Duration::from_millis(10));
//! }
//! println!("{} samples lost to overruns", mic.overruns());
//! # Ok::<(), hush_device::audio::capture::CaptureError>(())
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use cpal::{FromSample, SampleFormat, SizedSample};

use super::resample::{ResampleError, StreamResampler};
use super::ring::{sample_ring, RingConsumer, RingProducer};

/// Why capture failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The host lists no input device at all.
    #[error("no audio input device found (host {host})")]
    NoDevice {
        /// The cpal host.
        host: String,
    },
    /// No input device has the requested name.
    #[error("no input device named {name:?}; available: {available}")]
    UnknownDevice {
        /// The name asked for.
        name: String,
        /// The names that exist, comma-separated.
        available: String,
    },
    /// The backend refused an operation.
    #[error("{what} on input device {device:?}: {message}")]
    Backend {
        /// What was being done.
        what: &'static str,
        /// The device.
        device: String,
        /// The backend's message.
        message: String,
    },
    /// The device's native sample format is one hush does not convert.
    #[error("input device {device:?} uses sample format {format}, expected f32, i16, i32 or u16")]
    UnsupportedFormat {
        /// The device.
        device: String,
        /// Its format.
        format: String,
    },
    /// Resampling to the model rate failed.
    #[error("resampling captured audio: {0}")]
    Resample(#[from] ResampleError),
    /// Recording stopped before the requested duration.
    #[error("input device {device:?} delivered {got} of {wanted} samples in {waited_s:.1} s")]
    Stalled {
        /// The device.
        device: String,
        /// Samples received (at the model rate).
        got: usize,
        /// Samples wanted.
        wanted: usize,
        /// Seconds waited.
        waited_s: f64,
    },
}

/// An input device as the host describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct InputDeviceInfo {
    /// Its name (what `--device` matches).
    pub name: String,
    /// Native sample rate of its default configuration (Hz), if it reports one.
    pub sample_rate: Option<u32>,
    /// Native channel count, if it reports one.
    pub channels: Option<u16>,
    /// Native sample format, if it reports one.
    pub sample_format: Option<String>,
    /// Whether it is the host's default input.
    pub is_default: bool,
}

/// Lists the default host's input devices.
pub fn list_input_devices() -> Result<Vec<InputDeviceInfo>, CaptureError> {
    let host = cpal::default_host();
    let default_name = host.default_input_device().map(|d| d.to_string());
    let devices = host.input_devices().map_err(|e| CaptureError::Backend {
        what: "listing devices",
        device: String::new(),
        message: e.to_string(),
    })?;
    let mut out: Vec<InputDeviceInfo> = devices
        .map(|d| {
            let name = d.to_string();
            let cfg = d.default_input_config().ok();
            InputDeviceInfo {
                is_default: default_name.as_deref() == Some(name.as_str()),
                sample_rate: cfg.as_ref().map(|c| c.sample_rate()),
                channels: cfg.as_ref().map(|c| c.channels()),
                sample_format: cfg.as_ref().map(|c| c.sample_format().to_string()),
                name,
            }
        })
        .collect();
    if let (Some(name), false) = (
        &default_name,
        out.iter().any(|d| Some(&d.name) == default_name.as_ref()),
    ) {
        if let Some(d) = host.default_input_device() {
            let cfg = d.default_input_config().ok();
            out.insert(
                0,
                InputDeviceInfo {
                    name: name.clone(),
                    sample_rate: cfg.as_ref().map(|c| c.sample_rate()),
                    channels: cfg.as_ref().map(|c| c.channels()),
                    sample_format: cfg.as_ref().map(|c| c.sample_format().to_string()),
                    is_default: true,
                },
            );
        }
    }
    Ok(out)
}

/// What to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Device name; `None` = the host's default input.
    pub device: Option<String>,
    /// Rate delivered by [`Capture::read`] (the model rate).
    pub target_rate: u32,
}

/// A running capture stream.
pub struct Capture {
    _stream: cpal::Stream,
    rx: RingConsumer,
    resampler: StreamResampler,
    raw: Vec<f32>,
    device: String,
    native_rate: u32,
    channels: u16,
    stream_errors: Arc<AtomicU64>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("device", &self.device)
            .field("native_rate", &self.native_rate)
            .field("channels", &self.channels)
            .finish()
    }
}

fn pick_device(host: &cpal::Host, name: Option<&str>) -> Result<cpal::Device, CaptureError> {
    match name {
        None => host
            .default_input_device()
            .ok_or_else(|| CaptureError::NoDevice {
                host: format!("{:?}", host.id()),
            }),
        Some(name) => {
            let mut names = Vec::new();
            if let Some(d) = host.default_input_device() {
                if d.to_string() == name {
                    return Ok(d);
                }
            }
            let devices = host.input_devices().map_err(|e| CaptureError::Backend {
                what: "listing devices",
                device: name.to_string(),
                message: e.to_string(),
            })?;
            for d in devices {
                let n = d.to_string();
                if n == name {
                    return Ok(d);
                }
                names.push(n);
            }
            Err(CaptureError::UnknownDevice {
                name: name.to_string(),
                available: names.join(", "),
            })
        }
    }
}

fn build<T>(
    device: &cpal::Device,
    config: &cpal::StreamConfig,
    mut tx: RingProducer,
    errors: Arc<AtomicU64>,
) -> Result<cpal::Stream, cpal::Error>
where
    T: SizedSample + Send + 'static,
    f32: FromSample<T>,
{
    let channels = usize::from(config.channels.max(1));
    // Conversion block on the stack: no allocation in the callback.
    let mut block = [0.0f32; 1024];
    let per_block = (block.len() / channels) * channels;
    device.build_input_stream::<T, _, _>(
        *config,
        move |data: &[T], _| {
            for chunk in data.chunks(per_block) {
                for (b, s) in block.iter_mut().zip(chunk) {
                    *b = f32::from_sample_(*s);
                }
                tx.push_interleaved(&block[..chunk.len()], channels);
            }
        },
        move |_err| {
            errors.fetch_add(1, Ordering::Relaxed);
        },
        None,
    )
}

impl Capture {
    /// Opens the device at its default (native) configuration and starts the stream.
    pub fn start(cfg: &CaptureConfig) -> Result<Self, CaptureError> {
        let host = cpal::default_host();
        let device = pick_device(&host, cfg.device.as_deref())?;
        let name = device.to_string();
        let backend = |what: &'static str| {
            let name = name.clone();
            move |e: cpal::Error| CaptureError::Backend {
                what,
                device: name,
                message: e.to_string(),
            }
        };
        let supported = device
            .default_input_config()
            .map_err(backend("reading the default input configuration"))?;
        let config = supported.config();
        let native_rate = config.sample_rate;
        let resampler = StreamResampler::new(native_rate, cfg.target_rate)?;
        let (tx, rx) = sample_ring();
        let errors = Arc::new(AtomicU64::new(0));
        let e = Arc::clone(&errors);
        let stream = match supported.sample_format() {
            SampleFormat::F32 => build::<f32>(&device, &config, tx, e),
            SampleFormat::I16 => build::<i16>(&device, &config, tx, e),
            SampleFormat::I32 => build::<i32>(&device, &config, tx, e),
            SampleFormat::U16 => build::<u16>(&device, &config, tx, e),
            other => {
                return Err(CaptureError::UnsupportedFormat {
                    device: name,
                    format: other.to_string(),
                })
            }
        }
        .map_err(backend("opening the input stream"))?;
        stream
            .play()
            .map_err(backend("starting the input stream"))?;
        Ok(Self {
            _stream: stream,
            rx,
            resampler,
            raw: Vec::with_capacity(super::ring::RING_SLOTS),
            device: name,
            native_rate,
            channels: config.channels,
            stream_errors: errors,
        })
    }

    /// Drains the ring, resamples to the target rate and appends to `out`; returns how
    /// many samples were appended.
    pub fn read(&mut self, out: &mut Vec<f32>) -> Result<usize, CaptureError> {
        self.raw.clear();
        self.rx.pop_into(&mut self.raw, usize::MAX);
        Ok(self.resampler.push(&self.raw, out)?)
    }

    /// Device name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Native rate the device runs at (Hz).
    pub fn native_rate(&self) -> u32 {
        self.native_rate
    }

    /// Native channel count.
    pub fn channels(&self) -> u16 {
        self.channels
    }

    /// Native-rate samples lost because the ring was full.
    pub fn overruns(&self) -> u64 {
        self.rx.overruns()
    }

    /// Callbacks that lost samples.
    pub fn overrun_events(&self) -> u64 {
        self.rx.overrun_events()
    }

    /// Native-rate samples stored before the first loss (`None`: no loss yet).
    pub fn first_overrun_at(&self) -> Option<u64> {
        self.rx.first_overrun_at()
    }

    /// Native-rate samples received through the ring.
    pub fn samples_captured(&self) -> u64 {
        self.rx.pushed()
    }

    /// Errors the backend reported on the running stream.
    pub fn stream_errors(&self) -> u64 {
        self.stream_errors.load(Ordering::Relaxed)
    }
}

/// What a recording went through.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordingReport {
    /// Device name.
    pub device: String,
    /// Its native rate (Hz).
    pub native_rate: u32,
    /// Its channel count.
    pub channels: u16,
    /// Native-rate samples lost to a full ring.
    pub overruns: u64,
    /// Errors the backend reported.
    pub stream_errors: u64,
}

/// Records `seconds` of audio at `cfg.target_rate`. Gives up with
/// [`CaptureError::Stalled`] when the device delivers nothing for `seconds + 5` s.
pub fn record(
    cfg: &CaptureConfig,
    seconds: f64,
) -> Result<(Vec<f32>, RecordingReport), CaptureError> {
    let wanted = (seconds.max(0.0) * f64::from(cfg.target_rate)).round() as usize;
    let mut mic = Capture::start(cfg)?;
    let mut out = Vec::with_capacity(wanted + 4096);
    let started = Instant::now();
    let limit = Duration::from_secs_f64(seconds.max(0.0) + 5.0);
    while out.len() < wanted {
        if mic.read(&mut out)? == 0 {
            if started.elapsed() > limit {
                return Err(CaptureError::Stalled {
                    device: mic.device.clone(),
                    got: out.len(),
                    wanted,
                    waited_s: started.elapsed().as_secs_f64(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    out.truncate(wanted);
    let report = RecordingReport {
        device: mic.device.clone(),
        native_rate: mic.native_rate,
        channels: mic.channels,
        overruns: mic.overruns(),
        stream_errors: mic.stream_errors(),
    };
    Ok((out, report))
}
