//! The integer core of the SPEC section 5 generator: splitmix64, fnv1a64, a parameter's key and
//! q(key, m, i). Below gen.rs and the SIMD kernels (simd.rs), which both compute q.

/// splitmix64's constants (SPEC section 5): the increment and the two multipliers. The SIMD
/// generators (simd.rs) take them from here.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
pub const MIX1: u64 = 0xBF58_476D_1CE4_E5B9;
pub const MIX2: u64 = 0x94D0_49BB_1331_11EB;

/// splitmix64 finalizer as written in SPEC section 5 (all arithmetic mod 2^64).
#[inline(always)]
pub fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(GAMMA);
    let z = (x ^ (x >> 30)).wrapping_mul(MIX1);
    let z = (z ^ (z >> 27)).wrapping_mul(MIX2);
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

/// key = splitmix64(seed ^ splitmix64(step ^ fnv1a64(name)))
pub fn key(seed: u64, step: u32, name: &str) -> u64 {
    splitmix64(seed ^ splitmix64(step as u64 ^ fnv1a64(name)))
}

/// q for flat index i (an integer in [-2^(m-1), 2^(m-1))).
#[inline(always)]
pub fn q(key: u64, m: u32, i: u64) -> i64 {
    let bits = splitmix64(key.wrapping_add(i));
    (bits >> (64 - m)) as i64 - (1i64 << (m - 1))
}
