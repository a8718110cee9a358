//! Cross-crate integration tests for hush live in `tests/tests/`: fleet simulations
//! (many devices against a real host), fault injection and end-to-end runs.
//! This library holds only helpers those tests share.

/// Path of the corpus bundled with the repository (`data/corpus`).
pub fn bundled_corpus() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus")
}
