//! Flow control: the Sender follows the slowest live receiver, or the slowest of a quorum.
//!
//! Each receiver reports, in its status messages, how far it has consumed and how much more it can take
//! (its window): its limit is `position + window`. In [`FlowControlMode::Min`] the sender may send up to
//! the lowest limit over live receivers (Aeron's min flow control). In [`FlowControlMode::Quorum`] with
//! `k` it may send up to the `k`-th highest limit: a cluster leader needs `k = majority - 1` followers to
//! commit (it counts itself), so for three members it follows the faster follower, and a dead, stopped or
//! slow follower never stalls commits; the slow one drops what is beyond its window and repairs it by NAK
//! while it is within the retained log.
//!
//! In quorum mode a slow follower that is still responsive (it has spoken within `responsive` time, and
//! its position has moved within that time) also bounds the sender, loosely: the sender stays within `lag`
//! bytes of it (half a term: what the log always retains), so a follower that is merely slower, or
//! repairing loss, never falls out of the retained log and is never lost. A stopped or dead follower stops
//! speaking, and a stuck one stops moving, and leaves that bound after `responsive`, so it holds commits
//! back at most that long, once. (A follower's position is what its node consumed, which stops at the
//! commit: one far behind a new leader's log cannot move until the leader commits, which it could not
//! while that follower held the stream back; the node simulator's seed 1206.)
//!
//! A receiver that has said nothing for `timeout` is no longer live: it leaves the limit (and is
//! counted); it rejoins when it speaks again.
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
    /// When its position last moved forward (or it joined).
    pub advanced_ns: u64,
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

/// Which receivers' windows the sender waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlowControlMode {
    /// Every live receiver's: the sender follows the slowest (a plain multi-destination stream).
    #[default]
    Min,
    /// The fastest `k` live receivers': the sender follows the slowest of them (a cluster leader, with
    /// `k` = the followers a commit needs). With fewer than `k` live receivers nothing may be sent.
    Quorum(usize),
}

/// The limit over live receivers, with time-outs.
#[derive(Clone, Debug)]
pub struct FlowControl {
    receivers: Box<[ReceiverState]>,
    mode: FlowControlMode,
    timeout_ns: u64,
    timed_out: u64,
    /// Quorum mode: the sender stays within this many bytes of every responsive receiver.
    lag: i64,
    /// Quorum mode: a receiver heard from within this long is responsive.
    responsive_ns: u64,
}

impl FlowControl {
    /// Flow control over `destinations` receivers in `mode`, each dropped after `timeout_ns` of silence.
    pub fn new(destinations: usize, mode: FlowControlMode, timeout_ns: u64) -> Self {
        let receivers = vec![ReceiverState::default(); destinations].into_boxed_slice();
        Self { receivers, mode, timeout_ns, timed_out: 0, lag: i64::MAX / 2, responsive_ns: 0 }
    }

    /// In quorum mode, keeps the sender within `lag` bytes of every receiver heard from within
    /// `responsive_ns` (see the [module](self) docs).
    pub fn with_lag_bound(mut self, lag: i64, responsive_ns: u64) -> Self {
        self.lag = lag;
        self.responsive_ns = responsive_ns;
        self
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
            r.advanced_ns = now_ns;
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

    /// The sender limit over live receivers at or above `floor`: the lowest `position + window` of them
    /// ([`FlowControlMode::Min`]) or the `k`-th highest ([`FlowControlMode::Quorum`]); `None` when there are
    /// not enough such receivers.
    ///
    /// `floor` is the oldest position the sender can still resend: a receiver below it can never catch up
    /// from this log, so it must not hold the stream back (it is counted by [`Self::behind`] instead).
    ///
    /// In quorum mode the limit is also at most `lag` beyond every receiver heard from since
    /// `now_ns - responsive`.
    pub fn limit(&self, floor: i64, now_ns: u64) -> Option<i64> {
        let counted = || self.receivers.iter().filter(move |r| r.live && r.position >= floor);
        let limits = || counted().map(ReceiverState::limit);
        match self.mode {
            FlowControlMode::Min => limits().min(),
            FlowControlMode::Quorum(k) => {
                // The k-th highest, without sorting or allocating (a handful of receivers): the highest limit
                // that at least k receivers reach.
                let quorum =
                    limits().filter(|&candidate| limits().filter(|&l| l >= candidate).count() >= k.max(1)).max()?;
                // Responsive, and moving: one whose position stood still for as long holds nothing back
                // (a follower's position counts from what its node consumed, which stops at the commit:
                // holding the stream for it would stop the commit it waits for).
                let within = |t: u64| now_ns.saturating_sub(t) <= self.responsive_ns;
                let responsive = counted().filter(|r| within(r.last_seen_ns) && within(r.advanced_ns));
                let lag_bound = responsive.map(|r| r.position.saturating_add(self.lag)).min().unwrap_or(i64::MAX);
                Some(quorum.min(lag_bound))
            }
        }
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
        let mut fc = FlowControl::new(2, FlowControlMode::Min, 5 * SECOND);
        assert_eq!(fc.limit(0, 0), None, "no receiver yet: nothing may be sent");
        assert_eq!(fc.on_status_message(0, 11, 1000, 4096, 0), StatusChange::Joined);
        assert_eq!(fc.limit(0, 0), Some(5096));
        fc.on_status_message(1, 22, 200, 4096, 0);
        assert_eq!(fc.limit(0, 0), Some(4296));
        assert_eq!(fc.on_status_message(1, 22, 3000, 4096, 1), StatusChange::Updated);
        assert_eq!(fc.limit(0, 0), Some(5096));
    }

    #[test]
    fn a_stale_status_message_never_moves_a_receiver_back() {
        let mut fc = FlowControl::new(1, FlowControlMode::Min, SECOND);
        fc.on_status_message(0, 1, 5000, 100, 0);
        fc.on_status_message(0, 1, 4000, 100, 1);
        assert_eq!(fc.limit(0, 0), Some(5100));
    }

    #[test]
    fn a_silent_receiver_is_dropped_and_rejoins_when_it_speaks() {
        let mut fc = FlowControl::new(2, FlowControlMode::Min, 5 * SECOND);
        fc.on_status_message(0, 1, 100, 1000, 0);
        fc.on_status_message(1, 2, 50_000, 1000, 0);
        assert_eq!(fc.limit(0, 0), Some(1100));
        fc.on_status_message(1, 2, 60_000, 1000, 4 * SECOND);
        assert_eq!(fc.on_idle(5 * SECOND + 1), 1, "receiver 0 silent for over 5 s");
        assert!(!fc.is_live(0) && fc.is_live(1));
        assert_eq!(fc.limit(0, 0), Some(61_000), "the dead follower no longer stalls the stream");
        assert_eq!(fc.timed_out(), 1);
        assert_eq!(fc.on_status_message(0, 1, 61_000, 1000, 6 * SECOND), StatusChange::Joined);
        assert_eq!(fc.live_count(), 2);
    }

    #[test]
    fn a_receiver_behind_the_retained_log_does_not_hold_the_stream() {
        let mut fc = FlowControl::new(2, FlowControlMode::Min, SECOND);
        fc.on_status_message(0, 1, 100, 1000, 0);
        fc.on_status_message(1, 2, 90_000, 1000, 0);
        assert_eq!(fc.limit(0, 0), Some(1100));
        assert_eq!(fc.limit(50_000, 0), Some(91_000));
        assert_eq!(fc.behind(50_000), 1);
    }

    #[test]
    fn a_restarted_receiver_resets_its_position() {
        let mut fc = FlowControl::new(1, FlowControlMode::Min, SECOND);
        fc.on_status_message(0, 1, 9000, 100, 0);
        assert_eq!(fc.on_status_message(0, 2, 0, 100, 1), StatusChange::Joined);
        assert_eq!(fc.limit(0, 0), Some(100));
    }

    #[test]
    fn a_quorum_follows_the_kth_fastest_and_a_dead_or_slow_receiver_never_holds_it() {
        let mut fc = FlowControl::new(2, FlowControlMode::Quorum(1), SECOND);
        assert_eq!(fc.limit(0, 0), None, "no receiver yet");
        fc.on_status_message(0, 1, 100, 1000, 0);
        assert_eq!(fc.limit(0, 0), Some(1100), "one live receiver is a quorum of one");
        fc.on_status_message(1, 2, 90_000, 1000, 0);
        assert_eq!(fc.limit(0, 0), Some(91_000), "three members: the faster follower");
        let mut five = FlowControl::new(4, FlowControlMode::Quorum(2), SECOND);
        for (d, position) in [(0, 10), (1, 40), (2, 30), (3, 20)] {
            five.on_status_message(d, d as i64, position, 5, 0);
        }
        assert_eq!(five.limit(0, 0), Some(35), "five members: the second fastest follower");
        five.on_status_message(1, 1, 40, 5, 2 * SECOND);
        five.on_idle(2 * SECOND);
        assert_eq!(five.limit(0, 2 * SECOND), None, "one live follower is not a quorum of two");
        assert_eq!(five.limit(50, 0), None);
    }

    #[test]
    fn a_quorum_stays_within_the_lag_of_a_responsive_receiver_and_drops_a_silent_one() {
        let ms = 1_000_000;
        let mut fc = FlowControl::new(2, FlowControlMode::Quorum(1), SECOND).with_lag_bound(10_000, 30 * ms);
        fc.on_status_message(0, 1, 100, 1000, 0);
        fc.on_status_message(1, 2, 90_000, 1000, 0);
        assert_eq!(fc.limit(0, 0), Some(10_100), "the slower one is responsive: stay within the lag of it");
        fc.on_status_message(1, 2, 95_000, 1000, 31 * ms);
        assert_eq!(fc.limit(0, 31 * ms), Some(96_000), "it went silent for 31 ms: the quorum goes on without it");
        assert_eq!(fc.limit(0, 31 * ms), fc.limit(0, 31 * ms));
    }

    #[test]
    fn a_responsive_receiver_that_stops_moving_stops_bounding_the_lag() {
        let ms = 1_000_000;
        let mut fc = FlowControl::new(2, FlowControlMode::Quorum(1), SECOND).with_lag_bound(10_000, 30 * ms);
        fc.on_status_message(0, 1, 100, 1000, 0);
        fc.on_status_message(1, 2, 90_000, 1000, 0);
        assert_eq!(fc.limit(0, 10 * ms), Some(10_100));
        // It keeps speaking, from the same position.
        fc.on_status_message(0, 1, 100, 1000, 20 * ms);
        fc.on_status_message(0, 1, 100, 1000, 40 * ms);
        assert_eq!(fc.limit(0, 40 * ms), Some(91_000), "stuck for 40 ms: the quorum goes on without it");
        fc.on_status_message(0, 1, 5_000, 1000, 41 * ms);
        assert_eq!(fc.limit(0, 41 * ms), Some(15_000), "moving again: it bounds the lag again");
    }
}
