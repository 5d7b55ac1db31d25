//! Offering messages to the cluster through a node, from any thread.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::cluster::append::{Role, INGRESS_MESSAGE};
use crate::cluster::log_switch::SwitchQueue;
use crate::shm::log_buffer::{ConsumerPosition, LogReader};
use crate::shm::ring_buffer::{self, ManyToOneRingBuffer, RingError};
use crate::storage::recording::{CatchUpChannel, RecorderSource};

use super::{LocalOfferError, RoleChange};

/// Where the node's reader of committed entries goes on at a switch.
pub(super) enum ReaderLog {
    /// In a log in memory: a reader of it and its consumer slot.
    Memory(LogReader, ConsumerPosition),
    /// In the recorded log, which a catch-up filled (after the snapshot installed at `snapshot`, if one
    /// was), up to the next switch.
    Recorded { snapshot: Option<i64> },
}

/// What a node, its clients and its consensus agent share.
pub(super) struct Shared {
    role: AtomicU8,
    /// The leader's member id as this node knows it, or -1.
    leader: AtomicI32,
    term: AtomicI64,
    pub(super) closed: AtomicBool,
    /// The log switches the node's reader has still to make.
    pub(super) switches: SwitchQueue<ReaderLog>,
    /// The log switches the recorder has still to make (a node with a recorded log).
    pub(super) recorder_switches: Arc<SwitchQueue<RecorderSource>>,
    /// The catch-ups the consensus agent asks the recorder for.
    pub(super) catch_ups: Arc<CatchUpChannel>,
    /// Role changes not yet handed to the application's callbacks.
    pub(super) events: Mutex<Vec<RoleChange>>,
    pub(super) event_generation: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("role", &self.role()).field("leader", &self.leader()).finish()
    }
}

impl Shared {
    pub(super) fn new() -> Self {
        Self {
            role: AtomicU8::new(0),
            leader: AtomicI32::new(-1),
            term: AtomicI64::new(0),
            closed: AtomicBool::new(false),
            switches: SwitchQueue::default(),
            recorder_switches: Arc::default(),
            catch_ups: Arc::default(),
            events: Mutex::new(Vec::new()),
            event_generation: AtomicU64::new(0),
        }
    }

    pub(super) fn leader(&self) -> Option<i32> {
        Some(self.leader.load(Ordering::Acquire)).filter(|&id| id >= 0)
    }

    pub(super) fn role(&self) -> Role {
        match self.role.load(Ordering::Acquire) {
            3 => Role::Leader,
            2 => Role::Candidate,
            1 => Role::Canvass,
            _ => Role::Follower,
        }
    }

    pub(super) fn leadership_term_id(&self) -> i64 {
        self.term.load(Ordering::Acquire)
    }

    /// Publishes a change of role, term or leader, and queues it for the callbacks.
    pub(super) fn publish(&self, change: RoleChange) {
        let role = match change.role {
            Role::Follower => 0,
            Role::Canvass => 1,
            Role::Candidate => 2,
            Role::Leader => 3,
        };
        self.term.store(change.leadership_term_id, Ordering::Release);
        self.leader.store(change.leader.unwrap_or(-1), Ordering::Release);
        self.role.store(role, Ordering::Release);
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(change);
        self.event_generation.fetch_add(1, Ordering::Release);
    }
}

/// A handle for offering messages to the cluster through a node; cheap to clone, usable from any thread.
#[derive(Clone, Debug)]
pub struct LocalClient {
    pub(super) ingress: Arc<ManyToOneRingBuffer>,
    pub(super) shared: Arc<Shared>,
}

impl LocalClient {
    fn check(&self) -> Result<(), LocalOfferError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(LocalOfferError::Closed);
        }
        if self.shared.role() != Role::Leader {
            return Err(LocalOfferError::NotLeader { leader: self.shared.leader() });
        }
        Ok(())
    }

    /// Offers `message` for replication. Returns its ingress position (its place in the leader's ingress;
    /// the consensus agent appends it to the log in that order), or why it was not taken. Never blocks.
    pub fn offer(&self, message: &[u8]) -> Result<i64, LocalOfferError> {
        self.check()?;
        match self.ingress.write(INGRESS_MESSAGE, message) {
            Ok(()) => Ok(self.ingress.producer_position()),
            Err(e) => Err(ring_error(e)),
        }
    }

    /// Claims room for a message of `length` bytes, to be written in place and committed; never blocks.
    pub fn try_claim(&self, length: usize) -> Result<ring_buffer::Claim<'_>, LocalOfferError> {
        self.check()?;
        self.ingress.try_claim(INGRESS_MESSAGE, length).map_err(ring_error)
    }
}

fn ring_error(e: RingError) -> LocalOfferError {
    match e {
        RingError::Full => LocalOfferError::BackPressured,
        _ => LocalOfferError::TooLong,
    }
}
