//! Fused generate + reduce over a full logical tensor without allocating it (the reference clip).
//! Multi-threaded for large tensors; results are exact, so they do not depend on the split.

use half::{bf16, f16};

use crate::dtype::{pow2, DType, Elem};
use crate::exact::{add_general, BigUint, ExactF32, ExactF64};
use crate::gen::{GenMode, GenSpec};
use crate::{bail, Result};

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

/// Exact sum over the finite elements of the full tensor of f64(|x|^p), x = gen(i) stored in
/// spec.dtype; N with value N * 2^-1074.
pub fn exact_full(spec: &GenSpec, numel: u64, p: f64) -> Result<BigUint> {
    spec.validate()?;
    check_p(p)?;
    let special = spec.special.filter(|&(i, _)| i < numel);
    let mut n = BigUint::zero();
    match spec.mode {
        GenMode::Zeros => {}
        GenMode::Ones => {
            let count = numel - special.is_some() as u64;
            n.add_shifted(count as u128, 1074); // |1|^p = 1 = 2^1074 units
        }
        GenMode::Gen if spec.exact_in(spec.dtype) && (p == 1.0 || p == 2.0) => {
            let key = spec.key();
            let m = spec.m();
            let skip = special.map(|s| s.0).unwrap_or(u64::MAX);
            let p2 = p == 2.0;
            let parts = par_ranges(numel, |lo, hi| {
                let mut total: u128 = 0;
                let mut i = lo;
                while i < hi {
                    let end = hi.min(i + (1 << 17));
                    let mut acc: u64 = 0;
                    for j in i..end {
                        let q = GenSpec::q(key, m, j).unsigned_abs();
                        acc += if p2 { q * q } else { q };
                    }
                    total += acc as u128;
                    i = end;
                }
                total
            });
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
            fn go<T: Elem>(s: &GenSpec, lo: u64, hi: u64, p: f64, skip: Option<u64>) -> Result<BigUint> {
                let key = s.key();
                let mut buf = vec![T::default(); (1usize << 16).min((hi - lo) as usize)];
                let fast = p == 1.0 || p == 2.0;
                let mut a32 = ExactF32::new(p == 2.0);
                let mut a64 = ExactF64::new();
                let mut i = lo;
                while i < hi {
                    let k = ((hi - i) as usize).min(buf.len());
                    let b = &mut buf[..k];
                    s.fill_range(key, i, b);
                    if let Some(sk) = skip {
                        if sk >= i && sk < i + k as u64 {
                            b[(sk - i) as usize] = T::from_f64(0.0);
                        }
                    }
                    if fast {
                        a32.add_slice(b);
                    } else {
                        add_general(&mut a64, b, p)?;
                    }
                    i += k as u64;
                }
                Ok(if fast { a32.finish() } else { a64.finish() })
            }
            let parts = par_ranges(numel, |lo, hi| match spec.dtype {
                DType::F32 => go::<f32>(&nospecial, lo, hi, p, skip),
                DType::BF16 => go::<bf16>(&nospecial, lo, hi, p, skip),
                DType::F16 => go::<f16>(&nospecial, lo, hi, p, skip),
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
    spec.validate()?;
    if numel == 0 {
        return Ok(0.0);
    }
    let special = spec.special.filter(|&(i, _)| i < numel);
    let rest = numel - special.is_some() as u64;
    let mut best = 0f64;
    if rest > 0 {
        best = match spec.mode {
            GenMode::Zeros => 0.0,
            GenMode::Ones => 1.0,
            GenMode::Gen => {
                let key = spec.key();
                let m = spec.m();
                let skip = special.map(|s| s.0).unwrap_or(u64::MAX);
                let parts = par_ranges(numel, |lo, hi| {
                    let mut mx = 0u64;
                    for j in lo..hi {
                        if j != skip {
                            mx = mx.max(GenSpec::q(key, m, j).unsigned_abs());
                        }
                    }
                    mx
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
                            let got = exact_full(&s, numel, p).unwrap();
                            assert_eq!(got, n, "{dt:?} e={exp} {mode:?} {special:?} n={numel} p={p}");
                            let gm = max_abs_full(&s, numel).unwrap();
                            assert!(gm == mx || (gm.is_nan() && mx.is_nan()), "max {dt:?} e={exp} {mode:?} {special:?} n={numel}: {gm} vs {mx}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ones_norm_is_count() {
        let s = GenSpec::new(1, 0, "x", DType::BF16, 0, GenMode::Ones);
        assert_eq!(exact_full(&s, 1000, 2.0).unwrap().to_f64_scaled(), 1000.0);
    }
}
