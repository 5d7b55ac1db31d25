//! A member whose vote file cannot be written, on the real file system: it stops instead of voting,
//! and the others elect a leader without it.
//!
//! The failover story itself (the leader killed mid-stream, a new one continuing the log, the old member
//! following on its return, a second leader killed) runs in the node simulator
//! (`tests/node_simulation.rs`, `the_cluster_survives_the_loss_of_two_leaders_in_turn_and_members_rejoin`),
//! deterministically; it ran here on real threads and clocks before.

use std::time::{Duration, Instant};

use quorumcast::{Member, Node, NodeBuilder};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_consensus::consensus_core::Timers;
use quorumcast_testkit::cluster::{members, test_builder, test_channel};
use quorumcast_testkit::ScratchDir;

/// Short enough that a test sees several elections in seconds, long enough that a test thread invoking
/// three nodes in turn does not miss heartbeats.
fn timers() -> Timers {
    Timers {
        heartbeat_interval_ns: 10_000_000,
        heartbeat_timeout_ns: 300_000_000,
        election_timeout_min_ns: 400_000_000,
        election_timeout_max_ns: 800_000_000,
    }
}

fn builder(scratch: &ScratchDir, id: i32, members: &[Member]) -> NodeBuilder {
    test_builder(scratch, id, members, test_channel()).term_buffer_length(8 << 20).timers(timers())
}

#[test]
fn a_member_that_cannot_persist_its_vote_stops_instead_of_voting() {
    let scratch = ScratchDir::new("failover-vote-file");
    let members = members(3);
    let mut nodes: Vec<Node> = (0..3).map(|id| builder(&scratch, id, &members).start().unwrap()).collect();
    // Member 1's data directory becomes a plain file: its vote file cannot be written.
    let data_dir = scratch.join("data-1");
    std::fs::remove_dir_all(&data_dir).unwrap();
    std::fs::write(&data_dir, b"not a directory").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut failure = None;
    while failure.is_none() || nodes[0].role() != Role::Leader || nodes[0].commit_position() == 0 {
        assert!(Instant::now() < deadline, "no leader, or member 1 voted: {failure:?}");
        for (i, node) in nodes.iter_mut().enumerate() {
            match node.invoke() {
                Ok(_) => {}
                Err(e) if i == 1 => failure = Some(e.to_string()),
                Err(e) => panic!("node {i}: {e}"),
            }
            node.poll_committed(64, |_| {});
        }
        std::thread::yield_now();
    }
    let failure = failure.unwrap();
    assert!(failure.contains("vote"), "the failure names the vote file: {failure}");
    assert_eq!(nodes[2].leader_id(), Some(0), "member 0 won with member 2's vote");
}
