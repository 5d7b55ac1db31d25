//! Membership changes as an embedder (or `qc-cluster`) asks for them: add a learner, promote it, remove a
//! member, each one at a time and waited for until it commits.
//!
//! The request goes to the consensus agent through a [`MembershipDesk`] (one request at a time, answered
//! by ticket); the agent asks its core whether the change may be made now
//! ([`ConsensusCore::propose_membership`](crate::cluster::consensus_core::ConsensusCore::propose_membership)),
//! appends the configuration entry ([`crate::cluster::configuration`]) and answers with where the entry
//! ends. The caller then waits for the commit position to pass it.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster::configuration::MemberEndpoints;
use crate::cluster::consensus_core::{Membership, MembershipChange, MembershipError};

use super::{Member, Node};

/// One membership change asked of the consensus agent.
#[derive(Clone, Debug)]
pub(super) struct MembershipRequest {
    pub(super) ticket: u64,
    pub(super) change: MembershipChange,
    /// The endpoints of a member being added.
    pub(super) endpoints: Option<MemberEndpoints>,
}

/// What the consensus agent answered: the configuration appended and where its entry ends, or why not.
pub(super) type MembershipAnswer = Result<(Membership, i64), MembershipChangeError>;

/// Where membership requests wait for the consensus agent, and where it answers and publishes the
/// configuration in effect.
#[derive(Debug, Default)]
pub(super) struct MembershipDesk {
    inner: Mutex<Desk>,
}

#[derive(Debug, Default)]
struct Desk {
    next_ticket: u64,
    request: Option<MembershipRequest>,
    answer: Option<(u64, MembershipAnswer)>,
    current: Option<(Membership, Vec<MemberEndpoints>)>,
}

impl MembershipDesk {
    fn lock(&self) -> std::sync::MutexGuard<'_, Desk> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for `change`; returns its ticket (a request not yet taken is replaced).
    fn ask(&self, change: MembershipChange, endpoints: Option<MemberEndpoints>) -> u64 {
        let mut desk = self.lock();
        desk.next_ticket += 1;
        let ticket = desk.next_ticket;
        desk.request = Some(MembershipRequest { ticket, change, endpoints });
        ticket
    }

    /// The request waiting, if any (the consensus agent's side).
    pub(super) fn take_request(&self) -> Option<MembershipRequest> {
        self.lock().request.take()
    }

    /// Answers request `ticket` (the consensus agent's side).
    pub(super) fn answer(&self, ticket: u64, answer: MembershipAnswer) {
        self.lock().answer = Some((ticket, answer));
    }

    fn take_answer(&self, ticket: u64) -> Option<MembershipAnswer> {
        let mut desk = self.lock();
        match &desk.answer {
            Some((t, _)) if *t == ticket => desk.answer.take().map(|(_, a)| a),
            _ => None,
        }
    }

    /// Publishes the configuration in effect and its members' endpoints (the consensus agent's side).
    pub(super) fn publish(&self, membership: Membership, endpoints: Vec<MemberEndpoints>) {
        self.lock().current = Some((membership, endpoints));
    }

    /// The configuration in effect, as last published.
    pub(super) fn current(&self) -> Option<(Membership, Vec<MemberEndpoints>)> {
        self.lock().current.clone()
    }
}

/// Why a membership change did not commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChangeError {
    /// The leader refused it (or this member does not lead): why, and what to do.
    Refused(MembershipError),
    /// The leader could not append the entry (its log refused it): why.
    Failed(String),
    /// No answer, or no commit, within the time-out; `appended`: the entry is in the leader's log and may
    /// still commit (read [`Node::membership`] before asking again).
    TimedOut {
        /// How long was waited.
        waited: Duration,
        /// Whether the leader appended the entry.
        appended: bool,
    },
}

impl fmt::Display for MembershipChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(why) => write!(f, "refused: {why}"),
            Self::Failed(why) => write!(f, "the leader could not append the change: {why}"),
            Self::TimedOut { waited, appended: false } => {
                write!(f, "no answer from the consensus agent within {waited:?}")
            }
            Self::TimedOut { waited, appended: true } => write!(
                f,
                "appended, but not committed within {waited:?}: it may still commit (see the membership before \
                 asking again)"
            ),
        }
    }
}

impl std::error::Error for MembershipChangeError {}

/// A membership change asked of a node, until it commits or is refused ([`PendingChange::poll`]).
#[derive(Debug)]
pub struct PendingChange {
    ticket: u64,
    change: MembershipChange,
    /// The configuration appended and where its entry ends, once the leader answered.
    appended: Option<(Membership, i64)>,
}

impl PendingChange {
    /// The change asked for.
    pub fn change(&self) -> MembershipChange {
        self.change
    }

    /// `None` while the change waits for the consensus agent or for its commit on `node` (the node it was
    /// asked of); then the configuration it made, or why it was refused.
    pub fn poll(&mut self, node: &Node) -> Option<Result<Membership, MembershipChangeError>> {
        if self.appended.is_none() {
            match node.links.membership.take_answer(self.ticket)? {
                Ok(appended) => self.appended = Some(appended),
                Err(why) => return Some(Err(why)),
            }
        }
        let (membership, end) = self.appended.as_ref()?;
        (node.commit_position() >= *end).then(|| Ok(membership.clone()))
    }

    /// Whether the leader appended the change (it may still commit).
    pub fn appended(&self) -> bool {
        self.appended.is_some()
    }
}

impl Node {
    /// Asks this node (the leader: others refuse) for a membership `change`, at once; `member` gives the
    /// endpoints of a member being added. Poll the returned change until it commits or is refused.
    /// [`add_learner`](Self::add_learner), [`promote`](Self::promote) and
    /// [`remove_member`](Self::remove_member) ask and wait.
    pub fn propose_membership(&self, change: MembershipChange, member: Option<&Member>) -> PendingChange {
        let ticket = self.links.membership.ask(change, member.map(Member::endpoints));
        PendingChange { ticket, change, appended: None }
    }

    /// Adds `member` (a node not in the cluster, started with itself left out of `initial_members`) as a
    /// learner: it receives the log and catches up, and neither votes nor counts toward a commit. Waits up
    /// to `timeout` for the change to commit (running the agents in invoker mode); returns the
    /// configuration it made. Only the leader takes changes, one at a time.
    pub fn add_learner(&mut self, member: &Member, timeout: Duration) -> Result<Membership, MembershipChangeError> {
        self.change_membership(MembershipChange::AddLearner(member.id), Some(member), timeout)
    }

    /// Makes learner `id` a voter, once it is within the leader's promotion distance of the log's end.
    /// Waits up to `timeout` for the change to commit.
    pub fn promote(&mut self, id: i32, timeout: Duration) -> Result<Membership, MembershipChangeError> {
        self.change_membership(MembershipChange::Promote(id), None, timeout)
    }

    /// Removes member `id` (a voter or a learner; a removed leader steps down once the change commits).
    /// Refused when fewer voters of the new configuration answered recently than a majority of it.
    /// Waits up to `timeout` for the change to commit.
    pub fn remove_member(&mut self, id: i32, timeout: Duration) -> Result<Membership, MembershipChangeError> {
        self.change_membership(MembershipChange::Remove(id), None, timeout)
    }

    /// The configuration in effect on this member (the latest in its log, committed or not), and its
    /// members' endpoints; `None` before the consensus agent first published one.
    pub fn membership(&self) -> Option<(Membership, Vec<MemberEndpoints>)> {
        self.links.membership.current()
    }

    fn change_membership(
        &mut self,
        change: MembershipChange,
        member: Option<&Member>,
        timeout: Duration,
    ) -> Result<Membership, MembershipChangeError> {
        let started = Instant::now();
        let mut pending = self.propose_membership(change, member);
        loop {
            if let Some(outcome) = pending.poll(self) {
                return outcome;
            }
            if started.elapsed() >= timeout {
                return Err(MembershipChangeError::TimedOut {
                    waited: started.elapsed(),
                    appended: pending.appended(),
                });
            }
            if self.invoke().is_err() {
                return Err(MembershipChangeError::Failed("the node's agents stopped".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
