//! The engine's integration tests' cluster, in process and driven by the test thread: members on loopback
//! ports, nodes in invoker mode (nothing busy-spins), and the harness's [`Driver`], which offers numbered
//! messages whose bytes are derived from their number through the leader and applies them on every node,
//! checking order and content.

use std::time::Duration;

use quorumcast::{Member, Node, NodeBuilder};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::media::channel::ChannelConfig;

use crate::load::drive_until;
use crate::{dump, ScratchDir};

/// `n` members on loopback ports, ids `0..n`.
pub fn members(n: i32) -> Vec<Member> {
    members_on([127, 0, 0, 1].into(), n)
}

/// `n` members on free ports of `ip` (`127.0.0.1` or `::1`).
pub fn members_on(ip: std::net::IpAddr, n: i32) -> Vec<Member> {
    crate::members_on(ip, n).expect("free ports")
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
/// `scratch`, in invoker mode, with [`crate::patient_timers`].
pub fn test_builder(scratch: &ScratchDir, id: i32, members: &[Member], channel: ChannelConfig) -> NodeBuilder {
    NodeBuilder::new(id, members.to_vec())
        .leader(0)
        .timers(crate::patient_timers())
        .data_dir(scratch.join(format!("data-{id}")))
        .directory(scratch.join(format!("node-{id}")))
        .clean_stale(true)
        .channel(channel)
        .threading(ThreadingMode::Invoker)
        .idle_all("backoff")
}

/// Message `seq`: its sequence number and bytes derived from it; sizes vary, some over the MTU.
pub use crate::load::derived_message as message;
/// The tests' driver: numbered messages offered through whichever node leads, every byte checked on every
/// node (see [`Driver::checked`]).
pub use crate::Driver;

/// The value of the counter labelled `label` on `node` (panics when there is none).
pub fn counter(node: &Node, label: &str) -> i64 {
    counter_value(node, label).unwrap_or_else(|| panic!("node {} has no counter `{label}`", node.id()))
}

/// The value of the counter labelled `label` on `node`, if it has one.
pub fn counter_value(node: &Node, label: &str) -> Option<i64> {
    let mut found = None;
    node.counters().reader().for_each(|_, _, l, value| {
        if l == label {
            found = Some(value);
        }
    });
    found
}

/// Invokes `nodes` until member `leader` leads, has committed the start of its term, and every other node
/// follows it; panics after `deadline` with every node's counters.
pub fn elect(nodes: &mut [Node], leader: usize, deadline: Duration) {
    let outcome = drive_until(&format!("member {leader} leads"), deadline, nodes, |nodes| {
        let led = nodes[leader].role() == Role::Leader && nodes[leader].commit_position() > 0;
        let followed = nodes.iter().all(|n| n.leader_id() == Some(nodes[leader].id()));
        if led && followed {
            return Ok(None);
        }
        let mut work = 0;
        for node in nodes.iter_mut() {
            work += node.invoke().map_err(|e| e.to_string())?;
            work += node.poll_committed(64, |_| {});
        }
        Ok(Some(work))
    });
    if let Err(e) = outcome {
        panic!("no leader elected: {e}\n{}", dump(&*nodes));
    }
}
