//! Shared memory, and the one place where quorumcast touches it through raw pointers.
//!
//! Every structure that lives in memory shared between threads or processes (log buffers, ring
//! buffers, counters) is built on [`AtomicBuffer`]: a bounds-checked view of a mapped region with
//! typed, explicitly ordered loads and stores. The region is kept alive by reference counting, so a
//! view can never outlive the memory it points at.
//!
//! All multi-byte values are little-endian, as on the wire; quorumcast supports little-endian hosts
//! only, which lets atomics over shared memory and the wire format be the same bytes.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};

#[cfg(not(target_endian = "little"))]
compile_error!("quorumcast lays out shared memory and frames little-endian and supports little-endian hosts only");

/// Size of a cache line as far as false sharing goes: 128 bytes covers the adjacent-line prefetcher of
/// x86_64 and the 128-byte lines of some aarch64 parts (the same choice as `crossbeam_utils::CachePadded`).
pub const CACHE_LINE_LENGTH: usize = 128;

/// Bytes between two prefetches of [`AtomicBuffer::prefetch`]: one hardware cache line.
pub const PREFETCH_STRIDE: usize = 64;

/// Size of a page of the mappings we create.
pub const PAGE_LENGTH: usize = 4096;

/// Rounds `value` up to the next multiple of `alignment`, which must be a power of two.
#[inline]
pub const fn align(value: usize, alignment: usize) -> usize {
    (value + alignment - 1) & !(alignment - 1)
}

/// The memory behind one or more [`AtomicBuffer`]s: a file mapping or an anonymous mapping. A large one
/// is unmapped, once the last view of it goes, off the dropping thread ([`super::reclaim`]).
#[derive(Debug)]
pub struct Region {
    map: ManuallyDrop<MmapMut>,
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `map` is taken once, here, as the region is dropped, and is not used after.
        let map = unsafe { ManuallyDrop::take(&mut self.map) };
        super::reclaim::unmap(map);
    }
}

/// Writes a zero into the first byte of each page from `start` to `end` (a page-aligned `start`), so that
/// the kernel backs them now.
fn touch_pages(buffer: &AtomicBuffer, start: usize, end: usize) {
    for offset in (start..end).step_by(PAGE_LENGTH) {
        buffer.put_u8(offset, 0);
    }
}

/// Reserves the blocks of `file`'s first `length` bytes now (`posix_fallocate`), so that a full file
/// system (a full `/dev/shm`) is an error here, naming the file and the size, and never a `SIGBUS` on
/// the first write into a sparse page of the mapping later. File systems that cannot preallocate
/// (`EOPNOTSUPP`) keep the sparse file: their pages are then reserved on first touch only.
fn reserve(file: &File, length: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(length) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{length} bytes is too large to map")));
    };
    // SAFETY: `posix_fallocate` reads only its integer arguments; the descriptor is owned by `file`, which
    // outlives the call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        libc::ENOSPC => Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("no space to reserve {length} bytes ({} MiB): the file system is full; free space or lower the term length", length >> 20),
        )),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

impl Region {
    /// Maps `length` bytes of fresh, zeroed anonymous memory (page aligned), for use within one process.
    pub fn anonymous(length: usize) -> io::Result<Arc<Self>> {
        let map = MmapOptions::new().len(length.max(1)).map_anon()?;
        Ok(Arc::new(Self { map: ManuallyDrop::new(map) }))
    }

    /// Creates (or truncates) the file at `path` with `length` zeroed bytes, reserved on the file system
    /// (`posix_fallocate`: a full file system fails here, naming the size, not with `SIGBUS` later), and maps
    /// it shared.
    ///
    /// When `pre_touch` is true every page is written once now, so that the first use on the hot path
    /// does not take a page fault.
    pub fn create_file(path: &Path, length: usize, pre_touch: bool) -> io::Result<Arc<Self>> {
        // A file already at `path` is unlinked, never truncated: a mapping of it (a reader still on an
        // earlier log of the same name) keeps its pages, where a truncation would make it fault (SIGBUS).
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        file.set_len(length as u64)?;
        if let Err(e) = reserve(&file, length) {
            // Leave no sparse file behind: a later write into it would be the SIGBUS this call prevents.
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let region = Self::map_file(&file)?;
        if pre_touch {
            touch_pages(&AtomicBuffer::new(Arc::clone(&region)), 0, length);
        }
        Ok(region)
    }

    /// Writes every page of the region once, `chunk` bytes at a time with a sleep of `pause` after each, so
    /// that the page faults (each a page allocated and zeroed by the kernel: about 17 ms for 48 MiB of
    /// `/dev/shm` on the test host) come as short bursts that leave the cores to the agents between them,
    /// not as one stall of whichever core the calling thread shares. For a background thread.
    pub fn touch_pages_paced(self: &Arc<Self>, chunk: usize, pause: std::time::Duration) {
        let buffer = AtomicBuffer::new(Arc::clone(self));
        let chunk = chunk.next_multiple_of(PAGE_LENGTH).max(PAGE_LENGTH);
        let length = self.map.len();
        for start in (0..length).step_by(chunk) {
            if start > 0 {
                std::thread::sleep(pause);
            }
            touch_pages(&buffer, start, (start + chunk).min(length));
        }
    }

    /// Maps an existing file at `path`, shared, read and write.
    pub fn open_file(path: &Path) -> io::Result<Arc<Self>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Self::map_file(&file)
    }

    fn map_file(file: &File) -> io::Result<Arc<Self>> {
        // SAFETY: the file is shared on purpose: every access through the mapping goes through
        // `AtomicBuffer`, whose protocol (ordered length fields, single writers per region) is what makes
        // concurrent access by other processes well defined. Truncation of the file by another process
        // while mapped is outside that protocol, as it is for Aeron's CnC and log files.
        let map = unsafe { MmapOptions::new().map_mut(file)? };
        Ok(Arc::new(Self { map: ManuallyDrop::new(map) }))
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A bounds-checked view of `length` bytes of a shared [`Region`], with typed, ordered access.
///
/// Invariants: `ptr .. ptr + length` lies inside `region`, which this view keeps alive; `ptr` is at
/// least 8-byte aligned when the view was made at an 8-byte-aligned offset (every structure of the
/// crate lays out its 64-bit fields at 8-byte-aligned offsets, checked by `debug_assert!`).
///
/// Cloning a view is cheap (a reference count) and is not done on hot paths: agents hold their views.
#[derive(Clone)]
pub struct AtomicBuffer {
    ptr: NonNull<u8>,
    length: usize,
    region: Arc<Region>,
}

// SAFETY: the view is a pointer into a mapping that is itself `Send + Sync` (memmap2's MmapMut), kept
// alive by `region`; every access goes through atomics or through copies whose exclusivity is guaranteed
// by the protocols of the structures built on top (single writer, ordered commit of the length field).
unsafe impl Send for AtomicBuffer {}
// SAFETY: see `Send`: shared access is the purpose of this type, and all of it is ordered explicitly.
unsafe impl Sync for AtomicBuffer {}

impl std::fmt::Debug for AtomicBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicBuffer").field("ptr", &self.ptr).field("length", &self.length).finish()
    }
}

/// Copies `length` bytes from `src` to `dst`: up to 64 bytes inline, as two fixed-size moves that may
/// overlap in the middle (what `memcpy` does for short copies, without its call and dispatch, which cost
/// more than a 32-byte copy); longer copies call `memcpy`.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `length` bytes, the two
/// ranges disjoint.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, length: usize) {
    /// Copies `N` bytes at the start and `N` at the end of the `length` (`N..=2N`) bytes.
    ///
    /// # Safety
    /// As for `copy_bytes`, and `N <= length <= 2 * N`.
    #[inline(always)]
    unsafe fn ends<const N: usize>(src: *const u8, dst: *mut u8, length: usize) {
        // SAFETY: `N <= length`, so both `N`-byte ranges lie inside the `length` bytes of each side.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, N);
            std::ptr::copy_nonoverlapping(src.add(length - N), dst.add(length - N), N);
        }
    }
    // SAFETY: each arm's bounds meet `ends`' condition; the rest is the caller's promise.
    unsafe {
        // Longest first: a message of 32 to 64 bytes, the common case, takes two compares.
        if length > 64 {
            std::ptr::copy_nonoverlapping(src, dst, length);
        } else if length >= 32 {
            ends::<32>(src, dst, length);
        } else if length >= 16 {
            ends::<16>(src, dst, length);
        } else if length >= 8 {
            ends::<8>(src, dst, length);
        } else if length >= 4 {
            ends::<4>(src, dst, length);
        } else if length > 0 {
            *dst = *src;
            *dst.add(length / 2) = *src.add(length / 2);
            *dst.add(length - 1) = *src.add(length - 1);
        }
    }
}

#[cold]
#[inline(never)]
fn out_of_bounds(offset: usize, length: usize, view: usize) -> ! {
    panic!("access of {length} bytes at {offset} is outside a buffer of {view} bytes")
}

impl AtomicBuffer {
    /// A view of the whole region.
    pub fn new(region: Arc<Region>) -> Self {
        let length = region.len();
        let ptr = NonNull::new(region.map.as_ptr() as *mut u8).expect("a mapping is never at null");
        Self { ptr, length, region }
    }

    /// A fresh anonymous region of `length` zeroed bytes and a view of all of it.
    pub fn anonymous(length: usize) -> io::Result<Self> {
        Ok(Self::new(Region::anonymous(length)?))
    }

    /// A view of `length` bytes starting at `offset` of this view.
    ///
    /// # Panics
    /// When `offset + length` exceeds this view.
    pub fn view(&self, offset: usize, length: usize) -> Self {
        self.check(offset, length);
        // SAFETY: `offset + length <= self.length` was checked, so the new pointer stays in the region.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset)) };
        Self { ptr, length, region: Arc::clone(&self.region) }
    }

    /// Length of the view in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.length
    }

    /// Whether the view is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Address of the first byte of the view (for `iovec`s handed to the kernel and for alignment checks).
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Panics unless `length` bytes at `offset` lie inside the view.
    ///
    /// The check is two compares on the hot path; the panic and its message are out of line, so that an
    /// access does not spill its operands for a message it almost never prints.
    #[inline(always)]
    fn check(&self, offset: usize, length: usize) {
        if !(offset <= self.length && length <= self.length - offset) {
            out_of_bounds(offset, length, self.length);
        }
    }

    #[inline(always)]
    fn at(&self, offset: usize, length: usize) -> *mut u8 {
        self.check(offset, length);
        // SAFETY: bounds checked just above.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    #[inline(always)]
    fn atomic_i32(&self, offset: usize) -> &AtomicI32 {
        let p = self.at(offset, 4);
        debug_assert!(p as usize % 4 == 0, "unaligned 32-bit atomic at offset {offset}");
        // SAFETY: in bounds, aligned (debug-checked; every layout of the crate aligns its fields), and
        // the memory lives as long as `self.region`, which outlives the returned reference.
        unsafe { AtomicI32::from_ptr(p as *mut i32) }
    }

    #[inline(always)]
    fn atomic_i64(&self, offset: usize) -> &AtomicI64 {
        let p = self.at(offset, 8);
        debug_assert!(p as usize % 8 == 0, "unaligned 64-bit atomic at offset {offset}");
        // SAFETY: as for `atomic_i32`.
        unsafe { AtomicI64::from_ptr(p as *mut i64) }
    }

    /// Loads an `i32` with acquire ordering: what was written before the matching release store is visible.
    #[inline]
    pub fn get_i32_acquire(&self, offset: usize) -> i32 {
        self.atomic_i32(offset).load(Ordering::Acquire)
    }

    /// Loads an `i32` with no ordering (single-writer data, or data ordered by another load).
    #[inline]
    pub fn get_i32(&self, offset: usize) -> i32 {
        self.atomic_i32(offset).load(Ordering::Relaxed)
    }

    /// Stores an `i32` with release ordering: every earlier write is visible to an acquire load of it.
    #[inline]
    pub fn put_i32_release(&self, offset: usize, value: i32) {
        self.atomic_i32(offset).store(value, Ordering::Release)
    }

    /// Stores an `i32` with no ordering.
    #[inline]
    pub fn put_i32(&self, offset: usize, value: i32) {
        self.atomic_i32(offset).store(value, Ordering::Relaxed)
    }

    /// Loads an `i64` with acquire ordering.
    #[inline]
    pub fn get_i64_acquire(&self, offset: usize) -> i64 {
        self.atomic_i64(offset).load(Ordering::Acquire)
    }

    /// Loads an `i64` with no ordering.
    #[inline]
    pub fn get_i64(&self, offset: usize) -> i64 {
        self.atomic_i64(offset).load(Ordering::Relaxed)
    }

    /// Stores an `i64` with release ordering.
    #[inline]
    pub fn put_i64_release(&self, offset: usize, value: i64) {
        self.atomic_i64(offset).store(value, Ordering::Release)
    }

    /// Stores an `i64` with no ordering.
    #[inline]
    pub fn put_i64(&self, offset: usize, value: i64) {
        self.atomic_i64(offset).store(value, Ordering::Relaxed)
    }

    /// Atomically adds `delta` to an `i64` (acquire-release) and returns the previous value.
    #[inline]
    pub fn get_and_add_i64(&self, offset: usize, delta: i64) -> i64 {
        self.atomic_i64(offset).fetch_add(delta, Ordering::AcqRel)
    }

    /// Atomically replaces an `i64` equal to `expected` by `new` (acquire-release); true when it did.
    #[inline]
    pub fn compare_and_set_i64(&self, offset: usize, expected: i64, new: i64) -> bool {
        self.atomic_i64(offset).compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Raises an `i64` to `value` if it is lower (release), for single-writer counters of maxima.
    #[inline]
    pub fn put_i64_max(&self, offset: usize, value: i64) {
        if value > self.get_i64(offset) {
            self.put_i64_release(offset, value);
        }
    }

    /// Hints the CPU to bring the cache line holding `offset` into its caches; no effect past the end of
    /// the view or on CPUs other than x86_64. A prefetch never faults and changes no memory, so it is
    /// safe on any address; readers use it to overlap the misses of a chain of dependent loads.
    #[inline(always)]
    pub fn prefetch(&self, offset: usize) {
        #[cfg(target_arch = "x86_64")]
        if offset < self.length {
            let p = self.ptr.as_ptr().wrapping_add(offset) as *const i8;
            // SAFETY: SSE is part of the x86_64 baseline, and a prefetch reads nothing architecturally: it
            // cannot fault or observe memory whatever the address (which is inside the view anyway).
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = offset;
    }

    /// Reads one byte.
    #[inline]
    pub fn get_u8(&self, offset: usize) -> u8 {
        // SAFETY: in bounds (checked by `at`); a byte read has no alignment requirement.
        unsafe { self.at(offset, 1).read_volatile() }
    }

    /// Writes one byte.
    #[inline]
    pub fn put_u8(&self, offset: usize, value: u8) {
        // SAFETY: in bounds (checked by `at`).
        unsafe { self.at(offset, 1).write_volatile(value) }
    }

    /// Reads a little-endian `u16` (unaligned allowed).
    #[inline]
    pub fn get_u16(&self, offset: usize) -> u16 {
        let mut bytes = [0u8; 2];
        self.get_bytes(offset, &mut bytes);
        u16::from_le_bytes(bytes)
    }

    /// Writes a little-endian `u16` (unaligned allowed).
    #[inline]
    pub fn put_u16(&self, offset: usize, value: u16) {
        self.put_bytes(offset, &value.to_le_bytes());
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// The caller's protocol must make this range exclusively its own until it publishes it with a release store.
    #[inline]
    pub fn put_bytes(&self, offset: usize, src: &[u8]) {
        let dst = self.at(offset, src.len());
        // SAFETY: destination in bounds; `src` is a Rust slice, which cannot overlap memory we only
        // ever reach through raw pointers while the protocol gives this range to the writer alone.
        unsafe { copy_bytes(src.as_ptr(), dst, src.len()) }
    }

    /// Writes a record whose first four bytes are its length: `head` at `offset + 4`, `body` right after
    /// it, then `length` at `offset` with a release store, which publishes the record to a reader that
    /// loads that length with acquire (a log frame). One bounds check covers all three writes, where
    /// three [`put_bytes`](Self::put_bytes)-like calls would check three times on an append's hot path.
    ///
    /// The caller's protocol must make the range exclusively its own until that release store.
    #[inline]
    pub fn put_record_release(&self, offset: usize, head: &[u8], body: &[u8], length: i32) {
        let body_at = 4 + head.len();
        let dst = self.at(offset, body_at + body.len());
        debug_assert!(dst as usize % 4 == 0, "unaligned record at offset {offset}");
        // SAFETY: `offset .. offset + 4 + head.len() + body.len()` is in bounds (checked just above), so are
        // both copies and the 4-byte length; `head` and `body` are Rust slices, which cannot overlap memory
        // reached only through raw pointers while the protocol gives this range to the writer alone; the
        // length is 4-byte aligned (debug-checked: records start on frame boundaries).
        unsafe {
            copy_bytes(head.as_ptr(), dst.add(4), head.len());
            copy_bytes(body.as_ptr(), dst.add(body_at), body.len());
            AtomicI32::from_ptr(dst as *mut i32).store(length, Ordering::Release);
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the buffer.
    #[inline]
    pub fn get_bytes(&self, offset: usize, dst: &mut [u8]) {
        let src = self.at(offset, dst.len());
        // SAFETY: source in bounds; `dst` is an exclusive Rust slice and cannot alias the mapping.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `length` bytes from `src_offset` of `src` to `offset` of this buffer (they may be the same buffer).
    #[inline]
    pub fn copy_from(&self, offset: usize, src: &AtomicBuffer, src_offset: usize, length: usize) {
        let d = self.at(offset, length);
        let s = src.at(src_offset, length);
        // SAFETY: both ranges in bounds; `copy` tolerates overlap.
        unsafe { std::ptr::copy(s, d, length) }
    }

    /// Sets `length` bytes at `offset` to `value`.
    #[inline]
    pub fn set_memory(&self, offset: usize, length: usize, value: u8) {
        let d = self.at(offset, length);
        // SAFETY: in bounds; the caller's protocol owns this range.
        unsafe { std::ptr::write_bytes(d, value, length) }
    }

    /// [`prefetch`](Self::prefetch) for every cache line of `length` bytes at `offset`. The Sender issues
    /// it for the datagrams it is about to scan and send, so that lines another core has just written
    /// travel in parallel, instead of one per dependent load as the frame-by-frame scan would fetch them.
    #[inline]
    pub fn prefetch_range(&self, offset: usize, length: usize) {
        let end = offset.saturating_add(length).min(self.length);
        let mut line = offset;
        while line < end {
            self.prefetch(line);
            line += PREFETCH_STRIDE;
        }
    }

    /// Borrows `length` bytes at `offset` as a slice.
    ///
    /// The bytes must not be written while the slice lives. Every reader in the crate only borrows frames
    /// whose committed length it has loaded with acquire, and writers never touch a committed frame again
    /// until flow control has moved every reader past it (publication limit = slowest reader + term/2).
    ///
    /// Crate-private: outside the crate nothing can keep that promise, so other code copies bytes out with
    /// [`get_bytes`](Self::get_bytes).
    #[inline]
    pub fn bytes(&self, offset: usize, length: usize) -> &[u8] {
        let p = self.at(offset, length);
        // SAFETY: in bounds, alive as long as `self`; not written while borrowed, by the protocol above.
        unsafe { std::slice::from_raw_parts(p, length) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_bytes_copies_every_length_exactly_and_nothing_beside() {
        let buffer = AtomicBuffer::anonymous(4096).unwrap();
        let source: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
        for length in 0..=130 {
            for offset in [0, 1, 31, 64, 1000] {
                buffer.set_memory(0, 4096, 0xEE);
                buffer.put_bytes(offset, &source[3..3 + length]);
                assert_eq!(buffer.bytes(offset, length), &source[3..3 + length], "{length} at {offset}");
                assert!(buffer.bytes(0, offset).iter().all(|&b| b == 0xEE), "before: {length} at {offset}");
                let after = offset + length;
                assert!(buffer.bytes(after, 4096 - after).iter().all(|&b| b == 0xEE), "after: {length} at {offset}");
            }
        }
    }

    #[test]
    fn a_record_is_its_length_head_and_body_and_nothing_beside() {
        let buffer = AtomicBuffer::anonymous(4096).unwrap();
        let head: Vec<u8> = (0..28u8).collect();
        let body: Vec<u8> = (0..200u32).map(|i| (i * 5 + 3) as u8).collect();
        for length in [0usize, 1, 31, 32, 33, 64, 65, 200] {
            for offset in [0, 32, 4096 - 32 - length.next_multiple_of(32).max(32)] {
                buffer.set_memory(0, 4096, 0xEE);
                buffer.put_record_release(offset, &head, &body[..length], 32 + length as i32);
                assert_eq!(buffer.get_i32_acquire(offset), 32 + length as i32);
                assert_eq!(buffer.bytes(offset + 4, 28), &head[..]);
                assert_eq!(buffer.bytes(offset + 32, length), &body[..length], "{length} at {offset}");
                assert!(buffer.bytes(0, offset).iter().all(|&b| b == 0xEE), "before: {length} at {offset}");
                let after = offset + 32 + length;
                assert!(buffer.bytes(after, 4096 - after).iter().all(|&b| b == 0xEE), "after: {length} at {offset}");
            }
        }
        buffer.set_memory(0, 4096, 0);
        assert!(std::panic::catch_unwind(|| buffer.put_record_release(4064, &head, b"x", 33)).is_err());
        assert_eq!(buffer.get_i32(4064), 0, "nothing written by a refused record");
    }

    #[test]
    fn views_are_bounds_checked_and_share_memory() {
        let whole = AtomicBuffer::anonymous(4096).unwrap();
        let part = whole.view(128, 256);
        part.put_i64_release(8, 42);
        assert_eq!(whole.get_i64_acquire(136), 42);
        assert_eq!(part.len(), 256);
        assert!(std::panic::catch_unwind(|| part.get_i64(256)).is_err());
        assert!(std::panic::catch_unwind(|| whole.view(4000, 200)).is_err());
    }

    #[test]
    fn prefetching_a_range_stops_at_the_view_and_changes_nothing() {
        let whole = AtomicBuffer::anonymous(4096).unwrap();
        whole.put_i64(4088, 7);
        let part = whole.view(1024, 1024);
        part.prefetch_range(1000, 1 << 20); // past the end: clamped to the view, no panic, no access
        part.prefetch_range(usize::MAX, 64);
        whole.prefetch_range(0, 4096);
        assert_eq!(whole.get_i64(4088), 7);
        assert!(whole.bytes(0, 4088).iter().all(|&b| b == 0));
    }

    #[test]
    fn atomics_and_bytes() {
        let b = AtomicBuffer::anonymous(256).unwrap();
        assert_eq!(b.get_and_add_i64(0, 5), 0);
        assert!(b.compare_and_set_i64(0, 5, 7));
        assert!(!b.compare_and_set_i64(0, 5, 9));
        b.put_i64_max(0, 3);
        assert_eq!(b.get_i64(0), 7);
        b.put_bytes(16, b"hello");
        let mut out = [0u8; 5];
        b.get_bytes(16, &mut out);
        assert_eq!(&out, b"hello");
        b.copy_from(32, &b.clone(), 16, 5);
        assert_eq!(b.bytes(32, 5), b"hello");
        b.put_u16(40, 0xBEEF);
        assert_eq!(b.get_u16(40), 0xBEEF);
        b.set_memory(16, 5, 0);
        assert_eq!(b.bytes(16, 5), &[0; 5]);
    }

    #[test]
    fn file_regions_are_shared_between_mappings() {
        let dir = std::env::temp_dir().join(format!("qc-buffer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("region");
        let a = AtomicBuffer::new(Region::create_file(&path, 8192, true).unwrap());
        let b = AtomicBuffer::new(Region::open_file(&path).unwrap());
        a.put_i64_release(4096, -3);
        assert_eq!(b.get_i64_acquire(4096), -3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paced_touching_makes_every_page_resident() {
        let dir = std::env::temp_dir().join(format!("qc-buffer-paced-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let length = 9 * PAGE_LENGTH + 100;
        let region = Region::create_file(&dir.join("region"), length, false).unwrap();
        region.touch_pages_paced(2 * PAGE_LENGTH, std::time::Duration::ZERO);
        let pages = length.div_ceil(PAGE_LENGTH);
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is the region's own mapping, page aligned, and `resident` has a byte per page.
        let rc = unsafe { libc::mincore(region.map.as_ptr() as *mut libc::c_void, length, resident.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        assert!(resident.iter().all(|&r| r & 1 == 1), "pages not resident: {resident:?}");
        assert!(AtomicBuffer::new(Arc::clone(&region)).bytes(0, length).iter().all(|&b| b == 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn align_rounds_up() {
        assert_eq!(align(0, 32), 0);
        assert_eq!(align(1, 32), 32);
        assert_eq!(align(160, 32), 160);
        assert_eq!(align(161, 32), 192);
    }
}
