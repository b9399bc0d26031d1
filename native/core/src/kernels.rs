//! Reduction and elementwise kernels. Every reduction uses a fixed lane layout, so results are
//! deterministic and identical whichever instruction set runs them (no FMA contraction, no
//! reassociation by the compiler). On x86_64 each kernel is compiled twice, for the baseline and
//! for AVX2, and picked at run time.

use crate::abspow::AbsPow;
use crate::dtype::Elem;
pub use crate::path::KernelPath;
use crate::path::multiversion;

/// Lanes of the f64 sums: element i is added to lane i % L; lanes are combined by a fixed tree.
const L: usize = 32;

#[inline(always)]
fn tree_sum(a: [f64; L]) -> f64 {
    let mut v = a;
    let mut n = L;
    while n > 1 {
        n /= 2;
        for j in 0..n {
            v[j] += v[j + n];
        }
    }
    v[0]
}

#[inline(always)]
fn lanes_generic<T: Elem, const ABS: bool>(xs: &[T]) -> [f64; L] {
    let mut acc = [0f64; L];
    let mut it = xs.chunks_exact(L);
    for c in &mut it {
        for j in 0..L {
            let v = c[j].to_f32() as f64;
            acc[j] += if ABS { v.abs() } else { v * v };
        }
    }
    for (j, &x) in it.remainder().iter().enumerate() {
        let v = x.to_f32() as f64;
        acc[j] += if ABS { v.abs() } else { v * v };
    }
    acc
}

/// sum of x^2 in f64 (x widened exactly); deterministic lane layout on every instruction set.
pub fn sum_sq<T: Elem>(xs: &[T]) -> f64 {
    sum_sq_with(KernelPath::detect(), xs)
}

/// `sum_sq` on the given kernel path (same result on every path).
pub fn sum_sq_with<T: Elem>(path: KernelPath, xs: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() {
        // SAFETY: path.is_simd() is only true from KernelPath::detect on a CPU with AVX2 and F16C.
        return tree_sum(unsafe { crate::simd::sum_sq_lanes(xs) });
    }
    let _ = path;
    tree_sum(lanes_generic::<T, false>(xs))
}

/// sum of |x| in f64.
pub fn sum_abs<T: Elem>(xs: &[T]) -> f64 {
    sum_abs_with(KernelPath::detect(), xs)
}

/// `sum_abs` on the given kernel path (same result on every path).
pub fn sum_abs_with<T: Elem>(path: KernelPath, xs: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() {
        // SAFETY: path.is_simd() is only true from KernelPath::detect on a CPU with AVX2 and F16C.
        return tree_sum(unsafe { crate::simd::sum_abs_lanes(xs) });
    }
    let _ = path;
    tree_sum(lanes_generic::<T, true>(xs))
}

/// sum of |x|^p in f64 for general p, each |x|^p correctly rounded (abspow.rs): computed per element
/// (four lanes at a time for p = 3 and 1.5), or for a large 16-bit tensor with p other than those
/// looked up in a table of the same values, so the sum has the same bits either way.
pub fn sum_pow<T: Elem>(xs: &[T], p: f64) -> f64 {
    sum_pow_with(KernelPath::detect(), xs, p)
}

/// `sum_pow` on the given kernel path (same result on every path).
pub fn sum_pow_with<T: Elem>(path: KernelPath, xs: &[T], p: f64) -> f64 {
    let k = AbsPow::new(p);
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() && matches!(k, AbsPow::Three | AbsPow::ThreeHalves) && crate::simd::fma_available() {
        // SAFETY: fma_available() checked AVX2, F16C and FMA.
        return tree_sum(unsafe {
            if k == AbsPow::Three {
                crate::simd::sum_pow_lanes::<T, false>(xs)
            } else {
                crate::simd::sum_pow_lanes::<T, true>(xs)
            }
        });
    }
    let _ = path;
    if matches!(k, AbsPow::Other(_)) && std::mem::size_of::<T>() == 2 && xs.len() >= crate::exact::TABLE_MIN_LEN {
        let table = crate::exact::AbsPowTable16::new::<T>(p);
        return sum_lanes_of(xs, |x| table.abs_pow(x));
    }
    sum_lanes_of(xs, |x| k.of(x.to_f32() as f64))
}

/// f(x) summed in f64 over L lanes, then the lanes by `tree_sum` (the order every sum here uses).
#[inline(always)]
fn sum_lanes_of<T: Elem>(xs: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut acc = [0f64; L];
    let mut it = xs.chunks_exact(L);
    for c in &mut it {
        for j in 0..L {
            acc[j] += f(c[j]);
        }
    }
    for (j, &x) in it.remainder().iter().enumerate() {
        acc[j] += f(x);
    }
    tree_sum(acc)
}

/// sum |x|^p accumulated in f64 (p == 2: x*x, p == 1: |x|, else the correctly rounded |x|^p of
/// abspow.rs). NaN/Inf propagate.
pub fn sum_abs_pow<T: Elem>(xs: &[T], p: f64) -> f64 {
    if p == 2.0 {
        sum_sq(xs)
    } else if p == 1.0 {
        sum_abs(xs)
    } else {
        sum_pow(xs, p)
    }
}

multiversion! {
    /// max over the absolute-value bit patterns (for non-NaN values this orders by magnitude;
    /// any NaN pattern is above the infinity pattern).
    pub fn max_abs_bits<T: Elem>(xs: &[T]) -> u32 {
        let mut acc = [0u32; L];
        let mut it = xs.chunks_exact(L);
        for c in &mut it {
            for j in 0..L {
                acc[j] = acc[j].max(c[j].bits() & T::ABS_MASK);
            }
        }
        for (j, &x) in it.remainder().iter().enumerate() {
            acc[j] = acc[j].max(x.bits() & T::ABS_MASK);
        }
        acc.into_iter().max().unwrap_or(0)
    }
}

/// max |x| as f64; NaN if any NaN; 0 for an empty tensor.
pub fn max_abs<T: Elem>(xs: &[T]) -> f64 {
    let b = max_abs_bits(xs);
    if b > T::EXP_MASK {
        f64::NAN
    } else {
        T::from_bits(b).to_f64()
    }
}

multiversion! {
    pub fn nonfinite_count<T: Elem>(xs: &[T]) -> u64 {
        let mut acc = [0u64; L];
        let mut it = xs.chunks_exact(L);
        for c in &mut it {
            for j in 0..L {
                acc[j] += ((c[j].bits() & T::EXP_MASK) == T::EXP_MASK) as u64;
            }
        }
        for (j, &x) in it.remainder().iter().enumerate() {
            acc[j] += ((x.bits() & T::EXP_MASK) == T::EXP_MASK) as u64;
        }
        acc.iter().sum()
    }
}

/// The benchmark baseline: one plain read of every byte of the tensor (wrapping sum of the raw
/// little-endian u32 words; a trailing partial word is zero-padded). AVX2 when available.
pub fn read_pass<T: Elem>(xs: &[T]) -> u32 {
    read_pass_with(KernelPath::detect(), xs)
}

/// `read_pass` on the given kernel path (same result on every path).
pub fn read_pass_with<T: Elem>(path: KernelPath, xs: &[T]) -> u32 {
    // SAFETY: Elem is sealed: f32/bf16/f16 are plain old data without padding.
    let bytes = unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const u8, std::mem::size_of_val(xs)) };
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() {
        // SAFETY: path.is_simd() is only true from KernelPath::detect on a CPU with AVX2.
        return unsafe { crate::simd::read_words(bytes) };
    }
    let _ = path;
    read_words_portable(bytes)
}

fn read_words_portable(bytes: &[u8]) -> u32 {
    let mut acc = [0u32; 16];
    let mut it = bytes.chunks_exact(64);
    for c in &mut it {
        for j in 0..16 {
            acc[j] = acc[j].wrapping_add(u32::from_le_bytes(c[4 * j..4 * j + 4].try_into().unwrap()));
        }
    }
    let mut s = acc.iter().fold(0u32, |a, &b| a.wrapping_add(b));
    for c in it.remainder().chunks(4) {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        s = s.wrapping_add(u32::from_le_bytes(w));
    }
    s
}

/// The f32 factor a clip coefficient scales by. A NaN coefficient becomes one NaN: a NaN computed in
/// JavaScript reaches the addon with whatever sign and payload the engine's JIT state gave it (x86's
/// default NaN from arithmetic, +NaN from a constant), and x * NaN returns that NaN, so without this
/// the scaled bytes, and a tensor hash of them, would differ from one run of the same cell to the next.
pub fn scale_factor(coef: f64) -> f32 {
    if coef.is_nan() {
        f32::NAN
    } else {
        coef as f32
    }
}

multiversion! {
    /// x = round_T(f32(x) * coef), round to nearest even.
    pub fn scale<T: Elem>(xs: &mut [T], coef: f32) -> () {
        for x in xs.iter_mut() {
            *x = T::from_f32(x.to_f32() * coef);
        }
    }
}

/// Bitwise equality where any NaN equals any NaN.
#[inline(always)]
pub fn same<T: Elem>(a: T, b: T) -> bool {
    a.bits() == b.bits() || (a.is_nan() && b.is_nan())
}

multiversion! {
    fn all_bits_equal<T: Elem>(a: &[T], b: &[T]) -> bool {
        let mut d = 0u32;
        for (x, y) in a.iter().zip(b) {
            d |= x.bits() ^ y.bits();
        }
        d == 0
    }
}

/// First index where a and b differ (bitwise; any NaN equals any NaN). a.len() == b.len().
pub fn first_difference<T: Elem>(a: &[T], b: &[T]) -> Option<usize> {
    const C: usize = 1024;
    for (ci, (ca, cb)) in a.chunks(C).zip(b.chunks(C)).enumerate() {
        if all_bits_equal(ca, cb) {
            continue;
        }
        if let Some(j) = ca.iter().zip(cb).position(|(&x, &y)| !same(x, y)) {
            return Some(ci * C + j);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_pow_is_bitwise_the_same_per_element_on_every_path_and_through_the_16_bit_table() {
        fn check<T: Elem>() {
            let mut s = 0x9e3779b97f4a7c15u64;
            let xs: Vec<T> = (0..100_003)
                .map(|_| {
                    s = crate::genq::splitmix64(s);
                    // every class: subnormal, huge, inf, NaN
                    T::from_bits(if std::mem::size_of::<T>() == 4 { (s >> 32) as u32 } else { (s & 0xffff) as u32 })
                })
                .collect();
            let finite: Vec<T> = xs.iter().copied().filter(|x| !x.is_nonfinite()).collect();
            for p in [1.5, 3.0, 0.25] {
                let direct = |v: &[T]| sum_lanes_of(v, |x| AbsPow::new(p).of(x.to_f32() as f64));
                for path in KernelPath::all_here() {
                    assert_eq!(sum_pow_with(path, &finite, p).to_bits(), direct(&finite).to_bits(), "p = {p} {path:?}");
                    let odd = &finite[..finite.len() - 5]; // a remainder past the 32 lanes
                    assert_eq!(sum_pow_with(path, odd, p).to_bits(), direct(odd).to_bits(), "p = {p} {path:?}");
                    assert!(sum_pow_with(path, &xs, p).is_nan() && direct(&xs).is_nan(), "p = {p}: NaN propagates either way");
                }
            }
        }
        check::<f32>();
        check::<half::bf16>();
        check::<half::f16>();
    }
    use half::{bf16, f16};

    #[test]
    fn reductions_small() {
        let xs = [1.0f32, -2.0, 3.0, f32::from_bits(1)];
        assert_eq!(sum_abs_pow(&xs, 2.0), 14.0 + (f32::from_bits(1) as f64).powi(2));
        assert_eq!(sum_abs_pow(&xs[..3], 1.0), 6.0);
        assert!((sum_abs_pow(&xs[..3], 3.0) - 36.0).abs() < 1e-12);
        assert_eq!(max_abs(&xs), 3.0);
        assert_eq!(max_abs::<f32>(&[]), 0.0);
        assert!(max_abs(&[1.0f32, f32::NAN, f32::INFINITY]).is_nan());
        assert_eq!(max_abs(&[1.0f32, f32::NEG_INFINITY]), f64::INFINITY);
        assert_eq!(nonfinite_count(&[1.0f32, f32::NAN, f32::INFINITY, -f32::INFINITY]), 3);
        let h: Vec<f16> = [1.0f32, -65504.0, f32::NAN].iter().map(|&x| f16::from_f32(x)).collect();
        assert!(max_abs(&h).is_nan());
        assert_eq!(max_abs(&h[..2]), 65504.0);
        assert_eq!(nonfinite_count(&h), 1);
        let b: Vec<bf16> = [0.5f32, -4.0].iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(sum_abs_pow(&b, 2.0), 16.25);
        assert_eq!(read_pass(&[1.0f32, 2.0]), 1.0f32.to_bits().wrapping_add(2.0f32.to_bits()));
        let h: Vec<bf16> = (0..1001u16).map(bf16::from_bits).collect();
        let want = (0..1001u32).step_by(2).fold(0u32, |a, i| a.wrapping_add(i | if i + 1 < 1001 { (i + 1) << 16 } else { 0 }));
        assert_eq!(read_pass(&h), want);
        let f: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        assert_eq!(read_pass(&f), f.iter().fold(0u32, |a, x| a.wrapping_add(x.to_bits())));
        assert_eq!(read_pass_with(KernelPath::PORTABLE, &h), want);
        assert_eq!(read_pass_with(KernelPath::detect(), &h), want);
    }

    #[test]
    fn sum_is_deterministic_and_lane_fixed() {
        // the result must not depend on the instruction set: compare with a scalar model of the lanes
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32).sin() * 1e3).collect();
        let mut acc = [0f64; L];
        for (i, &x) in xs.iter().enumerate() {
            acc[i % L] += (x as f64) * (x as f64);
        }
        assert_eq!(sum_sq(&xs).to_bits(), tree_sum(acc).to_bits());
    }

    #[test]
    fn a_nan_coefficient_scales_alike_whatever_its_sign_and_payload() {
        let nans = [f64::NAN, -f64::NAN, f64::from_bits(0xfff8_0000_0000_0001), f64::from_bits(0x7ff0_0000_0000_0001)];
        let scaled: Vec<Vec<u32>> = nans
            .iter()
            .map(|&c| {
                let mut xs = vec![1.5f32, -0.0, 0.0, f32::INFINITY];
                scale(&mut xs, scale_factor(c));
                xs.iter().map(|x| x.to_bits()).collect()
            })
            .collect();
        for s in &scaled {
            assert_eq!(s, &scaled[0]);
        }
        assert_eq!(scaled[0][0], f32::NAN.to_bits());
        assert_eq!(scale_factor(0.5), 0.5);
    }

    #[test]
    fn scale_rounding() {
        let mut b = vec![bf16::from_f32(1.0 + 2f32.powi(-7)); 3];
        // (1 + 2^-7) * 1.5 = 1.5 + 1.5*2^-7 = 1.51171875 -> bf16 neighbours 1.5078125, 1.515625 ; tie? no:
        scale(&mut b, 1.5);
        assert_eq!(b[0].to_f32(), bf16::from_f32(1.5 + 1.5 * 2f32.powi(-7)).to_f32());
        // tie cases: 1.0 * (1 + 2^-8) -> tie -> even (1.0)
        let mut b = vec![bf16::from_f32(1.0)];
        scale(&mut b, 1.0 + 2f32.powi(-8));
        assert_eq!(b[0].to_bits(), 0x3f80);
        let mut b = vec![bf16::from_f32(1.0 + 2f32.powi(-7))];
        scale(&mut b, 1.0 + 2f32.powi(-8)); // 1 + 2^-7 + 2^-8 + 2^-15: above tie -> up
        assert_eq!(b[0].to_bits(), 0x3f82);
        let mut h = vec![f16::from_f32(1.0)];
        scale(&mut h, 1.0 + 2f32.powi(-11));
        assert_eq!(h[0].to_bits(), 0x3c00);
        let mut h = vec![f16::from_f32(1.0 + 2f32.powi(-10))];
        scale(&mut h, 1.0 + 2f32.powi(-11)); // 1 + 2^-10 + 2^-11 + 2^-21: above the tie -> up
        assert_eq!(h[0].to_bits(), 0x3c02);
        let mut h = vec![f16::from_f32(3.0)];
        scale(&mut h, 0.5 + 2f32.powi(-12)); // 1.5 + 3*2^-12 = 1.5 + 1.5*2^-11 -> above tie -> up
        assert_eq!(h[0].to_bits(), f16::from_f32(1.5 + 2f32.powi(-10)).to_bits());
        let mut f = vec![f32::NAN, 2.0, f32::INFINITY];
        scale(&mut f, 0.5);
        assert!(f[0].is_nan());
        assert_eq!(f[1], 1.0);
        assert_eq!(f[2], f32::INFINITY);
        let mut b = vec![bf16::from_f32(f32::NAN)];
        scale(&mut b, 0.0);
        assert!(b[0].is_nan());
    }

    #[test]
    fn differences() {
        let a = vec![1.0f32; 5000];
        let mut b = a.clone();
        assert_eq!(first_difference(&a, &b), None);
        b[3001] = -1.0;
        b[4000] = 0.0;
        assert_eq!(first_difference(&a, &b), Some(3001));
        let z = [0.0f32];
        assert_eq!(first_difference(&z, &[-0.0f32]), Some(0));
        let n1 = [f32::NAN];
        let n2 = [f32::from_bits(0x7fc0_1234)];
        assert_eq!(first_difference(&n1, &n2), None);
    }
}

#[cfg(test)]
mod simd_parity {
    use super::*;
    use crate::exact::exact_sum_abs_pow_with;
    use half::{bf16, f16};

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = crate::genq::splitmix64(s);
                match i % 7 {
                    0 => f32::from_bits(s as u32),                // anything, incl. NaN/Inf/subnormal
                    1 => 0.0,
                    2 => ((s >> 40) as f32 - 8388608.0) * 1e-30, // tiny
                    _ => ((s >> 40) as f32 - 8388608.0) * 2f32.powi(-23),
                }
            })
            .collect()
    }

    fn check<T: Elem>(xs: &[T]) {
        let r = |path: KernelPath| {
            let canon = |x: f64| if x.is_nan() { f64::NAN.to_bits() } else { x.to_bits() };
            (
                canon(sum_sq_with(path, xs)),
                canon(sum_abs_with(path, xs)),
                exact_sum_abs_pow_with(path, xs, 2.0).unwrap(),
                exact_sum_abs_pow_with(path, xs, 1.0).unwrap(),
            )
        };
        let (a, b) = (r(KernelPath::PORTABLE), r(KernelPath::detect()));
        assert_eq!(a, b);
        // and without non-finite values the f64 sums are bitwise equal too
        let fin: Vec<T> = xs.iter().copied().filter(|x| !x.is_nonfinite()).collect();
        let p = (sum_sq_with(KernelPath::PORTABLE, &fin).to_bits(), sum_abs_with(KernelPath::PORTABLE, &fin).to_bits());
        assert_eq!(p, (sum_sq(&fin).to_bits(), sum_abs(&fin).to_bits()));
        // and the exact kernels agree with the general f64 path
        let mut g = crate::exact::ExactF64::new();
        crate::exact::add_general(&mut g, &fin, 2.0).unwrap();
        assert_eq!(g.finish(), b.2);
    }

    #[test]
    fn simd_equals_portable() {
        for n in [0usize, 1, 15, 16, 17, 255, 256, 257, 1000, 100_003] {
            let d = data(n, n as u64 + 1);
            check(&d);
            let b: Vec<bf16> = d.iter().map(|&x| bf16::from_f32(x)).collect();
            check(&b);
            let h: Vec<f16> = d.iter().map(|&x| f16::from_f32(x)).collect();
            check(&h);
        }
        // data the SIMD fold path accepts (finite, limited range per block) and its edges
        // the generator's f32 values of (seed 3, step 1, "w", exp 0): q * 2^-23, exact in f32
        let key = crate::genq::key(3, 1, "w");
        let unit = crate::dtype::pow2(-23) as f32;
        let g = (0..300_000u64).map(|i| crate::genq::q(key, 24, i) as f32 * unit).collect::<Vec<f32>>();
        check(&g);
        check(&g.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>());
        check(&g.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>());
        check(&vec![f32::from_bits(0x3fff_ffff); 5000]);
        check(&vec![f32::MAX; 5000]);
        check(&vec![f32::from_bits(0x0080_0001); 5000]);
        check(&vec![f32::from_bits(0x0000_0001); 5000]);
        let mut st = 99u64;
        for span in [10, 18, 20, 22, 30, 60] {
            let v: Vec<f32> = (0..20_000)
                .map(|_| {
                    st = crate::genq::splitmix64(st);
                    let e = (st % span) as i32;
                    let m = 1.0 + ((st >> 40) as f32) * 2f32.powi(-24);
                    if st & 1 == 1 { -m * 2f32.powi(-e) } else { m * 2f32.powi(-e) }
                })
                .collect();
            check(&v);
            let big: Vec<f32> = v.iter().map(|x| x * 2f32.powi(100)).collect();
            check(&big);
            let small: Vec<f32> = v.iter().map(|x| x * 2f32.powi(-100)).collect();
            check(&small);
        }
        // the edges of the unchecked fold range: kmax - 20 (p = 2) and kmax - 65 (p = 1)
        for d in [19, 20, 21, 22, 64, 65, 66, 67] {
            let mut v = vec![f32::from_bits(0x3fff_ffff); 1024];
            for (i, x) in v.iter_mut().enumerate().skip(1) {
                *x = f32::from_bits(((0x7f - d) << 23) | (0x7f_ffff - i as u32)) * if i % 2 == 0 { 1.0 } else { -1.0 };
            }
            check(&v);
        }
        // a block mixing the largest and smallest magnitudes
        let mut d = vec![f32::MAX, f32::from_bits(1), 1.0, 1e-20, 1e20, -3.5e-38];
        d.resize(256, 2.5e-10);
        check(&d);
    }
}
