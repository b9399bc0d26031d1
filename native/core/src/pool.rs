//! Tensor buffers of the cpu store, carved out of chunks of memory that are kept across cells.
//!
//! A cell allocates its gradients, fills them, and frees them all at its end; the next cell does the
//! same with other shapes (another layout shards them otherwise, another dtype halves them). Fresh
//! memory from the OS costs a page fault per 4 KiB page on first touch (the kernel zeroes the page,
//! then the fill writes it again), and freeing it unmaps it. On a virtual machine that fault is far
//! dearer than the bytes: over the whole `cpu` matrix the kernel's page clearing took a quarter of
//! the run (18 us per page). Buffers kept by exact (dtype, size class) still missed 4.8 GB of the
//! 26.4 GB the matrix allocates, because the shapes change from cell to cell; any freed byte range
//! here serves any later buffer of any dtype and size (first fit by address, neighbours merged on
//! free), so a process faults in about its largest cell once, and no more than that: the lowest
//! range that holds a buffer keeps the pages touched few (a chunk of 1 GiB is address space; only
//! the pages written become memory, and they stay so while the process lives).
//!
//! Chunks of at least [`CHUNK_BYTES`] come from the global allocator and go back to it only when
//! one is wholly free while more than [`KEEP_BYTES`] of the chunks held are free (live buffers do
//! not count: a long-lived large buffer must not make every other chunk go back and fault again).
//! What a reused range held is never visible: [`zeroed`] writes zeros, [`filled_with`] hands the range to a fill that writes every
//! element before the buffer exists. The ledger does not see any of this: it charges numel * dtype
//! size, whatever the range's rounding.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

use crate::dtype::Elem;
use crate::error::{Error, Result};

/// Every range starts and ends on this boundary (a cache line; the widest SIMD load).
pub const ALIGN: usize = 64;
/// The least a chunk asks of the global allocator (a larger buffer gets a chunk of its own size).
pub const CHUNK_BYTES: usize = 1 << 30;
/// Wholly free chunks are kept while the free bytes of all chunks add up to at most this many.
pub const KEEP_BYTES: usize = 1 << 30;
/// Chunks are page-aligned and a whole number of 2 MiB.
const CHUNK_GRAIN: usize = 2 << 20;

struct Chunk {
    size: usize,
    /// Bytes of ranges handed out and not yet released.
    live: usize,
}

/// Chunks, and the free ranges in them by address. Addresses are plain usize: the arena never
/// dereferences them.
pub(crate) struct Arena {
    chunk_bytes: usize,
    keep_bytes: usize,
    chunks: BTreeMap<usize, Chunk>,
    free_by_addr: BTreeMap<usize, usize>,
    held: usize,
    /// Bytes of ranges handed out and not yet released, over all chunks.
    live: usize,
}

fn chunk_layout(size: usize) -> Result<Layout> {
    Layout::from_size_align(size, 4096).map_err(|_| Error(format!("cannot allocate {size} bytes: size overflows")))
}

impl Arena {
    pub(crate) const fn new(chunk_bytes: usize, keep_bytes: usize) -> Arena {
        Arena {
            chunk_bytes,
            keep_bytes,
            chunks: BTreeMap::new(),
            free_by_addr: BTreeMap::new(),
            held: 0,
            live: 0,
        }
    }

    fn rounded(bytes: usize) -> Result<usize> {
        bytes
            .checked_next_multiple_of(ALIGN)
            .filter(|&b| b <= isize::MAX as usize / 2)
            .ok_or_else(|| Error(format!("cannot allocate {bytes} bytes: size overflows")))
    }

    /// The chunk holding addr: its base.
    fn chunk_of(&self, addr: usize) -> usize {
        let (&base, c) = self.chunks.range(..=addr).next_back().expect("a released range lies in a chunk");
        debug_assert!(addr < base + c.size);
        base
    }

    /// A range of at least `bytes` bytes (a multiple of ALIGN, ALIGN-aligned); bytes > 0.
    pub(crate) fn alloc(&mut self, bytes: usize) -> Result<NonNull<u8>> {
        let size = Self::rounded(bytes)?;
        let addr = match self.free_by_addr.iter().find(|(_, &have)| have >= size).map(|(&addr, &have)| (have, addr)) {
            Some((have, addr)) => {
                self.free_by_addr.remove(&addr);
                if have > size {
                    self.free_by_addr.insert(addr + size, have - size);
                }
                addr
            }
            None => {
                // a whole chunk, or where the system refuses that much address space, just this buffer
                let (mut csize, mut p) = (0, std::ptr::null_mut());
                for want in [size.max(self.chunk_bytes), size] {
                    csize = want.next_multiple_of(CHUNK_GRAIN);
                    // SAFETY: the layout's size is non-zero (at least CHUNK_GRAIN).
                    p = unsafe { std::alloc::alloc(chunk_layout(csize)?) };
                    if !p.is_null() {
                        break;
                    }
                }
                if p.is_null() {
                    return Err(Error(format!("out of memory allocating {bytes} bytes (a chunk of {csize})")));
                }
                let addr = p as usize;
                self.chunks.insert(addr, Chunk { size: csize, live: 0 });
                self.held += csize;
                if csize > size {
                    self.free_by_addr.insert(addr + size, csize - size);
                }
                addr
            }
        };
        let base = self.chunk_of(addr);
        self.chunks.get_mut(&base).expect("found").live += size;
        self.live += size;
        Ok(NonNull::new(addr as *mut u8).expect("chunks are not at address 0"))
    }

    /// Gives back a range `alloc(bytes)` returned.
    pub(crate) fn release(&mut self, ptr: NonNull<u8>, bytes: usize) {
        let size = Self::rounded(bytes).expect("allocated with this size");
        let (mut addr, mut len) = (ptr.as_ptr() as usize, size);
        let base = self.chunk_of(addr);
        let chunk = self.chunks.get_mut(&base).expect("found");
        chunk.live -= size;
        self.live -= size;
        let (end, live, csize) = (base + chunk.size, chunk.live, chunk.size);
        if addr > base {
            if let Some((&pa, &ps)) = self.free_by_addr.range(..addr).next_back() {
                if pa + ps == addr {
                    self.free_by_addr.remove(&pa);
                    (addr, len) = (pa, ps + len);
                }
            }
        }
        if addr + len < end {
            if let Some(ns) = self.free_by_addr.remove(&(addr + len)) {
                len += ns;
            }
        }
        if live == 0 && self.held - self.live > self.keep_bytes {
            debug_assert_eq!((addr, len), (base, csize));
            self.chunks.remove(&base);
            self.held -= csize;
            // SAFETY: base was allocated in `alloc` with this very layout, and no range in it is live.
            unsafe { std::alloc::dealloc(base as *mut u8, chunk_layout(csize).expect("allocated with it")) };
        } else {
            self.free_by_addr.insert(addr, len);
        }
    }

    /// Bytes of chunks held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

static ARENA: Mutex<Arena> = Mutex::new(Arena::new(CHUNK_BYTES, KEEP_BYTES));

fn arena() -> std::sync::MutexGuard<'static, Arena> {
    // every update of the arena's maps completes before the lock is released; a panic elsewhere
    // while it was held leaves nothing half-done
    ARENA.lock().unwrap_or_else(|e| e.into_inner())
}

/// n elements of T in a range of the process-wide arena (its memory goes back there on drop).
pub struct Buffer<T: Elem> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: a Buffer owns its range alone, like a Vec<T> of plain-old-data T.
unsafe impl<T: Elem> Send for Buffer<T> {}
// SAFETY: shared access only reads through &[T].
unsafe impl<T: Elem> Sync for Buffer<T> {}

impl<T: Elem> Buffer<T> {
    fn bytes(n: usize) -> Result<usize> {
        n.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| Error(format!("cannot allocate {n} elements: size overflows")))
    }
}

/// A range not yet initialised; released if the fill panics.
struct Uninit<T: Elem> {
    ptr: NonNull<T>,
    len: usize,
}

impl<T: Elem> Uninit<T> {
    fn new(n: usize) -> Result<Uninit<T>> {
        let bytes = Buffer::<T>::bytes(n)?;
        if bytes == 0 {
            return Ok(Uninit { ptr: NonNull::dangling(), len: n });
        }
        let p = arena().alloc(bytes)?;
        Ok(Uninit { ptr: p.cast(), len: n })
    }
    fn slice(&mut self) -> &mut [MaybeUninit<T>] {
        // SAFETY: the range holds len elements of T (ALIGN-aligned), owned by self alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr() as *mut MaybeUninit<T>, self.len) }
    }
    /// SAFETY: every element was written.
    unsafe fn assume_init(self) -> Buffer<T> {
        let b = Buffer { ptr: self.ptr, len: self.len };
        std::mem::forget(self);
        b
    }
}

fn release<T: Elem>(ptr: NonNull<T>, len: usize) {
    let bytes = len * std::mem::size_of::<T>();
    if bytes > 0 {
        arena().release(ptr.cast(), bytes);
    }
}

impl<T: Elem> Drop for Uninit<T> {
    fn drop(&mut self) {
        release(self.ptr, self.len);
    }
}

impl<T: Elem> Drop for Buffer<T> {
    fn drop(&mut self) {
        release(self.ptr, self.len);
    }
}

impl<T: Elem> Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: len initialised elements, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Elem> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and &mut self is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// n elements, all +0.0 (all-zero bits in every dtype).
pub(crate) fn zeroed<T: Elem>(n: usize) -> Result<Buffer<T>> {
    full(n, T::from_bits(0))
}

/// n elements, all `value`.
pub(crate) fn full<T: Elem>(n: usize, value: T) -> Result<Buffer<T>> {
    let mut u = Uninit::<T>::new(n)?;
    u.slice().fill(MaybeUninit::new(value));
    // SAFETY: every element was just written.
    Ok(unsafe { u.assume_init() })
}

/// n elements written by `fill`, which must write every one (it is handed the uninitialised range).
/// SAFETY: `fill` writes all n elements or panics (then the range is released, never read).
pub(crate) unsafe fn filled_with<T: Elem>(n: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Result<Buffer<T>> {
    let mut u = Uninit::<T>::new(n)?;
    fill(u.slice());
    // SAFETY: the caller's promise.
    Ok(unsafe { u.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    const MIB: usize = 1 << 20;

    #[test]
    fn a_released_range_serves_any_later_size() {
        let mut a = Arena::new(8 * MIB, 16 * MIB);
        let x = a.alloc(3 * MIB).unwrap();
        assert_eq!(x.as_ptr() as usize % ALIGN, 0);
        a.release(x, 3 * MIB);
        // smaller: the same start (the chunk's one free range)
        let y = a.alloc(MIB + 1).unwrap();
        assert_eq!(y, x);
        let z = a.alloc(MIB).unwrap();
        assert_eq!(z.as_ptr() as usize, x.as_ptr() as usize + MIB + ALIGN, "split after the rounded first range");
        a.release(y, MIB + 1);
        a.release(z, MIB);
        // merged back into one range: a request as large as the whole chunk fits without a new chunk
        let w = a.alloc(8 * MIB).unwrap();
        assert_eq!((w, a.held()), (x, 8 * MIB));
        a.release(w, 8 * MIB);
    }

    #[test]
    fn neighbours_merge_in_any_release_order() {
        let mut a = Arena::new(4 * MIB, 16 * MIB);
        let r: Vec<_> = (0..4).map(|_| a.alloc(MIB).unwrap()).collect();
        for k in [1, 3, 0, 2] {
            a.release(r[k], MIB);
        }
        assert_eq!(a.free_by_addr.len(), 1, "{:?}", a.free_by_addr);
        assert_eq!(a.alloc(4 * MIB).unwrap(), r[0]);
    }

    #[test]
    fn first_fit_takes_the_lowest_range_that_holds_the_request() {
        let mut a = Arena::new(8 * MIB, 16 * MIB);
        let r: Vec<_> = [3 * MIB, 64, MIB, 64].iter().map(|&b| a.alloc(b).unwrap()).collect();
        a.release(r[0], 3 * MIB);
        a.release(r[2], MIB);
        assert_eq!(a.alloc(2 * MIB).unwrap(), r[0]);
        let lowest = r[0].as_ptr() as usize + 2 * MIB;
        assert_eq!(a.alloc(4096).unwrap().as_ptr() as usize, lowest, "the lowest hole that fits, not the smallest");
    }

    #[test]
    fn wholly_free_chunks_go_back_when_more_than_keep_bytes_are_free() {
        let mut a = Arena::new(2 * MIB, 4 * MIB);
        let r: Vec<_> = (0..3).map(|_| a.alloc(2 * MIB).unwrap()).collect();
        let big = a.alloc(5 * MIB).unwrap(); // a chunk of its own, rounded to 6 MiB
        assert_eq!(a.held(), 12 * MIB);
        a.release(r[0], 2 * MIB);
        assert_eq!(a.held(), 12 * MIB, "2 MiB free: kept, however much is live");
        a.release(big, 5 * MIB);
        assert_eq!(a.held(), 6 * MIB, "8 MiB free: the chunk just emptied goes back");
        a.release(r[1], 2 * MIB);
        assert_eq!(a.held(), 6 * MIB, "4 MiB free: kept");
        a.release(r[2], 2 * MIB);
        assert_eq!(a.held(), 4 * MIB, "6 MiB free: back to 4");
        assert_eq!((a.live, a.chunks.values().map(|c| c.live).sum::<usize>()), (0, 0));
    }

    #[test]
    fn impossible_sizes_are_errors_not_panics() {
        let mut a = Arena::new(2 * MIB, 4 * MIB);
        assert!(a.alloc(usize::MAX).unwrap_err().0.contains("overflows"));
        assert!(a.alloc(isize::MAX as usize).unwrap_err().0.contains("overflows"));
        assert!(zeroed::<f32>(usize::MAX / 2).err().unwrap().0.contains("overflows"));
    }

    #[test]
    fn a_range_reused_by_another_dtype_never_shows_its_old_contents() {
        // the process-wide arena: other tests use it at the same time, so only contents are asserted
        let n = 1_234_567;
        let mut a = zeroed::<f32>(n).unwrap();
        assert!(a.iter().all(|x| x.to_bits() == 0));
        a.fill(7.5);
        drop(a);
        let b = zeroed::<bf16>(2 * n + 1).unwrap();
        assert!(b.iter().all(|x| x.to_bits() == 0), "no stale contents");
        // SAFETY: the fill writes every element
        let c = unsafe {
            filled_with::<f16>(n, |s| {
                s.iter_mut().enumerate().for_each(|(i, x)| {
                    x.write(f16::from_f32((i % 7) as f32));
                })
            })
        }
        .unwrap();
        assert_eq!(c.len(), n);
        assert_eq!(c[n - 1].to_f32(), ((n - 1) % 7) as f32);
        assert_eq!(zeroed::<f32>(0).unwrap().len(), 0);
    }
}
