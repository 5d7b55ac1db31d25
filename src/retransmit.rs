//! Retransmission on NAK, with a linger that keeps loss from becoming a storm.
//!
//! A NAK names a range `(term_id, term_offset, length)` that a receiver is missing. The handler resends it
//! at once to that receiver and then *lingers*: for `linger` it ignores NAKs from the same receiver that
//! fall inside a range it has just resent, because those datagrams are already on their way. So each
//! range has at most one retransmit in flight per receiver, however many NAKs arrive.
//!
//! Actions live in a fixed pool sized at start ([`MAX_ACTIONS`]); when it is full the NAK is not acted on
//! and counted as an overflow (the receiver NAKs again after its retry delay).

/// Most retransmits lingering at once.
pub const MAX_ACTIONS: usize = 16;

#[derive(Clone, Copy, Debug, Default)]
struct Action {
    active: bool,
    destination: usize,
    term_id: i32,
    term_offset: i32,
    length: i32,
    expires_ns: u64,
}

impl Action {
    fn covers(&self, destination: usize, term_id: i32, term_offset: i32) -> bool {
        self.active
            && self.destination == destination
            && self.term_id == term_id
            && term_offset >= self.term_offset
            && (term_offset as i64) < self.term_offset as i64 + self.length as i64
    }
}

/// What the handler did with a NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakOutcome {
    /// The range was resent now.
    Resent,
    /// A retransmit of this range to this receiver is still lingering: nothing to do.
    Lingering,
    /// Every action slot is busy; the receiver will NAK again.
    Overflow,
}

/// Retransmit actions of one publication.
#[derive(Debug)]
pub struct RetransmitHandler {
    actions: [Action; MAX_ACTIONS],
    linger_ns: u64,
}

impl RetransmitHandler {
    /// A handler whose resent ranges linger for `linger_ns`.
    pub fn new(linger_ns: u64) -> Self {
        Self { actions: [Action::default(); MAX_ACTIONS], linger_ns }
    }

    /// Handles a NAK from the receiver at `destination`: unless a lingering action covers it, calls
    /// `resend(term_id, term_offset, length)` now and lingers on that range.
    pub fn on_nak(
        &mut self,
        destination: usize,
        term_id: i32,
        term_offset: i32,
        length: i32,
        now_ns: u64,
        resend: impl FnOnce(i32, i32, i32),
    ) -> NakOutcome {
        self.expire(now_ns);
        if self.actions.iter().any(|a| a.covers(destination, term_id, term_offset)) {
            return NakOutcome::Lingering;
        }
        let Some(slot) = self.actions.iter_mut().find(|a| !a.active) else {
            return NakOutcome::Overflow;
        };
        *slot = Action { active: true, destination, term_id, term_offset, length, expires_ns: now_ns + self.linger_ns };
        resend(term_id, term_offset, length);
        NakOutcome::Resent
    }

    /// Ends the lingers that have run their time.
    pub fn expire(&mut self, now_ns: u64) {
        for a in self.actions.iter_mut().filter(|a| a.active && now_ns >= a.expires_ns) {
            a.active = false;
        }
    }

    /// How many actions are lingering.
    pub fn active(&self) -> usize {
        self.actions.iter().filter(|a| a.active).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn resends_once_then_lingers_then_resends_again() {
        let mut h = RetransmitHandler::new(10 * MS);
        let mut resent = Vec::new();
        assert_eq!(h.on_nak(0, 5, 1024, 512, 0, |t, o, l| resent.push((t, o, l))), NakOutcome::Resent);
        assert_eq!(h.on_nak(0, 5, 1024, 512, MS, |t, o, l| resent.push((t, o, l))), NakOutcome::Lingering);
        assert_eq!(h.on_nak(0, 5, 1024 + 256, 64, MS, |t, o, l| resent.push((t, o, l))), NakOutcome::Lingering);
        assert_eq!(h.on_nak(0, 5, 1024, 512, 10 * MS, |t, o, l| resent.push((t, o, l))), NakOutcome::Resent);
        assert_eq!(resent, vec![(5, 1024, 512), (5, 1024, 512)]);
    }

    #[test]
    fn ranges_and_receivers_are_independent() {
        let mut h = RetransmitHandler::new(10 * MS);
        let mut n = 0;
        assert_eq!(h.on_nak(0, 5, 0, 512, 0, |_, _, _| n += 1), NakOutcome::Resent);
        assert_eq!(h.on_nak(1, 5, 0, 512, 0, |_, _, _| n += 1), NakOutcome::Resent, "another receiver");
        assert_eq!(h.on_nak(0, 5, 512, 512, 0, |_, _, _| n += 1), NakOutcome::Resent, "the next range");
        assert_eq!(h.on_nak(0, 6, 0, 512, 0, |_, _, _| n += 1), NakOutcome::Resent, "another term");
        assert_eq!(n, 4);
        assert_eq!(h.active(), 4);
        h.expire(10 * MS);
        assert_eq!(h.active(), 0);
    }

    #[test]
    fn a_full_pool_overflows_instead_of_growing() {
        let mut h = RetransmitHandler::new(10 * MS);
        for i in 0..MAX_ACTIONS as i32 {
            assert_eq!(h.on_nak(0, 1, i * 64, 32, 0, |_, _, _| {}), NakOutcome::Resent);
        }
        assert_eq!(h.on_nak(0, 2, 0, 32, 0, |_, _, _| panic!("must not resend")), NakOutcome::Overflow);
    }
}
