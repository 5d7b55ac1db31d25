//! Waiting for a client's socket to become readable: `ppoll(2)` with a timeout, unless the timeout is
//! too short for a timed wait to be worth its cost on this host ([`crate::agent::timed_wait`]).
//!
//! On the KVM guests this project is measured on, a client whose next message was due in 4.5 us (rho 0.1
//! at MTU 1408) spent 0.9 of a core in `ppoll`s that never slept, and the Sender that shared its core
//! waited 3.4 ms on average for it (`perf sched`): commit acknowledgements arrived 3.3 ms late at p50
//! instead of 66 us. So a wait no longer than [`short_wait`](crate::agent::timed_wait::short_wait) does
//! not arm a timer: it gives the core to any other runnable thread once (`sched_yield`) and looks at the
//! socket without blocking.
//!
//! Invariant: [`until_readable`] returns within about `wait_ns`, or at once when the wait is short; it
//! never blocks longer.

use std::io;
use std::os::fd::RawFd;

/// Waits for `fd` to be readable for at most `wait_ns` (see the module notes for short waits); true when
/// it is readable.
pub(super) fn until_readable(fd: RawFd, wait_ns: u64) -> io::Result<bool> {
    let short = wait_ns <= crate::agent::timed_wait::short_wait().as_nanos() as u64;
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
        assert!(
            until_readable(fd, crate::agent::timed_wait::short_wait().as_nanos() as u64 + 1_000_000_000).unwrap(),
            "readable ends a long wait"
        );
    }
}
