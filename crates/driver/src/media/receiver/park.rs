//! How an idle Receiver parks: in `epoll_wait` on its sockets, so a datagram ends the park.

use super::*;

/// Parks in `epoll_wait` on the receive sockets, so readiness ends an idle park.
///
/// The sockets join the epoll set on the first park, not before: a socket in an epoll set makes every
/// datagram the kernel queues on it run the epoll callback under a lock, on the sending CPU, which on
/// loopback is the leader's Sender. A Receiver that never parks (invoked, or spinning) never pays that.
pub(super) struct ReadinessPark {
    pub(super) poll: Poll,
    pub(super) events: Events,
    /// The sockets to register, by channel index; emptied once they are registered.
    pub(super) pending: Vec<RawFd>,
}

impl ReadinessPark {
    fn register_pending(&mut self) {
        for (i, fd) in self.pending.drain(..).enumerate() {
            // A socket that cannot join the set is still polled every duty cycle: only its wake-up is lost,
            // and the park's timeout bounds that.
            let _ = self.poll.registry().register(&mut SourceFd(&fd), Token(i), Interest::READABLE);
        }
    }
}

impl Park for ReadinessPark {
    fn park(&mut self, timeout: Duration) {
        if !self.pending.is_empty() {
            self.register_pending();
        }
        // An error (EINTR) only ends this park early; the next duty cycle polls the sockets anyway.
        let _ = self.poll.poll(&mut self.events, Some(timeout));
    }
}
