//! `hush-host train` refuses options of the other task, and values out of range, by name,
//! before reading any data.

use std::process::{Command, Output};

fn train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .arg("train")
        .args(["--data", "no-such-corpus", "--out", "no-such-model"])
        .args(args)
        .output()
        .expect("hush-host runs")
}

#[test]
fn options_of_the_other_task_are_refused_by_name() {
    for (args, says) in [
        (
            &["--task", "kws", "--concat", "0.5"][..],
            "--concat and --blank-before-speech apply to --task asr only",
        ),
        (
            &["--task", "kws", "--blank-before-speech"][..],
            "--concat and --blank-before-speech apply to --task asr only",
        ),
        (
            &["--task", "asr", "--cmvn", "mean"][..],
            "--cmvn and --balance-classes apply to --task kws only",
        ),
        (
            &["--task", "asr", "--balance-classes"][..],
            "--cmvn and --balance-classes apply to --task kws only",
        ),
        (&["--task", "asr", "--concat", "2"][..], "--concat"),
        (&["--task", "kws", "--shift-s", "0.7"][..], "--shift-s 0.7"),
        (&["--task", "asr", "--shift-s", "0.5"][..], "--shift-s 0.5"),
        (
            &["--task", "asr", "--time-masks", "2,10"][..],
            "--time-masks, --time-warp and --freq-masks apply to --task kws only",
        ),
        (
            &["--task", "asr", "--time-warp", "8"][..],
            "--time-masks, --time-warp and --freq-masks apply to --task kws only",
        ),
        (
            &["--task", "kws", "--freq-masks", "2"][..],
            "`2`: expected COUNT,WIDTH",
        ),
        (
            &["--task", "kws", "--time-masks", "20,5"][..],
            "COUNT at most 8",
        ),
        (
            &["--task", "kws", "--resynth", "1.5"][..],
            "`1.5`: expected a probability in [0, 1]",
        ),
        (
            &["--task", "asr", "--resynth-f0-hz", "300,100"][..],
            "expected LO,HI in Hz",
        ),
        (
            &["--task", "asr", "--swa-epochs", "5"][..],
            "--swa-epochs applies to --task kws only",
        ),
        (
            &["--task", "kws", "--epochs", "10", "--swa-epochs", "10"][..],
            "fewer than --epochs (10)",
        ),
        (
            &["--task", "kws", "--swa-epochs", "5", "--swa-lr-ratio", "0"][..],
            "a number in (0, 1]",
        ),
        (
            &["--task", "asr", "--high-freq-hz", "4000"][..],
            "--high-freq-hz applies to --task kws only",
        ),
        (
            &["--task", "kws", "--high-freq-hz", "9000"][..],
            "at most Nyquist (8000) Hz",
        ),
    ] {
        let out = train(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!std::path::Path::new("no-such-model").exists());
    }
}
