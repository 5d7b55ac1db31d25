//! The simulated service's side beyond applying entries (with [`super::SimConfig::service`]): replicated
//! timers scheduled, moved and cancelled from client messages, from the local client's entries and from
//! timers; entries of the service's own offered from timers; sessions refused at their open by a
//! deterministic rule and closed by the service; and what every callback saw, checked as it happens and
//! folded into digests the simulator compares across members.
//!
//! Every action is a function of the replicated state and the callback's arguments (an entry's digest,
//! a timer's id, a session's id, [`Cluster::time`] and [`Cluster::position`]): never of a member's
//! clock, role or id, so every member does the same at the same entry.
//!
//! # What it checks at each callback (a [`ServiceSim::violation`] when broken)
//!
//! - The node holds exactly the timers this service scheduled and neither saw fire nor cancelled
//!   ([`Cluster::timers_scheduled`] against its own table): a timer lost (from a snapshot, say), or one
//!   the node kept after firing or cancelling it, shows at the next callback.
//! - A timer fires only while scheduled (never twice, never after its cancel), and never before its
//!   deadline in cluster time.
//! - Never late, in the log: at the callback of a stamped entry (a client's message, an entry of the
//!   service's own, a session's open), every timer scheduled at an earlier entry with a deadline at or
//!   before the entry's cluster time has fired (a timer fires at the first stamped entry at or past its
//!   deadline). Entries the local client offered carry no stamp and are not checked.
//! - A session closes only while open, and opens only once; a refused one is never told closed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};

use quorumcast::{CloseReason, Cluster, ClusterTime, Entry, SessionRefused};

use super::check::digest;
use super::state::fold;

/// The first bytes of an entry the service offered itself: then the position of the entry whose callback
/// offered it and the timer's id (so each is unique in the log).
pub const OWN_ENTRY: &[u8; 4] = b"QCSV";

/// The seed space of the service's own entries in the checker (above every client's).
pub const OWN_SEQ: u64 = 1 << 63;

/// The checker's number for an entry the service offered itself.
pub fn own_seq(payload: &[u8]) -> u64 {
    OWN_SEQ | (digest(payload) >> 1)
}

/// The code of a refused session's open.
pub const REFUSED_CODE: u32 = 7;

/// Whether the service refuses session `session_id` at its open: one in four, by its id.
pub fn refuses(session_id: u64) -> bool {
    mix(session_id ^ 0x5E55_0000) % 4 == 0
}

/// A timer this service scheduled and has not seen fire nor cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    deadline_ns: i64,
    /// The position of the entry whose callback scheduled (or last moved) it.
    at: i64,
    /// Cluster time then.
    at_ns: i64,
    /// The session whose message scheduled it (0: none); its close cancels it.
    owner: u64,
    /// Whether that entry was stamped (its cluster time is when the leader appended it).
    stamped: bool,
}

/// What one entry's callbacks left: the digests after them, and how late each timer fired at it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAt {
    /// The position of the entry.
    pub position: i64,
    /// The chain of every callback so far (its kind, position, cluster time and arguments).
    pub callbacks: u64,
    /// The chain of the session opens (refused or not) and closes so far.
    pub sessions: u64,
    /// The digest of the whole replicated state of the service (what a snapshot holds).
    pub state: u64,
    /// For each timer fired at it, scheduled at a stamped entry: the firing entry's cluster time less the
    /// later of its deadline and the cluster time of the entry that scheduled it, ns.
    pub lateness_ns: Vec<i64>,
}

/// The service's replicated state, and what the simulator takes from it.
#[derive(Clone, Debug, Default)]
pub struct ServiceSim {
    timers: BTreeMap<u64, Pending>,
    sessions: BTreeSet<u64>,
    callbacks: u64,
    session_events: u64,
    /// Timers scheduled at the entry being applied (their ids are its position and this count).
    made_at: (i64, u64),
    // Not replicated: taken by the simulator.
    /// What each entry's callbacks left, since the simulator last took them.
    pub reports: Vec<ServiceAt>,
    /// Entries this service offered itself (every member makes the same calls; only the leader's append).
    pub offered: Vec<Vec<u8>>,
    /// The first property broken, since the simulator last looked.
    pub violation: Option<String>,
    /// A snapshot's service state loaded: the position of the last entry with callbacks it holds, and
    /// its digest.
    pub loaded: Option<(i64, u64)>,
    /// What it did, for the report.
    pub counts: ServiceCounts,
}

/// What the service did on one member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceCounts {
    /// Timers scheduled (new ones), moved, cancelled, fired.
    pub scheduled: u64,
    #[allow(missing_docs)]
    pub moved: u64,
    #[allow(missing_docs)]
    pub cancelled: u64,
    #[allow(missing_docs)]
    pub fired: u64,
    /// Entries of its own offered (on every member; the leader's are appended).
    pub offered: u64,
    /// Sessions opened, refused at their open, closed (by any reason), closed by the service.
    pub opened: u64,
    #[allow(missing_docs)]
    pub refused: u64,
    #[allow(missing_docs)]
    pub closed: u64,
    #[allow(missing_docs)]
    pub closed_by_service: u64,
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const MS: i64 = 1_000_000;

impl ServiceSim {
    fn fail(&mut self, cluster: &Cluster<'_>, what: String) {
        if self.violation.is_none() {
            self.violation = Some(format!("at {} (cluster time {}): {what}", cluster.position(), cluster.time()));
        }
    }

    /// Every callback starts here: the node's timers are this service's, and the callback is recorded.
    fn enter(&mut self, cluster: &Cluster<'_>, kind: u64, argument: u64) {
        if cluster.timers_scheduled() != self.timers.len() {
            let (held, ours) = (cluster.timers_scheduled(), self.timers.len());
            self.fail(cluster, format!("the node holds {held} timers, the service scheduled {ours}"));
        }
        let record = [kind, cluster.position() as u64, cluster.time().as_nanos() as u64, argument];
        for word in record {
            self.callbacks = fold(self.callbacks, word);
        }
        if self.made_at.0 != cluster.position() {
            self.made_at = (cluster.position(), 0);
        }
    }

    /// Every callback ends here: what the entry's callbacks left so far is reported.
    fn leave(&mut self, cluster: &Cluster<'_>, lateness_ns: Option<i64>) {
        let state = self.state_digest();
        let (callbacks, sessions) = (self.callbacks, self.session_events);
        match self.reports.last_mut().filter(|r| r.position == cluster.position()) {
            Some(report) => {
                (report.callbacks, report.sessions, report.state) = (callbacks, sessions, state);
                report.lateness_ns.extend(lateness_ns);
            }
            None => {
                let lateness_ns = lateness_ns.into_iter().collect();
                let position = cluster.position();
                self.reports.push(ServiceAt { position, callbacks, sessions, state, lateness_ns });
            }
        }
    }

    /// At a stamped entry: every timer scheduled before it and due at its cluster time has fired.
    fn check_not_late(&mut self, cluster: &Cluster<'_>) {
        let now = cluster.time().as_nanos();
        let late = self.timers.iter().find(|(_, p)| p.at < cluster.position() && p.deadline_ns <= now);
        if let Some((&id, &pending)) = late {
            self.fail(
                cluster,
                format!(
                    "timer {id:#x} (deadline {}, scheduled at {}) has not fired at a stamped entry past its deadline",
                    ClusterTime::from_nanos(pending.deadline_ns),
                    pending.at
                ),
            );
        }
    }

    fn schedule(&mut self, cluster: &mut Cluster<'_>, delay_ns: i64, owner: u64, stamped: bool) {
        let id = ((cluster.position() as u64) << 8) | self.made_at.1;
        self.made_at.1 += 1;
        self.put(cluster, id, delay_ns, owner, stamped);
        self.counts.scheduled += 1;
    }

    fn put(&mut self, cluster: &mut Cluster<'_>, id: u64, delay_ns: i64, owner: u64, stamped: bool) {
        let now = cluster.time().as_nanos();
        let deadline_ns = now + delay_ns;
        if let Err(e) = cluster.schedule_timer(id, ClusterTime::from_nanos(deadline_ns)) {
            self.fail(cluster, format!("timer {id:#x} refused: {e}"));
            return;
        }
        let pending = Pending { deadline_ns, at: cluster.position(), at_ns: now, owner, stamped };
        self.timers.insert(id, pending);
    }

    /// A scheduled timer chosen by `key` (the first at or after it, else the first), if any.
    fn pick(&self, key: u64) -> Option<u64> {
        self.timers.range(key..).next().or_else(|| self.timers.iter().next()).map(|(&id, _)| id)
    }

    fn cancel(&mut self, cluster: &mut Cluster<'_>, id: u64) {
        let ours = self.timers.remove(&id).is_some();
        let node = cluster.cancel_timer(id);
        if ours != node {
            self.fail(cluster, format!("cancel of timer {id:#x}: the node said {node}, the service holds {ours}"));
        }
        self.counts.cancelled += u64::from(ours);
    }

    /// A committed entry (after the application applied it): `hash` is its payload's digest.
    pub fn on_message(&mut self, entry: &Entry<'_>, hash: u64, cluster: &mut Cluster<'_>) {
        let own = entry.client.is_none() && entry.payload.starts_with(OWN_ENTRY);
        let stamped = entry.client.is_some() || own;
        self.enter(cluster, 1, hash);
        if stamped {
            self.check_not_late(cluster);
        }
        let owner = entry.client.map_or(0, |c| c.session_id);
        let action = mix(hash);
        match action % 16 {
            // A new timer: now and then one already due (it fires at the next stamped entry).
            0 => self.schedule(cluster, 0, owner, stamped),
            1..=5 => self.schedule(cluster, ((action >> 8) % 300) as i64 * MS, owner, stamped),
            6 | 7 => {
                if let Some(id) = self.pick(action >> 16) {
                    self.put(cluster, id, ((action >> 32) % 200) as i64 * MS, owner, stamped);
                    self.counts.moved += 1;
                }
            }
            8 | 9 => {
                if let Some(id) = self.pick(action >> 16) {
                    self.cancel(cluster, id);
                }
            }
            // A timer that is not scheduled: the node must say so.
            10 => self.cancel(cluster, u64::MAX - (action >> 40)),
            // Now and then the service closes the session whose message this is.
            11 if owner != 0 && (action >> 8) % 16 == 0 => {
                cluster.close_session(owner);
                self.counts.closed_by_service += 1;
            }
            _ => {}
        }
        self.leave(cluster, None);
    }

    /// Timer `id` fired.
    pub fn on_timer(&mut self, id: u64, cluster: &mut Cluster<'_>) {
        let Some(pending) = self.timers.remove(&id) else {
            self.enter(cluster, 2, id);
            self.fail(cluster, format!("timer {id:#x} fired while not scheduled (twice, after its cancel, or never)"));
            self.leave(cluster, None);
            return;
        };
        self.enter(cluster, 2, id);
        let now = cluster.time().as_nanos();
        if now < pending.deadline_ns {
            let deadline = ClusterTime::from_nanos(pending.deadline_ns);
            self.fail(cluster, format!("timer {id:#x} fired before its deadline {deadline}"));
        }
        self.counts.fired += 1;
        let lateness = pending.stamped.then(|| now - pending.deadline_ns.max(pending.at_ns));
        let action = mix(id);
        match action % 8 {
            // A timer's callback schedules another, or offers an entry of the service's own.
            0 | 1 => self.schedule(cluster, ((action >> 8) % 100) as i64 * MS, pending.owner, true),
            2 | 3 => {
                let mut payload = OWN_ENTRY.to_vec();
                payload.extend_from_slice(&cluster.position().to_le_bytes());
                payload.extend_from_slice(&id.to_le_bytes());
                // The replicated state does not depend on the answer (only the leader's is appended).
                let _ = cluster.offer(&payload);
                self.offered.push(payload);
                self.counts.offered += 1;
            }
            4 if pending.owner != 0 && (action >> 8) % 4 == 0 => {
                cluster.close_session(pending.owner);
                self.counts.closed_by_service += 1;
            }
            5 => {
                if let Some(other) = self.pick(action >> 16) {
                    self.cancel(cluster, other);
                }
            }
            _ => {}
        }
        self.leave(cluster, lateness);
    }

    /// Session `session_id` opened: refused by [`refuses`].
    pub fn on_session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        self.enter(cluster, 3, session_id);
        self.check_not_late(cluster);
        let refused = refuses(session_id);
        self.session_events = fold(self.session_events, fold(session_id, 3 + u64::from(refused)));
        self.session_events = fold(self.session_events, cluster.position() as u64);
        let result = if refused {
            self.counts.refused += 1;
            Err(SessionRefused { code: REFUSED_CODE })
        } else if !self.sessions.insert(session_id) {
            self.fail(cluster, format!("session {session_id:#x} opened while open"));
            Ok(())
        } else {
            self.counts.opened += 1;
            Ok(())
        };
        self.leave(cluster, None);
        result
    }

    /// Session `session_id` closed: its timers are cancelled.
    pub fn on_session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        let code = match reason {
            CloseReason::Client => 1,
            CloseReason::Timeout => 2,
            CloseReason::Evicted => 3,
            CloseReason::Service => 4,
            CloseReason::Backlog => 5,
        };
        self.enter(cluster, 4, session_id ^ code);
        self.session_events = fold(self.session_events, fold(session_id, 8 + code));
        self.session_events = fold(self.session_events, cluster.position() as u64);
        if !self.sessions.remove(&session_id) {
            self.fail(cluster, format!("session {session_id:#x} closed ({reason:?}) while not open"));
        }
        self.counts.closed += 1;
        let owned: Vec<u64> = self.timers.iter().filter(|(_, p)| p.owner == session_id).map(|(&id, _)| id).collect();
        for id in owned {
            self.cancel(cluster, id);
        }
        self.leave(cluster, None);
    }

    /// The digest of the replicated state (what [`write`](Self::write) writes).
    pub fn state_digest(&self) -> u64 {
        let mut bytes = Vec::with_capacity(64 + 48 * self.timers.len() + 8 * self.sessions.len());
        self.write(&mut bytes).expect("a Vec takes every write");
        digest(&bytes)
    }

    /// Writes the replicated state.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut words = vec![self.callbacks, self.session_events, self.made_at.0 as u64, self.made_at.1];
        words.push(self.timers.len() as u64);
        for (&id, p) in &self.timers {
            let stamped = u64::from(p.stamped);
            words.extend([id, p.deadline_ns as u64, p.at as u64, p.at_ns as u64, p.owner, stamped]);
        }
        words.push(self.sessions.len() as u64);
        words.extend(self.sessions.iter().copied());
        for word in words {
            out.write_all(&word.to_le_bytes())?;
        }
        Ok(())
    }

    /// Replaces the replicated state with what `input` holds (as [`write`](Self::write) wrote it).
    pub fn read(&mut self, input: &mut dyn Read) -> io::Result<()> {
        let mut word = || -> io::Result<u64> {
            let mut bytes = [0; 8];
            input.read_exact(&mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        self.callbacks = word()?;
        self.session_events = word()?;
        self.made_at = (word()? as i64, word()?);
        self.timers.clear();
        for _ in 0..word()? {
            let id = word()?;
            let (deadline_ns, at, at_ns, owner) = (word()? as i64, word()? as i64, word()? as i64, word()?);
            let stamped = word()? != 0;
            self.timers.insert(id, Pending { deadline_ns, at, at_ns, owner, stamped });
        }
        self.sessions.clear();
        for _ in 0..word()? {
            self.sessions.insert(word()?);
        }
        self.loaded = Some((self.made_at.0, self.state_digest()));
        Ok(())
    }
}
