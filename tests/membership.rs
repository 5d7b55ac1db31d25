//! Membership changes on a running cluster of in-process nodes over UDP loopback (invoker mode, driven
//! by the test thread): a member that no node file of the others names joins as a learner, catches up,
//! is promoted, and the member it replaces is removed (the leader itself); every node applies the same
//! messages, in order, exactly once, before, during and after the changes.

use std::time::Duration;

use quorumcast::SyncPolicy;
use quorumcast::{Member, MembershipChangeError, Node, PendingChange, StorageConfig};
use quorumcast_consensus::consensus_core::{Membership, MembershipChange, MembershipError, Role, Timers};
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel, Driver};
use quorumcast_testkit::load::drive_until;
use quorumcast_testkit::{dump, dump_each, ScratchDir};

const DEADLINE: Duration = Duration::from_secs(120);

/// Node `id` of a cluster whose initial configuration is members 0, 1 and 2 and which knows `members`.
fn start(scratch: &ScratchDir, id: i32, members: &[Member]) -> Node {
    test_builder(scratch, id, members, test_channel()).initial_members(vec![0, 1, 2]).start().unwrap()
}

/// Drives every node (offering and applying through `driver`) until `change`, asked of `nodes[leader]`,
/// commits or is refused.
fn settle(
    driver: &mut Driver,
    nodes: &mut [Node],
    active: &[bool],
    leader: usize,
    mut change: PendingChange,
    target: u64,
) -> Result<Membership, MembershipChangeError> {
    let mut outcome = None;
    let result = drive_until("the change settles", DEADLINE, driver, |d| {
        if let Some(done) = change.poll(&nodes[leader]) {
            outcome = Some(done);
            return Ok(None);
        }
        Ok(Some(d.round(nodes, active, target)))
    });
    if let Err(e) = result {
        panic!("{e}: {:?}\n{}", change.change(), dump(nodes));
    }
    outcome.expect("settled")
}

/// Asks `nodes[leader]` for `change` and settles it as [`settle`] does, asking again while the leader
/// says to retry (its term not committed yet, a learner not heard from yet or behind).
fn make(
    driver: &mut Driver,
    nodes: &mut [Node],
    active: &[bool],
    leader: usize,
    change: MembershipChange,
    member: Option<&Member>,
    target: u64,
) -> Result<Membership, MembershipChangeError> {
    loop {
        let pending = nodes[leader].propose_membership(change, member);
        match settle(driver, nodes, active, leader, pending, target) {
            Err(MembershipChangeError::Refused(
                MembershipError::TermNotCommitted
                | MembershipError::LearnerSilent(_)
                | MembershipError::LearnerBehind { .. },
            )) => continue,
            outcome => return outcome,
        }
    }
}

fn voters_and_learners(node: &Node) -> (Vec<i32>, Vec<i32>) {
    let (membership, _) = node.membership().expect("published");
    (membership.voters, membership.learners)
}

#[test]
fn a_new_member_joins_as_a_learner_is_promoted_and_replaces_the_leader() {
    let scratch = ScratchDir::new("membership-replace");
    let all = members(4);
    // Members 0-2 know only each other; member 3 knows them and itself.
    let mut nodes: Vec<Node> = (0..3).map(|id| start(&scratch, id, &all[..3])).collect();
    elect(&mut nodes, 0, Duration::from_secs(30));
    nodes.push(start(&scratch, 3, &all));
    let mut driver = Driver::checked(4);
    let first_three = [true, true, true, false];
    driver.run_to(&mut nodes, &first_three, 500, DEADLINE);
    assert_eq!(voters_and_learners(&nodes[3]), (vec![0, 1, 2], vec![]), "a joiner starts from the initial one");

    // Only the leader takes changes; a promotion of a non-learner is refused, naming why.
    let refused = nodes[1].propose_membership(MembershipChange::AddLearner(3), Some(&all[3]));
    let outcome = settle(&mut driver, &mut nodes, &first_three, 1, refused, 500);
    assert_eq!(outcome, Err(MembershipChangeError::Refused(MembershipError::NotLeader { leader: Some(0) })));
    let refused = nodes[0].propose_membership(MembershipChange::Promote(3), None);
    let outcome = settle(&mut driver, &mut nodes, &first_three, 0, refused, 500);
    assert_eq!(outcome, Err(MembershipChangeError::Refused(MembershipError::NotALearner(3))));

    // Member 3 joins as a learner, with messages flowing, and applies the whole log from its start.
    let all_four = [true; 4];
    let add = nodes[0].propose_membership(MembershipChange::AddLearner(3), Some(&all[3]));
    let added = settle(&mut driver, &mut nodes, &all_four, 0, add, 1_500).unwrap();
    assert_eq!((added.id, added.voters.clone(), added.learners.clone()), (1, vec![0, 1, 2], vec![3]));
    driver.run_to(&mut nodes, &all_four, 2_000, DEADLINE);
    for node in &nodes {
        assert_eq!(voters_and_learners(node), (vec![0, 1, 2], vec![3]), "member {}", node.id());
    }

    // Promoted, it votes; then the leader removes itself, steps down, and the others elect a leader.
    let promoted = make(&mut driver, &mut nodes, &all_four, 0, MembershipChange::Promote(3), None, 2_500).unwrap();
    assert_eq!(promoted.voters, vec![0, 1, 2, 3]);
    // Nothing is in flight when the leader removes itself: what it holds in its ingress when it steps down
    // is never appended (the driver's sequence would have a gap), as on any leader change.
    driver.run_to(&mut nodes, &all_four, 3_000, DEADLINE);
    let remove = nodes[0].propose_membership(MembershipChange::Remove(0), None);
    let removed = settle(&mut driver, &mut nodes, &all_four, 0, remove, 3_000).unwrap();
    assert_eq!(removed.voters, vec![1, 2, 3]);
    let rest = [false, true, true, true];
    driver.run_to(&mut nodes, &rest, 5_000, DEADLINE);
    let leader = nodes[1].leader_id().expect("a leader");
    assert_ne!(leader, 0, "the removed leader stepped down");
    for node in &nodes[1..] {
        assert_eq!(voters_and_learners(node), (vec![1, 2, 3], vec![]), "member {}", node.id());
        assert_eq!(node.leader_id(), Some(leader));
    }
    assert_eq!(driver.bad_entries(), 0);
    for node in nodes {
        node.close().unwrap();
    }
}

/// A node of the recorded-log cluster: a small log in memory (64 KiB terms), so that a member added late
/// is further behind than the leader holds and catches up from its recording; agents on threads of their
/// own (a catch-up runs beside them), backing off when idle. Member 0 stands first; the others wait a
/// minute (a start-up stall of member 0 must not hand the first election to another).
fn recorded(scratch: &ScratchDir, id: i32, members: &[Member]) -> Node {
    let patient = quorumcast_testkit::patient_timers();
    let timers = match id {
        0 => patient,
        _ => Timers { election_timeout_min_ns: 60_000_000_000, election_timeout_max_ns: 90_000_000_000, ..patient },
    };
    test_builder(scratch, id, members, test_channel())
        .initial_members(vec![0, 1, 2])
        .storage(StorageConfig { sync: SyncPolicy::None, segment_length: 256 << 10, ..StorageConfig::default() })
        .term_buffer_length(64 << 10)
        .timers(timers)
        .threading(ThreadingMode::Dedicated)
        .idle_all("backoff:10,5,1us,100us")
        .start()
        .expect("node starts")
}

#[test]
fn a_learner_far_behind_catches_up_from_the_recording_and_restarts_keep_the_configuration() {
    let scratch = ScratchDir::new("membership-recorded");
    let all = members(4);
    let mut nodes: Vec<Node> = (0..3).map(|id| recorded(&scratch, id, &all[..3])).collect();
    elect(&mut nodes, 0, Duration::from_secs(60));
    let mut driver = Driver::checked(4);
    driver.run_to(&mut nodes, &[true, true, true], 20_000, DEADLINE);
    nodes.push(recorded(&scratch, 3, &all));
    let add = nodes[0].propose_membership(MembershipChange::AddLearner(3), Some(&all[3]));
    settle(&mut driver, &mut nodes, &[true; 4], 0, add, 20_000).unwrap();
    driver.run_to(&mut nodes, &[true; 4], 22_000, DEADLINE);
    let stats = nodes[3].stats();
    assert!(stats.recorder().catch_ups() >= 1, "it caught up from the leader's recording: {}", dump(&nodes));
    make(&mut driver, &mut nodes, &[true; 4], 0, MembershipChange::Promote(3), None, 22_000).unwrap();
    driver.run_to(&mut nodes, &[true; 4], 23_000, DEADLINE);

    // Stopped whole and started again, every member (members 0-2 from node files that do not name member
    // 3) reads the configuration back from its recording, and the four go on.
    for node in nodes.drain(..) {
        node.close().unwrap();
    }
    let mut nodes: Vec<Node> =
        (0..4).map(|id| recorded(&scratch, id, if id == 3 { &all } else { &all[..3] })).collect();
    for node in &nodes {
        assert_eq!(voters_and_learners(node), (vec![0, 1, 2, 3], vec![]), "member {} after its restart", node.id());
    }
    elect_applying_nothing(&mut nodes);
    // Each replays its recording from the start (nothing was snapshotted), and offers go on.
    for i in 0..4 {
        driver.resume(i, 0);
    }
    driver.run_to(&mut nodes, &[true; 4], 24_000, DEADLINE);
    let (_, endpoints) = nodes[1].membership().unwrap();
    assert_eq!(endpoints.iter().find(|e| e.id == 3).map(|e| e.log), Some(all[3].log));

    // Member 3 stops while the others go on past what the leader's term buffer retains, and starts again:
    // it catches up from member 0's recording, although member 0's node file does not name it (its
    // catch-up server serves the members of the configuration it read back, not of its node file).
    let mut nodes: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    nodes[3].take().unwrap().close().unwrap();
    driver.run_to_live(&mut nodes, 28_000, DEADLINE);
    nodes[3] = Some(recorded(&scratch, 3, &all));
    driver.resume(3, 0);
    driver.run_to_live(&mut nodes, 29_000, DEADLINE);
    let caught_up = nodes[3].as_ref().unwrap().stats().recorder().catch_ups();
    assert!(caught_up >= 1, "member 3 caught up from member 0's recording: {}", dump_each(nodes.iter().flatten()));
    for node in nodes.into_iter().flatten() {
        node.close().unwrap();
    }
}

/// Invokes `nodes` until member 0 leads and the others follow it, applying nothing (the driver checks
/// every entry from the first).
fn elect_applying_nothing(nodes: &mut [Node]) {
    let outcome = drive_until("member 0 leads", Duration::from_secs(60), nodes, |nodes| {
        if nodes[0].role() == Role::Leader && nodes.iter().all(|n| n.leader_id() == Some(0)) {
            return Ok(None);
        }
        Ok(Some(nodes.iter_mut().map(|n| n.invoke().unwrap()).sum()))
    });
    if let Err(e) = outcome {
        panic!("{e}\n{}", dump(nodes));
    }
}

/// A remote client whose list names members 0, 1 and 2 finds member 3, added while the cluster ran and
/// leading now, through a redirect that carries the leader's client endpoint; its messages commit once.
#[test]
fn a_client_finds_a_leader_its_list_does_not_name() {
    use quorumcast::ClientEndpointConfig;
    use quorumcast::{ClientConfig, ClusterClient};
    use quorumcast_driver::media::auth::AuthKey;

    let scratch = ScratchDir::new("membership-client");
    let all = members(4);
    let clients = ClientEndpointConfig::enabled(AuthKey::new([0x5e; 32]));
    let start = |id: i32, known: &[Member]| {
        test_builder(&scratch, id, known, test_channel())
            .initial_members(vec![0, 1, 2])
            .clients(clients.clone())
            .start()
            .unwrap()
    };
    let mut nodes: Vec<Node> = (0..3).map(|id| start(id, &all[..3])).collect();
    elect(&mut nodes, 0, Duration::from_secs(30));
    nodes.push(start(3, &all));
    let mut driver = Driver::checked(4);
    for change in [MembershipChange::AddLearner(3), MembershipChange::Promote(3)] {
        make(&mut driver, &mut nodes, &[true; 4], 0, change, Some(&all[3]), 0).unwrap();
    }
    nodes[0].transfer_leadership(Some(3)).unwrap();
    let outcome = drive_until("member 3 leads", DEADLINE, &mut nodes, |nodes| {
        if nodes[3].role() == Role::Leader && nodes[3].commit_position() > 0 {
            return Ok(None);
        }
        Ok(Some(nodes.iter_mut().map(|n| n.invoke().unwrap() + n.poll_committed(64, |_| {})).sum()))
    });
    outcome.unwrap();
    // Until the new leader has committed an entry of its term, it refuses changes and says to retry.
    make(&mut driver, &mut nodes, &[false, true, true, true], 3, MembershipChange::Remove(0), None, 0).unwrap();

    let members: Vec<(i32, std::net::SocketAddr)> = all[..3].iter().map(|m| (m.id, m.client)).collect();
    let mut client = ClusterClient::new(ClientConfig::new(members)).unwrap();
    client.start_connect();
    let mut committed = 0;
    let outcome = drive_until("the client commits 10 messages", DEADLINE, &mut nodes, |nodes| {
        if committed >= 10 {
            return Ok(None);
        }
        let mut work: usize = nodes.iter_mut().map(|n| n.invoke().unwrap() + n.poll_committed(64, |_| {})).sum();
        if client.leader().is_some() && committed + client.in_flight() < 10 {
            work += usize::from(client.offer(b"through the learnt leader").is_ok());
        }
        work += client.poll(|event| {
            if let quorumcast::Event::Committed { .. } = event {
                committed += 1;
            }
        });
        Ok(Some(work))
    });
    outcome.unwrap_or_else(|e| panic!("{e}: {:?}\n{}", client.stats(), dump(&nodes)));
    assert_eq!(client.leader(), Some(3));
    assert_eq!(client.stats().members_learnt, 1, "learnt from a redirect");
    for node in nodes {
        node.close().unwrap();
    }
}
