//! `TensorStore`: the one API of every tensor store, implemented by the cpu/meta `Store` (store.rs)
//! and the cuda `CudaStore` (cuda/store.rs), so that the compiler keeps them equal; the value types
//! of that API; and the safetensors paths every store shares (`save_safetensors_with`,
//! `load_safetensors_with`: generic over where a tensor's bytes are). `tensor_store::open` gives the
//! store of a backend as a `Box<dyn TensorStore>`, which is what the napi binding holds. Semantics:
//! native/CONTRACT.md (every store has the cpu store's results, argument checks and error messages;
//! the cuda store's `sum_abs_pow` sums in another, still deterministic, order).
//!
//! Ids are >= 1 and never reused; ranks are 0..ranks(); bytes are charged to the owner rank
//! (numel * dtype size) from alloc (narrow, cat, clone_tensor, load_safetensors) to free (the
//! bookkeeping of every store: ledger.rs).

use std::borrow::Cow;

use crate::biguint::BigUint;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gen::{checked_numel, Block, GenSpec};
use crate::ledger::{check_alloc_fill, LedgerView};
use crate::optim::AdamW;
use crate::safetensors;

/// One tensor of [`TensorStore::alloc_fill_many`]: its shape and what fills it.
#[derive(Clone, Debug, PartialEq)]
pub struct FillItem {
    pub shape: Vec<u64>,
    pub spec: GenSpec,
    pub block: Block,
}

/// One check of [`TensorStore::verify_scaled_many`].
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyItem {
    pub id: u32,
    pub spec: GenSpec,
    pub block: Block,
    pub coef: f64,
}

/// The first differing element of `compare` / `verify_scaled`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    /// local flat index
    pub index: u64,
    pub expected: f64,
    pub actual: f64,
}

fn at_item(k: usize) -> impl Fn(Error) -> Error {
    move |e| Error(format!("items[{k}]: {}", e.0))
}

/// The backends a store can be opened on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StoreKind {
    Cpu,
    Meta,
    Cuda,
}

impl StoreKind {
    pub const NAMES: &'static str = "cpu, meta, cuda";
    pub fn parse(s: &str) -> Option<StoreKind> {
        match s {
            "cpu" => Some(StoreKind::Cpu),
            "meta" => Some(StoreKind::Meta),
            "cuda" => Some(StoreKind::Cuda),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Cpu => "cpu",
            StoreKind::Meta => "meta",
            StoreKind::Cuda => "cuda",
        }
    }
}

/// Device memory as the driver reports it, beside the ledger (cuda).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceMemory {
    pub device: String,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// A store of tensors owned by ranks, with a per-rank memory ledger.
pub trait TensorStore: Send {
    /// The backend this store runs on.
    fn kind(&self) -> StoreKind;
    /// The ledger: which tensors are live, their owners, and each rank's bytes.
    fn ledger(&self) -> &dyn LedgerView;
    fn ledger_mut(&mut self) -> &mut dyn LedgerView;
    /// The number of ranks (ledgers).
    fn ranks(&self) -> usize {
        self.ledger().ranks()
    }

    // ---- tensors and the ledger ----

    /// A zero-filled tensor charged to `rank`; returns its id.
    fn alloc(&mut self, rank: usize, dtype: DType, shape: &[u64]) -> Result<u32>;
    /// Error on an unknown or already freed id.
    fn free(&mut self, id: u32) -> Result<()>;
    fn shape(&self, id: u32) -> Result<&[u64]> {
        self.ledger().shape(id)
    }
    fn dtype(&self, id: u32) -> Result<DType> {
        self.ledger().dtype(id)
    }
    /// The rank the tensor is charged to.
    fn owner(&self, id: u32) -> Result<usize> {
        self.ledger().owner(id)
    }
    fn live_bytes(&self, rank: usize) -> Result<u64> {
        self.ledger().live_bytes(rank)
    }
    fn peak_bytes(&self, rank: usize) -> Result<u64> {
        self.ledger().peak_bytes(rank)
    }
    /// peak := live
    fn reset_peak(&mut self, rank: usize) -> Result<()> {
        self.ledger_mut().reset_peak(rank)
    }
    /// Live tensors of every rank.
    fn live_tensors(&self) -> usize {
        self.ledger().live_tensors()
    }
    /// What the rank's device reports about its memory, read now (cuda); None on host stores
    /// (the rank is still checked).
    fn device_memory(&self, rank: usize) -> Result<Option<DeviceMemory>> {
        self.live_bytes(rank).map(|_| None)
    }

    /// A tensor charged to `rank`, filled as `fill_grad(id, spec, block)` fills it: the arguments of
    /// alloc are checked first (same errors), then `check_alloc_fill`, before anything is allocated.
    /// Stores that can, fill the new memory directly, without zeroing it first; no element is
    /// readable before it is filled.
    fn alloc_fill(&mut self, rank: usize, dtype: DType, shape: &[u64], spec: &GenSpec, block: &Block) -> Result<u32> {
        // the rank first, as alloc checks it (the cpu store's own alloc_fill checks in this order)
        self.live_bytes(rank)?;
        check_alloc_fill(shape, spec, block)?;
        let id = self.alloc(rank, dtype, shape)?;
        if let Err(e) = self.fill_grad(id, spec, block) {
            self.free(id)?;
            return Err(e);
        }
        Ok(id)
    }

    /// `alloc_fill` of every item in order, all charged to `rank` in `dtype`; their ids. On the
    /// first error (message prefixed `items[k]: `) the tensors this call allocated are freed again.
    fn alloc_fill_many(&mut self, rank: usize, dtype: DType, items: &[FillItem]) -> Result<Vec<u32>> {
        self.live_bytes(rank)?; // the rank is the call's, not an item's
        let mut ids = Vec::with_capacity(items.len());
        for (k, it) in items.iter().enumerate() {
            match self.alloc_fill(rank, dtype, &it.shape, &it.spec, &it.block) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for id in ids {
                        self.free(id)?;
                    }
                    return Err(at_item(k)(e));
                }
            }
        }
        Ok(ids)
    }

    // ---- contents ----

    /// Element j of the shard = gen(global flat index of j in `block`).
    fn fill_grad(&mut self, id: u32, spec: &GenSpec, block: &Block) -> Result<()>;
    fn fill_value(&mut self, id: u32, v: f64) -> Result<()>;
    /// As f64 (exact for every dtype).
    fn get_element(&self, id: u32, index: u64) -> Result<f64>;
    /// Rounded to the dtype (nearest even).
    fn set_element(&mut self, id: u32, index: u64, v: f64) -> Result<()>;

    // ---- reductions (no allocation) ----

    /// sum |x|^p accumulated in f64 (p finite, > 0).
    fn sum_abs_pow(&self, id: u32, p: f64) -> Result<f64>;
    /// Exact sum of f64(|x|^p) over the finite elements: N with value N * 2^-1074.
    fn exact_sum_abs_pow(&self, id: u32, p: f64) -> Result<BigUint>;
    /// NaN if any NaN, else max |x|; 0 for an empty tensor.
    fn max_abs(&self, id: u32) -> Result<f64>;
    fn nonfinite_count(&self, id: u32) -> Result<u64>;
    /// Wrapping u32 sum of the raw little-endian words (the memory-read baseline).
    fn read_pass(&self, id: u32) -> Result<u32>;

    // ---- in place ----

    /// x = round_dtype(f32(x) * f32(coef)), nearest even.
    fn scale(&mut self, id: u32, coef: f64) -> Result<()>;
    /// Same dtype and number of elements.
    fn copy_from(&mut self, dst: u32, src: u32) -> Result<()>;
    /// dst = round_dtype(f32 sum of srcs, added in list order): one rounding, whatever the number
    /// of tensors (a tensor all_reduce's result, SPEC section 5's finalize sum). Every src has
    /// dst's dtype and shape; dst may be among them. Nothing is written on a meta store.
    /// This default goes element by element (a store with no faster path: cuda, where finalize is
    /// refused anyway); the cpu store overrides it with a pass over slices.
    fn sum_tensors(&mut self, dst: u32, srcs: &[u32]) -> Result<()> {
        let n = self.check_sum_tensors(dst, srcs)?;
        if self.kind() == StoreKind::Meta {
            return Ok(());
        }
        let mut acc = vec![0f32; n as usize];
        for &s in srcs {
            for (i, a) in acc.iter_mut().enumerate() {
                *a += self.get_element(s, i as u64)? as f32; // exact: every dtype widens into f32
            }
        }
        for (i, a) in acc.iter().enumerate() {
            self.set_element(dst, i as u64, *a as f64)?; // f32 -> f64 exact, then rounded once to dtype
        }
        Ok(())
    }
    /// `sum_tensors`' operands: every src has dst's dtype and shape. Returns the element count.
    fn check_sum_tensors(&self, dst: u32, srcs: &[u32]) -> Result<u64> {
        let (dt, shape) = (self.dtype(dst)?, self.shape(dst)?.to_vec());
        for &s in srcs {
            if self.dtype(s)? != dt || self.shape(s)? != shape.as_slice() {
                return Err(Error(format!(
                    "sumTensors: tensor {s} ({:?} {:?}) does not match the destination {dst} ({dt:?} {shape:?})",
                    self.dtype(s)?,
                    self.shape(s)?
                )));
            }
        }
        Ok(checked_numel(&shape).unwrap_or(0))
    }

    // ---- new tensors, charged to `rank` ----

    fn narrow(&mut self, id: u32, dim: usize, start: u64, len: u64, rank: usize) -> Result<u32>;
    fn cat(&mut self, ids: &[u32], dim: usize, rank: usize) -> Result<u32>;
    fn clone_tensor(&mut self, id: u32, rank: usize) -> Result<u32>;

    // ---- comparison ----

    /// First differing element, bitwise (any NaN equals any NaN).
    fn compare(&self, a: u32, b: u32) -> Result<Option<Mismatch>>;
    /// XXH64 of dtype, shape and content: 16 hex digits ("meta" on a meta store).
    fn hash(&self, id: u32) -> Result<String>;
    /// First local element that is not bitwise round_dtype(f32(gen(i)) * f32(coef)).
    fn verify_scaled(&self, id: u32, spec: &GenSpec, block: &Block, coef: f64) -> Result<Option<Mismatch>>;
    /// `verify_scaled` of every item in order, as a loop that stops at the first mismatch (its item
    /// index and the mismatch) or the first error (message prefixed `items[k]: `); None when every
    /// item passes.
    fn verify_scaled_many(&self, items: &[VerifyItem]) -> Result<Option<(usize, Mismatch)>> {
        for (k, it) in items.iter().enumerate() {
            if let Some(m) = self.verify_scaled(it.id, &it.spec, &it.block, it.coef).map_err(at_item(k))? {
                return Ok(Some((k, m)));
            }
        }
        Ok(None)
    }

    // ---- safetensors ----

    /// Atomic: a temp file in the same folder, fsync, rename.
    fn save_safetensors(&self, path: &str, entries: &[(String, u32)], metadata: &[(String, String)]) -> Result<()>;
    /// Every tensor of the file, charged to `rank`, in data order; nothing stays allocated on error.
    fn load_safetensors(&mut self, path: &str, rank: usize) -> Result<Vec<(String, u32)>>;

    // ---- training ops ----

    /// One torch.optim.AdamW step in place (crate::optim); `step` >= 1 is the count after it.
    fn adamw_step(&mut self, param: u32, grad: u32, exp_avg: u32, exp_avg_sq: u32, step: u64, hp: &AdamW) -> Result<()>;
    /// Copies dst_block ∩ src_block (blocks of one global tensor) from src into dst; returns the
    /// number of elements copied.
    fn copy_block(&mut self, dst: u32, dst_block: &Block, src: u32, src_block: &Block) -> Result<u64>;
}

/// `save_safetensors` of every store: `bytes(store, id)` gives a tensor's bytes on the host (borrowed
/// from host memory, or a copy from a device), taken entry by entry after the entry's id is checked.
pub fn save_safetensors_with<S: TensorStore + ?Sized>(
    store: &S,
    path: &str,
    entries: &[(String, u32)],
    metadata: &[(String, String)],
    bytes: impl Fn(&S, u32) -> Result<Cow<'_, [u8]>>,
) -> Result<()> {
    let mut data = Vec::with_capacity(entries.len());
    for (name, id) in entries {
        let shape = store.shape(*id).map_err(|e| Error(format!("saveSafetensors {path}: entry '{name}': {e}")))?;
        data.push((store.dtype(*id)?, shape, bytes(store, *id)?));
    }
    let out: Vec<safetensors::OutTensor> = entries
        .iter()
        .zip(&data)
        .map(|((name, _), (dtype, shape, bytes))| safetensors::OutTensor { name: name.as_str(), dtype: *dtype, shape, data: bytes })
        .collect();
    safetensors::write_atomic(path, &out, metadata)
}

/// `load_safetensors` of every store: the rank is checked, then the whole header (before anything is
/// allocated); each tensor is allocated (`alloc`) in data order and `put(store, id, read)` fills it,
/// calling `read` once with a host buffer of the tensor's bytes (its own memory, or a staging buffer
/// it then copies to a device). On any error the tensors this call allocated are freed again.
pub fn load_safetensors_with<S: TensorStore + ?Sized>(
    store: &mut S,
    path: &str,
    rank: usize,
    mut put: impl FnMut(&mut S, u32, &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()>,
) -> Result<Vec<(String, u32)>> {
    store.live_bytes(rank)?; // the rank first
    let header = safetensors::read_header(path)?;
    let mut file = std::fs::File::open(path).map_err(|e| Error(format!("safetensors {path}: cannot open: {e}")))?;
    let mut out: Vec<(String, u32)> = Vec::with_capacity(header.entries.len());
    let mut result = Ok(());
    for e in &header.entries {
        let id = match store.alloc(rank, e.dtype, &e.shape) {
            Ok(id) => id,
            Err(err) => {
                result = Err(Error(format!("safetensors {path}: tensor '{}': {err}", e.name)));
                break;
            }
        };
        out.push((e.name.clone(), id));
        let at = header.data_start + e.begin;
        if let Err(err) = put(store, id, &mut |buf: &mut [u8]| safetensors::read_data(&mut file, path, at, buf)) {
            result = Err(err);
            break;
        }
    }
    if let Err(err) = result {
        for (_, id) in out {
            let _ = store.free(id);
        }
        return Err(err);
    }
    Ok(out)
}
