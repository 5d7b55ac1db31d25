//! The service's replicated state beside the session table (cluster time and timers), and how the node's
//! reader runs the application's callbacks with it.
//!
//! # Invariants
//!
//! - [`ServiceState`] changes only as entries are applied, in log order, the same on every member.
//! - Cluster time only moves forward: it is the greatest stamp of the entries applied so far.
//! - A callback is never entered while another runs: what a callback asks for (a session closed) takes
//!   effect after it returns, and its consequences (that session's close callback) run after that.

use std::io::{self, Read, Write};

use super::{CloseReason, Cluster, ClusterTime, Pushes, SessionRefused, TimerTable};
use crate::agent::clock::NanoClock;
use crate::client::session::{Entry, SessionEntry, SessionTable};
use crate::cluster::append::INGRESS_SESSION_ENTRY;
use crate::cluster::consensus_core::Role;
use crate::node::LocalOfferError;
use crate::shm::ring_buffer::{ManyToOneRingBuffer, RingError};
use crate::storage::snapshot::StateMachine;

/// What the application's side of the read path is called with: the [`StateMachine`]'s callbacks, or a
/// handler of entries alone (`Node::poll_service`).
pub(crate) trait Service {
    /// A committed entry to apply (a client's message, the service's own entry, or a plain one).
    fn message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>);
    /// A session opened; an error refuses it.
    fn session_open(&mut self, _session_id: u64, _cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        Ok(())
    }
    /// A session closed.
    fn session_close(&mut self, _session_id: u64, _reason: CloseReason, _cluster: &mut Cluster<'_>) {}
    /// A timer fired.
    fn timer(&mut self, _correlation_id: u64, _cluster: &mut Cluster<'_>) {}
}

/// A state machine's callbacks, as the read path calls them.
pub(crate) struct Machine<'m, M: ?Sized>(pub(crate) &'m mut M);

impl<M: StateMachine + ?Sized> Service for Machine<'_, M> {
    fn message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        self.0.on_message(entry, cluster);
    }
    fn session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        self.0.on_session_open(session_id, cluster)
    }
    fn session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        self.0.on_session_close(session_id, reason, cluster);
    }
    fn timer(&mut self, correlation_id: u64, cluster: &mut Cluster<'_>) {
        self.0.on_timer(correlation_id, cluster);
    }
}

/// A handler of entries alone, with their responses.
pub(crate) struct Entries<F>(pub(crate) F);

impl<F: FnMut(&Entry<'_>, &mut Vec<u8>)> Service for Entries<F> {
    fn message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        (self.0)(entry, cluster.response());
    }
}

/// Where the leader's service offers its own entries: the node's ingress ring, stamped with the node's
/// clock (the leader's), as the consensus agent appends them.
pub(crate) struct Offers<'a> {
    pub(crate) ring: &'a ManyToOneRingBuffer,
    pub(crate) clock: &'a NanoClock,
    pub(crate) scratch: &'a mut Vec<u8>,
}

impl Offers<'_> {
    pub(crate) fn offer(&mut self, payload: &[u8]) -> Result<(), LocalOfferError> {
        self.scratch.clear();
        SessionEntry::Service { timestamp_ns: self.clock.epoch_ns(), payload }.encode(self.scratch);
        self.ring.write(INGRESS_SESSION_ENTRY, self.scratch).map_err(|e| match e {
            RingError::Full => LocalOfferError::BackPressured,
            _ => LocalOfferError::TooLong,
        })
    }
}

/// Who applies: this member's id and role, and where the service's own entries go (on the leader applying
/// its own term's entries).
pub(crate) struct Applier<'a> {
    pub(crate) member_id: i32,
    pub(crate) role: Role,
    pub(crate) offers: Option<(&'a ManyToOneRingBuffer, &'a NanoClock)>,
}

/// The service's replicated state beside the session table: cluster time, the timers, and the sessions'
/// streams of pushes.
#[derive(Debug)]
pub(crate) struct ServiceState {
    pub(crate) timers: TimerTable,
    pub(crate) pushes: Pushes,
    /// The pushes the last callbacks made (session, number), to send from the live leader.
    pub(crate) pushed: Vec<(u64, u64)>,
    /// Cluster time (ns since the epoch): the greatest stamp applied.
    time_ns: i64,
    /// The timers due at the entry being applied (scratch, kept to reuse its memory).
    due: Vec<(i64, u64)>,
    /// Sessions a callback asked to close, and why.
    pub(crate) closes: Vec<(u64, CloseReason)>,
    /// The response a callback writes (a client message's goes back to its client).
    pub(crate) response: Vec<u8>,
    offer_scratch: Vec<u8>,
}

/// A service state snapshot's first 8 bytes: the format and its version. Version 2 adds the streams of
/// pushes after the timers; version 1 has none.
const SNAPSHOT_MAGIC: u64 = u64::from_le_bytes(*b"qcserv02");
const SNAPSHOT_MAGIC_V1: u64 = u64::from_le_bytes(*b"qcserv01");

/// The limits of the service's state (`[service]`, and what a push may be).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServiceLimits {
    pub(crate) max_timers: usize,
    /// The longest response and the longest push (`[service] max_response_length`).
    pub(crate) max_response_length: usize,
    pub(crate) max_push_backlog: usize,
}

impl ServiceState {
    pub(crate) fn new(limits: ServiceLimits) -> Self {
        Self {
            timers: TimerTable::new(limits.max_timers),
            pushes: Pushes::new(limits.max_response_length, limits.max_push_backlog),
            pushed: Vec::new(),
            time_ns: i64::MIN,
            due: Vec::new(),
            closes: Vec::new(),
            response: Vec::new(),
            offer_scratch: Vec::new(),
        }
    }

    /// Cluster time now.
    pub(crate) fn time(&self) -> ClusterTime {
        ClusterTime::from_nanos(self.time_ns.max(0))
    }

    /// Cluster time as applied: the greatest stamp (`i64::MIN` before any).
    pub(crate) fn applied_time_ns(&self) -> i64 {
        self.time_ns
    }

    /// An entry stamped `timestamp_ns` is applied: cluster time moves to it, if it is later.
    pub(crate) fn stamp(&mut self, timestamp_ns: i64) {
        self.time_ns = self.time_ns.max(timestamp_ns);
    }

    /// The earliest timer's deadline (ns), `i64::MAX` when none is scheduled.
    pub(crate) fn next_deadline(&self) -> i64 {
        self.timers.next_deadline()
    }

    /// Runs `call` with the cluster as a callback sees it at `position`; its response is left in
    /// `self.response` and the sessions it closes in `self.closes`.
    pub(crate) fn call<R>(
        &mut self,
        position: i64,
        applier: &Applier<'_>,
        sessions: &SessionTable,
        call: impl FnOnce(&mut Cluster<'_>) -> R,
    ) -> R {
        self.response.clear();
        let now = self.time();
        let Self { timers, response, closes, offer_scratch, pushes, pushed, .. } = self;
        let offers = applier.offers.map(|(ring, clock)| Offers { ring, clock, scratch: offer_scratch });
        let mut cluster = Cluster {
            now,
            position,
            role: applier.role,
            member_id: applier.member_id,
            timers,
            response,
            closes,
            sessions,
            pushes,
            pushed,
            offers,
        };
        call(&mut cluster)
    }

    /// Fires the timers due at cluster time now, in deadline then id order, each through `fire` (which runs
    /// its callback and then whatever closes it asked for). A timer that a callback scheduled or moved to
    /// a deadline already passed waits for the next stamped entry.
    /// `now_ns` replaces cluster time only for a planted bug (a member's own clock); `None` always otherwise.
    pub(crate) fn fire_due(&mut self, now_ns: Option<i64>, mut fire: impl FnMut(&mut Self, u64)) {
        let now_ns = now_ns.unwrap_or(self.time_ns);
        if self.timers.next_deadline() > now_ns {
            return;
        }
        let mut due = std::mem::take(&mut self.due);
        self.timers.due(now_ns, &mut due);
        for &timer in &due {
            if self.timers.take(timer) {
                fire(self, timer.1);
            }
        }
        self.due = due;
    }

    /// Writes the state (after the session table, before the application's): its format, cluster time,
    /// the timers (`timers` false only for a planted bug: an empty table instead) and the streams of pushes.
    pub(crate) fn write_snapshot(&self, out: &mut dyn Write, timers: bool) -> io::Result<()> {
        out.write_all(&SNAPSHOT_MAGIC.to_le_bytes())?;
        out.write_all(&self.time_ns.to_le_bytes())?;
        match timers {
            true => self.timers.write_snapshot(out)?,
            false => TimerTable::new(self.timers.limit()).write_snapshot(out)?,
        }
        self.pushes.write_snapshot(out)
    }

    /// Reads the state as [`write_snapshot`](Self::write_snapshot) wrote it; an unknown format is refused
    /// naming what it found.
    pub(crate) fn read_snapshot(&mut self, input: &mut dyn Read, max_sessions: usize) -> io::Result<()> {
        let mut word = [0u8; 8];
        input.read_exact(&mut word)?;
        let version = match u64::from_le_bytes(word) {
            SNAPSHOT_MAGIC => 2,
            SNAPSHOT_MAGIC_V1 => 1,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the service state of a snapshot is in format {:?}; this build reads qcserv01 and qcserv02",
                        String::from_utf8_lossy(&word)
                    ),
                ))
            }
        };
        input.read_exact(&mut word)?;
        self.time_ns = i64::from_le_bytes(word);
        self.timers.read_snapshot(input)?;
        if version >= 2 {
            self.pushes.read_snapshot(input, max_sessions)?;
        }
        Ok(())
    }
}
