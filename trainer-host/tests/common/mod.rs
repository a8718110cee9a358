//! Helpers shared by the integration tests (round server, ASR training and pretraining).
#![allow(dead_code, clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::protocol::{
    encode_update, LayerDelta, TrainTask, Update, UpdateHeader, UPDATE_FORMAT_VERSION,
};
use hush_host::corpus::voices::Engine;
use hush_models::arch::{is_trainable, ArchConfig, IoShape, LeakCnnConfig};
use hush_models::checkpoint::NamedTensor;
use hush_models::package::{load_package, write_package, ModelCard};

/// A tiny leak-CNN package (10×10 fbank input, 2 classes, a few hundred weights) in
/// `dir/initial`.
pub fn tiny_package(dir: &Path) -> PathBuf {
    tiny_package_with(dir, false)
}

/// [`tiny_package`] with its streaming form (`frames.onnx`, `head.onnx`) when `streaming`.
pub fn tiny_package_with(dir: &Path, streaming: bool) -> PathBuf {
    let io = IoShape {
        frames: 10,
        bins: 10,
        classes: 2,
    };
    let mut cfg = LeakCnnConfig::new(io);
    cfg.channels = [2, 2];
    cfg.hidden = 4;
    cfg.dropout = 0.0;
    cfg.streaming = streaming;
    let arch = ArchConfig::LeakCnn(cfg);
    let model = arch.init(&Device::flex()).unwrap();
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = 10;
    let card = ModelCard::new(
        arch,
        serde_json::to_value(&features).unwrap(),
        vec!["yes".into(), "no".into()],
        &model,
    )
    .unwrap();
    let out = dir.join("initial");
    write_package(&out, &card, &model).unwrap();
    out
}

/// A tiny package and a host data directory in a temporary directory.
pub struct Fixture {
    _tmp: tempfile::TempDir,
    /// The host's data directory (not created).
    pub data: PathBuf,
    /// The tiny package ([`tiny_package`]).
    pub model: PathBuf,
}

/// A fresh [`Fixture`].
pub fn fixture() -> Fixture {
    fixture_with(false)
}

/// A fresh [`Fixture`] whose package has its streaming form when `streaming`.
pub fn fixture_with(streaming: bool) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_package_with(tmp.path(), streaming);
    let data = tmp.path().join("data");
    Fixture {
        _tmp: tmp,
        data,
        model,
    }
}

/// The trainable tensors of the package in `dir`, in the model's layer order.
pub fn trainable_tensors(dir: &Path) -> Vec<NamedTensor> {
    let (_, model) = load_package(dir, &Device::flex()).unwrap();
    model
        .named_tensors()
        .unwrap()
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .collect()
}

/// The encoded body of a small valid update (every value 1e-3, far under any bound) for
/// `task`, shaped like the package in `model`.
pub fn small_update_body(model: &Path, task: &TrainTask, device: u64) -> Vec<u8> {
    encode_update(&update(&trainable_tensors(model), task, device, 1e-3)).unwrap()
}

/// An update whose every value is `value` (flat norm `|value|·√d`).
pub fn update(layout: &[NamedTensor], task: &TrainTask, device: u64, value: f32) -> Update {
    Update {
        header: UpdateHeader {
            format_version: UPDATE_FORMAT_VERSION,
            model_version: task.model_version,
            round: task.round,
            device_id: device,
            idempotency_key: Update::key(task.round, device),
            layer_norms: vec![],
        },
        layers: layout
            .iter()
            .map(|t| LayerDelta {
                name: t.name.clone(),
                shape: t.shape.iter().map(|&d| d as u32).collect(),
                data: vec![value; t.data.len()],
            })
            .collect(),
    }
}

/// Copies the first `k` utterances of each speaker in `speakers` (LibriSpeech layout).
pub fn slice_corpus(src: &Path, dst: &Path, speakers: &[&str], k: usize) {
    for s in speakers {
        let from = src.join(s).join("0");
        let to = dst.join(s).join("0");
        std::fs::create_dir_all(&to).unwrap();
        let trans = std::fs::read_to_string(from.join(format!("{s}-0.trans.txt"))).unwrap();
        let lines: Vec<&str> = trans.lines().take(k).collect();
        for l in &lines {
            let id = l.split_whitespace().next().unwrap();
            std::fs::copy(
                from.join(format!("{id}.flac")),
                to.join(format!("{id}.flac")),
            )
            .unwrap();
        }
        std::fs::write(to.join(format!("{s}-0.trans.txt")), lines.join("\n") + "\n").unwrap();
    }
}

/// Whether this machine has what a corpus drawn from `engines` needs (sox, the TTS engines,
/// their voices). When something is missing the calling test should return at once: this
/// writes one line, `skipped: TEST: needs WHAT (HOW TO INSTALL)`, to standard error —
/// unless `HUSH_REQUIRE_TOOLS=1` (`scripts/test`, and so CI), where a missing tool fails
/// the test instead.
pub fn has_tools(engines: &[Engine]) -> bool {
    let missing = hush_host::corpus::missing_tools(engines);
    if missing.is_empty() {
        return true;
    }
    // libtest names each test's thread after the test.
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let what = missing.join(", ");
    assert!(
        std::env::var_os("HUSH_REQUIRE_TOOLS").is_none_or(|v| v != "1"),
        "{test} needs {what}, and HUSH_REQUIRE_TOOLS=1 forbids skipping it"
    );
    // Straight to the stream: libtest keeps a passing test's `eprintln!` to itself.
    let _ = writeln!(std::io::stderr(), "skipped: {test}: needs {what}");
    false
}

/// A synthetic keyword corpus (the ten keywords, one take each, one unknown word and one
/// silence clip per speaker, 2 s of each background noise, the default engines) made once
/// per target directory under `CARGO_TARGET_TMPDIR/corpora/<name>` and reused by later
/// runs: the generator writes it whole or not at all, so a corpus found there is
/// complete. `None` (the test skips) where the engines are missing: see [`has_tools`].
pub fn cached_kws_corpus(name: &str, speakers: usize, seed: u64) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("corpora")
        .join(name);
    if dir.join("speakers.tsv").is_file() {
        return Some(dir);
    }
    if !has_tools(&Engine::DEFAULT) {
        return None;
    }
    let mut cfg = hush_host::corpus::SynthConfig::new(dir.clone());
    cfg.speakers = speakers;
    cfg.words = [
        "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
    ]
    .map(String::from)
    .to_vec();
    cfg.unknown_words = 1;
    cfg.noise_seconds = 2.0;
    cfg.seed = seed;
    hush_host::corpus::synthesize(&cfg, &|_, _| {}).unwrap();
    Some(dir)
}

/// burn's CPU backend draws initial weights and dropout masks from one process-wide
/// generator, so two trainings at once in one test binary perturb each other's seeded
/// numbers (PATE's end-to-end student once fell below its bar that way). A test that
/// asserts on a trained model's numbers holds this guard while it trains.
pub fn one_training_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `hush-host`'s own build (`cargo build -p hush-host`: normal and build edges)
/// and its test build (all edges) enable `feature` of the workspace crate `krate`
/// (`cargo tree -i`, offline; no build). A test-only switch must be `(false, true)`.
pub fn feature_in_builds(krate: &str, feature: &str) -> (bool, bool) {
    let tree = |edges: &str| {
        let out = std::process::Command::new(env!("CARGO"))
            .args(["tree", "--offline", "-p", "hush-host", "--prefix", "none"])
            .args(["-e", edges, "-i", krate])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let build = tree("normal,build,features");
    // The query must see the crate's features at all, or `false` would prove nothing.
    assert!(
        build.contains(&format!("{krate} feature \"default\"")),
        "{build}"
    );
    (
        build.contains(feature),
        tree("all,features").contains(feature),
    )
}

/// `hush-host devices enrol --config <config> --quota <quota>` (the operator's command):
/// the enrolment token it prints.
pub fn enrol_with_cli(config: &Path, quota: u64) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["devices", "enrol", "--config"])
        .arg(config)
        .args(["--quota", &quota.to_string(), "--label", "test"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "devices enrol: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A free loopback port (bound, then released for a host to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
