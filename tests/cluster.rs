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

mod support;
use support::dump;

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
    let fault = |seed| {
        if faults {
            FaultConfig { drop: 0.05, duplicate: 0.01, reorder: 0.01, seed }
        } else {
            FaultConfig::default()
        }
    };
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
        assert!(Instant::now() < deadline, "stalled: offered {offered}, applied {applied:?}\n{}", dump(nodes));
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

#[test]
fn two_nodes_commit_while_a_follower_is_down_and_it_catches_up_on_restart() {
    let members = members(3);
    let mut nodes: Vec<Node> = (0..3).map(|id| builder("restart", id, &members, false).start().unwrap()).collect();
    run(&mut nodes, 20_000);
    let stopped = nodes.pop().unwrap();
    let resume = stopped.applied_position();
    stopped.close().unwrap();

    // The leader and follower 1 go on committing once the leader stops waiting for member 2.
    let client = nodes[0].client();
    let mut applied = [20_000u64; 2];
    let mut offered = 20_000u64;
    let target = 23_000u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while applied.iter().any(|&a| a < target) {
        assert!(Instant::now() < deadline, "two nodes stalled: offered {offered}, applied {applied:?}");
        while offered < target && client.offer(&message(offered)).is_ok() {
            offered += 1;
        }
        for node in nodes.iter_mut() {
            node.invoke().unwrap();
        }
        for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
            apply(node, next);
        }
        std::thread::yield_now();
    }

    // Member 2 restarts from where it had applied, while what it missed is still in the leader's log
    // (about 3000 messages of a 1 MiB term), catches up to the same sequence, and goes on with the others.
    let restarted = builder("restart", 2, &members, false).resume_from(resume).start().unwrap();
    nodes.push(restarted);
    let mut next = [applied[0], applied[1], 20_000];
    let final_target = 30_000u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while next.iter().any(|&a| a < final_target) {
        assert!(Instant::now() < deadline, "catch-up stalled: offered {offered}, applied {next:?}\n{}", dump(&nodes));
        // No new offers until member 2 has caught up with what was committed while it was down.
        while next[2] >= target && offered < final_target && client.offer(&message(offered)).is_ok() {
            offered += 1;
        }
        for node in nodes.iter_mut() {
            node.invoke().unwrap();
        }
        for (node, n) in nodes.iter_mut().zip(next.iter_mut()) {
            apply(node, n);
        }
        std::thread::yield_now();
    }
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn a_follower_that_starts_late_applies_the_log_from_its_start() {
    let members = members(3);
    let mut nodes: Vec<Node> = (0..2).map(|id| builder("late", id, &members, false).start().unwrap()).collect();
    // The leader and member 1 commit 3000 messages (a quorum of two) before member 2 exists.
    let client = nodes[0].client();
    let mut offered = 0u64;
    let mut applied = [0u64; 3];
    let deadline = Instant::now() + Duration::from_secs(60);
    while applied[..2].iter().any(|&a| a < 3000) {
        assert!(Instant::now() < deadline, "two nodes stalled: offered {offered}, applied {applied:?}");
        while offered < 3000 && client.offer(&message(offered)).is_ok() {
            offered += 1;
        }
        for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
            node.invoke().unwrap();
            apply(node, next);
        }
        std::thread::yield_now();
    }
    // Member 2 starts fresh: it must apply from message 0, never from wherever the leader is now.
    nodes.push(builder("late", 2, &members, false).start().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while applied.iter().any(|&a| a < 5000) {
        assert!(Instant::now() < deadline, "late follower stalled: offered {offered}, applied {applied:?}");
        while applied[2] >= 3000 && offered < 5000 && client.offer(&message(offered)).is_ok() {
            offered += 1;
        }
        for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
            node.invoke().unwrap();
            apply(node, next);
        }
        std::thread::yield_now();
    }
    for node in nodes {
        node.close().unwrap();
    }
}
