//! The load an in-process cluster carries, whoever drives it: numbered messages offered through the
//! leader, applied in sequence on every node and checked, and the bounded loop that drives a cluster
//! until something holds.
//!
//! The sweep's and the benches' measuring cluster (`quorumcast_tools::sweep::cluster::LoadCluster`, which
//! places the nodes' threads) and the engine's integration tests (which start, stop and restart nodes
//! themselves) drive their nodes through the one [`Driver`].

use std::time::{Duration, Instant};

use quorumcast::{LocalClient, LocalOfferError, Node};
use quorumcast_consensus::consensus_core::Role;

use crate::{fill_numbered, number, seq_of};

/// The messages a [`Driver`] offers. Every message starts with its sequence number (see [`number`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Messages {
    /// `size` bytes each (at least 8), the rest of the bytes left as they are: what the benches measure.
    Fixed(usize),
    /// Sizes and bytes derived from the number ([`derived_message`]): some over the MTU, every byte
    /// checked when applied. What the tests offer.
    Derived,
}

impl Messages {
    /// Writes message `seq` into `buffer`.
    #[inline]
    pub fn write(self, seq: u64, buffer: &mut Vec<u8>) {
        match self {
            Self::Fixed(size) => {
                if buffer.len() != size {
                    buffer.resize(size, 0x5A);
                }
                number(buffer, seq);
            }
            Self::Derived => {
                buffer.resize(derived_length(seq), 0);
                fill_numbered(buffer, seq);
            }
        }
    }

    /// Whether `entry` is message `seq` as [`write`](Self::write) wrote it.
    pub fn is_intact(self, seq: u64, entry: &[u8]) -> bool {
        match self {
            Self::Fixed(size) => entry.len() == size && seq_of(entry) == seq,
            Self::Derived => entry.len() == derived_length(seq) && entry == derived_message(seq).as_slice(),
        }
    }
}

/// The length of [`Messages::Derived`] message `seq`: mostly 8 to 127 bytes, one in ten of 300, and one in
/// 500 of 3,000 (fragmented at any MTU the tests use).
fn derived_length(seq: u64) -> usize {
    match seq % 500 {
        0 => 3000,
        1..=50 => 300,
        _ => 8 + (seq % 120) as usize,
    }
}

/// [`Messages::Derived`] message `seq`.
pub fn derived_message(seq: u64) -> Vec<u8> {
    let mut message = Vec::new();
    Messages::Derived.write(seq, &mut message);
    message
}

/// Applies one node's committed numbered messages and counts those out of sequence (every node of a
/// correct cluster applies `0, 1, 2, ...`) and, when it checks them, those whose bytes are not the
/// message's. Messages of remote clients (sent through a session, see `quorumcast::client`) are
/// numbered by their client, not by the harness: they are counted apart and leave the sequence alone, so a
/// harness can measure its own load beside a client process's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Applier {
    next: u64,
    out_of_order: u64,
    corrupted: u64,
    client_messages: u64,
    /// The messages to check each entry against; `None` checks only the sequence.
    check: Option<Messages>,
}

impl Applier {
    /// An applier that checks every entry's bytes against `messages` as well as its number.
    pub fn checking(messages: Messages) -> Self {
        Self { check: Some(messages), ..Self::default() }
    }

    /// This applier, expecting message `next` next: for a node that replays its log from the start again
    /// (restarted), or one that joins where the others are.
    pub fn resuming(self, next: u64) -> Self {
        Self { next, ..self }
    }

    /// Applies up to `limit` committed entries of `node` ([`Node::poll_service`]), calling `on_apply`
    /// with the number of each of the harness's own; returns how many entries it applied (remote clients'
    /// included: they are work too). A client's message is answered with its commit and no response.
    #[inline]
    pub fn poll(&mut self, node: &mut Node, limit: usize, mut on_apply: impl FnMut(u64)) -> usize {
        let Self { next, out_of_order, corrupted, client_messages, check } = self;
        node.poll_service(limit, |entry, _response| {
            if entry.client.is_some() {
                *client_messages += 1;
                return;
            }
            let seq = seq_of(entry.payload);
            if seq != *next {
                *out_of_order += 1;
            }
            if check.is_some_and(|messages| !messages.is_intact(seq, entry.payload)) {
                *corrupted += 1;
            }
            *next = seq.wrapping_add(1);
            on_apply(seq);
        })
    }

    /// Remote clients' messages applied so far (not in [`applied`](Self::applied)).
    pub fn client_messages(&self) -> u64 {
        self.client_messages
    }

    /// The number of the next entry expected: how many were applied, when all came in sequence.
    pub fn applied(&self) -> u64 {
        self.next
    }

    /// Entries applied out of sequence so far (a correct cluster has none).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Entries whose bytes were not their message's (checked only by an applier made with
    /// [`checking`](Self::checking); a correct cluster has none).
    pub fn corrupted(&self) -> u64 {
        self.corrupted
    }

    /// Entries applied out of sequence or corrupted.
    pub fn bad_entries(&self) -> u64 {
        self.out_of_order + self.corrupted
    }
}

/// Offers numbered messages through a leader and applies them on every node, counting each node's
/// progress. It holds no node: its caller starts, stops and restarts them, and hands them in by index
/// (node `i` is applied by applier `i`).
///
/// A strict driver (see [`checked`](Self::checked)) panics at the first entry out of sequence or
/// corrupted, naming the node; a measuring one counts them for its caller to report.
#[derive(Debug)]
pub struct Driver {
    messages: Messages,
    buffer: Vec<u8>,
    offered: u64,
    appliers: Vec<Applier>,
    strict: bool,
}

/// The most messages [`Driver::round`] offers before running the nodes.
const OFFERS_PER_ROUND: u64 = 256;

impl Driver {
    /// A driver of `nodes` nodes offering `messages`, counting what is applied out of sequence.
    pub fn new(nodes: usize, messages: Messages) -> Self {
        let buffer = Vec::with_capacity(match messages {
            Messages::Fixed(size) => size,
            Messages::Derived => 3000,
        });
        Self { messages, buffer, offered: 0, appliers: vec![Applier::default(); nodes], strict: false }
    }

    /// The tests' driver: [`Messages::Derived`], every byte checked, a panic at the first bad entry.
    pub fn checked(nodes: usize) -> Self {
        let applier = Applier::checking(Messages::Derived);
        Self { appliers: vec![applier; nodes], strict: true, ..Self::new(nodes, Messages::Derived) }
    }

    /// Messages offered so far: the number of the next one.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// Offers go on from message `next` (after a leader change: what the new leader holds decides).
    pub fn offer_from(&mut self, next: u64) {
        self.offered = next;
    }

    /// Entries node `i` applied: the number of the next it expects.
    pub fn applied(&self, i: usize) -> u64 {
        self.appliers[i].applied()
    }

    /// Entries each node applied.
    pub fn applied_all(&self) -> Vec<u64> {
        self.appliers.iter().map(Applier::applied).collect()
    }

    /// Node `i` expects message `next` next (a node restarted from nothing replays from 0).
    pub fn resume(&mut self, i: usize, next: u64) {
        self.appliers[i] = self.appliers[i].resuming(next);
    }

    /// Node `i`'s applier.
    pub fn applier(&self, i: usize) -> &Applier {
        &self.appliers[i]
    }

    /// Entries applied out of sequence or corrupted, over every node.
    pub fn bad_entries(&self) -> u64 {
        self.appliers.iter().map(Applier::bad_entries).sum()
    }

    /// Offers the next message through `client`: `Ok(false)` when back-pressured (nothing offered).
    #[inline]
    pub fn offer(&mut self, client: &LocalClient) -> Result<bool, LocalOfferError> {
        self.messages.write(self.offered, &mut self.buffer);
        match client.offer(&self.buffer) {
            Ok(_) => {
                self.offered += 1;
                Ok(true)
            }
            Err(LocalOfferError::BackPressured) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Applies up to `limit` committed entries of `node` as node `i`, `on_apply(seq)` for each; returns
    /// how many it applied.
    #[inline]
    pub fn apply(&mut self, i: usize, node: &mut Node, limit: usize, on_apply: impl FnMut(u64)) -> usize {
        let applier = &mut self.appliers[i];
        let bad = applier.bad_entries();
        let applied = applier.poll(node, limit, on_apply);
        if self.strict && applier.bad_entries() > bad {
            panic!(
                "node {} applied an entry out of sequence or corrupted (next expected {}, offered {})",
                node.id(),
                applier.applied(),
                self.offered
            );
        }
        applied
    }

    /// One round over the nodes `live` gives (each with its index): offers up to 256 messages (up to
    /// `limit` in all) through whichever of them leads, then runs one duty cycle of each and applies what
    /// it has committed. Returns the work done.
    pub fn round_of(&mut self, live: &mut [(usize, &mut Node)], limit: u64) -> usize {
        let client = live.iter().find(|(_, n)| n.role() == Role::Leader).map(|(_, n)| n.client());
        let mut work = 0;
        if let Some(client) = client {
            while self.offered < limit {
                match self.offer(&client) {
                    Ok(true) => work += 1,
                    Ok(false) | Err(LocalOfferError::NotLeader { .. }) => break,
                    Err(e) => panic!("{e}"),
                }
                if self.offered % OFFERS_PER_ROUND == 0 {
                    break;
                }
            }
        }
        for (i, node) in live.iter_mut() {
            work += node.invoke().expect("the node's agents run");
            work += self.apply(*i, node, 4096, |_| {});
        }
        work
    }

    /// [`round_of`](Self::round_of) over the nodes `active` selects.
    pub fn round(&mut self, nodes: &mut [Node], active: &[bool], limit: u64) -> usize {
        let mut live: Vec<(usize, &mut Node)> = nodes.iter_mut().enumerate().filter(|(i, _)| active[*i]).collect();
        self.round_of(&mut live, limit)
    }

    /// Runs rounds until every active node applied `target` messages; panics after `deadline` with every
    /// node's counters.
    pub fn run_to(&mut self, nodes: &mut [Node], active: &[bool], target: u64, deadline: Duration) {
        let behind = |d: &Self| d.appliers.iter().zip(active).any(|(a, &on)| on && a.applied() < target);
        let outcome = drive_until("every active node applied the target", deadline, self, |d| {
            if !behind(d) {
                return Ok(None);
            }
            Ok(Some(d.round(nodes, active, target)))
        });
        if let Err(e) = outcome {
            panic!("{e}: offered {}, applied {:?}\n{}", self.offered, self.applied_all(), dump(&*nodes));
        }
    }

    /// [`run_to`](Self::run_to) over the nodes that are there (a stopped node is `None`).
    pub fn run_to_live(&mut self, nodes: &mut [Option<Node>], target: u64, deadline: Duration) {
        let outcome = drive_until("every live node applied the target", deadline, self, |d| {
            let mut live: Vec<(usize, &mut Node)> =
                nodes.iter_mut().enumerate().filter_map(|(i, n)| n.as_mut().map(|n| (i, n))).collect();
            if live.iter().all(|(i, _)| d.applied(*i) >= target) {
                return Ok(None);
            }
            Ok(Some(d.round_of(&mut live, target)))
        });
        if let Err(e) = outcome {
            panic!(
                "{e}: offered {}, applied {:?}\n{}",
                self.offered,
                self.applied_all(),
                dump_each(nodes.iter().flatten())
            );
        }
    }
}

/// Runs `cycle` on `state` until it says it is done (`Ok(None)`); after a cycle that did no work
/// (`Ok(Some(0))`) the thread yields. An error when `cycle` fails, or naming `what` once `deadline` has
/// passed. The one bounded driving loop of the harness: tests, benches and the sweep wait through it.
pub fn drive_until<S: ?Sized>(
    what: &str,
    deadline: Duration,
    state: &mut S,
    mut cycle: impl FnMut(&mut S) -> Result<Option<usize>, String>,
) -> Result<(), String> {
    let until = Instant::now() + deadline;
    while let Some(work) = cycle(state)? {
        if Instant::now() > until {
            return Err(format!("timed out after {deadline:?} waiting until {what}"));
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Every non-zero counter of every node, for a failure message.
pub fn dump(nodes: &[Node]) -> String {
    dump_each(nodes.iter())
}

/// [`dump`] of the nodes `nodes` gives.
pub fn dump_each<'a>(nodes: impl Iterator<Item = &'a Node>) -> String {
    let mut out = String::new();
    for node in nodes {
        out += &format!("node {}:\n", node.id());
        node.counters().reader().for_each(|_, _, label, value| {
            if value != 0 {
                out += &format!("  {label}: {value}\n");
            }
        });
    }
    out
}
