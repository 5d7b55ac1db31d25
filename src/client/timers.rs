//! The client's timers: when the next is due (a keep-alive, a resend, an ask for the leader, the leader's
//! silence, a lingering datagram), the blocking wait until then, and what each does when it fires.

use std::io;
use std::time::Duration;

use super::wire::{self, RecordHeader};
use super::{wait, ClusterClient, State};

impl ClusterClient {
    /// Blocks (in `ppoll(2)` on the client's socket, spending no CPU) until a datagram is there to read,
    /// `timeout` passes, or the client's next timer is due (a keep-alive, a resend, an ask for the
    /// leader, the leader's silence, a lingering datagram), whichever is first; true when a datagram is
    /// there. The idle of a caller with nothing to do until the cluster answers: it wakes when the answer
    /// arrives, not at the end of a sleep, and leaves the core to others meanwhile (on a host whose cores
    /// the cluster shares, a client that spins takes them from it). Call [`poll`](Self::poll) after it.
    ///
    /// A wait too short to be worth arming a timer on this host (twice what arming one costs, measured once
    /// per process: on some virtual machines arming one costs 25 us of CPU and never gives up the core)
    /// yields the core once and looks at the socket without blocking instead.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let now = self.clock.now_ns();
        let mut wait_ns = timeout.as_nanos().min(u128::from(u64::MAX)) as u64;
        if let Some(due) = self.next_timer_ns() {
            wait_ns = wait_ns.min(due.saturating_sub(now));
        }
        let Some(socket_fd) = self.link.socket.readiness_fd() else {
            // A simulated network: nothing to block on (its caller moves the time).
            return Ok(false);
        };
        wait::until_readable(socket_fd, wait_ns)
    }

    /// When the first of the client's timers is due (clock ns), if it has any.
    fn next_timer_ns(&self) -> Option<u64> {
        let after = |from: u64, d: Duration| from.saturating_add(d.as_nanos() as u64);
        let linger = (!self.link.out.is_empty()).then(|| after(self.link.out_since_ns, self.config.linger));
        let timers = match self.state {
            State::Idle => None,
            State::Opening | State::Reconnecting => Some(self.search.next_ask_ns),
            State::Connected => {
                let resend = self.in_flight.pending.front().map(|p| after(p.sent_ns, self.config.resend_timeout));
                let silent = after(self.last_heard_ns, self.config.leader_timeout);
                let keepalive = after(self.last_sent_ns, self.config.keepalive_interval);
                Some(silent.min(keepalive).min(resend.unwrap_or(u64::MAX)))
            }
        };
        match (timers, linger) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// Keep-alives, resends, and asking for a session or a leader.
    pub(super) fn on_timers(&mut self, now: u64) -> usize {
        match self.state {
            State::Idle => 0,
            State::Opening | State::Reconnecting => {
                if now < self.search.next_ask_ns {
                    return 0;
                }
                self.search.next_ask_ns = now + self.config.connect_retry.as_nanos() as u64;
                self.ask_round()
            }
            State::Connected => {
                if now.saturating_sub(self.last_heard_ns) >= self.config.leader_timeout.as_nanos() as u64 {
                    // The leader is silent: look for the leader, from the next member.
                    self.state = State::Reconnecting;
                    self.search.known_leader = None;
                    self.search.cursor = (self.search.target + 1) % self.config.members.len();
                    self.search.next_ask_ns = 0;
                    return 1;
                }
                if let Some(oldest) = self.in_flight.pending.front() {
                    if now.saturating_sub(oldest.sent_ns) >= self.config.resend_timeout.as_nanos() as u64 {
                        let from = oldest.correlation_id;
                        return self.resend_from(from, now);
                    }
                }
                if now.saturating_sub(self.last_sent_ns) >= self.config.keepalive_interval.as_nanos() as u64 {
                    self.push(RecordHeader::new(wire::KEEP_ALIVE, self.session.id), &[]);
                    return self.flush();
                }
                0
            }
        }
    }
}
