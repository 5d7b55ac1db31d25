//! Unmapping retired memory off the threads that matter.
//!
//! Unmapping a log of tens of MiB, and with it freeing the pages of its unlinked file, is milliseconds of
//! kernel time: 4.2 to 5.6 ms for a 48 MiB log (16 MiB terms) on the failover bench's host. Done by
//! whichever thread drops the last reference, it stalled the consensus agent's duty cycle in the middle
//! of a leadership change, and the application's poll of the committed log at each log switch (the bench
//! saw a new leader's first commit up to 14 ms late: three members' old logs unmapped in one poll).
//!
//! A mapping at least [`DEFERRED_MIN_LENGTH`] long is therefore handed to one thread of the process,
//! started on first use, which unmaps it at a lowered priority (nice 10: it yields the cores to
//! the agents, and still progresses when they are all busy). Smaller ones are unmapped at once.
//!
//! The thread unmaps each mapping [`UNMAP_DELAY`] after it was handed over, not at once: an unmap holds
//! the process's `mmap_lock` for its milliseconds, and a term change, when old logs retire, is also when
//! the agents map and free memory (a follower's new Receiver, its buffers): measured on the failover
//! bench (`perf record -e sched:sched_switch -g`), the members' agent threads waited up to 5.4 ms in
//! `mmap` and `munmap` for the lock while `qc-unmap` unmapped a 48 MiB log, right in the transfer's
//! critical path. By the delay's end the new term has settled. The cost: a retired log's pages (its file
//! in `/dev/shm` is unlinked, but the mapping holds them) count against the file system for 50 ms more.
//!
//! Invariant: what is handed over is the mapping's last owner (a [`Region`](super::buffer::Region) being
//! dropped), so nothing reads or writes it after; when the thread cannot be started, the caller unmaps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::OnceLock;
use std::time::Instant;

use memmap2::MmapMut;

/// Mappings at least this long are unmapped by the background thread.
pub const DEFERRED_MIN_LENGTH: usize = 1 << 20;

/// How long after it is handed over the background thread unmaps a mapping (see the module docs).
pub const UNMAP_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// The background thread's nice value (Linux: per thread).
const NICE: libc::c_int = 10;

static UNMAPPER: OnceLock<Option<Sender<(Instant, MmapMut)>>> = OnceLock::new();

/// Mappings the background thread has unmapped so far.
static UNMAPPED: AtomicU64 = AtomicU64::new(0);

/// Unmaps `map`: on the background thread when it is at least [`DEFERRED_MIN_LENGTH`] long, here
/// otherwise (or when that thread cannot be started).
pub(crate) fn unmap(map: MmapMut) {
    if map.len() < DEFERRED_MIN_LENGTH {
        return drop(map);
    }
    match UNMAPPER.get_or_init(start) {
        Some(unmapper) => {
            if let Err(returned) = unmapper.send((Instant::now(), map)) {
                drop(returned.0);
            }
        }
        None => drop(map),
    }
}

/// How many mappings the background thread has unmapped (for tests and diagnostics).
pub fn unmapped() -> u64 {
    UNMAPPED.load(Ordering::Acquire)
}

fn start() -> Option<Sender<(Instant, MmapMut)>> {
    let (unmapper, retired) = mpsc::channel::<(Instant, MmapMut)>();
    let spawned = std::thread::Builder::new().name("qc-unmap".into()).spawn(move || {
        lower_priority();
        for (handed_over, map) in retired {
            std::thread::sleep((handed_over + UNMAP_DELAY).saturating_duration_since(Instant::now()));
            drop(map);
            UNMAPPED.fetch_add(1, Ordering::Release);
        }
    });
    spawned.ok().map(|_| unmapper)
}

/// Lowers the calling thread's priority to nice 10: for work beside the agents that must not take their
/// cores from them (this module's unmapping, the making of a spare log file).
#[cfg(target_os = "linux")]
pub fn lower_priority() {
    // SAFETY: `setpriority` reads only its integer arguments; on Linux `PRIO_PROCESS` with `who == 0` sets
    // the calling thread's nice value. A failure leaves the priority as it was, which is harmless.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) };
}

/// See the Linux version: elsewhere the priority stays as it is.
#[cfg(not(target_os = "linux"))]
pub(crate) fn lower_priority() {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::buffer::Region;

    #[test]
    fn a_large_region_is_unmapped_by_the_background_thread_and_a_small_one_at_once() {
        let before = unmapped();
        drop(Region::anonymous(DEFERRED_MIN_LENGTH / 2).unwrap());
        drop(Region::anonymous(DEFERRED_MIN_LENGTH).unwrap());
        // Other tests may hand over mappings too: the count only grows, and this one's is among it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while unmapped() == before {
            assert!(std::time::Instant::now() < deadline, "the background thread unmapped nothing");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
