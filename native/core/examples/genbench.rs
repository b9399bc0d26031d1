//! Generator timing per dtype and SIMD path (min over interleaved rounds), against the read pass
//! of the same bytes: cargo run --release --example genbench [MiB]
use clip_parity_core::dtype::Elem;
use clip_parity_core::gen::{GenMode, GenSpec};
use clip_parity_core::kernels::{self, KernelPath};
use half::{bf16, f16};
use std::time::Instant;

fn time(best: &mut f64, f: impl FnOnce()) {
    let t = Instant::now();
    f();
    *best = best.min(t.elapsed().as_secs_f64());
}

fn run<T: Elem>(mib: usize) {
    let n = (mib << 20) / T::DTYPE.size();
    let spec = GenSpec::new(1234, 0, "bench.weight", T::DTYPE, 0, GenMode::Gen);
    let key = spec.key();
    let mut v = vec![T::default(); n];
    let small = 16 << 10; // elements: in L1/L2
    let mut s = vec![T::default(); small];
    let c = 0.7f32;
    let paths: Vec<KernelPath> = KernelPath::all_here();
    spec.fill_range_with(KernelPath::detect(), key, 0, &mut v);
    kernels::scale(&mut v, c);
    let (mut read, mut sink) = (f64::MAX, 0u64);
    let mut fill = vec![f64::MAX; paths.len()];
    let mut fill_c = vec![f64::MAX; paths.len()];
    let mut verify = vec![f64::MAX; paths.len()];
    for _ in 0..8 {
        time(&mut read, || sink += kernels::read_pass(&v) as u64);
        for (j, &p) in paths.iter().enumerate() {
            if !p.is_simd() && mib > 64 {
                continue;
            }
            let mut w: Vec<T> = Vec::new();
            std::mem::swap(&mut w, &mut v);
            time(&mut fill[j], || spec.fill_range_with(p, key, 0, &mut w));
            kernels::scale(&mut w, c);
            std::mem::swap(&mut w, &mut v);
            time(&mut verify[j], || sink += spec.scaled_first_difference_with(p, key, 0, c, &v).is_some() as u64);
            let reps = n / small;
            time(&mut fill_c[j], || {
                for r in 0..reps {
                    spec.fill_range_with(p, key, (r * small) as u64, &mut s);
                }
            });
        }
    }
    let g = |t: f64| n as f64 / t / 1e9;
    println!("{:?} {} MiB: read pass {:.2} ms ({:.2} G elem/s)", T::DTYPE, mib, read * 1e3, g(read));
    for (j, p) in paths.iter().enumerate() {
        let name = if p.is_wide() { "avx512" } else if p.is_simd() { "avx2" } else { "portable" };
        println!(
            "  {name:9} fill {:7.2} ms ({:5.2} G/s, {:.2}x read)  in-cache fill {:5.2} G/s  verify {:7.2} ms ({:5.2} G/s, {:.2}x read)",
            fill[j] * 1e3,
            g(fill[j]),
            fill[j] / read,
            g(fill_c[j]),
            verify[j] * 1e3,
            g(verify[j]),
            verify[j] / read
        );
    }
    if sink == 42 {
        println!();
    }
}

fn main() {
    let mib: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(64);
    run::<f32>(mib);
    run::<bf16>(mib);
    run::<f16>(mib);
}
