//! `.npy` (NumPy format 1.0) for feature dumps: little-endian float32, C order.
//!
//! [`write_npy_f32`] writes atomically (a temporary file beside the target, then a
//! rename). [`read_npy_f32`] reads what numpy's `np.save` writes for a float32 array and
//! refuses anything else with a named error.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an `.npy` file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// I/O failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Not a float32 C-order `.npy` file, or one whose size disagrees with its shape.
    #[error("{path}: not a float32 .npy file: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `data.len()` is not the product of `shape`.
    #[error("{len} values do not fill shape {shape:?}")]
    Shape {
        /// Values given.
        len: usize,
        /// Shape given.
        shape: Vec<usize>,
    },
}

/// The bytes of an `.npy` file holding `data` with `shape`.
pub fn npy_bytes(data: &[f32], shape: &[usize]) -> Result<Vec<u8>, NpyError> {
    if shape.iter().product::<usize>() != data.len() {
        return Err(NpyError::Shape {
            len: data.len(),
            shape: shape.to_vec(),
        });
    }
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape_str = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_str}, }}");
    // Magic (6) + version (2) + header length (2) + header + '\n', padded to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + 4 * data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

/// Writes `data` with `shape` to `path` atomically.
pub fn write_npy_f32(path: &Path, data: &[f32], shape: &[usize]) -> Result<(), NpyError> {
    let bytes = npy_bytes(data, shape)?;
    let io = |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out.npy".into());
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// Reads a float32 `.npy` file: values and shape.
pub fn read_npy_f32(path: &Path) -> Result<(Vec<f32>, Vec<usize>), NpyError> {
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_npy_f32(&bytes).map_err(|reason| NpyError::Format {
        path: path.to_path_buf(),
        reason,
    })
}

fn parse_npy_f32(bytes: &[u8]) -> Result<(Vec<f32>, Vec<usize>), String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported format version {v}")),
    };
    let header = bytes
        .get(hstart..hstart + hlen)
        .ok_or("header runs past the end of the file")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    if !header.contains("'descr': '<f4'") {
        return Err(format!("dtype is not little-endian float32: {header}"));
    }
    if header.contains("'fortran_order': True") {
        return Err("Fortran order is not supported".into());
    }
    let open = header.find("'shape': (").ok_or("no shape")? + "'shape': (".len();
    let close = header[open..].find(')').ok_or("unterminated shape")? + open;
    let shape = header[open..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad dimension {s:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("shape overflows")?;
    let body = &bytes[hstart + hlen..];
    if count.checked_mul(4) != Some(body.len()) {
        return Err(format!(
            "shape {shape:?} needs {count} values, the file holds {} bytes",
            body.len()
        ));
    }
    let data = body
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((data, shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_header_alignment() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.npy");
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
        write_npy_f32(&p, &data, &[2, 3]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert_eq!(read_npy_f32(&p).unwrap(), (data, vec![2, 3]));
        assert!(matches!(
            write_npy_f32(&p, &[1.0], &[2]),
            Err(NpyError::Shape { .. })
        ));
        std::fs::write(&p, b"garbage").unwrap();
        assert!(matches!(read_npy_f32(&p), Err(NpyError::Format { .. })));
    }
}
