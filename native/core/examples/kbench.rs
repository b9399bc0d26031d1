//! Quick kernel timing (min over interleaved rounds): cargo run --release --example kbench
use clip_parity_core::exact::{exact_sum_abs_pow, exact_sum_abs_pow_with};
use clip_parity_core::gen::{Block, GenMode, GenSpec};
use clip_parity_core::kernels::{self, KernelPath};
use clip_parity_core::DType;
use std::time::Instant;

fn main() {
    let n = 16 << 20;
    let mut v = vec![0f32; n];
    let spec = GenSpec::new(1234, 0, "bench.weight", DType::F32, 0, GenMode::Gen);
    Block::full(&[n as u64]).fill(&spec, &mut v);
    let mut best = [f64::MAX; 5];
    let mut sink = 0u64;
    for _ in 0..20 {
        let t = Instant::now();
        sink += kernels::read_pass(&v) as u64;
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        sink += kernels::sum_abs_pow(&v, 2.0) as u64;
        best[1] = best[1].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        sink += exact_sum_abs_pow(&v, 2.0).unwrap().limbs.len() as u64;
        best[2] = best[2].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        sink += exact_sum_abs_pow(&v, 1.0).unwrap().limbs.len() as u64;
        best[3] = best[3].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        sink += exact_sum_abs_pow_with(KernelPath::PORTABLE, &v, 2.0).unwrap().limbs.len() as u64;
        best[4] = best[4].min(t.elapsed().as_secs_f64());
    }
    // cache-resident (compute-only) rates: 64 KiB slices, repeated
    let small = &v[..16384];
    let mut bs = [f64::MAX; 3];
    for _ in 0..20 {
        let t = Instant::now();
        for _ in 0..1000 { sink += kernels::read_pass(small) as u64; }
        bs[0] = bs[0].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..1000 { sink += kernels::sum_abs_pow(small, 2.0) as u64; }
        bs[1] = bs[1].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..1000 { sink += exact_sum_abs_pow(small, 2.0).unwrap().limbs.len() as u64; }
        bs[2] = bs[2].min(t.elapsed().as_secs_f64());
    }
    let el = 16384.0 * 1000.0;
    println!("in cache: read {:.3} ns/el | sumsq {:.3} ns/el | exact2 {:.3} ns/el", bs[0] / el * 1e9, bs[1] / el * 1e9, bs[2] / el * 1e9);
    println!("portable exact2 {:.2} ms", best[4] * 1e3);
    // the generator: fill and the fused regenerate-scale-compare of verifyScaled, per dtype and path
    fn gen_rates<T: clip_parity_core::dtype::Elem>(n: usize, sink: &mut u64) {
        let spec = GenSpec::new(1234, 0, "bench.weight", T::DTYPE, 0, GenMode::Gen);
        let blk = Block::full(&[n as u64]);
        let key = spec.key();
        let mut v = vec![T::default(); n];
        for path in [KernelPath::PORTABLE, KernelPath::detect()] {
            let mut b = [f64::MAX; 2];
            for _ in 0..15 {
                let t = Instant::now();
                blk.fill_with(path, &spec, &mut v);
                b[0] = b[0].min(t.elapsed().as_secs_f64());
                kernels::scale(&mut v, 0.5);
                let t = Instant::now();
                *sink += spec.scaled_first_difference_with(path, key, 0, 0.5, &v).map_or(0, |j| j as u64 + 1);
                b[1] = b[1].min(t.elapsed().as_secs_f64());
            }
            // in cache: 16 Ki elements, filled and verified 1000 times
            let small = &mut v[..16384];
            let mut c = [f64::MAX; 2];
            for _ in 0..5 {
                let t = Instant::now();
                for r in 0..1000u64 {
                    spec.fill_range_with(path, key, r, small);
                }
                c[0] = c[0].min(t.elapsed().as_secs_f64());
                spec.fill_range_with(path, key, 0, small);
                kernels::scale(small, 0.5);
                let t = Instant::now();
                for _ in 0..1000 {
                    *sink += spec.scaled_first_difference_with(path, key, 0, 0.5, small).map_or(0, |j| j as u64 + 1);
                }
                c[1] = c[1].min(t.elapsed().as_secs_f64());
            }
            println!("  in cache: fill {:.3} ns/el, verify {:.3} ns/el", c[0] / 16384e3 * 1e9, c[1] / 16384e3 * 1e9);
            let gb = |s: f64| (n * std::mem::size_of::<T>()) as f64 / s / 1e9;
            println!("gen {:?} simd={}: fill {:.2} ms ({:.1} GB/s) | verify {:.2} ms ({:.1} GB/s)",
                T::DTYPE, path.is_simd(), b[0] * 1e3, gb(b[0]), b[1] * 1e3, gb(b[1]));
        }
    }
    gen_rates::<f32>(n, &mut sink);
    gen_rates::<half::bf16>(n, &mut sink);
    gen_rates::<half::f16>(n, &mut sink);
    println!("read {:.2} ms | sumsq {:.2} ms ratio {:.3} | exact2 {:.2} ms ratio {:.3} | exact1 {:.2} ms ratio {:.3} ({sink})",
        best[0] * 1e3, best[1] * 1e3, best[0] / best[1], best[2] * 1e3, best[0] / best[2], best[3] * 1e3, best[0] / best[3]);
}
