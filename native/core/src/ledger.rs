//! The bookkeeping every tensor store shares (cpu, meta and cuda differ only in the storage `S` of a
//! tensor): the tensor table (id -> owner rank, dtype, shape, element count, storage), id allocation
//! (ids are >= 1 and never reused), the per-rank ledger of live and peak bytes, and the checks of ids,
//! ranks and every op's arguments, with the messages of native/CONTRACT.md.
//!
//! Ledger: every tensor charges numel * dtype size bytes to its owner rank while it is alive
//! (exactly; no rounding, no allocator overhead). `peak` is the maximum of `live` since the last
//! reset.

use std::collections::HashMap;

use crate::bail;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gen::{checked_numel, Block, GenSpec};
use crate::optim::AdamW;

/// One tensor of a store: its metadata and its storage `data` (host memory, nothing, a device buffer).
pub struct Tensor<S> {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub owner: usize,
    pub numel: u64,
    pub data: S,
}

impl<S> Tensor<S> {
    /// The bytes charged to the owner: numel * dtype size.
    pub fn bytes(&self) -> u64 {
        self.numel * self.dtype.size() as u64
    }

    /// `index` as a local element index of this tensor (`id`), or the out-of-range error.
    pub fn check_index(&self, id: u32, index: u64) -> Result<usize> {
        if index >= self.numel {
            bail!("index: {index} is out of range for tensor {id} with {} elements", self.numel);
        }
        Ok(index as usize)
    }
}

/// Live and peak bytes of one rank.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct RankBytes {
    live: u64,
    peak: u64,
}

/// "[2, 3]"
pub fn fmt_shape(s: &[u64]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

/// p of sumAbsPow / exactSumAbsPow: finite and > 0.
pub fn check_p(p: f64) -> Result<()> {
    if !(p.is_finite() && p > 0.0) {
        bail!("p: {p} must be finite and > 0 (use maxAbs for p = inf)");
    }
    Ok(())
}

/// What alloc_fill checks once the tensor itself could be allocated (every store, same messages):
/// the generator parameters, the block, and that the block has the shape's element count.
pub fn check_alloc_fill(shape: &[u64], spec: &GenSpec, block: &Block) -> Result<()> {
    spec.validate()?;
    block.validate()?;
    let numel = checked_numel(shape);
    if numel != Some(block.numel()) {
        bail!(
            "allocFill: block len {} has {} elements but shape {} has {}",
            fmt_shape(&block.len),
            block.numel(),
            fmt_shape(shape),
            numel.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
        );
    }
    Ok(())
}

/// The tensors of a store, by id, with the per-rank ledger.
pub struct Ledger<S> {
    ranks: Vec<RankBytes>,
    tensors: HashMap<u32, Tensor<S>>,
    next_id: u32,
}

impl<S> Ledger<S> {
    pub fn new(ranks: usize) -> Result<Ledger<S>> {
        if ranks == 0 {
            bail!("ranks: 0 must be at least 1");
        }
        Ok(Ledger { ranks: vec![RankBytes::default(); ranks], tensors: HashMap::new(), next_id: 1 })
    }

    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    pub fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.ranks.len() {
            bail!("rank: {rank} is out of range (this store has {} ranks: 0..{})", self.ranks.len(), self.ranks.len() - 1);
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

    pub fn get(&self, id: u32) -> Result<&Tensor<S>> {
        self.tensors.get(&id).ok_or_else(|| self.missing(id))
    }

    pub fn get_mut(&mut self, id: u32) -> Result<&mut Tensor<S>> {
        let e = self.missing(id);
        self.tensors.get_mut(&id).ok_or(e)
    }

    /// Mutable access to N different live tensors at once.
    pub fn get_disjoint_mut<const N: usize>(&mut self, ids: [u32; N]) -> Result<[&mut Tensor<S>; N]> {
        for (i, id) in ids.iter().enumerate() {
            self.get(*id)?;
            if ids[..i].contains(id) {
                bail!("id {id}: the same tensor is given twice");
            }
        }
        Ok(self.tensors.get_disjoint_mut(ids.each_ref()).map(|t| t.expect("checked above")))
    }

    /// Every live tensor (in no particular order).
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor<S>> {
        self.tensors.values()
    }

    /// alloc's checks of the shape (and of the id space); the element count.
    pub fn check_alloc(&self, dtype: DType, shape: &[u64]) -> Result<u64> {
        let numel = checked_numel(shape)
            .filter(|n| n.checked_mul(dtype.size() as u64).is_some())
            .ok_or_else(|| Error(format!("shape: {} has too many elements", fmt_shape(shape))))?;
        if self.next_id == u32::MAX {
            bail!("too many tensors allocated in this store");
        }
        Ok(numel)
    }

    /// A new tensor charged to `rank` (checked before: `check_rank`, `check_alloc`); its id.
    pub fn insert(&mut self, rank: usize, dtype: DType, shape: Vec<u64>, numel: u64, data: S) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let t = Tensor { dtype, shape, owner: rank, numel, data };
        let l = &mut self.ranks[rank];
        l.live += t.bytes();
        l.peak = l.peak.max(l.live);
        self.tensors.insert(id, t);
        id
    }

    /// Frees a tensor: it leaves the table and its bytes leave its owner's live bytes; the storage
    /// is the caller's to release.
    pub fn remove(&mut self, id: u32) -> Result<Tensor<S>> {
        let e = self.missing(id);
        let t = self.tensors.remove(&id).ok_or(e)?;
        self.ranks[t.owner].live -= t.bytes();
        Ok(t)
    }

    pub fn live_bytes(&self, rank: usize) -> Result<u64> {
        self.check_rank(rank)?;
        Ok(self.ranks[rank].live)
    }
    pub fn peak_bytes(&self, rank: usize) -> Result<u64> {
        self.check_rank(rank)?;
        Ok(self.ranks[rank].peak)
    }
    /// peak := live
    pub fn reset_peak(&mut self, rank: usize) -> Result<()> {
        self.check_rank(rank)?;
        let l = &mut self.ranks[rank];
        l.peak = l.live;
        Ok(())
    }
    pub fn live_tensors(&self) -> usize {
        self.tensors.len()
    }

    // ---- the checks of the ops' arguments (every store, before it touches any storage) ----

    /// alloc: the rank, the shape and the id space; the element count.
    pub fn check_new(&self, rank: usize, dtype: DType, shape: &[u64]) -> Result<u64> {
        self.check_rank(rank)?;
        self.check_alloc(dtype, shape)
    }

    /// Same dtype and number of elements (copyFrom, compare).
    pub fn check_same(&self, what: &str, a: u32, b: u32) -> Result<()> {
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

    /// fillGrad / verifyScaled (`what`): the generator parameters, the block, and that the block has
    /// the tensor's element count; the tensor.
    pub fn check_fill(&self, what: &str, id: u32, spec: &GenSpec, block: &Block) -> Result<&Tensor<S>> {
        spec.validate()?;
        block.validate()?;
        let t = self.get(id)?;
        if block.numel() != t.numel {
            bail!(
                "{what}: block len {} has {} elements but tensor {id} has shape {} ({} elements)",
                fmt_shape(&block.len),
                block.numel(),
                fmt_shape(&t.shape),
                t.numel
            );
        }
        Ok(t)
    }

    /// narrow: the new tensor's (dtype, shape, numel).
    pub fn check_narrow(&self, id: u32, dim: usize, start: u64, len: u64, rank: usize) -> Result<(DType, Vec<u64>, u64)> {
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
        Ok((t.dtype, shape, numel))
    }

    /// cat: the new tensor's (dtype, shape, numel).
    pub fn check_cat(&self, ids: &[u32], dim: usize, rank: usize) -> Result<(DType, Vec<u64>, u64)> {
        self.check_rank(rank)?;
        if ids.is_empty() {
            bail!("cat: ids is empty");
        }
        let first = self.get(ids[0])?;
        let (dtype, base) = (first.dtype, &first.shape);
        if dim >= base.len() {
            bail!("dim: {dim} is out of range for tensor {} with shape {}", ids[0], fmt_shape(base));
        }
        let mut total = 0u64;
        for &id in ids {
            let t = self.get(id)?;
            let ok = t.dtype == dtype
                && t.shape.len() == base.len()
                && t.shape.iter().zip(base).enumerate().all(|(k, (a, b))| k == dim || a == b);
            if !ok {
                bail!(
                    "cat: tensor {id} ({} {}) does not match tensor {} ({} {}) outside dim {dim}",
                    t.dtype.name(),
                    fmt_shape(&t.shape),
                    ids[0],
                    dtype.name(),
                    fmt_shape(base)
                );
            }
            total += t.shape[dim];
        }
        let mut shape = base.clone();
        shape[dim] = total;
        let numel = checked_numel(&shape).ok_or_else(|| Error("cat: result too large".into()))?;
        Ok((dtype, shape, numel))
    }

    /// clone: the new tensor's (dtype, shape, numel).
    pub fn check_clone(&self, id: u32, rank: usize) -> Result<(DType, Vec<u64>, u64)> {
        self.check_rank(rank)?;
        let t = self.get(id)?;
        Ok((t.dtype, t.shape.clone(), t.numel))
    }

    /// adamwStep: `param`, `exp_avg`, `exp_avg_sq` are f32 and `grad` any dtype, four different
    /// tensors with the same number of elements; `step` >= 1.
    pub fn check_adamw(&self, param: u32, grad: u32, exp_avg: u32, exp_avg_sq: u32, step: u64, hp: &AdamW) -> Result<()> {
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
        Ok(())
    }

    /// copyBlock: two blocks of one global tensor, two different tensors of one dtype, each with its
    /// block's element count.
    pub fn check_copy_block(&self, dst: u32, dst_block: &Block, src: u32, src_block: &Block) -> Result<()> {
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
        Ok(())
    }
}

/// What every store answers from its ledger alone, whatever its storage: the ranks, a tensor's
/// shape, dtype and owner, and each rank's live and peak bytes. `TensorStore` answers these
/// through it, so the host and device stores cannot answer them differently.
pub trait LedgerView {
    fn ranks(&self) -> usize;
    fn shape(&self, id: u32) -> Result<&[u64]>;
    fn dtype(&self, id: u32) -> Result<DType>;
    fn owner(&self, id: u32) -> Result<usize>;
    fn live_bytes(&self, rank: usize) -> Result<u64>;
    fn peak_bytes(&self, rank: usize) -> Result<u64>;
    fn reset_peak(&mut self, rank: usize) -> Result<()>;
    fn live_tensors(&self) -> usize;
}

impl<S> LedgerView for Ledger<S> {
    fn ranks(&self) -> usize {
        Ledger::ranks(self)
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
    fn live_bytes(&self, rank: usize) -> Result<u64> {
        Ledger::live_bytes(self, rank)
    }
    fn peak_bytes(&self, rank: usize) -> Result<u64> {
        Ledger::peak_bytes(self, rank)
    }
    fn reset_peak(&mut self, rank: usize) -> Result<()> {
        Ledger::reset_peak(self, rank)
    }
    fn live_tensors(&self) -> usize {
        Ledger::live_tensors(self)
    }
}
