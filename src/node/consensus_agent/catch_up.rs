//! When a follower catches up from its leader's recording: the decision, without I/O (fed the
//! recorder's results and the leader's behind-retained count, with time passed in as `now_ns`).
//!
//! Invariants: at most one catch-up runs at a time; one starts only when the leader has said (a new
//! BEHIND_RETAINED since the last start) that it no longer holds this member's position in memory, when
//! this member's log has stood still below the start of the leader's term for [`STUCK_NS`], or when a
//! failed one is due again; a failed one is retried after [`RETRY_NS`], never in a loop.

/// How long a failed catch-up waits before it is asked again.
pub(crate) const RETRY_NS: u64 = 1_000_000_000;

/// How long a follower's log may stand still below the start of its leader's term before it fetches the
/// rest from the leader's recording. A follower's receive window counts from what it applied, which only
/// a commit moves, and a leader commits nothing of its term before a majority holds its start: when the
/// leader's uncommitted tail (from an earlier term, whose commits no member that is up remembers, after
/// a power loss of a majority) is longer than that window, the live log alone never gets there. The
/// recording has no window.
pub(crate) const STUCK_NS: u64 = 500_000_000;

/// Where a follower is with catching up from its leader's recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// None runs; one starts when the leader says it no longer holds this member's position.
    Idle,
    /// The recorder is fetching.
    Running,
    /// The last failed: ask again at this time.
    RetryAt(u64),
}

/// A follower's catch-up state; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CatchUpState {
    phase: Phase,
    /// The leader's behind-retained frames counted when this followership started or last caught up.
    behind_seen: i64,
    /// The ticket of the catch-up this followership asked for last (0: none): only its result is this
    /// followership's.
    ticket: u64,
    /// Where this member's log stood below the leader's term start, and since when.
    stuck: Option<(i64, u64)>,
}

impl CatchUpState {
    /// A followership that starts with the leader's behind-retained count at `behind`.
    pub(crate) fn new(behind: i64) -> Self {
        Self { phase: Phase::Idle, behind_seen: behind, ticket: 0, stuck: None }
    }

    /// The catch-up started has `ticket`.
    pub(crate) fn ticket(&mut self, ticket: u64) {
        self.ticket = ticket;
    }

    /// Whether a result with `ticket` is of the catch-up this followership asked for, while it runs.
    pub(crate) fn asked(&self, ticket: u64) -> bool {
        self.phase == Phase::Running && ticket == self.ticket && ticket != 0
    }

    /// The running catch-up failed at `now_ns`: it is retried [`RETRY_NS`] later.
    pub(crate) fn failed(&mut self, now_ns: u64) {
        self.phase = Phase::RetryAt(now_ns + RETRY_NS);
    }

    /// The running catch-up finished and the follower joined the live log.
    pub(crate) fn joined(&mut self) {
        self.phase = Phase::Idle;
    }

    /// Whether a catch-up starts now, with the leader's behind-retained count at `behind`, and this
    /// member's log at `below_term_start` while it has not reached the start of the leader's term
    /// (`None` once it has); when one starts, it is running from here on.
    pub(crate) fn start_if_due(&mut self, behind: i64, below_term_start: Option<i64>, now_ns: u64) -> bool {
        let stuck = match (below_term_start, self.stuck) {
            (None, _) => {
                self.stuck = None;
                false
            }
            (Some(position), Some((at, since))) if position == at => now_ns.saturating_sub(since) >= STUCK_NS,
            (Some(position), _) => {
                self.stuck = Some((position, now_ns));
                false
            }
        };
        let due = match self.phase {
            Phase::Idle => behind > self.behind_seen || stuck,
            Phase::Running => false,
            Phase::RetryAt(at) => now_ns >= at,
        };
        if due {
            self.behind_seen = behind;
            self.phase = Phase::Running;
            self.stuck = None;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_starts_on_a_new_behind_retained_and_none_runs_beside_it() {
        let mut state = CatchUpState::new(3);
        assert!(!state.start_if_due(3, None, 0), "the count the followership started with is not news");
        assert!(state.start_if_due(4, None, 0));
        assert!(!state.start_if_due(9, None, 1), "one runs: no second");
        state.joined();
        assert!(!state.start_if_due(4, None, 2), "caught up past that frame");
        assert!(state.start_if_due(5, None, 3));
    }

    #[test]
    fn only_the_result_of_the_catch_up_it_asked_for_is_its_own() {
        let mut state = CatchUpState::new(0);
        assert!(!state.asked(1), "none asked for");
        assert!(state.start_if_due(1, None, 0));
        state.ticket(7);
        assert!(!state.asked(6), "an earlier followership's");
        assert!(state.asked(7));
        state.joined();
        assert!(!state.asked(7), "over");
    }

    #[test]
    fn a_failed_one_is_retried_after_the_delay_and_not_before() {
        let mut state = CatchUpState::new(0);
        assert!(state.start_if_due(1, None, 10));
        state.failed(10);
        assert!(!state.start_if_due(1, None, 10 + RETRY_NS - 1));
        assert!(!state.start_if_due(7, None, 10 + RETRY_NS - 1), "a new frame does not cut the wait");
        assert!(state.start_if_due(1, None, 10 + RETRY_NS));
    }

    #[test]
    fn a_log_standing_still_below_the_term_start_starts_one_after_the_delay() {
        let mut state = CatchUpState::new(0);
        assert!(!state.start_if_due(0, Some(100), 10), "the clock starts");
        assert!(!state.start_if_due(0, Some(100), 10 + STUCK_NS - 1));
        assert!(!state.start_if_due(0, Some(200), 10 + STUCK_NS), "it moved: the clock starts again");
        assert!(!state.start_if_due(0, None, 20 + STUCK_NS), "it reached the term start");
        assert!(!state.start_if_due(0, Some(200), 30 + STUCK_NS));
        assert!(state.start_if_due(0, Some(200), 30 + 2 * STUCK_NS));
        assert!(!state.start_if_due(0, Some(200), 40 + 3 * STUCK_NS), "one runs: no second");
        state.joined();
        assert!(!state.start_if_due(0, Some(300), 50 + 3 * STUCK_NS), "the clock starts anew after one");
    }
}
