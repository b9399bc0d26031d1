//! The entry point to the tensor stores: [`open`] gives the store of a backend as a
//! `Box<dyn TensorStore>` (what the napi binding holds). The API itself (the `TensorStore` trait and
//! its value types) is store_api.rs, re-exported here; the stores are store.rs (cpu, meta) and
//! cuda/store.rs (cuda), on the bookkeeping of ledger.rs.

use crate::cuda::CudaStore;
use crate::error::Result;
pub use crate::ledger::check_alloc_fill;
use crate::store::{Backend, Store};
pub use crate::store_api::{DeviceMemory, FillItem, Mismatch, StoreKind, TensorStore, VerifyItem};

/// A store on `kind` with `ranks` ranks (cuda: on this process's devices; an error without CUDA).
pub fn open(kind: StoreKind, ranks: usize) -> Result<Box<dyn TensorStore>> {
    Ok(match kind {
        StoreKind::Cpu => Box::new(Store::new(Backend::Cpu, ranks)?),
        StoreKind::Meta => Box::new(Store::new(Backend::Meta, ranks)?),
        StoreKind::Cuda => Box::new(CudaStore::new(ranks)?),
    })
}
