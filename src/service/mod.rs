//! The replicated service's side of the cluster: the [`Cluster`] handle its callbacks get, cluster time,
//! timers, and the state the node keeps for them (`state`, `timers`). The rules are on [`Cluster`].

pub(crate) mod pushes;
pub(crate) mod state;
pub(crate) mod timers;

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

use crate::client::session::SessionTable;
use crate::cluster::consensus_core::Role;
use crate::node::LocalOfferError;

pub use self::pushes::PushError;
pub(crate) use self::pushes::Pushes;
pub use self::timers::TimerError;

/// Timers a node holds at most, unless configured otherwise.
pub(crate) const DEFAULT_MAX_TIMERS: usize = 1 << 20;
pub(crate) use self::timers::TimerTable;

/// A point of cluster time: nanoseconds since the Unix epoch on the clock of the leader that stamped the
/// entry being applied (see [`Cluster`] for how it moves).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterTime(i64);

impl ClusterTime {
    /// The time `nanos` nanoseconds after the Unix epoch.
    pub const fn from_nanos(nanos: i64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// How long after `earlier` this is (zero when it is not after).
    pub fn saturating_duration_since(self, earlier: ClusterTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

impl Add<Duration> for ClusterTime {
    type Output = ClusterTime;

    /// Saturates at the end of time (about the year 2262).
    fn add(self, rhs: Duration) -> ClusterTime {
        ClusterTime(self.0.saturating_add(i64::try_from(rhs.as_nanos()).unwrap_or(i64::MAX)))
    }
}

impl Sub<Duration> for ClusterTime {
    type Output = ClusterTime;

    fn sub(self, rhs: Duration) -> ClusterTime {
        ClusterTime(self.0.saturating_sub(i64::try_from(rhs.as_nanos()).unwrap_or(i64::MAX)))
    }
}

impl fmt::Display for ClusterTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}s", self.0.div_euclid(1_000_000_000), self.0.rem_euclid(1_000_000_000))
    }
}

/// Why the cluster closed a session, as the service's
/// [`on_session_close`](crate::StateMachine::on_session_close) is told (the same on every member).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Its client closed it.
    Client,
    /// Nothing came from its client for `clients.session_timeout` of cluster time.
    Timeout,
    /// The cluster was full and closed it to let a client of another address in.
    Evicted,
    /// The service closed it ([`Cluster::close_session`]).
    Service,
    /// Its client did not acknowledge `[service] max_push_backlog` bytes of pushes ([`Cluster::push`]):
    /// too slow, or gone.
    Backlog,
}

/// A service's refusal of a session at its open ([`StateMachine::on_session_open`]): the client's connect
/// fails with [`RefusalCode::RefusedByService`](crate::RefusalCode::RefusedByService), and `code` (the
/// application's own) in its event.
///
/// [`StateMachine::on_session_open`]: crate::StateMachine::on_session_open
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionRefused {
    /// The application's reason, told to the client.
    pub code: u32,
}

/// The cluster as the service's callbacks see it (Aeron Cluster's `Cluster` handed to a
/// `ClusteredService`): the time, position and role of the entry being applied, and what a
/// [`StateMachine`](crate::StateMachine)'s callbacks may do besides changing the application's state,
/// every piece of it deterministic on every member. Given to each callback; never held past it.
///
/// - **Cluster time** ([`Cluster::time`]): the leader's clock as stamped on the log's entries, never a
///   member's own. Every session entry (a client's message, open, keep-alive, close; a leader's term and
///   ticks; an entry the service offered itself) carries the leader's clock when it appended it; an entry
///   a [`LocalClient`](crate::LocalClient) offered carries none and is applied at the time of the last
///   stamped entry before it. Cluster time never goes back: an entry stamped earlier than one before it
///   (a new leader whose clock is behind) is applied at the later time.
/// - **Timers** ([`Cluster::schedule_timer`], [`Cluster::cancel_timer`], and the callback
///   [`StateMachine::on_timer`](crate::StateMachine::on_timer)): held in the replicated state and in every
///   snapshot. A timer fires at the first stamped entry whose time is at or past its deadline, on every
///   member at that entry; the leader appends a tick when its clock passes the earliest deadline and
///   nothing else was appended. A deposed leader's timer does not fire twice: firing is an entry of the log.
/// - **Entries of the service's own** ([`Cluster::offer`]): appended by the leader's service, stamped, and
///   applied on every member as a client's are (with no client).
/// - **Closing a session** ([`Cluster::close_session`]): at the same entry on every member, after the
///   callback returns; the client is told, and the service's `on_session_close` runs with
///   [`CloseReason::Service`].
///
/// The handle exists only inside the callbacks, so nothing outside the log can schedule a timer or close
/// a session: what a service does from a thread of its own, or on a clock of its own, would differ
/// between members. Work outside the log (a price feed the leader reads) comes in as an entry offered
/// with [`Cluster::offer`] or by a [`LocalClient`](crate::LocalClient).
pub struct Cluster<'a> {
    pub(crate) now: ClusterTime,
    pub(crate) position: i64,
    pub(crate) role: Role,
    pub(crate) member_id: i32,
    pub(crate) timers: &'a mut TimerTable,
    pub(crate) response: &'a mut Vec<u8>,
    /// Sessions the callback asked to close (and why), closed after it returns.
    pub(crate) closes: &'a mut Vec<(u64, CloseReason)>,
    /// The open sessions.
    pub(crate) sessions: &'a SessionTable,
    /// Every session's stream of pushes.
    pub(crate) pushes: &'a mut Pushes,
    /// The pushes this callback made (session, number), sent after it returns from the live leader.
    pub(crate) pushed: &'a mut Vec<(u64, u64)>,
    /// Where the service's own entries go: `Some` only on the leader applying its own term's entries.
    pub(crate) offers: Option<state::Offers<'a>>,
}

impl Cluster<'_> {
    /// The cluster time of the entry being applied.
    pub fn time(&self) -> ClusterTime {
        self.now
    }

    /// The log position the entry being applied ends at.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// This member's role as it applies the entry. Not part of the replicated state (members apply an
    /// entry at different times, in different roles): use it to start or stop work only the leader does,
    /// never to decide what the state becomes.
    pub fn role(&self) -> Role {
        self.role
    }

    /// This member's id.
    pub fn member_id(&self) -> i32 {
        self.member_id
    }

    /// Schedules timer `correlation_id` to fire at `deadline` of cluster time
    /// ([`StateMachine::on_timer`](crate::StateMachine::on_timer)); a timer of that id already scheduled
    /// moves to the new deadline. A deadline already passed fires at the next stamped entry. Refused past
    /// `[service] max_timers` scheduled timers, on every member alike.
    pub fn schedule_timer(&mut self, correlation_id: u64, deadline: ClusterTime) -> Result<(), TimerError> {
        self.timers.schedule(correlation_id, deadline)
    }

    /// Cancels timer `correlation_id`; false when none of that id is scheduled (it fired, or never was).
    pub fn cancel_timer(&mut self, correlation_id: u64) -> bool {
        self.timers.cancel(correlation_id)
    }

    /// Timers scheduled now.
    pub fn timers_scheduled(&self) -> usize {
        self.timers.len()
    }

    /// The response to the client message being applied: what is written here goes back to its client with
    /// the message's commit (from the leader). In a callback that is not a client's message, what is written
    /// is dropped. A response longer than [`max_response_length`](Self::max_response_length) is not sent:
    /// its client is told it was too long. [`respond`](Self::respond) checks the length as it writes.
    pub fn response(&mut self) -> &mut Vec<u8> {
        self.response
    }

    /// Appends `bytes` to the response, or refuses them (leaving the response as it was) when the response
    /// would pass [`max_response_length`](Self::max_response_length).
    pub fn respond(&mut self, bytes: &[u8]) -> Result<(), PushError> {
        let max = self.max_response_length();
        if self.response.len() + bytes.len() > max {
            return Err(PushError::TooLong { max });
        }
        self.response.extend_from_slice(bytes);
        Ok(())
    }

    /// The longest response and the longest push (`[service] max_response_length`).
    pub fn max_response_length(&self) -> usize {
        self.pushes.max_length()
    }

    /// Offers an entry of the service's own: the leader appends it, stamped with its clock, and every
    /// member applies it as an entry with no client ([`Entry::client`](crate::Entry::client) `None`).
    ///
    /// Every member's service makes the same call at the same entry; only the leader's is appended, and on
    /// the other members this does nothing and returns `Ok`. The leader's error (its log is back-pressured,
    /// the entry is too long) is for its own retry: the replicated state must not depend on the answer.
    /// An offer the leader made just before it failed may be lost with it: what must happen is offered
    /// again from a timer until its entry is applied.
    pub fn offer(&mut self, payload: &[u8]) -> Result<(), LocalOfferError> {
        match &mut self.offers {
            Some(offers) => offers.offer(payload),
            None => Ok(()),
        }
    }

    /// Closes session `session_id` once this callback returns, at the same entry on every member: its
    /// client is told (its session is closed by the service), and
    /// [`on_session_close`](crate::StateMachine::on_session_close) runs with [`CloseReason::Service`].
    /// A session that is not open is ignored.
    pub fn close_session(&mut self, session_id: u64) {
        self.close(session_id, CloseReason::Service);
    }

    fn close(&mut self, session_id: u64, reason: CloseReason) {
        if !self.closes.iter().any(|&(id, _)| id == session_id) {
            self.closes.push((session_id, reason));
        }
    }

    /// Whether session `session_id` is open.
    pub fn is_open(&self, session_id: u64) -> bool {
        self.sessions.applied(session_id).is_some()
    }

    /// The open sessions' ids, in order.
    pub fn sessions(&self) -> impl Iterator<Item = u64> + '_ {
        self.sessions.ids()
    }

    /// Pushes `payload` to session `session_id`'s client, which did not ask for it (Aeron's
    /// `ClientSession.offer`): a fill to a resting order's owner. Returns its number in the session's
    /// stream of pushes (from 1).
    ///
    /// The push is part of the replicated state until the client acknowledges it: the leader sends it,
    /// and sends it again after a loss or a leader change, and the client hands each push to its
    /// application once and in order ([`Event::Pushed`](crate::Event::Pushed)). A client that leaves
    /// `[service] max_push_backlog` bytes unacknowledged has its session closed
    /// ([`CloseReason::Backlog`]): a slow client never grows a member's memory. The same on every member:
    /// the state may depend on the answer.
    pub fn push(&mut self, session_id: u64, payload: &[u8]) -> Result<u64, PushError> {
        if !self.is_open(session_id) || self.closes.iter().any(|&(id, _)| id == session_id) {
            return Err(PushError::UnknownSession);
        }
        match self.pushes.push(session_id, payload) {
            Ok(number) => {
                self.pushed.push((session_id, number));
                Ok(number)
            }
            Err(PushError::BacklogFull) => {
                self.close(session_id, CloseReason::Backlog);
                Err(PushError::BacklogFull)
            }
            Err(e) => Err(e),
        }
    }

    /// Pushes `payload` to every open session ([`push`](Self::push)); returns the sessions it reached (a
    /// session refused is left out, and closed when its backlog is full).
    pub fn push_all(&mut self, payload: &[u8]) -> usize {
        let ids: Vec<u64> = self.sessions.ids().collect();
        ids.into_iter().filter(|&id| self.push(id, payload).is_ok()).count()
    }
}

impl fmt::Debug for Cluster<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("time", &self.now)
            .field("position", &self.position)
            .field("role", &self.role)
            .field("timers", &self.timers.len())
            .finish_non_exhaustive()
    }
}
