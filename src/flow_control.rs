//! Min flow control: the Sender follows the slowest live receiver.
//!
//! Each receiver reports, in its status messages, how far it has consumed and how much more it can take
//! (its window). The sender may send up to `min over live receivers of (position + window)`. A receiver
//! that has said nothing for `timeout` is no longer live: it leaves the minimum (and is counted), so one
//! dead follower never stalls the stream; it rejoins when it speaks again.
//!
//! Receivers are tracked per destination (the followers are configured, not discovered), so the state is a
//! fixed array sized at start and the hot path does not allocate.

/// What flow control knows of one destination's receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverState {
    /// Identity the receiver put in its status messages; a new id means a restarted receiver.
    pub receiver_id: i64,
    /// Consumption position it last reported.
    pub position: i64,
    /// Window it last reported, in bytes.
    pub window: i64,
    /// When it last spoke (ns on the sender's clock).
    pub last_seen_ns: u64,
    /// Whether it counts in the minimum.
    pub live: bool,
}

impl ReceiverState {
    fn limit(&self) -> i64 {
        self.position + self.window
    }
}

/// What a status message changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusChange {
    /// A receiver that was not live now is (first contact, after a time-out, or restarted).
    Joined,
    /// A live receiver reported again.
    Updated,
}

/// The minimum over live receivers, with time-outs.
#[derive(Clone, Debug)]
pub struct MinFlowControl {
    receivers: Box<[ReceiverState]>,
    timeout_ns: u64,
    timed_out: u64,
}

impl MinFlowControl {
    /// Flow control over `destinations` receivers, each dropped after `timeout_ns` of silence.
    pub fn new(destinations: usize, timeout_ns: u64) -> Self {
        Self { receivers: vec![ReceiverState::default(); destinations].into_boxed_slice(), timeout_ns, timed_out: 0 }
    }

    /// Takes a status message from the receiver at `destination`.
    ///
    /// A receiver's position only moves forward while it keeps its id; a new id (a restart) resets it.
    pub fn on_status_message(
        &mut self,
        destination: usize,
        receiver_id: i64,
        position: i64,
        window: i64,
        now_ns: u64,
    ) -> StatusChange {
        let r = &mut self.receivers[destination];
        let change = if r.live && r.receiver_id == receiver_id { StatusChange::Updated } else { StatusChange::Joined };
        if change == StatusChange::Joined || position > r.position {
            r.position = position;
        }
        r.receiver_id = receiver_id;
        r.window = window;
        r.last_seen_ns = now_ns;
        r.live = true;
        change
    }

    /// Drops receivers silent for longer than the time-out; returns how many were dropped now.
    pub fn on_idle(&mut self, now_ns: u64) -> usize {
        let mut dropped = 0;
        for r in self.receivers.iter_mut().filter(|r| r.live) {
            if now_ns.saturating_sub(r.last_seen_ns) > self.timeout_ns {
                r.live = false;
                dropped += 1;
            }
        }
        self.timed_out += dropped as u64;
        dropped
    }

    /// The sender limit: the lowest `position + window` over live receivers at or above `floor`, or `None`
    /// when there is none.
    ///
    /// `floor` is the oldest position the sender can still resend: a receiver below it can never catch up
    /// from this log, so it must not hold the stream back (it is counted by [`Self::behind`] instead).
    pub fn limit(&self, floor: i64) -> Option<i64> {
        self.receivers.iter().filter(|r| r.live && r.position >= floor).map(ReceiverState::limit).min()
    }

    /// How many live receivers are below `floor` (behind what the log retains).
    pub fn behind(&self, floor: i64) -> usize {
        self.receivers.iter().filter(|r| r.live && r.position < floor).count()
    }

    /// Whether the receiver at `destination` is live.
    #[inline]
    pub fn is_live(&self, destination: usize) -> bool {
        self.receivers[destination].live
    }

    /// How many receivers are live.
    pub fn live_count(&self) -> usize {
        self.receivers.iter().filter(|r| r.live).count()
    }

    /// Receivers dropped for silence since start.
    pub fn timed_out(&self) -> u64 {
        self.timed_out
    }

    /// The state of the receiver at `destination`.
    pub fn receiver(&self, destination: usize) -> &ReceiverState {
        &self.receivers[destination]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn follows_the_slowest_live_receiver() {
        let mut fc = MinFlowControl::new(2, 5 * SECOND);
        assert_eq!(fc.limit(0), None, "no receiver yet: nothing may be sent");
        assert_eq!(fc.on_status_message(0, 11, 1000, 4096, 0), StatusChange::Joined);
        assert_eq!(fc.limit(0), Some(5096));
        fc.on_status_message(1, 22, 200, 4096, 0);
        assert_eq!(fc.limit(0), Some(4296));
        assert_eq!(fc.on_status_message(1, 22, 3000, 4096, 1), StatusChange::Updated);
        assert_eq!(fc.limit(0), Some(5096));
    }

    #[test]
    fn a_stale_status_message_never_moves_a_receiver_back() {
        let mut fc = MinFlowControl::new(1, SECOND);
        fc.on_status_message(0, 1, 5000, 100, 0);
        fc.on_status_message(0, 1, 4000, 100, 1);
        assert_eq!(fc.limit(0), Some(5100));
    }

    #[test]
    fn a_silent_receiver_is_dropped_and_rejoins_when_it_speaks() {
        let mut fc = MinFlowControl::new(2, 5 * SECOND);
        fc.on_status_message(0, 1, 100, 1000, 0);
        fc.on_status_message(1, 2, 50_000, 1000, 0);
        assert_eq!(fc.limit(0), Some(1100));
        fc.on_status_message(1, 2, 60_000, 1000, 4 * SECOND);
        assert_eq!(fc.on_idle(5 * SECOND + 1), 1, "receiver 0 silent for over 5 s");
        assert!(!fc.is_live(0) && fc.is_live(1));
        assert_eq!(fc.limit(0), Some(61_000), "the dead follower no longer stalls the stream");
        assert_eq!(fc.timed_out(), 1);
        assert_eq!(fc.on_status_message(0, 1, 61_000, 1000, 6 * SECOND), StatusChange::Joined);
        assert_eq!(fc.live_count(), 2);
    }

    #[test]
    fn a_receiver_behind_the_retained_log_does_not_hold_the_stream() {
        let mut fc = MinFlowControl::new(2, SECOND);
        fc.on_status_message(0, 1, 100, 1000, 0);
        fc.on_status_message(1, 2, 90_000, 1000, 0);
        assert_eq!(fc.limit(0), Some(1100));
        assert_eq!(fc.limit(50_000), Some(91_000));
        assert_eq!(fc.behind(50_000), 1);
    }

    #[test]
    fn a_restarted_receiver_resets_its_position() {
        let mut fc = MinFlowControl::new(1, SECOND);
        fc.on_status_message(0, 1, 9000, 100, 0);
        assert_eq!(fc.on_status_message(0, 2, 0, 100, 1), StatusChange::Joined);
        assert_eq!(fc.limit(0), Some(100));
    }
}
