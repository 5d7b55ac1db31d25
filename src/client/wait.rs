//! Waiting for a client's socket to become readable: `ppoll(2)` with a timeout, unless the timeout is
//! too short for a timed wait to be worth its cost on this host.
//!
//! A timed wait arms a timer before the thread sleeps and cancels it after. On bare metal that costs
//! a microsecond or two. In a KVM guest whose clock events are the local APIC's TSC-deadline timer,
//! each arming is a write the hypervisor traps: on the 2-vCPU guests this project is measured on, a
//! `ppoll` or `clock_nanosleep` of 1-5 us took 25-26 us of the thread's CPU time, never switched the
//! thread out (the timer had expired by the time it was armed), and returned after those 25 us. A client
//! whose next message was due in 4.5 us (rho 0.1 at MTU 1408) spent 0.9 of a core in such waits, and the
//! Sender that shared its core waited 3.4 ms on average for it (`perf sched`): commit acknowledgements
//! arrived 3.3 ms late at p50 instead of 66 us.
//!
//! So a wait no longer than [`short_wait_ns`] (twice what this host's timed wait costs, measured once per
//! process) does not arm a timer: it gives the core to any other runnable thread once (`sched_yield`) and
//! looks at the socket without blocking.
//!
//! Invariant: [`until_readable`] returns within about `wait_ns`, or at once when the wait is short; it
//! never blocks longer.

use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;

/// Timed waits measured to find their cost.
const COST_SAMPLES: usize = 5;

/// Waits for `fd` to be readable for at most `wait_ns` (see the module notes for short waits); true when
/// it is readable.
pub(super) fn until_readable(fd: RawFd, wait_ns: u64) -> io::Result<bool> {
    let short = wait_ns <= short_wait_ns();
    if short {
        std::thread::yield_now();
    }
    let wait_ns = if short { 0 } else { wait_ns };
    let mut pollfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let timeout = timespec(wait_ns);
    // SAFETY: one valid pollfd and a valid timespec, both on the stack for the call; no signal mask.
    let ready = unsafe { libc::ppoll(&mut pollfd, 1, &timeout, std::ptr::null()) };
    match ready {
        0 => Ok(false),
        n if n > 0 => Ok(pollfd.revents & libc::POLLIN != 0),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// The longest wait not worth a timer on this host: twice the CPU time a 1 us timed wait costs the
/// calling thread, the least of [`COST_SAMPLES`] (measured by the first call in the process, about
/// `COST_SAMPLES` x that cost).
pub(super) fn short_wait_ns() -> u64 {
    static SHORT: OnceLock<u64> = OnceLock::new();
    *SHORT.get_or_init(|| 2 * timed_wait_cost_ns())
}

/// The thread CPU time of a 1 us `ppoll` on no descriptors, the least of [`COST_SAMPLES`] tries.
fn timed_wait_cost_ns() -> u64 {
    let timeout = timespec(1_000);
    (0..COST_SAMPLES)
        .map(|_| {
            let before = thread_cpu_ns();
            // SAFETY: no descriptors (a null array of length 0 is allowed) and a valid timespec on the
            // stack; no signal mask.
            unsafe { libc::ppoll(std::ptr::null_mut(), 0, &timeout, std::ptr::null()) };
            thread_cpu_ns().saturating_sub(before)
        })
        .min()
        .unwrap_or(0)
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec on the stack, written by the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_wait_returns_at_once_and_a_readable_socket_is_seen_either_way() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
        assert!(!until_readable(fd, 0).unwrap(), "nothing sent yet");
        socket.send_to(b"x", socket.local_addr().unwrap()).unwrap();
        // A datagram on loopback is queued by the time send_to returns.
        assert!(until_readable(fd, 0).unwrap());
        assert!(until_readable(fd, short_wait_ns() + 1_000_000_000).unwrap(), "readable ends a long wait");
    }
}
