//! A 3-node cluster over UDP loopback in one process: commits and applies the same sequence on every node,
//! in order, exactly once; with loss, duplication and reordering; with a follower stopped and restarted.
//!
//! Nodes run in invoker mode, driven by the test thread (one thread: nothing busy-spins), except where a
//! test says otherwise.

use std::time::Duration;

use quorumcast::{LocalOfferError, LocalWaitError, Member, Node, NodeBuilder};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::transport::faulty::FaultConfig;
use quorumcast_driver::shm::counters::TYPE_SYSTEM;
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel, Driver};
use quorumcast_testkit::ScratchDir;

fn channel(faults: bool) -> ChannelConfig {
    let receive_faults = if faults {
        FaultConfig { drop: 0.05, duplicate: 0.01, reorder: 0.01, seed: 11 }
    } else {
        FaultConfig::default()
    };
    ChannelConfig { receive_faults, ..test_channel() }
}

fn builder(scratch: &ScratchDir, id: i32, members: &[Member], faults: bool) -> NodeBuilder {
    let mut channel = channel(faults);
    channel.receive_faults.seed += id as u64;
    test_builder(scratch, id, members, channel)
}

/// Offers `total` messages through the leader and drives every node until each applied all of them.
fn run(nodes: &mut [Node], total: u64) {
    Driver::checked(nodes.len()).run_to(nodes, &vec![true; nodes.len()], total, Duration::from_secs(240));
}

fn start(scratch: &ScratchDir, faults: bool) -> Vec<Node> {
    let members = members(3);
    let mut nodes: Vec<Node> = (0..3).map(|id| builder(scratch, id, &members, faults).start().unwrap()).collect();
    elect(&mut nodes, 0, Duration::from_secs(30));
    nodes
}

#[test]
fn three_nodes_commit_a_million_messages_in_order() {
    let scratch = ScratchDir::new("cluster-million");
    let mut nodes = start(&scratch, false);
    assert_eq!(nodes[0].role(), Role::Leader);
    assert_eq!(nodes[1].role(), Role::Follower);
    assert_eq!(nodes[1].client().offer(b"x"), Err(LocalOfferError::NotLeader { leader: Some(0) }));
    assert_eq!((nodes[1].leader_id(), nodes[1].leadership_term_id()), (Some(0), nodes[0].leadership_term_id()));
    assert!(nodes[0].leadership_term_id() >= 1);
    run(&mut nodes, 1_000_000);
    let commit = nodes[0].commit_position();
    assert!(commit > 0);
    check_typed_counters(&nodes, commit);
    for node in nodes {
        node.close().unwrap();
    }
}

/// Every counter a node allocates has a type (an agent's, or one of the node catalogue's), and the typed
/// readers read what the labels show.
fn check_typed_counters(nodes: &[Node], commit: i64) {
    for node in nodes {
        let stats = node.stats();
        for counter in stats.iter() {
            assert_ne!(counter.type_id, TYPE_SYSTEM, "node {}: `{}` has no type", node.id(), counter.label);
        }
        assert_eq!(stats.consensus().commit_position(), stats.labelled("consensus commit position"));
        assert_eq!(stats.receiver().datagrams(), stats.labelled("receiver datagrams"));
    }
    let leader = nodes[0].stats();
    assert_eq!(leader.sender().data_datagrams(), leader.labelled("sender data datagrams"));
    assert!(leader.sender().data_datagrams() > 0);
    assert_eq!(leader.consensus().commit_position(), commit);
    for member in [1, 2] {
        let ack = leader.ack_position(member).expect("the leader records each follower's acknowledgement");
        assert_eq!(ack, leader.labelled(&format!("ack position of member {member}")));
    }
    assert_eq!(leader.ack_position(0), None, "the leader does not acknowledge to itself");
    assert!(nodes[1].stats().receiver().images() >= 1);
    assert!(nodes[1].stats().receiver().acknowledgements_sent() > 0, "a follower acknowledges what it receives");
}

/// Each member replaces the log file its first term took with a spare made off its consensus thread, and
/// says so in its counters: the spare is ready again, two were made (the first at start), and no term
/// began without one.
///
/// The spares are made at a lowered priority: the loop sleeps when idle, and the deadline allows for the
/// other tests of this binary keeping both cores busy meanwhile.
#[test]
fn every_member_has_a_spare_log_ready_again_after_its_first_term() {
    let scratch = ScratchDir::new("cluster-spares");
    let mut nodes = start(&scratch, false);
    run(&mut nodes, 1_000);
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while !nodes.iter().all(|n| n.stats().log_files().spare_ready() == 1) {
        assert!(std::time::Instant::now() < deadline, "the spares were not made in 600 s");
        let mut work = 0;
        for node in nodes.iter_mut() {
            work += node.invoke().unwrap();
            work += node.poll_committed(64, |_| {});
        }
        if work == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for node in &nodes {
        let stats = node.stats();
        let files = stats.log_files();
        assert_eq!(files.spares_made(), 2, "member {}: the first spare and its replacement", node.id());
        assert_eq!(files.terms_without_spare(), 0, "member {}", node.id());
        assert_eq!(files.spare_ready(), stats.labelled("log spare ready"));
    }
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn three_nodes_commit_through_loss_duplication_and_reordering() {
    let scratch = ScratchDir::new("cluster-faults");
    let mut nodes = start(&scratch, true);
    run(&mut nodes, 1_000_000);
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn two_nodes_commit_while_a_follower_is_down_and_it_catches_up_on_restart() {
    let scratch = ScratchDir::new("cluster-restart");
    let members = members(3);
    // Terms of 4 MiB: the leader still holds the whole log (about 3.3 MB) when member 2 comes back.
    let builder = |id| builder(&scratch, id, &members, false).term_buffer_length(4 << 20);
    let mut nodes: Vec<Node> = (0..3).map(|id| builder(id).start().unwrap()).collect();
    elect(&mut nodes, 0, Duration::from_secs(30));
    run(&mut nodes, 20_000);
    let stopped = nodes.pop().unwrap();
    let resume = stopped.applied_position();
    stopped.close().unwrap();

    // The leader and follower 1 go on committing once the leader stops waiting for member 2.
    let mut driver = Driver::checked(3);
    driver.offer_from(20_000);
    driver.resume(0, 20_000);
    driver.resume(1, 20_000);
    let target = 23_000u64;
    driver.run_to(&mut nodes, &[true, true], target, Duration::from_secs(60));

    // Member 2 restarts with its state applied up to `resume` and no log (the log is not kept on disk):
    // it replicates the leader's log from the start, applies only what it lacks, catches up to the same
    // sequence, and goes on with the others: no new offers until it has caught up with what was committed
    // while it was down.
    let restarted = builder(2).resume_from(resume).start().unwrap();
    nodes.push(restarted);
    driver.resume(2, 20_000);
    driver.run_to(&mut nodes, &[true; 3], target, Duration::from_secs(20));
    driver.run_to(&mut nodes, &[true; 3], 30_000, Duration::from_secs(20));
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn a_follower_that_starts_late_applies_the_log_from_its_start() {
    let scratch = ScratchDir::new("cluster-late");
    let members = members(3);
    let mut nodes: Vec<Node> = (0..2).map(|id| builder(&scratch, id, &members, false).start().unwrap()).collect();
    // The leader and member 1 commit 3000 messages (a quorum of two) before member 2 exists.
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &[true, true], 3000, Duration::from_secs(60));
    // Member 2 starts fresh: it must apply from message 0, never from wherever the leader is now (the
    // driver checks it applies 0, 1, 2, ...); no new offers until it has caught up.
    nodes.push(builder(&scratch, 2, &members, false).start().unwrap());
    driver.run_to(&mut nodes, &[true; 3], 3000, Duration::from_secs(60));
    driver.run_to(&mut nodes, &[true; 3], 5000, Duration::from_secs(60));
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn offer_and_wait_returns_once_the_message_is_committed() {
    let scratch = ScratchDir::new("cluster-offer-and-wait");
    let mut nodes = start(&scratch, false);
    let client = nodes[0].client();
    // The nodes are invoked on this thread; the waiting client runs on another, as in a daemon.
    let waiter = std::thread::spawn(move || {
        (0..50u32).map(|i| client.offer_and_wait(&i.to_le_bytes(), Duration::from_secs(60))).collect::<Vec<_>>()
    });
    let mut seen: Vec<(u32, i64)> = Vec::new();
    while !waiter.is_finished() {
        for node in nodes.iter_mut() {
            node.invoke().unwrap();
        }
        nodes[0].poll_positions(64, |bytes, position| {
            seen.push((u32::from_le_bytes(bytes.try_into().unwrap()), position));
        });
        std::thread::yield_now();
    }
    let commits = waiter.join().unwrap();
    // Committed is not yet applied here: read the rest (a commit position bounds what poll hands out).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < commits.len() && std::time::Instant::now() < deadline {
        nodes[0].invoke().unwrap();
        nodes[0].poll_positions(64, |bytes, position| {
            seen.push((u32::from_le_bytes(bytes.try_into().unwrap()), position));
        });
    }
    for (i, commit) in commits.iter().enumerate() {
        let commit = *commit.as_ref().unwrap_or_else(|e| panic!("message {i}: {e}"));
        // The message was applied (handed to poll) at or before the commit position returned for it.
        let at = seen.iter().find(|(m, _)| *m == i as u32).map(|&(_, p)| p);
        assert!(at.is_some_and(|p| p <= commit), "message {i} at {at:?}, returned commit {commit}");
    }
    assert_eq!(
        nodes[1].client().offer_and_wait(b"x", Duration::from_secs(1)),
        Err(LocalWaitError::Offer(LocalOfferError::NotLeader { leader: Some(0) }))
    );
    for node in nodes {
        node.close().unwrap();
    }
}
