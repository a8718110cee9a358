//! The C API fed what a careless or hostile caller passes: NULL for every pointer
//! argument, zero lengths, lengths over the documented maxima, unsupported sample rates,
//! samples that are not finite, a missing directory, corrupt and mismatched model
//! packages, bad training tasks, closed and foreign handles. Each call returns its status
//! code with a message naming what was wrong, and nothing crashes.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]
// These tests call the C API as C does: through raw pointers.
#![allow(unsafe_code)]

mod common;

use std::ffi::{c_char, CString};
use std::ptr::{null, null_mut};

use common::{asr, c_path, expect, kws12, kws12_copy, ptr, RATE};
use hush_device::*;
use HushStatus as S;

fn open_spotter(dir: &CString) -> (HushStatus, *mut HushSpotter) {
    let mut h = null_mut();
    // SAFETY: a NUL-terminated path and a pointer to a local.
    let s = unsafe { hush_spotter_open(ptr(dir), null(), &mut h) };
    (s, h)
}

fn open_transcriber(dir: &CString) -> (HushStatus, *mut HushTranscriber) {
    let mut h = null_mut();
    // SAFETY: a NUL-terminated path and a pointer to a local.
    let s = unsafe { hush_transcriber_open(ptr(dir), &mut h) };
    (s, h)
}

/// A training task for the bundled spotter, as JSON.
fn task_json(epochs: u32, layers: Option<Vec<String>>) -> CString {
    let card: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo("models/kws-12/model.json")).unwrap(),
    )
    .unwrap();
    let layers = layers.unwrap_or_else(|| {
        card["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["trainable"].as_bool().unwrap())
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    });
    let task = serde_json::json!({
        "round": 3, "model_version": 1, "deadline_ms": 60000,
        "local": {"epochs": epochs, "batch_size": 4, "lr": 0.01, "example_clip": null, "seed": 9},
        "clip": {"bounds": [1.0], "layers": layers, "normalize_layers": false, "local_noise_std": 0.0}
    });
    CString::new(task.to_string()).unwrap()
}

#[test]
fn spotter_open_refuses_null_pointers_paths_options_and_packages() {
    let dir = kws12();
    let mut h = null_mut();
    // SAFETY (this test): every pointer is NULL, a NUL-terminated string, or points to a
    // local of the type the function writes.
    unsafe {
        expect(
            hush_spotter_open(null(), null(), &mut h),
            S::NullPointer,
            "package_dir",
        );
        assert!(h.is_null());
        expect(
            hush_spotter_open(ptr(&dir), null(), null_mut()),
            S::NullPointer,
            "out",
        );
        expect(
            hush_spotter_default_options(null_mut()),
            S::NullPointer,
            "out",
        );

        // Bad options.
        let mut opts = HushSpotterOptions {
            hop_ms: 0,
            smooth_ms: 0,
            threshold: 0.0,
            refractory_ms: 0,
        };
        expect(hush_spotter_default_options(&mut opts), S::Ok, "");
        assert_eq!(
            (opts.hop_ms, opts.smooth_ms, opts.refractory_ms),
            (100, 500, 1000)
        );
        let bad = [
            (
                HushSpotterOptions {
                    threshold: 1.5,
                    ..opts
                },
                "threshold 1.5",
            ),
            (
                HushSpotterOptions {
                    threshold: f32::NAN,
                    ..opts
                },
                "threshold NaN",
            ),
            (HushSpotterOptions { hop_ms: 0, ..opts }, "hop 0 ms"),
        ];
        for (o, what) in bad {
            expect(
                hush_spotter_open(ptr(&dir), &o, &mut h),
                S::InvalidArgument,
                what,
            );
            assert!(h.is_null());
        }
        // A misaligned options pointer is refused, not read.
        let raw = [0u8; 32];
        let odd = raw.as_ptr().add(1).cast::<HushSpotterOptions>();
        expect(
            hush_spotter_open(ptr(&dir), odd, &mut h),
            S::NullPointer,
            "aligned",
        );
    }

    // Paths: empty, not UTF-8, longer than the maximum (no NUL within it), missing.
    let empty = CString::new("").unwrap();
    expect(open_spotter(&empty).0, S::InvalidArgument, "empty");
    let latin1 = CString::new(vec![b'm', 0xe9]).unwrap();
    expect(open_spotter(&latin1).0, S::InvalidArgument, "UTF-8");
    let long = CString::new(vec![b'a'; HUSH_MAX_PATH_BYTES + 1]).unwrap();
    expect(open_spotter(&long).0, S::TooLong, "4096");
    let missing = CString::new("/nonexistent/hush/model").unwrap();
    let (s, h) = open_spotter(&missing);
    expect(s, S::NotFound, "/nonexistent/hush/model");
    assert!(h.is_null());

    // Packages: the recogniser is the wrong kind; an empty directory, a garbled
    // model.json and a truncated or garbled model.onnx are bad packages.
    expect(
        open_spotter(&asr()).0,
        S::WrongModelKind,
        "speech recogniser",
    );
    let tmp = tempfile::tempdir().unwrap();
    expect(
        open_spotter(&c_path(tmp.path())).0,
        S::BadPackage,
        "model.json",
    );
    let broken = kws12_copy();
    let onnx = broken.path().join("model.onnx");
    let bytes = std::fs::read(&onnx).unwrap();
    std::fs::write(&onnx, &bytes[..bytes.len() / 2]).unwrap();
    expect(
        open_spotter(&c_path(broken.path())).0,
        S::BadPackage,
        "model.onnx",
    );
    let garbled: Vec<u8> = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ (i as u8 | 1))
        .collect();
    std::fs::write(&onnx, garbled).unwrap();
    expect(
        open_spotter(&c_path(broken.path())).0,
        S::BadPackage,
        "model.onnx",
    );
    let broken = kws12_copy();
    std::fs::write(
        broken.path().join("model.json"),
        "{\"task\": \"kws\", \"labels\": 3",
    )
    .unwrap();
    expect(
        open_spotter(&c_path(broken.path())).0,
        S::BadPackage,
        "model.json",
    );
    // A file where the directory should be.
    let file = c_path(&common::repo("models/kws-12/model.json"));
    expect(open_spotter(&file).0, S::BadPackage, "model.json");
}

#[test]
fn enable_vad_refuses_nulls_thresholds_missing_and_foreign_models_and_late_calls() {
    let vad = c_path(&common::repo("models/vad/silero_vad_16k_sequence.onnx"));
    let (s, h) = open_spotter(&kws12());
    expect(s, S::Ok, "");
    // SAFETY: NUL-terminated paths (or NULL), a live handle, then a closed one.
    unsafe {
        expect(
            hush_spotter_enable_vad(h, null(), 0.05),
            S::NullPointer,
            "vad_model",
        );
        expect(
            hush_spotter_enable_vad(null_mut(), ptr(&vad), 0.05),
            S::NullPointer,
            "spotter",
        );
        for bad in [0.0, 1.0, -0.5, f32::NAN] {
            expect(
                hush_spotter_enable_vad(h, ptr(&vad), bad),
                S::InvalidArgument,
                "threshold",
            );
        }
        let missing = c_path(&common::repo("models/vad/no-such.onnx"));
        expect(
            hush_spotter_enable_vad(h, ptr(&missing), 0.05),
            S::NotFound,
            "no-such.onnx",
        );
        let foreign = c_path(&common::repo("models/kws-12/model.onnx"));
        expect(
            hush_spotter_enable_vad(h, ptr(&foreign), 0.05),
            S::BadPackage,
            "Silero VAD",
        );
        // Refused calls left the spotter ungated: the gate can still be set, once.
        expect(hush_spotter_enable_vad(h, ptr(&vad), 0.05), S::Ok, "");
        expect(
            hush_spotter_enable_vad(h, ptr(&vad), 0.05),
            S::InvalidArgument,
            "gate already",
        );
        expect(hush_spotter_close(h), S::Ok, "");
        expect(
            hush_spotter_enable_vad(h, ptr(&vad), 0.05),
            S::InvalidHandle,
            "",
        );

        // After samples were pushed, a gate would count from the wrong start: refused.
        let (s, h) = open_spotter(&kws12());
        expect(s, S::Ok, "");
        let pcm = vec![0.0f32; 1600];
        let mut n = 0usize;
        let pushed = hush_spotter_push(h, pcm.as_ptr(), pcm.len(), RATE, null_mut(), 0, &mut n);
        expect(pushed, S::Ok, "");
        expect(
            hush_spotter_enable_vad(h, ptr(&vad), 0.05),
            S::InvalidArgument,
            "first push",
        );
        expect(hush_spotter_close(h), S::Ok, "");
    }
}

#[test]
fn spotter_push_refuses_nulls_lengths_rates_samples_and_dead_handles() {
    let (s, h) = open_spotter(&kws12());
    expect(s, S::Ok, "");
    let pcm = vec![0.0f32; 1600];
    let mut out = [HushDetection {
        time_s: 0.0,
        score: 0.0,
        label_index: 0,
        label: [0; HUSH_MAX_LABEL_BYTES],
    }; 4];
    let mut n = 99usize;
    let mut rate = 0u32;
    // SAFETY (this test): every pointer is NULL, or points to a local or a Vec of at
    // least the length passed with it — except where a length over the maximum is
    // passed, which the API refuses before reading.
    unsafe {
        expect(hush_spotter_sample_rate(h, &mut rate), S::Ok, "");
        assert_eq!(rate, RATE);
        expect(
            hush_spotter_sample_rate(h, null_mut()),
            S::NullPointer,
            "out",
        );
        expect(
            hush_spotter_sample_rate(null(), &mut rate),
            S::NullPointer,
            "spotter",
        );

        let push = |pcm: *const f32, len, rate, out: *mut HushDetection, cap, n: *mut usize| {
            hush_spotter_push(h, pcm, len, rate, out, cap, n)
        };
        let o = out.as_mut_ptr();
        expect(
            push(null(), 1600, RATE, o, 4, &mut n),
            S::NullPointer,
            "pcm",
        );
        assert_eq!(n, 0, "the count is reset even on failure");
        expect(
            push(pcm.as_ptr(), 1600, RATE, null_mut(), 4, &mut n),
            S::NullPointer,
            "out",
        );
        expect(
            push(pcm.as_ptr(), 1600, RATE, o, 4, null_mut()),
            S::NullPointer,
            "out_len",
        );
        expect(
            hush_spotter_push(null_mut(), pcm.as_ptr(), 1600, RATE, o, 4, &mut n),
            S::NullPointer,
            "spotter",
        );
        // Zero lengths: no samples (NULL allowed) hands over nothing; a zero-capacity
        // output (NULL allowed) keeps detections for later.
        expect(push(null(), 0, RATE, o, 4, &mut n), S::Ok, "");
        assert_eq!(n, 0);
        expect(
            push(pcm.as_ptr(), 1600, RATE, null_mut(), 0, &mut n),
            S::Ok,
            "",
        );
        // Over the maximum: refused before the buffer is read.
        let m = format!("{HUSH_MAX_PUSH_SAMPLES}");
        expect(
            push(pcm.as_ptr(), HUSH_MAX_PUSH_SAMPLES + 1, RATE, o, 4, &mut n),
            S::TooLong,
            &m,
        );
        expect(
            push(pcm.as_ptr(), usize::MAX, RATE, o, 4, &mut n),
            S::TooLong,
            &m,
        );
        // Rates other than the model's.
        for r in [0, 8_000, 44_100, 48_000, u32::MAX] {
            let msg = expect(
                push(pcm.as_ptr(), 1600, r, o, 4, &mut n),
                S::UnsupportedSampleRate,
                "16000 Hz",
            );
            assert!(msg.contains(&format!("{r} Hz")), "{msg}");
        }
        // Samples that are not finite.
        let mut bad = pcm.clone();
        bad[700] = f32::INFINITY;
        expect(
            push(bad.as_ptr(), 1600, RATE, o, 4, &mut n),
            S::InvalidArgument,
            "pcm[700]",
        );
        bad[700] = f32::NAN;
        expect(
            push(bad.as_ptr(), 1600, RATE, o, 4, &mut n),
            S::InvalidArgument,
            "NaN",
        );

        expect(hush_spotter_pending(h, null_mut()), S::NullPointer, "out");
        expect(
            hush_spotter_pending(null(), &mut n),
            S::NullPointer,
            "spotter",
        );

        // Closed, closed twice, and handles that were never opened or are of another kind.
        expect(hush_spotter_close(h), S::Ok, "");
        expect(
            push(pcm.as_ptr(), 1600, RATE, o, 4, &mut n),
            S::InvalidHandle,
            "not an open HushSpotter",
        );
        expect(hush_spotter_close(h), S::InvalidHandle, "closed already");
        expect(hush_spotter_close(null_mut()), S::NullPointer, "spotter");
        let fake = std::ptr::without_provenance_mut::<HushSpotter>(0xdead_beef);
        expect(
            hush_spotter_sample_rate(fake, &mut rate),
            S::InvalidHandle,
            "0xdeadbeef",
        );
        let (s, t) = open_transcriber(&asr());
        expect(s, S::Ok, "");
        let as_spotter = t.cast::<HushSpotter>();
        expect(
            hush_spotter_pending(as_spotter, &mut n),
            S::InvalidHandle,
            "HushSpotter",
        );
        expect(hush_transcriber_close(t), S::Ok, "");
    }
}

#[test]
fn transcriber_refuses_nulls_lengths_rates_buffers_and_packages() {
    let mut t = null_mut();
    // SAFETY (this test): as in the spotter tests.
    unsafe {
        expect(
            hush_transcriber_open(null(), &mut t),
            S::NullPointer,
            "package_dir",
        );
        expect(
            hush_transcriber_open(ptr(&asr()), null_mut()),
            S::NullPointer,
            "out",
        );
    }
    expect(
        open_transcriber(&kws12()).0,
        S::WrongModelKind,
        "keyword spotter",
    );
    let missing = CString::new("/nonexistent/asr").unwrap();
    expect(
        open_transcriber(&missing).0,
        S::NotFound,
        "/nonexistent/asr",
    );
    let (s, t) = open_transcriber(&asr());
    expect(s, S::Ok, "");

    let pcm = common::corpus_clip("kws/yes/01fddb35_nohash_0.flac");
    let mut text = [0 as c_char; 256];
    let mut len = 99usize;
    let mut rate = 0;
    // SAFETY: as above.
    unsafe {
        expect(hush_transcriber_sample_rate(t, &mut rate), S::Ok, "");
        assert_eq!(rate, RATE);
        expect(
            hush_transcriber_sample_rate(t, null_mut()),
            S::NullPointer,
            "out",
        );
        let run = |pcm: *const f32, n, rate, beam, text: *mut c_char, cap, len: *mut usize| {
            hush_transcribe(t, pcm, n, rate, beam, text, cap, len)
        };
        let (p, n, x) = (pcm.as_ptr(), pcm.len(), text.as_mut_ptr());
        expect(
            run(null(), n, RATE, 0, x, 256, &mut len),
            S::NullPointer,
            "pcm",
        );
        expect(
            run(p, n, RATE, 0, null_mut(), 256, &mut len),
            S::NullPointer,
            "text",
        );
        expect(
            run(p, n, RATE, 0, x, 256, null_mut()),
            S::NullPointer,
            "text_len",
        );
        expect(
            hush_transcribe(null_mut(), p, n, RATE, 0, x, 256, &mut len),
            S::NullPointer,
            "transcriber",
        );
        expect(
            run(p, 0, RATE, 0, x, 256, &mut len),
            S::InvalidArgument,
            "`len` is 0",
        );
        expect(
            run(null(), 0, RATE, 0, x, 256, &mut len),
            S::InvalidArgument,
            "`len` is 0",
        );
        let m = format!("{HUSH_MAX_TRANSCRIBE_SAMPLES}");
        expect(
            run(
                p,
                HUSH_MAX_TRANSCRIBE_SAMPLES + 1,
                RATE,
                0,
                x,
                256,
                &mut len,
            ),
            S::TooLong,
            &m,
        );
        expect(
            run(p, n, 22_050, 0, x, 256, &mut len),
            S::UnsupportedSampleRate,
            "22050 Hz",
        );
        expect(
            run(p, n, RATE, HUSH_MAX_BEAM + 1, x, 256, &mut len),
            S::InvalidArgument,
            "beam",
        );
        let mut bad = pcm.clone();
        bad[3] = f32::NEG_INFINITY;
        expect(
            run(bad.as_ptr(), n, RATE, 0, x, 256, &mut len),
            S::InvalidArgument,
            "pcm[3]",
        );

        // A zero-capacity buffer (NULL allowed) asks for the size; one byte short of the
        // NUL is too small too; then the text fits.
        expect(
            run(p, n, RATE, 0, null_mut(), 0, &mut len),
            S::BufferTooSmall,
            "text_cap",
        );
        let needed = len;
        expect(
            run(p, n, RATE, 0, x, needed, &mut len),
            S::BufferTooSmall,
            "NUL",
        );
        assert_eq!(len, needed);
        expect(run(p, n, RATE, 0, x, needed + 1, &mut len), S::Ok, "");
        assert_eq!(len, needed);
        assert_eq!(text[needed], 0);

        expect(hush_transcriber_close(t), S::Ok, "");
        expect(
            run(p, n, RATE, 0, x, 256, &mut len),
            S::InvalidHandle,
            "HushTranscriber",
        );
        expect(
            hush_transcriber_close(t),
            S::InvalidHandle,
            "closed already",
        );
        expect(
            hush_transcriber_close(null_mut()),
            S::NullPointer,
            "transcriber",
        );
    }
}

#[test]
fn train_round_refuses_nulls_lengths_rates_tasks_and_packages() {
    let dir = kws12();
    let task = task_json(1, None);
    let yes = common::corpus_clip("kws/yes/01fddb35_nohash_0.flac");
    let label = CString::new("yes").unwrap();
    let clip = HushClip {
        pcm: yes.as_ptr(),
        len: yes.len(),
        sample_rate: RATE,
        label: label.as_ptr(),
    };
    let clips = [clip, clip];
    let mut update = vec![0u8; 1 << 20];
    let mut len = 99usize;
    let mut record = HushPrivacyRecord {
        round: 77,
        ..Default::default()
    };
    let (u, cap) = (update.as_mut_ptr(), update.len());
    let train = |dir: *const c_char,
                 task: *const c_char,
                 clips: *const HushClip,
                 count: usize,
                 update: *mut u8,
                 cap: usize,
                 len: *mut usize,
                 record: *mut HushPrivacyRecord| {
        // SAFETY (this test): every pointer is NULL, a NUL-terminated string, or points
        // to a local or Vec of at least the length passed with it — except where a
        // length over the maximum is passed, which the API refuses before reading.
        unsafe { hush_train_round(dir, task, 5, clips, count, update, cap, len, record) }
    };
    let (d, k, c) = (ptr(&dir), ptr(&task), clips.as_ptr());
    expect(
        train(null(), k, c, 2, u, cap, &mut len, &mut record),
        S::NullPointer,
        "package_dir",
    );
    assert_eq!(
        (len, record.round),
        (0, 0),
        "outputs are reset even on failure"
    );
    expect(
        train(d, null(), c, 2, u, cap, &mut len, &mut record),
        S::NullPointer,
        "task_json",
    );
    expect(
        train(d, k, null(), 2, u, cap, &mut len, &mut record),
        S::NullPointer,
        "clips",
    );
    expect(
        train(d, k, c, 2, null_mut(), cap, &mut len, &mut record),
        S::NullPointer,
        "update",
    );
    expect(
        train(d, k, c, 2, u, cap, null_mut(), &mut record),
        S::NullPointer,
        "update_len",
    );
    expect(
        train(d, k, c, 2, u, cap, &mut len, null_mut()),
        S::NullPointer,
        "record",
    );
    let no_pcm = [
        clip,
        HushClip {
            pcm: null(),
            ..clip
        },
    ];
    let p = no_pcm.as_ptr();
    expect(
        train(d, k, p, 2, u, cap, &mut len, &mut record),
        S::NullPointer,
        "clips[1].pcm",
    );
    let no_label = [HushClip {
        label: null(),
        ..clip
    }];
    let p = no_label.as_ptr();
    expect(
        train(d, k, p, 1, u, cap, &mut len, &mut record),
        S::NullPointer,
        "clips[0].label",
    );

    // Zero lengths.
    expect(
        train(d, k, c, 0, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "`clip_count` is 0",
    );
    expect(
        train(d, k, null(), 0, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "`clip_count` is 0",
    );
    let empty = [clip, HushClip { len: 0, ..clip }];
    let p = empty.as_ptr();
    expect(
        train(d, k, p, 2, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "clips[1].len",
    );
    let blank = CString::new("").unwrap();
    let unlabelled = [HushClip {
        label: blank.as_ptr(),
        ..clip
    }];
    let p = unlabelled.as_ptr();
    expect(
        train(d, k, p, 1, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "clips[0].label",
    );
    // A zero-capacity update buffer (NULL allowed) asks for the size, without training.
    expect(
        train(d, k, c, 2, null_mut(), 0, &mut len, &mut record),
        S::BufferTooSmall,
        "nothing was trained",
    );
    assert!(len > 10_000, "{len}");
    expect(
        train(d, k, c, 2, u, len - 1, &mut len, &mut record),
        S::BufferTooSmall,
        "update_cap",
    );

    // Over the maxima.
    let m = format!("{HUSH_MAX_TRAIN_CLIPS}");
    expect(
        train(
            d,
            k,
            c,
            HUSH_MAX_TRAIN_CLIPS + 1,
            u,
            cap,
            &mut len,
            &mut record,
        ),
        S::TooLong,
        &m,
    );
    let long = [
        clip,
        HushClip {
            len: HUSH_MAX_CLIP_SAMPLES + 1,
            ..clip
        },
    ];
    let p = long.as_ptr();
    expect(
        train(d, k, p, 2, u, cap, &mut len, &mut record),
        S::TooLong,
        "clips[1].pcm",
    );
    let wordy = CString::new("w".repeat(HUSH_MAX_LABEL_BYTES)).unwrap();
    let p = [HushClip {
        label: wordy.as_ptr(),
        ..clip
    }];
    expect(
        train(d, k, p.as_ptr(), 1, u, cap, &mut len, &mut record),
        S::TooLong,
        "clips[0].label",
    );
    let huge = CString::new(vec![b' '; HUSH_MAX_TASK_JSON_BYTES + 1]).unwrap();
    expect(
        train(d, ptr(&huge), c, 2, u, cap, &mut len, &mut record),
        S::TooLong,
        "task_json",
    );

    // Rates and samples.
    let slow = [
        clip,
        HushClip {
            sample_rate: 8_000,
            ..clip
        },
    ];
    let p = slow.as_ptr();
    expect(
        train(d, k, p, 2, u, cap, &mut len, &mut record),
        S::UnsupportedSampleRate,
        "clips[1].sample_rate",
    );
    let mut nan = yes.clone();
    nan[10] = f32::NAN;
    let p = [HushClip {
        pcm: nan.as_ptr(),
        ..clip
    }];
    expect(
        train(d, k, p.as_ptr(), 1, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "clips[0].pcm[10]",
    );

    // Tasks that do not parse or do not fit the model.
    let garbage = CString::new("{\"round\": ").unwrap();
    expect(
        train(d, ptr(&garbage), c, 2, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "not a hush training task",
    );
    let lazy = task_json(0, None);
    expect(
        train(d, ptr(&lazy), c, 2, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "epochs",
    );
    let foreign = task_json(1, Some(vec!["conv.weight".into()]));
    expect(
        train(d, ptr(&foreign), c, 2, u, cap, &mut len, &mut record),
        S::InvalidArgument,
        "clip layers",
    );

    // Packages: missing, the wrong kind, corrupt weights.
    let missing = CString::new("/nonexistent/kws").unwrap();
    expect(
        train(ptr(&missing), k, c, 2, u, cap, &mut len, &mut record),
        S::NotFound,
        "/nonexistent/kws",
    );
    let asr = asr();
    expect(
        train(ptr(&asr), k, c, 2, u, cap, &mut len, &mut record),
        S::WrongModelKind,
        "speech recogniser",
    );
    let broken = kws12_copy();
    let weights = broken.path().join("weights.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 3]).unwrap();
    let b = c_path(broken.path());
    expect(
        train(ptr(&b), k, c, 2, u, cap, &mut len, &mut record),
        S::BadPackage,
        "weights.safetensors",
    );
    assert_eq!((len, record), (0, HushPrivacyRecord::default()));
}
