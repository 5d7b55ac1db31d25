//! Offering messages to the cluster through a node, from any thread.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::append::INGRESS_MESSAGE;
use crate::cluster::consensus_core::Role;
use crate::cluster::log_switch::SwitchQueue;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::{ConsumerPosition, LogReader};
use crate::shm::ring_buffer::{self, ManyToOneRingBuffer, RingError};
use crate::storage::recording::{CatchUpChannel, RecorderSource};

use super::{LocalOfferError, LocalWaitError, RoleChange};

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
    /// A leadership transfer asked of the consensus agent: [`NO_TRANSFER`], [`ANY_MEMBER`] or a member id.
    transfer: AtomicI64,
    /// The members the recorder's catch-up server serves (the consensus agent changes them).
    pub(super) catch_up_members: crate::storage::recording::catch_up::CatchUpMembers,
    /// The cluster takes no client entries (an operator suspended it; `qc-cluster suspend`).
    pub(super) suspended: AtomicBool,
    /// A snapshot is to be taken at the application's next `poll_state` (`qc-cluster snapshot`).
    pub(super) snapshot_requested: AtomicBool,
    /// Membership changes asked of the consensus agent, its answers, and the configuration in effect.
    pub(super) membership: super::membership::MembershipDesk,
}

/// No transfer is asked for.
const NO_TRANSFER: i64 = i64::MIN;
/// A transfer to the follower furthest along.
const ANY_MEMBER: i64 = -1;

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
            transfer: AtomicI64::new(NO_TRANSFER),
            catch_up_members: Default::default(),
            suspended: AtomicBool::new(false),
            snapshot_requested: AtomicBool::new(false),
            membership: Default::default(),
        }
    }

    /// Asks the consensus agent to hand the leadership to `to` (`None`: the follower furthest along).
    pub(super) fn request_transfer(&self, to: Option<i32>) {
        self.transfer.store(to.map_or(ANY_MEMBER, i64::from), Ordering::Release);
    }

    /// The transfer asked for, if one was: its target (`None`: any).
    pub(super) fn take_transfer(&self) -> Option<Option<i32>> {
        match self.transfer.swap(NO_TRANSFER, Ordering::AcqRel) {
            NO_TRANSFER => None,
            ANY_MEMBER => Some(None),
            id => Some(Some(id as i32)),
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
    pub(super) commit: Counter,
    pub(super) append: Counter,
}

impl LocalClient {
    fn check(&self) -> Result<(), LocalOfferError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(LocalOfferError::Closed);
        }
        if self.shared.role() != Role::Leader {
            return Err(LocalOfferError::NotLeader { leader: self.shared.leader() });
        }
        if self.shared.suspended.load(Ordering::Acquire) {
            return Err(LocalOfferError::Suspended);
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

    /// Offers `message` and waits until it is committed, or `timeout` passes: the blocking form of
    /// [`offer`](Self::offer). Returns a commit position at or past the message's entry.
    ///
    /// Back-pressure is waited out within the timeout. The wait is for the node's agents, so call it from
    /// a thread other than the one that runs [`Node::invoke`](super::Node::invoke) in an invoker mode
    /// (where that thread is the only one moving the log, it would wait out its whole timeout). The
    /// application still applies the message as every member does, through `poll_committed` or
    /// `poll_state`.
    pub fn offer_and_wait(&self, message: &[u8], timeout: Duration) -> Result<i64, LocalWaitError> {
        let deadline = Instant::now() + timeout;
        let term = self.shared.leadership_term_id();
        let ingress_position = loop {
            match self.offer(message) {
                Ok(position) => break position,
                Err(LocalOfferError::BackPressured) if Instant::now() < deadline => pause(),
                Err(LocalOfferError::BackPressured) => return Err(LocalWaitError::TimedOut { offered: false }),
                Err(e) => return Err(LocalWaitError::Offer(e)),
            }
        };
        // Appended once the consensus agent has taken the ingress past it: the entry then lies below the
        // leader's append position read after that.
        let mut target = None;
        loop {
            if self.shared.leadership_term_id() != term || self.shared.role() != Role::Leader {
                return Err(LocalWaitError::LeadershipLost);
            }
            if target.is_none() && self.ingress.consumer_position() >= ingress_position {
                target = Some(self.append.get());
            }
            if let Some(target) = target {
                let commit = self.commit.get();
                if commit >= target {
                    return Ok(commit);
                }
            }
            if self.shared.closed.load(Ordering::Acquire) {
                return Err(LocalWaitError::Offer(LocalOfferError::Closed));
            }
            if Instant::now() >= deadline {
                return Err(LocalWaitError::TimedOut { offered: true });
            }
            pause();
        }
    }

    /// Claims room for a message of `length` bytes, to be written in place and committed; never blocks.
    pub fn try_claim(&self, length: usize) -> Result<ring_buffer::Claim<'_>, LocalOfferError> {
        self.check()?;
        self.ingress.try_claim(INGRESS_MESSAGE, length).map_err(ring_error)
    }
}

/// Waits between two looks at the node's positions: long enough not to burn a core a node's agents may
/// need, short against a commit's round trip.
fn pause() {
    std::thread::sleep(Duration::from_micros(20));
}

fn ring_error(e: RingError) -> LocalOfferError {
    match e {
        RingError::Full => LocalOfferError::BackPressured,
        _ => LocalOfferError::TooLong,
    }
}
