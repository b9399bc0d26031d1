//! The `cuda` store: every op of the cpu store (crate::TensorStore, implemented by both, so the
//! compiler keeps their APIs equal) on device memory, with the same results: bitwise for everything but the float64 sums of `sum_abs_pow` (deterministic, but
//! summed in another order: within the fp32 tolerance of the cpu's; see kernels.cu).
//!
//! The bookkeeping is the cpu store's own (crate::ledger: ids, shapes, dtypes, owners, the per-rank
//! ledger and every argument check with its message); the storage of a tensor is a device buffer
//! (`Buf`). Ranks map to devices as rank % device count: several ranks may share a device, each
//! with its own ledger. The ledger charges exactly numel * dtype size per tensor; what the device
//! itself reports (free / total, which includes the driver's and the allocator's own use) is read
//! by `device_memory` and recorded beside the ledger by the harness.
//!
//! A few ops run on the host through a cpu mirror of the tensors involved (download, the cpu
//! store's code, upload): exact sums for p other than 1 and 2 (the correctly rounded |x|^p of
//! abspow.rs: CORE-MATH's pow for general p, which the GPU's pow does not reproduce bitwise), the AdamW step, and shards with more than 8
//! dimensions after merging. Hashes are computed on the host after a device-to-host copy.

use std::ffi::c_void;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, MutexGuard};

use half::{bf16, f16};

use super::device::{DevPtr, Device, Devices};
use crate::bail;
use crate::biguint::BigUint;
use crate::dtype::{pow2, DType, Elem};
use crate::error::{Error, Result};
use crate::gen::{Block, GenMode, GenSpec};
use crate::hash::content_hash;
use crate::kernels;
use crate::ledger::{check_p, Ledger, LedgerView};
use crate::optim::{self, AdamW};
use crate::store::{Backend, Store};
use crate::store_api::{load_safetensors_with, save_safetensors_with, DeviceMemory, Mismatch, StoreKind, TensorStore};

/// A tensor of the cuda store: its metadata and its device buffer.
type Tensor = crate::ledger::Tensor<Buf>;

/// Must match CP_SUM_ITEMS, CP_EXACT_CHUNK and CP_MAXD in kernels.cu.
const SUM_ITEMS: u64 = 32;
const EXACT_CHUNK: u64 = 16384;
const MAXD: usize = 8;
const NONE: u64 = u64::MAX;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Geom {
    len: [u64; MAXD],
    gstride: [u64; MAXD],
    gstart: u64,
    ndim: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct GenArgs {
    key: u64,
    unit_d: f64,
    m: u32,
    mode: u32,
    exact: u32,
    unit_f: u32,
    const_bits: u32,
    special_bits: u32,
    special_local: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct BoxArgs {
    len: [u64; MAXD],
    sstride: [u64; MAXD],
    dstride: [u64; MAXD],
    soff: u64,
    doff: u64,
    n: u64,
    ndim: u32,
    pad: u32,
}

// The sizes are the sums of the fields' sizes: no padding (see KernelArg).
const _: () = assert!(std::mem::size_of::<Geom>() == 144);
const _: () = assert!(std::mem::size_of::<GenArgs>() == 48);
const _: () = assert!(std::mem::size_of::<BoxArgs>() == 224);

/// A kernel parameter type, passed by its bytes.
///
/// # Safety
/// Only for `Copy` types without padding bytes (every byte copied is initialized) whose layout
/// is the one of the kernel parameter in kernels.cu.
unsafe trait KernelArg: Copy {}
// SAFETY: primitive types without padding (DevPtr is u64).
unsafe impl KernelArg for u32 {}
// SAFETY: a primitive type without padding.
unsafe impl KernelArg for u64 {}
// SAFETY: a primitive type without padding.
unsafe impl KernelArg for f64 {}
// SAFETY: repr(C) structs whose size is the sum of their fields' sizes (asserted above): no padding.
unsafe impl KernelArg for Geom {}
// SAFETY: repr(C) without padding (its size is asserted above).
unsafe impl KernelArg for GenArgs {}
// SAFETY: repr(C) without padding (its size is asserted above).
unsafe impl KernelArg for BoxArgs {}

/// Kernel arguments: each value copied into 8-byte aligned storage; `ptrs` gives cuLaunchKernel's
/// array of pointers to them.
#[derive(Default)]
struct Args(Vec<Box<[u64]>>);

impl Args {
    fn a<T: KernelArg>(mut self, v: T) -> Self {
        let size = std::mem::size_of::<T>();
        let mut b = vec![0u64; size.div_ceil(8).max(1)].into_boxed_slice();
        // SAFETY: b holds at least size bytes; T is plain data without padding (KernelArg).
        unsafe { std::ptr::copy_nonoverlapping(&v as *const T as *const u8, b.as_mut_ptr() as *mut u8, size) };
        self.0.push(b);
        self
    }
    fn ptrs(&mut self) -> Vec<*mut c_void> {
        self.0.iter_mut().map(|b| b.as_mut_ptr() as *mut c_void).collect()
    }
}

fn sfx(dt: DType) -> &'static str {
    dt.name()
}

fn from_f64_bits(dt: DType, v: f64) -> u32 {
    match dt {
        DType::F32 => <f32 as Elem>::from_f64(v).bits(),
        DType::BF16 => <bf16 as Elem>::from_f64(v).bits(),
        DType::F16 => <f16 as Elem>::from_f64(v).bits(),
    }
}

fn from_f32_bits(dt: DType, v: f32) -> u32 {
    match dt {
        DType::F32 => <f32 as Elem>::from_f32(v).bits(),
        DType::BF16 => <bf16 as Elem>::from_f32(v).bits(),
        DType::F16 => <f16 as Elem>::from_f32(v).bits(),
    }
}

fn bits_to_f64(dt: DType, b: u32) -> f64 {
    match dt {
        DType::F32 => <f32 as Elem>::from_bits(b).to_f64(),
        DType::BF16 => <bf16 as Elem>::from_bits(b).to_f64(),
        DType::F16 => <f16 as Elem>::from_bits(b).to_f64(),
    }
}

fn exp_mask(dt: DType) -> u32 {
    match dt {
        DType::F32 => 0x7f80_0000,
        DType::BF16 => 0x7f80,
        DType::F16 => 0x7c00,
    }
}

/// The host's default NaN for an invalid f32 operation (x86: 0xffc00000), which scale() must write
/// where the cpu backend does (inf * 0).
fn host_default_nan() -> u32 {
    (std::hint::black_box(f32::INFINITY) * std::hint::black_box(0.0f32)).to_bits()
}

fn row_major_strides(shape: &[u64]) -> Vec<u64> {
    let d = shape.len();
    let mut s = vec![1u64; d];
    for k in (0..d.saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// The kernels' index geometry of a block: dims of length 1 dropped, dims contiguous in the
/// global tensor merged; None with more than 8 dims left.
fn geom_of(block: &Block) -> Option<Geom> {
    let gs = row_major_strides(&block.global_shape);
    let gstart: u64 = block.start.iter().zip(&gs).map(|(s, g)| s * g).sum();
    let mut dims: Vec<(u64, u64)> = Vec::new();
    for (&l, &s) in block.len.iter().zip(&gs) {
        if l == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == l * s => *last = (last.0 * l, s),
            _ => dims.push((l, s)),
        }
    }
    if dims.len() > MAXD {
        return None;
    }
    let mut g = Geom { gstart, ndim: dims.len() as u32, ..Default::default() };
    for (k, (l, s)) in dims.into_iter().enumerate() {
        g.len[k] = l;
        g.gstride[k] = s;
    }
    Some(g)
}

/// The global flat index of local element j of a block.
fn global_index(block: &Block, mut j: u64) -> u64 {
    let gs = row_major_strides(&block.global_shape);
    let mut g = 0u64;
    for k in (0..block.len.len()).rev() {
        let l = block.len[k];
        g += (block.start[k] + j % l) * gs[k];
        j /= l;
    }
    g
}

/// A box copy (see kernels.cu Box): dims of length 1 dropped, dims contiguous in both merged.
/// None when the box is empty; Err(dims) when more than 8 dims are left.
fn box_of(len: &[u64], ss: &[u64], ds: &[u64], soff: u64, doff: u64) -> std::result::Result<Option<BoxArgs>, ()> {
    if len.contains(&0) {
        return Ok(None);
    }
    let mut dims: Vec<(u64, u64, u64)> = Vec::new();
    for k in 0..len.len() {
        let (l, s, d) = (len[k], ss[k], ds[k]);
        if l == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == l * s && last.2 == l * d => *last = (last.0 * l, s, d),
            _ => dims.push((l, s, d)),
        }
    }
    if dims.len() > MAXD {
        return Err(());
    }
    let mut b = BoxArgs { soff, doff, n: len.iter().product(), ndim: dims.len() as u32, ..Default::default() };
    for (k, (l, s, d)) in dims.into_iter().enumerate() {
        b.len[k] = l;
        b.sstride[k] = s;
        b.dstride[k] = d;
    }
    Ok(Some(b))
}

/// The same box copy on host bytes (shards of more than 8 merged dims).
#[allow(clippy::too_many_arguments)]
fn box_copy_host(dst: &mut [u8], src: &[u8], es: usize, len: &[u64], ss: &[u64], ds: &[u64], soff: u64, doff: u64) {
    let n: u64 = len.iter().product();
    for j in 0..n {
        let (mut r, mut so, mut dof) = (j, soff, doff);
        for k in (0..len.len()).rev() {
            let c = r % len[k];
            r /= len[k];
            so += c * ss[k];
            dof += c * ds[k];
        }
        let (so, dof) = (so as usize * es, dof as usize * es);
        dst[dof..dof + es].copy_from_slice(&src[so..so + es]);
    }
}

/// Turns the exact kernels' 255 bins (128-bit: lo, hi words) into N (value N * 2^-1074) the way
/// exact.rs does for its own bins.
pub fn bins_to_biguint(words: &[u64], p2: bool) -> BigUint {
    let mut n = BigUint::zero();
    for k in 0..255i32 {
        let v = words[2 * k as usize] as u128 | ((words[2 * k as usize + 1] as u128) << 64);
        let e = k.max(1) - 150; // x = M * 2^e
        let shift = if p2 { 2 * e + 1074 } else { e + 1074 };
        n.add_shifted(v, shift as u32);
    }
    n.normalized()
}

/// A tensor's device buffer: `bytes` bytes at `ptr` on device `dev`; ptr 0 is no buffer (an empty
/// tensor, or one whose buffer is not allocated yet).
struct Buf {
    dev: usize,
    ptr: DevPtr,
    bytes: u64,
}

/// A device scratch buffer, kept between calls (grown when needed).
struct Scratch<'a> {
    guard: MutexGuard<'a, Vec<(DevPtr, u64)>>,
    ptr: DevPtr,
}

pub struct CudaStore {
    table: Ledger<Buf>,
    devs: Arc<Devices>,
    rank_dev: Vec<usize>,
    scratch: Mutex<Vec<(DevPtr, u64)>>,
    dnan: u32,
}

impl Drop for CudaStore {
    fn drop(&mut self) {
        for b in self.table.tensors().map(|t| &t.data) {
            if b.ptr != 0 {
                // SAFETY: the store's own buffer, freed once: the store is dropped; every op
                // synchronizes before it returns, so no work is in flight.
                unsafe { self.devs.list[b.dev].free(b.ptr) };
            }
        }
        let s = self.scratch.get_mut().unwrap_or_else(|p| p.into_inner());
        for (d, (p, bytes)) in s.iter().enumerate() {
            if *bytes > 0 {
                // SAFETY: the store's own scratch buffer, freed once; nothing in flight.
                unsafe { self.devs.list[d].free(*p) };
            }
        }
    }
}

impl CudaStore {
    /// A store on this process's devices (cuda::devices()).
    pub fn new(ranks: usize) -> Result<CudaStore> {
        let devs = super::device::devices()?;
        CudaStore::with_devices(ranks, devs)
    }

    pub fn with_devices(ranks: usize, devs: Arc<Devices>) -> Result<CudaStore> {
        let table = Ledger::new(ranks)?;
        if devs.list.is_empty() {
            bail!("cuda: no device");
        }
        let n = devs.list.len();
        Ok(CudaStore {
            table,
            rank_dev: (0..ranks).map(|r| r % n).collect(),
            scratch: Mutex::new(vec![(0, 0); n]),
            devs,
            dnan: host_default_nan(),
        })
    }

    pub fn devices(&self) -> &Devices {
        &self.devs
    }
    /// The device a rank's tensors live on.
    pub fn device_of_rank(&self, rank: usize) -> Result<&str> {
        self.table.check_rank(rank)?;
        Ok(self.devs.list[self.rank_dev[rank]].label())
    }

    // ---- helpers ----

    fn dev(&self, i: usize) -> &dyn Device {
        &*self.devs.list[i]
    }
    fn buf(&self, id: u32) -> Result<&Buf> {
        Ok(&self.table.get(id)?.data)
    }
    /// Tensor metadata and its buffer.
    fn tb(&self, id: u32) -> Result<(&Tensor, &Buf)> {
        let t = self.table.get(id)?;
        Ok((t, &t.data))
    }

    /// The device's scratch buffer, at least `bytes` bytes (kept locked while the Scratch lives).
    fn scratch(&self, dev: usize, bytes: u64) -> Result<Scratch<'_>> {
        const MIN: NonZeroU64 = NonZeroU64::new(1 << 16).unwrap();
        let mut g = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        let (p, have) = g[dev];
        if have < bytes {
            if have > 0 {
                // SAFETY: the scratch buffer, unused (we hold its lock) and freed once: its entry
                // is cleared at once.
                unsafe { self.dev(dev).free(p) };
                g[dev] = (0, 0);
            }
            let want = bytes
                .checked_next_power_of_two()
                .and_then(NonZeroU64::new)
                .ok_or_else(|| Error(format!("cuda: a scratch buffer of {bytes} bytes is too large")))?
                .max(MIN);
            let np = self.dev(dev).alloc(want)?;
            g[dev] = (np, want.get());
        }
        let ptr = g[dev].0;
        Ok(Scratch { guard: g, ptr })
    }

    fn gs_grid(d: &dyn Device, n: u64) -> u32 {
        n.div_ceil(d.block() as u64).clamp(1, d.max_grid() as u64) as u32
    }

    /// Launches kernel `k` on `grid` blocks of the device's block size.
    ///
    /// # Safety
    /// As `Device::launch`: `args` are the kernel's parameters (kernels.cu) in order, and the
    /// device pointers among them address live buffers of `d` that hold everything the kernel
    /// touches with these sizes.
    unsafe fn launch(d: &dyn Device, k: &str, grid: u32, args: Args) -> Result<()> {
        let mut args = args;
        let mut p = args.ptrs();
        // SAFETY: the caller's contract; `args` outlives the call, and every caller syncs before
        // it returns.
        unsafe { d.launch(k, grid, d.block(), &mut p) }
    }

    /// The u64 at `p`.
    ///
    /// # Safety
    /// `[p, p + 8)` lies inside a live buffer of `d`.
    unsafe fn read_u64(d: &dyn Device, p: DevPtr) -> Result<u64> {
        let mut b = [0u8; 8];
        // SAFETY: the caller's contract.
        unsafe { d.dtoh(&mut b, p)? };
        Ok(u64::from_le_bytes(b))
    }

    fn check_at(t: &Tensor, id: u32, index: u64) -> Result<()> {
        if index >= t.numel {
            bail!("id {id}: internal error: element {index} of a tensor of {} elements", t.numel);
        }
        Ok(())
    }

    fn raw_at(&self, id: u32, index: u64) -> Result<u32> {
        let (t, b) = self.tb(id)?;
        Self::check_at(t, id, index)?;
        let es = t.dtype.size();
        let mut x = [0u8; 4];
        // SAFETY: element `index` < numel of the tensor's live buffer (numel * es bytes).
        unsafe { self.dev(b.dev).dtoh(&mut x[..es], b.ptr + index * es as u64)? };
        Ok(u32::from_le_bytes(x))
    }

    fn write_raw(&self, id: u32, index: u64, bits: u32) -> Result<()> {
        let (t, b) = self.tb(id)?;
        Self::check_at(t, id, index)?;
        let es = t.dtype.size();
        // SAFETY: element `index` < numel of the tensor's live buffer (numel * es bytes).
        unsafe { self.dev(b.dev).htod(b.ptr + index * es as u64, &bits.to_le_bytes()[..es]) }
    }

    fn fill_const(&self, id: u32, bits: u32) -> Result<()> {
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(());
        }
        let d = self.dev(b.dev);
        if bits == 0 {
            // SAFETY: the tensor's whole live buffer.
            return unsafe { d.memset0(b.ptr, b.bytes) };
        }
        let k = if t.dtype.size() == 4 { "fill_u32" } else { "fill_u16" };
        // SAFETY: fill_u32/u16(ptr, n, bits) writes the n elements of the tensor's buffer.
        unsafe { Self::launch(d, k, Self::gs_grid(d, t.numel), Args::default().a(b.ptr).a(t.numel).a(bits))? };
        d.sync()
    }

    /// The tensor's bytes on the host.
    pub fn download(&self, id: u32) -> Result<Vec<u8>> {
        let b = self.buf(id)?;
        let mut v = vec![0u8; b.bytes as usize];
        // SAFETY: the tensor's whole live buffer (b.bytes bytes).
        unsafe { self.dev(b.dev).dtoh(&mut v, b.ptr)? };
        Ok(v)
    }

    fn upload(&self, id: u32, bytes: &[u8]) -> Result<()> {
        let b = self.buf(id)?;
        if bytes.len() as u64 != b.bytes {
            bail!("id {id}: internal error: upload of {} bytes into {} bytes", bytes.len(), b.bytes);
        }
        // SAFETY: exactly the tensor's live buffer (checked above).
        unsafe { self.dev(b.dev).htod(b.ptr, bytes) }
    }

    /// A cpu store holding copies of `ids` (same dtype and shape), for the ops done on the host.
    fn mirror(&self, ids: &[u32]) -> Result<(Store, Vec<u32>)> {
        let mut h = Store::new(Backend::Cpu, 1)?;
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let t = self.table.get(id)?;
            let hid = h.alloc(0, t.dtype, &t.shape)?;
            let bytes = self.download(id)?;
            let [ht] = h.get_disjoint_mut([hid])?;
            ht.data.bytes_mut().copy_from_slice(&bytes);
            out.push(hid);
        }
        Ok((h, out))
    }

    fn upload_from_mirror(&self, h: &Store, hid: u32, id: u32) -> Result<()> {
        self.upload(id, h.get(hid)?.data.bytes())
    }

    /// A new tensor charged to `rank` (its arguments checked by the ledger before) with its device
    /// buffer on `rank`'s device; its id. The ledger charges it first, as for the cpu store; when the
    /// device cannot allocate the buffer it is freed again (the peak keeps the attempt).
    fn insert(&mut self, rank: usize, dtype: DType, shape: Vec<u64>, numel: u64) -> Result<u32> {
        let (dev, bytes) = (self.rank_dev[rank], numel * dtype.size() as u64);
        let id = self.table.insert(rank, dtype, shape, numel, Buf { dev, ptr: 0, bytes });
        // an empty tensor has no buffer (ptr 0, never dereferenced: every op returns before)
        let Some(n) = NonZeroU64::new(bytes) else { return Ok(id) };
        match self.dev(dev).alloc(n) {
            Ok(ptr) => {
                self.table.get_mut(id)?.data.ptr = ptr;
                Ok(id)
            }
            Err(e) => {
                let _ = self.table.remove(id);
                Err(e)
            }
        }
    }

    /// Runs `f(dst_device, src_ptr_on_that_device)` with the source bytes on the destination's
    /// device (staged through a temporary buffer when they live on different devices): the
    /// pointer addresses all of `src`'s bytes, live until `f` returns.
    fn with_src_on(&self, dst_dev: usize, src: u32, f: impl FnOnce(&dyn Device, DevPtr) -> Result<()>) -> Result<()> {
        let b = self.buf(src)?;
        let d = self.dev(dst_dev);
        let staged = NonZeroU64::new(b.bytes).filter(|_| b.dev != dst_dev);
        let Some(n) = staged else { return f(d, b.ptr) };
        let tmp = d.alloc(n)?;
        // SAFETY: tmp is a fresh buffer of b.bytes bytes on d, src's buffer holds b.bytes bytes on
        // its device; tmp is freed once, after d.sync().
        unsafe {
            let r = d.copy_from_peer(tmp, self.dev(b.dev), b.ptr, b.bytes).and_then(|_| f(d, tmp)).and_then(|_| d.sync());
            d.free(tmp);
            r
        }
    }

    /// Copies a box of `src` into `dst` (element strides and offsets), on dst's device.
    #[allow(clippy::too_many_arguments)]
    fn copy_box(&self, dst: u32, src: u32, len: &[u64], ss: &[u64], ds: &[u64], soff: u64, doff: u64) -> Result<()> {
        let (t, db) = self.tb(dst)?;
        let es = t.dtype.size() as u64;
        let (dptr, ddev) = (db.ptr, db.dev);
        match box_of(len, ss, ds, soff, doff) {
            Ok(None) => Ok(()),
            Ok(Some(bx)) => self.with_src_on(ddev, src, |d, sptr| {
                let contiguous = bx.ndim == 0 || (bx.ndim == 1 && bx.sstride[0] == 1 && bx.dstride[0] == 1);
                // SAFETY: the box lies inside both tensors (its callers' shapes and blocks are
                // validated by the ledger first); dptr is dst's live buffer on d and sptr all
                // of src's bytes on d (with_src_on).
                unsafe {
                    if contiguous {
                        d.dtod(dptr + bx.doff * es, sptr + bx.soff * es, bx.n * es)?;
                    } else {
                        let k = if es == 4 { "copy_box_u32" } else { "copy_box_u16" };
                        Self::launch(d, k, Self::gs_grid(d, bx.n), Args::default().a(dptr).a(sptr).a(bx))?;
                    }
                }
                d.sync()
            }),
            Err(()) => {
                let src_bytes = self.download(src)?;
                let mut dst_bytes = self.download(dst)?;
                box_copy_host(&mut dst_bytes, &src_bytes, es as usize, len, ss, ds, soff, doff);
                self.upload(dst, &dst_bytes)
            }
        }
    }
}

/// The cpu store's API (crate::TensorStore) on device memory.
impl TensorStore for CudaStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Cuda
    }
    fn ledger(&self) -> &dyn LedgerView {
        &self.table
    }
    fn ledger_mut(&mut self) -> &mut dyn LedgerView {
        &mut self.table
    }

    fn alloc(&mut self, rank: usize, dtype: DType, shape: &[u64]) -> Result<u32> {
        let numel = self.table.check_new(rank, dtype, shape)?;
        self.insert(rank, dtype, shape.to_vec(), numel)
    }

    fn free(&mut self, id: u32) -> Result<()> {
        let b = self.table.remove(id)?.data;
        if b.ptr != 0 {
            // SAFETY: the tensor's own buffer, its tensor just removed from the table; nothing in
            // flight.
            unsafe { self.dev(b.dev).free(b.ptr) };
        }
        Ok(())
    }
    fn device_memory(&self, rank: usize) -> Result<Option<DeviceMemory>> {
        self.table.check_rank(rank)?;
        let d = &self.devs.list[self.rank_dev[rank]];
        let (free_bytes, total_bytes) = d.mem_info()?;
        Ok(Some(DeviceMemory { device: d.label().to_string(), free_bytes, total_bytes }))
    }

    fn fill_grad(&mut self, id: u32, spec: &GenSpec, block: &Block) -> Result<()> {
        self.table.check_fill("fillGrad", id, spec, block)?;
        if !spec.sum_of.is_empty() {
            bail!("cuda: the finalize regime's summed gradients (gen.sumOf) are generated on the cpu backend only");
        }
        let (t, b) = self.tb(id)?;
        let (dtype, n) = (t.dtype, t.numel);
        if n == 0 {
            return Ok(());
        }
        match spec.mode {
            // SAFETY: the tensor's whole live buffer.
            GenMode::Zeros => unsafe { self.dev(b.dev).memset0(b.ptr, b.bytes)? },
            GenMode::Ones => self.fill_const(id, from_f32_bits(dtype, 1.0))?,
            GenMode::NegZeros => self.fill_const(id, from_f32_bits(dtype, -0.0))?,
            GenMode::Gen => match geom_of(block) {
                Some(g) => {
                    let d = self.dev(b.dev);
                    let a = gen_args(spec, dtype, None);
                    // SAFETY: fill_gen_<dt>(ptr, n, geom, gen) writes the n elements of the buffer.
                    unsafe { Self::launch(d, &format!("fill_gen_{}", sfx(dtype)), Self::gs_grid(d, n), Args::default().a(b.ptr).a(n).a(g).a(a))? };
                    d.sync()?;
                }
                None => {
                    let (mut h, hid) = self.mirror(&[id])?;
                    h.fill_grad(hid[0], spec, block)?;
                    return self.upload_from_mirror(&h, hid[0], id);
                }
            },
        }
        if let Some((idx, v)) = spec.special {
            if let Some(l) = block.local_index_of(idx) {
                self.write_raw(id, l, from_f64_bits(dtype, v))?;
            }
        }
        Ok(())
    }

    fn fill_value(&mut self, id: u32, v: f64) -> Result<()> {
        let dt = self.table.get(id)?.dtype;
        self.fill_const(id, from_f64_bits(dt, v))
    }

    fn get_element(&self, id: u32, index: u64) -> Result<f64> {
        let t = self.table.get(id)?;
        t.check_index(id, index)?;
        Ok(bits_to_f64(t.dtype, self.raw_at(id, index)?))
    }

    fn set_element(&mut self, id: u32, index: u64, v: f64) -> Result<()> {
        let t = self.table.get(id)?;
        t.check_index(id, index)?;
        let dt = t.dtype;
        self.write_raw(id, index, from_f64_bits(dt, v))
    }

    fn sum_abs_pow(&self, id: u32, p: f64) -> Result<f64> {
        check_p(p)?;
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(0.0);
        }
        let d = self.dev(b.dev);
        let op = if p == 2.0 { "sq" } else if p == 1.0 { "abs" } else { "pow" };
        let chunk = d.block() as u64 * SUM_ITEMS;
        let grid = t.numel.div_ceil(chunk);
        let s = self.scratch(b.dev, (grid + 1) * 8)?;
        let (part, out) = (s.ptr + 8, s.ptr);
        // SAFETY: sum_<op>_<dt> reads the n elements and writes `grid` partials after the first
        // u64 of the scratch ((grid + 1) * 8 bytes); sum_partials reads them and writes the first.
        let r = unsafe {
            Self::launch(d, &format!("sum_{op}_{}", sfx(t.dtype)), grid as u32, Args::default().a(b.ptr).a(t.numel).a(p).a(part))?;
            Self::launch(d, "sum_partials", 1, Args::default().a(part).a(grid).a(out))?;
            d.sync()?;
            f64::from_bits(Self::read_u64(d, out)?)
        };
        drop(s.guard);
        Ok(r)
    }

    fn exact_sum_abs_pow(&self, id: u32, p: f64) -> Result<BigUint> {
        check_p(p)?;
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(BigUint::zero());
        }
        if p != 1.0 && p != 2.0 {
            // f64(|x|^p) must be correctly rounded (SPEC section 6, abspow.rs): on the host.
            let (h, hid) = self.mirror(&[id])?;
            return h.exact_sum_abs_pow(hid[0], p);
        }
        let d = self.dev(b.dev);
        let s = self.scratch(b.dev, 512 * 8)?;
        let k = format!("exact_p{}_{}", if p == 2.0 { 2 } else { 1 }, sfx(t.dtype));
        let mut raw = vec![0u8; 512 * 8];
        // SAFETY: exact_p<q>_<dt> reads the n elements and adds into 255 128-bit bins (the first
        // 512 u64 of the scratch, which holds at least 512 * 8 bytes).
        unsafe {
            d.memset0(s.ptr, 512 * 8)?;
            Self::launch(d, &k, t.numel.div_ceil(EXACT_CHUNK) as u32, Args::default().a(b.ptr).a(t.numel).a(s.ptr))?;
            d.sync()?;
            d.dtoh(&mut raw, s.ptr)?;
        }
        drop(s.guard);
        let words: Vec<u64> = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        Ok(bins_to_biguint(&words, p == 2.0))
    }

    fn max_abs(&self, id: u32) -> Result<f64> {
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(0.0);
        }
        let d = self.dev(b.dev);
        let s = self.scratch(b.dev, 8)?;
        // SAFETY: max_abs_<dt> reads the n elements and writes one u64 of the scratch (>= 8 bytes).
        let m = unsafe {
            d.memset0(s.ptr, 8)?;
            Self::launch(d, &format!("max_abs_{}", sfx(t.dtype)), Self::gs_grid(d, t.numel), Args::default().a(b.ptr).a(t.numel).a(s.ptr))?;
            d.sync()?;
            Self::read_u64(d, s.ptr)? as u32
        };
        drop(s.guard);
        Ok(if m > exp_mask(t.dtype) { f64::NAN } else { bits_to_f64(t.dtype, m) })
    }

    fn nonfinite_count(&self, id: u32) -> Result<u64> {
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(0);
        }
        let d = self.dev(b.dev);
        let s = self.scratch(b.dev, 8)?;
        // SAFETY: nonfinite_<dt> reads the n elements and writes one u64 of the scratch (>= 8 bytes).
        let c = unsafe {
            d.memset0(s.ptr, 8)?;
            Self::launch(d, &format!("nonfinite_{}", sfx(t.dtype)), Self::gs_grid(d, t.numel), Args::default().a(b.ptr).a(t.numel).a(s.ptr))?;
            d.sync()?;
            Self::read_u64(d, s.ptr)?
        };
        drop(s.guard);
        Ok(c)
    }

    fn read_pass(&self, id: u32) -> Result<u32> {
        let b = self.buf(id)?;
        let d = self.dev(b.dev);
        let words = b.bytes / 4;
        let mut sum = 0u32;
        if words > 0 {
            let s = self.scratch(b.dev, 8)?;
            // SAFETY: read_words reads the buffer's first `words` u32 words and writes one u64 of
            // the scratch (>= 8 bytes).
            sum = unsafe {
                d.memset0(s.ptr, 8)?;
                Self::launch(d, "read_words", Self::gs_grid(d, words), Args::default().a(b.ptr).a(words).a(s.ptr))?;
                d.sync()?;
                Self::read_u64(d, s.ptr)? as u32
            };
        }
        if b.bytes % 4 != 0 {
            // a trailing half word, zero-padded (as the cpu's read_pass)
            let mut w = [0u8; 4];
            let rest = (b.bytes % 4) as usize;
            // SAFETY: the last `rest` bytes of the tensor's live buffer.
            unsafe { d.dtoh(&mut w[..rest], b.ptr + words * 4)? };
            sum = sum.wrapping_add(u32::from_le_bytes(w));
        }
        Ok(sum)
    }

    fn scale(&mut self, id: u32, coef: f64) -> Result<()> {
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(());
        }
        let d = self.dev(b.dev);
        let c = kernels::scale_factor(coef).to_bits();
        // SAFETY: scale_<dt> rewrites the n elements of the tensor's buffer.
        unsafe { Self::launch(d, &format!("scale_{}", sfx(t.dtype)), Self::gs_grid(d, t.numel), Args::default().a(b.ptr).a(t.numel).a(c).a(self.dnan))? };
        d.sync()
    }

    fn copy_from(&mut self, dst: u32, src: u32) -> Result<()> {
        self.table.check_same("copyFrom", dst, src)?;
        if dst == src {
            return Ok(());
        }
        let (db, sb) = (self.buf(dst)?, self.buf(src)?);
        if db.bytes == 0 {
            return Ok(());
        }
        let d = self.dev(db.dev);
        // SAFETY: two distinct live buffers of the same size (same dtype and numel, checked by
        // the ledger), each on its own device.
        unsafe {
            if db.dev == sb.dev {
                d.dtod(db.ptr, sb.ptr, db.bytes)?;
            } else {
                d.copy_from_peer(db.ptr, self.dev(sb.dev), sb.ptr, db.bytes)?;
            }
        }
        d.sync()
    }

    fn narrow(&mut self, id: u32, dim: usize, start: u64, len: u64, rank: usize) -> Result<u32> {
        let (dtype, ds, numel) = self.table.check_narrow(id, dim, start, len, rank)?;
        let new = self.insert(rank, dtype, ds.clone(), numel)?;
        let ss = row_major_strides(&self.table.get(id)?.shape);
        let dstr = row_major_strides(&ds);
        if let Err(e) = self.copy_box(new, id, &ds, &ss, &dstr, start * ss[dim], 0) {
            let _ = self.free(new);
            return Err(e);
        }
        Ok(new)
    }

    fn cat(&mut self, ids: &[u32], dim: usize, rank: usize) -> Result<u32> {
        let (dtype, shape, numel) = self.table.check_cat(ids, dim, rank)?;
        let dstr = row_major_strides(&shape);
        let new = self.insert(rank, dtype, shape, numel)?;
        let mut col = 0u64;
        for &id in ids {
            let shape = self.table.get(id)?.shape.clone();
            let r = self.copy_box(new, id, &shape, &row_major_strides(&shape), &dstr, 0, col * dstr[dim]);
            if let Err(e) = r {
                let _ = self.free(new);
                return Err(e);
            }
            col += shape[dim];
        }
        Ok(new)
    }

    fn clone_tensor(&mut self, id: u32, rank: usize) -> Result<u32> {
        let (dtype, shape, numel) = self.table.check_clone(id, rank)?;
        let new = self.insert(rank, dtype, shape, numel)?;
        let r = self.copy_from(new, id);
        if let Err(e) = r {
            let _ = self.free(new);
            return Err(e);
        }
        Ok(new)
    }

    fn compare(&self, a: u32, b: u32) -> Result<Option<Mismatch>> {
        self.table.check_same("compare", a, b)?;
        let (ta, ba) = self.tb(a)?;
        if ta.numel == 0 {
            return Ok(None);
        }
        let (n, dt, aptr) = (ta.numel, ta.dtype, ba.ptr);
        let s = self.scratch(ba.dev, 8)?;
        let first = s.ptr;
        self.with_src_on(ba.dev, b, |d, bptr| {
            // SAFETY: compare_<dt> reads n elements of a (its buffer on d) and of b (all of its
            // bytes on d, same numel: checked by the ledger) and writes one u64 of the
            // scratch (>= 8 bytes).
            unsafe {
                d.htod(first, &NONE.to_le_bytes())?;
                Self::launch(d, &format!("compare_{}", sfx(dt)), Self::gs_grid(d, n), Args::default().a(aptr).a(bptr).a(n).a(first))?;
            }
            d.sync()
        })?;
        // SAFETY: the scratch's first u64.
        let i = unsafe { Self::read_u64(self.dev(ba.dev), first)? };
        drop(s.guard);
        if i == NONE {
            return Ok(None);
        }
        let (x, y) = (self.raw_at(a, i)?, self.raw_at(b, i)?);
        Ok(Some(Mismatch { index: i, expected: bits_to_f64(dt, x), actual: bits_to_f64(dt, y) }))
    }

    fn hash(&self, id: u32) -> Result<String> {
        let t = self.table.get(id)?;
        Ok(content_hash(t.dtype, &t.shape, &self.download(id)?))
    }

    fn verify_scaled(&self, id: u32, spec: &GenSpec, block: &Block, coef: f64) -> Result<Option<Mismatch>> {
        self.table.check_fill("verifyScaled", id, spec, block)?;
        if !spec.sum_of.is_empty() {
            bail!("cuda: the finalize regime's summed gradients (gen.sumOf) are verified on the cpu backend only");
        }
        let (t, b) = self.tb(id)?;
        if t.numel == 0 {
            return Ok(None);
        }
        let Some(g) = geom_of(block) else {
            let (h, hid) = self.mirror(&[id])?;
            return h.verify_scaled(hid[0], spec, block, coef);
        };
        let (dt, n) = (t.dtype, t.numel);
        let d = self.dev(b.dev);
        let special = spec.special.and_then(|(idx, v)| block.local_index_of(idx).map(|l| (l, from_f64_bits(dt, v))));
        let a = gen_args(spec, dt, special);
        let c = kernels::scale_factor(coef).to_bits();
        let s = self.scratch(b.dev, 8)?;
        // SAFETY: verify_<dt> reads the n elements of the tensor's buffer and writes one u64 of
        // the scratch (>= 8 bytes).
        let i = unsafe {
            d.htod(s.ptr, &NONE.to_le_bytes())?;
            Self::launch(
                d,
                &format!("verify_{}", sfx(dt)),
                Self::gs_grid(d, n),
                Args::default().a(b.ptr).a(n).a(g).a(a).a(c).a(self.dnan).a(s.ptr),
            )?;
            d.sync()?;
            Self::read_u64(d, s.ptr)?
        };
        drop(s.guard);
        if i == NONE {
            return Ok(None);
        }
        // the expected value as the cpu computes it: fill_range of that one global index, scaled
        let gi = global_index(block, i);
        let key = spec.key();
        fn want<T: Elem>(spec: &GenSpec, key: u64, gi: u64, c: f32) -> f64 {
            let mut v = [T::default()];
            spec.fill_range(key, gi, &mut v);
            kernels::scale(&mut v, c);
            v[0].to_f64()
        }
        let expected = match dt {
            DType::F32 => want::<f32>(spec, key, gi, kernels::scale_factor(coef)),
            DType::BF16 => want::<bf16>(spec, key, gi, kernels::scale_factor(coef)),
            DType::F16 => want::<f16>(spec, key, gi, kernels::scale_factor(coef)),
        };
        Ok(Some(Mismatch { index: i, expected, actual: bits_to_f64(dt, self.raw_at(id, i)?) }))
    }

    fn save_safetensors(&self, path: &str, entries: &[(String, u32)], metadata: &[(String, String)]) -> Result<()> {
        save_safetensors_with(self, path, entries, metadata, |s, id| Ok(s.download(id)?.into()))
    }

    fn load_safetensors(&mut self, path: &str, rank: usize) -> Result<Vec<(String, u32)>> {
        load_safetensors_with(self, path, rank, |s, id, read| {
            let mut bytes = vec![0u8; s.buf(id)?.bytes as usize];
            read(&mut bytes)?;
            s.upload(id, &bytes)
        })
    }

    /// One AdamW step (crate::optim), on the host through a mirror of the four tensors.
    fn adamw_step(&mut self, param: u32, grad: u32, exp_avg: u32, exp_avg_sq: u32, step: u64, hp: &AdamW) -> Result<()> {
        self.table.check_adamw(param, grad, exp_avg, exp_avg_sq, step, hp)?;
        let (mut h, hid) = self.mirror(&[param, grad, exp_avg, exp_avg_sq])?;
        h.adamw_step(hid[0], hid[1], hid[2], hid[3], step, hp)?;
        self.upload_from_mirror(&h, hid[0], param)?;
        self.upload_from_mirror(&h, hid[2], exp_avg)?;
        self.upload_from_mirror(&h, hid[3], exp_avg_sq)
    }

    fn copy_block(&mut self, dst: u32, dst_block: &Block, src: u32, src_block: &Block) -> Result<u64> {
        self.table.check_copy_block(dst, dst_block, src, src_block)?;
        let Some(x) = optim::intersect(dst_block, src_block) else { return Ok(0) };
        let (ss, ds) = (row_major_strides(&src_block.len), row_major_strides(&dst_block.len));
        let off = |b: &Block, st: &[u64]| -> u64 { (0..x.len.len()).map(|k| (x.start[k] - b.start[k]) * st[k]).sum() };
        let (soff, doff) = (off(src_block, &ss), off(dst_block, &ds));
        self.copy_box(dst, src, &x.len, &ss, &ds, soff, doff)?;
        Ok(x.numel())
    }
}

fn gen_args(spec: &GenSpec, dt: DType, special: Option<(u64, u32)>) -> GenArgs {
    let (mode, const_bits) = match spec.mode {
        GenMode::Gen => (0, 0),
        GenMode::Ones => (1, from_f32_bits(dt, 1.0)),
        GenMode::Zeros => (1, 0),
        GenMode::NegZeros => (1, from_f32_bits(dt, -0.0)),
    };
    let exact = spec.exact_in(dt);
    let unit = pow2(spec.unit_exp());
    GenArgs {
        key: spec.key(),
        unit_d: unit,
        m: spec.m(),
        mode,
        exact: exact as u32,
        unit_f: if exact { (unit as f32).to_bits() } else { 0 },
        const_bits,
        special_bits: special.map_or(0, |s| s.1),
        special_local: special.map_or(NONE, |s| s.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_merges_contiguous_dims() {
        let b = Block { global_shape: vec![4, 6, 5], start: vec![1, 0, 0], len: vec![2, 6, 5] };
        let g = geom_of(&b).unwrap();
        assert_eq!((g.ndim, g.len[0], g.gstride[0], g.gstart), (1, 60, 1, 30));
        let b = Block { global_shape: vec![4, 6, 5], start: vec![1, 2, 1], len: vec![2, 3, 4] };
        let g = geom_of(&b).unwrap();
        assert_eq!(g.ndim, 3);
        for j in 0..b.numel() {
            let mut gi = g.gstart;
            let mut r = j;
            for k in (0..g.ndim as usize).rev() {
                gi += (r % g.len[k]) * g.gstride[k];
                r /= g.len[k];
            }
            assert_eq!(gi, global_index(&b, j));
        }
        let s = Block::full(&[]);
        let g = geom_of(&s).unwrap();
        assert_eq!((g.ndim, g.gstart), (0, 0));
        let deep = Block::full(&[2; 9]);
        assert_eq!(geom_of(&deep).unwrap().ndim, 1);
        let mut odd = Block::full(&[2; 9]);
        odd.len = vec![1; 9];
        odd.len[0] = 2;
        odd.len[8] = 2;
        assert_eq!(geom_of(&odd).unwrap().ndim, 2);
        let mut many = Block::full(&[3; 9]);
        many.len = vec![2; 9];
        assert!(geom_of(&many).is_none());
    }

    #[test]
    fn box_copy_host_matches_narrow() {
        // [3, 4] -> narrow(dim 1, start 1, len 2)
        let src: Vec<u8> = (0..12u32).flat_map(|x| x.to_le_bytes()).collect();
        let mut dst = vec![0u8; 6 * 4];
        let ss = row_major_strides(&[3, 4]);
        box_copy_host(&mut dst, &src, 4, &[3, 2], &ss, &row_major_strides(&[3, 2]), ss[1], 0);
        let got: Vec<u32> = dst.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![1, 2, 5, 6, 9, 10]);
        let b = box_of(&[3, 2], &ss, &row_major_strides(&[3, 2]), 1, 0).unwrap().unwrap();
        assert_eq!((b.ndim, b.n), (2, 6));
        let full = box_of(&[3, 4], &ss, &ss, 0, 0).unwrap().unwrap();
        assert_eq!((full.ndim, full.len[0], full.sstride[0]), (1, 12, 1));
        assert!(box_of(&[3, 0], &ss, &ss, 0, 0).unwrap().is_none());
    }

    #[test]
    fn hash_and_bins_match_the_cpu_code() {
        let mut s = Store::new(Backend::Cpu, 1).unwrap();
        let mut st = 3u64;
        for dt in DType::ALL {
            let id = s.alloc(0, dt, &[7, 33]).unwrap();
            let spec = GenSpec::new(5, 1, "w", dt, 2, GenMode::Gen);
            s.fill_grad(id, &spec, &Block::full(&[7, 33])).unwrap();
            let t = s.get(id).unwrap();
            assert_eq!(content_hash(dt, &t.shape, t.data.bytes()), s.hash(id).unwrap());
            // bins as the kernel fills them, combined by bins_to_biguint, equal the cpu exact sum
            let mut vals: Vec<f32> = (0..5000)
                .map(|_| {
                    st = crate::gen::splitmix64(st);
                    f32::from_bits(st as u32)
                })
                .collect();
            vals.push(f32::MAX);
            vals.push(f32::from_bits(1));
            for p2 in [false, true] {
                let mut words = vec![0u64; 512];
                for &x in &vals {
                    let b = x.to_bits();
                    let k = ((b >> 23) & 0xff) as usize;
                    if k == 255 {
                        continue;
                    }
                    let m = ((b & 0x7f_ffff) | if k != 0 { 0x80_0000 } else { 0 }) as u64;
                    let v = if p2 { m * m } else { m };
                    let (lo, c) = words[2 * k].overflowing_add(v);
                    words[2 * k] = lo;
                    words[2 * k + 1] += c as u64;
                }
                let want = crate::exact::exact_sum_abs_pow(&vals, if p2 { 2.0 } else { 1.0 }).unwrap();
                assert_eq!(bins_to_biguint(&words, p2), want);
            }
        }
    }
}
