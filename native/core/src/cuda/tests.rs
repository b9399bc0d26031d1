//! Tests of the cuda backend without a GPU:
//! - NVRTC compiles every kernel (sm_90 machine code, compute_80 PTX) when libnvrtc can be loaded;
//!   skipped with a message otherwise, except under CI=true where NVRTC must be installed (.ci/run);
//! - the kernels' scalar helpers equal the Rust code they port, on many inputs (CPU emulation);
//! - a CudaStore on emulated devices gives the cpu store's results bitwise for every op, on every
//!   dtype, including several ranks per device and copies between devices;
//! - without a driver, status() and CudaStore::new report the absence without panicking.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use half::{bf16, f16};

use super::device::{self, Devices};
use super::emu::{self, EmuLib};
use super::kernels::{self, KERNELS};
use super::nvrtc::{self, Output};
use super::store::CudaStore;
use crate::dtype::{self, DType};
use crate::gen::{Block, GenMode, GenSpec};
use crate::optim::AdamW;
use crate::store::{Backend, Store};
use crate::store_api::TensorStore;

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The emulation library, built once per test process (None, with a message, without a C++ compiler).
fn emu_lib() -> Option<Arc<EmuLib>> {
    static LIB: OnceLock<Option<Arc<EmuLib>>> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir: PathBuf = std::env::temp_dir().join(format!("clip-parity-cuda-emu-{}", std::process::id()));
        match emu::build(&dir) {
            // SAFETY: p is the library emu::build just made.
            Ok(p) => Some(Arc::new(unsafe { EmuLib::load(p.to_str().unwrap()) }.expect("load the emulation"))),
            Err(e) if !ci() => {
                eprintln!("SKIPPED: the CUDA emulation could not be built here: {e}");
                None
            }
            Err(e) => panic!("the CUDA emulation must build under CI: {e}"),
        }
    })
    .clone()
}

fn emu_devices(n: usize, block: u32) -> Option<Arc<Devices>> {
    Some(Arc::new(device::emu_devices(emu_lib()?, n, block)))
}

#[test]
fn nvrtc_compiles_every_kernel() {
    let nv = match nvrtc::get() {
        Ok(n) => n,
        Err(e) if !ci() => {
            eprintln!("SKIPPED: {e}");
            return;
        }
        Err(e) => panic!("CI must compile the CUDA kernels with NVRTC (see .ci/run): {e}"),
    };
    let t = std::time::Instant::now();
    for arch in ["sm_90", "compute_80"] {
        let ptx = nv.compile(kernels::SOURCE, "kernels.cu", arch, Output::Ptx).unwrap_or_else(|e| panic!("{}", e.0));
        let text = String::from_utf8_lossy(&ptx);
        for k in KERNELS {
            assert!(text.contains(&format!(".entry {k}(")), "{arch}: no entry {k}");
        }
        // nothing contracted in our own code: the only fused multiply-adds are f64 ones, inside pow() and abs_pow's explicit __fma_rn
        assert!(!text.contains("fma.rn.f32"), "{arch}: an f32 multiply-add was contracted");
    }
    let cubin = nv.compile(kernels::SOURCE, "kernels.cu", "sm_90", Output::Cubin).unwrap_or_else(|e| panic!("{}", e.0));
    assert_eq!(&cubin[..4], b"\x7fELF");
    eprintln!(
        "NVRTC {}.{} ({}) compiled {} kernels for sm_90 (PTX and CUBIN) and compute_80 in {:.1} s",
        nv.version.0,
        nv.version.1,
        nv.path,
        KERNELS.len(),
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn absent_driver_is_an_error_not_a_crash() {
    if std::env::var("CLIP_PARITY_CUDA_EMU").is_ok_and(|v| !v.is_empty()) || device::driver_library().0 {
        return; // a driver (or the emulation) is there: nothing to check
    }
    let s = super::status();
    assert!(!s.present);
    assert!(s.message.contains("libcuda.so"), "{}", s.message);
    let e = CudaStore::new(2).err().expect("no CUDA here");
    assert!(e.0.contains("CUDA driver library (libcuda.so) not found"), "{}", e.0);
}

#[test]
fn emulation_holds_every_kernel() {
    let Some(lib) = emu_lib() else { return };
    assert_eq!(lib.kernel_names(), KERNELS);
}

fn rng(s: &mut u64) -> u64 {
    *s = crate::gen::splitmix64(*s);
    *s
}

/// f32 bit patterns that exercise every rounding case of the conversions to 16-bit formats.
fn f32_patterns() -> Vec<u32> {
    let mut v = Vec::new();
    let lows = [0u32, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xffff];
    let mut s = 17u64;
    for hi in 0..=0xffffu32 {
        for &lo in &lows {
            v.push(hi << 16 | lo);
        }
        v.push(hi << 16 | (rng(&mut s) as u32 & 0xffff));
    }
    v
}

#[test]
fn kernel_helpers_equal_the_rust_code() {
    let Some(lib) = emu_lib() else { return };
    for &x in &f32_patterns() {
        // SAFETY: pure functions of the emulation library.
        unsafe {
            assert_eq!((lib.f32_to_bf16)(x), dtype::f32_to_bf16_bits(f32::from_bits(x)) as u32, "bf16 of {x:#010x}");
            assert_eq!((lib.f32_to_f16)(x), f16::from_f32(f32::from_bits(x)).to_bits() as u32, "f16 of {x:#010x}");
        }
    }
    for h in 0..=0xffffu32 {
        // SAFETY: pure function.
        let got = unsafe { (lib.f16_to_f32)(h) };
        assert_eq!(got, dtype::f16_bits_to_f32(h as u16).to_bits(), "f32 of f16 {h:#06x}");
    }
    let dnan = (std::hint::black_box(f32::INFINITY) * std::hint::black_box(0.0f32)).to_bits();
    let mut s = 5u64;
    let special = [0u32, 0x8000_0000, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0xffc0_0000, 0x7f80_0001, 0x7fa0_0000, 1, 0x0080_0000, 0x3f80_0000, 0x7f7f_ffff];
    for i in 0..400_000 {
        let a = if i % 7 == 0 { special[(rng(&mut s) % special.len() as u64) as usize] } else { rng(&mut s) as u32 };
        let b = if i % 5 == 0 { special[(rng(&mut s) % special.len() as u64) as usize] } else { rng(&mut s) as u32 };
        let (fa, fb) = (f32::from_bits(a), f32::from_bits(b));
        if fa.is_nan() && fb.is_nan() {
            continue; // which NaN wins is the compiler's choice on the cpu (docs/cuda.md)
        }
        let want = (std::hint::black_box(fa) * std::hint::black_box(fb)).to_bits();
        // SAFETY: pure function.
        assert_eq!(unsafe { (lib.mul_host)(a, b, dnan) }, want, "{a:#010x} * {b:#010x}");
    }
    for i in 0..400_000 {
        let mut x = f64::from_bits(rng(&mut s));
        if i % 3 == 0 {
            // near the bf16 / f16 ranges, where rounding and gradual underflow happen
            let e = (rng(&mut s) % 80) as i32 - 40;
            x = (1.0 + (rng(&mut s) >> 11) as f64 * 2f64.powi(-53)) * 2f64.powi(e) * if i % 2 == 0 { 1.0 } else { -1.0 };
        }
        for (dt, p, lo, hi) in [(DType::BF16, 8, -126, 127), (DType::F16, 11, -14, 15), (DType::F32, 24, -126, 127)] {
            // SAFETY: pure function.
            let got = unsafe { (lib.round_f64_to)(x, p, lo, hi) };
            let want = dtype::round_f64_to(dt, x);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{dt:?} {x:e}: {got:e} vs {want:e}");
        }
    }
    for _ in 0..10_000 {
        let x = rng(&mut s);
        // SAFETY: pure function.
        assert_eq!(unsafe { (lib.splitmix64)(x) }, crate::gen::splitmix64(x));
    }
}

/// A cpu store and a cuda store (emulated) driven through the same calls.
struct Pair {
    cpu: Store,
    gpu: CudaStore,
}

impl Pair {
    fn new(ranks: usize, devs: Arc<Devices>) -> Pair {
        Pair { cpu: Store::new(Backend::Cpu, ranks).unwrap(), gpu: CudaStore::with_devices(ranks, devs).unwrap() }
    }
    fn alloc(&mut self, rank: usize, dt: DType, shape: &[u64]) -> (u32, u32) {
        let a = self.cpu.alloc(rank, dt, shape).unwrap();
        let b = self.gpu.alloc(rank, dt, shape).unwrap();
        (a, b)
    }
    fn same(&self, (a, b): (u32, u32), what: &str) {
        let (ha, hb) = (self.cpu.hash(a).unwrap(), self.gpu.hash(b).unwrap());
        if ha != hb {
            let x = self.cpu.get(a).unwrap().data.bytes().to_vec();
            let y = self.gpu.download(b).unwrap();
            let es = self.cpu.get(a).unwrap().dtype.size();
            let i = x.chunks(es).zip(y.chunks(es)).position(|(p, q)| p != q).unwrap_or(0);
            panic!("{what}: hashes differ ({ha} vs {hb}); first differing element {i}: {:?} vs {:?}", &x[i * es..i * es + es], &y[i * es..i * es + es]);
        }
        for r in 0..self.cpu.ranks() {
            assert_eq!(self.cpu.live_bytes(r).unwrap(), self.gpu.live_bytes(r).unwrap(), "{what}: ledger of rank {r}");
            assert_eq!(self.cpu.peak_bytes(r).unwrap(), self.gpu.peak_bytes(r).unwrap(), "{what}: peak of rank {r}");
        }
    }
    fn reductions(&self, (a, b): (u32, u32), what: &str) {
        let (c, g) = (&self.cpu, &self.gpu);
        let eq = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        assert!(eq(c.max_abs(a).unwrap(), g.max_abs(b).unwrap()), "{what}: maxAbs {} vs {}", c.max_abs(a).unwrap(), g.max_abs(b).unwrap());
        assert_eq!(c.nonfinite_count(a).unwrap(), g.nonfinite_count(b).unwrap(), "{what}: nonFiniteCount");
        assert_eq!(c.read_pass(a).unwrap(), g.read_pass(b).unwrap(), "{what}: readPass");
        for p in [2.0, 1.0, 3.0, 0.5] {
            assert_eq!(c.exact_sum_abs_pow(a, p).unwrap(), g.exact_sum_abs_pow(b, p).unwrap(), "{what}: exact p={p}");
            let (x, y) = (c.sum_abs_pow(a, p).unwrap(), g.sum_abs_pow(b, p).unwrap());
            let close = eq(x, y) || (x - y).abs() <= 1e-12 * x.abs() || (x.is_infinite() && x == y);
            assert!(close, "{what}: sumAbsPow p={p}: {x:e} vs {y:e}");
        }
    }
}

fn specs(dt: DType) -> Vec<GenSpec> {
    let mut v = Vec::new();
    for gdt in DType::ALL {
        for exp in [0, 3, -20] {
            v.push(GenSpec::new(11, 2, "layers.0.w", gdt, exp, GenMode::Gen));
        }
    }
    // out of the tensor's range: overflow to inf, gradual underflow (f16), rounding (f32 gen into bf16)
    v.push(GenSpec::new(3, 0, "big", dt, 20, GenMode::Gen));
    v.push(GenSpec::new(3, 0, "tiny", dt, -20, GenMode::Gen));
    v.push(GenSpec::new(3, 0, "tinier", DType::F32, -140, GenMode::Gen));
    v.push(GenSpec::new(0, 0, "ones", dt, 0, GenMode::Ones));
    v.push(GenSpec::new(0, 0, "zeros", dt, 0, GenMode::Zeros));
    let mut nan = GenSpec::new(7, 1, "nan", dt, 0, GenMode::Gen);
    nan.special = Some((13, f64::NAN));
    v.push(nan);
    let mut inf = GenSpec::new(7, 1, "inf", dt, 0, GenMode::Ones);
    inf.special = Some((0, f64::INFINITY));
    v.push(inf);
    let mut neg = GenSpec::new(7, 1, "neg", dt, 0, GenMode::Zeros);
    neg.special = Some((40, -3.3e-7));
    v.push(neg);
    v
}

fn blocks() -> Vec<Block> {
    vec![
        Block::full(&[1000]),
        Block::full(&[]),
        Block { global_shape: vec![10, 100], start: vec![2, 10], len: vec![5, 50] },
        Block { global_shape: vec![6, 20, 7], start: vec![1, 3, 2], len: vec![4, 9, 5] },
        Block { global_shape: vec![8, 64], start: vec![4, 0], len: vec![4, 64] },
        Block { global_shape: vec![5, 0], start: vec![0, 0], len: vec![5, 0] },
        Block { global_shape: vec![3; 9], start: vec![1; 9], len: vec![2; 9] }, // 9 dims: host path
        Block::full(&[40000]),
    ]
}

fn check_everything(devs: Arc<Devices>) {
    let mut p = Pair::new(3, devs);
    for dt in DType::ALL {
        for (bi, blk) in blocks().iter().enumerate() {
            for (si, spec) in specs(dt).iter().enumerate() {
                if bi == 7 && si % 4 != 0 {
                    continue; // the large block with a few specs only (the emulation is slow)
                }
                let what = format!("{dt:?} block {bi} spec {si} ({} {:?} e{})", spec.name, spec.dtype, spec.exp);
                let rank = (bi + si) % 3;
                let t = p.alloc(rank, dt, &blk.len);
                p.cpu.fill_grad(t.0, spec, blk).unwrap();
                p.gpu.fill_grad(t.1, spec, blk).unwrap();
                p.same(t, &format!("{what}: fillGrad"));
                // the fused alloc + fill gives the same tensor on both stores
                let f = (p.cpu.alloc_fill(rank, dt, &blk.len, spec, blk).unwrap(), p.gpu.alloc_fill(rank, dt, &blk.len, spec, blk).unwrap());
                p.same(f, &format!("{what}: allocFill"));
                assert_eq!(p.cpu.hash(f.0).unwrap(), p.cpu.hash(t.0).unwrap(), "{what}: allocFill = alloc + fillGrad");
                p.cpu.free(f.0).unwrap();
                p.gpu.free(f.1).unwrap();
                if bi == 6 && si > 3 {
                    p.cpu.free(t.0).unwrap();
                    p.gpu.free(t.1).unwrap();
                    continue;
                }
                p.reductions(t, &what);
                for coef in [0.3, 1.5, 0.0, f64::NAN, 1.0 + 2f64.powi(-9)] {
                    let c = (p.cpu.clone_tensor(t.0, rank).unwrap(), p.gpu.clone_tensor(t.1, rank).unwrap());
                    p.cpu.scale(c.0, coef).unwrap();
                    p.gpu.scale(c.1, coef).unwrap();
                    p.same(c, &format!("{what}: scale({coef})"));
                    let vc = p.cpu.verify_scaled(c.0, spec, blk, coef).unwrap();
                    let vg = p.gpu.verify_scaled(c.1, spec, blk, coef).unwrap();
                    assert_eq!(vc, vg, "{what}: verifyScaled({coef})");
                    assert_eq!(vg, None, "{what}: verifyScaled({coef}) of a correctly scaled tensor");
                    let numel = p.cpu.get(c.0).unwrap().numel;
                    if numel > 3 {
                        let i = numel / 2 + 1;
                        p.cpu.set_element(c.0, i, 1234.5).unwrap();
                        p.gpu.set_element(c.1, i, 1234.5).unwrap();
                        let vc = p.cpu.verify_scaled(c.0, spec, blk, coef).unwrap();
                        let vg = p.gpu.verify_scaled(c.1, spec, blk, coef).unwrap();
                        assert_eq!(format!("{vc:?}"), format!("{vg:?}"), "{what}: verifyScaled after setElement");
                        assert!(vg.is_some());
                        let wrong_c = p.cpu.verify_scaled(c.0, spec, blk, 0.7).unwrap();
                        let wrong_g = p.gpu.verify_scaled(c.1, spec, blk, 0.7).unwrap();
                        assert_eq!(format!("{wrong_c:?}"), format!("{wrong_g:?}"), "{what}: verifyScaled with another coef");
                        let mc = p.cpu.compare(t.0, c.0).unwrap();
                        let mg = p.gpu.compare(t.1, c.1).unwrap();
                        assert_eq!(format!("{mc:?}"), format!("{mg:?}"), "{what}: compare");
                        assert_eq!(p.cpu.get_element(c.0, i).unwrap(), p.gpu.get_element(c.1, i).unwrap());
                    }
                    p.cpu.free(c.0).unwrap();
                    p.gpu.free(c.1).unwrap();
                }
                p.cpu.free(t.0).unwrap();
                p.gpu.free(t.1).unwrap();
            }
        }
    }
    for r in 0..3 {
        assert_eq!(p.gpu.live_bytes(r).unwrap(), 0);
    }
    assert_eq!(p.gpu.live_tensors(), 0);
}

#[test]
fn cuda_store_on_the_emulation_equals_the_cpu_store() {
    let Some(d) = emu_devices(2, 256) else { return };
    check_everything(d);
}

#[test]
fn batch_methods_equal_the_cpu_store() {
    use crate::store_api::{FillItem, VerifyItem};
    let Some(d) = emu_devices(2, 64) else { return };
    let mut p = Pair::new(2, d);
    for dt in DType::ALL {
        let items: Vec<FillItem> = blocks()
            .into_iter()
            .zip(specs(dt))
            .map(|(block, spec)| FillItem { shape: block.len.clone(), spec, block })
            .collect();
        let (a, b) = (p.cpu.alloc_fill_many(1, dt, &items).unwrap(), p.gpu.alloc_fill_many(1, dt, &items).unwrap());
        for (k, t) in a.iter().zip(&b).enumerate() {
            p.same((*t.0, *t.1), &format!("{dt:?} allocFillMany item {k}"));
        }
        let coef = 0.3;
        for &id in &a {
            p.cpu.scale(id, coef).unwrap();
        }
        for &id in &b {
            p.gpu.scale(id, coef).unwrap();
        }
        let checks = |ids: &[u32]| -> Vec<VerifyItem> {
            ids.iter().zip(&items).map(|(&id, it)| VerifyItem { id, spec: it.spec.clone(), block: it.block.clone(), coef }).collect()
        };
        assert_eq!(p.cpu.verify_scaled_many(&checks(&a)).unwrap(), None);
        assert_eq!(p.gpu.verify_scaled_many(&checks(&b)).unwrap(), None);
        // a wrong element in item 3 and item 7: item 3 is the one reported, on both stores
        for (ids, store) in [(&a, &mut p.cpu as &mut dyn TensorStore), (&b, &mut p.gpu as &mut dyn TensorStore)] {
            store.set_element(ids[3], 17, 99.0).unwrap();
            store.set_element(ids[7], 1, 99.0).unwrap();
        }
        let (vc, vg) = (p.cpu.verify_scaled_many(&checks(&a)).unwrap(), p.gpu.verify_scaled_many(&checks(&b)).unwrap());
        assert_eq!(format!("{vc:?}"), format!("{vg:?}"), "{dt:?} verifyScaledMany");
        assert_eq!(vc.unwrap().0, 3);
        // an error names its item, on both stores, after the items before it passed
        let mut bad = checks(&a);
        bad[2].id = 999_999;
        assert_eq!(p.cpu.verify_scaled_many(&bad).unwrap_err().0, "items[2]: id 999999: no such tensor");
        let mut bad = checks(&b);
        bad[2].id = 999_999;
        assert_eq!(p.gpu.verify_scaled_many(&bad).unwrap_err().0, "items[2]: id 999999: no such tensor");
        for (x, y) in a.into_iter().zip(b) {
            p.cpu.free(x).unwrap();
            p.gpu.free(y).unwrap();
        }
        // a failing item frees what the call allocated, on both stores
        let mut bad = items.clone();
        bad[4].shape.push(2);
        let (ec, eg) = (p.cpu.alloc_fill_many(0, dt, &bad).unwrap_err(), p.gpu.alloc_fill_many(0, dt, &bad).unwrap_err());
        assert_eq!(ec, eg);
        assert!(ec.0.starts_with("items[4]: allocFill: block len [4, 64] has 256 elements but shape [4, 64, 2] has 512"), "{}", ec.0);
        for r in 0..2 {
            assert_eq!((p.cpu.live_bytes(r).unwrap(), p.gpu.live_bytes(r).unwrap()), (0, 0));
        }
    }
    assert_eq!((p.cpu.live_tensors(), p.gpu.live_tensors()), (0, 0));
}

#[test]
fn cuda_store_with_small_blocks_equals_the_cpu_store() {
    // 8 threads per block: other grids, chunk sizes and the exact kernel's single bin group
    let Some(d) = emu_devices(1, 8) else { return };
    check_everything(d);
}

#[test]
fn copies_between_ranks_and_devices() {
    let Some(devs) = emu_devices(2, 64) else { return };
    let mut p = Pair::new(4, devs); // ranks 0, 2 on emu:0; 1, 3 on emu:1
    assert_eq!(p.gpu.device_of_rank(3).unwrap(), "emu:1");
    for dt in DType::ALL {
        let shape = [6u64, 10, 7];
        let spec = GenSpec::new(9, 0, "x", dt, 1, GenMode::Gen);
        let blk = Block::full(&shape);
        let mut ts = Vec::new();
        for r in 0..4 {
            let t = p.alloc(r, dt, &shape);
            let mut s = spec.clone();
            s.name = format!("x{r}");
            p.cpu.fill_grad(t.0, &s, &blk).unwrap();
            p.gpu.fill_grad(t.1, &s, &blk).unwrap();
            ts.push(t);
        }
        for (dim, &size) in shape.iter().enumerate() {
            for rank in 0..4 {
                // narrow of another rank's tensor (often on the other device)
                let src = ts[(rank + 1) % 4];
                let (start, len) = (1, size - 2);
                let n = (p.cpu.narrow(src.0, dim, start, len, rank).unwrap(), p.gpu.narrow(src.1, dim, start, len, rank).unwrap());
                p.same(n, &format!("{dt:?} narrow dim {dim} rank {rank}"));
                // all-gather style cat of every rank's tensor, charged to `rank`
                let ids: (Vec<u32>, Vec<u32>) = ts.iter().map(|t| (t.0, t.1)).unzip();
                let c = (p.cpu.cat(&ids.0, dim, rank).unwrap(), p.gpu.cat(&ids.1, dim, rank).unwrap());
                p.same(c, &format!("{dt:?} cat dim {dim} rank {rank}"));
                let k = (p.cpu.clone_tensor(c.0, (rank + 1) % 4).unwrap(), p.gpu.clone_tensor(c.1, (rank + 1) % 4).unwrap());
                p.same(k, &format!("{dt:?} clone across devices"));
                assert_eq!(p.gpu.compare(c.1, k.1).unwrap(), None);
                p.cpu.set_element(k.0, 5, -0.0).unwrap();
                p.gpu.set_element(k.1, 5, -0.0).unwrap();
                assert_eq!(format!("{:?}", p.cpu.compare(c.0, k.0).unwrap()), format!("{:?}", p.gpu.compare(c.1, k.1).unwrap()));
                p.cpu.copy_from(k.0, c.0).unwrap();
                p.gpu.copy_from(k.1, c.1).unwrap();
                p.same(k, "copyFrom");
                for t in [n, c, k] {
                    p.cpu.free(t.0).unwrap();
                    p.gpu.free(t.1).unwrap();
                }
            }
        }
        // copy_block between overlapping blocks of one global tensor, across devices
        let g = [9u64, 12];
        let b1 = Block { global_shape: g.to_vec(), start: vec![0, 2], len: vec![6, 8] };
        let b2 = Block { global_shape: g.to_vec(), start: vec![3, 0], len: vec![6, 6] };
        let s1 = GenSpec::new(1, 0, "w", dt, 0, GenMode::Gen);
        let x = p.alloc(0, dt, &b1.len);
        let y = p.alloc(1, dt, &b2.len);
        p.cpu.fill_grad(x.0, &s1, &b1).unwrap();
        p.gpu.fill_grad(x.1, &s1, &b1).unwrap();
        let n1 = p.cpu.copy_block(y.0, &b2, x.0, &b1).unwrap();
        let n2 = p.gpu.copy_block(y.1, &b2, x.1, &b1).unwrap();
        assert_eq!((n1, n2), (12, 12));
        p.same(y, "copyBlock");
        for t in ts.into_iter().chain([x, y]) {
            p.cpu.free(t.0).unwrap();
            p.gpu.free(t.1).unwrap();
        }
    }
    assert_eq!(p.gpu.live_tensors(), 0);
}

#[test]
fn adamw_safetensors_and_values() {
    let Some(devs) = emu_devices(2, 32) else { return };
    let mut p = Pair::new(2, devs);
    let hp = AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };
    for gdt in DType::ALL {
        let shape = [33u64, 5];
        let blk = Block::full(&shape);
        let pp = p.alloc(1, DType::F32, &shape);
        let g = p.alloc(1, gdt, &shape);
        let m = p.alloc(1, DType::F32, &shape);
        let v = p.alloc(1, DType::F32, &shape);
        for (t, name, dt) in [(pp, "p", DType::F32), (g, "g", gdt)] {
            let s = GenSpec::new(4, 0, name, dt, 0, GenMode::Gen);
            p.cpu.fill_grad(t.0, &s, &blk).unwrap();
            p.gpu.fill_grad(t.1, &s, &blk).unwrap();
        }
        for step in 1..4 {
            p.cpu.adamw_step(pp.0, g.0, m.0, v.0, step, &hp).unwrap();
            p.gpu.adamw_step(pp.1, g.1, m.1, v.1, step, &hp).unwrap();
        }
        for t in [pp, m, v] {
            p.same(t, "adamw");
        }
        p.cpu.fill_value(m.0, 1.0 / 3.0).unwrap();
        p.gpu.fill_value(m.1, 1.0 / 3.0).unwrap();
        p.same(m, "fillValue");
        let dir = std::env::temp_dir().join(format!("clip-parity-cuda-st-{}-{gdt:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (fa, fb) = (dir.join("a.safetensors"), dir.join("b.safetensors"));
        let md = vec![("step".to_string(), "3".to_string())];
        p.cpu.save_safetensors(fa.to_str().unwrap(), &[("p".into(), pp.0), ("g".into(), g.0)], &md).unwrap();
        p.gpu.save_safetensors(fb.to_str().unwrap(), &[("p".into(), pp.1), ("g".into(), g.1)], &md).unwrap();
        assert_eq!(std::fs::read(&fa).unwrap(), std::fs::read(&fb).unwrap(), "safetensors files");
        let la = p.cpu.load_safetensors(fa.to_str().unwrap(), 0).unwrap();
        let lb = p.gpu.load_safetensors(fb.to_str().unwrap(), 0).unwrap();
        for (x, y) in la.iter().zip(&lb) {
            assert_eq!(x.0, y.0);
            p.same((x.1, y.1), "loadSafetensors");
        }
        let bad = dir.join("bad.safetensors");
        let bytes = std::fs::read(&fb).unwrap();
        std::fs::write(&bad, &bytes[..bytes.len() - 3]).unwrap();
        let before = p.gpu.live_tensors();
        assert!(p.gpu.load_safetensors(bad.to_str().unwrap(), 0).is_err());
        assert_eq!(p.gpu.live_tensors(), before);
        assert!(p.gpu.load_safetensors(fb.to_str().unwrap(), 5).unwrap_err().0.contains("rank: 5"));
        for t in [pp, g, m, v].into_iter().chain(la.iter().zip(&lb).map(|(x, y)| (x.1, y.1))) {
            p.cpu.free(t.0).unwrap();
            p.gpu.free(t.1).unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // errors are the cpu store's own
    let e1 = p.cpu.free(999).unwrap_err();
    let e2 = p.gpu.free(999).unwrap_err();
    assert_eq!(e1, e2);
    let t = p.alloc(0, DType::BF16, &[4]);
    assert_eq!(p.cpu.get_element(t.0, 4).unwrap_err(), p.gpu.get_element(t.1, 4).unwrap_err());
    assert_eq!(p.cpu.sum_abs_pow(t.0, -1.0).unwrap_err(), p.gpu.sum_abs_pow(t.1, -1.0).unwrap_err());
    p.cpu.set_element(t.0, 1, f64::from(bf16::from_f32(2.5))).unwrap();
    p.gpu.set_element(t.1, 1, 2.5).unwrap();
    assert_eq!(p.gpu.get_element(t.1, 1).unwrap(), 2.5);
    p.same(t, "setElement");
    let m = p.gpu.device_memory(0).unwrap().expect("a cuda store reports device memory");
    assert_eq!(p.cpu.device_memory(0).unwrap(), None);
    assert!(p.cpu.device_memory(9).is_err() && p.gpu.device_memory(9).is_err());
    assert!(m.total_bytes > 0 && m.device == "emu:0");
    let _ = f16::ONE;
    p.cpu.free(t.0).unwrap();
    p.gpu.free(t.1).unwrap();
}

#[test]
fn exact_bins_carry_into_the_high_word() {
    // 300k copies of the largest mantissa in one exponent bin: the 64-bit low word overflows
    let Some(devs) = emu_devices(1, 256) else { return };
    let mut p = Pair::new(1, devs);
    let t = p.alloc(0, DType::F32, &[300_000]);
    let x = f32::from_bits(0x3fff_ffff) as f64;
    p.cpu.fill_value(t.0, x).unwrap();
    p.gpu.fill_value(t.1, x).unwrap();
    p.same(t, "fillValue");
    for q in [2.0, 1.0] {
        assert_eq!(p.cpu.exact_sum_abs_pow(t.0, q).unwrap(), p.gpu.exact_sum_abs_pow(t.1, q).unwrap(), "p = {q}");
    }
}
