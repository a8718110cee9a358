//! Checkpoints: a model's tensors, named per layer (`blocks.0.dw.weight`), to and from
//! `weights.safetensors`.
//!
//! The names are the ones every other format uses: the ONNX initializers, the update
//! payloads of federated rounds, the per-layer clipping norms. Loading checks every
//! name and shape against the architecture and refuses extra or missing tensors.
//!
//! ```
//! use hush_models::checkpoint::{load_safetensors, save_safetensors, NamedTensor};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("weights.safetensors");
//! let t = NamedTensor::new("fc.bias", vec![2], vec![0.5, -1.0]).unwrap();
//! save_safetensors(&path, &[t.clone()]).unwrap();
//! assert_eq!(load_safetensors(&path).unwrap(), vec![t]);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::ModelError;

/// One named f32 tensor, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// Per-layer name, e.g. `conv1.weight`.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values, row-major; `data.len()` is the product of `shape`.
    pub data: Vec<f32>,
}

impl NamedTensor {
    /// A tensor; errors when `data` does not fill `shape`.
    pub fn new(name: &str, shape: Vec<usize>, data: Vec<f32>) -> Result<Self, ModelError> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(ModelError::ShapeMismatch {
                name: name.to_string(),
                expected: shape,
                got: vec![data.len()],
            });
        }
        Ok(Self {
            name: name.to_string(),
            shape,
            data,
        })
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the tensor holds no values.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Writes `tensors` to a safetensors file (F32, little-endian), in name order.
pub fn save_safetensors(path: &Path, tensors: &[NamedTensor]) -> Result<(), ModelError> {
    let bytes: Vec<(String, Vec<u8>, &NamedTensor)> = tensors
        .iter()
        .map(|t| {
            let b = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            (t.name.clone(), b, t)
        })
        .collect();
    let mut views = Vec::with_capacity(bytes.len());
    for (name, b, t) in &bytes {
        let view = TensorView::new(Dtype::F32, t.shape.clone(), b).map_err(|e| {
            ModelError::Safetensors {
                path: path.to_path_buf(),
                reason: format!("tensor `{name}`: {e}"),
            }
        })?;
        views.push((name.clone(), view));
    }
    safetensors::serialize_to_file(views, None, path).map_err(|e| ModelError::Safetensors {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Reads every tensor of a safetensors file (F32 only), in name order.
pub fn load_safetensors(path: &Path) -> Result<Vec<NamedTensor>, ModelError> {
    let bytes = std::fs::read(path).map_err(ModelError::io(path))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| ModelError::Safetensors {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let view = st.tensor(&name).map_err(|e| ModelError::Safetensors {
            path: path.to_path_buf(),
            reason: format!("tensor `{name}`: {e}"),
        })?;
        if view.dtype() != Dtype::F32 {
            return Err(ModelError::DtypeMismatch {
                name,
                got: format!("{:?}", view.dtype()),
            });
        }
        let data: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.push(NamedTensor::new(&name, view.shape().to_vec(), data)?);
    }
    Ok(out)
}

/// Tensors to load into a model, taken one by one by name; what is left over at the end
/// is an error ([`TensorSource::finish`]).
#[derive(Debug)]
pub struct TensorSource {
    origin: PathBuf,
    tensors: BTreeMap<String, NamedTensor>,
}

impl TensorSource {
    /// A source from `tensors`, read from `origin` (named in errors).
    pub fn new(origin: &Path, tensors: Vec<NamedTensor>) -> Self {
        Self {
            origin: origin.to_path_buf(),
            tensors: tensors.into_iter().map(|t| (t.name.clone(), t)).collect(),
        }
    }

    /// Takes tensor `name`, checking its shape.
    pub fn take(&mut self, name: &str, expected: &[usize]) -> Result<NamedTensor, ModelError> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.origin.clone(),
                name: name.to_string(),
                expected: expected.to_vec(),
            })?;
        if t.shape != expected {
            return Err(ModelError::FileTensorShape {
                path: self.origin.clone(),
                name: name.to_string(),
                expected: expected.to_vec(),
                got: t.shape,
            });
        }
        Ok(t)
    }

    /// Errors if any tensor was not taken.
    pub fn finish(self, arch: &str) -> Result<(), ModelError> {
        match self.tensors.into_keys().next() {
            Some(name) => Err(ModelError::UnexpectedTensor {
                path: self.origin,
                name,
                arch: arch.to_string(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_name_errors_are_clear() {
        let t = NamedTensor::new("a", vec![2, 2], vec![1.0; 4]).unwrap();
        let mut src = TensorSource::new(Path::new("w.safetensors"), vec![t.clone()]);
        let e = src.take("a", &[4]).unwrap_err().to_string();
        assert!(
            e.contains("w.safetensors")
                && e.contains("`a`")
                && e.contains("[4]")
                && e.contains("[2, 2]"),
            "{e}"
        );
        let mut src = TensorSource::new(Path::new("w.safetensors"), vec![t]);
        let e = src.take("b", &[1]).unwrap_err().to_string();
        assert!(e.contains("`b` is missing"), "{e}");
        let e = src.finish("ds-cnn").unwrap_err().to_string();
        assert!(e.contains("unexpected tensor `a`"), "{e}");
        assert!(NamedTensor::new("x", vec![3], vec![0.0; 2]).is_err());
    }

    #[test]
    fn garbage_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.safetensors");
        std::fs::write(&p, b"not a safetensors file").unwrap();
        let e = load_safetensors(&p).unwrap_err().to_string();
        assert!(e.contains("not a valid safetensors"), "{e}");
    }
}
