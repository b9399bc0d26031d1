//! The tensor store: tensors owned by ranks, and a per-rank memory ledger.
//!
//! Ledger: every tensor charges numel * dtype size bytes to its owner rank while it is alive
//! (exactly; no rounding, no allocator overhead). `peak` is the maximum of `live` since the last
//! reset. A `meta` store charges the same bytes but holds no storage and does no arithmetic: fills
//! and scales are no-ops, reductions return 0, compare/verify return None and hash returns "meta".
//! Every argument is still validated on meta, so a layout bug shows there too.

use std::collections::HashMap;

use half::{bf16, f16};

use crate::dtype::{DType, Elem};
use crate::exact::{self, BigUint};
use crate::gen::{checked_numel, Block, GenSpec};
use crate::kernels::{self, KernelPath};
use crate::optim::{self, AdamW};
use crate::pool::{self, Pooled};
use crate::tensor_store::{check_alloc_fill, StoreKind, TensorStore};
use crate::{bail, safetensors, Error, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Cpu,
    Meta,
}

impl Backend {
    pub const NAMES: &'static str = "cpu, meta";
    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "cpu" => Some(Backend::Cpu),
            "meta" => Some(Backend::Meta),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Meta => "meta",
        }
    }
}

pub enum Data {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
    Meta,
}

/// Runs `$body` with `$xs` bound to the typed slice, or `$meta` for a meta tensor.
macro_rules! with_data {
    ($data:expr, $xs:ident => $body:expr, meta => $meta:expr) => {
        match $data {
            Data::F32($xs) => $body,
            Data::BF16($xs) => $body,
            Data::F16($xs) => $body,
            Data::Meta => $meta,
        }
    };
}

/// Runs `$body` on two tensors' data of the same dtype (checked before).
macro_rules! with_data2 {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr, meta => $meta:expr) => {
        match ($a, $b) {
            (Data::F32($x), Data::F32($y)) => $body,
            (Data::BF16($x), Data::BF16($y)) => $body,
            (Data::F16($x), Data::F16($y)) => $body,
            _ => $meta,
        }
    };
}

impl Data {
    /// Raw little-endian bytes (empty for meta).
    pub fn bytes(&self) -> &[u8] {
        fn b<T: Elem>(v: &[T]) -> &[u8] {
            // SAFETY: Elem is sealed: f32/bf16/f16 are plain old data without padding.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        with_data!(self, xs => b(xs), meta => &[])
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        fn b<T: Elem>(v: &mut [T]) -> &mut [u8] {
            // SAFETY: Elem is sealed: every bit pattern is a valid f32/bf16/f16, and none has padding.
            unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
        }
        with_data!(self, xs => b(xs), meta => &mut [])
    }
}

/// A freed tensor's buffer goes to the pool (pool.rs) for the next tensor of its size class.
impl Drop for Data {
    fn drop(&mut self) {
        match self {
            Data::F32(v) => pool::give(std::mem::take(v)),
            Data::BF16(v) => pool::give(std::mem::take(v)),
            Data::F16(v) => pool::give(std::mem::take(v)),
            Data::Meta => {}
        }
    }
}

pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub owner: usize,
    pub numel: u64,
    pub data: Data,
}

impl Tensor {
    pub fn bytes(&self) -> u64 {
        self.numel * self.dtype.size() as u64
    }
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Ledger {
    pub live: u64,
    pub peak: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    /// local flat index
    pub index: u64,
    pub expected: f64,
    pub actual: f64,
}

/// n zero elements (+0.0 in every dtype): a kept buffer (pool.rs) zeroed in place, or fresh zeroed
/// memory from the allocator (which the OS hands out zeroed, so calloc need not write it).
fn try_zeroed<T: Pooled>(n: usize) -> Result<Vec<T>> {
    if let Some(mut v) = pool::take_kept::<T>(n) {
        v.resize(n, T::from_bits(0));
        return Ok(v);
    }
    let cap = pool::capacity_for::<T>(n);
    if cap == 0 {
        return Ok(Vec::new());
    }
    let layout =
        std::alloc::Layout::array::<T>(cap).map_err(|_| Error(format!("cannot allocate {n} elements: size overflows")))?;
    // SAFETY: layout has non-zero size; all-zero bits are +0.0 for f32, bf16 and f16.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        bail!("out of memory allocating {} bytes", layout.size());
    }
    // SAFETY: p was allocated with the layout of [T; cap]; its first n <= cap elements are
    // initialized (zeroed).
    Ok(unsafe { Vec::from_raw_parts(p, n, cap) })
}

/// A vector of n elements written by the generator as `Block::fill` writes them, without zeroing
/// the memory first (a kept buffer from pool.rs when there is one: no page faults either).
/// Requires block.validate() and block.numel() == n.
fn filled<T: Pooled>(n: usize, path: KernelPath, spec: &GenSpec, block: &Block) -> Result<Vec<T>> {
    let mut v = pool::take::<T>(n)?;
    block.fill_uninit_with(path, spec, &mut v.spare_capacity_mut()[..n]);
    // SAFETY: fill_uninit_with wrote all n elements (it checks that its rows cover the block and
    // panics before returning otherwise), and the capacity is at least n.
    unsafe { v.set_len(n) };
    Ok(v)
}

fn fmt_shape(s: &[u64]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

fn check_p(p: f64) -> Result<()> {
    if !(p.is_finite() && p > 0.0) {
        bail!("p: {p} must be finite and > 0 (use maxAbs for p = inf)");
    }
    Ok(())
}

pub struct Store {
    backend: Backend,
    ledgers: Vec<Ledger>,
    tensors: HashMap<u32, Tensor>,
    next_id: u32,
}

impl Store {
    pub fn new(backend: Backend, ranks: usize) -> Result<Store> {
        if ranks == 0 {
            bail!("ranks: 0 must be at least 1");
        }
        Ok(Store { backend, ledgers: vec![Ledger::default(); ranks], tensors: HashMap::new(), next_id: 1 })
    }
    pub fn backend(&self) -> Backend {
        self.backend
    }
    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.ledgers.len() {
            bail!("rank: {rank} is out of range (this store has {} ranks: 0..{})", self.ledgers.len(), self.ledgers.len() - 1);
        }
        Ok(())
    }
    fn missing(&self, id: u32) -> Error {
        if id >= 1 && id < self.next_id {
            Error(format!("id {id}: tensor was already freed"))
        } else {
            Error(format!("id {id}: no such tensor"))
        }
    }
    pub fn get(&self, id: u32) -> Result<&Tensor> {
        self.tensors.get(&id).ok_or_else(|| self.missing(id))
    }
    fn get_mut(&mut self, id: u32) -> Result<&mut Tensor> {
        let e = self.missing(id);
        self.tensors.get_mut(&id).ok_or(e)
    }
    /// Mutable access to N different live tensors at once (for kernels in other modules, e.g. optim).
    pub fn get_disjoint_mut<const N: usize>(&mut self, ids: [u32; N]) -> Result<[&mut Tensor; N]> {
        for (i, id) in ids.iter().enumerate() {
            self.get(*id)?;
            if ids[..i].contains(id) {
                bail!("id {id}: the same tensor is given twice");
            }
        }
        Ok(self.tensors.get_disjoint_mut(ids.each_ref()).map(|t| t.expect("checked above")))
    }

    /// alloc's checks of the shape (and of the id space); the element count.
    fn check_alloc(&self, dtype: DType, shape: &[u64]) -> Result<u64> {
        let numel = checked_numel(shape)
            .filter(|n| n.checked_mul(dtype.size() as u64).is_some())
            .ok_or_else(|| Error(format!("shape: {} has too many elements", fmt_shape(shape))))?;
        if self.next_id == u32::MAX {
            bail!("too many tensors allocated in this store");
        }
        Ok(numel)
    }

    fn cpu_len(numel: u64) -> Result<usize> {
        numel
            .try_into()
            .ok()
            .filter(|&n: &usize| n <= (isize::MAX as usize) / 4)
            .ok_or_else(|| Error(format!("cannot allocate {numel} elements on the cpu backend")))
    }

    fn new_data(&self, dtype: DType, numel: u64) -> Result<Data> {
        if self.backend == Backend::Meta {
            return Ok(Data::Meta);
        }
        let n = Self::cpu_len(numel)?;
        Ok(match dtype {
            DType::F32 => Data::F32(try_zeroed(n)?),
            DType::BF16 => Data::BF16(try_zeroed(n)?),
            DType::F16 => Data::F16(try_zeroed(n)?),
        })
    }

    fn insert(&mut self, rank: usize, dtype: DType, shape: Vec<u64>, numel: u64, data: Data) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let t = Tensor { dtype, shape, owner: rank, numel, data };
        let l = &mut self.ledgers[rank];
        l.live += t.bytes();
        l.peak = l.peak.max(l.live);
        self.tensors.insert(id, t);
        id
    }

    fn check_index(t: &Tensor, id: u32, index: u64) -> Result<usize> {
        if index >= t.numel {
            bail!("index: {index} is out of range for tensor {id} with {} elements", t.numel);
        }
        Ok(index as usize)
    }

    fn check_same(&self, what: &str, a: u32, b: u32) -> Result<()> {
        let (ta, tb) = (self.get(a)?, self.get(b)?);
        if ta.dtype != tb.dtype || ta.numel != tb.numel {
            bail!(
                "{what}: tensors {a} ({} {}) and {b} ({} {}) must have the same dtype and number of elements",
                ta.dtype.name(),
                fmt_shape(&ta.shape),
                tb.dtype.name(),
                fmt_shape(&tb.shape)
            );
        }
        Ok(())
    }
}

impl TensorStore for Store {
    fn kind(&self) -> StoreKind {
        match self.backend {
            Backend::Cpu => StoreKind::Cpu,
            Backend::Meta => StoreKind::Meta,
        }
    }
    fn ranks(&self) -> usize {
        self.ledgers.len()
    }

    fn shape(&self, id: u32) -> Result<&[u64]> {
        Ok(&self.get(id)?.shape)
    }
    fn dtype(&self, id: u32) -> Result<DType> {
        Ok(self.get(id)?.dtype)
    }
    fn owner(&self, id: u32) -> Result<usize> {
        Ok(self.get(id)?.owner)
    }

    /// Zero-filled tensor charged to `rank`.
    fn alloc(&mut self, rank: usize, dtype: DType, shape: &[u64]) -> Result<u32> {
        self.check_rank(rank)?;
        let numel = self.check_alloc(dtype, shape)?;
        let data = self.new_data(dtype, numel)?;
        Ok(self.insert(rank, dtype, shape.to_vec(), numel, data))
    }

    /// Allocated and filled in one pass over the new memory: no zeroing pass before the fill.
    fn alloc_fill(&mut self, rank: usize, dtype: DType, shape: &[u64], spec: &GenSpec, block: &Block) -> Result<u32> {
        self.check_rank(rank)?;
        check_alloc_fill(shape, spec, block)?;
        let numel = self.check_alloc(dtype, shape)?;
        let data = match self.backend {
            Backend::Meta => Data::Meta,
            Backend::Cpu => {
                let n = Self::cpu_len(numel)?;
                let path = KernelPath::detect();
                match dtype {
                    DType::F32 => Data::F32(filled(n, path, spec, block)?),
                    DType::BF16 => Data::BF16(filled(n, path, spec, block)?),
                    DType::F16 => Data::F16(filled(n, path, spec, block)?),
                }
            }
        };
        Ok(self.insert(rank, dtype, shape.to_vec(), numel, data))
    }

    fn free(&mut self, id: u32) -> Result<()> {
        let e = self.missing(id);
        let t = self.tensors.remove(&id).ok_or(e)?;
        self.ledgers[t.owner].live -= t.bytes();
        Ok(())
    }

    fn live_bytes(&self, rank: usize) -> Result<u64> {
        self.check_rank(rank)?;
        Ok(self.ledgers[rank].live)
    }
    fn peak_bytes(&self, rank: usize) -> Result<u64> {
        self.check_rank(rank)?;
        Ok(self.ledgers[rank].peak)
    }
    fn reset_peak(&mut self, rank: usize) -> Result<()> {
        self.check_rank(rank)?;
        let l = &mut self.ledgers[rank];
        l.peak = l.live;
        Ok(())
    }
    fn live_tensors(&self) -> usize {
        self.tensors.len()
    }

    // ---- contents ----

    fn fill_grad(&mut self, id: u32, spec: &GenSpec, block: &Block) -> Result<()> {
        spec.validate()?;
        block.validate()?;
        let t = self.get_mut(id)?;
        if block.numel() != t.numel {
            bail!(
                "fillGrad: block len {} has {} elements but tensor {id} has shape {} ({} elements)",
                fmt_shape(&block.len),
                block.numel(),
                fmt_shape(&t.shape),
                t.numel
            );
        }
        let path = KernelPath::detect();
        with_data!(&mut t.data, xs => block.fill_with(path, spec, xs), meta => ());
        Ok(())
    }

    fn fill_value(&mut self, id: u32, v: f64) -> Result<()> {
        let t = self.get_mut(id)?;
        with_data!(&mut t.data, xs => { let x = Elem::from_f64(v); xs.fill(x) }, meta => ());
        Ok(())
    }

    fn get_element(&self, id: u32, index: u64) -> Result<f64> {
        let t = self.get(id)?;
        let i = Self::check_index(t, id, index)?;
        Ok(with_data!(&t.data, xs => xs[i].to_f64(), meta => 0.0))
    }

    fn set_element(&mut self, id: u32, index: u64, v: f64) -> Result<()> {
        let t = self.get_mut(id)?;
        let i = Self::check_index(t, id, index)?;
        with_data!(&mut t.data, xs => xs[i] = Elem::from_f64(v), meta => ());
        Ok(())
    }

    // ---- reductions ----

    fn sum_abs_pow(&self, id: u32, p: f64) -> Result<f64> {
        check_p(p)?;
        let t = self.get(id)?;
        Ok(with_data!(&t.data, xs => kernels::sum_abs_pow(xs, p), meta => 0.0))
    }
    fn exact_sum_abs_pow(&self, id: u32, p: f64) -> Result<BigUint> {
        check_p(p)?;
        let t = self.get(id)?;
        with_data!(&t.data, xs => exact::exact_sum_abs_pow(xs, p), meta => Ok(BigUint::zero()))
    }
    fn max_abs(&self, id: u32) -> Result<f64> {
        let t = self.get(id)?;
        Ok(with_data!(&t.data, xs => kernels::max_abs(xs), meta => 0.0))
    }
    fn nonfinite_count(&self, id: u32) -> Result<u64> {
        let t = self.get(id)?;
        Ok(with_data!(&t.data, xs => kernels::nonfinite_count(xs), meta => 0))
    }
    fn read_pass(&self, id: u32) -> Result<u32> {
        let t = self.get(id)?;
        Ok(with_data!(&t.data, xs => kernels::read_pass(xs), meta => 0))
    }

    // ---- in place ----

    fn scale(&mut self, id: u32, coef: f64) -> Result<()> {
        let c = kernels::scale_factor(coef);
        let t = self.get_mut(id)?;
        with_data!(&mut t.data, xs => kernels::scale(xs, c), meta => ());
        Ok(())
    }

    fn sum_tensors(&mut self, dst: u32, srcs: &[u32]) -> Result<()> {
        let n = self.check_sum_tensors(dst, srcs)? as usize;
        if matches!(self.get(dst)?.data, Data::Meta) {
            return Ok(());
        }
        // -0 is the identity of float addition: a sum of -0s stays -0, as a dist.all_reduce of them does
        let mut acc = vec![-0f32; n];
        for &s in srcs {
            let t = self.get(s)?;
            with_data!(&t.data, xs => acc.iter_mut().zip(xs.iter()).for_each(|(a, x)| *a += x.to_f32()), meta => ());
        }
        let t = self.get_mut(dst)?;
        // every dtype widens exactly into f32; the sum is rounded once to the dtype
        with_data!(&mut t.data, xs => xs.iter_mut().zip(&acc).for_each(|(x, a)| *x = Elem::from_f32(*a)), meta => ());
        Ok(())
    }

    fn copy_from(&mut self, dst: u32, src: u32) -> Result<()> {
        self.check_same("copyFrom", dst, src)?;
        if dst == src {
            return Ok(());
        }
        let mut d = self.tensors.remove(&dst).expect("checked");
        {
            let s = &self.tensors[&src];
            with_data2!(&mut d.data, &s.data, x, y => x.copy_from_slice(y), meta => ());
        }
        self.tensors.insert(dst, d);
        Ok(())
    }

    // ---- new tensors ----

    fn narrow(&mut self, id: u32, dim: usize, start: u64, len: u64, rank: usize) -> Result<u32> {
        self.check_rank(rank)?;
        let t = self.get(id)?;
        let nd = t.shape.len();
        if dim >= nd {
            bail!("dim: {dim} is out of range for tensor {id} with shape {}", fmt_shape(&t.shape));
        }
        if start.checked_add(len).is_none_or(|e| e > t.shape[dim]) {
            bail!(
                "narrow: start {start} + len {len} exceeds dim {dim} of size {} (tensor {id}, shape {})",
                t.shape[dim],
                fmt_shape(&t.shape)
            );
        }
        let mut shape = t.shape.clone();
        shape[dim] = len;
        let numel: u64 = shape.iter().product();
        let dtype = t.dtype;
        let mut data = self.new_data(dtype, numel)?;
        let t = self.get(id)?;
        let outer: u64 = t.shape[..dim].iter().product();
        let inner: u64 = t.shape[dim + 1..].iter().product();
        let (sd, run, off) = (t.shape[dim] * inner, (len * inner) as usize, (start * inner) as usize);
        if run > 0 {
            with_data2!(&mut data, &t.data, d, s => {
                for o in 0..outer as usize {
                    let so = o * sd as usize + off;
                    d[o * run..(o + 1) * run].copy_from_slice(&s[so..so + run]);
                }
            }, meta => ());
        }
        Ok(self.insert(rank, dtype, shape, numel, data))
    }

    fn cat(&mut self, ids: &[u32], dim: usize, rank: usize) -> Result<u32> {
        self.check_rank(rank)?;
        if ids.is_empty() {
            bail!("cat: ids is empty");
        }
        let first = self.get(ids[0])?;
        let (dtype, base) = (first.dtype, first.shape.clone());
        if dim >= base.len() {
            bail!("dim: {dim} is out of range for tensor {} with shape {}", ids[0], fmt_shape(&base));
        }
        let mut total = 0u64;
        for &id in ids {
            let t = self.get(id)?;
            let ok = t.dtype == dtype
                && t.shape.len() == base.len()
                && t.shape.iter().zip(&base).enumerate().all(|(k, (a, b))| k == dim || a == b);
            if !ok {
                bail!(
                    "cat: tensor {id} ({} {}) does not match tensor {} ({} {}) outside dim {dim}",
                    t.dtype.name(),
                    fmt_shape(&t.shape),
                    ids[0],
                    dtype.name(),
                    fmt_shape(&base)
                );
            }
            total += t.shape[dim];
        }
        let mut shape = base.clone();
        shape[dim] = total;
        let numel = checked_numel(&shape).ok_or_else(|| Error("cat: result too large".into()))?;
        let mut data = self.new_data(dtype, numel)?;
        let outer: u64 = base[..dim].iter().product();
        let inner: u64 = base[dim + 1..].iter().product();
        let out_row = (total * inner) as usize;
        let mut col = 0usize;
        for &id in ids {
            let t = &self.tensors[&id];
            let run = (t.shape[dim] * inner) as usize;
            if run > 0 {
                with_data2!(&mut data, &t.data, d, s => {
                    for o in 0..outer as usize {
                        d[o * out_row + col..o * out_row + col + run].copy_from_slice(&s[o * run..(o + 1) * run]);
                    }
                }, meta => ());
            }
            col += run;
        }
        Ok(self.insert(rank, dtype, shape, numel, data))
    }

    fn clone_tensor(&mut self, id: u32, rank: usize) -> Result<u32> {
        self.check_rank(rank)?;
        let t = self.get(id)?;
        let (dtype, shape, numel) = (t.dtype, t.shape.clone(), t.numel);
        let mut data = self.new_data(dtype, numel)?;
        let t = self.get(id)?;
        with_data2!(&mut data, &t.data, d, s => d.copy_from_slice(s), meta => ());
        Ok(self.insert(rank, dtype, shape, numel, data))
    }

    // ---- comparison ----

    fn compare(&self, a: u32, b: u32) -> Result<Option<Mismatch>> {
        self.check_same("compare", a, b)?;
        let (ta, tb) = (self.get(a)?, self.get(b)?);
        Ok(with_data2!(&ta.data, &tb.data, x, y => {
            kernels::first_difference(x, y).map(|i| Mismatch { index: i as u64, expected: x[i].to_f64(), actual: y[i].to_f64() })
        }, meta => None))
    }

    fn hash(&self, id: u32) -> Result<String> {
        let t = self.get(id)?;
        if matches!(t.data, Data::Meta) {
            return Ok("meta".to_string());
        }
        let mut h = crate::hash::Xxh64::new(0);
        h.update(b"clip-parity-tensor\0");
        h.update(t.dtype.name().as_bytes());
        h.update(&[0]);
        h.update(&(t.shape.len() as u64).to_le_bytes());
        for d in &t.shape {
            h.update(&d.to_le_bytes());
        }
        h.update(t.data.bytes());
        Ok(format!("{:016x}", h.digest()))
    }

    /// First local element that is not bitwise round_dtype(f32(gen(i)) * f32(coef)) (any NaN
    /// equals any NaN), where gen(i) is the value fillGrad would store.
    fn verify_scaled(&self, id: u32, spec: &GenSpec, block: &Block, coef: f64) -> Result<Option<Mismatch>> {
        spec.validate()?;
        block.validate()?;
        let t = self.get(id)?;
        if block.numel() != t.numel {
            bail!(
                "verifyScaled: block len {} has {} elements but tensor {id} has shape {} ({} elements)",
                fmt_shape(&block.len),
                block.numel(),
                fmt_shape(&t.shape),
                t.numel
            );
        }
        fn go<T: Elem>(path: KernelPath, xs: &[T], spec: &GenSpec, block: &Block, c: f32) -> Option<Mismatch> {
            let key = spec.key();
            let mut found = None;
            block.for_each_row(|l, g, n| {
                if found.is_some() {
                    return;
                }
                if let Some(j) = spec.scaled_first_difference_with(path, key, g, c, &xs[l..l + n]) {
                    let i = l + j;
                    let expected: T = spec.scaled_value(key, g + j as u64, c);
                    found = Some(Mismatch { index: i as u64, expected: expected.to_f64(), actual: xs[i].to_f64() });
                }
            });
            found
        }
        let (c, path) = (kernels::scale_factor(coef), KernelPath::detect());
        Ok(with_data!(&t.data, xs => go(path, xs, spec, block, c), meta => None))
    }

    // ---- safetensors ----

    fn save_safetensors(&self, path: &str, entries: &[(String, u32)], metadata: &[(String, String)]) -> Result<()> {
        if self.backend == Backend::Meta {
            bail!("saveSafetensors {path}: a meta store has no tensor data to save");
        }
        let mut out = Vec::with_capacity(entries.len());
        for (name, id) in entries {
            let t = self.get(*id).map_err(|e| Error(format!("saveSafetensors {path}: entry '{name}': {e}")))?;
            out.push(safetensors::OutTensor { name: name.as_str(), dtype: t.dtype, shape: &t.shape, data: t.data.bytes() });
        }
        safetensors::write_atomic(path, &out, metadata)
    }

    /// Loads every tensor of the file (validated before anything is allocated), charged to `rank`.
    /// Returns (name, id) in file data order. On any error nothing stays allocated.
    fn load_safetensors(&mut self, path: &str, rank: usize) -> Result<Vec<(String, u32)>> {
        if self.backend == Backend::Meta {
            bail!("loadSafetensors {path}: a meta store cannot load tensor data");
        }
        self.check_rank(rank)?;
        let header = safetensors::read_header(path)?;
        let mut file = std::fs::File::open(path).map_err(|e| Error(format!("safetensors {path}: cannot open: {e}")))?;
        let mut out: Vec<(String, u32)> = Vec::with_capacity(header.entries.len());
        let mut result = Ok(());
        for e in &header.entries {
            let id = match self.alloc(rank, e.dtype, &e.shape) {
                Ok(id) => id,
                Err(err) => {
                    result = Err(Error(format!("safetensors {path}: tensor '{}': {err}", e.name)));
                    break;
                }
            };
            out.push((e.name.clone(), id));
            let t = self.tensors.get_mut(&id).expect("just allocated");
            if let Err(err) = safetensors::read_data(&mut file, path, header.data_start + e.begin, t.data.bytes_mut()) {
                result = Err(err);
                break;
            }
        }
        if let Err(err) = result {
            for (_, id) in out {
                let _ = self.free(id);
            }
            return Err(err);
        }
        Ok(out)
    }

    // ---- training ops (the kernels are in optim.rs) ----

    /// One AdamW step in place: `param`, `exp_avg`, `exp_avg_sq` are f32 tensors and `grad` any
    /// dtype, all with the same number of elements; `step` is the step count after this update.
    fn adamw_step(&mut self, param: u32, grad: u32, exp_avg: u32, exp_avg_sq: u32, step: u64, hp: &AdamW) -> Result<()> {
        hp.validate()?;
        if step == 0 {
            bail!("adamwStep: step must be >= 1 (the step count after this update)");
        }
        let ids = [param, grad, exp_avg, exp_avg_sq];
        for i in 0..4 {
            for j in i + 1..4 {
                if ids[i] == ids[j] {
                    bail!("adamwStep: param, grad, expAvg and expAvgSq must be four different tensors (id {} given twice)", ids[i]);
                }
            }
        }
        let numel = self.get(param)?.numel;
        for (what, id) in [("param", param), ("grad", grad), ("expAvg", exp_avg), ("expAvgSq", exp_avg_sq)] {
            let t = self.get(id)?;
            if what != "grad" && t.dtype != DType::F32 {
                bail!("adamwStep: {what} (tensor {id}) is {} but must be f32", t.dtype.name());
            }
            if t.numel != numel {
                bail!(
                    "adamwStep: {what} (tensor {id}, shape {}) has {} elements but param (tensor {param}) has {numel}",
                    fmt_shape(&t.shape),
                    t.numel
                );
            }
        }
        let k = hp.scalars(step);
        let [p, g, m, v] = self.get_disjoint_mut(ids)?;
        let (Data::F32(p), Data::F32(m), Data::F32(v)) = (&mut p.data, &mut m.data, &mut v.data) else {
            return Ok(()); // meta: no storage, nothing to compute
        };
        match &g.data {
            Data::F32(g) => optim::adamw(p, g, m, v, &k),
            Data::BF16(g) => optim::adamw(p, g, m, v, &k),
            Data::F16(g) => optim::adamw(p, g, m, v, &k),
            Data::Meta => {}
        }
        Ok(())
    }

    /// Copies the intersection of `dst_block` and `src_block` (blocks of the same global tensor)
    /// from `src` into `dst`; same dtype; returns the number of elements copied (0 when disjoint).
    fn copy_block(&mut self, dst: u32, dst_block: &Block, src: u32, src_block: &Block) -> Result<u64> {
        dst_block.validate()?;
        src_block.validate()?;
        if dst_block.global_shape != src_block.global_shape {
            bail!(
                "copyBlock: dstBlock.globalShape {} and srcBlock.globalShape {} differ",
                fmt_shape(&dst_block.global_shape),
                fmt_shape(&src_block.global_shape)
            );
        }
        if dst == src {
            bail!("copyBlock: dst and src are the same tensor ({dst})");
        }
        let (td, ts) = (self.get(dst)?, self.get(src)?);
        if td.dtype != ts.dtype {
            bail!("copyBlock: dst (tensor {dst}) is {} but src (tensor {src}) is {}", td.dtype.name(), ts.dtype.name());
        }
        for (what, id, t, b) in [("dst", dst, td, dst_block), ("src", src, ts, src_block)] {
            if t.numel != b.numel() {
                bail!(
                    "copyBlock: {what}Block len {} has {} elements but tensor {id} has shape {} ({} elements)",
                    fmt_shape(&b.len),
                    b.numel(),
                    fmt_shape(&t.shape),
                    t.numel
                );
            }
        }
        let [d, s] = self.get_disjoint_mut([dst, src])?;
        Ok(match (&mut d.data, &s.data) {
            (Data::F32(x), Data::F32(y)) => optim::copy_block(x, dst_block, y, src_block),
            (Data::BF16(x), Data::BF16(y)) => optim::copy_block(x, dst_block, y, src_block),
            (Data::F16(x), Data::F16(y)) => optim::copy_block(x, dst_block, y, src_block),
            _ => optim::intersect(dst_block, src_block).map_or(0, |x| x.numel()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::GenMode;
    use crate::TensorStore;

    #[test]
    fn sum_tensors_is_the_f32_sum_in_list_order_rounded_once() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let mut st = Store::new(Backend::Cpu, 1).unwrap();
            let ids: Vec<u32> = (0..3).map(|_| st.alloc(0, dtype, &[7, 5]).unwrap()).collect();
            for (k, &id) in ids.iter().enumerate() {
                let g = GenSpec::new(11, 0, &format!("part{k}"), dtype, -1 - k as i32, GenMode::Gen);
                st.fill_grad(id, &g, &Block::full(&[7, 5])).unwrap();
            }
            let want: Vec<f64> = (0..35u64)
                .map(|i| {
                    let s = ids.iter().fold(-0f32, |a, &id| a + st.get_element(id, i).unwrap() as f32);
                    match dtype {
                        DType::F32 => s as f64,
                        DType::BF16 => bf16::from_f32(s).to_f64(),
                        DType::F16 => f16::from_f32(s).to_f64(),
                    }
                })
                .collect();
            st.sum_tensors(ids[0], &ids).unwrap(); // dst among the sources, as a tensor all_reduce does
            let got: Vec<f64> = (0..35u64).map(|i| st.get_element(ids[0], i).unwrap()).collect();
            assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{dtype:?}");
            let other = st.alloc(0, dtype, &[5, 7]).unwrap();
            assert!(st.sum_tensors(ids[0], &[ids[1], other]).unwrap_err().0.contains("does not match the destination"));
        }
    }

    #[test]
    fn sum_tensors_keeps_negative_zero_and_neg_zeros_is_the_identity() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let mut st = Store::new(Backend::Cpu, 1).unwrap();
            let (a, b) = (st.alloc(0, dtype, &[4]).unwrap(), st.alloc(0, dtype, &[4]).unwrap());
            st.fill_grad(a, &GenSpec::new(0, 0, "a", dtype, 0, GenMode::NegZeros), &Block::full(&[4])).unwrap();
            st.fill_grad(b, &GenSpec::new(0, 0, "b", dtype, 0, GenMode::NegZeros), &Block::full(&[4])).unwrap();
            st.sum_tensors(a, &[a, b]).unwrap(); // -0 + -0 is -0, as dist.all_reduce gives; a +0 start made it +0
            assert!((0..4).all(|i| st.get_element(a, i).unwrap().to_bits() == (-0f64).to_bits()), "{dtype:?}");
        }
    }

    #[test]
    fn ledger_by_hand() {
        let mut s = Store::new(Backend::Cpu, 2).unwrap();
        let a = s.alloc(0, DType::F32, &[3, 5]).unwrap(); // 60 bytes
        let b = s.alloc(0, DType::BF16, &[7]).unwrap(); // 14 bytes
        let c = s.alloc(1, DType::F16, &[2, 2, 2]).unwrap(); // 16 bytes
        assert_eq!(s.live_bytes(0).unwrap(), 74);
        assert_eq!(s.peak_bytes(0).unwrap(), 74);
        assert_eq!(s.live_bytes(1).unwrap(), 16);
        s.free(a).unwrap();
        assert_eq!(s.live_bytes(0).unwrap(), 14);
        assert_eq!(s.peak_bytes(0).unwrap(), 74);
        s.reset_peak(0).unwrap();
        assert_eq!(s.peak_bytes(0).unwrap(), 14);
        let d = s.alloc(0, DType::F32, &[]).unwrap(); // scalar: 4 bytes
        assert_eq!(s.peak_bytes(0).unwrap(), 18);
        let e = s.narrow(c, 1, 1, 1, 0).unwrap(); // [2,1,2] f16 = 8 bytes, charged to rank 0
        assert_eq!(s.live_bytes(0).unwrap(), 26);
        assert_eq!(s.live_tensors(), 4);
        assert!(s.free(a).unwrap_err().0.contains("already freed"));
        assert!(s.free(999).unwrap_err().0.contains("no such tensor"));
        for id in [b, c, d, e] {
            s.free(id).unwrap();
        }
        assert_eq!((s.live_bytes(0).unwrap(), s.live_bytes(1).unwrap()), (0, 0));
        assert_eq!(s.peak_bytes(0).unwrap(), 26);
        assert_eq!(s.live_tensors(), 0);
        assert!(s.alloc(2, DType::F32, &[1]).unwrap_err().0.contains("rank: 2"));
    }

    #[test]
    fn meta_charges_without_storage() {
        let mut s = Store::new(Backend::Meta, 1).unwrap();
        // 30,532,122,624 bf16 elements: 61 GB charged, nothing allocated
        let id = s.alloc(0, DType::BF16, &[30_532_122_624]).unwrap();
        assert_eq!(s.live_bytes(0).unwrap(), 61_064_245_248);
        let spec = GenSpec::new(1, 0, "w", DType::BF16, 0, GenMode::Gen);
        s.fill_grad(id, &spec, &Block::full(&[30_532_122_624])).unwrap();
        assert_eq!(s.sum_abs_pow(id, 2.0).unwrap(), 0.0);
        assert!(s.exact_sum_abs_pow(id, 2.0).unwrap().is_zero());
        assert_eq!(s.max_abs(id).unwrap(), 0.0);
        assert_eq!(s.hash(id).unwrap(), "meta");
        let c = s.clone_tensor(id, 0).unwrap();
        assert_eq!(s.peak_bytes(0).unwrap(), 2 * 61_064_245_248);
        assert_eq!(s.compare(id, c).unwrap(), None);
        assert!(s.save_safetensors("/tmp/x.safetensors", &[], &[]).unwrap_err().0.contains("meta"));
        // validation still happens on meta
        assert!(s.fill_grad(id, &spec, &Block::full(&[5])).is_err());
        s.free(id).unwrap();
        s.free(c).unwrap();
        assert_eq!(s.live_bytes(0).unwrap(), 0);
    }

    #[test]
    fn narrow_cat_round_trip() {
        let mut s = Store::new(Backend::Cpu, 1).unwrap();
        for dt in DType::ALL {
            let id = s.alloc(0, dt, &[4, 6, 3]).unwrap();
            let spec = GenSpec::new(3, 1, "t", dt, 0, GenMode::Gen);
            s.fill_grad(id, &spec, &Block::full(&[4, 6, 3])).unwrap();
            for dim in 0..3 {
                let n = s.get(id).unwrap().shape[dim];
                let a = s.narrow(id, dim, 0, 1, 0).unwrap();
                let b = s.narrow(id, dim, 1, n - 1, 0).unwrap();
                let c = s.cat(&[a, b], dim, 0).unwrap();
                assert_eq!(s.get(c).unwrap().shape, vec![4, 6, 3]);
                assert_eq!(s.compare(id, c).unwrap(), None);
                assert_eq!(s.hash(id).unwrap(), s.hash(c).unwrap());
                // a narrow equals the fill of the corresponding block
                let mut start = vec![0, 0, 0];
                start[dim] = 1;
                let mut len = vec![4, 6, 3];
                len[dim] = n - 1;
                let blk = Block { global_shape: vec![4, 6, 3], start, len: len.clone() };
                let d = s.alloc(0, dt, &len).unwrap();
                s.fill_grad(d, &spec, &blk).unwrap();
                assert_eq!(s.compare(b, d).unwrap(), None);
                for x in [a, b, c, d] {
                    s.free(x).unwrap();
                }
            }
            s.free(id).unwrap();
        }
        assert_eq!(s.live_bytes(0).unwrap(), 0);
    }

    #[test]
    fn scale_verify_compare_hash() {
        let mut s = Store::new(Backend::Cpu, 1).unwrap();
        let blk = Block { global_shape: vec![10, 100], start: vec![2, 10], len: vec![5, 50] };
        for dt in DType::ALL {
            let mut spec = GenSpec::new(11, 2, "layer.w", dt, 3, GenMode::Gen);
            spec.special = Some((2 * 100 + 12, f64::NAN));
            let id = s.alloc(0, dt, &[5, 50]).unwrap();
            s.fill_grad(id, &spec, &blk).unwrap();
            assert!(s.get_element(id, 2).unwrap().is_nan());
            let h0 = s.hash(id).unwrap();
            assert_eq!(h0.len(), 16);
            s.scale(id, 0.3).unwrap();
            assert_eq!(s.verify_scaled(id, &spec, &blk, 0.3).unwrap(), None);
            let m = s.verify_scaled(id, &spec, &blk, 0.31).unwrap().unwrap();
            assert_eq!(m.index, 0);
            s.set_element(id, 77, 1234.0).unwrap();
            let m = s.verify_scaled(id, &spec, &blk, 0.3).unwrap().unwrap();
            assert_eq!(m.index, 77);
            assert_ne!(s.hash(id).unwrap(), h0);
            let c = s.clone_tensor(id, 0).unwrap();
            assert_eq!(s.compare(id, c).unwrap(), None);
            s.set_element(c, 100, -0.0).unwrap();
            s.set_element(id, 100, 0.0).unwrap();
            let m = s.compare(id, c).unwrap().unwrap();
            assert_eq!(m.index, 100);
            s.free(c).unwrap();
            s.free(id).unwrap();
        }
    }

    #[test]
    fn alloc_fill_equals_alloc_then_fill() {
        use crate::tensor_store::{FillItem, VerifyItem};
        for backend in [Backend::Cpu, Backend::Meta] {
            let mut s = Store::new(backend, 2).unwrap();
            let blocks = [
                Block { global_shape: vec![10, 100], start: vec![2, 10], len: vec![5, 50] },
                Block::full(&[]),
                Block { global_shape: vec![4, 0], start: vec![0, 0], len: vec![4, 0] },
                Block::full(&[1003]),
            ];
            for dt in DType::ALL {
                for (mode, exp) in [(GenMode::Gen, 0), (GenMode::Gen, -140), (GenMode::Ones, 0), (GenMode::Zeros, 0)] {
                    let mut spec = GenSpec::new(11, 2, "layer.w", dt, exp, mode);
                    spec.special = Some((212, f64::NAN));
                    for blk in &blocks {
                        let a = s.alloc(1, dt, &blk.len).unwrap();
                        s.fill_grad(a, &spec, blk).unwrap();
                        let b = s.alloc_fill(1, dt, &blk.len, &spec, blk).unwrap();
                        assert_eq!(s.hash(a).unwrap(), s.hash(b).unwrap(), "{dt:?} {mode:?} {blk:?}");
                        assert_eq!(s.get(a).unwrap().shape, s.get(b).unwrap().shape);
                        assert_eq!(s.live_bytes(1).unwrap(), 2 * s.get(a).unwrap().bytes());
                        s.free(a).unwrap();
                        s.free(b).unwrap();
                    }
                }
            }
            // errors, in alloc's order, before anything is allocated
            let spec = GenSpec::new(1, 0, "w", DType::F32, 0, GenMode::Gen);
            let blk = Block::full(&[6]);
            assert!(s.alloc_fill(2, DType::F32, &[6], &spec, &blk).unwrap_err().0.starts_with("rank: 2"));
            assert_eq!(
                s.alloc_fill(0, DType::F32, &[2, 4], &spec, &blk).unwrap_err().0,
                "allocFill: block len [6] has 6 elements but shape [2, 4] has 8"
            );
            let bad = GenSpec { exp: 901, ..spec.clone() };
            assert!(s.alloc_fill(0, DType::F32, &[6], &bad, &blk).unwrap_err().0.starts_with("exp: 901"));
            assert_eq!(s.live_tensors(), 0);
            // many: in order, all or nothing
            let items: Vec<FillItem> = (0..5)
                .map(|k| FillItem { shape: vec![k + 1, 3], spec: GenSpec::new(2, 0, &format!("p{k}"), DType::BF16, 0, GenMode::Gen), block: Block::full(&[k + 1, 3]) })
                .collect();
            let ids = s.alloc_fill_many(0, DType::BF16, &items).unwrap();
            assert_eq!(ids.len(), 5);
            assert_eq!(s.live_bytes(0).unwrap(), (1 + 2 + 3 + 4 + 5) * 3 * 2);
            let mut bad = items.clone();
            bad[3].shape = vec![1];
            let e = s.alloc_fill_many(0, DType::BF16, &bad).unwrap_err();
            assert_eq!(e.0, "items[3]: allocFill: block len [4, 3] has 12 elements but shape [1] has 1");
            assert_eq!(s.live_tensors(), 5);
            // verify many: the first mismatch in list order
            let checks = |coef: f64| -> Vec<VerifyItem> {
                ids.iter().zip(&items).map(|(&id, it)| VerifyItem { id, spec: it.spec.clone(), block: it.block.clone(), coef }).collect()
            };
            assert_eq!(s.verify_scaled_many(&checks(1.0)).unwrap(), None);
            if backend == Backend::Cpu {
                s.set_element(ids[4], 2, 77.0).unwrap();
                s.set_element(ids[2], 5, 77.0).unwrap();
                let (k, m) = s.verify_scaled_many(&checks(1.0)).unwrap().unwrap();
                assert_eq!((k, m.index, m.actual), (2, 5, 77.0));
                assert_eq!(Some(m), s.verify_scaled(ids[2], &items[2].spec, &items[2].block, 1.0).unwrap());
            }
            let mut bad = checks(1.0);
            bad[1].block = Block::full(&[7]);
            assert!(s.verify_scaled_many(&bad).unwrap_err().0.starts_with("items[1]: verifyScaled: block len [7]"));
            for id in ids {
                s.free(id).unwrap();
            }
            assert_eq!(s.live_bytes(0).unwrap(), 0);
        }
    }

    #[test]
    fn reused_buffers_never_show_old_contents() {
        // large enough for the pool (pool.rs); an odd size, so other tests do not take the buffers
        let mut s = Store::new(Backend::Cpu, 1).unwrap();
        let shape = [1001, 1003];
        let blk = Block::full(&shape);
        for dt in DType::ALL {
            let spec = GenSpec::new(5, 0, "big", dt, 0, GenMode::Ones);
            for _ in 0..3 {
                let a = s.alloc_fill(0, dt, &shape, &spec, &blk).unwrap();
                assert_eq!(s.sum_abs_pow(a, 1.0).unwrap(), 1001.0 * 1003.0);
                s.free(a).unwrap();
                // alloc after a free of the same size: zeros, not the ones just freed
                let z = s.alloc(0, dt, &shape).unwrap();
                assert_eq!(s.max_abs(z).unwrap(), 0.0);
                assert_eq!(s.read_pass(z).unwrap(), 0);
                let g = GenSpec::new(5, 0, "big", dt, 0, GenMode::Gen);
                let f = s.alloc_fill(0, dt, &shape, &g, &blk).unwrap(); // reuses nothing stale either
                s.fill_grad(z, &g, &blk).unwrap();
                assert_eq!(s.hash(f).unwrap(), s.hash(z).unwrap());
                s.free(z).unwrap();
                s.free(f).unwrap();
            }
        }
    }

    #[test]
    fn fill_value_get_set() {
        let mut s = Store::new(Backend::Cpu, 1).unwrap();
        let id = s.alloc(0, DType::BF16, &[3]).unwrap();
        s.fill_value(id, 1.0 + 2f64.powi(-8)).unwrap();
        assert_eq!(s.get_element(id, 0).unwrap(), 1.0);
        s.set_element(id, 2, 3.0 * 2f64.powi(-8) + 1.0).unwrap();
        assert_eq!(s.get_element(id, 2).unwrap(), 1.0 + 2f64.powi(-6));
        assert!(s.get_element(id, 3).unwrap_err().0.contains("index: 3"));
        assert_eq!(s.max_abs(id).unwrap(), 1.015625);
    }
}
