//! The cpu and meta stores: tensors in host memory (`Data`), or none at all (meta), on the
//! bookkeeping every store shares (ledger.rs: the tensor table, ids, ranks, the per-rank ledger and
//! the argument checks).
//!
//! A `meta` store charges the same bytes as a cpu store but holds no storage and does no
//! arithmetic: fills and scales are no-ops, reductions return 0, compare/verify return None and hash
//! returns "meta". Every argument is still validated on meta, so a layout bug shows there too.

use half::{bf16, f16};

use crate::bail;
use crate::biguint::BigUint;
use crate::dtype::{DType, Elem};
use crate::error::{Error, Result};
use crate::exact;
use crate::gen::{Block, GenSpec};
use crate::hash::content_hash;
use crate::kernels;
use crate::ledger::{self, check_alloc_fill, check_p, Ledger, LedgerView};
use crate::optim::{self, AdamW};
use crate::path::KernelPath;
use crate::pool::{self, Buffer};
use crate::store_api::{load_safetensors_with, save_safetensors_with, Mismatch, StoreKind, TensorStore};

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

/// A tensor's elements: a range of the process-wide arena (pool.rs), back there when dropped.
pub enum Data {
    F32(Buffer<f32>),
    BF16(Buffer<bf16>),
    F16(Buffer<f16>),
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

/// A tensor of the cpu/meta store.
pub type Tensor = ledger::Tensor<Data>;

/// A buffer of n elements written by the generator as `Block::fill` writes them, without zeroing
/// the memory first. Requires block.validate() and block.numel() == n.
fn filled<T: Elem>(n: usize, path: KernelPath, spec: &GenSpec, block: &Block) -> Result<Buffer<T>> {
    // SAFETY: fill_uninit_with writes all n elements (it checks that its rows cover the block and
    // panics before returning otherwise).
    unsafe { pool::filled_with(n, |xs| block.fill_uninit_with(path, spec, xs)) }
}

pub struct Store {
    backend: Backend,
    table: Ledger<Data>,
}

impl Store {
    pub fn new(backend: Backend, ranks: usize) -> Result<Store> {
        Ok(Store { backend, table: Ledger::new(ranks)? })
    }
    pub fn backend(&self) -> Backend {
        self.backend
    }
    pub fn get(&self, id: u32) -> Result<&Tensor> {
        self.table.get(id)
    }
    /// Mutable access to N different live tensors at once (for kernels in other modules, e.g. optim).
    pub fn get_disjoint_mut<const N: usize>(&mut self, ids: [u32; N]) -> Result<[&mut Tensor; N]> {
        self.table.get_disjoint_mut(ids)
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
            DType::F32 => Data::F32(pool::zeroed(n)?),
            DType::BF16 => Data::BF16(pool::zeroed(n)?),
            DType::F16 => Data::F16(pool::zeroed(n)?),
        })
    }
}

impl TensorStore for Store {
    fn kind(&self) -> StoreKind {
        match self.backend {
            Backend::Cpu => StoreKind::Cpu,
            Backend::Meta => StoreKind::Meta,
        }
    }
    fn ledger(&self) -> &dyn LedgerView {
        &self.table
    }
    fn ledger_mut(&mut self) -> &mut dyn LedgerView {
        &mut self.table
    }

    /// Zero-filled tensor charged to `rank`.
    fn alloc(&mut self, rank: usize, dtype: DType, shape: &[u64]) -> Result<u32> {
        let numel = self.table.check_new(rank, dtype, shape)?;
        let data = self.new_data(dtype, numel)?;
        Ok(self.table.insert(rank, dtype, shape.to_vec(), numel, data))
    }

    /// Allocated and filled in one pass over the new memory: no zeroing pass before the fill.
    fn alloc_fill(&mut self, rank: usize, dtype: DType, shape: &[u64], spec: &GenSpec, block: &Block) -> Result<u32> {
        self.table.check_rank(rank)?;
        check_alloc_fill(shape, spec, block)?;
        let numel = self.table.check_alloc(dtype, shape)?;
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
        Ok(self.table.insert(rank, dtype, shape.to_vec(), numel, data))
    }

    fn free(&mut self, id: u32) -> Result<()> {
        self.table.remove(id)?; // its buffer goes back to the arena (Buffer's Drop)
        Ok(())
    }

    // ---- contents ----

    fn fill_grad(&mut self, id: u32, spec: &GenSpec, block: &Block) -> Result<()> {
        self.table.check_fill("fillGrad", id, spec, block)?;
        let t = self.table.get_mut(id)?;
        let path = KernelPath::detect();
        with_data!(&mut t.data, xs => block.fill_with(path, spec, xs), meta => ());
        Ok(())
    }

    fn fill_value(&mut self, id: u32, v: f64) -> Result<()> {
        let t = self.table.get_mut(id)?;
        with_data!(&mut t.data, xs => { let x = Elem::from_f64(v); xs.fill(x) }, meta => ());
        Ok(())
    }

    fn get_element(&self, id: u32, index: u64) -> Result<f64> {
        let t = self.get(id)?;
        let i = t.check_index(id, index)?;
        Ok(with_data!(&t.data, xs => xs[i].to_f64(), meta => 0.0))
    }

    fn set_element(&mut self, id: u32, index: u64, v: f64) -> Result<()> {
        let t = self.table.get_mut(id)?;
        let i = t.check_index(id, index)?;
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
        let t = self.table.get_mut(id)?;
        with_data!(&mut t.data, xs => kernels::scale(xs, c), meta => ());
        Ok(())
    }

    fn sum_tensors(&mut self, dst: u32, srcs: &[u32]) -> Result<()> {
        let n = self.check_sum_tensors(dst, srcs)? as usize;
        if matches!(self.get(dst)?.data, Data::Meta) {
            return Ok(());
        }
        // -0 is the identity of float addition: a sum of -0s stays -0, as a dist.all_reduce of them does
        let mut acc = pool::full(n, -0f32)?;
        for &s in srcs {
            let t = self.get(s)?;
            with_data!(&t.data, xs => acc.iter_mut().zip(xs.iter()).for_each(|(a, x)| *a += x.to_f32()), meta => ());
        }
        let t = self.table.get_mut(dst)?;
        // every dtype widens exactly into f32; the sum is rounded once to the dtype
        with_data!(&mut t.data, xs => xs.iter_mut().zip(acc.iter()).for_each(|(x, a)| *x = Elem::from_f32(*a)), meta => ());
        Ok(())
    }

    fn copy_from(&mut self, dst: u32, src: u32) -> Result<()> {
        self.table.check_same("copyFrom", dst, src)?;
        if dst == src {
            return Ok(());
        }
        let [d, s] = self.table.get_disjoint_mut([dst, src])?;
        with_data2!(&mut d.data, &s.data, x, y => x.copy_from_slice(y), meta => ());
        Ok(())
    }

    // ---- new tensors ----

    fn narrow(&mut self, id: u32, dim: usize, start: u64, len: u64, rank: usize) -> Result<u32> {
        let (dtype, shape, numel) = self.table.check_narrow(id, dim, start, len, rank)?;
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
        Ok(self.table.insert(rank, dtype, shape, numel, data))
    }

    fn cat(&mut self, ids: &[u32], dim: usize, rank: usize) -> Result<u32> {
        let (dtype, shape, numel) = self.table.check_cat(ids, dim, rank)?;
        let mut data = self.new_data(dtype, numel)?;
        let outer: u64 = shape[..dim].iter().product();
        let inner: u64 = shape[dim + 1..].iter().product();
        let out_row = (shape[dim] * inner) as usize;
        let mut col = 0usize;
        for &id in ids {
            let t = self.get(id)?;
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
        Ok(self.table.insert(rank, dtype, shape, numel, data))
    }

    fn clone_tensor(&mut self, id: u32, rank: usize) -> Result<u32> {
        let (dtype, shape, numel) = self.table.check_clone(id, rank)?;
        let mut data = self.new_data(dtype, numel)?;
        let t = self.get(id)?;
        with_data2!(&mut data, &t.data, d, s => d.copy_from_slice(s), meta => ());
        Ok(self.table.insert(rank, dtype, shape, numel, data))
    }

    // ---- comparison ----

    fn compare(&self, a: u32, b: u32) -> Result<Option<Mismatch>> {
        self.table.check_same("compare", a, b)?;
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
        Ok(content_hash(t.dtype, &t.shape, t.data.bytes()))
    }

    /// First local element that is not bitwise round_dtype(f32(gen(i)) * f32(coef)) (any NaN
    /// equals any NaN), where gen(i) is the value fillGrad would store.
    fn verify_scaled(&self, id: u32, spec: &GenSpec, block: &Block, coef: f64) -> Result<Option<Mismatch>> {
        let t = self.table.check_fill("verifyScaled", id, spec, block)?;
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
        save_safetensors_with(self, path, entries, metadata, |s, id| Ok(s.get(id)?.data.bytes().into()))
    }

    /// Loads every tensor of the file (validated before anything is allocated), charged to `rank`.
    /// Returns (name, id) in file data order. On any error nothing stays allocated.
    fn load_safetensors(&mut self, path: &str, rank: usize) -> Result<Vec<(String, u32)>> {
        if self.backend == Backend::Meta {
            bail!("loadSafetensors {path}: a meta store cannot load tensor data");
        }
        load_safetensors_with(self, path, rank, |s, id, read| read(s.table.get_mut(id)?.data.bytes_mut()))
    }

    // ---- training ops (the kernels are in optim.rs) ----

    /// One AdamW step in place: `param`, `exp_avg`, `exp_avg_sq` are f32 tensors and `grad` any
    /// dtype, all with the same number of elements; `step` is the step count after this update.
    fn adamw_step(&mut self, param: u32, grad: u32, exp_avg: u32, exp_avg_sq: u32, step: u64, hp: &AdamW) -> Result<()> {
        self.table.check_adamw(param, grad, exp_avg, exp_avg_sq, step, hp)?;
        let k = hp.scalars(step);
        let [p, g, m, v] = self.table.get_disjoint_mut([param, grad, exp_avg, exp_avg_sq])?;
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
        self.table.check_copy_block(dst, dst_block, src, src_block)?;
        let [d, s] = self.table.get_disjoint_mut([dst, src])?;
        Ok(match (&mut d.data, &s.data) {
            (Data::F32(x), Data::F32(y)) => optim::copy_block(x, dst_block, y, src_block),
            (Data::BF16(x), Data::BF16(y)) => optim::copy_block(x, dst_block, y, src_block),
            (Data::F16(x), Data::F16(y)) => optim::copy_block(x, dst_block, y, src_block),
            _ => optim::intersect(dst_block, src_block).map_or(0, |x| x.numel()),
        })
    }
}

#[cfg(test)]
mod tests;
