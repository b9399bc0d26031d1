//! Devices: real GPUs through cudarc's driver API (dynamic loading: libcuda is looked for at run
//! time, so the addon builds and loads without CUDA), or the CPU emulation of the kernels (tests).
//!
//! Every device runs its work on the legacy default stream of its primary context, and the store
//! synchronizes after every operation: errors belong to the call that caused them, timings in JS
//! are wall-clock times of finished work, and nothing is in flight when a buffer is freed.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as cu, sys};

use super::kernels::{self, KERNELS};
use super::{emu, nvrtc};
use crate::error::{Error, Result};

/// A device address (a host address on the emulation).
pub type DevPtr = u64;

/// A device's memory and kernels. A `DevPtr` is a raw address (on the emulation, a host address),
/// so every method that takes one is `unsafe`: the caller vouches that it addresses memory of a
/// live buffer of this device (cuda/store.rs keeps that bookkeeping). Allocation takes a non-zero
/// size (a zero-byte buffer is no buffer: the store keeps none for an empty tensor).
pub trait Device: Send + Sync {
    /// "cuda:0 NVIDIA H200 (sm_90)" or "emu:1".
    fn label(&self) -> &str;
    fn ordinal(&self) -> usize;
    /// A zero-filled buffer of `bytes` bytes.
    fn alloc(&self, bytes: NonZeroU64) -> Result<DevPtr>;
    /// Frees a buffer.
    ///
    /// # Safety
    /// `p` was returned by `alloc` of this device and was not freed since; nothing uses it after
    /// this call and no work on it is in flight.
    unsafe fn free(&self, p: DevPtr);
    /// Zeroes `bytes` bytes at `p`.
    ///
    /// # Safety
    /// `[p, p + bytes)` lies inside one live buffer of this device.
    unsafe fn memset0(&self, p: DevPtr, bytes: u64) -> Result<()>;
    /// Copies `src` to `dst` on this device.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` lies inside one live buffer of this device.
    unsafe fn htod(&self, dst: DevPtr, src: &[u8]) -> Result<()>;
    /// Copies `dst.len()` bytes at `src` on this device into `dst`.
    ///
    /// # Safety
    /// `[src, src + dst.len())` lies inside one live buffer of this device.
    unsafe fn dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<()>;
    /// A copy within this device.
    ///
    /// # Safety
    /// `[dst, dst + bytes)` and `[src, src + bytes)` each lie inside one live buffer of this device.
    unsafe fn dtod(&self, dst: DevPtr, src: DevPtr, bytes: u64) -> Result<()>;
    /// A copy into this device from another one (peer copy on GPUs).
    ///
    /// # Safety
    /// `[dst, dst + bytes)` lies inside one live buffer of this device and `[src, src + bytes)`
    /// inside one live buffer of `src_dev`.
    unsafe fn copy_from_peer(&self, dst: DevPtr, src_dev: &dyn Device, src: DevPtr, bytes: u64) -> Result<()> {
        let mut host = vec![0u8; bytes as usize];
        // SAFETY: the caller's contract, for each device.
        unsafe {
            src_dev.dtoh(&mut host, src)?;
            self.htod(dst, &host)
        }
    }
    /// Launches `kernel` (a name of kernels::KERNELS) on `grid` blocks of `block` threads.
    ///
    /// # Safety
    /// `args[i]` points to a live value of the type of the kernel's i-th parameter in kernels.cu
    /// (cuLaunchKernel's convention), for every parameter; every device pointer among those values
    /// addresses a live buffer of this device that holds everything the kernel reads or writes
    /// with these arguments. The values and buffers stay alive until `sync()`.
    unsafe fn launch(&self, kernel: &str, grid: u32, block: u32, args: &mut [*mut c_void]) -> Result<()>;
    fn sync(&self) -> Result<()>;
    /// (free, total) bytes of device memory, as the driver reports them.
    fn mem_info(&self) -> Result<(u64, u64)>;
    /// Threads per block of every launch (a power of two <= 256).
    fn block(&self) -> u32;
    /// Blocks of a grid-stride launch at most.
    fn max_grid(&self) -> u32;
    fn as_any(&self) -> &dyn Any;
}

fn drv(label: &str, what: &str, e: cu::DriverError) -> Error {
    Error(format!("{label}: {what} failed: {e:?}"))
}

/// A GPU: its primary context and the kernels module loaded into it.
pub struct CudaDevice {
    ordinal: usize,
    label: String,
    ctx: sys::CUcontext,
    funcs: Vec<sys::CUfunction>,
    sms: u32,
    /// How the module was built (for messages and docs/cuda.md's log).
    pub kernels_from: String,
}

// SAFETY: a CUDA context and its functions may be used from any thread once made current
// (every method calls set_current first).
unsafe impl Send for CudaDevice {}
// SAFETY: as for Send: every method makes the context current before it uses it.
unsafe impl Sync for CudaDevice {}

impl CudaDevice {
    fn current(&self) -> Result<()> {
        // SAFETY: the context is a retained primary context that is never released.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(|e| drv(&self.label, "cuCtxSetCurrent", e))
    }

    /// Opens device `ordinal`; `image(cc)` gives the module image for a compute capability.
    fn open(ordinal: usize, image: &mut dyn FnMut((i32, i32)) -> Result<(Vec<u8>, String)>) -> Result<CudaDevice> {
        let l0 = format!("cuda:{ordinal}");
        let dev = cu::device::get(ordinal as i32).map_err(|e| drv(&l0, "cuDeviceGet", e))?;
        let attr = |a: sys::CUdevice_attribute| -> Result<i32> {
            // SAFETY: dev comes from cuDeviceGet.
            unsafe { cu::device::get_attribute(dev, a) }.map_err(|e| drv(&l0, "cuDeviceGetAttribute", e))
        };
        use sys::CUdevice_attribute::*;
        let cc = (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
        let sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32;
        let name = cu::device::get_name(dev).unwrap_or_else(|_| "unknown device".into());
        let label = format!("cuda:{ordinal} {name} (sm_{}{})", cc.0, cc.1);
        // SAFETY: dev comes from cuDeviceGet; the primary context is retained for the process.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }.map_err(|e| drv(&label, "cuDevicePrimaryCtxRetain", e))?;
        let mut d = CudaDevice { ordinal, label, ctx, funcs: Vec::new(), sms, kernels_from: String::new() };
        d.current()?;
        let (img, from) = image(cc)?;
        // SAFETY: img is a PTX text (NUL-terminated) or a CUBIN produced by NVRTC.
        let module = unsafe { cu::module::load_data(img.as_ptr() as *const c_void) }
            .map_err(|e| drv(&d.label, &format!("cuModuleLoadData of the kernels ({from})"), e))?;
        for name in KERNELS {
            // SAFETY: the module is loaded and never unloaded.
            let f = unsafe { cu::module::get_function(module, CString::new(*name).expect("no NUL")) }
                .map_err(|e| drv(&d.label, &format!("cuModuleGetFunction({name})"), e))?;
            d.funcs.push(f);
        }
        d.kernels_from = from;
        Ok(d)
    }
}

impl Device for CudaDevice {
    fn label(&self) -> &str {
        &self.label
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn alloc(&self, bytes: NonZeroU64) -> Result<DevPtr> {
        let bytes = bytes.get();
        let size = usize::try_from(bytes).map_err(|_| Error(format!("{}: cannot allocate {bytes} bytes", self.label)))?;
        self.current()?;
        // SAFETY: plain device allocation of a non-zero size; zeroed below before anyone reads it.
        let p = unsafe { cu::malloc_sync(size) }.map_err(|e| {
            let (free, total) = self.mem_info().unwrap_or((0, 0));
            Error(format!("{}: cannot allocate {bytes} bytes ({e:?}; device free {free} of {total} bytes)", self.label))
        })?;
        // SAFETY: p is the buffer of `bytes` bytes just allocated; on failure it is freed once and
        // never returned.
        unsafe {
            if let Err(e) = self.memset0(p, bytes) {
                self.free(p);
                return Err(e);
            }
        }
        Ok(p)
    }
    unsafe fn free(&self, p: DevPtr) {
        if self.current().is_ok() {
            // SAFETY: the caller's contract (p came from alloc, is freed once, nothing in flight).
            let _ = unsafe { cu::free_sync(p) };
        }
    }
    unsafe fn memset0(&self, p: DevPtr, bytes: u64) -> Result<()> {
        self.current()?;
        // SAFETY: [p, p + bytes) lies in one allocation (the caller's contract).
        unsafe { cu::memset_d8_sync(p, 0, bytes as usize) }.map_err(|e| drv(&self.label, "cuMemsetD8", e))
    }
    unsafe fn htod(&self, dst: DevPtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: [dst, dst + len) lies in one allocation (the caller's contract).
        unsafe { cu::memcpy_htod_sync(dst, src) }.map_err(|e| drv(&self.label, "cuMemcpyHtoD", e))
    }
    unsafe fn dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: [src, src + len) lies in one allocation (the caller's contract); the copy is synchronous.
        unsafe { cu::memcpy_dtoh_sync(dst, src) }.map_err(|e| drv(&self.label, "cuMemcpyDtoH", e))
    }
    unsafe fn dtod(&self, dst: DevPtr, src: DevPtr, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: both ranges lie in allocations of this device (the caller's contract).
        unsafe { cu::memcpy_dtod_sync(dst, src, bytes as usize) }.map_err(|e| drv(&self.label, "cuMemcpyDtoD", e))
    }
    unsafe fn copy_from_peer(&self, dst: DevPtr, src_dev: &dyn Device, src: DevPtr, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let Some(s) = src_dev.as_any().downcast_ref::<CudaDevice>() else {
            let mut host = vec![0u8; bytes as usize];
            // SAFETY: the caller's contract, for each device.
            unsafe {
                src_dev.dtoh(&mut host, src)?;
                return self.htod(dst, &host);
            }
        };
        s.sync()?;
        self.current()?;
        // SAFETY: both ranges lie in allocations of their contexts (the caller's contract);
        // cuMemcpyPeer is synchronous for the host and needs no peer access (the driver stages it
        // when there is none).
        unsafe { sys::cuMemcpyPeer(dst, self.ctx, src, s.ctx, bytes as usize) }
            .result()
            .map_err(|e| drv(&self.label, &format!("cuMemcpyPeer from {}", s.label), e))?;
        self.sync()
    }
    unsafe fn launch(&self, kernel: &str, grid: u32, block: u32, args: &mut [*mut c_void]) -> Result<()> {
        let k = kernels::index(kernel).ok_or_else(|| Error(format!("{}: no kernel named {kernel}", self.label)))?;
        self.current()?;
        // SAFETY: the caller's contract: args point to values of the kernel's parameter types
        // (cuda/store.rs builds them from the signatures in kernels.cu), the device pointers among
        // them cover what the kernel touches, and everything stays alive until sync().
        unsafe { cu::launch_kernel(self.funcs[k], (grid, 1, 1), (block, 1, 1), 0, std::ptr::null_mut(), args) }
            .map_err(|e| drv(&self.label, &format!("launch of {kernel} ({grid} x {block})"), e))
    }
    fn sync(&self) -> Result<()> {
        self.current()?;
        cu::ctx::synchronize().map_err(|e| drv(&self.label, "kernel or copy (reported at cuCtxSynchronize)", e))
    }
    fn mem_info(&self) -> Result<(u64, u64)> {
        self.current()?;
        let (f, t) = cu::mem_get_info().map_err(|e| drv(&self.label, "cuMemGetInfo", e))?;
        Ok((f as u64, t as u64))
    }
    fn block(&self) -> u32 {
        256
    }
    fn max_grid(&self) -> u32 {
        self.sms * 16
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An emulated device: host memory and the kernels run by the emulation library (emu.rs).
pub struct EmuDevice {
    ordinal: usize,
    label: String,
    lib: Arc<emu::EmuLib>,
    block: u32,
    allocs: Mutex<HashMap<u64, std::alloc::Layout>>,
}

impl EmuDevice {
    pub fn new(ordinal: usize, lib: Arc<emu::EmuLib>, block: u32) -> EmuDevice {
        EmuDevice { ordinal, label: format!("emu:{ordinal}"), lib, block, allocs: Mutex::new(HashMap::new()) }
    }
    fn check(&self, p: DevPtr, bytes: u64, what: &str) -> Result<()> {
        let a = self.allocs.lock().expect("emu allocs");
        let ok = a.iter().any(|(&b, l)| p >= b && p.checked_add(bytes).is_some_and(|e| e <= b + l.size() as u64));
        if !ok {
            return Err(Error(format!("{}: {what}: [{p:#x}, +{bytes}) is not inside one allocation", self.label)));
        }
        Ok(())
    }
}

impl Device for EmuDevice {
    fn label(&self) -> &str {
        &self.label
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn alloc(&self, bytes: NonZeroU64) -> Result<DevPtr> {
        let bytes = bytes.get();
        let layout = usize::try_from(bytes)
            .ok()
            .and_then(|size| std::alloc::Layout::from_size_align(size, 256).ok())
            .ok_or_else(|| Error(format!("{}: cannot allocate {bytes} bytes", self.label)))?;
        // SAFETY: the layout has a non-zero size (NonZeroU64).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Error(format!("{}: out of memory allocating {bytes} bytes", self.label)));
        }
        self.allocs.lock().expect("emu allocs").insert(p as u64, layout);
        Ok(p as u64)
    }
    unsafe fn free(&self, p: DevPtr) {
        if let Some(l) = self.allocs.lock().expect("emu allocs").remove(&p) {
            // SAFETY: allocated by alloc with this layout (an unknown p is ignored); the caller
            // does not use it again.
            unsafe { std::alloc::dealloc(p as *mut u8, l) };
        }
    }
    unsafe fn memset0(&self, p: DevPtr, bytes: u64) -> Result<()> {
        self.check(p, bytes, "memset")?;
        // SAFETY: checked to lie in one allocation.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, bytes as usize) };
        Ok(())
    }
    unsafe fn htod(&self, dst: DevPtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.check(dst, src.len() as u64, "htod")?;
        // SAFETY: checked.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }
    unsafe fn dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.check(src, dst.len() as u64, "dtoh")?;
        // SAFETY: checked.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    unsafe fn dtod(&self, dst: DevPtr, src: DevPtr, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.check(dst, bytes, "dtod")?;
        self.check(src, bytes, "dtod")?;
        // SAFETY: checked; ranges of distinct tensors do not overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes as usize) };
        Ok(())
    }
    unsafe fn launch(&self, kernel: &str, grid: u32, block: u32, args: &mut [*mut c_void]) -> Result<()> {
        // SAFETY: the caller's contract (the emulation runs the kernels on host memory).
        unsafe { self.lib.launch(kernel, grid, block, args) }.map_err(|e| Error(format!("{}: {e}", self.label)))
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn mem_info(&self) -> Result<(u64, u64)> {
        let used: u64 = self.allocs.lock().expect("emu allocs").values().map(|l| l.size() as u64).sum();
        let total = 1u64 << 36;
        Ok((total.saturating_sub(used), total))
    }
    fn block(&self) -> u32 {
        self.block
    }
    fn max_grid(&self) -> u32 {
        64
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The devices of this process.
pub struct Devices {
    pub list: Vec<Arc<dyn Device>>,
    pub emulated: bool,
    /// One line: what was found and how the kernels were built.
    pub summary: String,
}

/// Whether the CUDA driver library can be loaded (checked before any cudarc call: cudarc panics
/// when it is absent), and the names tried.
pub fn driver_library() -> (bool, String) {
    // SAFETY: only tries to dlopen the candidate names.
    let present = unsafe { sys::is_culib_present() };
    // cudarc tries more names (Windows-style ones too); these are the ones a Linux machine has
    let mut names: Vec<String> = cudarc::get_lib_name_candidates("cuda").into_iter().filter(|n| n.starts_with("libcuda.so")).collect();
    names.dedup();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    (present, format!("{} through the dynamic loader (LD_LIBRARY_PATH, ldconfig)", names.join(", ")))
}

/// The driver version and device count (after checking for the library).
pub fn driver_info() -> Result<(i32, usize)> {
    let (present, tried) = driver_library();
    if !present {
        return Err(Error(format!("CUDA driver library (libcuda.so) not found: tried {tried}")));
    }
    cu::init().map_err(|e| Error(format!("CUDA driver library found but cuInit failed: {e:?}")))?;
    let mut v: std::ffi::c_int = 0;
    // SAFETY: the driver library is loaded and initialized.
    unsafe { sys::cuDriverGetVersion(&mut v) }.result().map_err(|e| Error(format!("cuDriverGetVersion failed: {e:?}")))?;
    let n = cu::device::get_count().map_err(|e| Error(format!("cuDeviceGetCount failed: {e:?}")))?;
    Ok((v, n.max(0) as usize))
}

/// Opens every GPU, building the kernels once per compute capability (kernels::image).
pub fn open_cuda() -> Result<Devices> {
    let (version, count) = driver_info()?;
    if count == 0 {
        return Err(Error(format!("CUDA driver {}.{} found, but it reports no device", version / 1000, (version % 1000) / 10)));
    }
    let mut cache: HashMap<(i32, i32), (Vec<u8>, String)> = HashMap::new();
    let mut list: Vec<Arc<dyn Device>> = Vec::new();
    let mut froms = Vec::new();
    for o in 0..count {
        let mut image = |cc: (i32, i32)| -> Result<(Vec<u8>, String)> {
            if let Some(x) = cache.get(&cc) {
                return Ok(x.clone());
            }
            let x = kernels::image(cc)?;
            cache.insert(cc, x.clone());
            Ok(x)
        };
        let d = CudaDevice::open(o, &mut image)?;
        froms.push(format!("{}: {}", d.label, d.kernels_from));
        list.push(Arc::new(d));
    }
    let nv = nvrtc::get().map(|n| format!("NVRTC {}.{}", n.version.0, n.version.1)).unwrap_or_else(|_| "no NVRTC".into());
    Ok(Devices {
        summary: format!(
            "CUDA driver {}.{} with {count} device(s) [{}]; {nv}",
            version / 1000,
            (version % 1000) / 10,
            froms.join("; ")
        ),
        list,
        emulated: false,
    })
}

/// The emulation library at `path` (CLIP_PARITY_CUDA_EMU), with CLIP_PARITY_CUDA_EMU_DEVICES devices
/// (default 2) and CLIP_PARITY_CUDA_EMU_BLOCK threads per block (default 256).
///
/// # Safety
/// As [`emu::EmuLib::load`]: `path` names a library built by `emu::build`.
pub unsafe fn open_emu(path: &str) -> Result<Devices> {
    // SAFETY: the caller's contract.
    let lib = Arc::new(unsafe { emu::EmuLib::load(path) }?);
    let env_num = |k: &str, d: u32| -> Result<u32> {
        match std::env::var(k) {
            Ok(v) if !v.is_empty() => v.parse::<u32>().map_err(|_| Error(format!("{k}: \"{v}\" is not a number"))),
            _ => Ok(d),
        }
    };
    let n = env_num("CLIP_PARITY_CUDA_EMU_DEVICES", 2)?.clamp(1, 64) as usize;
    let block = env_num("CLIP_PARITY_CUDA_EMU_BLOCK", 256)?;
    if !(1..=256).contains(&block) || !block.is_power_of_two() {
        return Err(Error(format!("CLIP_PARITY_CUDA_EMU_BLOCK: {block} must be a power of two in [1, 256]")));
    }
    Ok(emu_devices(lib, n, block))
}

pub fn emu_devices(lib: Arc<emu::EmuLib>, n: usize, block: u32) -> Devices {
    let path = lib.path.clone();
    Devices {
        list: (0..n).map(|o| Arc::new(EmuDevice::new(o, lib.clone(), block)) as Arc<dyn Device>).collect(),
        emulated: true,
        summary: format!(
            "CUDA kernels emulated on the CPU ({path}): {n} emulated device(s), {block} threads per block; not a GPU"
        ),
    }
}

/// The devices of this process: opened once (CLIP_PARITY_CUDA_EMU selects the emulation). A failure
/// is not remembered: the next call tries again.
pub fn devices() -> Result<Arc<Devices>> {
    static DEVICES: Mutex<Option<Arc<Devices>>> = Mutex::new(None);
    let mut g = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = g.as_ref() {
        return Ok(d.clone());
    }
    let opened = std::panic::catch_unwind(|| match std::env::var("CLIP_PARITY_CUDA_EMU") {
        // SAFETY: CLIP_PARITY_CUDA_EMU names the emulation library built by emu::build (a test
        // setting, docs/cuda.md); the environment is trusted here as it is for LD_LIBRARY_PATH
        // and CLIP_PARITY_NVRTC.
        Ok(p) if !p.is_empty() => unsafe { open_emu(&p) },
        _ => open_cuda(),
    })
    .unwrap_or_else(|p| {
        let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        Err(Error(format!("CUDA: internal error while opening the devices (panic: {})", msg.unwrap_or_default())))
    })?;
    let d = Arc::new(opened);
    *g = Some(d.clone());
    Ok(d)
}
