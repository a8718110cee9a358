//! Where training runs, chosen at run time: the CPU (burn's flex backend, always there)
//! or a GPU through burn's wgpu backend on Vulkan (built with the `gpu` feature).
//!
//! A GPU that cannot be used — a build without the `gpu` feature, no Vulkan loader, no
//! driver, no adapter, or a runtime that panics while starting — never stops a run: the
//! choice falls back to the CPU and [`Compute::fallback`] says why, so the caller can
//! print it. burn panics rather than returning an error on some of these paths, so the
//! start is run under `catch_unwind`.
//!
//! ```
//! use hush_models::compute::{select, ComputeKind};
//! let compute = select(ComputeKind::Cpu);
//! assert_eq!(compute.kind, ComputeKind::Cpu);
//! assert!(compute.fallback.is_none());
//! ```

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

/// What the user asked for (`--device cpu|gpu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeKind {
    /// burn's flex CPU backend.
    #[default]
    Cpu,
    /// burn's wgpu backend on Vulkan (the `gpu` feature).
    Gpu,
}

impl FromStr for ComputeKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "gpu" => Ok(Self::Gpu),
            other => Err(format!("--device {other:?}: expected cpu or gpu")),
        }
    }
}

impl fmt::Display for ComputeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Gpu => "gpu",
        })
    }
}

/// The device a run got.
#[derive(Debug, Clone)]
pub struct Compute {
    /// The burn device (without autodiff; call `.autodiff()` for training).
    pub device: Device,
    /// What actually runs: `Gpu` only when a GPU started.
    pub kind: ComputeKind,
    /// Human-readable: the backend and, for a GPU, the adapter.
    pub description: String,
    /// Why a requested GPU is not used, when it is not.
    pub fallback: Option<String>,
}

/// The device for `kind`: the CPU, or the GPU when one starts, else the CPU with the
/// reason in [`Compute::fallback`]. The GPU is started once per process; later calls
/// return the same device (or the same fallback).
pub fn select(kind: ComputeKind) -> Compute {
    let cpu = |fallback: Option<String>| Compute {
        device: Device::flex(),
        kind: ComputeKind::Cpu,
        description: "cpu (burn flex)".into(),
        fallback,
    };
    match kind {
        ComputeKind::Cpu => cpu(None),
        ComputeKind::Gpu => match gpu::start() {
            Ok((device, description)) => Compute {
                device,
                kind: ComputeKind::Gpu,
                description,
                fallback: None,
            },
            Err(reason) => cpu(Some(format!(
                "--device gpu: {reason}; training on the CPU instead"
            ))),
        },
    }
}

#[cfg(feature = "gpu")]
mod gpu {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::OnceLock;

    use burn::tensor::wgpu::WgpuBackend;
    use burn::tensor::{Device, Tensor};

    static STARTED: OnceLock<Result<(Device, String), String>> = OnceLock::new();

    /// Starts burn's wgpu runtime on Vulkan once and checks it with a tiny computation.
    pub(super) fn start() -> Result<(Device, String), String> {
        STARTED.get_or_init(start_once).clone()
    }

    fn start_once() -> Result<(Device, String), String> {
        // burn's runtime may panic (no loader, no adapter); keep the default hook from
        // printing a backtrace for what becomes a one-line fallback message.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let started = catch_unwind(AssertUnwindSafe(|| {
            let (device, setup) = Device::wgpu_options()
                .graphics_api(WgpuBackend::Vulkan)
                .init_with_setup()
                .map_err(|e| format!("no usable Vulkan GPU ({e})"))?;
            let info = setup.adapter.get_info();
            let probe = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &device);
            let sum: f32 = probe.sum().into_scalar();
            if sum != 6.0 {
                return Err(format!("the GPU computed 1+2+3 = {sum}"));
            }
            Ok((
                device,
                format!(
                    "gpu (burn wgpu on Vulkan: {}, {:?}, driver {})",
                    info.name, info.device_type, info.driver_info
                ),
            ))
        }));
        std::panic::set_hook(hook);
        match started {
            Ok(result) => result,
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                Err(format!(
                    "the Vulkan runtime failed to start ({})",
                    msg.lines().next().unwrap_or_default()
                ))
            }
        }
    }
}

#[cfg(not(feature = "gpu"))]
mod gpu {
    use burn::tensor::Device;

    /// Without the `gpu` feature there is nothing to start.
    pub(super) fn start() -> Result<(Device, String), String> {
        Err("this build has no GPU support (rebuild with `--features gpu`)".into())
    }
}

/// Tells the C allocator to keep freed tensor memory for reuse instead of returning it to
/// the kernel: training allocates and frees tensors of megabytes every step, and glibc
/// serves each one over its mmap threshold (128 KiB, adapting upward only to what was
/// freed) with fresh pages from the kernel, zeroed one page fault at a time. On the
/// in-process federated simulation that cost a third of the CPU time (`perf`: page faults,
/// page clearing, unmapping), and 1.5x in updates per second when tuned (BENCHMARKS.md,
/// "Population scale"). Raises the threshold to glibc's largest (32 MiB), the trim
/// threshold to 1 GiB and the heap's growth step to 128 MiB. Process-wide: for a
/// program's `main`, never a library (`hush-host` calls it for every command but `serve`).
/// Does nothing off glibc.
pub fn keep_freed_tensor_memory() {
    keep_freed_memory(32 << 20, 1 << 30, Some(128 << 20));
}

/// [`keep_freed_tensor_memory`] for a device running models: tract allocates every
/// value of a model's run afresh and frees it after its last reader (DS-CNN-S's
/// activations are 250 KB each), and glibc, depending on the order of those frees, can
/// give the pages back after each and fault them in again: 129 000 page faults over 400
/// DS-CNN-S windows in one run of the `op_times` example, 1 900 in another, against 1 700
/// with this in every run (BENCHMARKS.md, "The pointwise op"). onnxruntime keeps its own
/// arena for the same reason. Serves blocks up to 4 MiB from the heap and keeps up to 8 MiB free at its top:
/// the heap stays at the run's peak, which it reached anyway (the peak itself does not
/// grow). Process-wide: for the device's `main`. Does nothing off glibc.
pub fn keep_freed_inference_memory() {
    keep_freed_memory(4 << 20, 8 << 20, None);
}

/// glibc's mmap threshold, trim threshold and, if given, the heap's growth step, in bytes.
#[allow(unsafe_code)]
fn keep_freed_memory(mmap_threshold: i32, trim_threshold: i32, top_pad: Option<i32>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before the program's
    // threads start and glibc serialises it against allocation anyway.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim_threshold);
        if let Some(pad) = top_pad {
            libc::mallopt(libc::M_TOP_PAD, pad);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (mmap_threshold, trim_threshold, top_pad);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for kind in [ComputeKind::Cpu, ComputeKind::Gpu] {
            assert_eq!(kind.to_string().parse::<ComputeKind>(), Ok(kind));
        }
        let err = "cuda".parse::<ComputeKind>().unwrap_err();
        assert!(err.contains("cuda") && err.contains("cpu or gpu"), "{err}");
    }

    #[test]
    fn a_gpu_that_cannot_start_falls_back_to_the_cpu_with_a_reason() {
        let compute = select(ComputeKind::Gpu);
        match compute.kind {
            // A machine with a working Vulkan GPU (and the feature) really gets it.
            ComputeKind::Gpu => assert!(compute.fallback.is_none()),
            ComputeKind::Cpu => {
                let why = compute.fallback.expect("a fallback says why");
                assert!(why.starts_with("--device gpu: "), "{why}");
                assert!(why.ends_with("training on the CPU instead"), "{why}");
                assert_eq!(compute.device, Device::flex());
            }
        }
    }
}
