//! SPEC section 5: the gradient generator, and blocks (local shards) of a global tensor.

use std::mem::MaybeUninit;

use crate::bail;
use crate::dtype::{pow2, DType, Elem};
use crate::error::{Error, Result};
pub use crate::genq::{fnv1a64, splitmix64};
use crate::kernels;
use crate::path::KernelPath;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GenMode {
    Gen,
    Ones,
    Zeros,
    /// -0 everywhere: the identity of float addition (`x + -0 == x` for every x, -0 included), so a
    /// zero partial that a finalize sum adds keeps the sign of a -0 gradient, as +0 would not.
    NegZeros,
}

impl GenMode {
    pub const NAMES: &'static str = "gen, ones, zeros, neg-zeros";
    pub fn parse(s: &str) -> Option<GenMode> {
        match s {
            "gen" => Some(GenMode::Gen),
            "ones" => Some(GenMode::Ones),
            "zeros" => Some(GenMode::Zeros),
            "neg-zeros" => Some(GenMode::NegZeros),
            _ => None,
        }
    }
}

/// Allowed range of the gradient scale exponent `e` (keeps q * 2^(e-m+1) exact in f64).
pub const EXP_MIN: i32 = -900;
pub const EXP_MAX: i32 = 900;

/// The generator parameters of one logical parameter at one step.
#[derive(Clone, Debug, PartialEq)]
pub struct GenSpec {
    pub seed: u64,
    pub step: u32,
    pub name: String,
    /// Selects m (24 / 8 / 11).
    pub dtype: DType,
    pub exp: i32,
    pub mode: GenMode,
    /// (global flat index, value): replaces the generated value at that index.
    pub special: Option<(u64, f64)>,
    /// The `finalize` regime's sums (SPEC section 5): when not empty, element i is the float32 sum,
    /// in this order, of the values generated under each of these names (`name` is then only a
    /// label), rounded once to `dtype`. Empty: the plain generator under `name`.
    pub sum_of: Vec<String>,
}

/// At most this many names in a `sum_of` (a tie group's copies).
pub const SUM_OF_MAX: usize = 64;

impl GenSpec {
    pub fn new(seed: u64, step: u32, name: &str, dtype: DType, exp: i32, mode: GenMode) -> GenSpec {
        GenSpec { seed, step, name: name.to_string(), dtype, exp, mode, special: None, sum_of: Vec::new() }
    }
    pub fn validate(&self) -> Result<()> {
        if self.exp < EXP_MIN || self.exp > EXP_MAX {
            bail!("exp: {} is out of range [{EXP_MIN}, {EXP_MAX}]", self.exp);
        }
        if self.sum_of.len() > SUM_OF_MAX {
            bail!("sumOf: {} names, more than {SUM_OF_MAX}", self.sum_of.len());
        }
        Ok(())
    }
    /// The spec of one summand of a `sum_of` spec: the plain generator under `name`, no special.
    pub fn part(&self, name: &str) -> GenSpec {
        GenSpec { seed: self.seed, step: self.step, name: name.to_string(), dtype: self.dtype, exp: self.exp, mode: self.mode, special: None, sum_of: Vec::new() }
    }
    /// key = splitmix64(seed ^ splitmix64(step ^ fnv1a64(name)))
    pub fn key(&self) -> u64 {
        crate::genq::key(self.seed, self.step, &self.name)
    }
    pub fn m(&self) -> u32 {
        self.dtype.gen_m()
    }
    /// Exponent of the generator's unit: value = q * 2^(e - m + 1).
    pub fn unit_exp(&self) -> i32 {
        self.exp - self.m() as i32 + 1
    }
    /// q for flat index i (an integer in [-2^(m-1), 2^(m-1))).
    #[inline(always)]
    pub fn q(key: u64, m: u32, i: u64) -> i64 {
        crate::genq::q(key, m, i)
    }
    /// The exact real value of index i before rounding to any dtype (special index ignored).
    pub fn raw_value(&self, key: u64, i: u64) -> f64 {
        match self.mode {
            GenMode::Gen => Self::q(key, self.m(), i) as f64 * pow2(self.unit_exp()),
            GenMode::Ones => 1.0,
            GenMode::Zeros => 0.0,
            GenMode::NegZeros => -0.0,
        }
    }
    /// Whether every generated value is exactly representable in `dt` (so no rounding happens).
    pub fn exact_in(&self, dt: DType) -> bool {
        self.m() <= dt.precision() && self.unit_exp() >= dt.min_sub_exp() && self.exp <= dt.emax()
    }

    /// dst[k] = value(start + k) rounded to T, with the special value applied when it falls inside.
    /// The portable reference of the generator (`fill_range_with` runs the SIMD one when it can).
    pub fn fill_range<T: Elem>(&self, key: u64, start: u64, dst: &mut [T]) {
        self.fill_range_by(key, start, dst.len(), |k, v| dst[k] = v);
    }

    /// The portable generator: put(k, value(start + k)) for every k < n, once each, in order, then
    /// put(k, special) again when the special index falls inside.
    #[inline(always)]
    fn fill_range_by<T: Elem>(&self, key: u64, start: u64, n: usize, mut put: impl FnMut(usize, T)) {
        if !self.sum_of.is_empty() {
            // finalize: each summand generated in T (exact for its e), added in f32 in list order,
            // rounded once to T
            let mut acc = vec![0f32; n];
            let mut part = vec![T::default(); n];
            for name in &self.sum_of {
                let s = self.part(name);
                s.fill_range_with(KernelPath::detect(), s.key(), start, &mut part);
                for (a, x) in acc.iter_mut().zip(&part) {
                    *a += x.to_f32();
                }
            }
            acc.iter().enumerate().for_each(|(k, &a)| put(k, T::from_f32(a)));
        } else {
            self.fill_range_plain(key, start, n, &mut put);
        }
        if let Some(k) = self.special_in(start, n) {
            put(k, T::from_f64(self.special.expect("inside").1));
        }
    }

    #[inline(always)]
    fn fill_range_plain<T: Elem>(&self, key: u64, start: u64, n: usize, mut put: impl FnMut(usize, T)) {
        match self.mode {
            GenMode::Zeros => (0..n).for_each(|k| put(k, T::from_bits(0))),
            GenMode::NegZeros => (0..n).for_each(|k| put(k, T::from_f32(-0.0))),
            GenMode::Ones => (0..n).for_each(|k| put(k, T::from_f32(1.0))),
            GenMode::Gen => {
                let m = self.m();
                if self.exact_in(T::DTYPE) {
                    // Exact: q as f32 is exact, the product is the representable value itself.
                    let unit = pow2(self.unit_exp()) as f32;
                    for k in 0..n {
                        let q = Self::q(key, m, start.wrapping_add(k as u64));
                        put(k, T::from_f32(q as f32 * unit));
                    }
                } else {
                    let unit = pow2(self.unit_exp());
                    for k in 0..n {
                        let q = Self::q(key, m, start.wrapping_add(k as u64));
                        put(k, T::from_f64(q as f64 * unit));
                    }
                }
            }
        }
    }

    /// Offset of the special index in [start, start + n), if it falls there.
    #[inline]
    fn special_in(&self, start: u64, n: usize) -> Option<usize> {
        let (idx, _) = self.special?;
        (idx >= start && idx - start < n as u64).then(|| (idx - start) as usize)
    }

    /// Whether `path` runs the fused SIMD kernels (verify) for values stored in T: a SIMD fill
    /// (`simd_fill_for`) whose values are exact in T too (every regime of the harness).
    #[inline]
    pub fn simd_for<T: Elem>(&self, path: KernelPath) -> bool {
        self.simd_fill_for(path) && self.exact_in(T::DTYPE)
    }

    /// Whether `path` runs the SIMD generator for a fill: mode gen with every value exact in f32 (so
    /// f32(q) * unit is the exact value, rounded once to the tensor's dtype by the store).
    #[inline]
    pub fn simd_fill_for(&self, path: KernelPath) -> bool {
        cfg!(target_arch = "x86_64") && path.is_simd() && self.mode == GenMode::Gen && self.exact_in(DType::F32) && self.sum_of.is_empty()
    }

    /// `fill_range` on the given kernel path (bitwise the same values on every path).
    pub fn fill_range_with<T: Elem>(&self, path: KernelPath, key: u64, start: u64, dst: &mut [T]) {
        // SAFETY: &mut [T] and &mut [MaybeUninit<T>] have the same layout, and fill_range_uninit_with
        // only ever writes initialized values of T into it.
        let d = unsafe { &mut *(dst as *mut [T] as *mut [MaybeUninit<T>]) };
        self.fill_range_uninit_with(path, key, start, d);
    }

    /// `fill_range_with` into memory that may be uninitialized: writes every element of dst.
    pub fn fill_range_uninit_with<T: Elem>(&self, path: KernelPath, key: u64, start: u64, dst: &mut [MaybeUninit<T>]) {
        #[cfg(target_arch = "x86_64")]
        if self.simd_fill_for(path) {
            let unit = pow2(self.unit_exp()) as f32;
            let (m, out, n, round) = (self.m(), dst.as_mut_ptr() as *mut T, dst.len(), !self.exact_in(T::DTYPE));
            // SAFETY: simd_for: path.is_simd(), which only KernelPath::detect sets on a CPU with AVX2
            // and F16C (is_wide: and AVX-512 F and DQ); dst is valid for writes of n elements; m is 8,
            // 11 or 24.
            unsafe {
                if path.is_wide() {
                    crate::simd::gen_fill_wide(key, m, unit, start, out, n, round)
                } else {
                    crate::simd::gen_fill(key, m, unit, start, out, n, round)
                }
            };
            if let Some(k) = self.special_in(start, dst.len()) {
                dst[k].write(T::from_f64(self.special.expect("inside").1));
            }
            return;
        }
        let _ = path;
        self.fill_range_by(key, start, dst.len(), |k, v| {
            dst[k].write(v);
        });
    }

    /// round_T(f32(value(i)) * c), the element verifyScaled expects at global index i (special
    /// value included), as `kernels::scale` computes it.
    pub fn scaled_value<T: Elem>(&self, key: u64, i: u64, c: f32) -> T {
        let mut one = [T::default()];
        self.fill_range(key, i, &mut one);
        T::from_f32(one[0].to_f32() * c)
    }

    /// First k where have[k] is not bitwise `scaled_value(start + k)` (any NaN equals any NaN): the
    /// portable reference (regenerate a chunk, scale it, compare).
    pub fn scaled_first_difference<T: Elem>(&self, key: u64, start: u64, c: f32, have: &[T]) -> Option<usize> {
        self.scaled_first_difference_by(start, c, have, |s, at, b| s.fill_range(key, at, b))
    }

    /// `scaled_first_difference` with `fill(self, global index, chunk)` regenerating each chunk.
    fn scaled_first_difference_by<T: Elem>(&self, start: u64, c: f32, have: &[T], fill: impl Fn(&GenSpec, u64, &mut [T])) -> Option<usize> {
        const CH: usize = 1 << 12;
        let mut buf: Vec<T> = vec![T::default(); CH.min(have.len())];
        for (ci, h) in have.chunks(CH).enumerate() {
            let b = &mut buf[..h.len()];
            let at = ci * CH;
            fill(self, start.wrapping_add(at as u64), b);
            kernels::scale(b, c);
            if let Some(j) = kernels::first_difference(b, h) {
                return Some(at + j);
            }
        }
        None
    }

    /// `scaled_first_difference` on the given kernel path (the same index on every path): with
    /// SIMD, one fused pass of regenerate, scale and compare.
    pub fn scaled_first_difference_with<T: Elem>(&self, path: KernelPath, key: u64, start: u64, c: f32, have: &[T]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if self.simd_for::<T>(path) {
            let (m, unit) = (self.m(), pow2(self.unit_exp()) as f32);
            let run = |from: usize, to: usize| {
                let (at, part) = (start.wrapping_add(from as u64), &have[from..to]);
                // SAFETY: as in fill_range_uninit_with (AVX2 and F16C checked by simd_for, AVX-512 by
                // is_wide; m <= 24).
                unsafe {
                    if path.is_wide() {
                        crate::simd::gen_scaled_first_difference_wide(key, m, unit, at, c, part)
                    } else {
                        crate::simd::gen_scaled_first_difference(key, m, unit, at, c, part)
                    }
                }
                .map(|j| from + j)
            };
            return match self.special_in(start, have.len()) {
                None => run(0, have.len()),
                Some(s) => run(0, s)
                    .or_else(|| (!kernels::same(self.scaled_value(key, start.wrapping_add(s as u64), c), have[s])).then_some(s))
                    .or_else(|| run(s + 1, have.len())),
            };
        }
        if self.simd_fill_for(path) {
            // values that round in T: the SIMD fill, then the portable scale and compare
            return self.scaled_first_difference_by(start, c, have, |s, at, b| s.fill_range_with(path, key, at, b));
        }
        self.scaled_first_difference(key, start, c, have)
    }

    /// Values of global indices [start, start+count) in this spec's own dtype, as f64 (exact).
    pub fn values(&self, start: u64, count: usize) -> Vec<f64> {
        let key = self.key();
        fn go<T: Elem>(s: &GenSpec, key: u64, start: u64, count: usize) -> Vec<f64> {
            let mut v = vec![T::default(); count];
            s.fill_range(key, start, &mut v);
            v.into_iter().map(|x| x.to_f64()).collect()
        }
        match self.dtype {
            DType::F32 => go::<f32>(self, key, start, count),
            DType::BF16 => go::<half::bf16>(self, key, start, count),
            DType::F16 => go::<half::f16>(self, key, start, count),
        }
    }
}

/// A hyper-rectangle of a global tensor (the local shard).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub global_shape: Vec<u64>,
    pub start: Vec<u64>,
    pub len: Vec<u64>,
}

impl Block {
    pub fn full(shape: &[u64]) -> Block {
        Block { global_shape: shape.to_vec(), start: vec![0; shape.len()], len: shape.to_vec() }
    }
    pub fn validate(&self) -> Result<()> {
        let d = self.global_shape.len();
        if self.start.len() != d || self.len.len() != d {
            bail!(
                "block: globalShape {:?}, start {:?} and len {:?} must have the same number of dimensions",
                self.global_shape,
                self.start,
                self.len
            );
        }
        for k in 0..d {
            let end = self.start[k].checked_add(self.len[k]);
            if end.is_none_or(|e| e > self.global_shape[k]) {
                bail!(
                    "block: dim {k}: start {} + len {} exceeds globalShape[{k}] = {} (globalShape {:?}, start {:?}, len {:?})",
                    self.start[k],
                    self.len[k],
                    self.global_shape[k],
                    self.global_shape,
                    self.start,
                    self.len
                );
            }
        }
        checked_numel(&self.global_shape).ok_or_else(|| {
            Error(format!("block: globalShape {:?} has more than 2^64 elements", self.global_shape))
        })?;
        Ok(())
    }
    pub fn numel(&self) -> u64 {
        self.len.iter().product()
    }
    pub fn global_numel(&self) -> u64 {
        self.global_shape.iter().product()
    }
    fn global_strides(&self) -> Vec<u64> {
        let d = self.global_shape.len();
        let mut s = vec![1u64; d];
        for k in (0..d.saturating_sub(1)).rev() {
            s[k] = s[k + 1] * self.global_shape[k + 1];
        }
        s
    }
    /// Calls f(local_start, global_start, n) for every contiguous run (row of the innermost dim),
    /// in local row-major order. Requires validate().
    pub fn for_each_row(&self, mut f: impl FnMut(usize, u64, usize)) {
        let d = self.global_shape.len();
        if d == 0 {
            f(0, 0, 1);
            return;
        }
        if self.len.contains(&0) {
            return;
        }
        let strides = self.global_strides();
        let inner = self.len[d - 1] as usize;
        let mut idx = vec![0u64; d - 1]; // odometer over the outer dims (relative to start)
        let mut local = 0usize;
        loop {
            let mut g = self.start[d - 1];
            for k in 0..d - 1 {
                g += (self.start[k] + idx[k]) * strides[k];
            }
            f(local, g, inner);
            local += inner;
            // advance
            let mut k = d - 1;
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < self.len[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
    }
    /// Local row-major index of global flat index g, if the block contains it.
    pub fn local_index_of(&self, g: u64) -> Option<u64> {
        if g >= self.global_numel() {
            return None;
        }
        let strides = self.global_strides();
        let mut rem = g;
        let mut local = 0u64;
        for (k, &stride) in strides.iter().enumerate() {
            let c = rem / stride;
            rem %= stride;
            if c < self.start[k] || c >= self.start[k] + self.len[k] {
                return None;
            }
            local = local * self.len[k] + (c - self.start[k]);
        }
        Some(local)
    }

    /// Fill a local tensor: element j = gen(global index of j).
    pub fn fill<T: Elem>(&self, spec: &GenSpec, dst: &mut [T]) {
        self.fill_with(KernelPath::PORTABLE, spec, dst);
    }

    /// `fill` on the given kernel path (bitwise the same on every path).
    pub fn fill_with<T: Elem>(&self, path: KernelPath, spec: &GenSpec, dst: &mut [T]) {
        // SAFETY: same layout; fill_uninit_with only writes initialized values of T.
        let d = unsafe { &mut *(dst as *mut [T] as *mut [MaybeUninit<T>]) };
        self.fill_uninit_with(path, spec, d);
    }

    /// `fill_with` into memory that may be uninitialized. Requires validate() and
    /// dst.len() == numel(); every element of dst is written (the rows partition the block), which
    /// is checked: a short count panics rather than leave an element unwritten.
    pub fn fill_uninit_with<T: Elem>(&self, path: KernelPath, spec: &GenSpec, dst: &mut [MaybeUninit<T>]) {
        assert_eq!(dst.len() as u64, self.numel(), "fill: the destination must have the block's element count");
        let key = spec.key();
        let nospecial = GenSpec { special: None, ..spec.clone() };
        let mut written = 0usize;
        self.for_each_row(|l, g, n| {
            assert_eq!(l, written, "fill: rows must be consecutive");
            nospecial.fill_range_uninit_with(path, key, g, &mut dst[l..l + n]);
            written += n;
        });
        assert_eq!(written, dst.len(), "fill: rows must cover the block");
        if let Some((idx, v)) = spec.special {
            if let Some(l) = self.local_index_of(idx) {
                dst[l as usize].write(T::from_f64(v));
            }
        }
    }
}

pub fn checked_numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_vectors() {
        assert_eq!(splitmix64(0), 0xE220A8397B1DCDAF);
        // second output of the splitmix64 sequence seeded with 0 (state advanced by the golden gamma)
        assert_eq!(splitmix64(0x9E3779B97F4A7C15), 0x6E789E6AA1B965F4);
        assert_eq!(fnv1a64(""), 0xCBF29CE484222325);
        assert_eq!(fnv1a64("a"), 0xAF63DC4C8601EC8C);
        assert_eq!(fnv1a64("foobar"), 0x85944171F73967E8);
    }

    #[test]
    fn key_and_values_by_hand() {
        let s = GenSpec::new(42, 3, "layers.0.w", DType::F32, 0, GenMode::Gen);
        let key = splitmix64(42 ^ splitmix64(3 ^ fnv1a64("layers.0.w")));
        assert_eq!(s.key(), key);
        let v = s.values(0, 5);
        for (i, &x) in v.iter().enumerate() {
            let bits = splitmix64(key.wrapping_add(i as u64));
            let q = (bits >> 40) as i64 - (1 << 23);
            assert_eq!(x, q as f64 * 2f64.powi(-23));
            assert!(x.abs() <= 1.0);
        }
        let b = GenSpec::new(42, 3, "layers.0.w", DType::BF16, 2, GenMode::Gen);
        let v = b.values(10, 3);
        for (k, &x) in v.iter().enumerate() {
            let bits = splitmix64(key.wrapping_add(10 + k as u64));
            let q = (bits >> 56) as i64 - (1 << 7);
            assert_eq!(x, q as f64 * 2f64.powi(2 - 8 + 1));
        }
    }

    #[test]
    fn special_and_modes() {
        let mut s = GenSpec::new(1, 0, "x", DType::F16, 0, GenMode::Ones);
        s.special = Some((2, f64::INFINITY));
        assert_eq!(s.values(0, 4), vec![1.0, 1.0, f64::INFINITY, 1.0]);
        s.mode = GenMode::Zeros;
        s.special = Some((1, f64::NAN));
        let v = s.values(0, 3);
        assert_eq!(v[0], 0.0);
        assert!(v[1].is_nan());
    }

    #[test]
    fn block_rows_and_local_index() {
        let b = Block { global_shape: vec![4, 5, 6], start: vec![1, 2, 3], len: vec![2, 2, 3] };
        b.validate().unwrap();
        let mut rows = vec![];
        b.for_each_row(|l, g, n| rows.push((l, g, n)));
        assert_eq!(rows, vec![(0, 30 + 12 + 3, 3), (3, 30 + 18 + 3, 3), (6, 60 + 12 + 3, 3), (9, 60 + 18 + 3, 3)]);
        assert_eq!(b.local_index_of(30 + 12 + 3), Some(0));
        assert_eq!(b.local_index_of(60 + 18 + 5), Some(11));
        assert_eq!(b.local_index_of(0), None);
        assert_eq!(b.local_index_of(120), None);
        let bad = Block { global_shape: vec![4], start: vec![3], len: vec![2] };
        assert!(bad.validate().unwrap_err().0.contains("exceeds"));
        let scalar = Block::full(&[]);
        let mut rows = vec![];
        scalar.for_each_row(|l, g, n| rows.push((l, g, n)));
        assert_eq!(rows, vec![(0, 0, 1)]);
    }

    #[test]
    fn block_fill_equals_global_values() {
        let s = GenSpec { special: Some((15, -7.5)), ..GenSpec::new(9, 1, "p", DType::F32, 1, GenMode::Gen) };
        let all = s.values(0, 4 * 6);
        let b = Block { global_shape: vec![4, 6], start: vec![1, 2], len: vec![3, 3] };
        let mut dst = vec![0f32; 9];
        b.fill(&s, &mut dst);
        for r in 0..3 {
            for c in 0..3 {
                assert_eq!(dst[r * 3 + c] as f64, all[(1 + r) * 6 + 2 + c]);
            }
        }
        assert_eq!(all[15], -7.5);
        assert_eq!(dst[b.local_index_of(15).unwrap() as usize], -7.5);
    }
}

/// The scalar model of the SIMD generators' per-lane tables and boundaries (genlanes/model.rs)
/// against the definition on every machine, and against the SIMD paths this CPU runs.
#[cfg(test)]
mod lane_model;

/// The SIMD generator (simd.rs, through the `_with` methods and KernelPath::detect) against the
/// portable reference: bitwise the same values and the same first mismatch for every dtype, e,
/// mode, special index, start and length.
#[cfg(test)]
mod simd_parity {
    use super::*;
    use half::{bf16, f16};

    /// The tests' own deterministic stream (also the lane model's: gen/lane_model.rs).
    pub(super) struct Rng(pub(super) u64);
    impl Rng {
        pub(super) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(1);
            splitmix64(self.0.wrapping_mul(0x2545_F491_4F6C_DD1D))
        }
        pub(super) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const SIMD: fn() -> KernelPath = KernelPath::cpu;
    /// Every SIMD path this CPU runs (the generator on AVX2, and on AVX-512 where present).
    fn simd_paths() -> Vec<KernelPath> {
        KernelPath::all_here().into_iter().filter(|p| p.is_simd()).collect()
    }

    fn random_spec(r: &mut Rng) -> GenSpec {
        let dtype = DType::ALL[r.below(3) as usize];
        // mostly exponents whose values are exact in every dtype, sometimes anything (rounding,
        // subnormals, overflow: the portable fallback inside the SIMD path)
        let exp = match r.below(6) {
            0 => r.below(1801) as i32 - 900,
            1 => r.below(300) as i32 - 150,
            2 => -(r.below(30) as i32),
            _ => r.below(9) as i32 - 4,
        };
        let mode = match r.below(10) {
            0 => GenMode::Ones,
            1 => GenMode::Zeros,
            _ => GenMode::Gen,
        };
        let name = format!("layers.{}.w{}", r.below(100), r.next() % 7);
        let mut s = GenSpec::new(r.next(), r.below(5) as u32, &name, dtype, exp, mode);
        if r.below(3) == 0 {
            let v = [f64::INFINITY, f64::NAN, -2.5, 1e300, -0.0][r.below(5) as usize];
            s.special = Some((r.below(300), v));
        }
        s
    }

    fn random_start(r: &mut Rng) -> u64 {
        match r.below(4) {
            0 => r.next(),                // anywhere, wrapping near 2^64 included
            1 => u64::MAX - r.below(100), // across the wrap
            _ => r.below(200),
        }
    }

    fn fill_both<T: Elem>(s: &GenSpec, start: u64, len: usize) {
        let key = s.key();
        let mut a = vec![T::from_bits(0x1234); len];
        s.fill_range_with(KernelPath::PORTABLE, key, start, &mut a);
        let bits = |v: &[T]| v.iter().map(|x| x.bits()).collect::<Vec<_>>();
        for path in simd_paths() {
            let mut b = vec![T::from_bits(0x4321); len];
            s.fill_range_with(path, key, start, &mut b);
            assert_eq!(bits(&a), bits(&b), "{s:?} start {start} len {len} {path:?}");
        }
        // and the portable path is the reference fill_range itself
        let mut c = vec![T::default(); len];
        s.fill_range(key, start, &mut c);
        assert_eq!(bits(&a), bits(&c));
    }

    #[test]
    fn simd_path_is_used_here() {
        // the tests below compare two different code paths only where the CPU has AVX2 + F16C
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
            assert!(SIMD().is_simd());
            assert!(GenSpec::new(1, 0, "w", DType::BF16, 0, GenMode::Gen).simd_for::<half::bf16>(SIMD()));
        }
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq") {
            assert!(SIMD().is_wide());
            assert_eq!(simd_paths(), vec![SIMD().without_wide(), SIMD()]);
        }
    }

    #[test]
    fn the_wide_generator_across_the_boundaries_of_its_tables() {
        // simd::GenQ16 takes x = key + gamma + i apart at multiples of 16 and of 2^30 (its tables
        // change with x >> 30) and wraps at 2^64: starts that put x just before each of them
        use crate::genq::GAMMA;
        for name in ["a", "layers.3.w"] {
            let s = GenSpec::new(5, 1, name, DType::F32, 0, GenMode::Gen);
            let key = s.key();
            for boundary in [0u64, 1 << 30, 7 << 30, 15 << 30, 16 << 30, 0x8000_0000_0000_0000] {
                for before in [0u64, 1, 5, 15, 16, 17, 100] {
                    let start = boundary.wrapping_sub(before).wrapping_sub(key).wrapping_sub(GAMMA);
                    fill_both::<f32>(&s, start, 300);
                    fill_both::<bf16>(&GenSpec { dtype: DType::BF16, ..s.clone() }, start, 300);
                }
            }
        }
    }

    #[test]
    fn fill_range_simd_equals_portable() {
        let mut r = Rng(1);
        for _ in 0..3000 {
            let s = random_spec(&mut r);
            let start = random_start(&mut r);
            let len = match r.below(3) {
                0 => r.below(40) as usize,
                1 => r.below(1000) as usize,
                _ => 8 * r.below(20) as usize + r.below(8) as usize,
            };
            fill_both::<f32>(&s, start, len);
            fill_both::<bf16>(&s, start, len);
            fill_both::<f16>(&s, start, len);
        }
    }

    #[test]
    fn fixed_vectors_on_the_simd_paths() {
        for path in simd_paths() {
            fixed_vectors_on(path);
        }
    }

    fn fixed_vectors_on(path: KernelPath) {
        let s = GenSpec::new(42, 3, "layers.0.w", DType::F32, 0, GenMode::Gen);
        let key = splitmix64(42 ^ splitmix64(3 ^ fnv1a64("layers.0.w")));
        let mut v = vec![0f32; 37];
        s.fill_range_with(path, key, 0, &mut v);
        for (i, &x) in v.iter().enumerate() {
            let bits = splitmix64(key.wrapping_add(i as u64));
            let q = (bits >> 40) as i64 - (1 << 23);
            assert_eq!(x as f64, q as f64 * 2f64.powi(-23), "{i}");
        }
        let b = GenSpec::new(42, 3, "layers.0.w", DType::BF16, 2, GenMode::Gen);
        let mut v = vec![bf16::ZERO; 21];
        b.fill_range_with(path, key, 10, &mut v);
        for (k, &x) in v.iter().enumerate() {
            let bits = splitmix64(key.wrapping_add(10 + k as u64));
            let q = (bits >> 56) as i64 - (1 << 7);
            assert_eq!(x.to_f64(), q as f64 * 2f64.powi(2 - 8 + 1), "{k}");
        }
        let h = GenSpec::new(42, 3, "layers.0.w", DType::F16, -3, GenMode::Gen);
        let mut v = vec![f16::ZERO; 19];
        h.fill_range_with(path, key, u64::MAX - 5, &mut v); // the index wraps mod 2^64
        for (k, &x) in v.iter().enumerate() {
            let bits = splitmix64(key.wrapping_add((u64::MAX - 5).wrapping_add(k as u64)));
            let q = (bits >> 53) as i64 - (1 << 10);
            assert_eq!(x.to_f64(), q as f64 * 2f64.powi(-3 - 11 + 1), "{k}");
        }
        // the special value on the SIMD path
        let mut s = GenSpec::new(1, 0, "x", DType::F32, 0, GenMode::Gen);
        s.special = Some((9, f64::INFINITY));
        let mut v = vec![0f32; 16];
        s.fill_range_with(path, s.key(), 3, &mut v);
        assert_eq!(v[6], f32::INFINITY);
        assert_eq!(v.iter().filter(|x| x.is_infinite()).count(), 1);
    }

    #[test]
    fn block_fill_simd_equals_portable() {
        let mut r = Rng(2);
        for _ in 0..400 {
            let mut s = random_spec(&mut r);
            let d = 1 + r.below(3) as usize;
            let shape: Vec<u64> = (0..d).map(|_| 1 + r.below(40)).collect();
            let start: Vec<u64> = shape.iter().map(|&n| r.below(n)).collect();
            let len: Vec<u64> = shape.iter().zip(&start).map(|(&n, &s)| 1 + r.below(n - s)).collect();
            let b = Block { global_shape: shape, start, len };
            b.validate().unwrap();
            if r.below(2) == 0 {
                // a special index inside the global tensor (maybe inside the block)
                s.special = Some((r.below(b.global_numel()), f64::NAN));
            }
            fn go<T: Elem>(b: &Block, s: &GenSpec) {
                let n = b.numel() as usize;
                let mut x = vec![T::default(); n];
                b.fill_with(KernelPath::PORTABLE, s, &mut x);
                for path in simd_paths() {
                    let mut y = vec![T::default(); n];
                    b.fill_with(path, s, &mut y);
                    assert!(x.iter().zip(&y).all(|(a, b)| a.bits() == b.bits()), "{s:?} {b:?} {path:?}");
                    let mut u: Vec<T> = Vec::with_capacity(n);
                    b.fill_uninit_with(path, s, &mut u.spare_capacity_mut()[..n]);
                    // SAFETY: fill_uninit_with wrote all n elements.
                    unsafe { u.set_len(n) };
                    assert!(x.iter().zip(&u).all(|(a, b)| a.bits() == b.bits()));
                }
            }
            go::<f32>(&b, &s);
            go::<bf16>(&b, &s);
            go::<f16>(&b, &s);
        }
    }

    fn coef(r: &mut Rng) -> f32 {
        match r.below(12) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => 0.0,
            3 => -0.0,
            4 => 1.0,
            5 => 2f32.powi(100),  // overflow in bf16/f16
            6 => 2f32.powi(-120), // subnormal results
            7 => f32::from_bits(r.next() as u32), // anything
            8 => 1.0 + 2f32.powi(-8), // ties in bf16
            9 => 1.0 + 2f32.powi(-11), // ties in f16
            _ => (r.below(1 << 24) as f32) * 2f32.powi(-24),
        }
    }

    fn verify_both<T: Elem>(r: &mut Rng, s: &GenSpec, start: u64, len: usize, c: f32) {
        let key = s.key();
        // what a correct scale_ leaves: the portable regenerate-and-scale
        let mut have = vec![T::default(); len];
        s.fill_range(key, start, &mut have);
        crate::kernels::scale(&mut have, c);
        let check = |have: &[T]| {
            let a = s.scaled_first_difference_with(KernelPath::PORTABLE, key, start, c, have);
            for path in simd_paths() {
                let b = s.scaled_first_difference_with(path, key, start, c, have);
                assert_eq!(a, b, "{s:?} start {start} len {len} c {c:e} {path:?}");
            }
            // the portable path is the plain reference, and the index is a real difference
            assert_eq!(a, s.scaled_first_difference(key, start, c, have));
            if let Some(j) = a {
                assert!(!crate::kernels::same(s.scaled_value::<T>(key, start.wrapping_add(j as u64), c), have[j]));
            }
            a
        };
        assert_eq!(check(&have), None);
        if len == 0 {
            return;
        }
        // one to three changed elements: bit flips, a NaN, a NaN with another payload, signed zeros
        let mut bad = have.clone();
        for _ in 0..1 + r.below(3) {
            let j = r.below(len as u64) as usize;
            let x = bad[j].bits();
            bad[j] = match r.below(5) {
                0 => T::from_bits(x ^ (1 << r.below(8 * T::DTYPE.size() as u64))),
                1 => T::from_f32(f32::NAN),
                2 => T::from_bits(T::EXP_MASK | 1 | (x & !T::ABS_MASK)),
                3 => T::from_bits(x ^ (T::ABS_MASK + 1)), // the sign
                _ => T::from_f32(0.0),
            };
        }
        check(&bad);
    }

    #[test]
    fn verify_simd_equals_portable() {
        let mut r = Rng(3);
        for _ in 0..3000 {
            let s = random_spec(&mut r);
            let start = random_start(&mut r);
            let len = match r.below(3) {
                0 => r.below(40) as usize,
                1 => r.below(3000) as usize,
                _ => 16 * r.below(20) as usize + r.below(16) as usize,
            };
            let c = coef(&mut r);
            verify_both::<f32>(&mut r, &s, start, len, c);
            verify_both::<bf16>(&mut r, &s, start, len, c);
            verify_both::<f16>(&mut r, &s, start, len, c);
        }
    }

    #[test]
    fn nan_payloads_and_signed_zeros() {
        // a NaN expected (coef NaN) equals any stored NaN; +0 and -0 differ
        let s = GenSpec::new(5, 0, "z", DType::BF16, 0, GenMode::Gen);
        let key = s.key();
        for path in KernelPath::all_here() {
            let have = vec![bf16::from_bits(0x7fc1); 40];
            assert_eq!(s.scaled_first_difference_with(path, key, 0, f32::NAN, &have), None);
            let mut have = vec![bf16::ZERO; 40];
            s.fill_range(key, 0, &mut have);
            crate::kernels::scale(&mut have, -0.0);
            assert_eq!(s.scaled_first_difference_with(path, key, 0, -0.0, &have), None);
            let j = have.iter().position(|x| x.bits() == 0x8000).unwrap();
            have[j] = bf16::ZERO;
            assert_eq!(s.scaled_first_difference_with(path, key, 0, -0.0, &have), Some(j));
        }
    }
}

/// The finalize regime's `sum_of` specs: the f32 sum of the summands in order, rounded once.
#[cfg(test)]
mod sum_of {
    use super::*;
    use half::bf16;

    #[test]
    fn sum_of_is_the_f32_sum_rounded_once() {
        let mut s = GenSpec::new(7, 2, "label", DType::BF16, -1, GenMode::Gen);
        s.sum_of = vec!["a.w".into(), "b.w".into()];
        let (a, b) = (s.part("a.w"), s.part("b.w"));
        let (va, vb) = (a.values(0, 300), b.values(0, 300));
        for path in KernelPath::all_here() {
            let mut got = vec![bf16::ZERO; 300];
            s.fill_range_with(path, s.key(), 0, &mut got);
            for k in 0..300 {
                let want = bf16::from_f32(va[k] as f32 + vb[k] as f32);
                assert_eq!(got[k].to_bits(), want.to_bits(), "{k}");
            }
        }
        // one name: the plain generator under that name
        let mut one = GenSpec::new(7, 2, "label", DType::F32, -1, GenMode::Gen);
        one.sum_of = vec!["a.w".into()];
        let mut x = vec![0f32; 50];
        one.fill_range_with(KernelPath::detect(), one.key(), 10, &mut x);
        let fa = GenSpec { dtype: DType::F32, ..a.clone() }.values(10, 50);
        assert!(x.iter().zip(&fa).all(|(&g, &w)| g as f64 == w));
        // and a scaled check finds a changed element
        let c = 0.3f32;
        let mut have = vec![0f32; 50];
        one.fill_range(0, 10, &mut have);
        crate::kernels::scale(&mut have, c);
        assert_eq!(one.scaled_first_difference_with(KernelPath::detect(), 0, 10, c, &have), None);
        have[7] = -have[7] + 1.0;
        assert_eq!(one.scaled_first_difference_with(KernelPath::detect(), 0, 10, c, &have), Some(7));
        assert!(GenSpec { sum_of: vec!["x".into(); SUM_OF_MAX + 1], ..one }.validate().is_err());
    }
}
