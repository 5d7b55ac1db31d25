//! Client sessions as replicated state (after Aeron Cluster's client sessions): the log entries that open,
//! keep alive and close a remote client's session and carry its messages, and the table every member
//! builds from them, the same on every member because it is built from the log alone.
//!
//! The table is what makes a client's messages apply exactly once across retries and failovers: each
//! message carries the session's correlation id, which grows by one per message; a member applies a
//! message only when its id is the next one, answers a resend of one already applied as a duplicate (the
//! client learns it was committed), and refuses one past a gap (the client resends from the first it was
//! not told was committed). Time in the table is the leader's clock as written into each entry, never a
//! member's own, so sessions time out at the same log position everywhere.
//!
//! Two entries carry only the leader's clock. A leader opens its term with a **leader term** entry, which
//! restarts every session's silence from its time: a session is closed for silence only for time during
//! which a leader was there to hear it (as Aeron Cluster resets every session's activity at a new
//! leadership term), so a failover or a restart of the whole cluster, however long, closes no session
//! whose client keeps trying. A **tick** is what a leader appends when its own clock passes the table's
//! next expiry and nothing else was appended: silent sessions close on the leader's clock, whether or not
//! anything else comes.
//!
//! # Invariants
//!
//! - [`SessionTable::apply`] is a pure function of the table and the entry: no clock, no I/O.
//! - At most [`SessionConfig::max_sessions`] sessions are open; an open past that is refused, never
//!   stored. A session holds a fixed amount of state whatever its client sends.
//! - A message of a session is delivered only with the correlation id after the last delivered one.
//! - Bytes that are not an entry are refused with a reason ([`SessionDecodeError`]), never a panic.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};

/// An entry's first byte: what kind of entry it is.
const OPEN: u8 = 1;
const MESSAGE: u8 = 2;
const KEEP_ALIVE: u8 = 3;
const CLOSE: u8 = 4;
const LEADER_TERM: u8 = 5;
const TICK: u8 = 6;
const EVICT: u8 = 7;
const SERVICE: u8 = 8;
const PUSH_ACK: u8 = 9;
const PUSH_RESEND: u8 = 10;
/// Bytes before a message's payload: kind, session id, timestamp, correlation id.
pub const MESSAGE_HEADER_LENGTH: usize = 1 + 8 + 8 + 8;

/// One session entry, as the leader appends it to the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEntry<'a> {
    /// A client opens session `session_id` (chosen by the leader, unique in the log).
    Open {
        /// The session.
        session_id: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
    },
    /// A client's message, the `correlation_id`-th of its session (from 1).
    Message {
        /// The session.
        session_id: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
        /// The message's number in its session.
        correlation_id: u64,
        /// The application's bytes.
        payload: &'a [u8],
    },
    /// The client is alive (it sent nothing else for a while).
    KeepAlive {
        /// The session.
        session_id: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
    },
    /// The client closes its session.
    Close {
        /// The session.
        session_id: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
    },
    /// A leader's first session entry of its term: every open session's silence starts again from
    /// `timestamp_ns` (time without a leader does not count). Encoded as a message's header: the session
    /// id's place holds `nonce`, the correlation id's the term.
    LeaderTerm {
        /// The leadership term it opens.
        leadership_term_id: i64,
        /// The leader's random value for the term (its sessions' ids derive from it, so that they never
        /// repeat across clusters or incarnations of one).
        nonce: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
    },
    /// The leader closes the session to make room for a client of another address (its address held
    /// the most sessions when the cluster was full).
    Evict {
        /// The session.
        session_id: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
    },
    /// The leader's clock passed the table's next expiry or the service's next timer: sessions silent for
    /// the timeout close, timers due fire.
    Tick {
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
    },
    /// The client has every push of its session up to `received` (with `resend`: it saw a gap after it, and
    /// asks the leader to send the rest again). Encoded as a message's header, `received` in the
    /// correlation id's place.
    PushAck {
        /// The session.
        session_id: u64,
        /// The leader's clock when it appended the entry.
        timestamp_ns: i64,
        /// The number of the last push the client has, in order.
        received: u64,
        /// The client asks for the pushes after `received` again.
        resend: bool,
    },
    /// An entry the leader's service offered itself ([`crate::service::Cluster::offer`]).
    Service {
        /// The leader's clock when its service offered it.
        timestamp_ns: i64,
        /// The application's bytes.
        payload: &'a [u8],
    },
}

/// Why bytes are not a session entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionDecodeError {
    /// Shorter than its kind's header.
    Truncated {
        /// Bytes the kind needs at least.
        need: usize,
        /// Bytes there were.
        have: usize,
    },
    /// A first byte that is no kind of entry.
    UnknownKind(u8),
    /// A correlation id of 0 (they count from 1).
    ZeroCorrelation,
}

impl fmt::Display for SessionDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { need, have } => write!(f, "a session entry of {have} bytes; its kind needs {need}"),
            Self::UnknownKind(kind) => write!(
                f,
                "unknown session entry kind {kind}: 1 open, 2 message, 3 keep-alive, 4 close, 5 leader term, 6 tick, \
                 7 evict, 8 service, 9 push ack, 10 push resend"
            ),
            Self::ZeroCorrelation => f.write_str("a message with correlation id 0 (they count from 1)"),
        }
    }
}

impl std::error::Error for SessionDecodeError {}

impl<'a> SessionEntry<'a> {
    /// The session the entry is about (0: none, for a leader term or a tick).
    pub fn session_id(&self) -> u64 {
        match *self {
            Self::Open { session_id, .. }
            | Self::Message { session_id, .. }
            | Self::KeepAlive { session_id, .. }
            | Self::Close { session_id, .. }
            | Self::Evict { session_id, .. }
            | Self::PushAck { session_id, .. } => session_id,
            Self::LeaderTerm { .. } | Self::Tick { .. } | Self::Service { .. } => 0,
        }
    }

    /// The leader's clock in the entry.
    pub fn timestamp_ns(&self) -> i64 {
        match *self {
            Self::Open { timestamp_ns, .. }
            | Self::Message { timestamp_ns, .. }
            | Self::KeepAlive { timestamp_ns, .. }
            | Self::Close { timestamp_ns, .. }
            | Self::Evict { timestamp_ns, .. }
            | Self::LeaderTerm { timestamp_ns, .. }
            | Self::Tick { timestamp_ns, .. }
            | Self::PushAck { timestamp_ns, .. }
            | Self::Service { timestamp_ns, .. } => timestamp_ns,
        }
    }

    /// Appends the entry's bytes to `out` (little-endian): kind, session id, timestamp, then for a message
    /// its correlation id and payload, for a service entry its payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (header, length) = self.header();
        out.extend_from_slice(&header[..length]);
        if let Self::Message { payload, .. } | Self::Service { payload, .. } = self {
            out.extend_from_slice(payload);
        }
    }

    /// The entry's bytes before a message's payload (all of them for the other kinds), as
    /// [`encode`](Self::encode) writes them, without allocating: the array and how much of it is used.
    pub fn header(&self) -> ([u8; MESSAGE_HEADER_LENGTH], usize) {
        let mut bytes = [0u8; MESSAGE_HEADER_LENGTH];
        let (kind, correlation, session) = match *self {
            Self::Open { session_id, .. } => (OPEN, None, session_id),
            Self::Message { correlation_id, session_id, .. } => (MESSAGE, Some(correlation_id), session_id),
            Self::KeepAlive { session_id, .. } => (KEEP_ALIVE, None, session_id),
            Self::Close { session_id, .. } => (CLOSE, None, session_id),
            Self::Evict { session_id, .. } => (EVICT, None, session_id),
            Self::LeaderTerm { leadership_term_id, nonce, .. } => (LEADER_TERM, Some(leadership_term_id as u64), nonce),
            Self::Tick { .. } => (TICK, None, 0),
            Self::Service { .. } => (SERVICE, None, 0),
            Self::PushAck { session_id, received, resend, .. } => {
                (if resend { PUSH_RESEND } else { PUSH_ACK }, Some(received), session_id)
            }
        };
        bytes[0] = kind;
        bytes[1..9].copy_from_slice(&session.to_le_bytes());
        bytes[9..17].copy_from_slice(&self.timestamp_ns().to_le_bytes());
        match correlation {
            Some(id) => {
                bytes[17..25].copy_from_slice(&id.to_le_bytes());
                (bytes, MESSAGE_HEADER_LENGTH)
            }
            None => (bytes, 17),
        }
    }

    /// Reads an entry from `bytes` (the payload points into them).
    pub fn decode(bytes: &'a [u8]) -> Result<Self, SessionDecodeError> {
        let &kind = bytes.first().ok_or(SessionDecodeError::Truncated { need: 17, have: 0 })?;
        let need =
            if matches!(kind, MESSAGE | LEADER_TERM | PUSH_ACK | PUSH_RESEND) { MESSAGE_HEADER_LENGTH } else { 17 };
        if !(OPEN..=PUSH_RESEND).contains(&kind) {
            return Err(SessionDecodeError::UnknownKind(kind));
        }
        if bytes.len() < need {
            return Err(SessionDecodeError::Truncated { need, have: bytes.len() });
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let (session_id, timestamp_ns) = (word(1), word(9) as i64);
        Ok(match kind {
            OPEN => Self::Open { session_id, timestamp_ns },
            KEEP_ALIVE => Self::KeepAlive { session_id, timestamp_ns },
            CLOSE => Self::Close { session_id, timestamp_ns },
            TICK => Self::Tick { timestamp_ns },
            EVICT => Self::Evict { session_id, timestamp_ns },
            SERVICE => Self::Service { timestamp_ns, payload: &bytes[17..] },
            PUSH_ACK | PUSH_RESEND => {
                Self::PushAck { session_id, timestamp_ns, received: word(17), resend: kind == PUSH_RESEND }
            }
            LEADER_TERM => Self::LeaderTerm { leadership_term_id: word(17) as i64, nonce: session_id, timestamp_ns },
            _ => {
                let correlation_id = word(17);
                if correlation_id == 0 {
                    return Err(SessionDecodeError::ZeroCorrelation);
                }
                Self::Message { session_id, timestamp_ns, correlation_id, payload: &bytes[MESSAGE_HEADER_LENGTH..] }
            }
        })
    }
}

/// A committed entry, as the application applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The application's bytes.
    pub payload: &'a [u8],
    /// The log position the entry ends at.
    pub position: i64,
    /// The remote client's session and message number, when a client sent it through a session (then
    /// it is applied exactly once, and a response written for it goes back to the client).
    pub client: Option<ClientMessage>,
}

/// Which client message an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientMessage {
    /// The session.
    pub session_id: u64,
    /// The message's number in its session (from 1).
    pub correlation_id: u64,
    /// The leader's clock (epoch ns) when it appended the message: the same on every member.
    pub timestamp_ns: i64,
}

/// The rules of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// Sessions open at once, at most.
    pub max_sessions: usize,
    /// A session with no entry for this long (leader's clock) is closed by the next entry after it.
    pub timeout_ns: i64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self { max_sessions: 1024, timeout_ns: 10_000_000_000 }
    }
}

pub use crate::service::CloseReason;

/// Why an entry was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No such session is open (never opened, closed, or timed out): the client opens a new one.
    UnknownSession,
    /// The table holds [`SessionConfig::max_sessions`] sessions.
    TooManySessions,
    /// The session id is open already.
    AlreadyOpen,
    /// A message past a gap: `expected` is the id the session applies next (the client resends from it).
    Gap {
        /// The correlation id the session applies next.
        expected: u64,
    },
}

/// What applying an entry did, for the application and for the client's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied<'a> {
    /// A session opened.
    Opened {
        /// The session.
        session_id: u64,
    },
    /// A message to apply, exactly once.
    Deliver {
        /// Its session.
        session_id: u64,
        /// Its number in the session.
        correlation_id: u64,
        /// The application's bytes.
        payload: &'a [u8],
    },
    /// A resend of a message already applied: the client is told it was committed; nothing is applied.
    Duplicate {
        /// Its session.
        session_id: u64,
        /// Its number in the session.
        correlation_id: u64,
    },
    /// A keep-alive was noted.
    KeptAlive {
        /// The session.
        session_id: u64,
    },
    /// A session closed.
    Closed {
        /// The session.
        session_id: u64,
        /// Why.
        reason: CloseReason,
        /// Its last message applied (0: none): every later one never is.
        applied: u64,
    },
    /// A leader's term began: every session's silence starts again.
    LeaderTerm {
        /// The term.
        leadership_term_id: i64,
    },
    /// The leader's clock was noted (silent sessions closed before it).
    Ticked,
    /// A client's acknowledgement of the pushes of its session (an open one).
    PushAcked {
        /// The session.
        session_id: u64,
        /// The last push it has, in order.
        received: u64,
        /// It asks for the pushes after `received` again.
        resend: bool,
    },
    /// An entry of the leader's service: to apply, with no client.
    Service {
        /// The application's bytes.
        payload: &'a [u8],
    },
    /// The entry was refused.
    Refused {
        /// The session it named.
        session_id: u64,
        /// Why.
        refusal: Refusal,
    },
}

/// One open session: a fixed size whatever its client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Session {
    /// The last correlation id applied (0: none yet).
    applied: u64,
    /// The leader's clock at its last entry.
    last_active_ns: i64,
}

/// What the table counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCounters {
    /// Messages delivered.
    pub delivered: u64,
    /// Resends of messages already applied.
    pub duplicates: u64,
    /// Entries refused.
    pub refused: u64,
    /// Sessions closed for silence.
    pub timed_out: u64,
}

/// Every open session, as built from the log.
#[derive(Clone, Debug, Default)]
pub struct SessionTable {
    config: SessionConfig,
    sessions: BTreeMap<u64, Session>,
    counters: SessionCounters,
    /// No session times out before this (the leader's clock): an entry before it closes none, without
    /// looking at every session. A lower bound of the earliest `last_active_ns + timeout`, exact after
    /// each look.
    expires_at_ns: i64,
}

impl PartialEq for SessionTable {
    /// Tables are equal when their rules, sessions and counts are (whatever their bound on the next
    /// timeout, which is derived from the sessions).
    fn eq(&self, other: &Self) -> bool {
        (self.config, &self.sessions, self.counters) == (other.config, &other.sessions, other.counters)
    }
}

impl Eq for SessionTable {}

/// A snapshot's first 8 bytes: the format and its version. Version 2 is followed by the service's state
/// (cluster time and timers, `crate::service`); version 1, written before there was one, is not.
const SNAPSHOT_MAGIC: u64 = u64::from_le_bytes(*b"qcsess02");
const SNAPSHOT_MAGIC_V1: u64 = u64::from_le_bytes(*b"qcsess01");

impl SessionTable {
    /// An empty table with `config`.
    pub fn new(config: SessionConfig) -> Self {
        Self { config, sessions: BTreeMap::new(), counters: SessionCounters::default(), expires_at_ns: i64::MAX }
    }

    /// Sessions open.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when none is open.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The most sessions open at once.
    pub fn max_sessions(&self) -> usize {
        self.config.max_sessions
    }

    /// The open sessions' ids, in order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.sessions.keys().copied()
    }

    /// The last correlation id session `session_id` applied, if it is open.
    pub fn applied(&self, session_id: u64) -> Option<u64> {
        self.sessions.get(&session_id).map(|s| s.applied)
    }

    /// What the table counted.
    pub fn counters(&self) -> SessionCounters {
        self.counters
    }

    /// No open session times out before this time of the leader's clock (`i64::MAX`: none is open): a
    /// leader appends a tick once its clock passes it. A lower bound, made exact by the tick's look at
    /// every session.
    pub fn next_expiry_ns(&self) -> i64 {
        self.expires_at_ns
    }

    /// Closes the sessions silent for the timeout at the entry's time, calling `closed` for each (in
    /// session id order), then applies `entry`.
    /// `closed` is told of every session that times out: its id and its last message applied.
    ///
    /// A leader term closes none: it restarts every session's silence from its time.
    pub fn apply<'a>(&mut self, entry: &SessionEntry<'a>, mut closed: impl FnMut(u64, u64)) -> Applied<'a> {
        if !matches!(entry, SessionEntry::LeaderTerm { .. }) {
            self.expire(entry.timestamp_ns(), &mut closed);
        }
        let session_id = entry.session_id();
        let refused = |table: &mut Self, refusal| {
            table.counters.refused += 1;
            Applied::Refused { session_id, refusal }
        };
        match *entry {
            SessionEntry::Open { timestamp_ns, .. } => {
                if self.sessions.contains_key(&session_id) {
                    return refused(self, Refusal::AlreadyOpen);
                }
                if self.sessions.len() >= self.config.max_sessions {
                    return refused(self, Refusal::TooManySessions);
                }
                self.sessions.insert(session_id, Session { applied: 0, last_active_ns: timestamp_ns });
                self.expires_at_ns = self.expires_at_ns.min(timestamp_ns.saturating_add(self.config.timeout_ns));
                Applied::Opened { session_id }
            }
            SessionEntry::Message { timestamp_ns, correlation_id, payload, .. } => {
                let Some(session) = self.sessions.get_mut(&session_id) else {
                    return refused(self, Refusal::UnknownSession);
                };
                session.last_active_ns = session.last_active_ns.max(timestamp_ns);
                if correlation_id <= session.applied {
                    self.counters.duplicates += 1;
                    return Applied::Duplicate { session_id, correlation_id };
                }
                if correlation_id != session.applied + 1 {
                    let expected = session.applied + 1;
                    return refused(self, Refusal::Gap { expected });
                }
                session.applied = correlation_id;
                self.counters.delivered += 1;
                Applied::Deliver { session_id, correlation_id, payload }
            }
            SessionEntry::KeepAlive { timestamp_ns, .. } => match self.sessions.get_mut(&session_id) {
                Some(session) => {
                    session.last_active_ns = session.last_active_ns.max(timestamp_ns);
                    Applied::KeptAlive { session_id }
                }
                None => refused(self, Refusal::UnknownSession),
            },
            SessionEntry::Close { .. } => match self.close(session_id) {
                Some(applied) => Applied::Closed { session_id, reason: CloseReason::Client, applied },
                None => refused(self, Refusal::UnknownSession),
            },
            SessionEntry::Evict { .. } => match self.close(session_id) {
                Some(applied) => Applied::Closed { session_id, reason: CloseReason::Evicted, applied },
                None => refused(self, Refusal::UnknownSession),
            },
            SessionEntry::Tick { .. } => Applied::Ticked,
            SessionEntry::Service { payload, .. } => Applied::Service { payload },
            SessionEntry::PushAck { received, resend, timestamp_ns, .. } => match self.sessions.get_mut(&session_id) {
                Some(session) => {
                    session.last_active_ns = session.last_active_ns.max(timestamp_ns);
                    Applied::PushAcked { session_id, received, resend }
                }
                None => refused(self, Refusal::UnknownSession),
            },
            SessionEntry::LeaderTerm { leadership_term_id, timestamp_ns, .. } => {
                for session in self.sessions.values_mut() {
                    session.last_active_ns = session.last_active_ns.max(timestamp_ns);
                }
                self.recompute_expiry();
                Applied::LeaderTerm { leadership_term_id }
            }
        }
    }

    /// Closes session `session_id` (the service closed it, or refused it at its open): its last message
    /// applied, or `None` when it is not open.
    pub fn close(&mut self, session_id: u64) -> Option<u64> {
        // The bound on the next expiry stays a lower bound: a tick there closes none and makes it exact.
        self.sessions.remove(&session_id).map(|session| session.applied)
    }

    /// Closes every session silent for the timeout at `now_ns` (the leader's clock of the entry being
    /// applied), in session id order.
    fn expire(&mut self, now_ns: i64, closed: &mut impl FnMut(u64, u64)) {
        if now_ns < self.expires_at_ns {
            return;
        }
        let timeout = self.config.timeout_ns;
        let before = self.sessions.len();
        self.sessions.retain(|&id, session| {
            let alive = now_ns.saturating_sub(session.last_active_ns) < timeout;
            if !alive {
                closed(id, session.applied);
            }
            alive
        });
        self.counters.timed_out += (before - self.sessions.len()) as u64;
        self.recompute_expiry();
    }

    /// The exact earliest time a session can time out.
    fn recompute_expiry(&mut self) {
        let timeout = self.config.timeout_ns;
        self.expires_at_ns =
            self.sessions.values().map(|s| s.last_active_ns.saturating_add(timeout)).min().unwrap_or(i64::MAX);
    }

    /// Writes the table (for the application's snapshot): its sessions, in id order.
    pub fn write_snapshot(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&SNAPSHOT_MAGIC.to_le_bytes())?;
        out.write_all(&(self.sessions.len() as u64).to_le_bytes())?;
        for (id, session) in &self.sessions {
            out.write_all(&id.to_le_bytes())?;
            out.write_all(&session.applied.to_le_bytes())?;
            out.write_all(&session.last_active_ns.to_le_bytes())?;
        }
        Ok(())
    }

    /// Replaces the sessions with those `input` holds (as [`write_snapshot`](Self::write_snapshot) wrote
    /// them); a count above the configured maximum is refused before anything is read into the table.
    /// Returns the format's version: 2 is followed by the service's state, 1 (older) is not.
    pub fn read_snapshot(&mut self, input: &mut dyn Read) -> io::Result<u8> {
        let mut word = || -> io::Result<u64> {
            let mut bytes = [0u8; 8];
            input.read_exact(&mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let version = match word()? {
            SNAPSHOT_MAGIC => 2,
            SNAPSHOT_MAGIC_V1 => 1,
            other => {
                return Err(invalid(format!(
                    "not a session table snapshot (format {:?}; this build reads qcsess01 and qcsess02)",
                    String::from_utf8_lossy(&other.to_le_bytes())
                )))
            }
        };
        let count = word()?;
        if count > self.config.max_sessions as u64 {
            return Err(invalid(format!("{count} sessions, more than max_sessions {}", self.config.max_sessions)));
        }
        let mut sessions = BTreeMap::new();
        for _ in 0..count {
            let id = word()?;
            let applied = word()?;
            let last_active_ns = word()? as i64;
            sessions.insert(id, Session { applied, last_active_ns });
        }
        self.sessions = sessions;
        self.recompute_expiry();
        Ok(version)
    }
}

#[cfg(test)]
mod tests;
