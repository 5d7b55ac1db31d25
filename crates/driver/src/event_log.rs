//! Log lines from agents' duty cycles, at most one per kind per interval.
//!
//! An agent that meets bad input (a datagram from a stranger, a SETUP it refuses, a follower beyond the
//! retained log) says so through the [`log`] facade, so that an operator sees it, but a flood of such
//! input must not become a flood of lines or of formatting work: [`RateLimited`] lets one line through per
//! interval and says in it how many it held back. The embedding program chooses the logger (`qc-node`
//! prints to standard error); the counters count every occurrence either way.

/// The shortest time between two lines of one [`RateLimited`].
pub const LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// One kind of log line, limited to one per [`LOG_INTERVAL_NS`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RateLimited {
    next_ns: u64,
    held_back: u64,
}

impl RateLimited {
    /// Logs the line `message` builds as a warning, unless one went out less than an interval ago (then
    /// only counts it); returns whether the line went out. `message` runs only when the line is written
    /// and a logger takes warnings.
    pub fn warn(&mut self, now_ns: u64, message: impl FnOnce() -> String) -> bool {
        if now_ns < self.next_ns {
            self.held_back += 1;
            return false;
        }
        let held_back = std::mem::take(&mut self.held_back);
        self.next_ns = now_ns.saturating_add(LOG_INTERVAL_NS);
        if held_back > 0 {
            log::warn!("{} ({held_back} more like it since the last line)", message());
        } else {
            log::warn!("{}", message());
        }
        true
    }

    /// True when a line would go out at `now_ns` (none went out less than an interval ago).
    pub fn is_quiet(&self, now_ns: u64) -> bool {
        now_ns >= self.next_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_rest_are_counted() {
        let mut limit = RateLimited::default();
        let written = (0..10).filter(|&t| limit.warn(t, String::new)).count();
        assert_eq!((written, limit.held_back), (1, 9));
        assert!(limit.warn(LOG_INTERVAL_NS, String::new));
        assert_eq!(limit.held_back, 0);
    }
}
