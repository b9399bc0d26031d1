//! The per-lane tables of the SIMD generators (simd.rs: `GenQ8` on AVX2, `GenQ16` on AVX-512), in
//! portable code that simd.rs builds its tables with; and, for tests, a scalar model of their lane
//! loop (genlanes/model.rs), checked against the generator's definition by gen/lane_model.rs on
//! every machine, AVX-512 or not.
//!
//! The trick: write x = key + gamma + i (the splitmix64 input of index i, SPEC section 5) as X + t,
//! X a multiple of 16 and t < 16. Then x >> 30 = X >> 30 = S, and x ^ S = W + (t ^ (S & 15)) with
//! W = (X ^ S) & !15, so the first multiply of splitmix64 is
//! (x ^ (x >> 30)) * MIX1 = W * MIX1 + (t ^ (S & 15)) * MIX1 (mod 2^64).
//! The generators take 16 consecutive indices per step, lane j holding index start + 16 s + j at
//! step s: a lane's t never changes (x steps by 16), so the second term is a table per lane, made
//! again when S & 15 changes (every 2^26 steps); the first is one scalar product per multiple of 16
//! ([`w_mix1`]), shared by the lanes that fall in it (16 lanes span X and X + 16: [`Lanes`]). A step
//! whose lanes do not all have the table's S & 15 (its lanes in X and in X + 16 differ, or the
//! tables are for the previous S) is computed directly ([`first_mix_direct`]).

use crate::genq::{GAMMA, MIX1};

#[cfg(test)]
pub(crate) mod model;

/// Indices per step of the SIMD generators (one AVX-512 register of 64-bit lanes per 8 of them).
pub const LANES: usize = 16;

/// Where a stream of q from index `start` puts its lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    /// X of the first step: key + gamma + start rounded down to a multiple of 16 (mod 2^64)
    pub x: u64,
    /// bit j: lane j falls in X + 16 (r + j >= 16, r = (key + gamma + start) & 15)
    pub in_high: u16,
    /// t = (r + j) & 15 of lane j
    pub t: [u64; LANES],
}

impl Lanes {
    #[inline(always)]
    pub fn new(key: u64, start: u64) -> Lanes {
        let x0 = key.wrapping_add(GAMMA).wrapping_add(start);
        let r = x0 & 15;
        // r = 0: no lane in X + 16 (the u32 shift by 16 leaves 0 in the low half)
        let in_high = (0xffff_u32 << (16 - r)) as u16;
        Lanes { x: x0 & !15, in_high, t: std::array::from_fn(|j| (r + j as u64) & 15) }
    }

    /// Whether lane j falls in X + 16.
    #[inline(always)]
    pub fn high(&self, j: usize) -> bool {
        (self.in_high >> j) & 1 == 1
    }
}

/// W * MIX1 of a multiple of 16.
#[inline(always)]
pub fn w_mix1(x: u64) -> u64 {
    ((x ^ (x >> 30)) & !15).wrapping_mul(MIX1)
}

/// S & 15 of the step at X = x: of its lanes in X, and of those in X + 16 (mod 2^64).
#[inline(always)]
pub fn table_s(x: u64) -> (u64, u64) {
    ((x >> 30) & 15, (x.wrapping_add(16) >> 30) & 15)
}

/// The table for S & 15 = s: (t ^ s) * MIX1 of each lane.
#[inline(always)]
pub fn table(lanes: &Lanes, s: u64) -> [u64; LANES] {
    std::array::from_fn(|j| (lanes.t[j] ^ s).wrapping_mul(MIX1))
}

/// (x ^ (x >> 30)) * MIX1 of the 16 lanes of the step at X = x, the direct way: for a step that
/// the tables do not hold.
#[inline(always)]
pub fn first_mix_direct(x: u64, lanes: &Lanes) -> [u64; LANES] {
    std::array::from_fn(|j| {
        let base = if lanes.high(j) { x.wrapping_add(16) } else { x };
        let x = base.wrapping_add(lanes.t[j]);
        (x ^ (x >> 30)).wrapping_mul(MIX1)
    })
}
