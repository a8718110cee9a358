//! Cross-crate integration tests for hush live in `tests/tests/`: fleet simulations
//! (many devices against a real host), fault injection and end-to-end runs.
//! This library holds only helpers those tests share.

/// Path of the corpus bundled with the repository (`data/corpus`).
pub fn bundled_corpus() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus")
}

/// Writes a small keyword-spotting model package with fresh weights to `dir` (the 2-conv
/// + 2-FC CNN with 4 and 8 channels over 49 × 20 features, 12 classes) and returns `dir`.
pub fn tiny_kws_package(dir: &std::path::Path) -> std::path::PathBuf {
    use hush_models::arch::{ArchConfig, IoShape, LeakCnnConfig};
    let kws = hush_host::demo::small_kws_config(std::path::Path::new(""), 1, 1);
    let io = IoShape {
        frames: kws.frames,
        bins: kws.features.dim(),
        classes: kws.keywords.len() + 2,
    };
    let arch = ArchConfig::LeakCnn(LeakCnnConfig {
        channels: [4, 8],
        hidden: 16,
        dropout: 0.0,
        ..LeakCnnConfig::new(io)
    });
    let device = burn::tensor::Device::flex();
    // Simulations in other test threads draw from the same process-wide state.
    let model = arch.init_seeded(&device, 3).expect("a valid architecture");
    let features = serde_json::to_value(&kws.features).expect("features serialise");
    let labels = hush_device::dataset::KwsLabels::new(&kws.keywords).classes;
    let card = hush_models::package::ModelCard::new(arch, features, labels, &model)
        .expect("a card for the model");
    hush_models::package::write_package(dir, &card, &model).expect("package written");
    dir.to_path_buf()
}
