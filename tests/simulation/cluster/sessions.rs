//! Remote clients' sessions in the simulation (`SimConfig::sessions`): clients open a session and send
//! numbered messages at whichever member leads, resend everything unacknowledged when the leader they
//! use changes (their messages may have been cut with an old leader's uncommitted log, or committed
//! after all), and are acknowledged only by a leader that applied the message. Every member applies
//! every session entry of its committed log to the product's own `SessionTable`; the checker holds each
//! member to delivering each session's messages exactly once and in order, whatever the resends, the
//! truncations, the crashes and the power losses (a member whose application lost entries rebuilds its
//! table from its log).

use std::collections::{BTreeMap, BTreeSet};

use quorumcast::unstable::session::{Applied, Refusal, SessionConfig, SessionEntry, SessionTable};
use quorumcast_consensus::consensus_core::Role;

use super::super::checker::Check;
use super::super::log::Entry;
use super::Simulation;

/// Clients of a run with sessions.
const CLIENTS: u64 = 3;
/// Messages a client has in flight at most.
const WINDOW: usize = 16;

/// One simulated client.
#[derive(Debug, Default)]
pub(super) struct SimClient {
    session: u64,
    opened: bool,
    /// The member (by index) and term it last appended at: a change means resending.
    target: Option<(usize, i64)>,
    next: u64,
    unacked: BTreeSet<u64>,
    resend: bool,
}

/// A member's application of session entries: the product's table, how many log entries it has
/// applied, and the last message delivered per session.
#[derive(Debug)]
pub(super) struct SessionState {
    table: SessionTable,
    applied: usize,
    delivered: BTreeMap<u64, u64>,
}

impl Default for SessionState {
    fn default() -> Self {
        // No timeouts: the simulation's clocks are the consensus's, not the leader's wall clock.
        let config = SessionConfig { max_sessions: CLIENTS as usize, timeout_ns: i64::MAX };
        Self { table: SessionTable::new(config), applied: 0, delivered: BTreeMap::new() }
    }
}

/// The clients of a run.
pub(super) fn clients() -> Vec<SimClient> {
    (1..=CLIENTS).map(|session| SimClient { session, next: 1, ..SimClient::default() }).collect()
}

impl Simulation {
    /// Each client, half the steps, appends at a member that leads and has started its term: its open
    /// until it is acknowledged, then its unacknowledged messages again if the leader changed, then a
    /// new message when its window allows.
    pub(super) fn session_clients(&mut self) -> Check {
        for client in 0..self.sim_clients.len() {
            if self.clients.below(2) == 0 {
                continue;
            }
            let Some(index) = self.started_leader() else {
                return Ok(());
            };
            let term = self.nodes[index].core.as_ref().map_or(0, |c| c.leadership_term_id());
            let c = &mut self.sim_clients[client];
            if c.target != Some((index, term)) {
                c.target = Some((index, term));
                c.resend = true;
            }
            let session = c.session;
            let mut appends = Vec::new();
            if !c.opened {
                if c.resend {
                    appends.push(0);
                }
            } else {
                if c.resend {
                    appends.extend(c.unacked.iter().copied());
                }
                if c.unacked.len() < WINDOW {
                    c.unacked.insert(c.next);
                    appends.push(c.next);
                    c.next += 1;
                }
            }
            c.resend = false;
            for correlation in appends {
                let length = if correlation == 0 { 32 } else { self.clients.between(1, 8) as i64 * 32 };
                let entry = Entry { session, correlation, ..Entry::plain(term, self.next_entry_id, length, true) };
                self.nodes[index].log.push(entry);
                self.next_entry_id += 1;
                self.written(index, term)?;
            }
        }
        Ok(())
    }

    /// Member `index` has applied its log's first `to` entries: its session table applies those it has
    /// not (rebuilt from the log first when its application went back, after a power loss), and, when it
    /// leads, acknowledges to the clients what the table answered.
    pub(super) fn apply_sessions(&mut self, index: usize, to: usize) -> Check {
        if !self.config.sessions {
            return Ok(());
        }
        if self.nodes[index].sessions.applied > to {
            self.nodes[index].sessions = SessionState::default();
        }
        let leads = self.nodes[index].core.as_ref().is_some_and(|c| c.role() == Role::Leader);
        while self.nodes[index].sessions.applied < to {
            let node = &mut self.nodes[index];
            let at = node.sessions.applied;
            let entry = node.log.entries()[at];
            node.sessions.applied += 1;
            if entry.session == 0 {
                continue;
            }
            let session_entry = match entry.correlation {
                0 => SessionEntry::Open { session_id: entry.session, timestamp_ns: 0 },
                id => SessionEntry::Message {
                    session_id: entry.session,
                    timestamp_ns: 0,
                    correlation_id: id,
                    payload: &[],
                },
            };
            let id = node.id;
            let mut applied = node.sessions.table.apply(&session_entry, |closed, _| {
                panic!("member {id}: session {closed} timed out without a timeout");
            });
            if let (true, Applied::Duplicate { session_id, correlation_id }) =
                (self.config.sessions_without_table, applied)
            {
                applied = Applied::Deliver { session_id, correlation_id, payload: &[] };
            }
            let client = &mut self.sim_clients[entry.session as usize - 1];
            match applied {
                Applied::Deliver { session_id, correlation_id, .. } => {
                    let last = node.sessions.delivered.entry(session_id).or_insert(0);
                    if correlation_id != *last + 1 {
                        return Err(format!(
                            "member {id}: session {session_id} delivered message {correlation_id} after {last}"
                        ));
                    }
                    *last = correlation_id;
                    self.summary.session_delivered += 1;
                    if leads {
                        client.unacked.retain(|&c| c > correlation_id);
                    }
                }
                Applied::Duplicate { correlation_id, .. } => {
                    self.summary.session_duplicates += 1;
                    if leads {
                        client.unacked.retain(|&c| c > correlation_id);
                    }
                }
                Applied::Opened { .. } | Applied::Refused { refusal: Refusal::AlreadyOpen, .. } => {
                    if leads {
                        client.opened = true;
                    }
                }
                Applied::Refused { refusal: Refusal::Gap { expected }, .. } => {
                    if leads {
                        client.unacked.retain(|&c| c >= expected);
                        client.resend = true;
                    }
                }
                other => return Err(format!("member {id}: a session entry of {entry:?} answered {other:?}")),
            }
        }
        Ok(())
    }

    /// Every message a client was told was applied is delivered, once, on every member that has applied
    /// as far as the entry that delivered it: checked at the end, from the members' tables.
    pub(super) fn check_sessions(&self) -> Check {
        if !self.config.sessions {
            return Ok(());
        }
        for client in &self.sim_clients {
            let acked = client.next - 1 - client.unacked.len() as u64;
            let most = self.nodes.iter().map(|n| n.sessions.delivered.get(&client.session).copied().unwrap_or(0)).max();
            if client.opened && most < Some(acked) {
                return Err(format!(
                    "session {}: {acked} messages acknowledged, but no member delivered more than {most:?}",
                    client.session
                ));
            }
        }
        Ok(())
    }
}
