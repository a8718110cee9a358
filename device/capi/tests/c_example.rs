//! The C example (`examples/hush_example.c`) compiled with a C compiler against the
//! header and the static library cargo built for this test, then run on `hush-device
//! listen`'s test recording: it prints the keywords at the times the library's spotter
//! reports them, and its misuse checks get their status codes.
//!
//! Natively it uses `cc` (or `$CC`). Cross-built for ARM and run under qemu-user
//! (`scripts/test-arm`), this test runs the cross compiler (`aarch64-linux-gnu-gcc`, a
//! host program qemu-user starts natively) and the example through `scripts/qemu-runner`:
//! the C example runs on the emulated ARM CPU. Without a compiler the test prints one
//! `skipped:` line, and fails instead under `HUSH_REQUIRE_TOOLS=1`.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]
// These tests call the C API as C does: through raw pointers.
#![allow(unsafe_code)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use hush::infer::{KeywordSpotter, KwsClassifier, SpotterOptions};

/// What Rust's standard library needs from the C side when linked statically
/// (`rustc --print native-static-libs` for a staticlib on *-linux-gnu).
const NATIVE_LIBS: [&str; 7] = [
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// The C compiler for the target this test was built for, and the runner for what it
/// builds (qemu-user under a cross build).
fn toolchain() -> (String, Option<(String, String)>) {
    let runner = std::env::var("HUSH_CROSS_RUNNER").ok();
    let target = std::env::var("HUSH_CROSS_TARGET").ok();
    match (runner, target) {
        (Some(runner), Some(target)) => {
            let cc = match target.as_str() {
                "aarch64-unknown-linux-gnu" => "aarch64-linux-gnu-gcc",
                "armv7-unknown-linux-gnueabihf" => "arm-linux-gnueabihf-gcc",
                other => panic!("no C cross compiler known for {other}"),
            };
            (cc.to_string(), Some((runner, target)))
        }
        _ => (std::env::var("CC").unwrap_or_else(|_| "cc".into()), None),
    }
}

/// `libhush_device.a` as cargo built it beside this test (`target/[TRIPLE/]PROFILE/`
/// or its `deps/`).
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [
        deps.join("libhush_device.a"),
        deps.join("../libhush_device.a"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("libhush_device.a is in none of {candidates:?}"))
}

/// What the link needs beyond [`NATIVE_LIBS`]: ALSA when hush-device was built with its
/// microphone in this build (`--features hush-device/mic`, as `scripts/test` and
/// `scripts/test-arm` build the workspace; an app's build of the library leaves it out),
/// from the ARM sysroot of `scripts/cross-sysroot` when cross-built.
fn alsa_args(cross: Option<&str>) -> Vec<String> {
    if !hush::audio::MIC {
        return Vec::new();
    }
    let mut args = Vec::new();
    if let Some(target) = cross {
        let gnu = match target {
            "aarch64-unknown-linux-gnu" => "aarch64-linux-gnu",
            _ => "arm-linux-gnueabihf",
        };
        let lib = common::repo(&format!(".cross/sysroot/{target}/usr/lib/{gnu}"));
        args.push(format!("-L{}", lib.display()));
    }
    args.push("-lasound".into());
    args
}

fn skip_or_fail(why: &str) {
    if std::env::var("HUSH_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("c_example: {why} (HUSH_REQUIRE_TOOLS=1)");
    }
    println!("skipped: c_example: {why}");
}

#[test]
fn the_c_example_spots_the_keywords_and_gets_status_codes_for_misuse() {
    let (cc, runner) = toolchain();
    if Command::new(&cc).arg("--version").output().is_err() {
        return skip_or_fail(&format!("needs a C compiler ({cc})"));
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("hush_example");
    let built = Command::new(&cc)
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-O1",
            "-I",
        ])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("examples/hush_example.c"))
        .arg(staticlib())
        .args(alsa_args(runner.as_ref().map(|(_, t)| t.as_str())))
        .args(NATIVE_LIBS)
        // tract's assembly kernels carry no .note.GNU-stack: ask for a non-executable
        // stack explicitly (the linker would otherwise warn and make it executable).
        .arg("-Wl,-z,noexecstack")
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let (wav, samples) = common::recording(tmp.path());
    let model = common::repo("models/kws-12");
    let mut run = match &runner {
        Some((runner, target)) => {
            let mut c = Command::new(runner);
            c.arg(target).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let out = run.arg(&model).arg(&wav).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "hush_example failed:\n{stdout}\n{stderr}"
    );

    // The reference: the library's spotter (what `hush-device listen` runs).
    let clf = KwsClassifier::load(&model).unwrap();
    let mut spotter = KeywordSpotter::new(&clf, &SpotterOptions::default()).unwrap();
    let mut want = Vec::new();
    for piece in samples.chunks(320) {
        spotter.push(piece, &mut want).unwrap();
    }
    let want: Vec<String> = want
        .iter()
        .map(|d| {
            let index = clf
                .card()
                .labels
                .iter()
                .position(|l| *l == d.label)
                .unwrap();
            format!(
                "detection {:.6} {} {index} {:.6}",
                d.time_s, d.label, d.score
            )
        })
        .collect();
    let got: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("detection "))
        .collect();
    assert_eq!(got, want, "{stdout}");
    let labels: Vec<&str> = got.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    assert_eq!(labels, ["yes", "stop", "no"], "{stdout}");

    assert!(stdout.starts_with("api 1."), "{stdout}");
    for refused in [
        "refused HUSH_STATUS_NULL_POINTER: `package_dir` is NULL",
        "refused HUSH_STATUS_NULL_POINTER: `out` is NULL",
        "refused HUSH_STATUS_NOT_FOUND: /nonexistent/model",
        "refused HUSH_STATUS_UNSUPPORTED_SAMPLE_RATE: `sample_rate` 8000 Hz",
        "refused HUSH_STATUS_NULL_POINTER: `pcm` is NULL",
        "refused HUSH_STATUS_TOO_LONG: `pcm`: 160001 elements",
        "refused HUSH_STATUS_INVALID_HANDLE: ",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(refused)),
            "no line {refused:?} in:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("summary 3 detections in 11.0 s"),
        "{stdout}"
    );
}
