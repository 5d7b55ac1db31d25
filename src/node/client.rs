//! Offering messages to the cluster through a node, from any thread.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use crate::consensus::{Role, INGRESS_MESSAGE};
use crate::ring_buffer::{self, ManyToOneRingBuffer, RingError};

use super::OfferError;

/// What nodes and their clients share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) role: AtomicU8,
    /// The leader's member id as this node knows it (fixed by configuration until elections are wired).
    pub(super) leader: i32,
    pub(super) closed: AtomicBool,
}

impl Shared {
    pub(super) fn leader(&self) -> Option<i32> {
        Some(self.leader)
    }

    pub(super) fn role(&self) -> Role {
        if self.role.load(Ordering::Acquire) == 0 {
            Role::Leader
        } else {
            Role::Follower
        }
    }
}

/// A handle for offering messages to the cluster through a node; cheap to clone, usable from any thread.
#[derive(Clone, Debug)]
pub struct Client {
    pub(super) ingress: Arc<ManyToOneRingBuffer>,
    pub(super) shared: Arc<Shared>,
}

impl Client {
    fn check(&self) -> Result<(), OfferError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(OfferError::Closed);
        }
        if self.shared.role() != Role::Leader {
            return Err(OfferError::NotLeader { leader: self.shared.leader() });
        }
        Ok(())
    }

    /// Offers `message` for replication. Returns its ingress position (its place in the leader's ingress;
    /// the consensus agent appends it to the log in that order), or why it was not taken. Never blocks.
    pub fn offer(&self, message: &[u8]) -> Result<i64, OfferError> {
        self.check()?;
        match self.ingress.write(INGRESS_MESSAGE, message) {
            Ok(()) => Ok(self.ingress.producer_position()),
            Err(e) => Err(ring_error(e)),
        }
    }

    /// Claims room for a message of `length` bytes, to be written in place and committed; never blocks.
    pub fn try_claim(&self, length: usize) -> Result<ring_buffer::Claim<'_>, OfferError> {
        self.check()?;
        self.ingress.try_claim(INGRESS_MESSAGE, length).map_err(ring_error)
    }
}

fn ring_error(e: RingError) -> OfferError {
    match e {
        RingError::Full => OfferError::BackPressured,
        _ => OfferError::TooLong,
    }
}
