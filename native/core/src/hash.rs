//! XXH64 (streaming), and the tensor content hash of every store built on it.

use crate::dtype::DType;

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline(always)]
fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}
#[inline(always)]
fn merge(acc: u64, v: u64) -> u64 {
    (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}
#[inline(always)]
fn rd64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

pub struct Xxh64 {
    seed: u64,
    v: [u64; 4],
    buf: [u8; 32],
    buf_len: usize,
    total: u64,
}

impl Xxh64 {
    pub fn new(seed: u64) -> Xxh64 {
        Xxh64 {
            seed,
            v: [seed.wrapping_add(P1).wrapping_add(P2), seed.wrapping_add(P2), seed, seed.wrapping_sub(P1)],
            buf: [0; 32],
            buf_len: 0,
            total: 0,
        }
    }
    #[inline(always)]
    fn stripe(v: &mut [u64; 4], s: &[u8]) {
        v[0] = round(v[0], rd64(&s[0..]));
        v[1] = round(v[1], rd64(&s[8..]));
        v[2] = round(v[2], rd64(&s[16..]));
        v[3] = round(v[3], rd64(&s[24..]));
    }
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.buf_len > 0 {
            let take = (32 - self.buf_len).min(data.len());
            self.buf[self.buf_len..self.buf_len + take].copy_from_slice(&data[..take]);
            self.buf_len += take;
            data = &data[take..];
            if self.buf_len < 32 {
                return;
            }
            let b = self.buf;
            Self::stripe(&mut self.v, &b);
            self.buf_len = 0;
        }
        let mut it = data.chunks_exact(32);
        let mut v = self.v;
        for s in &mut it {
            Self::stripe(&mut v, s);
        }
        self.v = v;
        let r = it.remainder();
        self.buf[..r.len()].copy_from_slice(r);
        self.buf_len = r.len();
    }
    pub fn digest(&self) -> u64 {
        let mut h = if self.total >= 32 {
            let v = self.v;
            let mut h = v[0]
                .rotate_left(1)
                .wrapping_add(v[1].rotate_left(7))
                .wrapping_add(v[2].rotate_left(12))
                .wrapping_add(v[3].rotate_left(18));
            for x in v {
                h = merge(h, x);
            }
            h
        } else {
            self.seed.wrapping_add(P5)
        };
        h = h.wrapping_add(self.total);
        let mut r = &self.buf[..self.buf_len];
        while r.len() >= 8 {
            h ^= round(0, rd64(r));
            h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
            r = &r[8..];
        }
        if r.len() >= 4 {
            h ^= (u32::from_le_bytes(r[..4].try_into().unwrap()) as u64).wrapping_mul(P1);
            h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
            r = &r[4..];
        }
        for &b in r {
            h ^= (b as u64).wrapping_mul(P5);
            h = h.rotate_left(11).wrapping_mul(P1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(P2);
        h ^= h >> 29;
        h = h.wrapping_mul(P3);
        h ^= h >> 32;
        h
    }
}

pub fn xxh64(data: &[u8], seed: u64) -> u64 {
    let mut s = Xxh64::new(seed);
    s.update(data);
    s.digest()
}

/// A tensor's hash: XXH64 (seed 0) of "clip-parity-tensor\0", the dtype name, NUL, ndim and dims
/// (u64 LE) and the raw little-endian data; 16 lowercase hex digits. Every store's `hash` (the cuda
/// store's over a host copy of its bytes).
pub fn content_hash(dtype: DType, shape: &[u64], data: &[u8]) -> String {
    let mut h = Xxh64::new(0);
    h.update(b"clip-parity-tensor\0");
    h.update(dtype.name().as_bytes());
    h.update(&[0]);
    h.update(&(shape.len() as u64).to_le_bytes());
    for d in shape {
        h.update(&d.to_le_bytes());
    }
    h.update(data);
    format!("{:016x}", h.digest())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn known_vectors() {
        assert_eq!(xxh64(b"", 0), 0xEF46DB3751D8E999);
        assert_eq!(xxh64(b"a", 0), 0xD24EC4F1A98C6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC2CF5AD770999);
    }
    #[test]
    fn streaming_equals_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 + 7) as u8).collect();
        let one = xxh64(&data, 3);
        for split in [0, 1, 7, 31, 32, 33, 100, 999, 1000] {
            let mut s = Xxh64::new(3);
            s.update(&data[..split]);
            s.update(&data[split..]);
            assert_eq!(s.digest(), one, "split {split}");
        }
    }
}
