//! What the node simulator checks after every step.
//!
//! One committed order: the first node to apply an entry past a position fixes which entry follows that
//! position; every node's applied entries must then follow the same chain from the start, none skipped
//! (an entry whose predecessor is not the node's previous entry) and none changed (other bytes at the same
//! end position). Every entry applied is a message the client offered, and each appears once in the order.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::super::Fnv1a64;

/// A broken property. (The fields are what its `Display` says: the member, end positions of entries, the
/// message number.)
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Violation {
    /// A node applied an entry that differs from the one the order has at that position.
    Diverged { member: usize, end: i64, detail: String },
    /// A node applied an entry that does not follow its previous one in the order (one was skipped), or
    /// went back.
    Skipped { member: usize, previous: i64, end: i64, expected: i64 },
    /// A node applied bytes no client offered.
    Unknown { member: usize, end: i64, length: usize },
    /// One offered message appears twice in the order.
    Duplicated { seq: u64, first_end: i64, again_end: i64 },
    /// An agent of a node failed (other than on a disk failing on purpose, where stopping is right).
    AgentFailed { member: usize, error: String },
    /// A node refused to start again on a healthy disk (after a crash or a power loss).
    RefusedStart { member: usize, error: String },
    /// After a power loss, a node's recorded log ended before the position its recorder had reported as
    /// synced (and so as acknowledgeable) before it.
    LostDurable { member: usize, synced: i64, recovered: i64 },
    /// A member whose recorded log was found damaged below what it held (repairing up to `held`) stood
    /// for election or led: it could win with a log that lacks entries committed with its old
    /// acknowledgements.
    StoodWhileRepairing { member: usize, role: quorumcast_consensus::consensus_core::Role, held: i64 },
    /// A remote client was told something the committed order contradicts: a message committed that is
    /// not in the order, a response that is not the state after its message, one message reported twice,
    /// or a session's messages applied out of order.
    Client { client: usize, detail: String },
    /// A member applied a remote client session's message out of the session's order (a resend applied
    /// again, or one skipped).
    SessionOrder { member: usize, session: u64, got: u64, expected: u64 },
    /// What a member or the network holds grew past its bound (under forged traffic: datagrams waiting,
    /// open streams, files in a node's directory).
    Unbounded { what: String, held: usize, bound: usize },
    /// After the faults stopped, no new message was applied on every member within the bound.
    /// `window_stall`: the leader's Sender was within an MTU of its flow-control limit with commits behind
    /// its append position (the signature of seed 1019's bug: a follower's window, counted from what its
    /// node consumed, could not take a new leader's log up to the start of its term).
    NoProgress { healed_ms: u64, bound_ms: u64, window_stall: bool, state: String },
    /// The service ([`super::service`]) saw a property broken at one of its callbacks (a timer lost,
    /// fired twice, early or late; a session closed that was not open), or its callbacks or state differ
    /// from another member's at the same position, or a snapshot's service state is not what the members
    /// had at its position.
    Service { member: usize, detail: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Diverged { member, end, detail } => {
                write!(f, "member {member} applied another entry ending at {end} than the committed order: {detail}")
            }
            Self::Skipped { member, previous, end, expected } => write!(
                f,
                "member {member} applied the entry ending at {end} after the one ending at {previous}; the order \
                 has the one ending at {expected} next"
            ),
            Self::Unknown { member, end, length } => {
                write!(f, "member {member} applied {length} bytes ending at {end} that no client offered")
            }
            Self::Duplicated { seq, first_end, again_end } => {
                write!(f, "message {seq} is in the committed order twice: ending at {first_end} and at {again_end}")
            }
            Self::AgentFailed { member, error } => write!(f, "an agent of member {member} failed: {error}"),
            Self::RefusedStart { member, error } => write!(f, "member {member} refused to start again: {error}"),
            Self::LostDurable { member, synced, recovered } => write!(
                f,
                "member {member} reported its log synced up to {synced}, and after a power loss held it up to {recovered}"
            ),
            Self::StoodWhileRepairing { member, role, held } => write!(
                f,
                "member {member} was {role} while it repaired its log (it held up to {held} before a loss)"
            ),
            Self::Client { client, detail } => write!(f, "remote client {client}: {detail}"),
            Self::SessionOrder { member, session, got, expected } => write!(
                f,
                "member {member} applied message {got} of session {session:#x}, where the session's next is {expected}"
            ),
            Self::Unbounded { what, held, bound } => write!(f, "{what}: {held}, more than its bound {bound}"),
            Self::Service { member, detail } => write!(f, "the service of member {member}: {detail}"),
            Self::NoProgress { healed_ms, bound_ms, window_stall, state } => write!(
                f,
                "the network healed at {healed_ms} ms and no new message was applied on every member within \
                 {bound_ms} ms{}: {state}",
                if *window_stall { " (the leader's Sender stalled at its flow-control limit)" } else { "" }
            ),
        }
    }
}

/// One entry of the committed order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Link {
    /// Where the entry before it ends (0 for the first).
    previous: i64,
    digest: u64,
    seq: u64,
}

/// The checker's state.
pub(super) struct Checker {
    /// The committed order, by each entry's end position.
    order: BTreeMap<i64, Link>,
    /// The end of the entry that follows each end position.
    next_of: HashMap<i64, i64>,
    /// Each member's last applied end position.
    last: Vec<i64>,
    /// Each member's highest message number applied.
    highest: Vec<Option<u64>>,
    /// Messages offered, by digest.
    offered: HashMap<u64, u64>,
    /// Where each message is in the order.
    placed: HashMap<u64, i64>,
    /// The state (the fold of every entry's digest, [`super::state::fold`]) after each entry of the order,
    /// by its end position (0: before the first).
    state_at: HashMap<i64, u64>,
    /// The service's digests after the callbacks of each entry that had any, by its position, as the
    /// first member to apply it reported them: every other member must report the same.
    service_at: BTreeMap<i64, ServiceDigests>,
    /// How late each timer fired (see [`super::service::ServiceAt::lateness_ns`]), once per firing.
    pub(super) lateness_ns: Vec<i64>,
}

/// The service's digests after an entry's callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ServiceDigests {
    callbacks: u64,
    sessions: u64,
    state: u64,
}

pub(super) fn digest(bytes: &[u8]) -> u64 {
    let mut d = Fnv1a64::new();
    d.update(bytes);
    d.value()
}

impl Checker {
    pub(super) fn new(members: usize) -> Self {
        Self {
            order: BTreeMap::new(),
            next_of: HashMap::new(),
            last: vec![0; members],
            highest: vec![None; members],
            offered: HashMap::new(),
            placed: HashMap::new(),
            state_at: HashMap::from([(0, 0)]),
            service_at: BTreeMap::new(),
            lateness_ns: Vec::new(),
        }
    }

    /// Member `member`'s service reported what an entry's callbacks left: the same session events, the
    /// same callbacks and the same state as every other member's at that position.
    pub(super) fn on_service(&mut self, member: usize, at: &super::service::ServiceAt) -> Result<(), Violation> {
        let now = ServiceDigests { callbacks: at.callbacks, sessions: at.sessions, state: at.state };
        let Some(&first) = self.service_at.get(&at.position) else {
            self.service_at.insert(at.position, now);
            self.lateness_ns.extend_from_slice(&at.lateness_ns);
            return Ok(());
        };
        let what = if first.sessions != now.sessions {
            "session opens and closes"
        } else if first.callbacks != now.callbacks {
            "callbacks"
        } else if first.state != now.state {
            "state"
        } else {
            return Ok(());
        };
        let detail =
            format!("its {what} up to the entry at {} differ from the first member's to apply it", at.position);
        Err(Violation::Service { member, detail })
    }

    /// Member `member` loaded a snapshot whose service state has digest `state` and whose last entry with
    /// callbacks is at `at` (its own record: the snapshot's position may be past it, after entries with
    /// none): the state every member reported after that entry (the empty state when `at` is 0). A
    /// snapshot that dropped later callbacks shows when the member's next entry's digests are compared.
    pub(super) fn on_service_snapshot(&self, member: usize, at: i64, state: u64) -> Result<(), Violation> {
        let expected = match at {
            0 => Some(super::service::ServiceSim::default().state_digest()),
            _ => self.service_at.get(&at).map(|digests| digests.state),
        };
        if expected == Some(state) {
            return Ok(());
        }
        let detail = match expected {
            Some(_) => format!("a snapshot whose service state is not the members' after the entry at {at}"),
            None => format!("a snapshot whose service state ends at the entry at {at}, which had no callbacks"),
        };
        Err(Violation::Service { member, detail })
    }

    /// The client offered message `seq`, `bytes`.
    pub(super) fn offered(&mut self, seq: u64, bytes: &[u8]) {
        self.offered.insert(digest(bytes), seq);
    }

    /// Entries in the committed order.
    pub(super) fn committed(&self) -> u64 {
        self.order.len() as u64
    }

    /// Whether member `member` applied message `seq` or a later one.
    pub(super) fn has_applied(&self, member: usize, seq: u64) -> bool {
        self.highest[member].is_some_and(|h| h + 1 >= seq)
    }

    /// Member `member` restarted: it hands out the committed order again from its start (or a snapshot).
    pub(super) fn restarted(&mut self, member: usize) {
        self.last[member] = 0;
    }

    /// Member `member` loaded a snapshot at `position` whose state is `state` (the fold of every entry's
    /// digest up to it, [`super::state::fold`]): the state must be the committed order's up to there (up to
    /// its last entry that ends at or before `position`, which may be followed by frames that are not
    /// entries: a term's start, a session's keep-alive); the member goes on after it.
    pub(super) fn on_snapshot(&mut self, member: usize, position: i64, state: u64) -> Result<(), Violation> {
        let (mut at, mut expected, mut seq) = (0, 0u64, None);
        while let Some(&end) = self.next_of.get(&at).filter(|&&end| end <= position) {
            let link = self.order[&end];
            expected = super::state::fold(expected, link.digest);
            at = end;
            if link.seq < super::service::OWN_SEQ {
                seq = Some(link.seq);
            }
        }
        if expected != state {
            let detail = format!(
                "a snapshot at {position} whose state is not the committed order's up to there (its last entry \
                 ending at {at})"
            );
            return Err(Violation::Diverged { member, end: position, detail });
        }
        self.last[member] = at;
        if let Some(seq) = seq {
            self.highest[member] = Some(self.highest[member].map_or(seq, |h| h.max(seq)));
        }
        Ok(())
    }

    /// The state after the entry of the order that ends at `end`, if it is known.
    pub(super) fn state_at(&self, end: i64) -> Option<u64> {
        self.state_at.get(&end).copied()
    }

    /// Where message `seq` is in the order, if it is.
    pub(super) fn placed(&self, seq: u64) -> Option<i64> {
        self.placed.get(&seq).copied()
    }

    /// Member `member` applied `bytes`, ending at `end`.
    pub(super) fn on_applied(&mut self, member: usize, end: i64, bytes: &[u8]) -> Result<(), Violation> {
        let previous = self.last[member];
        let d = digest(bytes);
        let Some(&seq) = self.offered.get(&d) else {
            return Err(Violation::Unknown { member, end, length: bytes.len() });
        };
        if let Some(&expected) = self.next_of.get(&previous) {
            if expected != end {
                return Err(Violation::Skipped { member, previous, end, expected });
            }
        }
        match self.order.get(&end) {
            Some(link) if link.digest != d || link.previous != previous => {
                return Err(Violation::Diverged {
                    member,
                    end,
                    detail: format!(
                        "message {seq} after {previous}, the order has message {} after {}",
                        link.seq, link.previous
                    ),
                });
            }
            Some(_) => {}
            None => {
                if end <= previous {
                    return Err(Violation::Skipped { member, previous, end, expected: previous });
                }
                if let Some(&first_end) = self.placed.get(&seq) {
                    return Err(Violation::Duplicated { seq, first_end, again_end: end });
                }
                self.order.insert(end, Link { previous, digest: d, seq });
                self.next_of.insert(previous, end);
                self.placed.insert(seq, end);
                if let Some(&before) = self.state_at.get(&previous) {
                    self.state_at.insert(end, super::state::fold(before, d));
                }
            }
        }
        self.last[member] = end;
        if seq < super::service::OWN_SEQ {
            // The service's own entries are numbered by their digest: they say nothing of the clients'.
            self.highest[member] = Some(self.highest[member].map_or(seq, |h| h.max(seq)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checker() -> Checker {
        let mut c = Checker::new(2);
        for seq in 0..4 {
            c.offered(seq, &[seq as u8; 8]);
        }
        c
    }

    #[test]
    fn the_same_order_on_every_member_passes() {
        let mut c = checker();
        for member in 0..2 {
            c.on_applied(member, 64, &[0; 8]).unwrap();
            c.on_applied(member, 128, &[1; 8]).unwrap();
        }
        assert!((0..2).all(|member| c.has_applied(member, 2)));
        assert!((0..2).all(|member| !c.has_applied(member, 3)));
    }

    #[test]
    fn a_changed_a_skipped_an_unknown_and_a_duplicated_entry_are_each_caught() {
        let mut c = checker();
        c.on_applied(0, 64, &[0; 8]).unwrap();
        c.on_applied(0, 128, &[1; 8]).unwrap();
        assert!(matches!(c.on_applied(1, 64, &[2; 8]), Err(Violation::Diverged { .. })));
        assert!(matches!(c.on_applied(1, 128, &[1; 8]), Err(Violation::Skipped { .. })));
        assert!(matches!(c.on_applied(1, 64, &[9; 8]), Err(Violation::Unknown { .. })));
        assert!(matches!(c.on_applied(0, 192, &[1; 8]), Err(Violation::Duplicated { .. })));
    }
}
