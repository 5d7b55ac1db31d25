//! The recorded log in one process: a 3-node cluster records its log on disk (sync `none` and `batch`),
//! is stopped whole and started again from its data directories, replays what it recorded and goes on;
//! snapshots restore the application's state and let the log below them be deleted; a torn end of a
//! segment is cut at start, and a damaged index stops the node naming the file.
//!
//! Nodes run in invoker mode on the test thread. Every node applies one numbered sequence, each entry
//! checked in order and content; nothing here asserts on time.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use quorumcast::StateMachine;
use quorumcast::SyncPolicy;
use quorumcast::{Member, Node, NodeBuilder, NodeError, StorageConfig};
use quorumcast_consensus::consensus_core::Role;
use quorumcast_consensus::consensus_core::Timers;
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_testkit::cluster::{members, message, test_builder, test_channel, Driver};
use quorumcast_testkit::{dump, patient_timers, ScratchDir};

fn builder(scratch: &ScratchDir, id: i32, members: &[Member], storage: StorageConfig) -> NodeBuilder {
    test_builder(scratch, id, members, test_channel()).term_buffer_length(1 << 20).storage(storage).timers(timers(id))
}

/// The tests here are about the recorded log, not elections, and each names member 0 its leader. Member
/// 0 stands at start and keeps the harness's patient timers; the others wait a minute before they stand,
/// so that a start-up stall of member 0's threads (seconds, on a loaded 2-core machine) cannot hand the
/// first election to another member, which the tests would wait for member 0 in vain.
fn timers(id: i32) -> Timers {
    let patient = patient_timers();
    match id {
        0 => patient,
        _ => Timers { election_timeout_min_ns: 60_000_000_000, election_timeout_max_ns: 90_000_000_000, ..patient },
    }
}

fn start_all(scratch: &ScratchDir, members: &[Member], storage: &StorageConfig) -> Vec<Node> {
    (0..3).map(|id| builder(scratch, id, members, storage.clone()).start().expect("node starts")).collect()
}

/// Invokes `nodes` until member 0 leads and the others follow it, applying nothing (the tests check every
/// entry from the first).
fn elect(nodes: &mut [Node]) {
    let until = Instant::now() + Duration::from_secs(60);
    while !(nodes[0].role() == Role::Leader && nodes.iter().all(|n| n.leader_id() == Some(0))) {
        assert!(Instant::now() < until, "no leader elected\n{}", dump(nodes));
        let work: usize = nodes.iter_mut().map(|n| n.invoke().unwrap()).sum();
        if work == 0 {
            std::thread::yield_now();
        }
    }
}

fn storage(sync: SyncPolicy) -> StorageConfig {
    StorageConfig { sync, segment_length: 256 << 10, ..StorageConfig::default() }
}

#[test]
fn a_cluster_stopped_whole_replays_its_recorded_log_and_goes_on() {
    for sync in [SyncPolicy::None, SyncPolicy::Batch] {
        let scratch = ScratchDir::new(&format!("durable-restart-{sync}"));
        let members = members(3);
        let storage = storage(sync);
        let mut nodes = start_all(&scratch, &members, &storage);
        elect(&mut nodes);
        let mut driver = Driver::checked(3);
        driver.run_to(&mut nodes, &[true; 3], 3_000, Duration::from_secs(120));
        let recorded = nodes[1].stats().recorder().position();
        assert!(recorded > 0, "{sync}: the follower records\n{}", dump(&nodes));
        if sync == SyncPolicy::Batch {
            assert!(nodes[0].stats().recorder().fsyncs() > 0, "batch syncs");
            assert!(nodes[0].stats().recorder().synced_position() > 0);
        }
        for node in nodes {
            node.close().unwrap();
        }

        // Started again from the data directories: each node replays the recording from position 0 (the
        // driver checks every entry from sequence 0 again, in order), then goes on with new entries.
        let mut nodes = start_all(&scratch, &members, &storage);
        elect(&mut nodes);
        (0..3).for_each(|i| driver.resume(i, 0));
        driver.run_to(&mut nodes, &[true; 3], 5_000, Duration::from_secs(120));
        assert!(nodes.iter().all(|n| n.recording_error().is_none()));
        eprintln!(
            "{sync}: replayed and went on to 5000; leader recorded {} bytes, {} fsyncs",
            nodes[0].stats().recorder().bytes(),
            nodes[0].stats().recorder().fsyncs()
        );
        for node in nodes {
            node.close().unwrap();
        }
    }
}

/// The application of the snapshot test: the next sequence number it expects and a digest of what it
/// applied; its snapshot is both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Sequence {
    next: u64,
    digest: u64,
}

impl StateMachine for Sequence {
    fn apply(&mut self, _position: i64, entry: &[u8]) {
        let seq = u64::from_le_bytes(entry[..8].try_into().expect("a numbered message"));
        assert_eq!(seq, self.next, "applied out of order");
        assert!(entry == message(seq).as_slice(), "entry {seq} corrupted");
        self.next += 1;
        self.digest = self.digest.rotate_left(5) ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
        writer.write_all(&self.next.to_le_bytes())?;
        writer.write_all(&self.digest.to_le_bytes())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
        let mut bytes = [0u8; 16];
        reader.read_exact(&mut bytes)?;
        self.next = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        self.digest = u64::from_le_bytes(bytes[8..].try_into().unwrap());
        Ok(())
    }
}

/// Offers through member 0 and applies on every node into its state machine until all reach `target`.
fn run_states(nodes: &mut [Node], states: &mut [Sequence], offered: &mut u64, target: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while states.iter().any(|s| s.next < target) {
        if Instant::now() >= deadline {
            let failures: Vec<_> = nodes
                .iter()
                .map(|n| (n.failures(), n.recording_error().map(|e| e.to_string()), n.applied_position()))
                .collect();
            panic!("stalled: {states:?}\nfailures: {failures:?}\n{}", dump(nodes));
        }
        let client = nodes[0].client();
        while *offered < target && client.offer(&message(*offered)).is_ok() {
            *offered += 1;
            if *offered % 256 == 0 {
                break;
            }
        }
        let mut work = 0;
        for (node, state) in nodes.iter_mut().zip(states.iter_mut()) {
            work += node.invoke().unwrap();
            work += node.poll_state(state, 4096).unwrap();
        }
        if work == 0 {
            std::thread::yield_now();
        }
    }
}

#[test]
fn snapshots_restore_the_state_and_the_log_below_them_is_deleted() {
    let scratch = ScratchDir::new("durable-snapshots");
    let members = members(3);
    let storage = StorageConfig {
        segment_length: 64 << 10,
        snapshot_interval: Some(256 << 10),
        snapshots_kept: 2,
        ..StorageConfig::default()
    };
    let mut nodes = start_all(&scratch, &members, &storage);
    let mut states = vec![Sequence::default(); 3];
    for (node, state) in nodes.iter_mut().zip(states.iter_mut()) {
        assert_eq!(node.restore(state).unwrap(), None, "a new member has no snapshot");
    }
    elect(&mut nodes);
    let mut offered = 0;
    run_states(&mut nodes, &mut states, &mut offered, 20_000);
    for node in &nodes {
        let stats = node.stats();
        let recorder = stats.recorder();
        assert!(recorder.segments_deleted() > 0, "member {}: segments below the snapshots go", node.id());
        assert!(recorder.start_position() > 0);
        // What `qc-cluster describe` reads: the applied position and the newest snapshot's, as counters.
        assert_eq!(stats.state().applied_position(), node.applied_position());
        assert!(stats.state().snapshot_position() >= recorder.start_position(), "{:?}", stats.state());
    }
    for node in nodes {
        node.close().unwrap();
    }

    // Each member restores its newest snapshot, replays the rest of its recording and goes on.
    let mut nodes = start_all(&scratch, &members, &storage);
    let mut restored = vec![Sequence::default(); 3];
    for (node, state) in nodes.iter_mut().zip(restored.iter_mut()) {
        let position = node.restore(state).unwrap().expect("a snapshot");
        assert!(position > 0 && state.next > 0, "restored at {position}: {state:?}");
        let stats = node.stats();
        assert_eq!((stats.state().snapshot_position(), stats.state().applied_position()), (position, position));
    }
    elect(&mut nodes);
    run_states(&mut nodes, &mut restored, &mut offered, 25_000);
    assert!(restored.iter().all(|s| s == &restored[0]), "the members' states differ: {restored:?}");
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn a_torn_segment_end_is_cut_at_start_and_a_damaged_index_stops_the_node_naming_it() {
    let scratch = ScratchDir::new("durable-torn");
    let members = members(3);
    let storage = storage(SyncPolicy::None);
    let mut nodes = start_all(&scratch, &members, &storage);
    elect(&mut nodes);
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &[true; 3], 2_000, Duration::from_secs(120));
    for node in nodes {
        node.close().unwrap();
    }
    // Member 2's last segment gets a torn block: half of a block header at its end.
    let recording = scratch.join("data-2").join("recording");
    let mut segments: Vec<_> = std::fs::read_dir(&recording)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rec"))
        .collect();
    segments.sort();
    let last = segments.last().expect("segments");
    let mut file = std::fs::OpenOptions::new().append(true).open(last).unwrap();
    file.write_all(&[0x71, 0x63, 0x62, 0x6b, 0x40, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(file);

    let mut nodes = start_all(&scratch, &members, &storage);
    assert!(nodes[2].warnings().iter().any(|w| w.contains("torn")), "the cut is reported: {:?}", nodes[2].warnings());
    assert_eq!(nodes[2].stats().recorder().torn_bytes(), 11);
    elect(&mut nodes);
    (0..3).for_each(|i| driver.resume(i, 0));
    driver.run_to(&mut nodes, &[true; 3], 3_000, Duration::from_secs(120));
    for node in nodes {
        node.close().unwrap();
    }

    // A flipped byte in member 1's index: it refuses to start, naming the file and what to do.
    let index = scratch.join("data-1").join("recording").join("index.dat");
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(&index, bytes).unwrap();
    let error = builder(&scratch, 1, &members, storage.clone()).start().unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, NodeError::Recording(_)), "{text}");
    assert!(text.contains("index.dat") && text.contains("delete index.dat"), "{text}");
}

/// Small terms (the leader holds about 3 x 64 KiB of log in memory) and dedicated agent threads that park
/// when idle: a catch-up blocks the recorder of the member that makes it, so the leader must not be
/// driven by the same thread.
fn far_builder(scratch: &ScratchDir, id: i32, members: &[Member], storage: StorageConfig) -> NodeBuilder {
    builder(scratch, id, members, storage)
        .term_buffer_length(64 << 10)
        .threading(quorumcast_driver::agent::ThreadingMode::Dedicated)
        .idle_all("backoff:10,5,1us,100us")
}

/// Member 2 of a cluster of `builder`s stops while the others commit far past what the leader holds in
/// memory (2 MiB of log or so), then starts again from its data directory: it replays its own recording,
/// is told it is behind the leader's logs in memory, fetches the rest from the leader's recording, and
/// joins the live log. `meanwhile` runs before it starts again, and what it returns is held until the
/// cluster has gone on past the catch-up.
fn catch_up_far_behind<R>(
    builder: impl Fn(i32) -> NodeBuilder,
    meanwhile: impl FnOnce(&[Node]) -> R,
) -> (Vec<Node>, R) {
    let start = |id: i32| builder(id).start().expect("node starts");
    let mut nodes: Vec<Node> = (0..3).map(start).collect();
    elect(&mut nodes);
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &[true; 3], 1_000, Duration::from_secs(120));
    let stopped = nodes.pop().unwrap();
    stopped.close().unwrap();
    let mut two: Vec<Node> = nodes;
    driver.run_to(&mut two, &[true; 2], 20_000, Duration::from_secs(120));
    let held = meanwhile(&two);
    two.push(start(2));
    driver.resume(2, 0);
    driver.run_to(&mut two, &[true; 3], 25_000, Duration::from_secs(120));
    let stats = two[2].stats();
    assert!(stats.receiver().behind_retained_received() > 0, "it was behind: {}", dump(&two));
    assert!(stats.recorder().catch_ups() >= 1, "it caught up from the leader's recording: {}", dump(&two));
    assert!(two[0].stats().recorder().catch_ups_served() >= 1);
    assert!(two[2].stats().recorder().position() >= two[0].stats().recorder().position() - (256 << 10));
    (two, held)
}

/// A catch-up hello (the first message of the catch-up protocol) naming `member_id` of `membership`.
fn catch_up_hello(membership: i64, member_id: i32) -> [u8; 40] {
    let mut hello = [0u8; 40];
    hello[..8].copy_from_slice(b"qccuhel2");
    hello[8..16].copy_from_slice(&membership.to_le_bytes());
    hello[16..20].copy_from_slice(&member_id.to_le_bytes());
    hello[24..].copy_from_slice(&[7; 16]);
    hello
}

/// Reads from `stream` until the leader closes it (or 30 s pass); the bytes read.
fn read_to_close(stream: &mut std::net::TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut all = Vec::new();
    let _ = stream.read_to_end(&mut all);
    all
}

fn membership_of(members: &[Member]) -> i64 {
    quorumcast_driver::media::channel::membership_tag(&members.iter().map(|m| (m.id, m.log)).collect::<Vec<_>>())
}

#[test]
fn a_follower_further_behind_than_the_leader_holds_in_memory_catches_up_from_its_recording() {
    let scratch = ScratchDir::new("durable-catch-up-log");
    let members = members(3);
    let storage = storage(SyncPolicy::None);
    let (two, ()) = catch_up_far_behind(|id| far_builder(&scratch, id, &members, storage.clone()), |_| ());
    // A hello of another cluster is refused with no answer, and counted; the leader goes on.
    let mut stream = std::net::TcpStream::connect(members[0].consensus).unwrap();
    stream.write_all(&catch_up_hello(12345, 2)).unwrap();
    assert!(read_to_close(&mut stream).is_empty(), "a hello of another cluster has no answer");
    // So is one naming a member that is not at its address, or this member itself.
    for id in [0, 7] {
        let mut stream = std::net::TcpStream::connect(members[0].consensus).unwrap();
        stream.write_all(&catch_up_hello(membership_of(&members), id)).unwrap();
        assert!(read_to_close(&mut stream).is_empty(), "a hello naming member {id} has no answer");
    }
    assert!(two[0].stats().recorder().catch_ups_refused() >= 3);
    for node in two {
        node.close().unwrap();
    }
}

#[test]
fn held_and_unproven_catch_up_connections_time_out_and_never_block_a_real_catch_up() {
    let scratch = ScratchDir::new("durable-catch-up-held");
    let members = members(3);
    let storage = storage(SyncPolicy::None);
    let leader = members[0].consensus;
    let (two, held) = catch_up_far_behind(
        |id| far_builder(&scratch, id, &members, storage.clone()),
        |_| {
            // Eight connections that say nothing, and eight that start a hello and stop, from a member's
            // address (everything here is on loopback): held while member 2 catches up.
            let mut held: Vec<std::net::TcpStream> =
                (0..8).map(|_| std::net::TcpStream::connect(leader).unwrap()).collect();
            for _ in 0..8 {
                let mut stream = std::net::TcpStream::connect(leader).unwrap();
                stream.write_all(&catch_up_hello(membership_of(&members), 2)[..20]).unwrap();
                held.push(stream);
            }
            held
        },
    );
    // They are closed by the leader, once their handshake time runs out, and counted.
    for mut stream in held {
        assert!(read_to_close(&mut stream).is_empty(), "an unproven connection is sent nothing");
    }
    assert!(two[0].stats().recorder().catch_ups_timed_out() >= 16, "{}", dump(&two));
    for node in two {
        node.close().unwrap();
    }
}

#[test]
fn with_an_auth_key_a_process_on_a_members_address_cannot_read_the_log() {
    let scratch = ScratchDir::new("durable-catch-up-keyed");
    let members = members(3);
    let storage = storage(SyncPolicy::None);
    let key = AuthKey::generate().unwrap();
    let leader = members[0].consensus;
    let membership = membership_of(&members);
    let (two, stolen) = catch_up_far_behind(
        |id| far_builder(&scratch, id, &members, storage.clone()).auth_key(key),
        |_| {
            // A process on member 2's address (loopback) that knows the public member list, not the key:
            // it says hello as member 2, is challenged, and answers with the proof it can compute (the
            // one a cluster without a key would take).
            let mut stream = std::net::TcpStream::connect(leader).unwrap();
            let hello = catch_up_hello(membership, 2);
            stream.write_all(&hello).unwrap();
            let mut challenge = [0u8; 48];
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            stream.read_exact(&mut challenge).unwrap();
            assert_eq!(&challenge[..8], b"qccuchl2", "a member's address is challenged");
            let public = AuthKey::derive("quorumcast catch-up key (public)", &membership.to_le_bytes());
            let mut request = [0u8; 48];
            request[..8].copy_from_slice(b"qccureq2");
            request[8..16].copy_from_slice(&membership.to_le_bytes());
            request[16..20].copy_from_slice(&2i32.to_le_bytes());
            let m = membership.to_le_bytes();
            let proof =
                public.keyed_hash(&[b"follower", &m, &2i32.to_le_bytes(), &hello[24..], &challenge[16..32], &[0; 8]]);
            request[32..].copy_from_slice(&proof[..16]);
            stream.write_all(&request).unwrap();
            read_to_close(&mut stream)
        },
    );
    assert!(stolen.is_empty(), "a process without the key read {} bytes of the catch-up", stolen.len());
    assert!(two[0].stats().recorder().catch_ups_refused() >= 1);
    for node in two {
        node.close().unwrap();
    }
}

#[test]
fn a_follower_behind_the_leaders_recording_catches_up_from_its_snapshot() {
    let scratch = ScratchDir::new("durable-catch-up-snapshot");
    let members = members(3);
    let storage = StorageConfig {
        segment_length: 64 << 10,
        snapshot_interval: Some(128 << 10),
        snapshots_kept: 1,
        ..StorageConfig::default()
    };
    let start = |id: i32| far_builder(&scratch, id, &members, storage.clone()).start().expect("node starts");
    let mut nodes: Vec<Node> = (0..3).map(start).collect();
    let mut states = vec![Sequence::default(); 3];
    elect(&mut nodes);
    let mut offered = 0;
    run_states(&mut nodes, &mut states, &mut offered, 1_000);
    let stopped = nodes.pop().unwrap();
    stopped.close().unwrap();
    let mut stopped_state = states.pop().unwrap();
    run_states(&mut nodes, &mut states, &mut offered, 20_000);
    assert!(nodes[0].stats().recorder().start_position() > 0, "the leader's recording was compacted");
    // Back: behind the leader's recording, it is sent the leader's snapshot, loads it, and goes on.
    nodes.push(start(2));
    nodes[2].restore(&mut stopped_state).unwrap();
    states.push(stopped_state);
    run_states(&mut nodes, &mut states, &mut offered, 25_000);
    assert!(states.iter().all(|s| s == &states[0]), "the members' states differ: {states:?}");
    let installed = nodes[2].stats().recorder().start_position();
    assert!(installed > 0, "member 2's recording starts at the leader's snapshot it was sent");
    for node in nodes {
        node.close().unwrap();
    }
}

#[test]
fn a_second_node_on_a_data_directory_in_use_is_refused_naming_it() {
    let scratch = ScratchDir::new("durable-data-lock");
    let members = members(3);
    let storage = storage(SyncPolicy::None);
    let running = builder(&scratch, 0, &members, storage.clone()).start().expect("node starts");
    // Another node directory, the same data directory: refused before it reads or repairs anything there.
    let error = builder(&scratch, 0, &members, storage.clone()).directory(scratch.join("node-0-again")).start();
    let text = error.expect_err("a second node on the same data directory").to_string();
    assert!(text.contains(scratch.join("data-0").to_str().unwrap()) && text.contains("in use"), "{text}");
    running.close().unwrap();
    // Released when the node closes: it starts again there.
    builder(&scratch, 0, &members, storage).start().expect("starts again").close().unwrap();
}
