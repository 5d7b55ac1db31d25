//! Replicated timers (Aeron Cluster's `scheduleTimer`/`cancelTimer`/`onTimerEvent`): a table every member
//! builds from the log alone, the same at the same position on every member.
//!
//! # Invariants
//!
//! - The table changes only from the service's callbacks, which every member runs at the same entries:
//!   never from a clock, never from I/O.
//! - A timer is keyed by the application's correlation id: scheduling an id already scheduled moves its
//!   deadline (Aeron's rule), so an id is in the table at most once.
//! - A timer fires at the first entry stamped with a cluster time at or past its deadline, and only if it
//!   was scheduled before that entry was applied: a timer scheduled for the past by a callback of that
//!   entry fires at the next stamped entry, so one entry never fires an unbounded chain of timers.
//! - At most `limit` timers: one past it is refused at schedule ([`TimerError::TooMany`]), never stored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Read, Write};

use super::ClusterTime;

/// Why a timer was not scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerError {
    /// The table holds `limit` timers (`[service] max_timers`): cancel one, or raise the limit.
    TooMany {
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooMany { limit } => write!(
                f,
                "{limit} timers are scheduled, the most this node holds ([service] max_timers): cancel one, or raise \
                 the limit on every member"
            ),
        }
    }
}

impl std::error::Error for TimerError {}

/// Every scheduled timer, by deadline and by correlation id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TimerTable {
    /// (deadline in cluster time ns, correlation id): the order timers fire in.
    by_deadline: BTreeSet<(i64, u64)>,
    /// Correlation id -> deadline.
    by_id: BTreeMap<u64, i64>,
    limit: usize,
}

/// A timer table snapshot's first 8 bytes: the format and its version.
const SNAPSHOT_MAGIC: u64 = u64::from_le_bytes(*b"qctimr01");

impl TimerTable {
    /// An empty table holding at most `limit` timers.
    pub(crate) fn new(limit: usize) -> Self {
        Self { by_deadline: BTreeSet::new(), by_id: BTreeMap::new(), limit }
    }

    /// The most timers it holds.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Timers scheduled.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Schedules `correlation_id` at `deadline`, moving it if it is scheduled already.
    pub(crate) fn schedule(&mut self, correlation_id: u64, deadline: ClusterTime) -> Result<(), TimerError> {
        let deadline = deadline.as_nanos();
        match self.by_id.get(&correlation_id) {
            Some(&old) => {
                self.by_deadline.remove(&(old, correlation_id));
            }
            None if self.by_id.len() >= self.limit => return Err(TimerError::TooMany { limit: self.limit }),
            None => {}
        }
        self.by_id.insert(correlation_id, deadline);
        self.by_deadline.insert((deadline, correlation_id));
        Ok(())
    }

    /// Cancels `correlation_id`; false when it was not scheduled.
    pub(crate) fn cancel(&mut self, correlation_id: u64) -> bool {
        match self.by_id.remove(&correlation_id) {
            Some(deadline) => self.by_deadline.remove(&(deadline, correlation_id)),
            None => false,
        }
    }

    /// The earliest deadline (ns of cluster time), `i64::MAX` when none is scheduled.
    pub(crate) fn next_deadline(&self) -> i64 {
        self.by_deadline.first().map_or(i64::MAX, |&(deadline, _)| deadline)
    }

    /// The timers due at `now_ns`, in firing order (deadline, then correlation id), into `due` (emptied
    /// first). They stay scheduled: [`take`](Self::take) removes each as it fires, so that one cancelled
    /// by an earlier one's callback does not fire.
    pub(crate) fn due(&self, now_ns: i64, due: &mut Vec<(i64, u64)>) {
        due.clear();
        due.extend(self.by_deadline.iter().take_while(|&&(deadline, _)| deadline <= now_ns).copied());
    }

    /// Removes the timer `(deadline, correlation_id)` if it is still scheduled at that deadline (not
    /// cancelled nor moved since [`due`](Self::due) listed it); true when it was.
    pub(crate) fn take(&mut self, (deadline, correlation_id): (i64, u64)) -> bool {
        if self.by_id.get(&correlation_id) != Some(&deadline) {
            return false;
        }
        self.by_id.remove(&correlation_id);
        self.by_deadline.remove(&(deadline, correlation_id))
    }

    /// Writes the table: its format, its count, and each timer (correlation id, deadline) in id order.
    pub(crate) fn write_snapshot(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&SNAPSHOT_MAGIC.to_le_bytes())?;
        out.write_all(&(self.by_id.len() as u64).to_le_bytes())?;
        for (&id, &deadline) in &self.by_id {
            out.write_all(&id.to_le_bytes())?;
            out.write_all(&deadline.to_le_bytes())?;
        }
        Ok(())
    }

    /// Replaces the timers with those `input` holds (as [`write_snapshot`](Self::write_snapshot) wrote
    /// them). An unknown format is refused naming what it found; a count past the limit is refused before
    /// anything is read into the table.
    pub(crate) fn read_snapshot(&mut self, input: &mut dyn Read) -> io::Result<()> {
        let mut word = || -> io::Result<u64> {
            let mut bytes = [0u8; 8];
            input.read_exact(&mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let magic = word()?;
        if magic != SNAPSHOT_MAGIC {
            return Err(invalid(format!(
                "the timers of a snapshot are in format {:?}; this build reads qctimr01",
                String::from_utf8_lossy(&magic.to_le_bytes())
            )));
        }
        let count = word()?;
        if count > self.limit as u64 {
            return Err(invalid(format!(
                "the snapshot holds {count} timers, more than [service] max_timers {}: raise it to at least {count}",
                self.limit
            )));
        }
        let mut table = Self::new(self.limit);
        for _ in 0..count {
            let id = word()?;
            let deadline = word()? as i64;
            table.by_id.insert(id, deadline);
            table.by_deadline.insert((deadline, id));
        }
        *self = table;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: i64) -> ClusterTime {
        ClusterTime::from_nanos(ns)
    }

    #[test]
    fn timers_fire_in_deadline_then_id_order_and_a_cancelled_or_moved_one_does_not() {
        let mut table = TimerTable::new(8);
        table.schedule(3, at(30)).unwrap();
        table.schedule(2, at(10)).unwrap();
        table.schedule(1, at(10)).unwrap();
        table.schedule(4, at(50)).unwrap();
        assert_eq!(table.next_deadline(), 10);
        let mut due = Vec::new();
        table.due(30, &mut due);
        assert_eq!(due, vec![(10, 1), (10, 2), (30, 3)]);
        // Timer 1's callback cancels 2 and moves 3 later: neither fires from this list.
        assert!(table.take(due[0]));
        assert!(table.cancel(2));
        table.schedule(3, at(40)).unwrap();
        assert!(!table.take(due[1]) && !table.take(due[2]));
        assert_eq!((table.len(), table.next_deadline()), (2, 40));
    }

    #[test]
    fn a_timer_past_the_limit_is_refused_and_moving_one_is_not_a_new_one() {
        let mut table = TimerTable::new(2);
        table.schedule(1, at(1)).unwrap();
        table.schedule(2, at(2)).unwrap();
        assert_eq!(table.schedule(3, at(3)), Err(TimerError::TooMany { limit: 2 }));
        table.schedule(2, at(5)).unwrap();
        assert_eq!(table.len(), 2);
        assert!(TimerError::TooMany { limit: 2 }.to_string().contains("[service] max_timers"));
    }

    #[test]
    fn a_snapshot_gives_the_same_table_and_refuses_another_format_or_too_many() {
        let mut table = TimerTable::new(4);
        table.schedule(7, at(70)).unwrap();
        table.schedule(9, at(-5)).unwrap();
        let mut bytes = Vec::new();
        table.write_snapshot(&mut bytes).unwrap();
        let mut read = TimerTable::new(4);
        read.read_snapshot(&mut &bytes[..]).unwrap();
        assert_eq!(read, table);
        let mut small = TimerTable::new(1);
        let error = small.read_snapshot(&mut &bytes[..]).unwrap_err();
        assert!(error.to_string().contains("max_timers 1"), "{error}");
        bytes[7] = b'9';
        let error = read.read_snapshot(&mut &bytes[..]).unwrap_err();
        assert!(error.to_string().contains("qctimr09"), "{error}");
    }
}
