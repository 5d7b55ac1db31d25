//! What a timed wait costs this host, measured once per process.
//!
//! A timed wait (`ppoll`, `clock_nanosleep`, a futex wait with a timeout: every park) arms a timer before
//! the thread sleeps and cancels it after. On bare metal that costs a microsecond or two. In a KVM guest
//! whose clock events are the local APIC's TSC-deadline timer, each arming is a write the hypervisor
//! traps: on the 2-vCPU guests this project is measured on, a wait of 1-5 us took 25-26 us of the
//! thread's CPU time, never switched the thread out (the timer had expired by the time it was armed), and
//! returned after those 25 us; a wait of 1 ms cost the same 25 us of CPU beside its sleep. A wait that
//! short holds the core it was meant to give up, and costs more than it spares.
//!
//! [`short_wait`] is the longest wait not worth a timer here: twice that cost. The backoff idle strategy
//! parks no shorter, and a client's wait on its socket looks without blocking instead.

use std::sync::OnceLock;
use std::time::Duration;

/// Timed waits measured to find their cost.
const COST_SAMPLES: usize = 5;

/// The longest wait not worth arming a timer for on this host: twice the CPU time a 1 us timed wait costs
/// the calling thread, the least of five tries. Measured by the first call in the process
/// (about five timed waits), then kept.
pub fn short_wait() -> Duration {
    static SHORT: OnceLock<Duration> = OnceLock::new();
    *SHORT.get_or_init(|| 2 * cost())
}

/// The thread CPU time of a 1 us `ppoll` on no descriptors, the least of [`COST_SAMPLES`] tries.
fn cost() -> Duration {
    let timeout = libc::timespec { tv_sec: 0, tv_nsec: 1_000 };
    let ns = (0..COST_SAMPLES)
        .map(|_| {
            let before = thread_cpu_ns();
            // SAFETY: no descriptors (a null array of length 0 is allowed) and a valid timespec on the
            // stack; no signal mask.
            unsafe { libc::ppoll(std::ptr::null_mut(), 0, &timeout, std::ptr::null()) };
            thread_cpu_ns().saturating_sub(before)
        })
        .min()
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec on the stack, written by the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}
