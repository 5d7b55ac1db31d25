//! The committed-entry reader: what a node hands its application, in log order, from wherever the
//! entries are (the recorded log after a restart or a catch-up, then each leadership term's log in
//! memory), across log switches and the snapshots a catch-up installs.
//!
//! Invariants: entries are handed out in log order, each once, never past the commit position; a
//! switch is made only at its position, once the reader is there; after a catch-up installed a
//! snapshot at `p`, nothing after `p` is handed out until the application has loaded it
//! ([`CommittedReader::snapshot_loaded`]); nothing at or below the snapshot the state was restored or
//! loaded from is handed out, even when a log the reader goes on in starts below it.

use std::sync::Arc;

use super::replay::Replay;
use super::ReadRequests;
use crate::shm::log_buffer::MessageReader;
use crate::shm::log_buffer::{ConsumerPosition, LogReader};
use crate::storage::recording::{RecorderCounters, RecordingError, RecordingReader};

/// Where the node's reader of committed entries goes on at a switch.
pub(crate) enum ReaderLog {
    /// In a log in memory: a reader of it and its consumer slot.
    Memory(LogReader, ConsumerPosition),
    /// In the recorded log, which a catch-up filled (after the snapshot installed at `snapshot`, if one
    /// was), up to the next switch.
    Recorded { snapshot: Option<i64> },
}

/// Reads a node's committed entries; see the module documentation.
pub(crate) struct CommittedReader {
    /// The node's clock (what a failing read is timed by).
    clock: crate::agent::clock::NanoClock,
    member_id: i32,
    /// The log switches the consensus agent queues.
    requests: Arc<ReadRequests>,
    /// The reader of a log in memory: `None` until this node has one.
    reader: Option<MessageReader>,
    /// The reader of the recorded log, before the first log in memory (or after a catch-up).
    replay: Option<Replay>,
    /// Why the replay stopped (a damaged recording), if it did.
    replay_error: Option<RecordingError>,
    /// The recorder's counters (with a recorded log): what is recorded bounds the replay.
    recorder: Option<RecorderCounters>,
    /// A reader of the recording, to start replays from (with a recorded log).
    recording: Option<RecordingReader>,
    /// A catch-up installed the leader's snapshot at this position, not yet loaded.
    pending_snapshot: Option<i64>,
    /// Where reading stops next to go on in another log, as last read from the shared queue.
    next_switch: Option<i64>,
    switch_generation: u64,
    /// Where the last message handed out ends.
    applied: i64,
    /// The state already holds every entry up to here (the snapshot it was restored or loaded from): an
    /// entry that ends at or below is read but not handed out. A member whose recorded log was damaged
    /// below its newest snapshot holds the log only up to before it, and reads the entries between again
    /// from its leader's log.
    held_by_state: i64,
}

impl CommittedReader {
    /// A reader that starts with `replay` (a recorded log) or with nothing until the first switch.
    pub(crate) fn new(
        member_id: i32,
        requests: Arc<ReadRequests>,
        replay: Option<Replay>,
        recorder: Option<RecorderCounters>,
        recording: Option<RecordingReader>,
        clock: crate::agent::clock::NanoClock,
    ) -> Self {
        let applied = replay.as_ref().map_or(0, Replay::position);
        Self {
            clock,
            member_id,
            requests,
            reader: None,
            replay,
            replay_error: None,
            recorder,
            recording,
            pending_snapshot: None,
            next_switch: None,
            switch_generation: 0,
            applied,
            held_by_state: 0,
        }
    }

    /// Whether the recorded log reaches `position` (made durable as the sync policy says), or there is no
    /// recorded log. A snapshot is taken only then: one ahead of the recording would leave, after a restart,
    /// a state past the log the member holds, and the member would apply what the state already has (the
    /// node simulator found it: a follower's recorder failed on its failing disk behind what it applied).
    pub(crate) fn recorded_past(&self, position: i64) -> bool {
        self.recorder.as_ref().is_none_or(|c| c.synced_position.get() >= position)
    }

    /// Where the last whole message handed out ends.
    pub(crate) fn applied(&self) -> i64 {
        self.applied
    }

    /// Why the replay of the recorded log stopped, if it did.
    pub(crate) fn recording_error(&self) -> Option<&RecordingError> {
        self.replay_error.as_ref()
    }

    /// Where the replay of the recorded log starts (0 without one).
    pub(crate) fn replay_start(&self) -> i64 {
        self.replay.as_ref().map_or(0, Replay::position)
    }

    /// Makes the replay start at `position` (a restored snapshot's); false without a replay.
    pub(crate) fn restart_replay_at(&mut self, position: i64) -> bool {
        let Some(replay) = self.replay.as_mut() else {
            return false;
        };
        *replay = replay.restart_at(position);
        self.applied = position;
        self.held_by_state = position;
        true
    }

    /// The position of a snapshot a catch-up installed that the application has still to load.
    pub(crate) fn pending_snapshot(&self) -> Option<i64> {
        self.pending_snapshot
    }

    /// As [`pending_snapshot`](Self::pending_snapshot), after looking for a newer one.
    pub(crate) fn newest_pending_snapshot(&mut self) -> Option<i64> {
        if self.pending_snapshot.is_some() {
            // A newer catch-up may have installed a newer snapshot since: it supersedes this one.
            self.refresh_switch();
        }
        self.pending_snapshot
    }

    /// The pending snapshot is as loaded as `position`'s: entries after it may be handed out.
    pub(crate) fn snapshot_loaded(&mut self, position: i64) {
        self.pending_snapshot = None;
        self.applied = position;
        self.held_by_state = self.held_by_state.max(position);
    }

    /// Hands committed entries, up to `commit` and `fragment_limit` fragments, to `deliver` (each
    /// message's bytes, where it ends, and its flags); returns the fragments read.
    pub(crate) fn poll(
        &mut self,
        commit: i64,
        fragment_limit: usize,
        deliver: &mut impl FnMut(&[u8], i64, u8),
    ) -> usize {
        let mut last_end = None;
        let held_by_state = self.held_by_state;
        let mut deliver = |entry: &[u8], end: i64, flags: u8| {
            last_end = Some(end);
            if end > held_by_state {
                deliver(entry, end, flags);
            }
        };
        let mut fragments = self.poll_replay(commit, fragment_limit, &mut deliver);
        loop {
            self.refresh_switch();
            let end = self.next_switch.unwrap_or(i64::MAX);
            if let Some(reader) = self.reader.as_mut() {
                fragments += reader.poll_bounded_with_flags(commit.min(end), fragment_limit - fragments, &mut deliver);
            }
            if fragments >= fragment_limit || self.replay.is_some() || self.read_position() < end || !self.switch_log()
            {
                break;
            }
        }
        // Every byte below the read position is handed on, unless a message's first fragments wait for
        // the rest: then what is applied ends with the last whole message.
        let assembling = match (&self.reader, &self.replay) {
            (Some(reader), _) => reader.is_assembling(),
            (None, Some(replay)) => replay.assembler.is_assembling(),
            (None, None) => false,
        };
        if !assembling {
            self.applied = self.applied.max(self.read_position());
        } else if let Some(end) = last_end {
            self.applied = end;
        }
        fragments
    }

    /// The position the reader has read up to (the fragments of a message not yet whole included).
    fn read_position(&self) -> i64 {
        match (&self.reader, &self.replay) {
            (Some(reader), _) => reader.position(),
            (None, Some(replay)) => replay.position(),
            (None, None) => 0,
        }
    }

    /// Reads committed entries from the recording, up to the first switch to a log in memory, and makes
    /// that switch once there.
    fn poll_replay(&mut self, commit: i64, fragment_limit: usize, deliver: &mut impl FnMut(&[u8], i64, u8)) -> usize {
        if self.replay.is_none() {
            return 0;
        }
        self.refresh_switch();
        if self.pending_snapshot.is_some() {
            // A catch-up installed the leader's snapshot just now, and the replay starts after it: nothing
            // from there is handed out before poll_state has loaded the snapshot into the state.
            return 0;
        }
        // Nothing is read before this member has joined a leader or leads: only then is its log's end known.
        let Some(first) = self.next_switch else {
            return 0;
        };
        let recorded = self.recorder.as_ref().map_or(0, |c| c.position.get());
        let replay = self.replay.as_mut().expect("checked");
        let now_ns = self.clock.now_ns();
        let fragments = match replay.poll(commit.min(first).min(recorded), fragment_limit, now_ns, deliver) {
            Ok(fragments) => fragments,
            Err(e) => {
                log::error!("member {}: the replay of the recorded log stopped: {e}", self.member_id);
                self.replay_error = Some(e);
                self.replay = None;
                return 0;
            }
        };
        if replay.position() >= first {
            self.switch_log();
        }
        fragments
    }

    /// Reads where the next switch of logs is, when the consensus agent queued or completed one.
    fn refresh_switch(&mut self) {
        let generation = self.requests.switches.generation();
        if generation != self.switch_generation {
            self.switch_generation = generation;
            self.take_installed_snapshot();
            self.next_switch = self.requests.switches.next_at();
        }
    }

    /// A catch-up installed the leader's snapshot: it replaces the state every earlier switch led to, so
    /// the reader drops them and goes on from the snapshot once the application has loaded it.
    fn take_installed_snapshot(&mut self) {
        let installed = |log: &ReaderLog| matches!(log, ReaderLog::Recorded { snapshot: Some(_) });
        let Some((_, ReaderLog::Recorded { snapshot: Some(position) }, _)) =
            self.requests.switches.take_superseding(installed)
        else {
            return;
        };
        let Some(template) = &self.recording else {
            return;
        };
        self.reader = None;
        self.replay = Some(Replay::new(template.reopen(position)));
        self.pending_snapshot = self.snapshot_to_load(position);
    }

    /// The installed snapshot at `position` the application must load, or `None` when its state already
    /// holds every entry up to there (it was restored from, or applied past, a snapshot of its own newer
    /// than the leader's): the replay from `position` then hands out only what follows the state. Committed
    /// entries are the same on every member, so either state is the log's up to its position. (A member that
    /// restored its own snapshot and then repaired from an older one of the leader's must not wait for
    /// good for a load that would take its state back.)
    fn snapshot_to_load(&mut self, position: i64) -> Option<i64> {
        let held = self.applied.max(self.held_by_state);
        if position > held {
            return Some(position);
        }
        self.held_by_state = held;
        None
    }

    /// At the next switch's position, goes on in its log, once it is there; true when it did.
    fn switch_log(&mut self) -> bool {
        let Some((at, next_log, next)) = self.requests.switches.take() else {
            return false;
        };
        self.next_switch = next;
        match next_log {
            ReaderLog::Memory(reader, consumer) => match (self.reader.as_mut(), self.replay.take()) {
                (Some(current), _) => current.continue_in(reader, consumer),
                (None, Some(replay)) => {
                    self.reader = Some(MessageReader::continuing(reader, consumer, at, replay.assembler))
                }
                (None, None) => self.reader = Some(MessageReader::new(reader, consumer, at)),
            },
            ReaderLog::Recorded { snapshot } => {
                // A catch-up filled the recording from here (or from the snapshot it installed).
                let Some(template) = &self.recording else {
                    return false;
                };
                // The reader may be past `at`: it read a Receiver's image the recorder had not recorded,
                // which the catch-up fetched again.
                let from = snapshot.unwrap_or(at.max(self.read_position()));
                let mut replay = Replay::new(template.reopen(from));
                let (reader, previous) = (self.reader.take(), self.replay.take());
                if snapshot.is_none() {
                    // The first fragments of a message the reader holds go on with the rest from `from`,
                    // whether it read them from a log in memory or from the recording (a replay that
                    // reached the recording's end inside a message, whose rest the catch-up fetched, would
                    // otherwise lose that message).
                    match (reader, previous) {
                        (Some(reader), _) => replay.assembler = reader.into_assembler(),
                        (None, Some(previous)) => replay.assembler = previous.assembler,
                        (None, None) => {}
                    }
                }
                self.replay = Some(replay);
                self.pending_snapshot = snapshot.and_then(|position| self.snapshot_to_load(position));
            }
        }
        true
    }
}
