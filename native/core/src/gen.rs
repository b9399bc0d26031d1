//! SPEC section 5: the gradient generator, and blocks (local shards) of a global tensor.

use crate::dtype::{pow2, DType, Elem};
use crate::{bail, Result};

/// splitmix64 finalizer as written in SPEC section 5 (all arithmetic mod 2^64).
#[inline(always)]
pub fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a 64 over the UTF-8 bytes of `name`.
pub fn fnv1a64(name: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in name.as_bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GenMode {
    Gen,
    Ones,
    Zeros,
}

impl GenMode {
    pub const NAMES: &'static str = "gen, ones, zeros";
    pub fn parse(s: &str) -> Option<GenMode> {
        match s {
            "gen" => Some(GenMode::Gen),
            "ones" => Some(GenMode::Ones),
            "zeros" => Some(GenMode::Zeros),
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
}

impl GenSpec {
    pub fn new(seed: u64, step: u32, name: &str, dtype: DType, exp: i32, mode: GenMode) -> GenSpec {
        GenSpec { seed, step, name: name.to_string(), dtype, exp, mode, special: None }
    }
    pub fn validate(&self) -> Result<()> {
        if self.exp < EXP_MIN || self.exp > EXP_MAX {
            bail!("exp: {} is out of range [{EXP_MIN}, {EXP_MAX}]", self.exp);
        }
        Ok(())
    }
    /// key = splitmix64(seed ^ splitmix64(step ^ fnv1a64(name)))
    pub fn key(&self) -> u64 {
        splitmix64(self.seed ^ splitmix64(self.step as u64 ^ fnv1a64(&self.name)))
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
        let bits = splitmix64(key.wrapping_add(i));
        (bits >> (64 - m)) as i64 - (1i64 << (m - 1))
    }
    /// The exact real value of index i before rounding to any dtype (special index ignored).
    pub fn raw_value(&self, key: u64, i: u64) -> f64 {
        match self.mode {
            GenMode::Gen => Self::q(key, self.m(), i) as f64 * pow2(self.unit_exp()),
            GenMode::Ones => 1.0,
            GenMode::Zeros => 0.0,
        }
    }
    /// Whether every generated value is exactly representable in `dt` (so no rounding happens).
    pub fn exact_in(&self, dt: DType) -> bool {
        self.m() <= dt.precision() && self.unit_exp() >= dt.min_sub_exp() && self.exp <= dt.emax()
    }

    /// dst[k] = value(start + k) rounded to T, with the special value applied when it falls inside.
    pub fn fill_range<T: Elem>(&self, key: u64, start: u64, dst: &mut [T]) {
        match self.mode {
            GenMode::Zeros => dst.fill(T::from_bits(0)),
            GenMode::Ones => dst.fill(T::from_f32(1.0)),
            GenMode::Gen => {
                let m = self.m();
                if self.exact_in(T::DTYPE) {
                    // Exact: q as f32 is exact, the product is the representable value itself.
                    let unit = pow2(self.unit_exp()) as f32;
                    for (k, d) in dst.iter_mut().enumerate() {
                        let q = Self::q(key, m, start.wrapping_add(k as u64));
                        *d = T::from_f32(q as f32 * unit);
                    }
                } else {
                    let unit = pow2(self.unit_exp());
                    for (k, d) in dst.iter_mut().enumerate() {
                        let q = Self::q(key, m, start.wrapping_add(k as u64));
                        *d = T::from_f64(q as f64 * unit);
                    }
                }
            }
        }
        if let Some((idx, v)) = self.special {
            if idx >= start && idx - start < dst.len() as u64 {
                dst[(idx - start) as usize] = T::from_f64(v);
            }
        }
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
            crate::Error(format!("block: globalShape {:?} has more than 2^64 elements", self.global_shape))
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
        let key = spec.key();
        let nospecial = GenSpec { special: None, ..spec.clone() };
        self.for_each_row(|l, g, n| nospecial.fill_range(key, g, &mut dst[l..l + n]));
        if let Some((idx, v)) = spec.special {
            if let Some(l) = self.local_index_of(idx) {
                dst[l as usize] = T::from_f64(v);
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
