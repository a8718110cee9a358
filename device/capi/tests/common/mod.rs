//! Helpers shared by the C API's tests: the repository's packages and clips, the
//! recording `hush-device listen`'s tests listen to, and reading the last error.

#![allow(dead_code)]

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

use hush::audio::{read_audio, write_wav_i16, Audio};
use hush_device::{hush_last_error_message, hush_status_name, HushStatus};

/// The models' and corpus' rate.
pub const RATE: u32 = 16_000;

/// A path in the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// A path as the C string the API takes.
pub fn c_path(path: &Path) -> CString {
    CString::new(path.to_str().unwrap()).unwrap()
}

/// The bundled keyword spotter and speech recogniser.
pub fn kws12() -> CString {
    c_path(&repo("models/kws-12"))
}

/// The bundled speech recogniser.
pub fn asr() -> CString {
    c_path(&repo("models/asr"))
}

/// A clip of the bundled corpus (16 kHz).
pub fn corpus_clip(path: &str) -> Vec<f32> {
    let a = read_audio(&repo(&format!("data/corpus/{path}"))).unwrap();
    assert_eq!(a.sample_rate, RATE);
    a.samples
}

/// Where each word starts (s) and what it is, in [`recording`] (as in device/tests/listen.rs).
pub const SCRIPT: [(f64, &str, &str); 4] = [
    (1.0, "yes", "yes/01fddb35_nohash_0.flac"),
    (3.5, "_unknown_", "_unknown_/01fddb35_nohash_0.flac"),
    (6.0, "stop", "stop/01fddb35_nohash_0.flac"),
    (8.5, "no", "no/01fddb35_nohash_0.flac"),
];

/// 11 s: the [`SCRIPT`]'s one-second clips over pink noise 40 dB down, written to
/// `dir` as the 16-bit WAV file `hush-device listen`'s test listens to. Returns the file
/// and its samples as read back (what the C example reads).
pub fn recording(dir: &Path) -> (PathBuf, Vec<f32>) {
    let noise = corpus_clip("kws/_background_noise_/pink_noise.flac");
    let mut samples: Vec<f32> = (0..11 * RATE as usize)
        .map(|i| 0.01 * noise[i % noise.len()])
        .collect();
    for (start, _, clip) in SCRIPT {
        let clip = corpus_clip(&format!("kws/{clip}"));
        let at = (start * f64::from(RATE)) as usize;
        for (s, c) in samples[at..].iter_mut().zip(&clip) {
            *s += c;
        }
    }
    let path = dir.join("stream.wav");
    let audio = Audio {
        samples,
        sample_rate: RATE,
    };
    write_wav_i16(&path, &audio).unwrap();
    let back = read_audio(&path).unwrap();
    (path, back.samples)
}

/// The calling thread's last error message.
pub fn last_error() -> String {
    // SAFETY: hush_last_error_message returns a NUL-terminated string, valid until the
    // next hush call on this thread.
    unsafe { CStr::from_ptr(hush_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// A status's name.
pub fn name(status: HushStatus) -> String {
    // SAFETY: hush_status_name returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(hush_status_name(status as i32)) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts that `got` is `want`, and that a failure left a message naming `mentions`
/// (an empty one after success). Returns the message.
#[track_caller]
pub fn expect(got: HushStatus, want: HushStatus, mentions: &str) -> String {
    let message = last_error();
    assert_eq!(
        got,
        want,
        "{} instead of {}: {message}",
        name(got),
        name(want)
    );
    if want == HushStatus::Ok {
        assert_eq!(message, "");
    } else {
        assert!(
            !message.is_empty() && message.contains(mentions),
            "{}: message {message:?} should mention {mentions:?}",
            name(want)
        );
    }
    message
}

/// A C string's pointer.
pub fn ptr(s: &CString) -> *const c_char {
    s.as_ptr()
}

/// Copies the bundled keyword spotter to a fresh directory, to be broken by a test.
pub fn kws12_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.json", "model.onnx", "weights.safetensors"] {
        std::fs::copy(repo("models/kws-12").join(f), dir.path().join(f)).unwrap();
    }
    dir
}
