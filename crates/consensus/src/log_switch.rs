//! The switches a reader of a member's log makes from one log file to the next.
//!
//! The cluster's log is one sequence of bytes, but a member holds it in a new log buffer per leadership
//! term (the log it leads in, or its image of the leader's). Each reader of it (the node's reader of
//! committed entries, the recorder) reads its current log up to the position where the next one takes
//! over, then goes on in that one. The consensus agent queues those switches, one queue per reader.
//!
//! # Invariants
//!
//! - Switches are queued in the order they happen; a reader takes the oldest first.
//! - A switch is queued at its position before its log exists (a follower's image is made when the
//!   leader's SETUP arrives) and completed with the log later. A queued switch still without its log is
//!   replaced by a newer one: no byte of a log that never arrived was read, and the newer leader's log
//!   agrees with this member's up to the newer position, which is at most the older one.
//! - A switch queued at or below a queued one replaces it too, log or not: it comes from a truncation (a
//!   new leader's log agrees with this member's only up to there), so the bytes of the older logs past it
//!   are not the cluster's log. A reader of committed entries has not read them (the consensus core never
//!   truncates below the commit position); a recorder that has cuts its recording back. (The node
//!   simulator's seed 1123 found a reader that read a truncated term's entries because the switch to the
//!   log it had led in waited in front of the truncation's.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// At `at`, reading stops in the current log, and goes on in `next` once it is there.
#[derive(Debug)]
pub struct Switch<T> {
    /// The position where the next log takes over.
    pub at: i64,
    /// The next log, once the consensus agent has it.
    pub next: Option<T>,
}

/// The switches one reader has still to make, oldest first.
#[derive(Debug)]
pub struct SwitchQueue<T> {
    switches: Mutex<VecDeque<Switch<T>>>,
    generation: AtomicU64,
}

impl<T> Default for SwitchQueue<T> {
    fn default() -> Self {
        Self { switches: Mutex::new(VecDeque::new()), generation: AtomicU64::new(0) }
    }
}

impl<T> SwitchQueue<T> {
    /// Queues a switch at `at` (see the module's invariants for one still without its log).
    pub fn push(&self, at: i64, next: Option<T>) {
        let mut switches = self.lock();
        while switches.back().is_some_and(|s| s.next.is_none() || s.at >= at) {
            switches.pop_back();
        }
        switches.push_back(Switch { at, next });
        drop(switches);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Gives the newest queued switch at `at` its log.
    pub fn complete(&self, at: i64, next: T) {
        let mut switches = self.lock();
        if let Some(switch) = switches.back_mut().filter(|s| s.at == at && s.next.is_none()) {
            switch.next = Some(next);
        }
        drop(switches);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// A number that changes whenever the queue does: a reader looks again only when it has.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Where the oldest switch is, if there is one.
    pub fn next_at(&self) -> Option<i64> {
        self.lock().front().map(|s| s.at)
    }

    /// Takes the oldest switch when its log is there: its position, its log, and where the one after is.
    pub fn take(&self) -> Option<(i64, T, Option<i64>)> {
        let mut switches = self.lock();
        let next = switches.front_mut().and_then(|s| s.next.take())?;
        let at = switches.pop_front().map_or(0, |s| s.at);
        Some((at, next, switches.front().map(|s| s.at)))
    }

    /// Forgets every queued switch (the reader's position is decided otherwise: a catch-up).
    pub fn clear(&self) {
        self.lock().clear();
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Takes the newest switch whose log `supersedes` says makes every switch before it moot (a snapshot
    /// that replaces the state they lead to, and so any older such snapshot too), dropping those; its
    /// position, its log, and where the one after is.
    pub fn take_superseding(&self, supersedes: impl Fn(&T) -> bool) -> Option<(i64, T, Option<i64>)> {
        let mut switches = self.lock();
        let index = switches.iter().rposition(|s| s.next.as_ref().is_some_and(&supersedes))?;
        switches.drain(..index);
        let switch = switches.pop_front()?;
        Some((switch.at, switch.next?, switches.front().map(|s| s.at)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Switch<T>>> {
        self.switches.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_below_a_queued_one_replaces_it() {
        let queue = SwitchQueue::default();
        queue.push(188, Some("the log this member led in"));
        queue.push(171, None);
        assert_eq!(queue.next_at(), Some(171), "the reader stops at the truncation, not at the older switch");
        queue.complete(171, "the new leader's image");
        assert_eq!(queue.take(), Some((171, "the new leader's image", None)));
    }

    #[test]
    fn a_switch_without_its_log_is_replaced_and_taken_once_complete() {
        let queue = SwitchQueue::default();
        queue.push(0, Some("first"));
        queue.push(100, None);
        queue.push(80, None);
        assert_eq!(queue.next_at(), Some(0));
        assert_eq!(queue.take(), Some((0, "first", Some(80))));
        assert_eq!(queue.take(), None, "the switch at 80 has no log yet");
        let before = queue.generation();
        queue.complete(100, "stale");
        queue.complete(80, "image");
        assert!(queue.generation() > before);
        assert_eq!(queue.take(), Some((80, "image", None)));
        queue.push(100, Some("log"));
        queue.push(110, Some("older snapshot"));
        queue.push(120, Some("snapshot"));
        queue.push(150, None);
        let snapshot = |l: &&str| l.ends_with("snapshot");
        assert_eq!(queue.take_superseding(snapshot), Some((120, "snapshot", Some(150))), "the newest supersedes");
        assert_eq!(queue.take(), None, "the switches at 100 and 110 went with it; the one at 150 has no log yet");
    }
}
