//! Hand-written AVX2 (+F16C) kernels for x86_64. Each one computes exactly what its portable
//! counterpart computes (same lane layout for the f64 sums; the exact sums are exact anyway).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::dtype::{pow2, DType, Elem};
use crate::genlanes::{self, table_s, w_mix1, Lanes};
use crate::genq::MIX2;

/// Whether the AVX2 + F16C kernels can run on this CPU (cached by std).
#[inline]
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
}

/// Whether the AVX-512 generator ([`GenQ16`]: 64-bit lane multiplies) can run on this CPU, beside
/// the AVX2 + F16C kernels (cached by std).
#[inline]
pub fn wide_available() -> bool {
    available()
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512dq")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
}

/// Whether AVX-512 BF16 (`vcvtneps2bf16`) can run on this CPU, beside [`wide_available`]: the
/// wide verify rounds to bfloat16 with it where that is provably the same rounding
/// ([`bf16_hw_exact`]).
#[inline]
pub fn bf16_available() -> bool {
    wide_available() && std::is_x86_feature_detected!("avx512bf16")
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

/// Asks for the cache line PREFETCH bytes past element k of `p` (HINT: `_MM_HINT_T0` to read it,
/// `_MM_HINT_ET0` to write it), so that its load starts long before a compute-bound loop gets there.
/// The address is only computed (`wrapping_add`), never dereferenced: past the end of a slice is fine.
#[inline(always)]
unsafe fn prefetch_ahead<T, const HINT: i32>(p: *const T, k: usize) {
    _mm_prefetch::<HINT>((p as *const i8).wrapping_add(k * std::mem::size_of::<T>() + PREFETCH));
}

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
/// The CPU must support AVX2 ([`available`] checks it with F16C; `path::KernelPath::detect` too).
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
/// The CPU must support AVX2 and F16C ([`available`]; `path::KernelPath::detect` checks it).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn sum_sq_lanes<T: Elem>(xs: &[T]) -> [f64; LANES] {
    sum_lanes::<T, false>(xs)
}

/// Lane sums of |x|.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]; `path::KernelPath::detect` checks it).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn sum_abs_lanes<T: Elem>(xs: &[T]) -> [f64; LANES] {
    sum_lanes::<T, true>(xs)
}

/// Whether the |x|^p kernels below (AVX2 + F16C + FMA) can run on this CPU: a SIMD `KernelPath`
/// says AVX2 and F16C, not FMA, so their callers ask this too.
#[inline]
pub fn fma_available() -> bool {
    available() && std::is_x86_feature_detected!("fma")
}

/// |x|^3 (HALVES = false) or |x|^1.5 of four f32 values widened to f64: the operations of
/// abspow::cube and abspow::three_halves lane-wise, so the same correctly rounded bits.
#[inline(always)]
unsafe fn abs_pow4<const HALVES: bool>(x: __m256d) -> __m256d {
    let a = _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
    let sq = _mm256_mul_pd(a, a);
    let ch = _mm256_mul_pd(sq, a);
    if !HALVES {
        return ch;
    }
    let cl = _mm256_fmsub_pd(sq, a, ch);
    let s = _mm256_sqrt_pd(ch);
    let r = _mm256_add_pd(_mm256_fnmadd_pd(s, s, ch), cl);
    let t = _mm256_add_pd(s, _mm256_div_pd(r, _mm256_add_pd(s, s)));
    // 0, inf and NaN are their own results (as in the scalar code)
    let finite_pos = _mm256_and_pd(
        _mm256_cmp_pd::<_CMP_GT_OQ>(a, _mm256_setzero_pd()),
        _mm256_cmp_pd::<_CMP_LT_OQ>(a, _mm256_set1_pd(f64::INFINITY)),
    );
    _mm256_blendv_pd(a, t, finite_pos)
}

/// out[i] = |xs[i]|^3 (HALVES = false) or |xs[i]|^1.5, correctly rounded (abspow.rs);
/// out.len() == xs.len().
///
/// # Safety
/// The CPU must support AVX2, F16C and FMA ([`fma_available`]).
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn abs_pow_into<T: Elem, const HALVES: bool>(xs: &[T], out: &mut [f64]) {
    assert_eq!(xs.len(), out.len());
    let n = xs.len() / 4 * 4;
    let (p, o) = (xs.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    while i < n {
        _mm256_storeu_pd(o.add(i), abs_pow4::<HALVES>(load4_pd(p.add(i))));
        i += 4;
    }
    let k = if HALVES { crate::abspow::AbsPow::ThreeHalves } else { crate::abspow::AbsPow::Three };
    for j in n..xs.len() {
        out[j] = k.of(xs[j].to_f32() as f64);
    }
}

/// Lane sums of |x|^3 (HALVES = false) or |x|^1.5 (lane = index mod LANES, as kernels::sum_pow).
///
/// # Safety
/// The CPU must support AVX2, F16C and FMA ([`fma_available`]).
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn sum_pow_lanes<T: Elem, const HALVES: bool>(xs: &[T]) -> [f64; LANES] {
    let mut acc = [_mm256_setzero_pd(); LANES / 4];
    let n = xs.len() / LANES * LANES;
    let p = xs.as_ptr();
    let mut i = 0;
    while i < n {
        for (j, a) in acc.iter_mut().enumerate() {
            *a = _mm256_add_pd(*a, abs_pow4::<HALVES>(load4_pd(p.add(i + 4 * j))));
        }
        i += LANES;
    }
    let mut out = [0f64; LANES];
    for (j, a) in acc.iter().enumerate() {
        _mm256_storeu_pd(out.as_mut_ptr().add(4 * j), *a);
    }
    let k = if HALVES { crate::abspow::AbsPow::ThreeHalves } else { crate::abspow::AbsPow::Three };
    for (j, x) in xs[n..].iter().enumerate() {
        out[j] += k.of(x.to_f32() as f64);
    }
    out
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
    spill: crate::biguint::BigUint,
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
    pub fn finish_into(&self, n: &mut crate::biguint::BigUint) {
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
/// The CPU must support AVX2 and F16C ([`available`]; `path::KernelPath::detect` checks it).
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

// ---- the SPEC section 5 generator, 8 elements per step (gen.rs holds the portable reference) ----

/// A source of q for consecutive indices, 16 per call as two i32x8 halves in index order: the
/// kernels below are written once over it and compiled for AVX2 ([`GenQ8`]) and AVX-512 ([`GenQ16`]).
trait QStream {
    unsafe fn next16(&mut self) -> (__m256i, __m256i);
}

/// q = (splitmix64(key + i) >> (64 - m)) - 2^(m-1) for 16 consecutive indices i per step, as two
/// i32x8 halves in index order (m <= 24, so q fits), with AVX2's 32-bit lanes: each 64-bit value is
/// held as its low and high 32-bit halves in two registers.
///
/// The first multiply is the table of [`GenQ16`] (genlanes.rs explains it): with x = key + gamma + i
/// = X + t, X a multiple of 16, (x ^ (x >> 30)) * MIX1 = W(X) * MIX1 + T(t ^ (S & 15)) (mod 2^64), a
/// scalar product per step shared by the lanes in X (and one for those in X + 16), plus a table per
/// lane made again when S & 15 changes (every 2^26 steps; the step where it changes is computed
/// directly). genlanes.rs builds the tables; its scalar model of this lane loop is tested against
/// the generator's definition on every machine. The
/// 64-bit add of the two parts on 32-bit halves takes its carry from a signed compare of the low
/// halves with their top bits flipped.
///
/// The second multiply, z * MIX2 with z = zh 2^32 + zl and MIX2 = ch 2^32 + cl: z * MIX2 mod 2^64 =
/// zl cl + ((zh cl + zl ch) mod 2^32) 2^32, the full 32x32->64 product zl cl from `_mm256_mul_epu32`
/// (4 lanes at a time), the cross terms from the 8-lane `_mm256_mullo_epi32`. The last step,
/// bits = z ^ (z >> 31), leaves the top 31 bits of z as they are (z >> 31 is below 2^33), so for
/// m <= 24 only the high half h of the second product is needed: bits >> (64 - m) = h >> (32 - m),
/// and (h >> (32 - m)) - 2^(m-1) is an arithmetic shift of h with its top bit flipped.
struct GenQ8 {
    /// X of the lanes' lower multiple of 16, this step
    x: u64,
    /// W * MIX1 for X (`low`) and X + 16 (`high`)
    low: u64,
    high: u64,
    /// the lanes: t per lane, and which fall in X + 16
    lanes: Lanes,
    /// S & 15 of the tables
    s: u64,
    /// per lane, lanes 0..8 (`a`) and 8..16 (`b`): the low and high halves of T
    tl_a: __m256i,
    th_a: __m256i,
    tl_b: __m256i,
    th_b: __m256i,
    /// per lane: where its W * MIX1 halves are in [low.lo ^ 2^31, low.hi, high.lo ^ 2^31, high.hi]
    il_a: __m256i,
    ih_a: __m256i,
    il_b: __m256i,
    ih_b: __m256i,
    /// MIX2's low half (in every 32-bit lane: `_mm256_mul_epu32` reads the even ones) and high half
    m2l: __m256i,
    m2h: __m256i,
    /// 32 - m
    shift: __m128i,
    flip: __m256i,
}

impl GenQ8 {
    #[inline(always)]
    unsafe fn new(key: u64, m: u32, start: u64) -> GenQ8 {
        debug_assert!((2..=24).contains(&m));
        let lanes = Lanes::new(key, start);
        let idx = |from: usize, hi: i32| {
            let v: [i32; 8] = std::array::from_fn(|k| 2 * lanes.high(from + k) as i32 + hi);
            _mm256_loadu_si256(v.as_ptr() as *const __m256i)
        };
        let x = lanes.x;
        let mut g = GenQ8 {
            x,
            low: w_mix1(x),
            high: w_mix1(x.wrapping_add(16)),
            lanes,
            s: u64::MAX,
            tl_a: _mm256_setzero_si256(),
            th_a: _mm256_setzero_si256(),
            tl_b: _mm256_setzero_si256(),
            th_b: _mm256_setzero_si256(),
            il_a: idx(0, 0),
            ih_a: idx(0, 1),
            il_b: idx(8, 0),
            ih_b: idx(8, 1),
            m2l: _mm256_set1_epi32(MIX2 as u32 as i32),
            m2h: _mm256_set1_epi32((MIX2 >> 32) as u32 as i32),
            shift: _mm_cvtsi32_si128(32 - m as i32),
            flip: _mm256_set1_epi32(i32::MIN),
        };
        g.tables_for((x >> 30) & 15);
        g
    }

    #[inline(always)]
    unsafe fn tables_for(&mut self, s: u64) {
        self.s = s;
        let tab = genlanes::table(&self.lanes, s);
        let lo: [u32; 16] = std::array::from_fn(|j| tab[j] as u32);
        let hi: [u32; 16] = std::array::from_fn(|j| (tab[j] >> 32) as u32);
        self.tl_a = _mm256_loadu_si256(lo.as_ptr() as *const __m256i);
        self.tl_b = _mm256_loadu_si256(lo.as_ptr().add(8) as *const __m256i);
        self.th_a = _mm256_loadu_si256(hi.as_ptr() as *const __m256i);
        self.th_b = _mm256_loadu_si256(hi.as_ptr().add(8) as *const __m256i);
    }

    /// (x ^ (x >> 30)) * MIX1 of the 16 lanes of this step as low and high halves (a, b), the
    /// direct way: for the step where S & 15 changes, which the tables do not hold.
    #[cold]
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn first_mix_direct(x: u64, lanes: &Lanes) -> [__m256i; 4] {
        let z = genlanes::first_mix_direct(x, lanes);
        let lo: [u32; 16] = std::array::from_fn(|j| z[j] as u32);
        let hi: [u32; 16] = std::array::from_fn(|j| (z[j] >> 32) as u32);
        let ld = |p: *const u32| _mm256_loadu_si256(p as *const __m256i);
        [ld(lo.as_ptr()), ld(hi.as_ptr()), ld(lo.as_ptr().add(8)), ld(hi.as_ptr().add(8))]
    }

    /// q of 8 lanes from their z = (x ^ (x >> 30)) * MIX1 as low and high halves.
    #[inline(always)]
    unsafe fn finish(&self, zl: __m256i, zh: __m256i) -> __m256i {
        // y = z ^ (z >> 27)
        let yl = _mm256_xor_si256(_mm256_xor_si256(zl, _mm256_srli_epi32::<27>(zl)), _mm256_slli_epi32::<5>(zh));
        let yh = _mm256_xor_si256(zh, _mm256_srli_epi32::<27>(zh));
        // h = the high half of y * MIX2: the high half of yl * cl, plus the cross terms
        let pe = _mm256_mul_epu32(yl, self.m2l);
        let po = _mm256_mul_epu32(_mm256_srli_epi64::<32>(yl), self.m2l);
        let carry = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(pe), po);
        let cross = _mm256_add_epi32(_mm256_mullo_epi32(yh, self.m2l), _mm256_mullo_epi32(yl, self.m2h));
        let h = _mm256_add_epi32(carry, cross);
        _mm256_sra_epi32(_mm256_xor_si256(h, self.flip), self.shift)
    }

    /// z's halves of 8 lanes from the tables: W * MIX1 (`w`: [low.lo ^ 2^31, low.hi, high.lo ^ 2^31,
    /// high.hi], picked per lane) plus T, with the carry of the low halves.
    #[inline(always)]
    unsafe fn first_mix(w: __m256i, il: __m256i, ih: __m256i, tl: __m256i, th: __m256i, flip: __m256i) -> (__m256i, __m256i) {
        let (wlf, wh) = (_mm256_permutevar8x32_epi32(w, il), _mm256_permutevar8x32_epi32(w, ih));
        // (wl ^ 2^31) + tl = (wl + tl) ^ 2^31: the sum wl + tl carries iff it is below wl (unsigned),
        // iff (signed) its flipped value is below wl ^ 2^31
        let zlf = _mm256_add_epi32(wlf, tl);
        let carry = _mm256_cmpgt_epi32(wlf, zlf); // -1 where the low halves carry
        let zh = _mm256_sub_epi32(_mm256_add_epi32(wh, th), carry);
        (_mm256_xor_si256(zlf, flip), zh)
    }
}

impl QStream for GenQ8 {
    #[inline(always)]
    unsafe fn next16(&mut self) -> (__m256i, __m256i) {
        let x = self.x;
        let (s_low, s_high) = table_s(x);
        let r = if s_low == self.s && s_high == self.s {
            // from general registers (vmovq, vpinsrq): not a 16-byte load of two 8-byte stores,
            // which store forwarding cannot serve (twice as slow, measured)
            let (low, high) = (self.low ^ 0x8000_0000, self.high ^ 0x8000_0000);
            let w = _mm256_castsi128_si256(_mm_insert_epi64::<1>(_mm_cvtsi64_si128(low as i64), high as i64));
            let (zla, zha) = Self::first_mix(w, self.il_a, self.ih_a, self.tl_a, self.th_a, self.flip);
            let (zlb, zhb) = Self::first_mix(w, self.il_b, self.ih_b, self.tl_b, self.th_b, self.flip);
            (self.finish(zla, zha), self.finish(zlb, zhb))
        } else {
            let [zla, zha, zlb, zhb] = Self::first_mix_direct(x, &self.lanes);
            if s_low == s_high {
                self.tables_for(s_low);
            }
            (self.finish(zla, zha), self.finish(zlb, zhb))
        };
        // the next step: X + 16 becomes the low multiple
        self.x = x.wrapping_add(16);
        self.low = self.high;
        self.high = w_mix1(self.x.wrapping_add(16));
        r
    }
}

/// [`GenQ8`]'s q with AVX-512's 64-bit lane multiply (`vpmullq`) instead of 32-bit halves: about
/// twice the values per cycle where the CPU has it (the generator is compute-bound). The same
/// bits: splitmix64 exactly, then the high half of each lane, as GenQ8::next explains.
///
/// Its first multiply costs one scalar multiply per 16 values instead of two vector ones. Write
/// x = key + gamma + i as X + t, X a multiple of 16 and t < 16: then x >> 30 = X >> 30 = S, and
/// x ^ S = W + (t ^ (S & 15)) with W = (X ^ S) & !15, so (x ^ S) * MIX1 = W * MIX1 + (t ^ (S & 15)) * MIX1
/// (mod 2^64). A lane's t never changes (x steps by 16), nor does S & 15 but once every 2^26 steps:
/// the second term is a table per lane, made again when S & 15 changes; the first is one scalar
/// product per multiple of 16, shared by the lanes that fall in it (the 16 lanes span X and X + 16).
/// genlanes.rs builds the tables (and the lanes, and the direct first multiply of the steps the
/// tables do not hold); its scalar model of this lane loop is tested against the generator's
/// definition on every machine, and against this code where the CPU has AVX-512.
struct GenQ16 {
    /// X of the lanes' lower multiple of 16, this step
    x: u64,
    /// W * MIX1 for X (`low`) and X + 16 (`high`), broadcast
    low: __m512i,
    high: __m512i,
    /// the lanes (bit j: lane j of a, 8 + j of b) that fall in X + 16
    in_high_a: __mmask8,
    in_high_b: __mmask8,
    /// S & 15 of the tables, and (t ^ (S & 15)) * MIX1 per lane
    s: u64,
    table_a: __m512i,
    table_b: __m512i,
    /// the lanes: t per lane, and which fall in X + 16
    lanes: Lanes,
    mix2: __m512i,
    /// picks the odd (high) 32-bit halves of a then b
    high_halves: __m512i,
    /// 32 - m
    shift: __m128i,
    flip: __m512i,
}

impl GenQ16 {
    #[inline(always)]
    unsafe fn new(key: u64, m: u32, start: u64) -> GenQ16 {
        debug_assert!((2..=24).contains(&m));
        let lanes = Lanes::new(key, start);
        let x = lanes.x;
        let mut g = GenQ16 {
            x,
            low: _mm512_set1_epi64(w_mix1(x) as i64),
            high: _mm512_set1_epi64(w_mix1(x.wrapping_add(16)) as i64),
            in_high_a: lanes.in_high as u8,
            in_high_b: (lanes.in_high >> 8) as u8,
            s: u64::MAX,
            table_a: _mm512_setzero_si512(),
            table_b: _mm512_setzero_si512(),
            lanes,
            mix2: _mm512_set1_epi64(MIX2 as i64),
            high_halves: _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31),
            shift: _mm_cvtsi32_si128(32 - m as i32),
            flip: _mm512_set1_epi32(i32::MIN),
        };
        g.tables_for((x >> 30) & 15);
        g
    }

    #[inline(always)]
    unsafe fn tables_for(&mut self, s: u64) {
        self.s = s;
        let tab = genlanes::table(&self.lanes, s);
        self.table_a = _mm512_loadu_si512(tab.as_ptr() as *const __m512i);
        self.table_b = _mm512_loadu_si512(tab.as_ptr().add(8) as *const __m512i);
    }

    /// (x ^ (x >> 30)) * MIX1 of the 16 lanes of this step, the direct way: for the step where
    /// S & 15 changes, which the tables do not hold.
    #[cold]
    #[inline(never)]
    #[target_feature(enable = "avx2,avx512f,avx512dq,avx512bw,avx512vl")]
    unsafe fn first_mix_direct(x: u64, lanes: &Lanes) -> (__m512i, __m512i) {
        let z = genlanes::first_mix_direct(x, lanes);
        (_mm512_loadu_si512(z.as_ptr() as *const __m512i), _mm512_loadu_si512(z.as_ptr().add(8) as *const __m512i))
    }
}

impl GenQ16 {
    /// The 16 q of this step in one register (`next16` gives them as two halves).
    #[inline(always)]
    unsafe fn next16_512(&mut self) -> __m512i {
        let x = self.x;
        let (s_low, s_high) = table_s(x);
        let (za, zb) = if s_low == self.s && s_high == self.s {
            (
                _mm512_add_epi64(_mm512_mask_blend_epi64(self.in_high_a, self.low, self.high), self.table_a),
                _mm512_add_epi64(_mm512_mask_blend_epi64(self.in_high_b, self.low, self.high), self.table_b),
            )
        } else {
            let z = Self::first_mix_direct(x, &self.lanes);
            if s_low == s_high {
                self.tables_for(s_low);
            }
            z
        };
        // the next step: X + 16 becomes the low multiple
        self.x = x.wrapping_add(16);
        self.low = self.high;
        self.high = _mm512_set1_epi64(w_mix1(self.x.wrapping_add(16)) as i64);
        let za = _mm512_xor_si512(za, _mm512_srli_epi64::<27>(za));
        let zb = _mm512_xor_si512(zb, _mm512_srli_epi64::<27>(zb));
        let za = _mm512_mullo_epi64(za, self.mix2);
        let zb = _mm512_mullo_epi64(zb, self.mix2);
        let h = _mm512_permutex2var_epi32(za, self.high_halves, zb);
        _mm512_sra_epi32(_mm512_xor_si512(h, self.flip), self.shift)
    }
}

impl QStream for GenQ16 {
    #[inline(always)]
    unsafe fn next16(&mut self) -> (__m256i, __m256i) {
        let q = self.next16_512();
        (_mm512_castsi512_si256(q), _mm512_extracti64x4_epi64::<1>(q))
    }
}

/// f32 values (8 lanes) as bf16 bit patterns in 32-bit lanes: round to nearest even, NaN stays NaN
/// (dtype::f32_to_bf16_bits).
#[inline(always)]
unsafe fn bf16_bits32(v: __m256) -> __m256i {
    let x = _mm256_castps_si256(v);
    let r = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1)));
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(x, r));
    let nan = _mm256_or_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(0x40));
    _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)))
}

/// 8 f32 values as 8 packed 16-bit patterns of T (bf16 or f16), round to nearest even.
#[inline(always)]
unsafe fn to_half8<T: Elem>(v: __m256) -> __m128i {
    if T::DTYPE == DType::F16 {
        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)
    } else {
        let b = bf16_bits32(v);
        _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
    }
}

/// Stores 8 f32 values that are exact in T at p: f32 as they are, bf16 by dropping the low half
/// (zero for a value exact in bf16), f16 by the (exact) F16C conversion.
#[inline(always)]
unsafe fn store8_exact<T: Elem>(p: *mut T, v: __m256) {
    match T::DTYPE {
        DType::F32 => _mm256_storeu_ps(p as *mut f32, v),
        DType::BF16 => {
            let b = _mm256_srli_epi32::<16>(_mm256_castps_si256(v));
            _mm_storeu_si128(p as *mut __m128i, _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b)))
        }
        DType::F16 => _mm_storeu_si128(p as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)),
    }
}

/// Writes value(start + k) to dst[k] for k < n, where value(i) = round_T(f32(q(i)) * unit): the
/// generator's `gen` mode when every value is exact in f32 (`GenSpec::exact_in(F32)`), so the f32
/// product is the exact value and the one rounding to T is the generator's. `round` = false when
/// every value is exact in T too (the rounding is then a plain narrowing). The special index is the
/// caller's. dst may be uninitialized memory: it is only written.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]; `path::KernelPath::detect` checks it);
/// dst must be valid for writes of n elements; 2 <= m <= 24.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn gen_fill<T: Elem>(key: u64, m: u32, unit: f32, start: u64, dst: *mut T, n: usize, round: bool) {
    if round {
        fill_from::<T, _, true>(GenQ8::new(key, m, start), unit, dst, n)
    } else {
        fill_from::<T, _, false>(GenQ8::new(key, m, start), unit, dst, n)
    }
}

/// [`gen_fill`] with the AVX-512 generator (bitwise the same values).
///
/// # Safety
/// As [`gen_fill`], and the CPU must support AVX-512 F and DQ ([`wide_available`]).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
pub unsafe fn gen_fill_wide<T: Elem>(key: u64, m: u32, unit: f32, start: u64, dst: *mut T, n: usize, round: bool) {
    if round {
        fill_from_512::<T, true>(GenQ16::new(key, m, start), unit, dst, n)
    } else {
        fill_from_512::<T, false>(GenQ16::new(key, m, start), unit, dst, n)
    }
}

/// [`fill_from`] on 16 lanes at once (AVX-512 F), the rest of fewer than 16 by fill_from.
#[inline(always)]
unsafe fn fill_from_512<T: Elem, const ROUND: bool>(mut g: GenQ16, unit: f32, dst: *mut T, n: usize) {
    let u = _mm512_set1_ps(unit);
    let mut k = 0;
    while k + 16 <= n {
        prefetch_ahead::<T, _MM_HINT_ET0>(dst, k);
        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(g.next16_512()), u);
        let p = dst.add(k);
        match T::DTYPE {
            DType::F32 => _mm512_storeu_ps(p as *mut f32, v),
            // exact in bf16: the high halves
            DType::BF16 if !ROUND => _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(_mm512_castps_si512(v)))),
            // F16C's rounding to nearest even (subnormals included), 16 at once
            DType::F16 => _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)),
            _ => {
                store8::<T, ROUND>(p, _mm512_castps512_ps256(v));
                store8::<T, ROUND>(p.add(8), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
            }
        }
        k += 16;
    }
    if k < n {
        fill_from::<T, GenQ16, ROUND>(g, unit, dst.add(k), n - k);
    }
}

/// f32(q) * s in 8 lanes.
#[inline(always)]
unsafe fn scaled8(q: __m256i, s: __m256) -> __m256 {
    _mm256_mul_ps(_mm256_cvtepi32_ps(q), s)
}

/// Stores 8 finite f32 values at p rounded to T (nearest even); ROUND = false: values exact in T.
#[inline(always)]
unsafe fn store8<T: Elem, const ROUND: bool>(p: *mut T, v: __m256) {
    if ROUND && T::DTYPE != DType::F32 {
        _mm_storeu_si128(p as *mut __m128i, to_half8::<T>(v))
    } else {
        store8_exact(p, v)
    }
}

#[inline(always)]
unsafe fn fill_from<T: Elem, G: QStream, const ROUND: bool>(mut g: G, unit: f32, dst: *mut T, n: usize) {
    let u = _mm256_set1_ps(unit);
    let mut k = 0;
    while k + 16 <= n {
        prefetch_ahead::<T, _MM_HINT_ET0>(dst, k);
        let (q0, q1) = g.next16();
        store8::<T, ROUND>(dst.add(k), scaled8(q0, u));
        store8::<T, ROUND>(dst.add(k + 8), scaled8(q1, u));
        k += 16;
    }
    if k < n {
        let (q0, q1) = g.next16();
        let mut tail = [T::default(); 16];
        store8::<T, ROUND>(tail.as_mut_ptr(), scaled8(q0, u));
        store8::<T, ROUND>(tail.as_mut_ptr().add(8), scaled8(q1, u));
        std::ptr::copy_nonoverlapping(tail.as_ptr(), dst.add(k), n - k);
    }
}

/// Lane mask (bit j for element j of 8) of the elements of `have` that differ from round_T(e),
/// bitwise, except that any NaN equals any NaN. NAN = false when e holds no NaN (a product of a
/// finite generated value and a finite coefficient): then only the bit patterns are compared.
#[inline(always)]
unsafe fn differ8<T: Elem, const NAN: bool>(e: __m256, have: *const T) -> u32 {
    match T::DTYPE {
        DType::F32 => {
            let h = _mm256_loadu_si256(have as *const __m256i);
            let mut ok = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_castps_si256(e), h));
            if NAN {
                let hf = _mm256_castsi256_ps(h);
                ok = _mm256_or_ps(ok, _mm256_and_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(e, e), _mm256_cmp_ps::<_CMP_UNORD_Q>(hf, hf)));
            }
            !(_mm256_movemask_ps(ok) as u32) & 0xff
        }
        DType::BF16 | DType::F16 => {
            let x = if NAN || T::DTYPE == DType::F16 {
                to_half8::<T>(e)
            } else {
                // bf16 round to nearest even of a non-NaN value
                let xi = _mm256_castps_si256(e);
                let r = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32::<16>(xi), _mm256_set1_epi32(1)));
                let b = _mm256_srli_epi32::<16>(_mm256_add_epi32(xi, r));
                _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
            };
            let h = _mm_loadu_si128(have as *const __m128i);
            let mut ok = _mm_cmpeq_epi16(x, h);
            if NAN {
                let abs = _mm_set1_epi16(0x7fff);
                let inf = _mm_set1_epi16(T::EXP_MASK as i16);
                ok = _mm_or_si128(ok, _mm_and_si128(_mm_cmpgt_epi16(_mm_and_si128(x, abs), inf), _mm_cmpgt_epi16(_mm_and_si128(h, abs), inf)));
            }
            // 16-bit lanes of all ones or zeros, packed to bytes: one mask bit per element
            !(_mm_movemask_epi8(_mm_packs_epi16(ok, _mm_setzero_si128())) as u32) & 0xff
        }
    }
}

/// Whether q * (unit * c) is the same f32 as (q * unit) * c for every integer q, so the expected
/// value takes one multiply instead of two: when unit * c is exact in f32 (unit is a power of two,
/// q * unit is exact: both are round(q * unit * c), one rounding of the same real), and for a
/// non-finite c (inf or NaN either way: q * unit is 0 exactly when q is, with q's sign).
#[inline]
pub fn fused_exact(unit: f32, c: f32) -> bool {
    !c.is_finite() || ((unit * c) as f64) == (unit as f64) * (c as f64)
}

/// Whether `vcvtneps2bf16` rounds every q * unit * c (q an integer below 2^24 in magnitude, c
/// finite) as dtype::f32_to_bf16_bits does. It is round to nearest even, but reads an f32
/// subnormal input as zero (tests::vcvtneps2bf16_against_f32_to_bf16_bits checks both over every
/// f32): so only where no product is an f32 subnormal, that is unit * |c| >= 2^-126 (the smallest
/// nonzero |q| is 1), or c = 0 (zeros only). A normal f32 rounds to a normal bf16 or to infinity
/// (the same exponent range), so no output is subnormal either.
#[inline]
pub fn bf16_hw_exact(unit: f32, c: f32) -> bool {
    c.is_finite() && (c == 0.0 || (unit as f64) * (c.abs() as f64) >= f32::MIN_POSITIVE as f64)
}

/// First k < have.len() where have[k] is not round_T(f32(value(start + k)) * c) (bitwise, any NaN
/// equals any NaN), value as in [`gen_fill`] (the same conditions; the special index is the
/// caller's): the regenerate, scale and compare loop of verifyScaled in one pass.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]; `path::KernelPath::detect` checks it);
/// 2 <= m <= 24.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn gen_scaled_first_difference<T: Elem>(key: u64, m: u32, unit: f32, start: u64, c: f32, have: &[T]) -> Option<usize> {
    let g = GenQ8::new(key, m, start);
    // a finite coefficient times a generated (finite) value is never NaN
    match (c.is_finite(), fused_exact(unit, c)) {
        (true, true) => first_difference_from::<T, GenQ8, false, true>(g, unit, unit * c, have),
        (true, false) => first_difference_from::<T, GenQ8, false, false>(g, unit, c, have),
        (false, _) => first_difference_from::<T, GenQ8, true, true>(g, unit, unit * c, have),
    }
}

/// [`gen_scaled_first_difference`] with the AVX-512 generator (the same index).
///
/// # Safety
/// As [`gen_scaled_first_difference`], and the CPU must support AVX-512 F, DQ, BW and VL
/// ([`wide_available`]).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
pub unsafe fn gen_scaled_first_difference_wide<T: Elem>(key: u64, m: u32, unit: f32, start: u64, c: f32, have: &[T]) -> Option<usize> {
    let g = GenQ16::new(key, m, start);
    if !c.is_finite() {
        return first_difference_from::<T, GenQ16, true, true>(g, unit, unit * c, have);
    }
    let fused = fused_exact(unit, c);
    let (u, cv) = if fused { (unit, unit * c) } else { (unit, c) };
    if T::DTYPE == DType::BF16 && bf16_available() && bf16_hw_exact(unit, c) {
        // SAFETY: the CPU has AVX-512 BF16 (checked just above) beside what this function needs.
        return unsafe { first_difference_bf16_hw(g, u, cv, fused, have) };
    }
    if fused {
        first_difference_from_512::<T, true, false>(g, u, cv, have)
    } else {
        first_difference_from_512::<T, false, false>(g, u, cv, have)
    }
}

/// [`first_difference_from_512`] rounding to bf16 with `vcvtneps2bf16` (only where
/// [`bf16_hw_exact`] holds).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16")]
unsafe fn first_difference_bf16_hw<T: Elem>(g: GenQ16, u: f32, cv: f32, fused: bool, have: &[T]) -> Option<usize> {
    if fused {
        first_difference_from_512::<T, true, true>(g, u, cv, have)
    } else {
        first_difference_from_512::<T, false, true>(g, u, cv, have)
    }
}

/// The expected f32 values (before rounding to T) of 8 lanes of q: (q * u) * cv, or, FUSED (cv is
/// then unit * c, [`fused_exact`]), q * cv.
#[inline(always)]
unsafe fn expected8<const FUSED: bool>(q: __m256i, u: __m256, cv: __m256) -> __m256 {
    if FUSED {
        _mm256_mul_ps(_mm256_cvtepi32_ps(q), cv)
    } else {
        _mm256_mul_ps(scaled8(q, u), cv)
    }
}

/// Lane mask (bit j for element j of 16) of the elements at `have` that differ bitwise from
/// round_T(e), for e holding no NaN. HW: bf16 rounded by `vcvtneps2bf16` (AVX-512 BF16; only where
/// [`bf16_hw_exact`] holds, and only called from a function that enables it).
#[inline(always)]
unsafe fn differ16<T: Elem, const HW: bool>(e: __m512, have: *const T) -> u32 {
    let x = _mm512_castps_si512(e);
    (match T::DTYPE {
        DType::F32 => _mm512_cmpneq_epi32_mask(x, _mm512_loadu_si512(have as *const __m512i)) as u32,
        DType::BF16 if HW => {
            let b: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(e));
            _mm256_cmpneq_epi16_mask(b, _mm256_loadu_si256(have as *const __m256i)) as u32
        }
        DType::BF16 => {
            // round to nearest even (no NaN to keep), compared as 32-bit lanes
            let r = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(1)));
            let b = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, r));
            _mm512_cmpneq_epi32_mask(b, _mm512_cvtepu16_epi32(_mm256_loadu_si256(have as *const __m256i))) as u32
        }
        DType::F16 => {
            let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(e);
            _mm256_cmpneq_epi16_mask(h, _mm256_loadu_si256(have as *const __m256i)) as u32
        }
    }) as u32
}

/// [`first_difference_from`] for a finite coefficient on 16 lanes at once (AVX-512 F), the rest of
/// fewer than 16 by first_difference_from. FUSED: cv is unit * c ([`expected8`]).
#[inline(always)]
unsafe fn first_difference_from_512<T: Elem, const FUSED: bool, const HW: bool>(mut g: GenQ16, unit: f32, cv: f32, have: &[T]) -> Option<usize> {
    let (u, c) = (_mm512_set1_ps(unit), _mm512_set1_ps(cv));
    let n = have.len();
    let p = have.as_ptr();
    let mut k = 0;
    while k + 16 <= n {
        prefetch_ahead::<T, _MM_HINT_T0>(p, k);
        let q = _mm512_cvtepi32_ps(g.next16_512());
        let e = if FUSED { _mm512_mul_ps(q, c) } else { _mm512_mul_ps(_mm512_mul_ps(q, u), c) };
        let d = differ16::<T, HW>(e, p.add(k));
        if d != 0 {
            return Some(k + d.trailing_zeros() as usize);
        }
        k += 16;
    }
    if k < n {
        return first_difference_from::<T, GenQ16, false, FUSED>(g, unit, cv, &have[k..]).map(|j| k + j);
    }
    None
}

/// The AVX2 loop of [`gen_scaled_first_difference`]: NAN when the expected values may be NaN (a
/// non-finite coefficient); FUSED: cv is unit * c ([`expected8`]).
#[inline(always)]
unsafe fn first_difference_from<T: Elem, G: QStream, const NAN: bool, const FUSED: bool>(mut g: G, unit: f32, cv: f32, have: &[T]) -> Option<usize> {
    let (u, cv) = (_mm256_set1_ps(unit), _mm256_set1_ps(cv));
    let n = have.len();
    let p = have.as_ptr();
    let mut k = 0;
    while k + 16 <= n {
        prefetch_ahead::<T, _MM_HINT_T0>(p, k);
        let (q0, q1) = g.next16();
        let (d0, d1) = (differ8::<T, NAN>(expected8::<FUSED>(q0, u, cv), p.add(k)), differ8::<T, NAN>(expected8::<FUSED>(q1, u, cv), p.add(k + 8)));
        if (d0 | d1) != 0 {
            return Some(k + if d0 != 0 { d0.trailing_zeros() as usize } else { 8 + d1.trailing_zeros() as usize });
        }
        k += 16;
    }
    if k < n {
        let (q0, q1) = g.next16();
        for q in [q0, q1] {
            if k >= n {
                break;
            }
            let r = (n - k).min(8);
            let mut buf = [T::default(); 8];
            std::ptr::copy_nonoverlapping(p.add(k), buf.as_mut_ptr(), r);
            let d = differ8::<T, NAN>(expected8::<FUSED>(q, u, cv), buf.as_ptr()) & ((1u32 << r) - 1);
            if d != 0 {
                return Some(k + d.trailing_zeros() as usize);
            }
            k += r;
        }
    }
    None
}

/// Sum over i in [lo, hi) of |q(i)| (P2 = false) or q(i)^2 (P2 = true), exact (q as in [`GenQ8`]).
///
/// # Safety
/// The CPU must support AVX2 ([`available`]; `path::KernelPath::detect` checks it); 2 <= m <= 24.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn gen_q_pow_sum<const P2: bool>(key: u64, m: u32, lo: u64, hi: u64) -> u128 {
    q_pow_sum_from::<GenQ8, P2>(GenQ8::new(key, m, lo), key, m, lo, hi)
}

/// [`gen_q_pow_sum`] with the AVX-512 generator (the same sum).
///
/// # Safety
/// As [`gen_q_pow_sum`], and the CPU must support AVX-512 F and DQ ([`wide_available`]).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
pub unsafe fn gen_q_pow_sum_wide<const P2: bool>(key: u64, m: u32, lo: u64, hi: u64) -> u128 {
    q_pow_sum_from::<GenQ16, P2>(GenQ16::new(key, m, lo), key, m, lo, hi)
}

/// |q| (P2 = false) or q^2 (P2 = true) of 8 i32 lanes, two by two summed into 4 u64 lanes: each lane
/// takes 4 terms below 2^46 per 16 indices.
#[inline(always)]
unsafe fn pow_terms<const P2: bool>(q: __m256i) -> __m256i {
    if P2 {
        let odd = _mm256_srli_epi64::<32>(q);
        _mm256_add_epi64(_mm256_mul_epi32(q, q), _mm256_mul_epi32(odd, odd))
    } else {
        let a = _mm256_abs_epi32(q);
        _mm256_add_epi64(_mm256_and_si256(a, _mm256_set1_epi64x(0xffff_ffff)), _mm256_srli_epi64::<32>(a))
    }
}

#[inline(always)]
unsafe fn q_pow_sum_from<G: QStream, const P2: bool>(mut g: G, key: u64, m: u32, lo: u64, hi: u64) -> u128 {
    let n = hi - lo;
    let mut total: u128 = 0;
    let mut done = 0u64;
    // per flush: at most 2^14 steps of 16 indices, so each lane takes < 2^16 terms: below 2^62
    while done + 16 <= n {
        let steps = ((n - done) / 16).min(1 << 14);
        let mut acc = _mm256_setzero_si256();
        for _ in 0..steps {
            let (q0, q1) = g.next16();
            acc = _mm256_add_epi64(acc, _mm256_add_epi64(pow_terms::<P2>(q0), pow_terms::<P2>(q1)));
        }
        let mut l = [0u64; 4];
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, acc);
        total += l.iter().map(|&x| x as u128).sum::<u128>();
        done += steps * 16;
    }
    for i in lo + done..hi {
        let q = crate::genq::q(key, m, i).unsigned_abs() as u128;
        total += if P2 { q * q } else { q };
    }
    total
}

/// max over i in [lo, hi) of |q(i)| (0 for an empty range).
///
/// # Safety
/// The CPU must support AVX2 ([`available`]; `path::KernelPath::detect` checks it); 2 <= m <= 24.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn gen_q_abs_max(key: u64, m: u32, lo: u64, hi: u64) -> u64 {
    q_abs_max_from(GenQ8::new(key, m, lo), key, m, lo, hi)
}

/// [`gen_q_abs_max`] with the AVX-512 generator (the same maximum).
///
/// # Safety
/// As [`gen_q_abs_max`], and the CPU must support AVX-512 F and DQ ([`wide_available`]).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
pub unsafe fn gen_q_abs_max_wide(key: u64, m: u32, lo: u64, hi: u64) -> u64 {
    q_abs_max_from(GenQ16::new(key, m, lo), key, m, lo, hi)
}

#[inline(always)]
unsafe fn q_abs_max_from<G: QStream>(mut g: G, key: u64, m: u32, lo: u64, hi: u64) -> u64 {
    let n = hi - lo;
    let mut acc = _mm256_setzero_si256();
    let mut done = 0u64;
    while done + 16 <= n {
        let (q0, q1) = g.next16();
        acc = _mm256_max_epu32(acc, _mm256_max_epu32(_mm256_abs_epi32(q0), _mm256_abs_epi32(q1)));
        done += 16;
    }
    let mut l = [0u32; 8];
    _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, acc);
    let mut mx = l.iter().copied().max().unwrap_or(0) as u64;
    for i in lo + done..hi {
        mx = mx.max(crate::genq::q(key, m, i).unsigned_abs());
    }
    mx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::f32_to_bf16_bits;

    /// `vcvtneps2bf16` against dtype::f32_to_bf16_bits over every f32 bit pattern: the same bits for
    /// every zero, normal and infinity (what [`bf16_hw_exact`] lets it see), and an f32 subnormal
    /// read as zero (why it must not see one).
    #[test]
    fn vcvtneps2bf16_against_f32_to_bf16_bits() {
        if !bf16_available() {
            eprintln!("no AVX-512 BF16 here: vcvtneps2bf16 not checked");
            return;
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
        unsafe fn hw16(x: &[u32; 16]) -> [u16; 16] {
            let v = _mm512_loadu_ps(x.as_ptr() as *const f32);
            std::mem::transmute(_mm512_cvtneps_pbh(v))
        }
        let (mut subnormal_differs, mut x) = (0u64, [0u32; 16]);
        for hi in 0..(1u32 << 28) {
            for (j, b) in x.iter_mut().enumerate() {
                *b = (hi << 4) | j as u32;
            }
            // SAFETY: bf16_available() checked the CPU above.
            let h = unsafe { hw16(&x) };
            for j in 0..16 {
                let f = f32::from_bits(x[j]);
                if f.is_nan() {
                    continue;
                }
                let sw = f32_to_bf16_bits(f);
                if f.is_subnormal() {
                    subnormal_differs += (h[j] != sw) as u64;
                    assert_eq!(h[j] & 0x7fff, 0, "{:#x}: a subnormal is read as a signed zero", x[j]);
                } else {
                    assert_eq!(h[j], sw, "{:#x}", x[j]);
                }
            }
        }
        assert!(subnormal_differs > 0);
        // the guard: no product below 2^-126 in magnitude
        assert!(bf16_hw_exact(1.0, 2f32.powi(-126)) && !bf16_hw_exact(0.5, 2f32.powi(-126)));
        assert!(bf16_hw_exact(2f32.powi(-140), 0.0) && bf16_hw_exact(2f32.powi(-140), 2f32.powi(14)));
        assert!(!bf16_hw_exact(1.0, f32::INFINITY) && !bf16_hw_exact(1.0, f32::NAN));
    }

    #[test]
    fn fused_exact_only_when_unit_times_c_is_exact() {
        assert!(fused_exact(2f32.powi(-7), 0.3) && fused_exact(1.0, f32::NAN) && fused_exact(2f32.powi(-20), -0.0));
        assert!(!fused_exact(2f32.powi(-140), 0.3)); // unit * c subnormal: rounded
        assert!(!fused_exact(2f32.powi(100), 2f32.powi(100))); // overflows
        assert!(fused_exact(2f32.powi(-149), 2f32.powi(20)));
    }
}
