//! Offering messages to the cluster through a node, from any thread.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::append::INGRESS_MESSAGE;
use crate::cluster::consensus_core::Role;
use crate::shm::counters::Counter;
use crate::shm::ring_buffer::{self, ManyToOneRingBuffer, RingError};

use super::{LocalOfferError, LocalWaitError, RoleChange};

/// What the offer path reads before it writes to the ingress ring: the role, term and leader the
/// consensus agent publishes, whether an operator suspended the cluster, and whether the node closed.
pub(super) struct OfferGate {
    role: AtomicU8,
    /// The leader's member id as this node knows it, or -1.
    leader: AtomicI32,
    term: AtomicI64,
    /// The node closed (set by [`Node::close`](super::Node::close) and its drop).
    pub(super) closed: AtomicBool,
    /// The cluster takes no client entries (an operator suspended it; `qc-cluster suspend`).
    pub(super) suspended: AtomicBool,
}

impl std::fmt::Debug for OfferGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferGate").field("role", &self.role()).field("leader", &self.leader()).finish()
    }
}

impl Default for OfferGate {
    fn default() -> Self {
        Self {
            role: AtomicU8::new(0),
            leader: AtomicI32::new(-1),
            term: AtomicI64::new(0),
            closed: AtomicBool::new(false),
            suspended: AtomicBool::new(false),
        }
    }
}

impl OfferGate {
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

    /// Publishes a change of role, term or leader (the term and leader before the role, which offers
    /// read first).
    pub(super) fn publish(&self, change: &RoleChange) {
        let role = match change.role {
            Role::Follower => 0,
            Role::Canvass => 1,
            Role::Candidate => 2,
            Role::Leader => 3,
        };
        self.term.store(change.leadership_term_id, Ordering::Release);
        self.leader.store(change.leader.unwrap_or(-1), Ordering::Release);
        self.role.store(role, Ordering::Release);
    }
}

/// A handle for offering messages to the cluster through a node; cheap to clone, usable from any thread.
#[derive(Clone, Debug)]
pub struct LocalClient {
    pub(super) ingress: Arc<ManyToOneRingBuffer>,
    pub(super) gate: Arc<OfferGate>,
    pub(super) commit: Counter,
    pub(super) append: Counter,
}

impl LocalClient {
    fn check(&self) -> Result<(), LocalOfferError> {
        if self.gate.closed.load(Ordering::Acquire) {
            return Err(LocalOfferError::Closed);
        }
        if self.gate.role() != Role::Leader {
            return Err(LocalOfferError::NotLeader { leader: self.gate.leader() });
        }
        if self.gate.suspended.load(Ordering::Acquire) {
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
        let term = self.gate.leadership_term_id();
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
            if self.gate.leadership_term_id() != term || self.gate.role() != Role::Leader {
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
            if self.gate.closed.load(Ordering::Acquire) {
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
