//! clip-parity native core (no napi): SPEC section 5 generator, dtypes, the tensor stores with their
//! per-rank memory ledger (one API: tensor_store::TensorStore, for the cpu/meta store and the cuda
//! store), kernels, the exact accumulator and safetensors I/O.

pub mod cuda;
pub mod dtype;
pub mod exact;
pub mod gen;
pub mod hash;
pub mod json;
pub mod kernels;
pub mod optim;
mod pool;
pub mod reference;
pub mod safetensors;
pub mod simd;
pub mod store;
pub mod tensor_store;

pub use dtype::DType;
pub use gen::{fnv1a64, splitmix64, Block, GenMode, GenSpec};
pub use store::{Backend, Mismatch, Store};
pub use tensor_store::{DeviceMemory, FillItem, StoreKind, TensorStore, VerifyItem};

#[cfg(not(target_endian = "little"))]
compile_error!("clip-parity-core assumes a little-endian target (safetensors raw data is little-endian)");

/// The one error type of the core: a message meant for a human (it names the value at fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::Error(format!($($arg)*))) };
}

pub fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error(msg.into()))
}
