//! Every bundled model carries the NNEF archive of its ONNX file beside it (what a device
//! built without tract's ONNX parser reads: `hush_device::infer::graph`), and the archive is
//! current: tract's writer gives the same bytes from the committed ONNX file. A model file
//! changed without its archive fails here, naming the command that writes it again.

use std::path::Path;

use hush_models::export::nnef::{archive_path, onnx_to_nnef};

#[test]
fn the_bundled_archives_are_the_nnef_of_the_bundled_onnx_files() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for model in [
        "kws-12/model.onnx",
        "kws-22/model.onnx",
        "asr/model.onnx",
        "vad/silero_vad_16k_sequence.onnx",
    ] {
        let onnx = models.join(model);
        let archive = archive_path(&onnx);
        let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let written = onnx_to_nnef(&read(&onnx), &onnx).expect("tract writes the archive");
        assert!(
            written == read(&archive),
            "{} is not the archive of {model}: write it again with \
             `hush-host export --model models/{model} --format nnef`",
            archive.display()
        );
    }
}
