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
