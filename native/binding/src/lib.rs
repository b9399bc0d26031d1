//! clip-parity-native: the thin napi layer over clip-parity-core.
//! Options are translated in options.rs; every call runs under `guard`, so a panic becomes a JS
//! Error and never unwinds into Node.

#![deny(clippy::all)]

mod options;

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use clip_parity_core::{cuda, optim, reference, safetensors, tensor_store, TensorStore};
use napi::bindgen_prelude::{BigInt, Float64Array, Unknown};
use napi::{Error, Result};
use napi_derive::napi;

use options as o;
use options::core_err;

/// Runs `f`, turning a panic into Err(its message) so that it never unwinds into Node.
fn caught<T>(f: impl FnOnce() -> Result<T>) -> std::result::Result<Result<T>, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into())
    })
}

fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    caught(f).unwrap_or_else(|msg| Err(Error::from_reason(format!("{what}: internal error in clip-parity-native (panic: {msg})"))))
}

/// A store's panic state: the first panic of a call (after which every call is refused), and the call
/// that `CLIP_PARITY_NATIVE_TEST_PANIC=<call>` makes panic, for the test of that rule (read once, when the
/// store is opened, not on every call).
struct Poison {
    first: RefCell<Option<String>>,
    test_panic: Option<String>,
}

impl Poison {
    fn new() -> Self {
        Poison { first: RefCell::new(None), test_panic: std::env::var("CLIP_PARITY_NATIVE_TEST_PANIC").ok() }
    }
}

/// `guard` for a store's calls. A call that panicked may have left the store's tables (tensors, ledger,
/// pool) half-updated, so the store refuses every later call, naming the first panic; the caller opens a
/// new one.
fn guard_store<T>(poison: &Poison, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if let Some(first) = poison.first.borrow().as_deref() {
        return Err(Error::from_reason(format!("{what}: this store is unusable after an internal error in an earlier call ({first}); open a new one")));
    }
    let hook = poison.test_panic.as_deref() == Some(what);
    caught(|| if hook { panic!("CLIP_PARITY_NATIVE_TEST_PANIC={what}") } else { f() }).unwrap_or_else(|msg| {
        let first = format!("{what} panicked: {msg}");
        *poison.first.borrow_mut() = Some(first);
        Err(Error::from_reason(format!("{what}: internal error in clip-parity-native (panic: {msg}); this store refuses further calls")))
    })
}

/// The SPEC section 5 generator parameters of one logical parameter at one step.
#[napi(object, js_name = "GenSpec")]
pub struct GenSpecJs {
    /// u64
    pub seed: BigInt,
    /// u32
    pub step: f64,
    /// canonical logical name (FQN), hashed with fnv1a64
    pub name: String,
    /// selects m = 24 / 8 / 11
    #[napi(ts_type = "DType")]
    pub dtype: String,
    /// gradient scale exponent e (integer in [-900, 900])
    pub exp: f64,
    #[napi(ts_type = "\"gen\" | \"ones\" | \"zeros\" | \"neg-zeros\"")]
    pub mode: String,
    /// global flat index whose value is replaced by specialValue (nonfinite regimes)
    pub special_index: Option<f64>,
    pub special_value: Option<f64>,
    /// finalize regime: element i is the float32 sum, in this order, of the values generated under
    /// each of these names (then `name` is only a label), rounded once to dtype (at most 64 names)
    pub sum_of: Option<Vec<String>>,
}

/// A hyper-rectangle of the global tensor: the local shard.
#[napi(object, js_name = "Block")]
pub struct BlockJs {
    pub global_shape: Vec<f64>,
    pub start: Vec<f64>,
    pub len: Vec<f64>,
}

/// index: local flat index
#[napi(object)]
pub struct Mismatch {
    pub index: f64,
    pub expected: f64,
    pub actual: f64,
}

/// verifyScaledMany's result: the first item (index in the list) with a mismatch
#[napi(object)]
pub struct ItemMismatch {
    pub item: u32,
    pub mismatch: Mismatch,
}

impl From<clip_parity_core::Mismatch> for Mismatch {
    fn from(m: clip_parity_core::Mismatch) -> Self {
        Mismatch { index: m.index as f64, expected: m.expected, actual: m.actual }
    }
}

#[napi(object)]
pub struct SafetensorsEntry {
    pub name: String,
    pub id: f64,
}

#[napi(object)]
pub struct SafetensorsInfo {
    pub name: String,
    #[napi(ts_type = "DType")]
    pub dtype: String,
    pub shape: Vec<f64>,
}

/// AdamW hyper-parameters (torch names; betas = [beta1, beta2])
#[napi(object)]
pub struct AdamWParams {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

#[napi(object)]
pub struct CudaStatus {
    pub present: bool,
    /// true when the devices are the CPU emulation of the kernels (CLIP_PARITY_CUDA_EMU), not GPUs
    pub emulated: bool,
    pub message: String,
}

/// What the device itself reports for a rank's device (cuda backend), beside the ledger
#[napi(object)]
pub struct DeviceMemory {
    /// e.g. "cuda:0 NVIDIA H200 (sm_90)"
    pub device: String,
    pub free_bytes: f64,
    pub total_bytes: f64,
}

/// A store's tables, shared by the handles of the threads that hold it (the cell's worker and its judge).
type SharedStore = Arc<Mutex<Box<dyn TensorStore>>>;

/// Stores offered to another thread by `share`, by their one-use ticket (`openShared` takes them out).
fn offered() -> &'static Mutex<HashMap<String, SharedStore>> {
    static OFFERED: OnceLock<Mutex<HashMap<String, SharedStore>>> = OnceLock::new();
    OFFERED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Locks `m`; a lock poisoned by a panic is taken as it is: the store's own Poison refuses its later calls.
fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[napi]
pub struct NativeStore {
    inner: SharedStore,
    /// the first panic of a call on this store, after which it refuses every call (guard_store)
    poison: Poison,
}

#[napi]
impl NativeStore {
    #[napi(constructor)]
    pub fn new(#[napi(ts_arg_type = "BackendKind")] backend: String, ranks: f64) -> Result<Self> {
        guard("NativeStore", || {
            let b = o::store_kind("backend", &backend)?;
            let r = o::uint_max("ranks", ranks, 1 << 20)? as usize;
            Ok(NativeStore { inner: Arc::new(Mutex::new(tensor_store::open(b, r).map_err(core_err)?)), poison: Poison::new() })
        })
    }

    /// Offers this store's tables to another thread of the process (the judge, which reads the ranks'
    /// tensors and ledgers where the subject's code cannot reach): returns a ticket that `openShared`
    /// redeems once. A ticket taken by anyone else leaves the judge without the store, and the cell fails.
    #[napi]
    pub fn share(&self) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let ticket = format!("store-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        lock(offered()).insert(ticket.clone(), Arc::clone(&self.inner));
        ticket
    }

    /// The store offered under `ticket` (by `share`, in any thread of this process), as this thread's own
    /// handle on the same tables; a ticket is redeemed once.
    #[napi(factory)]
    pub fn open_shared(ticket: String) -> Result<Self> {
        guard("NativeStore.openShared", || match lock(offered()).remove(&ticket) {
            Some(inner) => Ok(NativeStore { inner, poison: Poison::new() }),
            None => Err(Error::from_reason(format!("ticket: no store is offered under \"{ticket}\" (never shared, or already opened)"))),
        })
    }

    /// Takes back an offer that no thread redeemed (the judge died before opening it): its tables are
    /// freed with the last handle.
    #[napi]
    pub fn withdraw(ticket: String) -> bool {
        lock(offered()).remove(&ticket).is_some()
    }

    fn store(&self) -> MutexGuard<'_, Box<dyn TensorStore>> {
        lock(&self.inner)
    }

    #[napi(getter)]
    pub fn backend(&self) -> String {
        self.store().kind().name().to_string()
    }

    /// zero-filled; returns id (> 0)
    #[napi]
    pub fn alloc(&mut self, rank: f64, #[napi(ts_arg_type = "DType")] dtype: String, shape: Vec<f64>) -> Result<u32> {
        guard_store(&self.poison, "alloc", || {
            let r = o::rank("rank", rank)?;
            let d = o::dtype("dtype", &dtype)?;
            let s = o::dims("shape", &shape)?;
            self.store().alloc(r, d, &s).map_err(core_err)
        })
    }

    /// error on unknown/double free
    #[napi]
    pub fn free(&mut self, id: f64) -> Result<()> {
        guard_store(&self.poison, "free", || self.store().free(o::id("id", id)?).map_err(core_err))
    }

    #[napi]
    pub fn shape(&self, id: f64) -> Result<Vec<f64>> {
        guard_store(&self.poison, "shape", || Ok(self.store().shape(o::id("id", id)?).map_err(core_err)?.iter().map(|&d| d as f64).collect()))
    }

    #[napi(ts_return_type = "DType")]
    pub fn dtype(&self, id: f64) -> Result<String> {
        guard_store(&self.poison, "dtype", || Ok(self.store().dtype(o::id("id", id)?).map_err(core_err)?.name().to_string()))
    }

    #[napi]
    pub fn owner(&self, id: f64) -> Result<u32> {
        guard_store(&self.poison, "owner", || Ok(self.store().owner(o::id("id", id)?).map_err(core_err)? as u32))
    }

    /// bytes = numel * dtype size, exact; meta charges the same bytes without storage
    #[napi]
    pub fn live_bytes(&self, rank: f64) -> Result<f64> {
        guard_store(&self.poison, "liveBytes", || Ok(self.store().live_bytes(o::rank("rank", rank)?).map_err(core_err)? as f64))
    }

    #[napi]
    pub fn peak_bytes(&self, rank: f64) -> Result<f64> {
        guard_store(&self.poison, "peakBytes", || Ok(self.store().peak_bytes(o::rank("rank", rank)?).map_err(core_err)? as f64))
    }

    /// peak := live
    #[napi]
    pub fn reset_peak(&mut self, rank: f64) -> Result<()> {
        guard_store(&self.poison, "resetPeak", || self.store().reset_peak(o::rank("rank", rank)?).map_err(core_err))
    }

    /// all ranks
    #[napi]
    pub fn live_tensors(&self) -> u32 {
        self.store().live_tensors() as u32
    }

    /// cuda: the free/total bytes the device of `rank` reports (driver and allocator use included),
    /// read now, to record beside the ledger; null on the cpu and meta backends
    #[napi]
    pub fn device_memory(&self, rank: f64) -> Result<Option<DeviceMemory>> {
        guard_store(&self.poison, "deviceMemory", || {
            let m = self.store().device_memory(o::rank("rank", rank)?).map_err(core_err)?;
            Ok(m.map(|m| DeviceMemory { device: m.device, free_bytes: m.free_bytes as f64, total_bytes: m.total_bytes as f64 }))
        })
    }

    /// new tensors of `rank`, each filled as fillGrad fills it, in one call and without a zeroing
    /// pass; items in order: { shape, gen, block }; returns their ids. On an error (its message
    /// starts with `items[k]`) nothing this call allocated stays allocated.
    #[napi]
    pub fn alloc_fill_many(&mut self, rank: f64, #[napi(ts_arg_type = "DType")] dtype: String, #[napi(ts_arg_type = "Array<FillItem>")] items: Unknown<'_>) -> Result<Vec<u32>> {
        guard_store(&self.poison, "allocFillMany", || {
            let r = o::rank("rank", rank)?;
            let d = o::dtype("dtype", &dtype)?;
            let items = o::fill_items("items", &items)?;
            self.store().alloc_fill_many(r, d, &items).map_err(core_err)
        })
    }

    /// element j of the shard = gen(global flat index of j)
    #[napi]
    pub fn fill_grad(&mut self, id: f64, #[napi(ts_arg_type = "GenSpec")] gen: Unknown<'_>, #[napi(ts_arg_type = "Block")] block: Unknown<'_>) -> Result<()> {
        guard_store(&self.poison, "fillGrad", || {
            let i = o::id("id", id)?;
            let g = o::gen_spec(&gen)?;
            let b = o::block(&block)?;
            self.store().fill_grad(i, &g, &b).map_err(core_err)
        })
    }

    #[napi]
    pub fn fill_value(&mut self, id: f64, value: f64) -> Result<()> {
        guard_store(&self.poison, "fillValue", || self.store().fill_value(o::id("id", id)?, value).map_err(core_err))
    }

    /// as f64 (exact for every dtype)
    #[napi]
    pub fn get_element(&self, id: f64, index: f64) -> Result<f64> {
        guard_store(&self.poison, "getElement", || self.store().get_element(o::id("id", id)?, o::uint("index", index)?).map_err(core_err))
    }

    /// rounded to dtype (RNE)
    #[napi]
    pub fn set_element(&mut self, id: f64, index: f64, value: f64) -> Result<()> {
        guard_store(&self.poison, "setElement", || {
            self.store().set_element(o::id("id", id)?, o::uint("index", index)?, value).map_err(core_err)
        })
    }

    /// sum |x|^p accumulated in f64 (p finite, > 0)
    #[napi]
    pub fn sum_abs_pow(&self, id: f64, p: f64) -> Result<f64> {
        guard_store(&self.poison, "sumAbsPow", || self.store().sum_abs_pow(o::id("id", id)?, o::p(p)?).map_err(core_err))
    }

    /// exact sum of f64(|x|^p) over FINITE elements, as an integer N: value = N * 2^-1074
    #[napi]
    pub fn exact_sum_abs_pow(&self, id: f64, p: f64) -> Result<BigInt> {
        guard_store(&self.poison, "exactSumAbsPow", || {
            Ok(o::bigint_of(self.store().exact_sum_abs_pow(o::id("id", id)?, o::p(p)?).map_err(core_err)?))
        })
    }

    /// NaN if any NaN
    #[napi]
    pub fn max_abs(&self, id: f64) -> Result<f64> {
        guard_store(&self.poison, "maxAbs", || self.store().max_abs(o::id("id", id)?).map_err(core_err))
    }

    #[napi]
    pub fn non_finite_count(&self, id: f64) -> Result<f64> {
        guard_store(&self.poison, "nonFiniteCount", || Ok(self.store().nonfinite_count(o::id("id", id)?).map_err(core_err)? as f64))
    }

    /// plain memory-read baseline for benchmarks
    #[napi]
    pub fn read_pass(&self, id: f64) -> Result<f64> {
        guard_store(&self.poison, "readPass", || Ok(self.store().read_pass(o::id("id", id)?).map_err(core_err)? as f64))
    }

    /// x = round_dtype(f32(x) * f32(coef)), RNE
    #[napi]
    pub fn scale(&mut self, id: f64, coef: f64) -> Result<()> {
        guard_store(&self.poison, "scale", || self.store().scale(o::id("id", id)?, coef).map_err(core_err))
    }

    /// same dtype and numel
    #[napi]
    pub fn copy_from(&mut self, dst: f64, src: f64) -> Result<()> {
        guard_store(&self.poison, "copyFrom", || self.store().copy_from(o::id("dst", dst)?, o::id("src", src)?).map_err(core_err))
    }

    /// dst = round_dtype(float32 sum of srcs in list order): one rounding (same dtype and shape)
    #[napi]
    pub fn sum_tensors(&mut self, dst: f64, srcs: Vec<f64>) -> Result<()> {
        guard_store(&self.poison, "sumTensors", || self.store().sum_tensors(o::id("dst", dst)?, &o::ids("srcs", &srcs)?).map_err(core_err))
    }

    /// new tensor charged to `rank`
    #[napi]
    pub fn narrow(&mut self, id: f64, dim: f64, start: f64, len: f64, rank: f64) -> Result<u32> {
        guard_store(&self.poison, "narrow", || {
            let (i, d) = (o::id("id", id)?, o::uint("dim", dim)? as usize);
            let (s, l) = (o::uint("start", start)?, o::uint("len", len)?);
            self.store().narrow(i, d, s, l, o::rank("rank", rank)?).map_err(core_err)
        })
    }

    /// new tensor charged to `rank`
    #[napi]
    pub fn cat(&mut self, ids: Vec<f64>, dim: f64, rank: f64) -> Result<u32> {
        guard_store(&self.poison, "cat", || {
            let v = o::ids("ids", &ids)?;
            self.store().cat(&v, o::uint("dim", dim)? as usize, o::rank("rank", rank)?).map_err(core_err)
        })
    }

    /// new tensor charged to `rank`
    #[napi]
    pub fn clone(&mut self, id: f64, rank: f64) -> Result<u32> {
        guard_store(&self.poison, "clone", || self.store().clone_tensor(o::id("id", id)?, o::rank("rank", rank)?).map_err(core_err))
    }

    /// bitwise (any NaN equals any NaN); first differing element
    #[napi]
    pub fn compare(&self, a: f64, b: f64) -> Result<Option<Mismatch>> {
        guard_store(&self.poison, "compare", || Ok(self.store().compare(o::id("a", a)?, o::id("b", b)?).map_err(core_err)?.map(Into::into)))
    }

    /// 16 hex digits (XXH64 of dtype + shape + content); "meta" on a meta store
    #[napi]
    pub fn hash(&self, id: f64) -> Result<String> {
        guard_store(&self.poison, "hash", || self.store().hash(o::id("id", id)?).map_err(core_err))
    }

    /// first local element that is not bitwise round_dtype(f32(gen(i)) * f32(coef))
    #[napi]
    pub fn verify_scaled(&self, id: f64, #[napi(ts_arg_type = "GenSpec")] gen: Unknown<'_>, #[napi(ts_arg_type = "Block")] block: Unknown<'_>, coef: f64) -> Result<Option<Mismatch>> {
        guard_store(&self.poison, "verifyScaled", || {
            let i = o::id("id", id)?;
            let g = o::gen_spec(&gen)?;
            let b = o::block(&block)?;
            Ok(self.store().verify_scaled(i, &g, &b, coef).map_err(core_err)?.map(Into::into))
        })
    }

    /// verifyScaled of each item { id, gen, block, coef } in order: the first mismatch (its item
    /// index and the Mismatch), null when all pass; an error names its item (`items[k]`)
    #[napi]
    pub fn verify_scaled_many(&self, #[napi(ts_arg_type = "Array<VerifyItem>")] items: Unknown<'_>) -> Result<Option<ItemMismatch>> {
        guard_store(&self.poison, "verifyScaledMany", || {
            let items = o::verify_items("items", &items)?;
            Ok(self.store().verify_scaled_many(&items).map_err(core_err)?.map(|(k, m)| ItemMismatch { item: k as u32, mismatch: m.into() }))
        })
    }

    /// atomic (temp file in the same directory, fsync, rename)
    #[napi]
    pub fn save_safetensors(
        &self,
        path: String,
        entries: Vec<SafetensorsEntry>,
        metadata: HashMap<String, String>,
    ) -> Result<()> {
        guard_store(&self.poison, "saveSafetensors", || {
            let mut es = Vec::with_capacity(entries.len());
            for (k, e) in entries.iter().enumerate() {
                es.push((e.name.clone(), o::id(&format!("entries[{k}].id"), e.id)?));
            }
            let md: Vec<(String, String)> = metadata.into_iter().collect();
            self.store().save_safetensors(&path, &es, &md).map_err(core_err)
        })
    }

    /// validated before anything is allocated; charged to `rank`; entries in file data order
    #[napi]
    pub fn load_safetensors(&mut self, path: String, rank: f64) -> Result<Vec<SafetensorsEntry>> {
        guard_store(&self.poison, "loadSafetensors", || {
            let r = o::rank("rank", rank)?;
            let v = self.store().load_safetensors(&path, r).map_err(core_err)?;
            Ok(v.into_iter().map(|(name, id)| SafetensorsEntry { name, id: id as f64 }).collect())
        })
    }

    #[napi]
    pub fn inspect_safetensors(&self, path: String) -> Result<Vec<SafetensorsInfo>> {
        guard_store(&self.poison, "inspectSafetensors", || {
            let h = safetensors::read_header(&path).map_err(core_err)?;
            Ok(h.entries
                .into_iter()
                .map(|e| SafetensorsInfo {
                    name: e.name,
                    dtype: e.dtype.name().to_string(),
                    shape: e.shape.iter().map(|&d| d as f64).collect(),
                })
                .collect())
        })
    }

    /// the header's "__metadata__" string map (addition to the contract)
    #[napi]
    pub fn safetensors_metadata(&self, path: String) -> Result<HashMap<String, String>> {
        guard_store(&self.poison, "safetensorsMetadata", || {
            let h = safetensors::read_header(&path).map_err(core_err)?;
            Ok(h.metadata.into_iter().collect())
        })
    }

    /// one torch.optim.AdamW step (foreach=False) in place, float32 math in a fixed order
    /// (native/core/src/optim.rs): param, expAvg, expAvgSq f32; grad any dtype; same numel;
    /// step = the step count after this update (>= 1)
    #[napi]
    pub fn adamw_step(&mut self, param: f64, grad: f64, exp_avg: f64, exp_avg_sq: f64, step: f64, hp: AdamWParams) -> Result<()> {
        guard_store(&self.poison, "adamwStep", || {
            let ids = (o::id("param", param)?, o::id("grad", grad)?, o::id("expAvg", exp_avg)?, o::id("expAvgSq", exp_avg_sq)?);
            let s = o::uint("step", step)?;
            let h = optim::AdamW { lr: hp.lr, beta1: hp.beta1, beta2: hp.beta2, eps: hp.eps, weight_decay: hp.weight_decay };
            self.store().adamw_step(ids.0, ids.1, ids.2, ids.3, s, &h).map_err(core_err)
        })
    }

    /// copies the intersection of dstBlock and srcBlock (blocks of one global tensor) from src into
    /// dst (same dtype); returns the number of elements copied (0 when they do not intersect)
    #[napi]
    pub fn copy_block(&mut self, dst: f64, #[napi(ts_arg_type = "Block")] dst_block: Unknown<'_>, src: f64, #[napi(ts_arg_type = "Block")] src_block: Unknown<'_>) -> Result<f64> {
        guard_store(&self.poison, "copyBlock", || {
            let (d, s) = (o::id("dst", dst)?, o::id("src", src)?);
            let (db, sb) = (o::block(&dst_block)?, o::block(&src_block)?);
            Ok(self.store().copy_block(d, &db, s, &sb).map_err(core_err)? as f64)
        })
    }
}

/// test vectors: values of global indices [start, start + count) in gen.dtype
#[napi]
pub fn gen_values(#[napi(ts_arg_type = "GenSpec")] gen: Unknown<'_>, start: f64, count: f64) -> Result<Float64Array> {
    guard("genValues", || {
        let g = o::gen_spec(&gen)?;
        let s = o::uint("start", start)?;
        let c = o::uint_max("count", count, 1 << 28)? as usize;
        Ok(Float64Array::new(g.values(s, c)))
    })
}

#[napi]
pub fn splitmix64(x: BigInt) -> Result<BigInt> {
    guard("splitmix64", || Ok(o::bigint_u64(clip_parity_core::splitmix64(o::u64_of("x", &x)?))))
}

#[napi(js_name = "fnv1a64")]
pub fn fnv1a64(name: String) -> BigInt {
    o::bigint_u64(clip_parity_core::fnv1a64(&name))
}

/// fused gen + exact sum over finite elements (reference)
#[napi]
pub fn exact_full(#[napi(ts_arg_type = "GenSpec")] gen: Unknown<'_>, numel: f64, p: f64) -> Result<BigInt> {
    guard("exactFull", || {
        let g = o::gen_spec(&gen)?;
        let n = o::uint("numel", numel)?;
        Ok(o::bigint_of(reference::exact_full(&g, n, o::p(p)?).map_err(core_err)?))
    })
}

/// bench/matrix.ts's baseline only: exactFull as it was before issue 44 (libm pow); the harness never calls it
#[napi]
pub fn bench_exact_full_libm(#[napi(ts_arg_type = "GenSpec")] gen: Unknown<'_>, numel: f64, p: f64) -> Result<BigInt> {
    guard("benchExactFullLibm", || {
        let g = o::gen_spec(&gen)?;
        let n = o::uint("numel", numel)?;
        Ok(o::bigint_of(reference::exact_full_libm_baseline(&g, n, o::p(p)?).map_err(core_err)?))
    })
}

#[napi]
pub fn max_abs_full(#[napi(ts_arg_type = "GenSpec")] gen: Unknown<'_>, numel: f64) -> Result<f64> {
    guard("maxAbsFull", || {
        let g = o::gen_spec(&gen)?;
        reference::max_abs_full(&g, o::uint("numel", numel)?).map_err(core_err)
    })
}

/// The SIMD path the host kernels take in this process: `avx512`, `avx2` or `portable` (the best the
/// CPU has, capped by CLIP_PARITY_SIMD). Benchmarks and CI logs print it beside their figures.
#[napi]
pub fn simd_path() -> String {
    clip_parity_core::path::KernelPath::detect().name().to_string()
}

/// Whether the cuda backend can be used here: a CUDA driver (libcuda, looked for before any CUDA
/// call), a device, and NVRTC or the shipped PTX for the kernels. Never throws; compiles nothing.
#[napi]
pub fn cuda_status() -> CudaStatus {
    let r = guard("cudaStatus", || {
        let s = cuda::status();
        Ok(CudaStatus { present: s.present, emulated: s.emulated, message: s.message })
    });
    r.unwrap_or_else(|e| CudaStatus { present: false, emulated: false, message: e.reason.clone() })
}
