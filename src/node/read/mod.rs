//! The read path: what is committed, handed to the application in log order from wherever it is (the
//! recorded log at a restart, the log in memory, a snapshot a catch-up installed), with the session
//! table applied on the way, and the application's snapshots.
//!
//! Files: `committed` (the reader of committed entries: replay, log switches, installed snapshots),
//! `replay` (committed entries read from the recording), `recovery` (the recording opened at start).

pub(super) mod committed;
pub(super) mod recovery;
pub(super) mod replay;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::client::session::Entry;
use crate::cluster::consensus_core::Role;
use crate::cluster::frames::SESSION_FLAG;
use crate::cluster::log_switch::SwitchQueue;
use crate::storage::snapshot::{SnapshotIdentity, SnapshotInfo, SnapshotStore, StateMachine};

use self::committed::CommittedReader;
use self::committed::ReaderLog;
use super::sessions::{At, ClientSessions};
use super::{Node, NodeError};
#[cfg(doc)]
use super::{NodeConfig, StorageConfig};
use crate::service::state::{Applier, Entries, Machine, Service};
use crate::shm::counters::Counter;
use crate::storage::disk::SharedDisk;

/// What the consensus agent asks of the read path: the log switches the reader of committed entries has
/// still to make, and a snapshot an operator asked for.
#[derive(Default)]
pub(super) struct ReadRequests {
    /// The log switches the node's reader has still to make.
    pub(super) switches: SwitchQueue<ReaderLog>,
    /// A snapshot is to be taken at the application's next `poll_state` (`qc-cluster snapshot`).
    pub(super) snapshot_requested: AtomicBool,
}

/// What the node's read path holds: the reader of committed entries, the replicated session table it
/// applies them to, the application's snapshots, and the positions it publishes.
pub(super) struct ReadPath {
    /// What the application is handed: committed entries, in log order, from wherever they are.
    pub(super) committed: CommittedReader,
    /// The position below which the recorder may delete segments (the oldest snapshot kept).
    pub(super) compact_below: Counter,
    /// Remote clients' sessions, as the log builds them (taken while a poll runs).
    pub(super) sessions: Option<ClientSessions>,
    /// The application's snapshots (opened by the first restore or snapshot), on `disk`.
    pub(super) snapshots: Option<SnapshotStore>,
    /// The disk its data directory is on.
    pub(super) disk: SharedDisk,
    /// The position of the newest snapshot taken or restored (its counter, `state.snapshot_position`).
    pub(super) last_snapshot: Counter,
    /// The applied position as the counter `state.applied_position` publishes it (after each poll and
    /// restore).
    pub(super) applied: Counter,
    /// Committed entries were polled for (a restore after that is refused).
    pub(super) polled: bool,
}

impl Node {
    /// The log position this node has applied up to through [`Node::poll_committed`]: every message
    /// before it was handed out. It stops before the first fragments of a message not yet whole (a
    /// snapshot is taken here, and a restore reads them again).
    pub fn applied_position(&self) -> i64 {
        self.read.committed.applied()
    }

    /// Why the replay of the recorded log stopped (a damaged segment: the error names it and says what to
    /// do); committed entries are not handed out past it.
    pub fn recording_error(&self) -> Option<&crate::storage::recording::RecordingError> {
        self.read.committed.recording_error()
    }

    /// Hands up to `fragment_limit` fragments' worth of committed entries, in log order, to `handler`;
    /// returns the fragments read. After a restart with a recorded log, the entries come first from the
    /// recording (from its start, or from the snapshot [`restore`](Self::restore) loaded), then from the
    /// log in memory. Entries below [`NodeConfig::resume_from`] are read and not handed on (the application
    /// has them). Role-change callbacks run first.
    pub fn poll_committed(&mut self, fragment_limit: usize, mut handler: impl FnMut(&[u8])) -> usize {
        self.poll_positions(fragment_limit, |entry, _| handler(entry))
    }

    /// As [`poll_committed`](Self::poll_committed), with the log position each entry ends at.
    pub fn poll_positions(&mut self, fragment_limit: usize, mut handler: impl FnMut(&[u8], i64)) -> usize {
        self.poll_service(fragment_limit, |entry, _| handler(entry.payload, entry.position))
    }

    /// As [`poll_committed`](Self::poll_committed), for a service of remote clients
    /// ([`ClusterClient`](crate::ClusterClient)): each entry with its position and, for a client's message, its session
    /// and number. A client's message is handed out exactly once whatever its client resends; what the
    /// handler writes to the response buffer goes back to the client with the message's commit (from the
    /// leader). Session entries (opens, keep-alives, closes) are applied to the replicated session table
    /// and not handed out.
    pub fn poll_service(&mut self, fragment_limit: usize, handler: impl FnMut(&Entry<'_>, &mut Vec<u8>)) -> usize {
        self.deliver_role_changes(|_| {});
        self.poll_with(fragment_limit, &mut Entries(handler))
    }

    /// Hands committed entries to `service`'s callbacks (see [`poll_service`](Self::poll_service)), with
    /// the session table and the service's state applied on the way.
    fn poll_with(&mut self, fragment_limit: usize, service: &mut impl Service) -> usize {
        self.read.polled = true;
        if let Some(position) = self.read.committed.pending_snapshot() {
            // Only poll_state can load it: nothing after it is handed out until then.
            self.logs.warn(self.clock.now_ns(), || {
                format!(
                    "a catch-up installed the leader's snapshot at {position}: this application polls without a \
                     StateMachine and cannot load it; use Node::poll_state"
                )
            });
            return 0;
        }
        let commit = if self.bugs.apply_uncommitted() { i64::MAX } else { self.client.commit.get() };
        let skip_below = self.config.resume_from.unwrap_or(0);
        let role = self.links.offers.role();
        let leading = (role == Role::Leader).then(|| self.links.offers.leadership_term_id());
        let offers = leading.map(|_| (&*self.client.ingress, &self.clock));
        let applier = Applier { member_id: self.config.id, role, offers };
        let mut sessions = self.read.sessions.take().expect("the session table is put back after every poll");
        let fragments = self.read.committed.poll(commit, fragment_limit, &mut |entry: &[u8], end: i64, flags: u8| {
            let at = At { position: end, deliver: end > skip_below, leading, applier: &applier };
            if flags & SESSION_FLAG != 0 {
                sessions.on_entry(entry, at, service);
            } else {
                sessions.on_plain(entry, at, service);
            }
        });
        sessions.flush();
        self.read.sessions = Some(sessions);
        self.read.applied.set(self.read.committed.applied());
        fragments
    }

    /// Restores `machine` from the newest snapshot that verifies (an older one when the newest fails its
    /// checks; each skip is logged), and makes the replay of the recorded log start at its position.
    /// Call it once, before the first poll. Returns the snapshot's position, or `None` when there is none
    /// (the replay starts at the recording's start, which must then be 0).
    pub fn restore(&mut self, machine: &mut impl StateMachine) -> Result<Option<i64>, NodeError> {
        if self.read.polled {
            return Err(NodeError::Snapshot("restore before the first poll: entries may have been applied".into()));
        }
        let (store, sessions) = self.store_and_sessions()?;
        let restored = store
            .restore(|reader| load_snapshot(sessions, machine, reader))
            .map_err(|e| NodeError::Snapshot(e.to_string()))?;
        for skipped in &restored.skipped {
            log::warn!("member {}: {skipped}", self.config.id);
            self.warnings.push(skipped.clone());
        }
        let start = self.read.committed.replay_start();
        match &restored.info {
            Some(info) if info.position < start => {
                return Err(NodeError::Snapshot(format!(
                    "{}: at position {}, below the recorded log's start {start}; the log between is gone: \
                     move the data directory away to start this member empty",
                    info.path.display(),
                    info.position
                )));
            }
            // With a recorded log, its replay starts at the snapshot; without one, there is nothing to replay.
            Some(info) => {
                self.read.committed.restart_replay_at(info.position);
                self.read.last_snapshot.set(info.position);
            }
            None if start > 0 => {
                return Err(NodeError::Snapshot(format!(
                    "no snapshot verifies, and the recorded log starts at {start}: the state before it cannot be \
                     rebuilt; restore a snapshot into {}, or move the data directory away to start this member empty",
                    self.config.snapshot_dir_path().display()
                )))
            }
            None => {}
        }
        self.read.applied.set(self.read.committed.applied());
        Ok(restored.info.map(|info| info.position))
    }

    /// As [`poll_committed`](Self::poll_committed), applying each entry to `machine`, and taking a snapshot
    /// each time [`StorageConfig::snapshot_interval`] more bytes of log have been applied, once the recorded
    /// log reaches the applied position (a snapshot is never ahead of the log this member holds).
    pub fn poll_state(&mut self, machine: &mut impl StateMachine, fragment_limit: usize) -> Result<usize, NodeError> {
        if let Some(position) = self.read.committed.newest_pending_snapshot().filter(|_| self.bugs.skip_snapshot_load())
        {
            // The planted bug: the entries after the snapshot go to the state it should have replaced.
            self.read.committed.snapshot_loaded(position);
            self.read.last_snapshot.set(position);
        }
        if let Some(position) = self.read.committed.newest_pending_snapshot() {
            // A catch-up installed the leader's snapshot: the state becomes that, then goes on after it.
            let (store, sessions) = self.store_and_sessions()?;
            let restored = store
                .restore(|reader| load_snapshot(sessions, machine, reader))
                .map_err(|e| NodeError::Snapshot(e.to_string()))?;
            match restored.info.as_ref().map(|i| i.position) {
                Some(loaded) if loaded == position => {}
                // A newer catch-up installed a newer snapshot (and may have deleted this one) before its
                // switch was queued: nothing is handed out until that switch makes it the one pending.
                Some(loaded) if loaded > position => return Ok(0),
                loaded => {
                    return Err(NodeError::Snapshot(format!(
                        "the snapshot a catch-up installed at {position} does not load (the newest that loads is \
                         at {loaded:?}; skipped: {:?})",
                        restored.skipped
                    )))
                }
            }
            self.read.committed.snapshot_loaded(position);
            self.read.last_snapshot.set(position);
        }
        self.deliver_role_changes(|change| machine.on_role_change(change.role));
        let fragments = self.poll_with(fragment_limit, &mut Machine(machine));
        let due = self
            .config
            .storage
            .snapshot_interval
            .is_some_and(|every| self.applied_position() - self.read.last_snapshot.get() >= every as i64)
            || self.links.reader.snapshot_requested.load(Ordering::Acquire);
        if due
            && self.read.committed.pending_snapshot().is_none()
            && self.read.committed.recorded_past(self.applied_position())
        {
            self.take_snapshot(machine)?;
            self.links.reader.snapshot_requested.store(false, Ordering::Release);
        }
        Ok(fragments)
    }

    /// Takes a snapshot of `machine` at the applied position, keeps the newest
    /// [`StorageConfig::snapshots_kept`], and lets the recorder delete the log below the oldest kept.
    pub fn take_snapshot(&mut self, machine: &mut impl StateMachine) -> Result<SnapshotInfo, NodeError> {
        if let Some(position) = self.read.committed.pending_snapshot() {
            // The state is not yet the installed snapshot's: a snapshot of it now would be wrong.
            return Err(NodeError::Snapshot(format!(
                "the snapshot a catch-up installed at {position} is not loaded yet: poll_state first"
            )));
        }
        let position = self.applied_position();
        let term = self.leadership_term_id();
        let kept = self.config.storage.snapshots_kept;
        let (store, sessions) = self.store_and_sessions()?;
        let info = store
            .write(position, term, |writer| {
                sessions.write_snapshot(writer)?;
                machine.take_snapshot(writer)
            })
            .map_err(|e| NodeError::Snapshot(e.to_string()))?;
        if let Some(oldest) = store.retain(kept).map_err(|e| NodeError::Snapshot(e.to_string()))? {
            self.read.compact_below.set_max(oldest);
        }
        self.read.last_snapshot.set(position);
        Ok(info)
    }

    /// The snapshot store (opened the first time) and the session table, which every snapshot holds
    /// before the application's state.
    fn store_and_sessions(&mut self) -> Result<(&SnapshotStore, &mut ClientSessions), NodeError> {
        if self.read.snapshots.is_none() {
            let identity = SnapshotIdentity { membership: self.config.membership(), stream_id: self.config.stream_id };
            let store = SnapshotStore::open_on(self.read.disk.clone(), &self.config.snapshot_dir_path(), identity)
                .map_err(|e| NodeError::Snapshot(e.to_string()))?;
            self.read.snapshots = Some(store);
        }
        let sessions = self.read.sessions.as_mut().expect("the session table is put back after every poll");
        Ok((self.read.snapshots.as_ref().expect("opened"), sessions))
    }
}

/// Loads a snapshot: the session table, then the application's state.
fn load_snapshot(
    sessions: &mut ClientSessions,
    machine: &mut impl StateMachine,
    reader: &mut dyn std::io::Read,
) -> std::io::Result<()> {
    sessions.read_snapshot(reader)?;
    machine.load_snapshot(reader)
}
