//! A scalar model of the SIMD generators' lane loop (simd.rs: `GenQ16` on AVX-512, `GenQ8` on AVX2,
//! and `fill_from_512` / `fill_from` over them), in plain Rust with no intrinsics, so that it runs on
//! every machine. The lanes, the tables and the direct first multiply come from genlanes.rs, the
//! code the SIMD generators build theirs with; the model mirrors the rest lane by lane: which
//! steps the tables hold, when they are made again, the lanes' pick of X or X + 16, the add of the
//! table (as 64-bit lanes, or as AVX2's 32-bit halves with their carry), the step to the next X
//! (mod 2^64), the second half of splitmix64 and q, and the fill's whole vectors and last partial
//! one. gen/lane_model.rs checks it bit for bit against the generator's definition (SPEC section 5)
//! on every machine, and against the SIMD code where the CPU runs it.
//!
//! [`Weak`] names deliberate weakenings of the model's boundary handling, kept so that the tests
//! can show each one disagreeing with the definition: the tests that pass the model would fail a
//! model with any of them.

use super::{first_mix_direct, table, table_s, w_mix1, Lanes, LANES};
use crate::dtype::{DType, Elem};
use crate::genq::MIX2;

/// The lane arithmetic modelled: AVX-512's 64-bit lanes (`GenQ16`) or AVX2's 32-bit halves (`GenQ8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Wide,
    Halves,
}

/// A deliberate weakening of the model (`Exact`: none, the model of the SIMD code as it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weak {
    Exact,
    /// The table boundary: a step uses the tables when its lanes in X have their S & 15, whatever
    /// the lanes in X + 16 have (the one step that straddles a multiple of 2^30 goes wrong).
    TableEdge,
    /// A lane index off by one: lane j in X + 16 when r + j > 16 instead of >= 16 (the lane with
    /// t = 0 takes the wrong W).
    LaneEdge,
    /// The next step's X by a saturating add instead of mod 2^64 (wrong once x = key + gamma + i
    /// passes 2^64).
    Wrap,
    /// AVX2's halves: the carry of the low halves from a signed compare without the top bits
    /// flipped (only in [`Arith::Halves`]).
    Carry,
    /// The fill's last partial vector: whole vectors while k + 16 < n, then the n % 16 left (a
    /// length that is a multiple of 16 loses its last vector).
    Tail,
}

/// The model of a q stream: the 16 q of indices start + 16 s + j (lane j) at step s.
pub struct Stream {
    arith: Arith,
    weak: Weak,
    m: u32,
    lanes: Lanes,
    /// X of this step, W * MIX1 of X and of X + 16
    x: u64,
    low: u64,
    high: u64,
    /// S & 15 of the tables, and the tables
    s: u64,
    table: [u64; LANES],
}

impl Stream {
    pub fn new(arith: Arith, weak: Weak, key: u64, m: u32, start: u64) -> Stream {
        assert!((2..=24).contains(&m));
        let lanes = Lanes::new(key, start);
        let x = lanes.x;
        let mut g = Stream { arith, weak, m, lanes, x, low: w_mix1(x), high: w_mix1(x.wrapping_add(16)), s: u64::MAX, table: [0; LANES] };
        g.tables_for((x >> 30) & 15);
        g
    }

    fn tables_for(&mut self, s: u64) {
        self.s = s;
        self.table = table(&self.lanes, s);
    }

    /// Whether lane j falls in X + 16.
    fn high(&self, j: usize) -> bool {
        if self.weak == Weak::LaneEdge {
            j > 0 && self.lanes.high(j - 1)
        } else {
            self.lanes.high(j)
        }
    }

    /// W * MIX1 + T of one lane: GenQ16's 64-bit add, or GenQ8::first_mix on 32-bit halves (the low
    /// halves added with their top bits flipped, the carry from a signed compare).
    fn add(&self, w: u64, t: u64) -> u64 {
        match self.arith {
            Arith::Wide => w.wrapping_add(t),
            Arith::Halves => {
                const FLIP: u32 = 0x8000_0000;
                let (wlf, wh, tl, th) = (w as u32 ^ FLIP, (w >> 32) as u32, t as u32, (t >> 32) as u32);
                let zlf = wlf.wrapping_add(tl);
                let carry = if self.weak == Weak::Carry {
                    (w as u32 as i32) > ((w as u32).wrapping_add(tl) as i32)
                } else {
                    (wlf as i32) > (zlf as i32)
                };
                let zh = wh.wrapping_add(th).wrapping_add(carry as u32);
                ((zh as u64) << 32) | (zlf ^ FLIP) as u64
            }
        }
    }

    /// q of one lane from z = (x ^ (x >> 30)) * MIX1: y = z ^ (z >> 27), the high half h of
    /// y * MIX2 (on halves: the high half of yl * cl plus the cross terms, mod 2^32), and
    /// q = (h >> (32 - m)) - 2^(m-1) as an arithmetic shift of h with its top bit flipped.
    fn finish(&self, z: u64) -> i32 {
        let h = match self.arith {
            Arith::Wide => {
                let y = z ^ (z >> 27);
                (y.wrapping_mul(MIX2) >> 32) as u32
            }
            Arith::Halves => {
                let (zl, zh) = (z as u32, (z >> 32) as u32);
                let yl = zl ^ (zl >> 27) ^ (zh << 5);
                let yh = zh ^ (zh >> 27);
                let (cl, ch) = (MIX2 as u32, (MIX2 >> 32) as u32);
                let carry = ((yl as u64 * cl as u64) >> 32) as u32;
                carry.wrapping_add(yh.wrapping_mul(cl).wrapping_add(yl.wrapping_mul(ch)))
            }
        };
        ((h ^ 0x8000_0000) as i32) >> (32 - self.m)
    }

    /// The 16 q of this step.
    pub fn next16(&mut self) -> [i32; LANES] {
        let x = self.x;
        let (s_low, s_high) = table_s(x);
        let held = s_low == self.s && (s_high == self.s || self.weak == Weak::TableEdge);
        let z: [u64; LANES] = if held {
            std::array::from_fn(|j| self.add(if self.high(j) { self.high } else { self.low }, self.table[j]))
        } else {
            let z = first_mix_direct(x, &self.lanes);
            if s_low == s_high {
                self.tables_for(s_low);
            }
            z
        };
        // the next step: X + 16 becomes the low multiple
        self.x = if self.weak == Weak::Wrap { x.saturating_add(16) } else { x.wrapping_add(16) };
        self.low = self.high;
        self.high = w_mix1(self.x.wrapping_add(16));
        std::array::from_fn(|j| self.finish(z[j]))
    }
}

/// What the model leaves in an element it never wrote: a NaN, which the generator never makes.
pub fn unwritten<T: Elem>() -> T {
    T::from_bits(if T::DTYPE == DType::F32 { 0x7fc0_dead } else { 0x7fd1 })
}

/// One element of a fill: f32(q) * unit rounded to T as the SIMD stores do it: f32 as it is; bf16
/// by its high half when exact (`round` false), else rounded to nearest even by adding 0x7fff plus
/// the lowest kept bit (no NaN here); f16 by F16C's round to nearest even (half's conversion is the
/// same rounding, subnormals and overflow included).
fn store<T: Elem>(q: i32, unit: f32, round: bool) -> T {
    let v = q as f32 * unit;
    let b = v.to_bits();
    match T::DTYPE {
        DType::F32 => T::from_bits(b),
        DType::BF16 if !round => T::from_bits(b >> 16),
        DType::BF16 => T::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16),
        DType::F16 => T::from_f32(v),
    }
}

/// The model of `simd::gen_fill_wide` (Wide) and `simd::gen_fill` (Halves): element k of the result
/// is value(start + k) as they write it, for k < n: whole vectors of 16 while they fit, then one
/// more step of the stream for the last partial vector.
#[allow(clippy::too_many_arguments)]
pub fn fill<T: Elem>(arith: Arith, weak: Weak, key: u64, m: u32, unit: f32, start: u64, n: usize, round: bool) -> Vec<T> {
    let mut g = Stream::new(arith, weak, key, m, start);
    let mut dst = vec![unwritten::<T>(); n];
    let whole = |k: usize| if weak == Weak::Tail { k + LANES < n } else { k + LANES <= n };
    let mut k = 0;
    while whole(k) {
        let q = g.next16();
        for j in 0..LANES {
            dst[k + j] = store(q[j], unit, round);
        }
        k += LANES;
    }
    let tail = if weak == Weak::Tail { n % LANES } else { n - k };
    if tail > 0 {
        let q = g.next16();
        for j in 0..tail {
            dst[k + j] = store(q[j], unit, round);
        }
    }
    dst
}
