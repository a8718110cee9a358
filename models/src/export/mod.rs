//! Export to inference formats. [`onnx`] writes ONNX (opset 17) from hush's own
//! builder over the public `tract_onnx::pb` prost types; each architecture lays out its
//! graph with it (`write_onnx` in `crate::arch`).

pub mod onnx;
