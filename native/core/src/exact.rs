//! Exact, order-independent accumulation of sums of |x|^p.
//!
//! The result is a non-negative integer N (little-endian u64 limbs) with value N * 2^-1074.
//!
//! Fast path (p = 1 or 2; the inputs are f32, or bf16/f16 widened exactly to f32): an f32 x is
//! M * 2^E with M < 2^24; x^2 = M^2 * 2^(2E) with M^2 < 2^48 and |x| = M * 2^E. The integer M^2
//! (or M) is added into a u64 bin selected by the biased exponent field of x. Several interleaved
//! bin sets break the load-add-store dependency when consecutive elements share an exponent; bins
//! are flushed into u128 master bins before they can overflow (every 2^16 elements). The bins are
//! combined into the big integer at the end.
//!
//! General p: y = f64(|x|^p), the correctly rounded value of the exact |x|^p (abspow.rs, SPEC
//! section 6: the same bits on every CPU), is split as M * 2^E with M < 2^53 and added into a u128
//! bin per f64 exponent field (2^75 additions before overflow).

use crate::abspow::AbsPow;
use crate::bail;
pub use crate::biguint::BigUint;
use crate::dtype::Elem;
use crate::error::Result;
use crate::path::KernelPath;

const SETS: usize = 8;
const FLUSH: usize = 1 << 16;

#[inline(always)]
fn f32bits<T: Elem>(x: T) -> u32 {
    x.to_f32().to_bits()
}

/// u128 bins, one per f32 exponent field.
type MasterBins = [u128; 256];
/// SETS interleaved sets of u64 bins, one per f32 exponent field.
type SetBins = [[u64; 256]; SETS];

/// Scalar exact binning for p = 1 or 2 (the portable path, and the fallback of the SIMD one).
struct ScalarBins {
    p2: bool,
    /// Allocated on first use (the SIMD path rarely needs it).
    state: Option<Box<(MasterBins, SetBins)>>,
    pending: usize,
}

impl ScalarBins {
    #[inline(always)]
    pub(crate) fn add_chunk<T: Elem, const P2: bool>(bins: &mut SetBins, c: &[T]) {
        let mut it = c.chunks_exact(SETS);
        for g in &mut it {
            for s in 0..SETS {
                let b = f32bits(g[s]);
                let k = ((b >> 23) & 0xff) as usize;
                let m = ((b & 0x7f_ffff) | (((k != 0) as u32) << 23)) as u64;
                bins[s][k] = bins[s][k].wrapping_add(if P2 { m * m } else { m });
            }
        }
        for (j, &x) in it.remainder().iter().enumerate() {
            let b = f32bits(x);
            let k = ((b >> 23) & 0xff) as usize;
            let m = ((b & 0x7f_ffff) | (((k != 0) as u32) << 23)) as u64;
            bins[j][k] = bins[j][k].wrapping_add(if P2 { m * m } else { m });
        }
    }
    fn flush(&mut self) {
        self.pending = 0;
        let Some(st) = self.state.as_mut() else { return };
        let (master, bins) = &mut **st;
        for k in 0..255 {
            let mut t: u128 = 0;
            for set in bins.iter_mut() {
                t += set[k] as u128;
                set[k] = 0;
            }
            master[k] += t;
        }
        for set in bins.iter_mut() {
            set[255] = 0; // non-finite: skipped
        }
    }
    /// Adds xs; the u64 bins are flushed before FLUSH elements have gone into them.
    fn add<T: Elem>(&mut self, xs: &[T]) {
        let mut rest = xs;
        while !rest.is_empty() {
            let k = rest.len().min(FLUSH - self.pending);
            let (c, r) = rest.split_at(k);
            let st = self.state.get_or_insert_with(|| Box::new(([0u128; 256], [[0u64; 256]; SETS])));
            if self.p2 {
                bins_p2(&mut st.1, c)
            } else {
                bins_p1(&mut st.1, c)
            }
            self.pending += k;
            if self.pending == FLUSH {
                self.flush();
            }
            rest = r;
        }
    }
    fn finish_into(&mut self, n: &mut BigUint) {
        self.flush();
        let Some(st) = self.state.as_ref() else { return };
        for k in 0..255i32 {
            let e = k.max(1) - 150; // x = M * 2^e
            let shift = if self.p2 { 2 * e + 1074 } else { e + 1074 };
            n.add_shifted(st.0[k as usize], shift as u32);
        }
    }
}

/// Exact accumulator for p = 1 or p = 2 over f32-representable values.
pub struct ExactF32 {
    p2: bool,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    path: KernelPath,
    scalar: ScalarBins,
    #[cfg(target_arch = "x86_64")]
    fold: crate::simd::FoldBins,
}

impl ExactF32 {
    /// An accumulator on the fastest kernel path of this CPU.
    pub fn new(p2: bool) -> ExactF32 {
        ExactF32::with_path(p2, KernelPath::detect())
    }
    /// An accumulator on the given kernel path (the result is the same on every path).
    pub fn with_path(p2: bool, path: KernelPath) -> ExactF32 {
        ExactF32 {
            p2,
            path,
            scalar: ScalarBins { p2, state: None, pending: 0 },
            #[cfg(target_arch = "x86_64")]
            fold: Default::default(),
        }
    }
    pub fn add_slice<T: Elem>(&mut self, xs: &[T]) {
        #[cfg(target_arch = "x86_64")]
        if self.path.is_simd() {
            let scalar = &mut self.scalar;
            let mut slow = |b: &[T]| scalar.add(b);
            // SAFETY: a SIMD KernelPath comes only from KernelPath::detect on a CPU with AVX2 and F16C.
            unsafe {
                if self.p2 {
                    crate::simd::exact_into::<T, true>(xs, &mut self.fold, &mut slow)
                } else {
                    crate::simd::exact_into::<T, false>(xs, &mut self.fold, &mut slow)
                }
            }
            return;
        }
        self.scalar.add(xs);
    }
    pub fn finish(&mut self) -> BigUint {
        let mut n = BigUint::zero();
        self.scalar.finish_into(&mut n);
        #[cfg(target_arch = "x86_64")]
        self.fold.finish_into(&mut n);
        n.normalized()
    }
}

crate::path::multiversion! {
    fn bins_p2<T: Elem>(bins: &mut SetBins, c: &[T]) -> () {
        ScalarBins::add_chunk::<T, true>(bins, c)
    }
}
crate::path::multiversion! {
    fn bins_p1<T: Elem>(bins: &mut SetBins, c: &[T]) -> () {
        ScalarBins::add_chunk::<T, false>(bins, c)
    }
}

/// Exact accumulator of arbitrary finite non-negative f64 values.
pub struct ExactF64 {
    master: Vec<u128>,
}

impl Default for ExactF64 {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactF64 {
    pub fn new() -> ExactF64 {
        ExactF64 { master: vec![0u128; 2048] }
    }
    /// Adds |y| (y must be finite).
    #[inline(always)]
    pub fn add(&mut self, y: f64) {
        let b = y.to_bits();
        let k = ((b >> 52) & 0x7ff) as usize;
        let m = (b & ((1u64 << 52) - 1)) | (((k != 0) as u64) << 52);
        self.master[k] += m as u128;
    }
    pub fn finish(&self) -> BigUint {
        let mut n = BigUint::zero();
        for k in 0..2047i32 {
            // y = M * 2^(max(k,1) - 1075) -> units of 2^-1074: shift = max(k,1) - 1
            n.add_shifted(self.master[k as usize], (k.max(1) - 1) as u32);
        }
        n.normalized()
    }
}

/// Exact sum of f64(|x|^p) over the finite elements of xs. p must be finite and > 0.
pub fn exact_sum_abs_pow<T: Elem>(xs: &[T], p: f64) -> Result<BigUint> {
    exact_sum_abs_pow_with(KernelPath::detect(), xs, p)
}

/// `exact_sum_abs_pow` on the given kernel path (the result is the same on every path).
pub fn exact_sum_abs_pow_with<T: Elem>(path: KernelPath, xs: &[T], p: f64) -> Result<BigUint> {
    if p == 2.0 || p == 1.0 {
        let mut acc = ExactF32::with_path(p == 2.0, path);
        acc.add_slice(xs);
        return Ok(acc.finish());
    }
    let mut acc = ExactF64::new();
    if std::mem::size_of::<T>() == 2 && xs.len() >= TABLE_MIN_LEN {
        add_general_table(&mut acc, xs, &AbsPowTable16::new::<T>(p), p)?;
    } else {
        add_general_with(path, &mut acc, xs, p)?;
    }
    Ok(acc.finish())
}

/// From this many elements on, a 16-bit tensor's general-p sum builds an `AbsPowTable16` (2^15
/// values of |x|^p) instead of computing |x|^p per element.
pub const TABLE_MIN_LEN: usize = 1 << 16;

/// f64(|x|^p) for every magnitude of a 16-bit type (2^15 entries, indexed by the bits without the
/// sign). The general-p exact sum of a bf16/f16 tensor then costs a lookup per element, with the
/// same bits as the per-element path: both are the correctly rounded |x|^p.
pub struct AbsPowTable16(Vec<f64>);

impl AbsPowTable16 {
    pub fn new<T: Elem>(p: f64) -> AbsPowTable16 {
        assert_eq!(std::mem::size_of::<T>(), 2, "AbsPowTable16 is for 16-bit element types");
        let k = AbsPow::new(p);
        AbsPowTable16((0u32..1 << 15).map(|b| k.of(T::from_bits(b).to_f64())).collect())
    }
    /// f64(|x|^p) (non-finite x too: inf or NaN).
    #[inline(always)]
    pub fn abs_pow<T: Elem>(&self, x: T) -> f64 {
        self.0[(x.bits() & 0x7fff) as usize]
    }
}

/// `add_general` through a table built for the same p and element type.
pub fn add_general_table<T: Elem>(acc: &mut ExactF64, xs: &[T], table: &AbsPowTable16, p: f64) -> Result<()> {
    for &x in xs {
        if x.is_nonfinite() {
            continue;
        }
        let y = table.abs_pow(x);
        if !y.is_finite() {
            bail!("exact sum: |x|^p overflows f64 for the finite element x = {} with p = {p}", x.to_f64());
        }
        acc.add(y);
    }
    Ok(())
}

/// Adds f64(|x|^p) of every finite x into a general accumulator.
pub fn add_general<T: Elem>(acc: &mut ExactF64, xs: &[T], p: f64) -> Result<()> {
    add_general_with(KernelPath::detect(), acc, xs, p)
}

/// `add_general` on the given kernel path (the same values on every path: each is correctly rounded).
pub fn add_general_with<T: Elem>(path: KernelPath, acc: &mut ExactF64, xs: &[T], p: f64) -> Result<()> {
    let k = AbsPow::new(p);
    #[cfg(target_arch = "x86_64")]
    if path.is_simd() && matches!(k, AbsPow::Three | AbsPow::ThreeHalves) && crate::simd::fma_available() {
        let mut ys = [0f64; 512];
        for c in xs.chunks(ys.len()) {
            let ys = &mut ys[..c.len()];
            // SAFETY: fma_available() checked AVX2, F16C and FMA.
            unsafe {
                if k == AbsPow::Three {
                    crate::simd::abs_pow_into::<T, false>(c, ys)
                } else {
                    crate::simd::abs_pow_into::<T, true>(c, ys)
                }
            }
            for (&x, &y) in c.iter().zip(ys.iter()) {
                // y is inf or NaN exactly when x is (|x|^3 and |x|^1.5 of a finite f32 are finite)
                if y.is_finite() {
                    acc.add(y);
                } else if !x.is_nonfinite() {
                    bail!("exact sum: |x|^p overflows f64 for the finite element x = {} with p = {p}", x.to_f64());
                }
            }
        }
        return Ok(());
    }
    let _ = path;
    for &x in xs {
        if x.is_nonfinite() {
            continue;
        }
        let y = k.of(x.to_f64());
        if !y.is_finite() {
            bail!("exact sum: |x|^p overflows f64 for the finite element x = {} with p = {p}", x.to_f64());
        }
        acc.add(y);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn general_p_table_matches_the_per_element_path_for_bf16_and_f16() {
        fn check<T: Elem>(seed: u64) {
            let mut s = seed;
            // every magnitude class: zeros, subnormals, normals, the largest finite, plus non-finite skipped
            let xs: Vec<T> = (0..70_000).map(|_| T::from_bits((rng(&mut s) & 0xffff) as u32)).collect();
            for p in [1.5, 3.0, 0.5, 7.25] {
                let mut a = ExactF64::new();
                let mut b = ExactF64::new();
                let direct = add_general(&mut a, &xs, p);
                let table = add_general_table(&mut b, &xs, &AbsPowTable16::new::<T>(p), p);
                assert_eq!(direct.is_ok(), table.is_ok(), "p = {p}");
                if direct.is_ok() {
                    assert_eq!(a.finish(), b.finish(), "p = {p}");
                }
            }
            assert_eq!(exact_sum_abs_pow(&xs, 3.0).unwrap(), {
                let mut a = ExactF64::new();
                add_general(&mut a, &xs, 3.0).unwrap();
                a.finish()
            });
        }
        check::<bf16>(11);
        check::<f16>(12);
    }

    fn rng(s: &mut u64) -> u64 {
        crate::genq::splitmix64({
            *s += 1;
            *s
        })
    }

    /// Slow reference: i128 sum of x^2 / 2^-k scaled integers for values with bounded exponents.
    fn slow_ref(xs: &[f32], p2: bool, min_exp: i32) -> u128 {
        // x = M * 2^E with E >= min_exp ; returns sum in units of 2^(min_exp * (1 or 2))
        let mut s: u128 = 0;
        for &x in xs {
            if !x.is_finite() || x == 0.0 {
                continue;
            }
            let b = x.to_bits();
            let k = ((b >> 23) & 0xff) as i32;
            let m = ((b & 0x7f_ffff) | if k != 0 { 0x80_0000 } else { 0 }) as u128;
            let e = k.max(1) - 150;
            if p2 {
                s += (m * m) << (2 * (e - min_exp));
            } else {
                s += m << (e - min_exp);
            }
        }
        s
    }

    #[test]
    fn small_cases_vs_reference() {
        let mut st = 1u64;
        // values with exponents in [-30, 0]: M*2^E with E >= -53
        let xs: Vec<f32> = (0..10_001)
            .map(|_| {
                let r = rng(&mut st);
                let m = (r >> 40) as i64 - (1 << 23);
                let e = -23 - (r % 8) as i32;
                m as f32 * 2f32.powi(e)
            })
            .collect();
        for p2 in [true, false] {
            // smallest nonzero |x| is 2^-30 = 2^23 * 2^-53: every E >= -53
            let want = slow_ref(&xs, p2, -53);
            let got = exact_sum_abs_pow(&xs, if p2 { 2.0 } else { 1.0 }).unwrap();
            // want is in units of 2^-106 (p=2) or 2^-53 (p=1); got in units of 2^-1074
            let shift = if p2 { 1074 - 106 } else { 1074 - 53 };
            let mut want_big = BigUint::zero();
            want_big.add_shifted(want, shift);
            assert_eq!(got, want_big.normalized(), "p2={p2}");
            // cross-check with the general path
            let mut g = ExactF64::new();
            add_general(&mut g, &xs, if p2 { 2.0 } else { 1.0 }).unwrap();
            assert_eq!(g.finish(), got);
        }
    }

    #[test]
    fn order_independent_and_nonfinite_skipped() {
        let mut st = 5u64;
        let mut xs: Vec<f32> = (0..70_000).map(|_| f32::from_bits(rng(&mut st) as u32)).collect();
        xs.push(f32::INFINITY);
        xs.push(f32::NAN);
        let a = exact_sum_abs_pow(&xs, 2.0).unwrap();
        let mut ys = xs.clone();
        // Fisher-Yates shuffle
        for i in (1..ys.len()).rev() {
            let j = (rng(&mut st) % (i as u64 + 1)) as usize;
            ys.swap(i, j);
        }
        ys.reverse();
        assert_eq!(exact_sum_abs_pow(&ys, 2.0).unwrap(), a);
        let fin: Vec<f32> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        assert_eq!(exact_sum_abs_pow(&fin, 2.0).unwrap(), a);
        // p = 1 and a general p too
        assert_eq!(exact_sum_abs_pow(&ys, 1.0).unwrap(), exact_sum_abs_pow(&xs, 1.0).unwrap());
        let small: Vec<f32> = xs.iter().map(|x| x * 1e-20).collect();
        let mut sh = small.clone();
        sh.reverse();
        assert_eq!(exact_sum_abs_pow(&small, 3.0).unwrap(), exact_sum_abs_pow(&sh, 3.0).unwrap());
    }

    #[test]
    fn hand_values() {
        // 1^2 + 2^2 + 0.5^2 = 5.25 = 21 * 2^-2  -> N = 21 * 2^1072
        let n = exact_sum_abs_pow(&[1.0f32, -2.0, 0.5], 2.0).unwrap();
        let mut want = BigUint::zero();
        want.add_shifted(21, 1072);
        assert_eq!(n, want.normalized());
        assert_eq!(n.to_f64_scaled(), 5.25);
        // smallest subnormal f32, p=1: 2^-149 -> N = 2^925
        let n = exact_sum_abs_pow(&[f32::from_bits(1)], 1.0).unwrap();
        let mut want = BigUint::zero();
        want.add_shifted(1, 925);
        assert_eq!(n, want.normalized());
        // bf16 and f16 go through exact widening
        let b: Vec<bf16> = [1.5f32, -3.0].iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(exact_sum_abs_pow(&b, 2.0).unwrap().to_f64_scaled(), 11.25);
        let h: Vec<f16> = [0.25f32, f32::INFINITY, 2.0].iter().map(|&x| f16::from_f32(x)).collect();
        assert_eq!(exact_sum_abs_pow(&h, 2.0).unwrap().to_f64_scaled(), 4.0625);
        // empty and zeros
        assert!(exact_sum_abs_pow::<f32>(&[], 2.0).unwrap().limbs.is_empty());
        assert!(exact_sum_abs_pow(&[0.0f32, -0.0], 2.0).unwrap().limbs.is_empty());
        // f32::MAX^2 is finite in f64
        let n = exact_sum_abs_pow(&[f32::MAX], 2.0).unwrap();
        assert_eq!(n.to_f64_scaled(), (f32::MAX as f64) * (f32::MAX as f64));
    }

    #[test]
    fn overflow_of_bins_is_flushed() {
        // 300k copies of the largest mantissa in the same exponent bin
        let x = f32::from_bits(0x3fff_ffff);
        let xs = vec![x; 300_000];
        let n = exact_sum_abs_pow(&xs, 2.0).unwrap();
        let m = 0xff_ffffu128;
        let mut want = BigUint::zero();
        want.add_shifted(m * m * 300_000, (2 * (0x7f - 150) + 1074) as u32);
        assert_eq!(n, want.normalized());
    }

    #[test]
    fn decimal_and_rounding() {
        let mut n = BigUint::zero();
        n.add_shifted(1, 64);
        assert_eq!(n.to_decimal(), "18446744073709551616");
        // (2^53 + 1) * 2^-1074 * 2^1074 ... value 2^53+1 rounds to even 2^53
        let mut n = BigUint::zero();
        n.add_shifted((1u128 << 53) + 1, 1074);
        assert_eq!(n.to_f64_scaled(), 9007199254740992.0);
        let mut n = BigUint::zero();
        n.add_shifted((1u128 << 53) + 3, 1074);
        assert_eq!(n.to_f64_scaled(), 9007199254740996.0);
    }
}
