//! Hand-written AVX2 (+F16C) kernels for x86_64. Each one computes exactly what its portable
//! counterpart computes (same lane layout for the f64 sums; the exact sums are exact anyway).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::dtype::{pow2, DType, Elem};

/// Whether the AVX2 + F16C kernels can run on this CPU (cached by std).
#[inline]
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
}

/// Loads 8 elements at p as f32 bit patterns (exact widening for bf16 and f16).
#[inline(always)]
unsafe fn load8<T: Elem>(p: *const T) -> __m256i {
    match T::DTYPE {
        DType::F32 => _mm256_loadu_si256(p as *const __m256i),
        DType::BF16 => _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)), 16),
        DType::F16 => _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))),
    }
}

/// Loads 4 elements at p widened exactly to f64.
#[inline(always)]
unsafe fn load4_pd<T: Elem>(p: *const T) -> __m256d {
    match T::DTYPE {
        DType::F32 => _mm256_cvtps_pd(_mm_loadu_ps(p as *const f32)),
        DType::BF16 => _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(
            _mm_cvtepu16_epi32(_mm_loadl_epi64(p as *const __m128i)),
            16,
        ))),
        DType::F16 => _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(p as *const __m128i))),
    }
}

/// Prefetch distance in bytes (prefetching past the end of a slice is harmless).
const PREFETCH: usize = 4096;

/// Lanes of the f64 sums (must equal kernels::L).
pub const LANES: usize = 32;
const _: () = assert!(LANES.is_multiple_of(8));

#[inline(always)]
unsafe fn sum_lanes<T: Elem, const ABS: bool>(xs: &[T]) -> [f64; LANES] {
    let mut acc = [_mm256_setzero_pd(); LANES / 4];
    let n = xs.len() / LANES * LANES;
    let p = xs.as_ptr();
    let sign = _mm256_set1_pd(-0.0);
    let bytes_per_iter = LANES * std::mem::size_of::<T>();
    let mut i = 0;
    while i < n {
        // software prefetch ~4 KiB ahead: keeps enough cache lines in flight while computing
        let ahead = (p.add(i) as *const i8).add(PREFETCH);
        let mut off = 0;
        while off < bytes_per_iter {
            _mm_prefetch::<_MM_HINT_T0>(ahead.add(off));
            off += 64;
        }
        for j in 0..LANES / 8 {
            let (lo, hi) = if T::DTYPE == DType::F32 {
                (load4_pd(p.add(i + 8 * j)), load4_pd(p.add(i + 8 * j + 4)))
            } else {
                let v = _mm256_castsi256_ps(load8(p.add(i + 8 * j)));
                (_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)))
            };
            if ABS {
                acc[2 * j] = _mm256_add_pd(acc[2 * j], _mm256_andnot_pd(sign, lo));
                acc[2 * j + 1] = _mm256_add_pd(acc[2 * j + 1], _mm256_andnot_pd(sign, hi));
            } else {
                acc[2 * j] = _mm256_add_pd(acc[2 * j], _mm256_mul_pd(lo, lo));
                acc[2 * j + 1] = _mm256_add_pd(acc[2 * j + 1], _mm256_mul_pd(hi, hi));
            }
        }
        i += LANES;
    }
    let mut out = [0f64; LANES];
    for (j, a) in acc.iter().enumerate() {
        _mm256_storeu_pd(out.as_mut_ptr().add(4 * j), *a);
    }
    for (j, x) in xs[n..].iter().enumerate() {
        let v = x.to_f32() as f64;
        out[j] += if ABS { v.abs() } else { v * v };
    }
    out
}

/// Wrapping sum of the raw little-endian u32 words of `bytes` (the read-bandwidth baseline);
/// trailing bytes (fewer than 4) are added as a zero-padded word.
///
/// # Safety
/// The CPU must support AVX2 ([`available`] checks it with F16C; `kernels::KernelPath::detect` too).
#[target_feature(enable = "avx2")]
pub unsafe fn read_words(bytes: &[u8]) -> u32 {
    let n = bytes.len() / 128 * 128;
    let p = bytes.as_ptr();
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut i = 0;
    while i < n {
        // the same software prefetch as the kernels measured against it
        _mm_prefetch::<_MM_HINT_T0>(p.add(i + PREFETCH) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(i + PREFETCH + 64) as *const i8);
        for (j, a) in acc.iter_mut().enumerate() {
            *a = _mm256_add_epi32(*a, _mm256_loadu_si256(p.add(i + 32 * j) as *const __m256i));
        }
        i += 128;
    }
    let mut l = [0u32; 32];
    for (j, a) in acc.iter().enumerate() {
        _mm256_storeu_si256(l.as_mut_ptr().add(8 * j) as *mut __m256i, *a);
    }
    let mut s = l.iter().fold(0u32, |a, &b| a.wrapping_add(b));
    for c in bytes[n..].chunks(4) {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        s = s.wrapping_add(u32::from_le_bytes(w));
    }
    s
}

/// Lane sums of x^2 (lane = index mod LANES).
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]; `kernels::KernelPath::detect` checks it).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn sum_sq_lanes<T: Elem>(xs: &[T]) -> [f64; LANES] {
    sum_lanes::<T, false>(xs)
}

/// Lane sums of |x|.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]; `kernels::KernelPath::detect` checks it).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn sum_abs_lanes<T: Elem>(xs: &[T]) -> [f64; LANES] {
    sum_lanes::<T, true>(xs)
}

/// Elements per block of the exact kernel: 16 f64 lanes (4 registers), 64 deposits per lane.
pub const BLOCK: usize = 1024;
const LOG2_DEPOSITS: i32 = 6;

/// Where the exact kernel puts its results: (k, count) pairs, count units of 2^(k - 1074).
/// Few distinct k occur (one per block maximum exponent), so a short list is enough.
#[derive(Default)]
pub struct FoldBins {
    bins: Vec<(usize, u128)>,
    last: usize,
    /// Spill for a bin that would overflow (never in practice).
    spill: crate::exact::BigUint,
}

impl FoldBins {
    fn add(&mut self, total: u128, unit_exp: i32) {
        let k = (unit_exp + 1074) as usize;
        let j = if self.bins.get(self.last).map(|b| b.0) == Some(k) {
            self.last
        } else if let Some(j) = self.bins.iter().position(|b| b.0 == k) {
            j
        } else {
            self.bins.push((k, 0));
            self.bins.len() - 1
        };
        self.last = j;
        match self.bins[j].1.checked_add(total) {
            Some(v) => self.bins[j].1 = v,
            None => self.spill.add_shifted(total, k as u32),
        }
    }
    pub fn finish_into(&self, n: &mut crate::exact::BigUint) {
        for &(k, v) in &self.bins {
            n.add_shifted(v, k as u32);
        }
        n.add(&self.spill);
    }
}

/// Exact sum of y = |x|^P (P = 1 or 2; y is exact in f64) over one block (a multiple of 16
/// elements, at most BLOCK), by error-free folding into two fixed-exponent f64 accumulators:
/// S1 = 1.5 * 2^a1 absorbs y rounded to its ulp u1 = 2^(a1 - 52) (exact: the bounds keep S1 in
/// its binade), the exact remainder r = y - q goes into S2 = 1.5 * 2^a2 the same way, and the
/// remainder after S2 must be zero. a1 is set from the block maximum so that the 64 deposits per
/// lane cannot leave the binade. Returns None when the block holds a non-finite element or an
/// element too small to be captured by the two folds: then the caller sums it another way.
#[inline(always)]
unsafe fn fold_block<T: Elem, const P2: bool>(xs: &[T]) -> Option<(u128, i32)> {
    let p = xs.as_ptr();
    let n = xs.len();
    // pass 1: largest |x| bit pattern (any NaN/Inf pattern is above every finite one) and the
    // smallest nonzero one (|x| bits - 1 wraps zero to the top)
    let absm = _mm256_set1_epi32(0x7fff_ffff);
    let onev = _mm256_set1_epi32(1);
    let mut mx = [_mm256_setzero_si256(); 2];
    let mut mn = [_mm256_set1_epi32(-1); 2];
    let mut i = 0;
    while i < n {
        let ahead = (p.add(i) as *const i8).add(PREFETCH);
        let mut off = 0;
        while off < 16 * std::mem::size_of::<T>() {
            _mm_prefetch::<_MM_HINT_T0>(ahead.add(off));
            off += 64;
        }
        for h in 0..2 {
            let a = _mm256_and_si256(load8(p.add(i + 8 * h)), absm);
            mx[h] = _mm256_max_epu32(mx[h], a);
            mn[h] = _mm256_min_epu32(mn[h], _mm256_sub_epi32(a, onev));
        }
        i += 16;
    }
    let mut km = [0u32; 8];
    _mm256_storeu_si256(km.as_mut_ptr() as *mut __m256i, _mm256_max_epu32(mx[0], mx[1]));
    let maxbits = km.iter().copied().max().unwrap();
    if maxbits >= 0x7f80_0000 {
        return None;
    }
    if maxbits == 0 {
        return Some((0, 0)); // all zeros
    }
    _mm256_storeu_si256(km.as_mut_ptr() as *mut __m256i, _mm256_min_epu32(mn[0], mn[1]));
    let minbits = km.iter().copied().min().unwrap() + 1;
    let kmax = ((maxbits >> 23) as i32).max(1);
    let kmin = ((minbits >> 23) as i32).max(1);
    // Every element is captured by the two folds when its exponent is within this many binades of
    // the largest (see the bounds below); otherwise the remainders are checked.
    let span = if P2 { 20 } else { 65 };
    if kmin >= kmax - span {
        fold_main::<T, P2, false>(xs, kmax)
    } else {
        fold_main::<T, P2, true>(xs, kmax)
    }
}

#[inline(always)]
unsafe fn fold_main<T: Elem, const P2: bool, const CHECK: bool>(xs: &[T], kmax: i32) -> Option<(u128, i32)> {
    let p = xs.as_ptr();
    let n = xs.len();
    let mut i;
    // |x| < 2^(kmax - 126): y < 2^ey
    let ey = if P2 { 2 * (kmax - 126) } else { kmax - 126 };
    let a1 = ey + LOG2_DEPOSITS + 2;
    let a2 = a1 - 52 + LOG2_DEPOSITS + 1;
    let s1 = 1.5 * pow2(a1);
    let s2 = 1.5 * pow2(a2);
    let sign = _mm256_set1_pd(-0.0);
    let mut f1 = [_mm256_set1_pd(s1); 4];
    let mut f2 = [_mm256_set1_pd(s2); 4];
    let mut lost = _mm256_setzero_pd();
    i = 0;
    while i < n {
        for j in 0..4 {
            let x = load4_pd(p.add(i + 4 * j));
            let y = if P2 { _mm256_mul_pd(x, x) } else { _mm256_andnot_pd(sign, x) };
            let t = _mm256_add_pd(f1[j], y);
            let q = _mm256_sub_pd(t, f1[j]);
            f1[j] = t;
            let r = _mm256_sub_pd(y, q);
            let t2 = _mm256_add_pd(f2[j], r);
            let q2 = _mm256_sub_pd(t2, f2[j]);
            f2[j] = t2;
            if CHECK {
                lost = _mm256_or_pd(lost, _mm256_cmp_pd(r, q2, _CMP_NEQ_UQ)); // remainder r - q2 != 0
            }
        }
        i += 16;
    }
    if CHECK && _mm256_movemask_pd(lost) != 0 {
        return None;
    }
    // exact reductions over the 4 registers (see the bounds above: < 2^53 units each)
    let (v1, v2) = (_mm256_set1_pd(s1), _mm256_set1_pd(s2));
    let d1 = _mm256_add_pd(
        _mm256_add_pd(_mm256_sub_pd(f1[0], v1), _mm256_sub_pd(f1[1], v1)),
        _mm256_add_pd(_mm256_sub_pd(f1[2], v1), _mm256_sub_pd(f1[3], v1)),
    );
    let d2 = _mm256_add_pd(
        _mm256_add_pd(_mm256_sub_pd(f2[0], v2), _mm256_sub_pd(f2[1], v2)),
        _mm256_add_pd(_mm256_sub_pd(f2[2], v2), _mm256_sub_pd(f2[3], v2)),
    );
    let mut l1 = [0f64; 4];
    let mut l2 = [0f64; 4];
    _mm256_storeu_pd(l1.as_mut_ptr(), d1);
    _mm256_storeu_pd(l2.as_mut_ptr(), d2);
    let (inv1, inv2) = (pow2(52 - a1), pow2(52 - a2));
    let mut total: i128 = 0;
    for l in 0..4 {
        let n1 = (l1[l] * inv1) as i64 as i128; // integer multiples of u1, exact
        let n2 = (l2[l] * inv2) as i64 as i128; // integer multiples of u2 (signed), exact
        total += (n1 << (a1 - a2)) + n2;
    }
    debug_assert!(total >= 0);
    Some((total as u128, a2 - 52))
}

/// Exact sum of |x|^P (P = 1 or 2) over the finite elements of xs: blocks go through
/// `fold_block` into `out`; blocks it refuses, and the tail, go to `slow`.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]; `kernels::KernelPath::detect` checks it).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn exact_into<T: Elem, const P2: bool>(xs: &[T], out: &mut FoldBins, slow: &mut dyn FnMut(&[T])) {
    let n16 = xs.len() / 16 * 16;
    for blk in xs[..n16].chunks(BLOCK) {
        match fold_block::<T, P2>(blk) {
            Some((total, e)) => out.add(total, e),
            None => slow(blk),
        }
    }
    if n16 < xs.len() {
        slow(&xs[n16..]);
    }
}
