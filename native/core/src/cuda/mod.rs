//! The `cuda` backend: tensors in GPU memory, kernels compiled at run time by NVRTC (or the
//! shipped PTX), through cudarc's driver API with dynamic loading, so that the addon builds and
//! loads on machines without CUDA and reports its absence as an error, never a crash.
//!
//! - device.rs: devices (GPUs through cudarc; the CPU emulation for tests), opened once per process.
//! - kernels.cu / kernels.rs: the kernels and how a device gets its module; nvrtc.rs loads NVRTC.
//! - store.rs: CudaStore, the cpu store's API (crate::TensorStore) on device memory (same
//!   results; see there), on the bookkeeping every store shares (crate::ledger).
//! - emu.rs, emu.hpp, emu_main.cpp: the CPU emulation of the kernels (tests; docs/cuda.md).

pub mod device;
pub mod emu;
pub mod kernels;
pub mod nvrtc;
pub mod store;

pub use store::CudaStore;

/// What `cudaStatus()` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The cuda backend can be used (a driver, a device, and a way to build the kernels).
    pub present: bool,
    /// The devices are the CPU emulation (CLIP_PARITY_CUDA_EMU), not GPUs.
    pub emulated: bool,
    pub message: String,
}

/// Whether CUDA is usable here, and why not. Cheap: loads the driver and counts the devices, but
/// compiles nothing. Never panics (cudarc panics when libcuda is absent: it is looked for first).
pub fn status() -> Status {
    let r = std::panic::catch_unwind(status_inner);
    r.unwrap_or_else(|p| {
        let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        Status { present: false, emulated: false, message: format!("CUDA: internal error (panic: {})", msg.unwrap_or_default()) }
    })
}

fn status_inner() -> Status {
    if std::env::var("CLIP_PARITY_CUDA_EMU").is_ok_and(|p| !p.is_empty()) {
        return match device::devices() {
            Ok(d) => Status { present: true, emulated: true, message: d.summary.clone() },
            Err(e) => Status { present: false, emulated: true, message: e.0 },
        };
    }
    let (version, count) = match device::driver_info() {
        Ok(x) => x,
        Err(e) => return Status { present: false, emulated: false, message: e.0 },
    };
    let driver = format!("CUDA driver {}.{}", version / 1000, (version % 1000) / 10);
    if count == 0 {
        return Status { present: false, emulated: false, message: format!("{driver} found, but it reports no device") };
    }
    let names: Vec<String> = (0..count)
        .map(|o| {
            cudarc::driver::result::device::get(o as i32)
                .and_then(cudarc::driver::result::device::get_name)
                .unwrap_or_else(|_| "?".into())
        })
        .collect();
    let kernels = match nvrtc::get() {
        Ok(n) => Ok(format!("kernels built by NVRTC {}.{} ({})", n.version.0, n.version.1, n.path)),
        Err(e) if kernels::shipped_ptx_current() => Ok(format!("kernels from the shipped PTX (no NVRTC: {})", e.lines().next().unwrap_or(""))),
        Err(e) => Err(e),
    };
    match kernels {
        Ok(k) => Status {
            present: true,
            emulated: false,
            message: format!("{driver} with {count} device(s): {}; {k}", names.join(", ")),
        },
        Err(e) => Status {
            present: false,
            emulated: false,
            message: format!("{driver} with {count} device(s) ({}), but the kernels cannot be built: {e}", names.join(", ")),
        },
    }
}

#[cfg(test)]
mod tests;
