//! AnyStore: the store the napi binding holds, the cpu/meta Store or a CudaStore, with the Store's
//! method names and signatures (so that the binding's calls read the same for every backend).

use super::store::{CudaStore, DeviceMemory};
use crate::exact::BigUint;
use crate::gen::{Block, GenSpec};
use crate::optim::AdamW;
use crate::store::{Backend, Mismatch, Store, Tensor};
use crate::{DType, Result};

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

pub enum AnyStore {
    Host(Store),
    Cuda(Box<CudaStore>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Host($s) => $e,
            AnyStore::Cuda($s) => $e,
        }
    };
}

impl AnyStore {
    pub fn new(kind: StoreKind, ranks: usize) -> Result<AnyStore> {
        Ok(match kind {
            StoreKind::Cpu => AnyStore::Host(Store::new(Backend::Cpu, ranks)?),
            StoreKind::Meta => AnyStore::Host(Store::new(Backend::Meta, ranks)?),
            StoreKind::Cuda => AnyStore::Cuda(Box::new(CudaStore::new(ranks)?)),
        })
    }
    pub fn backend(&self) -> StoreKind {
        match self {
            AnyStore::Host(s) if s.backend() == Backend::Meta => StoreKind::Meta,
            AnyStore::Host(_) => StoreKind::Cpu,
            AnyStore::Cuda(_) => StoreKind::Cuda,
        }
    }
    pub fn as_cuda(&self) -> Option<&CudaStore> {
        match self {
            AnyStore::Cuda(s) => Some(s),
            AnyStore::Host(_) => None,
        }
    }
    /// The device's own memory readings for a rank (cuda only; None elsewhere).
    pub fn device_memory(&self, rank: usize) -> Result<Option<DeviceMemory>> {
        match self {
            AnyStore::Cuda(s) => s.device_memory(rank).map(Some),
            AnyStore::Host(s) => s.live_bytes(rank).map(|_| None),
        }
    }
    pub fn get(&self, id: u32) -> Result<&Tensor> {
        each!(self, s => s.get(id))
    }
    pub fn alloc(&mut self, rank: usize, dtype: DType, shape: &[u64]) -> Result<u32> {
        each!(self, s => s.alloc(rank, dtype, shape))
    }
    pub fn free(&mut self, id: u32) -> Result<()> {
        each!(self, s => s.free(id))
    }
    pub fn live_bytes(&self, rank: usize) -> Result<u64> {
        each!(self, s => s.live_bytes(rank))
    }
    pub fn peak_bytes(&self, rank: usize) -> Result<u64> {
        each!(self, s => s.peak_bytes(rank))
    }
    pub fn reset_peak(&mut self, rank: usize) -> Result<()> {
        each!(self, s => s.reset_peak(rank))
    }
    pub fn live_tensors(&self) -> usize {
        each!(self, s => s.live_tensors())
    }
    pub fn fill_grad(&mut self, id: u32, spec: &GenSpec, block: &Block) -> Result<()> {
        each!(self, s => s.fill_grad(id, spec, block))
    }
    pub fn fill_value(&mut self, id: u32, v: f64) -> Result<()> {
        each!(self, s => s.fill_value(id, v))
    }
    pub fn get_element(&self, id: u32, index: u64) -> Result<f64> {
        each!(self, s => s.get_element(id, index))
    }
    pub fn set_element(&mut self, id: u32, index: u64, v: f64) -> Result<()> {
        each!(self, s => s.set_element(id, index, v))
    }
    pub fn sum_abs_pow(&self, id: u32, p: f64) -> Result<f64> {
        each!(self, s => s.sum_abs_pow(id, p))
    }
    pub fn exact_sum_abs_pow(&self, id: u32, p: f64) -> Result<BigUint> {
        each!(self, s => s.exact_sum_abs_pow(id, p))
    }
    pub fn max_abs(&self, id: u32) -> Result<f64> {
        each!(self, s => s.max_abs(id))
    }
    pub fn nonfinite_count(&self, id: u32) -> Result<u64> {
        each!(self, s => s.nonfinite_count(id))
    }
    pub fn read_pass(&self, id: u32) -> Result<u32> {
        each!(self, s => s.read_pass(id))
    }
    pub fn scale(&mut self, id: u32, coef: f64) -> Result<()> {
        each!(self, s => s.scale(id, coef))
    }
    pub fn copy_from(&mut self, dst: u32, src: u32) -> Result<()> {
        each!(self, s => s.copy_from(dst, src))
    }
    pub fn narrow(&mut self, id: u32, dim: usize, start: u64, len: u64, rank: usize) -> Result<u32> {
        each!(self, s => s.narrow(id, dim, start, len, rank))
    }
    pub fn cat(&mut self, ids: &[u32], dim: usize, rank: usize) -> Result<u32> {
        each!(self, s => s.cat(ids, dim, rank))
    }
    pub fn clone_tensor(&mut self, id: u32, rank: usize) -> Result<u32> {
        each!(self, s => s.clone_tensor(id, rank))
    }
    pub fn compare(&self, a: u32, b: u32) -> Result<Option<Mismatch>> {
        each!(self, s => s.compare(a, b))
    }
    pub fn hash(&self, id: u32) -> Result<String> {
        each!(self, s => s.hash(id))
    }
    pub fn verify_scaled(&self, id: u32, spec: &GenSpec, block: &Block, coef: f64) -> Result<Option<Mismatch>> {
        each!(self, s => s.verify_scaled(id, spec, block, coef))
    }
    pub fn save_safetensors(&self, path: &str, entries: &[(String, u32)], metadata: &[(String, String)]) -> Result<()> {
        each!(self, s => s.save_safetensors(path, entries, metadata))
    }
    pub fn load_safetensors(&mut self, path: &str, rank: usize) -> Result<Vec<(String, u32)>> {
        each!(self, s => s.load_safetensors(path, rank))
    }
    pub fn adamw_step(&mut self, param: u32, grad: u32, exp_avg: u32, exp_avg_sq: u32, step: u64, hp: &AdamW) -> Result<()> {
        each!(self, s => s.adamw_step(param, grad, exp_avg, exp_avg_sq, step, hp))
    }
    pub fn copy_block(&mut self, dst: u32, dst_block: &Block, src: u32, src_block: &Block) -> Result<u64> {
        each!(self, s => s.copy_block(dst, dst_block, src, src_block))
    }
}
