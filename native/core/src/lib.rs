//! clip-parity native core (no napi): SPEC section 5 generator, dtypes, the tensor stores with their
//! per-rank memory ledger (one API: store_api::TensorStore, opened by tensor_store::open, for the
//! cpu/meta store and the cuda store; one bookkeeping: ledger.rs), kernels, the exact accumulator and
//! safetensors I/O.
//!
//! Layers, bottom up (a module uses only modules of lower layers; no circle):
//! - error, dtype, json, genq (splitmix64, fnv1a64, q) < genlanes (the SIMD generators' per-lane
//!   tables, portable); biguint, hash, pool; abspow (|x|^p of one element)
//! - simd (the AVX2 / AVX-512 kernels) < path (KernelPath, multiversion!) < exact < kernels < gen
//! - optim, reference, safetensors
//! - ledger (tensor table, ids, ranks, live/peak bytes, argument checks) < store_api (TensorStore,
//!   the shared safetensors paths) < store (cpu, meta) < cuda/store (CudaStore; cuda/device,
//!   cuda/kernels, cuda/emu, cuda/nvrtc below it) < cuda < tensor_store (open)

pub mod abspow;
pub mod biguint;
pub mod cuda;
pub mod dtype;
pub mod error;
pub mod exact;
pub mod gen;
pub mod genlanes;
pub mod genq;
pub mod hash;
pub mod json;
pub mod kernels;
pub mod ledger;
pub mod optim;
pub mod path;
mod pool;
pub mod reference;
pub mod safetensors;
pub mod simd;
pub mod store;
pub mod store_api;
pub mod tensor_store;

pub use dtype::DType;
pub use error::{err, Error, Result};
pub use gen::{Block, GenMode, GenSpec};
pub use genq::{fnv1a64, splitmix64};
pub use store::{Backend, Store};
pub use store_api::{DeviceMemory, FillItem, Mismatch, StoreKind, TensorStore, VerifyItem};

#[cfg(not(target_endian = "little"))]
compile_error!("clip-parity-core assumes a little-endian target (safetensors raw data is little-endian)");
