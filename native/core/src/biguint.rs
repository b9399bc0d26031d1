//! A non-negative big integer (little-endian u64 limbs): the exact sums' result N (value
//! N * 2^-1074), built by exact.rs and the SIMD kernels (simd.rs).

use crate::dtype::pow2;

/// A non-negative big integer, little-endian u64 limbs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BigUint {
    pub limbs: Vec<u64>,
}

impl BigUint {
    pub fn zero() -> BigUint {
        BigUint { limbs: Vec::new() }
    }
    pub fn is_zero(&self) -> bool {
        self.limbs.iter().all(|&l| l == 0)
    }
    fn ensure(&mut self, n: usize) {
        if self.limbs.len() < n {
            self.limbs.resize(n, 0);
        }
    }
    /// self += v * 2^shift
    pub fn add_shifted(&mut self, v: u128, shift: u32) {
        if v == 0 {
            return;
        }
        let word = (shift / 64) as usize;
        let bit = shift % 64;
        // v << bit spans at most 3 limbs
        let lo = (v as u64) << bit;
        let mid_full: u128 = if bit == 0 { v >> 64 } else { v >> (64 - bit) };
        let mid = mid_full as u64;
        let hi = if bit == 0 { 0 } else { (mid_full >> 64) as u64 };
        let parts = [lo, mid, hi];
        self.ensure(word + 4);
        let mut carry = 0u64;
        let mut k = word;
        for p in parts {
            let (s1, c1) = self.limbs[k].overflowing_add(p);
            let (s2, c2) = s1.overflowing_add(carry);
            self.limbs[k] = s2;
            carry = (c1 as u64) + (c2 as u64);
            k += 1;
        }
        while carry != 0 {
            self.ensure(k + 1);
            let (s, c) = self.limbs[k].overflowing_add(carry);
            self.limbs[k] = s;
            carry = c as u64;
            k += 1;
        }
    }
    pub fn add(&mut self, o: &BigUint) {
        for (k, &l) in o.limbs.iter().enumerate() {
            self.add_shifted(l as u128, 64 * k as u32);
        }
    }
    /// Remove trailing zero limbs (canonical form).
    pub fn normalized(mut self) -> BigUint {
        while self.limbs.last() == Some(&0) {
            self.limbs.pop();
        }
        self
    }
    /// Decimal string (for tests and messages).
    pub fn to_decimal(&self) -> String {
        let mut l = self.clone().normalized().limbs;
        if l.is_empty() {
            return "0".into();
        }
        let mut digits = vec![];
        while !l.is_empty() {
            let mut rem: u128 = 0;
            for x in l.iter_mut().rev() {
                let cur = (rem << 64) | *x as u128;
                *x = (cur / 10_000_000_000_000_000_000u128) as u64;
                rem = cur % 10_000_000_000_000_000_000u128;
            }
            digits.push(rem as u64);
            while l.last() == Some(&0) {
                l.pop();
            }
        }
        let mut s = format!("{}", digits.pop().unwrap());
        for d in digits.iter().rev() {
            s.push_str(&format!("{:019}", d));
        }
        s
    }
    /// Correctly rounded (nearest even) f64 value of N * 2^-1074.
    pub fn to_f64_scaled(&self) -> f64 {
        let l = self.clone().normalized().limbs;
        if l.is_empty() {
            return 0.0;
        }
        let nbits = 64 * l.len() as i64 - l.last().unwrap().leading_zeros() as i64;
        let bit = |i: i64| -> u64 {
            if i < 0 {
                0
            } else {
                (l[(i / 64) as usize] >> (i % 64)) & 1
            }
        };
        // value = N * 2^-1074; subnormal/normal boundary: keep 53 bits, but never below 2^-1074
        let keep = 53i64.min(nbits);
        let low = nbits - keep; // number of bits dropped
        if nbits <= 53 {
            // exact: N < 2^53 -> N * 2^-1074 is representable (subnormal or normal)
            let mut n = 0u64;
            for (k, &x) in l.iter().enumerate() {
                n |= x << (64 * k);
            }
            return n as f64 * pow2(-1074);
        }
        let mut m: u64 = 0;
        for i in (low..nbits).rev() {
            m = (m << 1) | bit(i);
        }
        let half = bit(low - 1);
        let sticky = (0..low - 1).any(|i| bit(i) == 1);
        if half == 1 && (sticky || m & 1 == 1) {
            m += 1;
        }
        let e = low - 1074; // value = m * 2^e
        if e > 971 {
            return f64::INFINITY;
        }
        // m <= 2^53 ; m * 2^e exact in f64 as long as e <= 971
        (m as f64) * pow2(e as i32)
    }
}
