//! The C API on real audio gives what hush-device's own commands give: the bundled
//! spotter detects the keywords of `hush-device listen`'s test recording at the times
//! the library's spotter (the loop `listen` runs) reports, however the stream is cut and
//! however small the output buffer; the bundled recogniser transcribes a corpus clip as
//! `hush-device transcribe` does (greedy and beam); and a training round on corpus clips
//! returns update bytes that the host's decoder accepts, whose header matches the
//! privacy record.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]
// These tests call the C API as C does: through raw pointers.
#![allow(unsafe_code)]

mod common;

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use common::{expect, ptr, RATE};
use hush::infer::{AsrRecognizer, Decoder, KeywordSpotter, KwsClassifier, SpotterOptions};
use hush::protocol::{checksum_hex, decode_update, UpdateLimits};
use hush_device::*;
use HushStatus as S;

/// `(time_s, label, score)` of every detection, pushing `chunk` samples at a time into
/// a spotter whose output holds `cap` detections.
fn c_detections(samples: &[f32], chunk: usize, cap: usize) -> Vec<(f64, String, f32)> {
    c_gated_detections(samples, chunk, cap, None)
}

/// [`c_detections`] with the spotter gated by `vad` (model path, threshold) when given.
fn c_gated_detections(
    samples: &[f32],
    chunk: usize,
    cap: usize,
    vad: Option<(&CString, f32)>,
) -> Vec<(f64, String, f32)> {
    let mut h = null_mut();
    let dir = common::kws12();
    let mut found = Vec::new();
    let blank = HushDetection {
        time_s: 0.0,
        score: 0.0,
        label_index: 0,
        label: [0; HUSH_MAX_LABEL_BYTES],
    };
    let mut out = vec![blank; cap];
    let mut n = 0usize;
    // SAFETY: a NUL-terminated path, pointers to locals, and each chunk with its length.
    unsafe {
        expect(hush_spotter_open(ptr(&dir), null(), &mut h), S::Ok, "");
        if let Some((model, threshold)) = vad {
            expect(hush_spotter_enable_vad(h, ptr(model), threshold), S::Ok, "");
        }
        let mut take = |out: &[HushDetection], n: usize| {
            for d in &out[..n] {
                let label = CStr::from_ptr(d.label.as_ptr())
                    .to_str()
                    .unwrap()
                    .to_string();
                found.push((d.time_s, label, d.score));
            }
        };
        for piece in samples.chunks(chunk) {
            let s = hush_spotter_push(
                h,
                piece.as_ptr(),
                piece.len(),
                RATE,
                out.as_mut_ptr(),
                cap,
                &mut n,
            );
            expect(s, S::Ok, "");
            take(&out, n);
        }
        loop {
            let mut pending = 0;
            expect(hush_spotter_pending(h, &mut pending), S::Ok, "");
            if pending == 0 {
                break;
            }
            let s = hush_spotter_push(h, null(), 0, RATE, out.as_mut_ptr(), cap, &mut n);
            expect(s, S::Ok, "");
            assert!(n > 0);
            take(&out, n);
        }
        expect(hush_spotter_close(h), S::Ok, "");
    }
    found
}

#[test]
fn the_spotter_detects_what_listen_detects_when_it_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, samples) = common::recording(tmp.path());
    // The reference: the library's spotter, the loop `hush-device listen` runs (its
    // default options and 20 ms chunks), on the same samples.
    let clf = KwsClassifier::load(&common::repo("models/kws-12")).unwrap();
    let mut spotter = KeywordSpotter::new(&clf, &SpotterOptions::default()).unwrap();
    let mut want = Vec::new();
    for piece in samples.chunks(320) {
        spotter.push(piece, &mut want).unwrap();
    }
    let labels: Vec<&str> = want.iter().map(|d| d.label.as_str()).collect();
    assert_eq!(labels, ["yes", "stop", "no"], "{want:?}");
    let want: Vec<(f64, String, f32)> = want
        .into_iter()
        .map(|d| (d.time_s, d.label, d.score))
        .collect();
    for (d, (start, word, _)) in want
        .iter()
        .zip(common::SCRIPT.iter().filter(|s| !s.1.starts_with('_')))
    {
        assert_eq!(d.1, *word);
        assert!(
            d.0 > start + 0.2 && d.0 < start + 2.0,
            "{word} at {} s",
            d.0
        );
    }

    // Through the C API: the same detections, whatever the chunks and the output size
    // (small odd chunks with room for one; the largest chunk the API takes).
    for (chunk, cap) in [(101, 1), (HUSH_MAX_PUSH_SAMPLES, 16)] {
        let got = c_detections(&samples, chunk, cap);
        assert_eq!(got, want, "chunks of {chunk}, room for {cap}");
    }
    // The label index is the model's.
    let labels = &clf.card().labels;
    assert_eq!(labels.iter().position(|l| l == "stop"), Some(8));

    // Gated on speech by Silero VAD: what the library's gated spotter (`listen --vad`)
    // detects, the same three keywords; on noise alone, nothing.
    let vad_path = common::repo("models/vad/silero_vad_16k_sequence.onnx");
    let gate = || {
        hush::infer::VoiceGate::new(hush::infer::SileroVad::load(&vad_path).unwrap(), 0.05).unwrap()
    };
    let mut gated = KeywordSpotter::new(&clf, &SpotterOptions::default())
        .unwrap()
        .with_voice_gate(gate())
        .unwrap();
    let mut want_gated = Vec::new();
    for piece in samples.chunks(320) {
        gated.push(piece, &mut want_gated).unwrap();
    }
    assert!(gated.windows_skipped() > 0);
    let want_gated: Vec<(f64, String, f32)> = want_gated
        .into_iter()
        .map(|d| (d.time_s, d.label, d.score))
        .collect();
    let gated_labels: Vec<&str> = want_gated.iter().map(|d| d.1.as_str()).collect();
    assert_eq!(gated_labels, ["yes", "stop", "no"], "{want_gated:?}");
    let model = CString::new(vad_path.to_str().unwrap()).unwrap();
    // The same detections at the same times however the stream is cut; the smoothed
    // scores to float rounding only (a large chunk lets the gate see speech later in it,
    // so smoothing may restart at another slot and add in another order).
    for (chunk, cap) in [(101, 1), (HUSH_MAX_PUSH_SAMPLES, 16)] {
        let got = c_gated_detections(&samples, chunk, cap, Some((&model, 0.05)));
        assert_eq!(
            got.len(),
            want_gated.len(),
            "gated, chunks of {chunk}: {got:?}"
        );
        for (g, w) in got.iter().zip(&want_gated) {
            assert_eq!(
                (g.0, &g.1),
                (w.0, &w.1),
                "gated, chunks of {chunk}, room for {cap}"
            );
            assert!(
                (g.2 - w.2).abs() < 1e-5,
                "gated, chunks of {chunk}: {g:?} vs {w:?}"
            );
        }
    }
    let quiet: Vec<f32> = samples[..16_000].iter().map(|s| s * 0.0).collect();
    assert!(c_gated_detections(&quiet, 1600, 4, Some((&model, 0.05))).is_empty());
}

#[test]
fn detections_wait_when_the_output_is_full_and_the_queue_is_bounded() {
    // Without smoothing or refractory period and with a threshold of almost 0, every
    // window fires, whatever the audio: push 3 s with no room, then take them one by one.
    let samples: Vec<f32> = (0..3 * RATE)
        .map(|i| 0.1 * (i as f32 * 0.07).sin())
        .collect();
    let dir = common::kws12();
    // 40 ms: one stride of the streaming package's trunk (2 frames of 20 ms).
    let opts = HushSpotterOptions {
        hop_ms: 40,
        smooth_ms: 0,
        threshold: 1e-30,
        refractory_ms: 0,
    };
    let mut h = null_mut();
    let mut n = 0usize;
    let mut pending = 0usize;
    // SAFETY: a NUL-terminated path, pointers to locals, and the samples with their length.
    unsafe {
        expect(hush_spotter_open(ptr(&dir), &opts, &mut h), S::Ok, "");
        expect(
            hush_spotter_push(
                h,
                samples.as_ptr(),
                samples.len(),
                RATE,
                null_mut(),
                0,
                &mut n,
            ),
            S::Ok,
            "",
        );
        assert_eq!(n, 0);
        expect(hush_spotter_pending(h, &mut pending), S::Ok, "");
        // One detection a window from the first full window on: every 40 ms from 1 s.
        assert!((50..=51).contains(&pending), "{pending}");
        let mut one = [HushDetection {
            time_s: 0.0,
            score: 0.0,
            label_index: 0,
            label: [0; HUSH_MAX_LABEL_BYTES],
        }];
        let mut last = 0.0;
        for _ in 0..3 {
            expect(
                hush_spotter_push(h, null(), 0, RATE, one.as_mut_ptr(), 1, &mut n),
                S::Ok,
                "",
            );
            assert_eq!(n, 1);
            assert!(one[0].time_s > last);
            last = one[0].time_s;
        }
        // Fill the queue to its bound: then audio is refused until it is drained. That is
        // 1024 model runs, minutes under qemu-user; the bookkeeping is the same on every
        // target, so a cross-built run stops here.
        if std::env::var_os("HUSH_CROSS_TARGET").is_some() {
            expect(hush_spotter_close(h), S::Ok, "");
            return;
        }
        let quiet = vec![0.001f32; HUSH_MAX_PUSH_SAMPLES];
        let mut status = S::Ok;
        for _ in 0..20 {
            status = hush_spotter_push(h, quiet.as_ptr(), quiet.len(), RATE, null_mut(), 0, &mut n);
            if status != S::Ok {
                break;
            }
        }
        expect(status, S::BufferTooSmall, "waiting");
        expect(hush_spotter_pending(h, &mut pending), S::Ok, "");
        assert!(pending >= HUSH_MAX_PENDING_DETECTIONS);
        let mut room = vec![one[0]; pending];
        let s = hush_spotter_push(
            h,
            quiet.as_ptr(),
            16,
            RATE,
            room.as_mut_ptr(),
            pending,
            &mut n,
        );
        expect(s, S::BufferTooSmall, "");
        let s = hush_spotter_push(h, null(), 0, RATE, room.as_mut_ptr(), pending, &mut n);
        expect(s, S::Ok, "");
        assert_eq!(n, pending);
        expect(
            hush_spotter_push(h, quiet.as_ptr(), 16, RATE, null_mut(), 0, &mut n),
            S::Ok,
            "",
        );
        expect(hush_spotter_close(h), S::Ok, "");
    }
}

fn c_transcribe(h: *mut HushTranscriber, pcm: &[f32], beam: u32) -> String {
    let mut text = vec![0 as c_char; 1024];
    let mut len = 0usize;
    // SAFETY: the samples with their length, a buffer with its capacity, a local.
    let s = unsafe {
        hush_transcribe(
            h,
            pcm.as_ptr(),
            pcm.len(),
            RATE,
            beam,
            text.as_mut_ptr(),
            text.len(),
            &mut len,
        )
    };
    expect(s, S::Ok, "");
    // SAFETY: hush_transcribe wrote a NUL-terminated string into `text`.
    let got = unsafe { CStr::from_ptr(text.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(got.len(), len);
    got
}

#[test]
fn transcribe_gives_the_text_transcribe_gives() {
    let package = common::repo("models/asr");
    let asr = AsrRecognizer::load(&package).unwrap();
    let mut h = null_mut();
    // SAFETY: a NUL-terminated path and a pointer to a local.
    expect(
        unsafe { hush_transcriber_open(ptr(&common::asr()), &mut h) },
        S::Ok,
        "",
    );
    let mut texts = Vec::new();
    for clip in ["asr/c8946917/0/c8946917-0-0000.flac"] {
        let path = common::repo(&format!("data/corpus/{clip}"));
        let pcm = common::corpus_clip(clip);
        for (beam, decoder) in [(0, Decoder::Greedy), (8, Decoder::Beam(8))] {
            // What `hush-device transcribe [--beam 8]` prints for the file.
            let want = asr.transcribe_file(&path, &decoder).unwrap().text;
            let got = c_transcribe(h, &pcm, beam);
            assert_eq!(got, want, "{clip}, beam {beam}");
            texts.push(got);
        }
    }
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");
    expect(hush_transcriber_close(h), S::Ok, "");
}

#[test]
fn a_training_round_returns_an_update_the_host_accepts_and_its_record() {
    let dir = common::kws12();
    let card: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo("models/kws-12/model.json")).unwrap(),
    )
    .unwrap();
    let layout: Vec<(String, Vec<usize>)> = card["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["trainable"].as_bool().unwrap())
        .map(|p| {
            let shape = p["shape"].as_array().unwrap();
            (
                p["name"].as_str().unwrap().to_string(),
                shape.iter().map(|d| d.as_u64().unwrap() as usize).collect(),
            )
        })
        .collect();
    let layers: Vec<&str> = layout.iter().map(|(n, _)| n.as_str()).collect();
    let bounds: Vec<f32> = layers.iter().map(|_| 0.05).collect();
    let task = serde_json::json!({
        "round": 12, "model_version": 4, "deadline_ms": 60000,
        "local": {"epochs": 2, "batch_size": 3, "lr": 0.05, "example_clip": 1.0, "seed": 5},
        "clip": {"bounds": bounds, "layers": layers, "normalize_layers": false, "local_noise_std": 0.001}
    });
    let task = CString::new(task.to_string()).unwrap();

    let words = [
        ("yes", "yes"),
        ("no", "no"),
        ("stop", "stop"),
        ("_unknown_", "hello"),
    ];
    let audio: Vec<(Vec<f32>, CString)> = words
        .iter()
        .map(|(dir, label)| {
            let pcm = common::corpus_clip(&format!("kws/{dir}/01fddb35_nohash_0.flac"));
            (pcm, CString::new(*label).unwrap())
        })
        .collect();
    let clips: Vec<HushClip> = audio
        .iter()
        .map(|(pcm, label)| HushClip {
            pcm: pcm.as_ptr(),
            len: pcm.len(),
            sample_rate: RATE,
            label: label.as_ptr(),
        })
        .collect();
    let device_id = 0x5eed;
    let mut record = HushPrivacyRecord::default();
    let mut len = 0usize;
    // SAFETY (both calls): NUL-terminated strings, the clips with their count (each with
    // its samples and label alive), a buffer with its capacity, locals.
    let s = unsafe {
        hush_train_round(
            ptr(&dir),
            ptr(&task),
            device_id,
            clips.as_ptr(),
            clips.len(),
            null_mut(),
            0,
            &mut len,
            &mut record,
        )
    };
    expect(s, S::BufferTooSmall, "nothing was trained");
    let needed = len;
    let mut update = vec![0u8; needed];
    let s = unsafe {
        hush_train_round(
            ptr(&dir),
            ptr(&task),
            device_id,
            clips.as_ptr(),
            clips.len(),
            update.as_mut_ptr(),
            update.len(),
            &mut len,
            &mut record,
        )
    };
    expect(s, S::Ok, "");
    assert_eq!(len, needed, "the size asked for is the size written");

    // The host's decoder: size, checksum, names, shapes, finiteness.
    let limits = UpdateLimits::for_layout(layout.clone());
    let body = &update[..len];
    let decoded = decode_update(body, Some(&checksum_hex(body)), &limits).unwrap();
    let h = &decoded.header;
    assert_eq!((record.round, h.round), (12, 12));
    assert_eq!((record.model_version, h.model_version), (4, 4));
    assert_eq!((record.device_id, h.device_id), (device_id, device_id));
    assert_eq!(record.format_version, u32::from(h.format_version));
    assert_eq!(record.update_bytes, len as u64);
    assert_eq!(record.layers as usize, layout.len());
    assert_eq!(format!("{:08x}", record.checksum_crc32), checksum_hex(body));
    assert_eq!(
        (record.examples, record.steps),
        (4, 4),
        "2 epochs of 2 batches"
    );
    assert_eq!(record.local_noise_std, f64::from(0.001f32));
    assert_eq!(record.example_clip, 1.0);
    assert_eq!(record.normalized_layers, 0);
    let sensitivity = (layout.len() as f64 * 0.05f64.powi(2)).sqrt();
    assert!(
        (record.clip_bound - sensitivity).abs() < 1e-6,
        "{}",
        record.clip_bound
    );
    // The record's norm is the update's, and within the bound, layer by layer too.
    let norm: f64 = decoded
        .layers
        .iter()
        .flat_map(|l| l.data.iter())
        .map(|v| f64::from(*v).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!(
        (record.update_norm - norm).abs() < 1e-4 * norm.max(1e-3),
        "{} vs {norm}",
        record.update_norm
    );
    assert!(record.update_norm <= record.clip_bound * (1.0 + 1e-5));
    for (l, n) in decoded.layers.iter().zip(&h.layer_norms) {
        assert!(*n <= 0.05 * (1.0 + 1e-5), "{}: {n}", l.name);
    }
    assert!(norm > 0.0, "training moved the weights");
}
