//! The CPU emulation of the CUDA kernels (tests only): kernels.cu compiled by the host C++ compiler
//! together with emu.hpp / emu_main.cpp into a shared library that runs a launch block by block,
//! the threads of a block as cooperative fibers. The CudaStore runs on it unchanged (EmuDevice), so
//! the kernels, their launch geometry and the host code around them are tested against the cpu
//! backend bitwise on machines without a GPU. What it cannot show: GPU arithmetic differences
//! (kernels.cu avoids depending on them), races the fiber schedule hides, and speed.
//!
//! Build: `build(dir)` (needs `c++`, or $CXX); use: CLIP_PARITY_CUDA_EMU=<the .so>.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const EMU_HPP: &str = include_str!("emu.hpp");
pub const EMU_MAIN: &str = include_str!("emu_main.cpp");

type FnLaunch = unsafe extern "C" fn(*const c_char, c_uint, c_uint, *mut *mut c_void) -> c_int;
type FnNames = unsafe extern "C" fn() -> *const c_char;
type FnU32 = unsafe extern "C" fn(c_uint) -> c_uint;
type FnMul = unsafe extern "C" fn(c_uint, c_uint, c_uint) -> c_uint;
type FnRound = unsafe extern "C" fn(f64, c_int, c_int, c_int) -> f64;
type FnSm = unsafe extern "C" fn(u64) -> u64;

pub struct EmuLib {
    _lib: libloading::Library,
    pub path: String,
    launch: FnLaunch,
    names: FnNames,
    pub f32_to_bf16: FnU32,
    pub f32_to_f16: FnU32,
    pub f16_to_f32: FnU32,
    pub mul_host: FnMul,
    pub round_f64_to: FnRound,
    pub splitmix64: FnSm,
}

// SAFETY: the library serializes launches with a mutex; the helpers are pure functions.
unsafe impl Send for EmuLib {}
// SAFETY: as for Send: the library's mutex serializes launches, the helpers are pure.
unsafe impl Sync for EmuLib {}

impl EmuLib {
    /// Loads the emulation library at `path`.
    ///
    /// # Safety
    /// `path` must name a library built by [`build`] (from emu_main.cpp): loading runs its
    /// initializers, and its symbols are called with the signatures of emu_main.cpp.
    pub unsafe fn load(path: &str) -> Result<EmuLib> {
        // SAFETY: a library built from emu_main.cpp (the caller's contract); its initializers have
        // no preconditions.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| Error(format!("CLIP_PARITY_CUDA_EMU: cannot load {path}: {e}")))?;
        macro_rules! sym {
            ($t:ty, $name:literal) => {
                // SAFETY: the symbol has this signature in emu_main.cpp.
                *unsafe { lib.get::<$t>($name) }.map_err(|e| Error(format!("CLIP_PARITY_CUDA_EMU: {path}: {e}")))?
            };
        }
        Ok(EmuLib {
            path: path.to_string(),
            launch: sym!(FnLaunch, b"cp_emu_launch\0"),
            names: sym!(FnNames, b"cp_emu_kernels\0"),
            f32_to_bf16: sym!(FnU32, b"cp_emu_f32_to_bf16\0"),
            f32_to_f16: sym!(FnU32, b"cp_emu_f32_to_f16\0"),
            f16_to_f32: sym!(FnU32, b"cp_emu_f16_to_f32\0"),
            mul_host: sym!(FnMul, b"cp_emu_mul_host\0"),
            round_f64_to: sym!(FnRound, b"cp_emu_round_f64_to\0"),
            splitmix64: sym!(FnSm, b"cp_emu_splitmix64\0"),
            _lib: lib,
        })
    }

    pub fn kernel_names(&self) -> Vec<String> {
        // SAFETY: returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr((self.names)()) };
        s.to_string_lossy().split_whitespace().map(|x| x.to_string()).collect()
    }

    /// Runs a kernel on the host.
    ///
    /// # Safety
    /// As `Device::launch`: `args[i]` points to a live value of the type of the kernel's i-th
    /// parameter, and the (host) pointers among those values address memory that holds everything
    /// the kernel reads or writes with these arguments.
    pub unsafe fn launch(&self, kernel: &str, grid: u32, block: u32, args: &mut [*mut c_void]) -> std::result::Result<(), String> {
        let name = CString::new(kernel).map_err(|_| "bad kernel name".to_string())?;
        // SAFETY: the caller's contract; name is a NUL-terminated string that outlives the call.
        match unsafe { (self.launch)(name.as_ptr(), grid, block, args.as_mut_ptr()) } {
            0 => Ok(()),
            1 => Err(format!("no kernel named {kernel}")),
            2 => Err(format!("{kernel}: block size {block} out of range")),
            3 => Err(format!("{kernel}: threads of a block did not meet at the same __syncthreads")),
            r => Err(format!("{kernel}: emulation error {r}")),
        }
    }
}

/// Writes the sources into `dir` and compiles the emulation library there; returns its path.
pub fn build(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    for (name, text) in [("kernels.cu", super::kernels::SOURCE), ("emu.hpp", EMU_HPP), ("emu_main.cpp", EMU_MAIN)] {
        std::fs::write(dir.join(name), text).map_err(|e| Error(format!("{}: {e}", dir.join(name).display())))?;
    }
    let out = dir.join(format!("libcp_cuda_emu-{}.so", super::kernels::source_id()));
    if out.exists() {
        return Ok(out);
    }
    let cxx = std::env::var("CXX").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "c++".into());
    let tmp = dir.join(format!("libcp_cuda_emu.{}.tmp.so", std::process::id()));
    let st = std::process::Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math", "-o"])
        .arg(&tmp)
        .arg(dir.join("emu_main.cpp"))
        .output()
        .map_err(|e| Error(format!("cannot run the C++ compiler `{cxx}`: {e}")))?;
    if !st.status.success() {
        return Err(Error(format!("`{cxx}` failed to build the CUDA emulation:\n{}", String::from_utf8_lossy(&st.stderr))));
    }
    std::fs::rename(&tmp, &out).map_err(|e| Error(format!("{}: {e}", out.display())))?;
    Ok(out)
}
