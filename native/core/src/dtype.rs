//! Element types (f32, bf16, f16) and exact conversions with round-to-nearest-even.

use half::{bf16, f16};

#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum DType {
    F32,
    BF16,
    F16,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::BF16, DType::F16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
        }
    }
    /// The name used by the JS API.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
        }
    }
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }
    /// The dtype string in a safetensors header.
    pub fn st_name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::BF16 => "BF16",
            DType::F16 => "F16",
        }
    }
    pub fn from_st_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.st_name() == s)
    }
    /// SPEC section 5: m = 24 / 8 / 11.
    pub fn gen_m(self) -> u32 {
        match self {
            DType::F32 => 24,
            DType::BF16 => 8,
            DType::F16 => 11,
        }
    }
    /// Significand bits including the implicit one.
    pub fn precision(self) -> u32 {
        self.gen_m()
    }
    /// Exponent of the smallest normal number.
    pub fn emin(self) -> i32 {
        match self {
            DType::F32 | DType::BF16 => -126,
            DType::F16 => -14,
        }
    }
    /// Exponent of the largest finite power of two.
    pub fn emax(self) -> i32 {
        match self {
            DType::F32 | DType::BF16 => 127,
            DType::F16 => 15,
        }
    }
    /// Exponent of the smallest subnormal (the quantum of the subnormal range).
    pub fn min_sub_exp(self) -> i32 {
        self.emin() - (self.precision() as i32 - 1)
    }
}

/// 2^n as f64 for n in [-1074, 1023] (exact).
#[inline]
pub fn pow2(n: i32) -> f64 {
    if n >= -1022 {
        assert!(n <= 1023, "pow2({n}) out of range");
        f64::from_bits(((n + 1023) as u64) << 52)
    } else {
        assert!(n >= -1074, "pow2({n}) out of range");
        f64::from_bits(1u64 << (n + 1074))
    }
}

/// Round an f64 to the value set of `dt` with round-to-nearest-even (single rounding, overflow to
/// infinity, gradual underflow). The result is an f64 exactly representable in `dt` (or +-inf, NaN).
pub fn round_f64_to(dt: DType, x: f64) -> f64 {
    if dt == DType::F32 {
        return x as f32 as f64; // Rust `as` rounds to nearest even
    }
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let a = x.abs();
    let bits = a.to_bits();
    let be = ((bits >> 52) & 0x7ff) as i32;
    let e = if be == 0 {
        // f64 subnormal: exponent of the leading bit
        let m = bits & ((1u64 << 52) - 1);
        -1074 + (63 - m.leading_zeros() as i32)
    } else {
        be - 1023
    };
    let q = e.max(dt.emin()) - (dt.precision() as i32 - 1);
    // a * 2^-q and back are exact power-of-two scalings in f64 for every q here.
    let scaled = a * pow2(-q);
    let r = scaled.round_ties_even() * pow2(q);
    let r = if r >= pow2(dt.emax() + 1) { f64::INFINITY } else { r };
    r.copysign(x)
}

/// bf16 from f32, round to nearest even, NaN stays NaN (quiet bit set). Branch-light, vectorizable.
#[inline(always)]
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        ((x >> 16) | 0x40) as u16
    } else {
        let r = ((x >> 16) & 1) + 0x7fff;
        (x.wrapping_add(r) >> 16) as u16
    }
}

#[inline(always)]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f16 -> f32, exact, branch-free (vectorizable). NaN payloads are kept.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // Normals: the exponent rebiased (+112) in the integer field. Subnormals and zero: em * 2^-24 from
    // the integer, a normal f32 product. Never an f32 subnormal operand: x86 takes a microcode assist on
    // each (36.6 ns an element here, measured, against 1.2 for a normal one), which an earlier rescale
    // of (em << 13) by 2^112 paid for every f16 subnormal: f16 cells with small gradients ran 30-100x slower.
    let normal = (em << 13) + 0x3800_0000;
    let subnormal = ((em as f32) * f32::from_bits(0x3380_0000)).to_bits(); // 2^-24
    let special = (em << 13) | 0x7f80_0000;
    let o = if em >= 0x7c00 {
        special
    } else if em >= 0x0400 {
        normal
    } else {
        subnormal
    };
    f32::from_bits(o | sign)
}

#[inline(always)]
pub fn f32_to_f16_bits(f: f32) -> u16 {
    f16::from_f32(f).to_bits()
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// An element type stored in a tensor: f32, bf16 or f16, and nothing else. The trait is sealed
/// because unsafe code relies on its three implementations (simd.rs loads `DTYPE.size()`-byte
/// elements by `DTYPE`; kernels::read_pass and store::Data view slices as bytes): size
/// `DTYPE.size()`, no padding, every bit pattern valid. Another type could break that from safe code.
pub trait Elem: sealed::Sealed + Copy + Send + Sync + Default + PartialEq + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    /// Round to nearest even.
    fn from_f32(x: f32) -> Self;
    /// Round to nearest even, single rounding.
    fn from_f64(x: f64) -> Self;
    /// Raw bit pattern (zero-extended).
    fn bits(self) -> u32;
    fn from_bits(b: u32) -> Self;
    /// Mask of the exponent field: all ones means non-finite.
    const EXP_MASK: u32;
    const ABS_MASK: u32;
    #[inline(always)]
    fn is_nonfinite(self) -> bool {
        self.bits() & Self::EXP_MASK == Self::EXP_MASK
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        let b = self.bits() & Self::ABS_MASK;
        b > Self::EXP_MASK
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
}

impl Elem for f32 {
    const DTYPE: DType = DType::F32;
    const EXP_MASK: u32 = 0x7f80_0000;
    const ABS_MASK: u32 = 0x7fff_ffff;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits()
    }
    #[inline(always)]
    fn from_bits(b: u32) -> Self {
        f32::from_bits(b)
    }
}

impl Elem for bf16 {
    const DTYPE: DType = DType::BF16;
    const EXP_MASK: u32 = 0x7f80;
    const ABS_MASK: u32 = 0x7fff;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16_bits_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        bf16::from_bits(f32_to_bf16_bits(x))
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        if x.is_nan() {
            return bf16::from_bits(f32_to_bf16_bits(x as f32));
        }
        // the rounded value is exact in f32
        bf16::from_bits(f32_to_bf16_bits(round_f64_to(DType::BF16, x) as f32))
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
    #[inline(always)]
    fn from_bits(b: u32) -> Self {
        bf16::from_bits(b as u16)
    }
}

impl Elem for f16 {
    const DTYPE: DType = DType::F16;
    const EXP_MASK: u32 = 0x7c00;
    const ABS_MASK: u32 = 0x7fff;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_bits_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_bits(f32_to_f16_bits(x))
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        if x.is_nan() {
            return f16::from_f32(x as f32);
        }
        f16::from_f32(round_f64_to(DType::F16, x) as f32)
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
    #[inline(always)]
    fn from_bits(b: u32) -> Self {
        f16::from_bits(b as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_to_f32_matches_half_everywhere() {
        for h in 0..=u16::MAX {
            let a = f16_bits_to_f32(h);
            let b = f16::from_bits(h).to_f32();
            if b.is_nan() {
                assert!(a.is_nan(), "{h:#x}");
            } else {
                assert_eq!(a.to_bits(), b.to_bits(), "{h:#x}");
            }
        }
    }

    #[test]
    fn bf16_roundtrip_all() {
        for h in 0..=u16::MAX {
            let f = bf16_bits_to_f32(h);
            let back = f32_to_bf16_bits(f);
            if f.is_nan() {
                assert!(bf16::from_bits(back).is_nan());
            } else {
                assert_eq!(back, h);
            }
        }
    }

    #[test]
    fn bf16_ties_to_even() {
        // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even -> 1.0
        let x = 1.0f32 + (2.0f32).powi(-8);
        assert_eq!(f32_to_bf16_bits(x), 0x3f80);
        // 1 + 3*2^-8 halfway between 1+2^-7 (odd) and 1+2^-6 (even) -> up
        let x = 1.0f32 + 3.0 * (2.0f32).powi(-8);
        assert_eq!(f32_to_bf16_bits(x), 0x3f82);
        // just above the tie rounds up
        let x = f32::from_bits(0x3f80_8001);
        assert_eq!(f32_to_bf16_bits(x), 0x3f81);
        // overflow to infinity
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(f32_to_bf16_bits(-f32::MAX), 0xff80);
        // NaN stays NaN, even one whose payload is only in the low bits
        let n = f32::from_bits(0x7f80_0001);
        assert!(bf16::from_bits(f32_to_bf16_bits(n)).is_nan());
        // -0 stays -0
        assert_eq!(f32_to_bf16_bits(-0.0), 0x8000);
    }

    #[test]
    fn f16_ties_to_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> 1.0
        assert_eq!(f32_to_f16_bits(1.0 + (2.0f32).powi(-11)), 0x3c00);
        // 1 + 3*2^-11 -> 1 + 2^-9 (even)
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * (2.0f32).powi(-11)), 0x3c02);
        // 65520 is halfway between 65504 (max) and 65536 (overflow) -> inf
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f32_to_f16_bits(65519.0), 0x7bff);
        // subnormal tie: 2^-25 is halfway between 0 and 2^-24 -> 0 ; 3*2^-25 -> 2*2^-24
        assert_eq!(f32_to_f16_bits((2.0f32).powi(-25)), 0x0000);
        assert_eq!(f32_to_f16_bits(3.0 * (2.0f32).powi(-25)), 0x0002);
    }

    fn splitmix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    #[test]
    fn round_f64_matches_f32_path_for_f32_inputs() {
        // For f32 inputs, rounding via f64 must agree with the direct f32 -> dtype conversion.
        let mut s = 7u64;
        for _ in 0..200_000 {
            let r = splitmix(&mut s);
            let x = f32::from_bits(r as u32);
            if x.is_nan() {
                continue;
            }
            let b1 = f32_to_bf16_bits(x);
            let b2 = <bf16 as Elem>::from_f64(x as f64).to_bits();
            assert_eq!(b1, b2, "bf16 {x:e}");
            let h1 = f32_to_f16_bits(x);
            let h2 = <f16 as Elem>::from_f64(x as f64).to_bits();
            assert_eq!(h1, h2, "f16 {x:e}");
        }
    }

    #[test]
    fn round_f64_single_rounding() {
        // 1 + 2^-8 + 2^-40: above the bf16 tie only through low f64 bits -> must round up
        let x = 1.0 + pow2(-8) + pow2(-40);
        assert_eq!(<bf16 as Elem>::from_f64(x).to_bits(), 0x3f81);
        let x = 1.0 + pow2(-11) + pow2(-45);
        assert_eq!(<f16 as Elem>::from_f64(x).to_bits(), 0x3c01);
        assert!(<f16 as Elem>::from_f64(1e6).to_f32().is_infinite());
        assert_eq!(<f16 as Elem>::from_f64(pow2(-24)).to_bits(), 1);
        assert_eq!(<bf16 as Elem>::from_f64(pow2(-133)).to_bits(), 1);
        assert_eq!(<bf16 as Elem>::from_f64(pow2(-134)).to_bits(), 0);
        assert_eq!(<bf16 as Elem>::from_f64(pow2(-134) + pow2(-180)).to_bits(), 1);
    }
}
