//! A hostile neighbour against a 3-node cluster on loopback, with plain sockets: forged SETUPs, data and
//! commits; a SETUP asking for a 1 GiB term; a second node that claims to lead; a member with another
//! member list; a stopped follower; NAK and window-0 floods; datagrams without the shared key's tag.
//!
//! Each test shows that nothing foreign is applied (every node applies exactly the numbered sequence the
//! leader was offered, checked entry by entry), that commits go on with a quorum, and that every
//! rejection is counted where it happened. Nodes run in invoker mode, driven by the test thread.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use socket2::SockAddr;

use quorumcast::{Member, Node};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_consensus::frames::CommitPositionFrame;
use quorumcast_driver::frame::{self, DataHeader, NakFrame, SetupFrame, StatusMessageFrame};
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_driver::media::channel::{membership_tag, ChannelConfig};
use quorumcast_driver::media::flow_control::FlowControlMode;
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::{RecvBatch, SocketOptions, UdpEndpoint};
use quorumcast_driver::shm::log_buffer::{LogBuffer, LogConfig};
use quorumcast_testkit::cluster::{counter, elect, members, members_on, test_builder, test_channel, Driver};
use quorumcast_testkit::{dump, ScratchDir};

const STREAM: i32 = 1001;
const ALL: [bool; 3] = [true; 3];
const DEADLINE: Duration = Duration::from_secs(60);

fn start(scratch: &ScratchDir, members: &[Member], channel: ChannelConfig) -> Vec<Node> {
    (0..3).map(|id| test_builder(scratch, id, members, channel.clone()).start().unwrap()).collect()
}

/// A 3-node cluster that has committed and applied 5,000 messages everywhere, and the session of its log.
struct Running {
    scratch: ScratchDir,
    members: Vec<Member>,
    nodes: Vec<Node>,
    driver: Driver,
    session: i32,
}

fn running(name: &str, channel: ChannelConfig) -> Running {
    let scratch = ScratchDir::new(name);
    let members = members(3);
    let mut nodes = start(&scratch, &members, channel);
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &ALL, 5_000, DEADLINE);
    let session = image_session(&nodes[1]);
    Running { scratch, members, nodes, driver, session }
}

/// The session of the leader's log, as the follower's image file names it.
fn image_session(node: &Node) -> i32 {
    let sessions = image_files(node);
    assert_eq!(sessions.len(), 1, "one image file in {:?}", node.directory());
    sessions[0]
}

/// The sessions of the image files in a node's directory.
fn image_files(node: &Node) -> Vec<i32> {
    let dir = node.directory().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|name| name.strip_prefix(&format!("image-{STREAM}-"))?.strip_suffix(".log")?.parse().ok())
        .collect()
}

fn setup(session_id: i32, term_length: i32, mtu: i32) -> Vec<u8> {
    let mut bytes = vec![0u8; SetupFrame::LENGTH];
    setup_frame(session_id, term_length, mtu).encode(&mut bytes).unwrap();
    bytes
}

fn setup_frame(session_id: i32, term_length: i32, mtu: i32) -> SetupFrame {
    SetupFrame {
        session_id,
        stream_id: STREAM,
        term_length,
        mtu,
        initial_term_id: 0,
        active_term_id: 0,
        term_offset: 0,
        ..SetupFrame::default()
    }
}

fn data(session_id: i32, term_offset: i32, reserved_value: i64) -> Vec<u8> {
    let header =
        DataHeader { reserved_value, ..DataHeader::new(session_id, STREAM, 0, term_offset, frame::UNFRAGMENTED) };
    let mut bytes = vec![0u8; 64];
    let length = frame::encode_data(&mut bytes, &header, &[0xEE; 16]).unwrap();
    bytes.truncate(length);
    bytes
}

fn commit(session_id: i32, log_position: i64) -> Vec<u8> {
    let commit = CommitPositionFrame { session_id, stream_id: STREAM, log_position, ..CommitPositionFrame::default() };
    let mut bytes = vec![0u8; CommitPositionFrame::LENGTH];
    commit.encode(&mut bytes).unwrap();
    bytes
}

fn send(socket: &UdpSocket, to: SocketAddr, bytes: &[u8]) {
    socket.send_to(bytes, to).unwrap();
}

/// Every node applied the same sequence (the driver checked each entry), and no follower knows a commit
/// position beyond the leader's.
fn assert_converged(nodes: &[Node], driver: &Driver) {
    assert!(driver.applied_all().windows(2).all(|w| w[0] == w[1]), "applied {:?}", driver.applied_all());
    let leader = nodes[0].commit_position();
    for node in &nodes[1..] {
        assert!(
            node.commit_position() <= leader,
            "node {} commit {} > leader's {leader}",
            node.id(),
            node.commit_position()
        );
    }
}

#[test]
fn forged_setups_data_and_commits_from_a_stranger_are_counted_and_nothing_foreign_is_applied() {
    let Running { scratch: _scratch, members, mut nodes, mut driver, session } =
        running("hostile-stranger", test_channel());

    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = members[1].log;
    send(&attacker, target, &setup(session + 1, 1 << 20, 1408));
    for i in 0..100 {
        send(&attacker, target, &data(session + 1, i * 64, 1 << 62));
    }
    send(&attacker, target, &commit(session, 1 << 62));
    send(&attacker, target, &setup(session + 2, 1 << 30, 65504));
    driver.run_to(&mut nodes, &ALL, 10_000, DEADLINE);

    let follower = &nodes[1];
    assert!(counter(follower, "receiver foreign source dropped") >= 103);
    assert_eq!(counter(follower, "receiver foreign member dropped"), 0);
    assert!(counter(follower, "receiver foreign setups dropped") >= 2);
    assert!(counter(follower, "receiver foreign data dropped") >= 100);
    assert!(counter(follower, "receiver foreign commits dropped") >= 1);
    assert_eq!(counter(follower, "receiver images"), 1, "no image for a forged session");
    assert_eq!(image_files(follower), vec![session], "no image file for a forged session");
    assert_converged(&nodes, &driver);
}

#[test]
fn a_spoofed_leader_can_neither_change_the_geometry_nor_restart_a_followers_log() {
    let Running { scratch: _scratch, members, mut nodes, mut driver, session } =
        running("hostile-spoofed", test_channel());
    let shm_before = image_bytes(&nodes[1]);

    // A process of the same user can share the leader's port (SO_REUSEPORT): it sends from the leader's
    // own address, as a spoofing host would. The node's own rules must hold even then.
    let (spoofer, _) = UdpEndpoint::bind_shared(members[0].log, &SocketOptions::default()).unwrap();
    let to = SockAddr::from(members[1].log);
    spoofer.send(&setup(session + 5, 1 << 30, 65504), Some(&to));
    // A SETUP that passes every other check (geometry, member list) but starts a new log.
    let tag = membership_tag(&members.iter().map(|m| (m.id, m.log)).collect::<Vec<_>>());
    let mut new_log = [0u8; 64];
    let length = setup_frame(session + 6, 1 << 20, 1408).encode_with_membership(&mut new_log, tag).unwrap();
    spoofer.send(&new_log[..length], Some(&to));
    drop(spoofer);
    driver.run_to(&mut nodes, &ALL, 10_000, DEADLINE);

    let follower = &nodes[1];
    assert!(counter(follower, "receiver setups refused") >= 1, "the 1 GiB / 65504 SETUP");
    assert!(counter(follower, "receiver new sessions refused") >= 1, "a new log over one with data");
    assert_eq!(counter(follower, "receiver images"), 1);
    assert_eq!(image_files(follower), vec![session]);
    assert_eq!(image_bytes(follower), shm_before, "no new file, nothing reserved");
    assert_converged(&nodes, &driver);
}

/// Bytes of the image files in a node's directory.
fn image_bytes(node: &Node) -> u64 {
    let dir = node.directory().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("image-"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn a_member_that_wants_to_lead_cannot_depose_a_live_leader() {
    let scratch = ScratchDir::new("hostile-second-leader");
    let members = members(3);
    let mut nodes: Vec<Node> =
        (0..3).map(|id| test_builder(&scratch, id, &members, test_channel()).start().unwrap()).collect();
    elect(&mut nodes, 0, DEADLINE);
    let term = nodes[0].leadership_term_id();
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &ALL, 2_000, DEADLINE);
    // Member 2 restarts configured to prefer itself as the leader: it canvasses at once, and the members
    // that hear their live leader refuse it. It follows the leader and applies the log from the start.
    nodes.pop().unwrap().close().unwrap();
    nodes.push(test_builder(&scratch, 2, &members, test_channel()).leader(2).start().unwrap());
    driver.resume(2, 0);
    driver.run_to(&mut nodes, &ALL, 5_000, DEADLINE);
    assert_eq!((nodes[0].role(), nodes[0].leadership_term_id()), (Role::Leader, term), "the leader stays");
    assert_eq!((nodes[2].leader_id(), nodes[2].leadership_term_id()), (Some(0), term));
    assert!(counter(&nodes[2], "election role changes") >= 1);
}

#[test]
fn a_member_with_another_member_list_is_refused_on_both_sides() {
    let scratch = ScratchDir::new("hostile-membership");
    let members = members(3);
    let mut nodes: Vec<Node> =
        (0..2).map(|id| test_builder(&scratch, id, &members, test_channel()).start().unwrap()).collect();
    // Member 2's file lists a fourth member the others do not have.
    let mut other = members.clone();
    other.push(Member::new(3, "127.0.0.1:9".parse().unwrap()));
    // It also prefers itself as the first leader: it canvasses at once, with its own member list.
    nodes.push(test_builder(&scratch, 2, &other, test_channel()).leader(2).start().unwrap());
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &[true, true, false], 5_000, DEADLINE);
    for _ in 0..200 {
        driver.round(&mut nodes, &ALL, 5_000);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(counter(&nodes[2], "receiver setups refused") >= 1, "the follower refuses the leader's SETUP");
    assert_eq!(driver.applied(2), 0, "member 2 joined nothing");
    assert_eq!(counter(&nodes[2], "receiver images"), 0);
    let refused: i64 = nodes[..2].iter().map(|n| counter(n, "election other member list refused")).sum();
    assert!(refused >= 1, "the members refuse to vote for a member with another member list");
    assert_ne!(nodes[0].leader_id(), Some(2));
}

#[test]
fn a_stopped_follower_never_stalls_commits_and_one_left_behind_the_retained_log_is_told_so() {
    let scratch = ScratchDir::new("hostile-stopped");
    let members = members(3);
    // A receiver time-out of a minute: with min flow control the leader would wait for the stopped
    // follower that long; the quorum must not.
    let channel = ChannelConfig { receiver_timeout: Duration::from_secs(60), ..test_channel() };
    let mut nodes = start(&scratch, &members, channel);
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &ALL, 2_000, DEADLINE);

    // A short stop, within the retained log: the leader and member 1 go on, member 2 catches up by NAK.
    let two = [true, true, false];
    driver.run_to(&mut nodes, &two, 4_000, Duration::from_secs(30));
    driver.run_to(&mut nodes, &ALL, 5_000, DEADLINE);

    // A long stop: the log moves more than its three 1 MiB terms past member 2.
    let position = nodes[0].commit_position();
    while nodes[0].commit_position() < position + (4 << 20) {
        let target = driver.applied(0) + 5_000;
        driver.run_to(&mut nodes, &two, target, Duration::from_secs(30));
    }
    // Member 2 comes back: it is told it is behind, stops NAKing, and does not hold the others back.
    let target = driver.applied(0) + 5_000;
    let until = Instant::now() + DEADLINE;
    while counter(&nodes[2], "receiver behind-retained received") == 0 || driver.applied(0) < target {
        assert!(Instant::now() < until, "member 2 was never told it is behind\n{}", dump(&nodes));
        driver.round(&mut nodes, &ALL, target);
    }
    assert!(counter(&nodes[0], "sender behind-retained sent") >= 1);
    let target = driver.applied(0) + 2_000;
    driver.run_to(&mut nodes, &two, target, DEADLINE);
    // Told, member 2 asks for nothing the leader cannot answer. (It may NAK what it lost of the live log
    // while stopped, once a catch-up from the leader's recording has given it a new Receiver there: the
    // leader answers those.)
    let unanswerable = counter(&nodes[0], "sender NAKs behind retained log");
    for _ in 0..100 {
        driver.round(&mut nodes, &ALL, target);
    }
    let after = counter(&nodes[0], "sender NAKs behind retained log");
    assert_eq!(after, unanswerable, "no NAKs after being told they cannot be answered");
    assert_eq!(driver.applied(0), driver.applied(1));
}

#[test]
fn with_a_shared_key_untagged_and_wrongly_tagged_datagrams_are_dropped_and_counted() {
    let key: AuthKey = "5b2ac0cd47a3f1c1e0b9d5d3a8f3b6c19d8e7f6a5b4c3d2e1f0a9b8c7d6e5f40".parse().unwrap();
    let channel = ChannelConfig { auth: Some(key), ..test_channel() };
    let Running { scratch: _scratch, members, mut nodes, mut driver, session } = running("hostile-auth", channel);

    // From the leader's own address, so only the tag can tell: no tag, then another key's tag.
    let (mut spoofer, _) = UdpEndpoint::bind_shared(members[0].log, &SocketOptions::default()).unwrap();
    let to = SockAddr::from(members[1].log);
    spoofer.send(&commit(session, 1 << 62), Some(&to));
    spoofer.set_auth(Some("00".repeat(32).parse().unwrap()));
    spoofer.send(&commit(session, 1 << 62), Some(&to));
    spoofer.send(&setup(session + 9, 1 << 20, 1408), Some(&to));
    drop(spoofer);
    driver.run_to(&mut nodes, &ALL, 10_000, DEADLINE);
    assert!(counter(&nodes[1], "receiver forged dropped") >= 3);
    assert_eq!(counter(&nodes[1], "receiver images"), 1);
    assert_converged(&nodes, &driver);
}

#[test]
fn members_only_holds_over_ipv6() {
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("skipped: this host has no IPv6 loopback");
        return;
    }
    let scratch = ScratchDir::new("hostile-ipv6");
    let members = members_on("::1".parse().unwrap(), 3);
    let mut nodes = start(&scratch, &members, test_channel());
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &ALL, 3_000, DEADLINE);
    let session = image_session(&nodes[2]);
    let attacker = UdpSocket::bind("[::1]:0").unwrap();
    send(&attacker, members[2].log, &commit(session, 1 << 62));
    send(&attacker, members[2].log, &setup(session + 1, 1 << 20, 1408));
    driver.run_to(&mut nodes, &ALL, 6_000, DEADLINE);
    assert!(counter(&nodes[2], "receiver foreign source dropped") >= 2);
    assert_converged(&nodes, &driver);
}

// ---------------------------------------------------------------------------------------------------------
// The leader's side: NAK and status-message floods from a follower's own address.
// ---------------------------------------------------------------------------------------------------------

const TERM: usize = 1 << 20;

/// A publication to two hand-driven receivers in quorum flow control (three members), with a
/// retransmit budget of `rate` bytes per second.
struct Rig {
    sender: Sender,
    counters: SenderCounters,
    appender: quorumcast_driver::shm::log_buffer::ExclusiveAppender,
    receivers: [UdpEndpoint; 2],
    control: Vec<SocketAddr>,
    batch: RecvBatch,
}

impl Rig {
    fn new(rate: u64) -> Self {
        let receivers =
            [0, 1].map(|_| UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap().0);
        let log =
            LogBuffer::create_anonymous(LogConfig { session_id: 77, stream_id: STREAM, ..LogConfig::new(TERM, 1408) })
                .unwrap();
        let appender = log.appender().unwrap();
        let channel = ChannelConfig {
            destinations: receivers.iter().map(UdpEndpoint::local_addr).collect(),
            flow_control: FlowControlMode::Quorum(1),
            max_retransmit_rate: rate,
            retransmit_linger: Duration::from_millis(10),
            ..test_channel()
        };
        let counters = SenderCounters::detached();
        let publication = NetworkPublication::new(log, channel, counters.clone()).unwrap();
        let control = publication.local_addrs();
        Rig {
            sender: Sender::new(vec![publication]),
            counters,
            appender,
            receivers,
            control,
            batch: RecvBatch::new(32, 2048),
        }
    }

    fn status(&self, r: usize, position: i64, window: i32) {
        let mut sm = StatusMessageFrame {
            session_id: 77,
            stream_id: STREAM,
            consumption_term_id: 0,
            consumption_term_offset: position as i32,
            receiver_window: window,
            ..StatusMessageFrame::default()
        };
        sm.set_receiver_id(r as i64 + 1);
        let mut bytes = [0u8; 64];
        let length = sm.encode(&mut bytes).unwrap();
        self.receivers[r].send(&bytes[..length], Some(&SockAddr::from(self.control[r])));
    }

    fn nak(&self, r: usize, term_offset: i32, length: i32) {
        let nak =
            NakFrame { session_id: 77, stream_id: STREAM, term_id: 0, term_offset, length, ..NakFrame::default() };
        let mut bytes = [0u8; 64];
        let n = nak.encode(&mut bytes).unwrap();
        self.receivers[r].send(&bytes[..n], Some(&SockAddr::from(self.control[r])));
    }

    /// Bytes of data that reached receiver `r` (draining its socket).
    fn drain(&mut self, r: usize) -> usize {
        let mut bytes = 0;
        while self.receivers[r].recv_batch(&mut self.batch).unwrap() > 0 {
            for i in 0..self.batch.len() {
                let d = self.batch.datagram(i);
                if matches!(frame::parse(d.bytes), Ok(frame::Frame::Data { .. })) {
                    bytes += d.bytes.len();
                }
            }
        }
        bytes
    }

    fn run(&mut self, cycles: usize) {
        for _ in 0..cycles {
            self.sender.poll_once();
        }
    }

    /// Appends `n` 100-byte messages and runs until the sender has sent them.
    fn stream(&mut self, n: usize) {
        for _ in 0..n {
            while self.appender.append(&[7u8; 100]).is_err() {
                self.appender.refresh_limit_from_consumers();
                self.run(1);
            }
        }
        let until = Instant::now() + DEADLINE;
        while self.sender.publications()[0].sender_position() < self.appender.position() {
            assert!(Instant::now() < until, "the sender stalled: {:#?}", self.counters);
            self.run(1);
            self.drain(0);
            self.drain(1);
        }
    }
}

#[test]
fn a_nak_flood_costs_at_most_the_retransmit_budget_and_one_resend_per_range_per_linger() {
    const RATE: u64 = 2 << 20; // 2 MiB/s per receiver
    let mut rig = Rig::new(RATE);
    rig.status(0, 0, (TERM / 2) as i32);
    rig.status(1, 0, (TERM / 2) as i32);
    rig.run(100);
    rig.appender.refresh_limit_from_consumers();
    rig.stream(3_000); // ~400 KB sent
    let started = Instant::now();
    // One NAK for everything, 2,000 times: one resend per linger, each at most a window.
    for _ in 0..2_000 {
        rig.nak(0, 0, 11 << 20);
        rig.run(2);
        rig.drain(0);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let resent = rig.counters.retransmitted_bytes.get() as f64;
    let window = test_channel().receiver_window as f64;
    assert!(
        resent <= RATE as f64 * elapsed + window,
        "resent {resent} B in {elapsed:.3} s, budget {RATE} B/s + {window}"
    );
    assert!(rig.counters.naks_received.get() >= 1_000, "{:#?}", rig.counters);
    let lingers = (elapsed / 0.010).ceil() + 1.0;
    assert!((rig.counters.retransmits.get() as f64) <= lingers * (window / 1408.0).ceil(), "{:#?}", rig.counters);
}

#[test]
fn a_window_zero_flood_from_one_follower_does_not_hold_the_quorum_back() {
    let mut rig = Rig::new(64 << 20);
    rig.status(0, 0, (TERM / 2) as i32);
    rig.status(1, 0, (TERM / 2) as i32);
    rig.run(100);
    rig.appender.refresh_limit_from_consumers();
    for round in 0..20 {
        // Receiver 1 says "window 0 at position 0" over and over; receiver 0 keeps up.
        for _ in 0..50 {
            rig.status(1, 0, 0);
        }
        rig.stream(200);
        let position = rig.sender.publications()[0].sender_position();
        rig.status(0, position, (TERM / 2) as i32);
        assert!(position > 0, "round {round}");
    }
    let until = Instant::now() + DEADLINE;
    while rig.counters.status_messages.get() < 1_000 + 20 {
        assert!(Instant::now() < until, "every status message is read: {:#?}", rig.counters);
        rig.run(1);
    }
}
