//! Failover in one process: a 3-node cluster loses its leader mid-stream, elects another, goes on
//! committing, takes the old member back as a follower, and loses the second leader too. Every node
//! applies one sequence (each entry checked in order and in content by the driver), exactly once.
//!
//! Nodes run in invoker mode on the test thread; a "killed" node is simply never invoked again and then
//! dropped, which is what its peers see of a crash. Nothing here asserts on time.

use std::time::{Duration, Instant};

use quorumcast::cluster::consensus_core::Role;
use quorumcast::cluster::consensus_core::Timers;
use quorumcast::node::{Member, Node, NodeBuilder, RoleChange};
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel, Driver};
use quorumcast_testkit::{dump, ScratchDir};

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
    // 8 MiB terms: the log stays within what a leader keeps, so a member that comes back empty catches up.
    test_builder(scratch, id, members, test_channel()).term_buffer_length(8 << 20).timers(timers())
}

/// Invokes the live nodes until one of them leads with its term started and the others follow it;
/// returns its index.
fn await_new_leader(nodes: &mut [Option<Node>], old_term: i64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leader = nodes.iter().position(|n| {
            n.as_ref().is_some_and(|n| {
                n.role() == Role::Leader
                    && n.leadership_term_id() > old_term
                    && n.commit_position() >= n.stats().consensus().append_position()
            })
        });
        if let Some(leader) = leader {
            let id = nodes[leader].as_ref().unwrap().id();
            let term = nodes[leader].as_ref().unwrap().leadership_term_id();
            if nodes.iter().flatten().all(|n| n.leader_id() == Some(id) && n.leadership_term_id() == term) {
                return leader;
            }
        }
        let live: Vec<&Node> = nodes.iter().flatten().collect();
        assert!(Instant::now() < deadline, "no new leader\n{}", dump_refs(&live));
        for node in nodes.iter_mut().flatten() {
            node.invoke().unwrap();
        }
        std::thread::yield_now();
    }
}

fn dump_refs(nodes: &[&Node]) -> String {
    nodes.iter().map(|n| format!("node {} role {} term {}\n", n.id(), n.role(), n.leadership_term_id())).collect()
}

/// Runs the driver over the live nodes until each applied `target` (offering through whichever leads).
fn run_to(driver: &mut Driver, nodes: &mut [Option<Node>], target: u64) {
    driver.run_to_live(nodes, target, Duration::from_secs(120));
}

/// After a leader change: the new leader has applied everything committed before (its term's start
/// commits all it holds), so the next message to offer is the one after what it applied.
fn resume_offers(driver: &mut Driver, nodes: &mut [Option<Node>], leader: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (i, node) in nodes.iter_mut().enumerate() {
            if let Some(node) = node {
                node.invoke().unwrap();
                driver.apply(i, node, 4096, |_| {});
            }
        }
        let node = nodes[leader].as_ref().unwrap();
        if node.applied_position() == node.commit_position() {
            // The term's start is committed and applied: so is everything the new leader holds before it.
            driver.offer_from(driver.applied(leader));
            return;
        }
        assert!(Instant::now() < deadline, "new leader does not apply");
    }
}

#[test]
fn the_cluster_survives_the_loss_of_two_leaders_in_turn_and_a_member_rejoins() {
    let scratch = ScratchDir::new("failover");
    let members = members(3);
    let mut started: Vec<Node> = (0..3).map(|id| builder(&scratch, id, &members).start().unwrap()).collect();
    let changes = std::sync::Arc::new(std::sync::Mutex::new(Vec::<RoleChange>::new()));
    let seen = std::sync::Arc::clone(&changes);
    started[1].on_role_change(move |change| seen.lock().unwrap().push(*change));
    elect(&mut started, 0, Duration::from_secs(30));
    let first_term = started[0].leadership_term_id();
    let mut nodes: Vec<Option<Node>> = started.into_iter().map(Some).collect();
    let mut driver = Driver::checked(3);
    run_to(&mut driver, &mut nodes, 20_000);

    // The leader dies mid-stream: offers in flight, some appended and not yet replicated.
    for _ in 0..300 {
        let client = nodes[0].as_ref().unwrap().client();
        let _ = driver.offer(&client);
    }
    for node in nodes.iter_mut().flatten() {
        node.invoke().unwrap();
    }
    let killed = nodes[0].take().unwrap();
    let killed_applied = driver.applied(0);
    drop(killed);

    let leader = await_new_leader(&mut nodes, first_term);
    assert_ne!(leader, 0);
    resume_offers(&mut driver, &mut nodes, leader);
    assert!(driver.applied(leader) >= killed_applied, "an entry committed before the kill was lost");
    let second_term = nodes[leader].as_ref().unwrap().leadership_term_id();
    let target = driver.offered() + 20_000;
    run_to(&mut driver, &mut nodes, target);

    // The old member comes back with an empty log and its persisted vote: it follows the new leader and
    // applies the same sequence from the start.
    nodes[0] = Some(builder(&scratch, 0, &members).start().unwrap());
    driver.resume(0, 0);
    let target = driver.offered() + 5_000;
    run_to(&mut driver, &mut nodes, target);
    assert_eq!(nodes[0].as_ref().unwrap().role(), Role::Follower);

    // The second leader dies: a third term, led by one of the two others, continues the same log.
    let killed = nodes[leader].take().unwrap();
    drop(killed);
    let third = await_new_leader(&mut nodes, second_term);
    resume_offers(&mut driver, &mut nodes, third);
    let target = driver.offered() + 20_000;
    run_to(&mut driver, &mut nodes, target);
    let live: Vec<usize> = (0..3).filter(|&i| nodes[i].is_some()).collect();
    assert_eq!(driver.applied(live[0]), driver.applied(live[1]));

    let changes = changes.lock().unwrap();
    assert!(changes.iter().any(|c| c.role == Role::Follower && c.leader == Some(0)), "{changes:?}");
    assert!(changes.iter().any(|c| c.leadership_term_id > first_term), "{changes:?}");
    let all: Vec<Node> = nodes.into_iter().flatten().collect();
    let _ = dump(&all);
    for node in all {
        node.close().unwrap();
    }
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
