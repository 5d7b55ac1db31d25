//! Retransmission on NAK: one outstanding retransmit per receiver, a linger that keeps loss from becoming
//! a storm, and a byte budget that keeps NAKs (lost data or forged requests) from costing without bound.
//!
//! A NAK names a range `(term_id, term_offset, length)` that a receiver is missing. The handler resends it
//! to that receiver and then *lingers* for `linger`: NAKs from the same receiver that fall inside the range
//! it has just resent are ignored, because those datagrams are on their way. Each receiver has one
//! retransmit action (Aeron's unicast semantics): a NAK outside the lingering range replaces it.
//!
//! What one receiver can make the Sender resend is bounded twice:
//! - one resend covers at most `max_resend` bytes (the receiver's window: its socket could take no more
//!   at once); the receiver NAKs the rest after its retry delay;
//! - each receiver has a token bucket of `rate` bytes per second, `max_resend` deep: a NAK that finds the
//!   bucket empty is throttled (counted, not acted on).
//!
//! The state is one slot per receiver, sized at start: the hot path does not allocate.

/// One receiver's retransmit state.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    lingering: bool,
    term_id: i32,
    term_offset: i32,
    length: i32,
    expires_ns: u64,
    /// Bytes this receiver may still be sent, refilled at the configured rate.
    tokens: u64,
    refilled_ns: u64,
}

impl Slot {
    fn covers(&self, term_id: i32, term_offset: i32) -> bool {
        self.lingering
            && self.term_id == term_id
            && term_offset >= self.term_offset
            && (term_offset as i64) < self.term_offset as i64 + self.length as i64
    }
}

/// What the handler did with a NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakOutcome {
    /// Resend `length` bytes from the NAK's start now (possibly less than it asked for).
    Resend {
        /// Bytes to resend, at most the NAK's length, `max_resend` and the receiver's budget.
        length: i32,
    },
    /// A retransmit of this range to this receiver is still lingering: nothing to do.
    Lingering,
    /// The receiver's retransmit budget is spent: nothing to do until it refills.
    Throttled,
}

/// Retransmit state of one publication's receivers.
#[derive(Debug)]
pub struct RetransmitHandler {
    slots: Box<[Slot]>,
    linger_ns: u64,
    /// Bytes per second per receiver; 0 is unlimited.
    rate: u64,
    max_resend: u64,
}

impl RetransmitHandler {
    /// A handler for `receivers` receivers whose resent ranges linger for `linger_ns`, each resend at most
    /// `max_resend` bytes, each receiver at most `rate` bytes per second (0: unlimited).
    pub fn new(receivers: usize, linger_ns: u64, rate: u64, max_resend: usize) -> Self {
        let max_resend = max_resend.max(1) as u64;
        let slot = Slot { tokens: max_resend, ..Slot::default() };
        Self { slots: vec![slot; receivers].into_boxed_slice(), linger_ns, rate, max_resend }
    }

    /// Handles a NAK of `length` bytes at (`term_id`, `term_offset`) from `receiver`: says how much to
    /// resend now, and lingers on that range. The caller resends and then reports the bytes it sent with
    /// [`Self::spent`].
    pub fn on_nak(&mut self, receiver: usize, term_id: i32, term_offset: i32, length: i32, now_ns: u64) -> NakOutcome {
        let (linger_ns, max_resend) = (self.linger_ns, self.max_resend);
        let budget = self.refill(receiver, now_ns);
        let slot = &mut self.slots[receiver];
        if slot.lingering && now_ns >= slot.expires_ns {
            slot.lingering = false;
        }
        if slot.covers(term_id, term_offset) {
            return NakOutcome::Lingering;
        }
        if budget == 0 {
            return NakOutcome::Throttled;
        }
        let length = (length.max(0) as u64).min(max_resend).min(budget) as i32;
        *slot = Slot { lingering: true, term_id, term_offset, length, expires_ns: now_ns + linger_ns, ..*slot };
        NakOutcome::Resend { length }
    }

    /// Takes `bytes` resent to `receiver` from its budget.
    pub fn spent(&mut self, receiver: usize, bytes: usize) {
        if self.rate > 0 {
            let slot = &mut self.slots[receiver];
            slot.tokens = slot.tokens.saturating_sub(bytes as u64);
        }
    }

    /// Refills `receiver`'s bucket for the time since the last refill; returns its tokens (`u64::MAX`
    /// when unlimited).
    fn refill(&mut self, receiver: usize, now_ns: u64) -> u64 {
        if self.rate == 0 {
            return u64::MAX;
        }
        let slot = &mut self.slots[receiver];
        let elapsed = now_ns.saturating_sub(slot.refilled_ns);
        let earned = (elapsed as u128 * self.rate as u128 / 1_000_000_000) as u64;
        if earned > 0 {
            slot.tokens = slot.tokens.saturating_add(earned).min(self.max_resend);
            slot.refilled_ns = now_ns;
        }
        slot.tokens
    }

    /// Ends the lingers that have run their time.
    pub fn expire(&mut self, now_ns: u64) {
        for slot in self.slots.iter_mut().filter(|s| s.lingering && now_ns >= s.expires_ns) {
            slot.lingering = false;
        }
    }

    /// How many receivers have a lingering retransmit.
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.lingering).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const UNLIMITED: u64 = 0;

    fn resend(length: i32) -> NakOutcome {
        NakOutcome::Resend { length }
    }

    #[test]
    fn resends_once_then_lingers_then_resends_again() {
        let mut h = RetransmitHandler::new(1, 10 * MS, UNLIMITED, 1 << 20);
        assert_eq!(h.on_nak(0, 5, 1024, 512, 0), resend(512));
        assert_eq!(h.on_nak(0, 5, 1024, 512, MS), NakOutcome::Lingering);
        assert_eq!(h.on_nak(0, 5, 1024 + 256, 64, MS), NakOutcome::Lingering);
        assert_eq!(h.on_nak(0, 5, 1024, 512, 10 * MS), resend(512));
    }

    #[test]
    fn receivers_are_independent_and_a_newer_range_replaces_the_lingering_one() {
        let mut h = RetransmitHandler::new(2, 10 * MS, UNLIMITED, 1 << 20);
        assert_eq!(h.on_nak(0, 5, 0, 512, 0), resend(512));
        assert_eq!(h.on_nak(1, 5, 0, 512, 0), resend(512), "another receiver");
        assert_eq!(h.active(), 2);
        assert_eq!(h.on_nak(0, 5, 512, 512, 0), resend(512), "the next range replaces the first");
        assert_eq!(h.on_nak(0, 5, 0, 512, 0), resend(512), "so the first is no longer lingering");
        h.expire(10 * MS);
        assert_eq!(h.active(), 0);
    }

    #[test]
    fn one_resend_covers_at_most_max_resend_bytes() {
        let mut h = RetransmitHandler::new(1, 10 * MS, UNLIMITED, 4096);
        assert_eq!(h.on_nak(0, 1, 0, 11 << 20, 0), resend(4096), "an 11 MB NAK costs one window");
        assert_eq!(h.on_nak(0, 1, 0, -5, 20 * MS), resend(0), "a negative length resends nothing");
    }

    #[test]
    fn a_receiver_that_spent_its_budget_is_throttled_until_it_refills() {
        // 1 MB/s, 64 KiB deep.
        let mut h = RetransmitHandler::new(2, 0, 1_000_000, 65536);
        assert_eq!(h.on_nak(0, 1, 0, 65536, 0), resend(65536));
        h.spent(0, 65536);
        assert_eq!(h.on_nak(0, 1, 65536, 1024, 1), NakOutcome::Throttled);
        assert_eq!(h.on_nak(1, 1, 0, 1024, 1), resend(1024), "another receiver has its own budget");
        // 1 ms later: 1,000 bytes earned.
        assert_eq!(h.on_nak(0, 1, 65536, 4096, MS + 1), resend(1000));
        h.spent(0, 1000);
        // A second later the bucket is full again, and never deeper than 64 KiB.
        assert_eq!(h.on_nak(0, 1, 0, 1 << 20, 10_000 * MS), resend(65536));
    }
}
