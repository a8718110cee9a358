//! `hush-host simulate`'s flags, run as a user would: a batching it cannot use is refused by
//! name before anything runs.

use std::process::Command;

#[test]
fn zero_local_rows_or_threads_are_refused_by_name_before_anything_runs() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for flag in ["--local-rows", "--local-threads"] {
        let out_dir = dir.path().join(flag.trim_start_matches('-'));
        let out = Command::new(env!("CARGO_BIN_EXE_hush-host"))
            .args(["simulate", flag, "0", "--out"])
            .arg(&out_dir)
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("hush-host runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} 0 was accepted");
        assert!(
            stderr.contains("--local-rows and --local-threads must be ≥ 1"),
            "{flag} 0: {stderr}"
        );
        assert!(!out_dir.exists(), "{flag} 0: the run started ({stderr})");
    }
}
