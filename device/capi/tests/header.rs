//! The committed header, `include/hush_device.h`, is what cbindgen writes from this
//! crate's source with `cbindgen.toml`: a change to the C API that was not carried into
//! the header fails here. The build itself never runs cbindgen (nothing is generated or
//! downloaded when the library is built).
//!
//! To regenerate it: `HUSH_BLESS=1 cargo test -p hush-device-capi --test header`.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

#[test]
fn the_committed_header_is_what_cbindgen_writes() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .unwrap();
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = crate_dir.join("include/hush_device.h");
    if std::env::var("HUSH_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} is not what cbindgen writes from the source: regenerate it with \
         `HUSH_BLESS=1 cargo test -p hush-device-capi --test header` and commit it",
        path.display()
    );
    let text = String::from_utf8(fresh).unwrap();
    for item in [
        "HushStatus hush_spotter_open(",
        "HushStatus hush_spotter_push(",
        "HushStatus hush_transcribe(",
        "HushStatus hush_train_round(",
        "const char *hush_last_error_message(void)",
        "#define HUSH_MAX_PUSH_SAMPLES 160000",
        "typedef struct HushSpotter HushSpotter;",
        "HUSH_STATUS_INTERNAL_PANIC = 12",
    ] {
        assert!(text.contains(item), "the header lacks {item:?}");
    }
}
