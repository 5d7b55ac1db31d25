//! An in-process cluster driven by the test thread: members on loopback ports, nodes in invoker mode
//! (nothing busy-spins), numbered messages whose bytes are derived from their number, and a driver that
//! offers through the leader and applies on every node, checking order and content.

use std::time::{Duration, Instant};

use quorumcast::agent::ThreadingMode;
use quorumcast::channel::ChannelConfig;
use quorumcast::consensus::Role;
use quorumcast::node::{Member, Node, NodeBuilder, OfferError};

use super::{dump, ScratchDir};

/// `n` members on loopback ports, ids `0..n`.
pub fn members(n: i32) -> Vec<Member> {
    members_on([127, 0, 0, 1].into(), n)
}

/// `n` members on free ports of `ip` (`127.0.0.1` or `::1`).
pub fn members_on(ip: std::net::IpAddr, n: i32) -> Vec<Member> {
    super::harness::members_on(ip, n).expect("free ports")
}

/// A small-term channel with fast timers, for tests.
pub fn test_channel() -> ChannelConfig {
    ChannelConfig {
        mtu: 1408,
        term_length: 1 << 20,
        receiver_window: 256 * 1024,
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        status_interval: Duration::from_millis(10),
        receiver_timeout: Duration::from_millis(500),
        ..ChannelConfig::default()
    }
}

/// A node of `members` with id `id`, member 0 preferred as the first leader, its directory under
/// `scratch`, in invoker mode, with [`super::harness::patient_timers`].
pub fn test_builder(scratch: &ScratchDir, id: i32, members: &[Member], channel: ChannelConfig) -> NodeBuilder {
    NodeBuilder::new(id, members.to_vec())
        .leader(0)
        .timers(super::harness::patient_timers())
        .data_dir(scratch.join(format!("data-{id}")))
        .directory(scratch.join(format!("node-{id}")))
        .clean_stale(true)
        .channel(channel)
        .threading(ThreadingMode::Invoker)
        .idle_all("backoff")
}

/// Message `seq`: its sequence number and bytes derived from it; sizes vary, some over the MTU.
pub fn message(seq: u64) -> Vec<u8> {
    let len = match seq % 500 {
        0 => 3000,
        1..=50 => 300,
        _ => 8 + (seq % 120) as usize,
    };
    let mut m = seq.to_le_bytes().to_vec();
    m.extend((8..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8));
    m
}

/// Applies committed entries of `node`, checking each is the next in sequence and intact.
pub fn apply(node: &mut Node, next: &mut u64) -> usize {
    node.poll_committed(4096, |entry| {
        let seq = super::harness::seq_of(entry);
        assert_eq!(seq, *next, "node applied out of order (or something foreign)");
        assert!(entry == message(seq).as_slice(), "entry {seq} corrupted");
        *next += 1;
    })
}

/// Drives a cluster of `nodes` by hand: offers numbered messages through the leader (none while there is none) and
/// applies on every node that `active` selects.
pub struct Driver {
    /// Messages offered so far.
    pub offered: u64,
    /// Per node, the next sequence number it will apply (so: how many it applied).
    pub applied: Vec<u64>,
}

impl Driver {
    /// A driver for `n` nodes that have applied nothing.
    pub fn new(n: usize) -> Self {
        Self { offered: 0, applied: vec![0; n] }
    }

    /// One round: offers up to 256 messages (up to `limit`), runs one duty cycle of every active node and
    /// applies what each has committed; returns the work done.
    pub fn round(&mut self, nodes: &mut [Node], active: &[bool], limit: u64) -> usize {
        let leader = nodes.iter().zip(active).find(|(n, &on)| on && n.role() == Role::Leader).map(|(n, _)| n.client());
        let mut work = 0;
        while let (true, Some(client)) = (self.offered < limit, leader.as_ref()) {
            match client.offer(&message(self.offered)) {
                Ok(_) => self.offered += 1,
                Err(OfferError::BackPressured | OfferError::NotLeader { .. }) => break,
                Err(e) => panic!("{e}"),
            }
            work += 1;
            if self.offered % 256 == 0 {
                break;
            }
        }
        for ((node, next), on) in nodes.iter_mut().zip(self.applied.iter_mut()).zip(active) {
            if *on {
                work += node.invoke().unwrap();
                work += apply(node, next);
            }
        }
        work
    }

    /// Runs rounds until every active node has applied `target` messages; panics after `deadline` with
    /// every node's counters.
    pub fn run_to(&mut self, nodes: &mut [Node], active: &[bool], target: u64, deadline: Duration) {
        let until = Instant::now() + deadline;
        while self.applied.iter().zip(active).any(|(&a, &on)| on && a < target) {
            assert!(
                Instant::now() < until,
                "stalled: offered {}, applied {:?}\n{}",
                self.offered,
                self.applied,
                dump(nodes)
            );
            if self.round(nodes, active, target) == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// The value of the counter labelled `label` on `node` (panics when there is none).
pub fn counter(node: &Node, label: &str) -> i64 {
    let mut found = None;
    node.counters().reader().for_each(|_, _, l, value| {
        if l == label {
            found = Some(value);
        }
    });
    found.unwrap_or_else(|| panic!("node {} has no counter `{label}`", node.id()))
}

/// Invokes `nodes` until member `leader` leads, has committed the start of its term, and every other node
/// follows it; panics after `deadline` with every node's counters.
pub fn elect(nodes: &mut [Node], leader: usize, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        let led = nodes[leader].role() == Role::Leader && nodes[leader].commit_position() > 0;
        let followed = nodes.iter().all(|n| n.leader_id() == Some(nodes[leader].id()));
        if led && followed {
            return;
        }
        assert!(Instant::now() < until, "no leader elected\n{}", dump(nodes));
        let mut work = 0;
        for node in nodes.iter_mut() {
            work += node.invoke().unwrap();
            work += node.poll_committed(64, |_| {});
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
}
