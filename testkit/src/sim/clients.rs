//! Remote clients in the node simulator: real [`ClusterClient`]s, each on a host of its own on the
//! simulated network with the simulation's time, offering numbered messages through sessions across
//! changes of leader, crashes, partitions and restarts, and what they are told checked against the
//! committed order:
//!
//! - a message reported committed is in the order (it was applied, once: the order checker refuses a
//!   message applied twice), and the response is the state the application had after applying it;
//! - each message has at most one outcome (committed, not applied, or unknown);
//! - a message reported not applied never enters the order;
//! - every member applies each session's messages in order, from 1, with none skipped (checked by the
//!   application, [`super::state::SimState`]).
//!
//! A client's messages are numbered in a space of their own (`(client + 1) << 40` on), so the checker
//! tells them from the local client's.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quorumcast::ClientConfig;
use quorumcast::{ClientEnvironment, ClientOfferError, ClusterClient, Event};
use quorumcast_driver::agent::clock::{NanoClock, SimulatedTime};
use quorumcast_driver::media::transport::SharedNetwork;

use super::check::{Checker, Violation};
use super::network::SimNetwork;
use super::prng::Prng;

/// The host of remote client `i`.
pub fn client_host(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 77, 1, i as u8 + 1))
}

/// What a message's outcome was, as its client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Committed,
    NotApplied,
    Unknown,
}

/// One remote client.
struct SimClient {
    client: ClusterClient,
    /// The session its messages are numbered in.
    session: u64,
    /// The next message number of its own space.
    next: u64,
    /// Messages offered and not yet given an outcome: correlation id -> message number.
    in_flight: BTreeMap<u64, u64>,
    /// The outcome of every message that has one, by message number.
    outcomes: BTreeMap<u64, Outcome>,
    /// Messages reported committed.
    committed: u64,
}

/// The remote clients of a simulation.
pub struct SimClients {
    clients: Vec<SimClient>,
    prng: Prng,
}

/// What the clients did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientReport {
    /// Messages reported committed.
    pub committed: u64,
    /// Of them, found applied by a resend (after a loss or a change of leader).
    pub duplicates_found: u64,
    /// Sessions opened (first and again after a close).
    pub sessions: u64,
}

impl SimClients {
    /// `count` clients of the members' client endpoints `endpoints`, on `network`, timed by `time`, their
    /// draws from `seed`.
    pub fn new(
        count: usize,
        endpoints: Vec<(i32, SocketAddr)>,
        network: &SimNetwork,
        time: &Arc<SimulatedTime>,
        seed: u64,
    ) -> Self {
        let clients = (0..count)
            .map(|i| {
                let mut config = ClientConfig::new(endpoints.clone());
                config.bind = Some(SocketAddr::new(client_host(i), 41_000));
                config.window = 64;
                config.leader_timeout = Duration::from_millis(200);
                let env = ClientEnvironment {
                    network: SharedNetwork::new(network.clone()),
                    clock: NanoClock::simulated(Arc::clone(time)),
                    seed: Some(seed ^ (i as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407)),
                };
                let client = ClusterClient::new_in(config, env).expect("a simulated client binds");
                let next = (i as u64 + 1) << 40;
                let (in_flight, outcomes) = (BTreeMap::new(), BTreeMap::new());
                SimClient { client, session: 0, next, in_flight, outcomes, committed: 0 }
            })
            .collect();
        Self { clients, prng: Prng::new(seed ^ 0xC11E_4750) }
    }

    /// One round: every client reads what came and checks it, opens a session when it has none, and now and
    /// then offers a message (registered with the checker as offered).
    pub(super) fn step(&mut self, checker: &mut Checker, report: &mut ClientReport) -> Result<(), Violation> {
        for (i, sim) in self.clients.iter_mut().enumerate() {
            let mut events = Vec::new();
            sim.client.poll(|event| events.push(owned(&event)));
            for event in events {
                on_event(i, sim, event, checker, report)?;
            }
            if sim.client.session_id().is_none() {
                if !sim.client.is_connecting() {
                    sim.client.start_connect();
                }
                continue;
            }
            if self.prng.chance(0.3) {
                let seq = sim.next;
                // A client message is at most a datagram's payload: the derived messages' 3,000-byte ones
                // are offered locally only.
                let mut message = Vec::new();
                crate::load::Messages::Fixed(8 + (seq % 200) as usize).write(seq, &mut message);
                match sim.client.offer(&message) {
                    Ok(correlation) => {
                        checker.offered(seq, &message);
                        sim.in_flight.insert(correlation, seq);
                        sim.next += 1;
                    }
                    Err(ClientOfferError::BackPressured | ClientOfferError::NotConnected) => {}
                    Err(e) => return Err(Violation::Client { client: i, detail: format!("offer refused: {e}") }),
                }
            }
        }
        Ok(())
    }

    /// At the end: no message reported not applied is in the order.
    pub(super) fn finish(&self, checker: &Checker) -> Result<(), Violation> {
        for (i, sim) in self.clients.iter().enumerate() {
            for (&seq, &outcome) in &sim.outcomes {
                if outcome == Outcome::NotApplied && checker.placed(seq).is_some() {
                    let detail = format!("message {seq} was reported not applied and is in the order");
                    return Err(Violation::Client { client: i, detail });
                }
            }
        }
        Ok(())
    }

    /// Messages the clients were told committed.
    pub fn committed(&self) -> u64 {
        self.clients.iter().map(|c| c.committed).sum()
    }
}

/// An event, owned (the response copied).
enum Owned {
    Connected { session: u64 },
    Committed { correlation: u64, position: Option<i64>, response: Vec<u8>, duplicate: bool },
    NotApplied { correlation: u64 },
    Unknown { correlation: u64 },
    Other,
}

fn owned(event: &Event<'_>) -> Owned {
    match *event {
        Event::Connected { session_id, .. } => Owned::Connected { session: session_id },
        Event::Committed { correlation_id, position, response, duplicate } => {
            Owned::Committed { correlation: correlation_id, position, response: response.to_vec(), duplicate }
        }
        Event::NotApplied { correlation_id, .. } => Owned::NotApplied { correlation: correlation_id },
        Event::OutcomeUnknown { correlation_id } => Owned::Unknown { correlation: correlation_id },
        _ => Owned::Other,
    }
}

/// Checks what client `i` was told against the order.
fn on_event(
    i: usize,
    sim: &mut SimClient,
    event: Owned,
    checker: &Checker,
    report: &mut ClientReport,
) -> Result<(), Violation> {
    let violation = |detail: String| Err(Violation::Client { client: i, detail });
    let (correlation, outcome) = match event {
        Owned::Connected { session } => {
            if session != sim.session {
                // A new session numbers its messages from 1 again: what the old one had in flight was
                // reported (not applied) when it closed, or its outcome is unknown.
                for (_, seq) in std::mem::take(&mut sim.in_flight) {
                    sim.outcomes.entry(seq).or_insert(Outcome::Unknown);
                }
                sim.session = session;
                report.sessions += 1;
            }
            return Ok(());
        }
        Owned::Other => return Ok(()),
        Owned::Committed { correlation, position, response, duplicate } => {
            let Some(&seq) = sim.in_flight.get(&correlation) else {
                return violation(format!("message {correlation} reported committed, which it has no outcome to give"));
            };
            let Some(placed) = checker.placed(seq) else {
                return violation(format!("message {correlation} ({seq}) reported committed is not in the order"));
            };
            if let Some(position) = position.filter(|_| !duplicate) {
                if position != placed {
                    return violation(format!(
                        "message {correlation} reported at {position}, the order has it at {placed}"
                    ));
                }
            }
            if response.len() == 8 {
                let said = u64::from_le_bytes(response[..].try_into().expect("8 bytes"));
                if checker.state_at(placed) != Some(said) {
                    return violation(format!("the response to message {correlation} is not the state after it"));
                }
            }
            sim.committed += 1;
            report.committed += 1;
            report.duplicates_found += u64::from(duplicate);
            (correlation, Outcome::Committed)
        }
        Owned::NotApplied { correlation } => (correlation, Outcome::NotApplied),
        Owned::Unknown { correlation } => (correlation, Outcome::Unknown),
    };
    match sim.in_flight.remove(&correlation) {
        Some(seq) => {
            if sim.outcomes.insert(seq, outcome).is_some() {
                return violation(format!("message {correlation} ({seq}) was given a second outcome"));
            }
            Ok(())
        }
        None => violation(format!("message {correlation} given an outcome ({outcome:?}) it had already")),
    }
}
