//! Helpers shared by the tests that run the `hush-device` binary.

use std::process::Command;

/// The `hush-device` binary as a command. Cross-built for ARM, the tests run under
/// qemu-user, which cannot start a second ARM program by itself: `scripts/qemu-runner`
/// tells the test its own path and target, and the binary is started through it too.
pub fn hush_device() -> Command {
    let bin = env!("CARGO_BIN_EXE_hush-device");
    match (
        std::env::var_os("HUSH_CROSS_RUNNER"),
        std::env::var_os("HUSH_CROSS_TARGET"),
    ) {
        (Some(runner), Some(target)) => {
            let mut c = Command::new(runner);
            c.arg(target).arg(bin);
            c
        }
        _ => Command::new(bin),
    }
}

/// Runs `hush-device SUBCOMMAND ARGS…`: (success, stdout, stderr).
pub fn run(subcommand: &str, args: &[&str]) -> (bool, String, String) {
    let out = hush_device().arg(subcommand).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A path in the repository.
#[allow(dead_code)] // not every test binary uses it
pub fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// `seconds` of the corpus's pink noise at 0.01 with `clips` (start in seconds, path under
/// data/corpus/kws) added, written to `dir/name` as a 16 kHz 16-bit WAV.
#[allow(dead_code)] // not every test binary uses it
pub fn corpus_recording(
    dir: &std::path::Path,
    name: &str,
    seconds: usize,
    clips: &[(f64, &str)],
) -> std::path::PathBuf {
    use hush_device::audio::{read_audio, write_wav_i16, Audio};
    const RATE: u32 = 16_000;
    let noise = read_audio(&repo("data/corpus/kws/_background_noise_/pink_noise.flac")).unwrap();
    let mut samples: Vec<f32> = (0..seconds * RATE as usize)
        .map(|i| 0.01 * noise.samples[i % noise.samples.len()])
        .collect();
    for (start, clip) in clips {
        let clip = read_audio(&repo(&format!("data/corpus/kws/{clip}"))).unwrap();
        assert_eq!(clip.sample_rate, RATE);
        let at = (start * f64::from(RATE)) as usize;
        for (s, c) in samples[at..].iter_mut().zip(&clip.samples) {
            *s += c;
        }
    }
    let path = dir.join(name);
    write_wav_i16(
        &path,
        &Audio {
            samples,
            sample_rate: RATE,
        },
    )
    .unwrap();
    path
}

/// Silero VAD's reference (`device/tests/fixtures/vad/`): the signal onnxruntime scored (a
/// keyword clip, then a second of pink noise at 0.01) and its speech probabilities.
#[allow(dead_code)] // not every test binary uses it
pub fn vad_reference() -> (Vec<f32>, Vec<f64>) {
    use hush_device::audio::read_audio;
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("device/tests/fixtures/vad/probs.json")).unwrap(),
    )
    .unwrap();
    let expected: Vec<f64> = fixture["probs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_f64().unwrap())
        .collect();
    let mut signal = read_audio(&repo("data/corpus/kws/stop/01fddb35_nohash_0.flac"))
        .unwrap()
        .samples;
    let noise = read_audio(&repo("data/corpus/kws/_background_noise_/pink_noise.flac")).unwrap();
    signal.extend(noise.samples[..16_000].iter().map(|s| 0.01 * s));
    assert_eq!(signal.len() as u64, fixture["samples"].as_u64().unwrap());
    (signal, expected)
}
