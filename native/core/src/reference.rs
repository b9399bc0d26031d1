//! Fused generate + reduce over a full logical tensor without allocating it (the reference clip).
//! Multi-threaded for large tensors; results are exact, so they do not depend on the split.

use half::{bf16, f16};

use crate::bail;
use crate::dtype::{pow2, DType, Elem};
use crate::error::Result;
use crate::exact::{add_general, add_general_table, add_general_with, AbsPowTable16, BigUint, ExactF32, ExactF64, TABLE_MIN_LEN};
use crate::gen::{GenMode, GenSpec};
use crate::path::KernelPath;

/// value v rounded to dt (as fillGrad would store it), as f64.
pub fn round_in(dt: DType, v: f64) -> f64 {
    match dt {
        DType::F32 => <f32 as Elem>::from_f64(v).to_f64(),
        DType::BF16 => <bf16 as Elem>::from_f64(v).to_f64(),
        DType::F16 => <f16 as Elem>::from_f64(v).to_f64(),
    }
}

fn threads_for(numel: u64) -> u64 {
    if numel < (1 << 20) {
        1
    } else {
        std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1).clamp(1, 16).min(numel >> 18).max(1)
    }
}

/// Runs f on [lo, hi) ranges covering [0, numel) in parallel and collects the results.
fn par_ranges<R: Send>(numel: u64, f: impl Fn(u64, u64) -> R + Sync) -> Vec<R> {
    let t = threads_for(numel);
    if t == 1 {
        return vec![f(0, numel)];
    }
    let per = numel.div_ceil(t);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..t)
            .map(|k| {
                let (lo, hi) = ((k * per).min(numel), ((k + 1) * per).min(numel));
                let f = &f;
                s.spawn(move || f(lo, hi))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    })
}

fn check_p(p: f64) -> Result<()> {
    if !(p.is_finite() && p > 0.0) {
        bail!("p: {p} must be finite and > 0 (use maxAbsFull for p = inf)");
    }
    Ok(())
}

/// Sum of |q(i)| (p2 = false) or q(i)^2 over [lo, hi), exact: the portable reference, or the SIMD
/// generator (the same sum: integers).
fn q_pow_sum(path: KernelPath, key: u64, m: u32, lo: u64, hi: u64, p2: bool) -> u128 {
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() {
        // SAFETY: only KernelPath::detect sets is_simd, on a CPU with AVX2 and F16C, and is_wide,
        // on one with AVX-512 F and DQ too; m <= 24.
        return unsafe {
            match (path.is_wide(), p2) {
                (true, true) => crate::simd::gen_q_pow_sum_wide::<true>(key, m, lo, hi),
                (true, false) => crate::simd::gen_q_pow_sum_wide::<false>(key, m, lo, hi),
                (false, true) => crate::simd::gen_q_pow_sum::<true>(key, m, lo, hi),
                (false, false) => crate::simd::gen_q_pow_sum::<false>(key, m, lo, hi),
            }
        };
    }
    let _ = path;
    let mut total: u128 = 0;
    let mut i = lo;
    while i < hi {
        let end = hi.min(i.saturating_add(1 << 17));
        let mut acc: u64 = 0;
        for j in i..end {
            let q = GenSpec::q(key, m, j).unsigned_abs();
            acc += if p2 { q * q } else { q };
        }
        total += acc as u128;
        i = end;
    }
    total
}

/// max |q(i)| over [lo, hi) (0 when empty), portable or SIMD.
fn q_abs_max(path: KernelPath, key: u64, m: u32, lo: u64, hi: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() && lo < hi {
        // SAFETY: as in q_pow_sum.
        return unsafe {
            if path.is_wide() {
                crate::simd::gen_q_abs_max_wide(key, m, lo, hi)
            } else {
                crate::simd::gen_q_abs_max(key, m, lo, hi)
            }
        };
    }
    let _ = path;
    (lo..hi).map(|j| GenSpec::q(key, m, j).unsigned_abs()).max().unwrap_or(0)
}

/// Exact sum over the finite elements of the full tensor of f64(|x|^p), x = gen(i) stored in
/// spec.dtype; N with value N * 2^-1074.
pub fn exact_full(spec: &GenSpec, numel: u64, p: f64) -> Result<BigUint> {
    exact_full_with(KernelPath::detect(), spec, numel, p)
}

/// `exact_full` on the given kernel path (the same, exact, result on every path).
pub fn exact_full_with(path: KernelPath, spec: &GenSpec, numel: u64, p: f64) -> Result<BigUint> {
    spec.validate()?;
    check_p(p)?;
    let special = spec.special.filter(|&(i, _)| i < numel);
    let mut n = BigUint::zero();
    match spec.mode {
        GenMode::Zeros | GenMode::NegZeros => {}
        GenMode::Ones => {
            let count = numel - special.is_some() as u64;
            n.add_shifted(count as u128, 1074); // |1|^p = 1 = 2^1074 units
        }
        GenMode::Gen if spec.exact_in(spec.dtype) && (p == 1.0 || p == 2.0) && spec.sum_of.is_empty() => {
            let key = spec.key();
            let m = spec.m();
            let skip = special.map(|s| s.0).unwrap_or(u64::MAX);
            let p2 = p == 2.0;
            let parts = par_ranges(numel, |lo, hi| q_pow_sum(path, key, m, lo, hi, p2));
            let mut total: u128 = parts.iter().sum();
            if skip != u64::MAX {
                let q = GenSpec::q(key, m, skip).unsigned_abs() as u128;
                total -= if p2 { q * q } else { q };
            }
            let ue = spec.unit_exp();
            let shift = if p2 { 2 * ue + 1074 } else { ue + 1074 };
            n.add_shifted(total, shift as u32);
        }
        GenMode::Gen => {
            let nospecial = GenSpec { special: None, ..spec.clone() };
            let skip = special.map(|s| s.0);
            fn go<T: Elem>(path: KernelPath, s: &GenSpec, lo: u64, hi: u64, p: f64, skip: Option<u64>) -> Result<BigUint> {
                let key = s.key();
                let mut buf = vec![T::default(); (1usize << 16).min((hi - lo) as usize)];
                let fast = p == 1.0 || p == 2.0;
                let table = (!fast && std::mem::size_of::<T>() == 2 && hi - lo >= TABLE_MIN_LEN as u64).then(|| AbsPowTable16::new::<T>(p));
                let mut a32 = ExactF32::new(p == 2.0);
                let mut a64 = ExactF64::new();
                let mut i = lo;
                while i < hi {
                    let k = ((hi - i) as usize).min(buf.len());
                    let b = &mut buf[..k];
                    s.fill_range_with(path, key, i, b);
                    if let Some(sk) = skip {
                        if sk >= i && sk < i + k as u64 {
                            b[(sk - i) as usize] = T::from_f64(0.0);
                        }
                    }
                    if fast {
                        a32.add_slice(b);
                    } else if let Some(t) = &table {
                        add_general_table(&mut a64, b, t, p)?;
                    } else {
                        add_general_with(path, &mut a64, b, p)?;
                    }
                    i += k as u64;
                }
                Ok(if fast { a32.finish() } else { a64.finish() })
            }
            let parts = par_ranges(numel, |lo, hi| match spec.dtype {
                DType::F32 => go::<f32>(path, &nospecial, lo, hi, p, skip),
                DType::BF16 => go::<bf16>(path, &nospecial, lo, hi, p, skip),
                DType::F16 => go::<f16>(path, &nospecial, lo, hi, p, skip),
            });
            for part in parts {
                n.add(&part?);
            }
        }
    }
    if let Some((_, v)) = special {
        let x = round_in(spec.dtype, v);
        if x.is_finite() {
            let mut a = ExactF64::new();
            add_general(&mut a, &[x as f32], p)?; // x is exact in f32
            n.add(&a.finish());
        }
    }
    Ok(n.normalized())
}

/// max |x| over the full tensor (NaN if any NaN), x = gen(i) stored in spec.dtype.
pub fn max_abs_full(spec: &GenSpec, numel: u64) -> Result<f64> {
    max_abs_full_with(KernelPath::detect(), spec, numel)
}

/// `max_abs_full` on the given kernel path (the same result on every path).
pub fn max_abs_full_with(path: KernelPath, spec: &GenSpec, numel: u64) -> Result<f64> {
    spec.validate()?;
    if numel == 0 {
        return Ok(0.0);
    }
    let special = spec.special.filter(|&(i, _)| i < numel);
    let rest = numel - special.is_some() as u64;
    let mut best = 0f64;
    if rest > 0 {
        best = match spec.mode {
            GenMode::Zeros | GenMode::NegZeros => 0.0,
            GenMode::Ones => 1.0,
            GenMode::Gen if !spec.sum_of.is_empty() => {
                // finalize sums: materialized in chunks (no q shortcut), special skipped
                let nospecial = GenSpec { special: None, ..spec.clone() };
                let skip = special.map(|s| s.0);
                fn go<T: Elem>(s: &GenSpec, lo: u64, hi: u64, skip: Option<u64>) -> f64 {
                    let mut buf = vec![T::default(); (1usize << 16).min((hi - lo) as usize)];
                    let mut best = 0f64;
                    let mut i = lo;
                    while i < hi {
                        let k = ((hi - i) as usize).min(buf.len());
                        s.fill_range(0, i, &mut buf[..k]);
                        for (j, x) in buf[..k].iter().enumerate() {
                            if Some(i + j as u64) != skip {
                                best = best.max(x.to_f64().abs());
                            }
                        }
                        i += k as u64;
                    }
                    best
                }
                let parts = par_ranges(numel, |lo, hi| match spec.dtype {
                    DType::F32 => go::<f32>(&nospecial, lo, hi, skip),
                    DType::BF16 => go::<bf16>(&nospecial, lo, hi, skip),
                    DType::F16 => go::<f16>(&nospecial, lo, hi, skip),
                });
                parts.into_iter().fold(0f64, f64::max)
            }
            GenMode::Gen => {
                let key = spec.key();
                let m = spec.m();
                let skip = special.map(|s| s.0).unwrap_or(u64::MAX);
                let parts = par_ranges(numel, |lo, hi| {
                    if (lo..hi).contains(&skip) {
                        q_abs_max(path, key, m, lo, skip).max(q_abs_max(path, key, m, skip + 1, hi))
                    } else {
                        q_abs_max(path, key, m, lo, hi)
                    }
                });
                let mq = parts.into_iter().max().unwrap_or(0);
                // rounding is monotone: max |round(v)| = round(max |v|)
                round_in(spec.dtype, mq as f64 * pow2(spec.unit_exp()))
            }
        };
    }
    if let Some((_, v)) = special {
        let x = round_in(spec.dtype, v);
        if x.is_nan() {
            return Ok(f64::NAN);
        }
        best = best.max(x.abs());
    }
    Ok(best)
}

/// The reference's sum as it was before |x|^p was correctly rounded (issue 44): f64 |x|^p of a float32
/// gradient by the C library's pow, element by element. For bench/matrix.ts's same-run baseline only
/// (how much the exact |x|^p saved): its values depend on the libm, and the harness never calls it.
/// Float32 gradients with p other than 1 and 2 only (16-bit ones went through a table then as now).
pub fn exact_full_libm_baseline(spec: &GenSpec, numel: u64, p: f64) -> Result<BigUint> {
    spec.validate()?;
    check_p(p)?;
    if spec.dtype != DType::F32 || p == 1.0 || p == 2.0 || spec.mode != GenMode::Gen || spec.special.is_some() {
        bail!("the libm baseline takes float32 generated gradients with no special element and p other than 1 and 2");
    }
    let path = KernelPath::detect();
    let parts = par_ranges(numel, |lo, hi| -> Result<BigUint> {
        let key = spec.key();
        let mut buf = vec![0f32; (1usize << 16).min((hi - lo) as usize)];
        let mut acc = ExactF64::new();
        let mut i = lo;
        while i < hi {
            let k = ((hi - i) as usize).min(buf.len());
            let b = &mut buf[..k];
            spec.fill_range_with(path, key, i, b);
            for &x in b.iter() {
                acc.add((x as f64).abs().powf(p));
            }
            i += k as u64;
        }
        Ok(acc.finish())
    });
    let mut n = BigUint::zero();
    for part in parts {
        n.add(&part?);
    }
    Ok(n.normalized())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::exact_sum_abs_pow;
    use crate::kernels::max_abs;

    fn materialized(spec: &GenSpec, numel: u64, p: f64) -> (BigUint, f64) {
        fn go<T: Elem>(spec: &GenSpec, numel: u64, p: f64) -> (BigUint, f64) {
            let mut v = vec![T::default(); numel as usize];
            let blk = crate::gen::Block::full(&[numel]);
            blk.fill(spec, &mut v);
            (exact_sum_abs_pow(&v, p).unwrap(), max_abs(&v))
        }
        match spec.dtype {
            DType::F32 => go::<f32>(spec, numel, p),
            DType::BF16 => go::<bf16>(spec, numel, p),
            DType::F16 => go::<f16>(spec, numel, p),
        }
    }

    #[test]
    fn fused_equals_materialized() {
        for dt in DType::ALL {
            for (exp, mode) in [(0, GenMode::Gen), (5, GenMode::Gen), (-140, GenMode::Gen), (20, GenMode::Gen), (0, GenMode::Ones), (0, GenMode::Zeros)] {
                for special in [None, Some((3u64, f64::INFINITY)), Some((7, 2.5)), Some((1_500_000, f64::NAN))] {
                    let mut s = GenSpec::new(77, 4, "m.w", dt, exp, mode);
                    s.special = special;
                    for numel in [0u64, 1, 10, 1_300_001] {
                        for p in [1.0, 2.0, 3.0] {
                            if numel > 100 && p == 3.0 {
                                continue;
                            }
                            let (n, mx) = materialized(&s, numel, p);
                            for path in KernelPath::all_here() {
                                let got = exact_full_with(path, &s, numel, p).unwrap();
                                assert_eq!(got, n, "{dt:?} e={exp} {mode:?} {special:?} n={numel} p={p} {path:?}");
                                let gm = max_abs_full_with(path, &s, numel).unwrap();
                                assert!(gm == mx || (gm.is_nan() && mx.is_nan()), "max {dt:?} e={exp} {mode:?} {special:?} n={numel}: {gm} vs {mx} {path:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn libm_baseline_sums_the_same_quantity_and_refuses_what_it_does_not_model() {
        let s = GenSpec::new(3, 1, "m.w", DType::F32, 0, GenMode::Gen);
        for p in [3.0, 1.5, 0.5] {
            let exact = exact_full(&s, 100_000, p).unwrap().to_f64_scaled();
            let libm = exact_full_libm_baseline(&s, 100_000, p).unwrap().to_f64_scaled();
            // the same sum but for misrounded terms: each off by at most an ulp of itself
            assert!((exact - libm).abs() <= exact * 1e-15, "p {p}: {exact} vs {libm}");
        }
        assert!(exact_full_libm_baseline(&s, 10, 2.0).is_err());
        assert!(exact_full_libm_baseline(&GenSpec::new(3, 1, "m.w", DType::BF16, 0, GenMode::Gen), 10, 3.0).is_err());
    }

    #[test]
    fn q_sums_simd_equal_portable() {
        let mut st = 5u64;
        for _ in 0..300 {
            st = crate::genq::splitmix64(st);
            let key = st;
            let m = [8, 11, 24][(st % 3) as usize];
            let lo = if st.is_multiple_of(5) { u64::MAX - 1000 } else { st % 1000 };
            let hi = lo.saturating_add((st >> 20) % 3000);
            for path in KernelPath::all_here() {
                for p2 in [false, true] {
                    let a = q_pow_sum(KernelPath::PORTABLE, key, m, lo, hi, p2);
                    assert_eq!(a, q_pow_sum(path, key, m, lo, hi, p2), "m {m} [{lo}, {hi}) p2 {p2} {path:?}");
                }
                assert_eq!(q_abs_max(KernelPath::PORTABLE, key, m, lo, hi), q_abs_max(path, key, m, lo, hi));
            }
        }
        // a range long enough for several flushes of the u64 lanes (2^14 steps of 16 indices each)
        for path in KernelPath::all_here() {
            let (a, b) = (q_pow_sum(KernelPath::PORTABLE, 9, 24, 3, 600_005, true), q_pow_sum(path, 9, 24, 3, 600_005, true));
            assert_eq!(a, b, "{path:?}");
        }
    }

    #[test]
    fn ones_norm_is_count() {
        let s = GenSpec::new(1, 0, "x", DType::BF16, 0, GenMode::Ones);
        assert_eq!(exact_full(&s, 1000, 2.0).unwrap().to_f64_scaled(), 1000.0);
    }
}
