//! Freed tensor buffers of the cpu store, kept for the next tensor of the same size class.
//!
//! A cell allocates its gradients, fills them, and frees them all at its end; the next cell does the
//! same with mostly the same shapes. Fresh memory from the OS costs a page fault per 4 KiB page on
//! first touch (the kernel zeroes the page, then the fill writes it again), and freeing it unmaps
//! it: on a busy virtual machine that is several times the cost of writing the bytes. So buffers of
//! at least [`MIN_BYTES`] are not returned to the allocator when their tensor is freed, but kept here
//! (process-wide, up to [`LIMIT_BYTES`] in all, the oldest dropped first) and handed to the next
//! tensor of the same dtype and size class. What a reused buffer held is never visible: `alloc`
//! zeroes it, `alloc_fill` writes every element before the tensor exists (store.rs). The ledger does
//! not see any of this: it charges numel * dtype size, whatever the buffer's capacity.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use half::{bf16, f16};

use crate::dtype::Elem;
use crate::error::{Error, Result};

/// Smaller buffers come from and go back to the allocator (its own free lists reuse them cheaply;
/// from 64 KiB on, glibc's malloc maps or trims them, and the next cell faults them in again).
pub const MIN_BYTES: usize = 1 << 16;
/// At most this many bytes are kept.
pub const LIMIT_BYTES: usize = 1 << 30;

/// A kept buffer (length 0; its capacity is a size class).
pub(crate) enum Buf {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
}

impl Buf {
    fn bytes(&self) -> usize {
        match self {
            Buf::F32(v) => v.capacity() * 4,
            Buf::BF16(v) => v.capacity() * 2,
            Buf::F16(v) => v.capacity() * 2,
        }
    }
}

/// The element types whose buffers are kept (the sealed Elem types).
pub(crate) trait Pooled: Elem {
    fn wrap(v: Vec<Self>) -> Buf;
    fn unwrap(b: &mut Buf) -> Option<&mut Vec<Self>>;
}

macro_rules! pooled {
    ($t:ty, $var:ident) => {
        impl Pooled for $t {
            fn wrap(v: Vec<Self>) -> Buf {
                Buf::$var(v)
            }
            fn unwrap(b: &mut Buf) -> Option<&mut Vec<Self>> {
                match b {
                    Buf::$var(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
pooled!(f32, F32);
pooled!(bf16, BF16);
pooled!(f16, F16);

/// A size class: the dtype (its enum index) and the capacity.
type Class = (u8, usize);

/// Kept buffers by class, each with the sequence number it was kept with (newest last); `order`
/// lists every one by that number, oldest first (the first to drop when the pool is full).
struct Pool {
    by_class: Option<HashMap<Class, Vec<(u64, Buf)>>>,
    order: BTreeMap<u64, Class>,
    seq: u64,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool { by_class: None, order: BTreeMap::new(), seq: 0, bytes: 0 });

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // a panic while holding the lock cannot leave the pool inconsistent in a way that matters
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

fn class<T: Elem>(cap: usize) -> Class {
    (T::DTYPE as u8, cap)
}

/// The capacity a buffer of n elements of T gets: n itself below MIN_BYTES, else n rounded up to
/// the next m * 2^k with 16 <= m < 32 (at most 1/16 more), so that nearby sizes share buffers.
pub(crate) fn capacity_for<T: Elem>(n: usize) -> usize {
    if n.saturating_mul(std::mem::size_of::<T>()) < MIN_BYTES {
        return n;
    }
    let k = (usize::BITS - 1 - n.leading_zeros()).saturating_sub(4);
    n.div_ceil(1 << k) << k
}

/// An empty vector with room for n elements (capacity `capacity_for(n)`): a kept buffer of that
/// class when there is one (its old contents are beyond the length, never readable through the
/// Vec), else a new allocation (not zeroed).
pub(crate) fn take<T: Pooled>(n: usize) -> Result<Vec<T>> {
    match take_kept(n) {
        Some(v) => Ok(v),
        None => {
            let cap = capacity_for::<T>(n);
            let mut v: Vec<T> = Vec::new();
            v.try_reserve_exact(cap).map_err(|_| {
                Error(format!("out of memory allocating {} bytes", cap.saturating_mul(std::mem::size_of::<T>())))
            })?;
            Ok(v)
        }
    }
}

/// A kept buffer of n's size class (empty, capacity `capacity_for(n)`), if there is one.
pub(crate) fn take_kept<T: Pooled>(n: usize) -> Option<Vec<T>> {
    let cap = capacity_for::<T>(n);
    if cap.saturating_mul(std::mem::size_of::<T>()) < MIN_BYTES {
        return None;
    }
    let mut guard = pool();
    let p = &mut *guard;
    let list = p.by_class.as_mut()?.get_mut(&class::<T>(cap))?;
    let (seq, mut b) = list.pop()?;
    p.order.remove(&seq);
    p.bytes -= b.bytes();
    Some(std::mem::take(T::unwrap(&mut b).expect("kept under its dtype")))
}

/// Keeps a freed tensor's buffer for reuse (or frees it: small, of an odd capacity, or no room).
pub(crate) fn give<T: Pooled>(mut v: Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if !(MIN_BYTES..=LIMIT_BYTES).contains(&bytes) || capacity_for::<T>(v.capacity()) != v.capacity() {
        return;
    }
    v.clear();
    let mut evicted = Vec::new();
    {
        let mut guard = pool();
        let p = &mut *guard;
        let by_class = p.by_class.get_or_insert_with(HashMap::new);
        while p.bytes + bytes > LIMIT_BYTES {
            let Some((seq, key)) = p.order.pop_first() else { break };
            let list = by_class.get_mut(&key).expect("listed");
            // the oldest of its class is first in its list
            debug_assert_eq!(list.first().map(|e| e.0), Some(seq));
            let (_, old) = list.remove(0);
            p.bytes -= old.bytes();
            evicted.push(old);
        }
        p.seq += 1;
        let key = class::<T>(v.capacity());
        p.order.insert(p.seq, key);
        p.bytes += bytes;
        by_class.entry(key).or_default().push((p.seq, T::wrap(v)));
    }
    drop(evicted); // freed outside the lock
}

/// Bytes kept now.
#[cfg(test)]
pub(crate) fn kept_bytes() -> usize {
    pool().bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(capacity_for::<f32>(1000), 1000); // small: exact
        let n = (1 << 20) / 4; // exactly 1 MiB of f32: a power of two is its own class
        assert_eq!(capacity_for::<f32>(n), n);
        for n in [262_145usize, 1_000_003, 6_163_712, 38_670_080, (1 << 30) + 1] {
            let c = capacity_for::<bf16>(n);
            assert!(c >= n && c - n <= n / 16, "{n} -> {c}");
            assert_eq!(capacity_for::<bf16>(c), c, "a class is its own class");
        }
    }

    #[test]
    fn a_freed_buffer_is_reused_for_its_class() {
        // an odd size no other test uses, so that the process-wide pool's other users do not interfere
        let n = 777_777usize;
        let v: Vec<f16> = take(n).unwrap();
        assert!(v.is_empty() && v.capacity() >= n);
        let (p, cap) = (v.as_ptr(), v.capacity());
        give(v);
        let w: Vec<f16> = take(n - 100).unwrap(); // same class
        assert_eq!((w.as_ptr(), w.capacity(), w.len()), (p, cap, 0));
        // another dtype of the same byte size does not get that buffer
        give(w);
        let x: Vec<bf16> = take(n).unwrap();
        assert_ne!(x.as_ptr() as usize, p as usize);
        let w: Vec<f16> = take(n).unwrap();
        assert_eq!(w.as_ptr(), p);
        give(w);
        give(x);
        assert!(kept_bytes() <= LIMIT_BYTES);
    }
}
