//! |x|^p of one element: the correctly rounded float64 value of the exact |x|^p (round to nearest,
//! ties to even; SPEC section 6), for x an f32 value (bf16 and f16 widen to f32 exactly).
//!
//! Never libm's pow: glibc's is not correctly rounded, and its FMA and non-FMA variants round about
//! 0.05% of f32 inputs differently for p = 1.5 and 3, so sums (and goldens) would depend on the CPU
//! and the C library that ran them. Correct rounding has one answer on every machine.
//!
//! - p = 1, 2, 3: |x|, x*x, (x*x)*x in f64. For an f32 x = M * 2^E (M < 2^24) x*x is exact
//!   (M^2 < 2^48), so each is a single rounding of the exact value; exponents stay in f64's normal
//!   range (2^-447 .. 2^384), so no double rounding through subnormals.
//! - p = 1.5: the square root of the cube held exactly as a double-double: ch = f64(x^3) and its
//!   exact error cl = fma(x*x, x, -ch); s = sqrt(ch), then one correction step
//!   t = s + (fma(-s, s, ch) + cl) / (2s). That this is correctly rounded is checked on every finite
//!   f32 (tests::exhaustive_f32, run by the nightly workflow; a sample of millions in cargo test).
//! - any other p: CORE-MATH's correctly rounded pow (the core-math crate).
//!
//! simd.rs computes the same operations four lanes at a time (same bits: every step is one IEEE
//! rounding, and an fma is an fma with or without FMA hardware).

/// How |x|^p is computed for one p (chosen once per reduction, not per element).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AbsPow {
    One,
    Two,
    Three,
    ThreeHalves,
    /// CORE-MATH's pow with this exponent.
    Other(f64),
}

impl AbsPow {
    pub fn new(p: f64) -> AbsPow {
        if p == 1.0 {
            AbsPow::One
        } else if p == 2.0 {
            AbsPow::Two
        } else if p == 3.0 {
            AbsPow::Three
        } else if p == 1.5 {
            AbsPow::ThreeHalves
        } else {
            AbsPow::Other(p)
        }
    }

    /// |x|^p correctly rounded, for x an f32 value widened to f64 (any sign; inf and NaN give inf
    /// and NaN, as pow does for p > 0).
    #[inline(always)]
    pub fn of(self, x: f64) -> f64 {
        let a = x.abs();
        match self {
            AbsPow::One => a,
            AbsPow::Two => a * a,
            AbsPow::Three => cube(a),
            AbsPow::ThreeHalves => three_halves(a),
            AbsPow::Other(p) => core_math::pow(a, p),
        }
    }
}

/// a^3 for a >= 0 an f32 value, correctly rounded (a*a is exact).
#[inline(always)]
pub fn cube(a: f64) -> f64 {
    (a * a) * a
}

/// a^1.5 for a >= 0 an f32 value, correctly rounded (see the module comment).
#[inline(always)]
pub fn three_halves(a: f64) -> f64 {
    // 0, inf and NaN are their own results; the formula would give 0/0 or inf - inf for them
    if !(a > 0.0 && a < f64::INFINITY) {
        return a;
    }
    let sq = a * a;
    let ch = sq * a;
    let cl = sq.mul_add(a, -ch);
    let s = ch.sqrt();
    s + ((-s).mul_add(s, ch) + cl) / (s + s)
}

/// The correctly rounded f64 value of |x|^p computed from the bits alone, with integer arithmetic:
/// the check the fast formulas are tested against (p = 3 or 1.5; x a finite f32).
#[cfg(test)]
pub(crate) fn exact_check(x: f32, p3: bool) -> f64 {
    // |x| = m * 2^e with m < 2^24; x^3 = m^3 * 2^(3e), m^3 < 2^72
    let b = x.to_bits() & 0x7fff_ffff;
    let k = (b >> 23) as i32;
    let m = ((b & 0x7f_ffff) | (((k != 0) as u32) << 23)) as u128;
    if m == 0 {
        return 0.0;
    }
    let e = k.max(1) - 150;
    let (n, e3) = (m * m * m, 3 * e);
    if p3 {
        return round_scaled(n, e3, false);
    }
    // sqrt(n * 2^e3): make the exponent even, then scale n by 4^j into [2^106, 2^108) so that its
    // integer square root r has 54 bits (53 + a rounding bit); r*r != n' says the rest is nonzero.
    let (mut n, mut half) = if e3 % 2 != 0 { (n << 1, (e3 - 1) / 2) } else { (n, e3 / 2) };
    let bits = 128 - n.leading_zeros() as i32; // at most 74
    let j = (108 - bits) / 2;
    n <<= 2 * j;
    half -= j;
    let r = isqrt(n);
    assert!(((1u128 << 53)..(1u128 << 54)).contains(&r), "{r}");
    let inexact = r * r != n;
    // r has one bit more than the result: round it with `inexact` as the sticky bit
    round_scaled(r, half, inexact)
}

/// round(n + sticky) * 2^e to f64, n > 0 integer, ties to even; `sticky` says that the exact value
/// is a little above n (below n + 1). The result stays in f64's normal range for the inputs here.
#[cfg(test)]
fn round_scaled(n: u128, e: i32, sticky: bool) -> f64 {
    let bits = 128 - n.leading_zeros() as i32;
    let drop = (bits - 53).max(0);
    let (mut q, e) = if drop > 0 {
        let q = n >> drop;
        let rem = n & ((1u128 << drop) - 1);
        let half = 1u128 << (drop - 1);
        let up = rem > half || (rem == half && (sticky || q & 1 == 1));
        (q + up as u128, e + drop)
    } else {
        assert!(!sticky, "sticky without dropped bits");
        (n, e)
    };
    if q == 1u128 << 53 {
        q >>= 1;
        return q as f64 * crate::dtype::pow2(e + 1);
    }
    q as f64 * crate::dtype::pow2(e)
}

/// floor(sqrt(n)) for n < 2^108.
#[cfg(test)]
fn isqrt(n: u128) -> u128 {
    let mut r = (n as f64).sqrt() as u128;
    while r * r > n {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks |x|^3 and |x|^1.5 of the f32 values with these bit patterns (finite, sign clear)
    /// against `exact_check`, on the scalar code and (where this CPU has AVX2 + FMA) on the SIMD
    /// kernel; returns the number of wrong results, printing the first few.
    pub(crate) fn mismatches(bits: &[u32]) -> u64 {
        let xs: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let mut simd = [vec![f64::NAN; xs.len()], vec![f64::NAN; xs.len()]];
        #[cfg(target_arch = "x86_64")]
        if crate::simd::fma_available() {
            // SAFETY: fma_available() checked AVX2, F16C and FMA.
            unsafe {
                crate::simd::abs_pow_into::<f32, false>(&xs, &mut simd[0]);
                crate::simd::abs_pow_into::<f32, true>(&xs, &mut simd[1]);
            }
        }
        let has_simd = simd_here();
        let mut bad = 0u64;
        for (i, &x) in xs.iter().enumerate() {
            for (h, (p3, k)) in [(true, AbsPow::Three), (false, AbsPow::ThreeHalves)].into_iter().enumerate() {
                let want = exact_check(x, p3);
                let got = k.of(x as f64);
                let v = if has_simd { simd[h][i] } else { got };
                if got.to_bits() != want.to_bits() || v.to_bits() != want.to_bits() {
                    if bad < 5 {
                        eprintln!("{k:?} of {x:e} ({:#010x}): exact {want:e}, scalar {got:e}, simd {v:e}", x.to_bits());
                    }
                    bad += 1;
                }
            }
        }
        bad
    }

    fn simd_here() -> bool {
        #[cfg(target_arch = "x86_64")]
        return crate::simd::fma_available();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Every finite non-negative f32 (2,139,095,040 values; bf16 and f16 widen to a subset), all
    /// threads. Run by the nightly workflow:
    /// cargo test --release -p clip-parity-core -- --ignored exhaustive_f32 --nocapture
    #[test]
    #[ignore = "every f32: about a minute per core-billion values; nightly"]
    fn exhaustive_f32() {
        use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
        const END: u32 = 0x7f80_0000;
        const BLOCK: u32 = 1 << 20;
        let next = AtomicU32::new(0);
        let (bad, done) = (AtomicU64::new(0), AtomicU64::new(0));
        let t = std::time::Instant::now();
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut bits = Vec::with_capacity(4096);
                    loop {
                        let lo = next.fetch_add(BLOCK, Ordering::Relaxed);
                        if lo >= END {
                            break;
                        }
                        let hi = lo.saturating_add(BLOCK).min(END);
                        let mut b = lo;
                        while b < hi {
                            let e = hi.min(b + 4096);
                            bits.clear();
                            bits.extend(b..e);
                            bad.fetch_add(mismatches(&bits), Ordering::Relaxed);
                            b = e;
                        }
                        done.fetch_add((hi - lo) as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        let (bad, done) = (bad.into_inner(), done.into_inner());
        eprintln!(
            "exhaustive_f32: {done} values, p = 3 and 1.5, scalar and SIMD (fma: {}): {bad} wrong, {:.1} s on {threads} threads",
            simd_here(),
            t.elapsed().as_secs_f64()
        );
        assert_eq!(done, END as u64);
        assert_eq!(bad, 0);
    }

    /// The sampled form of `exhaustive_f32`, in every cargo test: about 2.4 million values, every
    /// 1021st f32 (every binade, about 0.24% of them glibc's pow misrounds for p = 3) plus the edges:
    /// the smallest subnormals, the subnormal/normal boundary, around 1, the largest finite values,
    /// and exact p = 3 ties (M^3 of 54 bits: odd M in [2^17.67, 2^18), at two scales).
    #[test]
    fn sampled_f32_are_correctly_rounded() {
        let mut bits: Vec<u32> = (0..0x7f80_0000u32).step_by(1021).collect();
        bits.extend(0..20_000);
        bits.extend(0x007f_0000..0x0081_0000);
        bits.extend(0x3f7f_0000..0x3f81_0000);
        bits.extend(0x7f7f_0000..0x7f80_0000);
        let mut ties = 0;
        for m in (208_065u32..262_144).step_by(2) {
            let c = (m as u128).pow(3);
            if 128 - c.leading_zeros() == 54 {
                ties += 1;
                bits.push((m as f32).to_bits());
                bits.push((m as f32 * 2f32.powi(-60)).to_bits());
            }
        }
        assert!(ties > 20_000, "{ties} ties");
        let n = bits.len();
        let bad: u64 = bits.chunks(4096).map(mismatches).sum();
        assert_eq!(bad, 0, "{bad} of {n} values (x 2 exponents) are not correctly rounded");
    }

    #[test]
    fn exact_check_by_hand() {
        assert_eq!(exact_check(2.0, true), 8.0);
        assert_eq!(exact_check(4.0, false), 8.0);
        assert_eq!(exact_check(0.25, false), 0.125);
        assert_eq!(exact_check(2.0, false), 2f64.sqrt() * 2.0);
        assert_eq!(exact_check(f32::from_bits(1), true), crate::dtype::pow2(-447));
        assert_eq!(exact_check(0.0, false), 0.0);
        // (1 + 2^-23)^3 = 1 + 3*2^-23 + 3*2^-46 + 2^-69: the last term is below half an ulp at 1 (2^-53)
        let x = 1.0 + f32::EPSILON;
        assert_eq!(exact_check(x, true), 1.0 + 3.0 * 2f64.powi(-23) + 3.0 * 2f64.powi(-46));
        // a tie: 208065^3 has 54 bits and is odd, so it lies halfway between two doubles; to even
        let c = 208_065u128.pow(3);
        assert_eq!(128 - c.leading_zeros(), 54);
        let (lo, hi) = ((c >> 1 << 1) as f64, ((c >> 1 << 1) + 2) as f64);
        let even = if (c >> 1) & 1 == 0 { lo } else { hi };
        assert_eq!(exact_check(208_065.0, true), even);
    }

    #[test]
    fn special_values() {
        for k in [AbsPow::new(1.5), AbsPow::new(3.0), AbsPow::new(0.5), AbsPow::new(2.0), AbsPow::new(1.0)] {
            assert_eq!(k.of(0.0).to_bits(), 0);
            assert_eq!(k.of(-0.0).to_bits(), 0);
            assert_eq!(k.of(f64::INFINITY), f64::INFINITY);
            assert_eq!(k.of(f64::NEG_INFINITY), f64::INFINITY);
            assert!(k.of(f64::NAN).is_nan());
            assert_eq!(k.of(-1.0), 1.0);
        }
        assert_eq!(AbsPow::new(0.5).of(2.25), 1.5);
        assert_eq!(AbsPow::new(7.25), AbsPow::Other(7.25));
        // CORE-MATH's pow is correctly rounded: 3^0.5 against the correctly rounded sqrt
        assert_eq!(AbsPow::new(0.5).of(3.0), 3f64.sqrt());
        assert_eq!(AbsPow::new(0.5).of(-3.0), 3f64.sqrt());
    }
}
