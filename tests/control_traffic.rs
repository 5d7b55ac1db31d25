//! Commit frames follow the consensus duty cycle (the model's C).
//!
//! - With separate commit frames, the leader's consensus agent hands the Sender one commit frame on each
//!   duty cycle in which the commit position moved, and on no other (the commit heartbeat is set far beyond
//!   the test, so after warm-up there are no heartbeats to count): checked cycle by cycle in invoker mode.
//! - With the commit piggybacked, a commit frame goes out only on a cycle that moved the commit and
//!   appended nothing: under a continuous load that is far fewer frames than separate frames at the same
//!   load (counts, not times).
//! - With threads (dedicated mode, backoff, the default commit heartbeat), commit frames never outnumber
//!   consensus duty cycles.
//! - Followers apply every message, in order, in every case.
//!
//! Invoker-mode tests drive every node from the test thread; nothing busy-spins.

use std::time::{Duration, Instant};

use quorumcast::{LocalOfferError, Member, Node, NodeBuilder};
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_testkit::cluster::members;
use quorumcast_testkit::{dump, ScratchDir};

/// Messages offered after warm-up in the invoker tests.
const MESSAGES: u64 = 30_000;
/// Messages offered before each leader duty cycle: the ingress is never empty while the load runs.
const BURST: u64 = 16;

fn builder(
    scratch: &ScratchDir,
    id: i32,
    members: &[Member],
    piggyback: bool,
    threading: ThreadingMode,
) -> NodeBuilder {
    let channel = ChannelConfig {
        mtu: 1408,
        term_length: 1 << 20,
        receiver_window: 256 * 1024,
        status_interval: Duration::from_millis(10),
        ..ChannelConfig::default()
    };
    let mut config = NodeBuilder::new(id, members.to_vec())
        .leader(0)
        .directory(scratch.join(format!("node-{id}")))
        .data_dir(scratch.join(format!("data-{id}")))
        .clean_stale(true)
        .channel(channel)
        .threading(threading)
        .idle_all("backoff")
        .commit_piggyback(piggyback)
        .config()
        .clone();
    if threading == ThreadingMode::Invoker {
        // No heartbeat within an invoker test: every commit frame after warm-up is one of a moved commit.
        // (Driven from one thread, with every follower live from warm-up on, no frame is lost.) With
        // threads, a follower may become live after a commit frame went out and needs the heartbeat.
        config.commit_heartbeat = Duration::from_secs(3600);
    }
    NodeBuilder::from_config(config)
}

fn message(seq: u64) -> [u8; 64] {
    let mut m = [0u8; 64];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    m[8..].fill(seq as u8);
    m
}

/// Applies `node`'s committed entries, checking each is the next in sequence.
fn apply(node: &mut Node, next: &mut u64) -> usize {
    node.poll_committed(4096, |entry| {
        assert_eq!(entry, message(*next).as_slice(), "node applied out of order or corrupted");
        *next += 1;
    })
}

/// The id of the counter labelled `label` on `node`.
fn counter_id(node: &Node, label: &str) -> i32 {
    let mut found = None;
    node.counters().reader().for_each(|id, _, l, _| {
        if l == label && found.is_none() {
            found = Some(id);
        }
    });
    found.unwrap_or_else(|| panic!("no counter `{label}`"))
}

fn value(node: &Node, id: i32) -> i64 {
    node.counters().reader().value(id).expect("an allocated counter")
}

/// What the leader's duty cycles did while the load ran.
#[derive(Debug, Default)]
struct Cycles {
    /// Leader duty cycles.
    cycles: u64,
    /// Cycles in which the commit position moved.
    moved: u64,
    /// Cycles that appended at least one message.
    appending: u64,
    /// Commit frames handed to the Sender.
    frames: u64,
}

/// Starts three invoker-mode nodes, commits one message everywhere (warm-up, which sends the first commit
/// frame), then offers `MESSAGES` more in bursts before each leader cycle and drives every node until all
/// applied everything, checking each leader cycle with `check(commit moved, messages appended, frames,
/// commit position after the cycle)`.
fn run_invoker(test: &str, piggyback: bool, mut check: impl FnMut(bool, i64, i64, i64)) -> Cycles {
    let members = members(3);
    let scratch = ScratchDir::new(test);
    let mut nodes: Vec<Node> =
        (0..3).map(|id| builder(&scratch, id, &members, piggyback, ThreadingMode::Invoker).start().unwrap()).collect();
    let client = nodes[0].client();
    let frames_id = counter_id(&nodes[0], "consensus commit frames");
    let appended_id = counter_id(&nodes[0], "consensus messages appended");
    let mut applied = [0u64; 3];
    let mut offered = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    let drive_all = |nodes: &mut [Node], applied: &mut [u64; 3]| {
        for node in nodes.iter_mut() {
            node.invoke().unwrap();
        }
        for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
            apply(node, next);
        }
    };
    // Warm-up: every follower has its image (made off the receive loop) before the first offer, so the one
    // commit frame of the warm-up reaches every follower.
    while nodes[1..].iter().any(|n| n.stats().receiver().images() < 1) {
        assert!(Instant::now() < deadline, "the followers never made their images");
        drive_all(&mut nodes, &mut applied);
        std::thread::yield_now();
    }
    client.offer(&message(0)).unwrap();
    offered += 1;
    while applied.iter().any(|&a| a < 1) {
        assert!(Instant::now() < deadline, "warm-up stalled: applied {applied:?}");
        drive_all(&mut nodes, &mut applied);
        std::thread::yield_now();
    }
    let total = offered + MESSAGES;
    let mut cycles = Cycles::default();
    while applied.iter().any(|&a| a < total) {
        assert!(Instant::now() < deadline, "stalled: offered {offered}, applied {applied:?}");
        let burst_end = (offered + BURST).min(total);
        while offered < burst_end {
            match client.offer(&message(offered)) {
                Ok(_) => offered += 1,
                Err(LocalOfferError::BackPressured) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let (commit, frames, appended) =
            (nodes[0].commit_position(), value(&nodes[0], frames_id), value(&nodes[0], appended_id));
        nodes[0].invoke().unwrap();
        let moved = nodes[0].commit_position() > commit;
        let new_frames = value(&nodes[0], frames_id) - frames;
        let new_appended = value(&nodes[0], appended_id) - appended;
        check(moved, new_appended, new_frames, nodes[0].commit_position());
        cycles.cycles += 1;
        cycles.moved += moved as u64;
        cycles.appending += (new_appended > 0) as u64;
        cycles.frames += new_frames as u64;
        for node in nodes[1..].iter_mut() {
            node.invoke().unwrap();
        }
        for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
            apply(node, next);
        }
    }
    assert_eq!(applied, [total; 3], "every node applied every message");
    let received: Vec<i64> =
        nodes[1..].iter().map(|n| n.counters().reader().find("receiver commit frames received").unwrap_or(0)).collect();
    let sent_total = value(&nodes[0], frames_id);
    for r in &received {
        assert!(*r <= sent_total, "a follower received {r} commit frames, more than the {sent_total} sent");
    }
    if !piggyback {
        assert!(received.iter().all(|&r| r > 0), "followers learn the commit from commit frames: {received:?}");
    }
    for node in nodes {
        node.close().unwrap();
    }
    cycles
}

#[test]
fn separate_commit_frames_go_out_exactly_on_cycles_where_the_commit_moved() {
    let cycles = run_invoker("separate", false, |moved, _, frames, _| {
        assert_eq!(frames, moved as i64, "one commit frame per cycle in which the commit moved, none otherwise");
    });
    assert_eq!(cycles.frames, cycles.moved);
    assert!(cycles.frames > 0 && cycles.frames <= cycles.cycles, "{cycles:?}");
    // While the Sender sends data it reads acknowledgements every few cycles (CONTROL_POLL_RATIO).
    assert!(cycles.moved * 10 > cycles.cycles, "the commit moved on many cycles while data flowed: {cycles:?}");
}

#[test]
fn piggybacked_commit_frames_go_out_only_on_cycles_that_appended_nothing_or_let_it_go_stale() {
    // The refresh distance is a quarter of the receiver window (256 KiB in `builder`).
    let refresh = 256 * 1024 / 4;
    let mut frame_commit = 0;
    let mut refreshes = 0;
    let cycles = run_invoker("piggyback", true, |moved, appended, frames, commit| {
        let stale = commit - frame_commit >= refresh;
        let expected = (moved && (appended == 0 || stale)) as i64;
        assert_eq!(
            frames, expected,
            "a commit frame only on a moved cycle that appended nothing or that took the commit {refresh} bytes \
             past the last frame's (appended {appended}, commit {commit}, last frame {frame_commit})"
        );
        if frames > 0 {
            refreshes += (appended > 0) as u64;
            frame_commit = commit;
        }
    });
    assert!(refreshes > 0, "30k messages of 64 B move the commit far past {refresh} bytes: {cycles:?}");
    assert!(cycles.appending > 1000, "{cycles:?}");
    assert!(cycles.frames <= cycles.cycles - cycles.appending + refreshes, "{cycles:?}");
}

#[test]
fn piggyback_sends_far_fewer_commit_frames_than_separate_frames_under_the_same_continuous_load() {
    let separate = run_invoker("compare-separate", false, |_, _, _, _| {});
    let piggyback = run_invoker("compare-piggyback", true, |_, _, _, _| {});
    assert!(
        piggyback.frames * 5 < separate.frames,
        "piggyback sent {} commit frames, separate {}: {piggyback:?} {separate:?}",
        piggyback.frames,
        separate.frames
    );
}

#[test]
fn with_threads_commit_frames_never_outnumber_consensus_duty_cycles() {
    for piggyback in [false, true] {
        let test = if piggyback { "threads-piggyback" } else { "threads-separate" };
        let members = members(3);
        let scratch = ScratchDir::new(test);
        // Followers first, and no offer until each has an image: a follower that misses the leader's
        // first SETUP joins the log where the leader's sender is when it answers a later one, and would
        // never see the messages before that.
        let start = |id| builder(&scratch, id, &members, piggyback, ThreadingMode::Dedicated).start().unwrap();
        let followers = [start(1), start(2)];
        let leader = start(0);
        let mut nodes: Vec<Node> = std::iter::once(leader).chain(followers).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while nodes[1..].iter().any(|n| n.counters().reader().find("receiver images").unwrap_or(0) < 1) {
            assert!(Instant::now() < deadline, "followers made no image ({test})\n{}", dump(&nodes));
            std::thread::yield_now();
        }
        let client = nodes[0].client();
        let total = 20_000u64;
        let (mut offered, mut applied) = (0u64, [0u64; 3]);
        while applied.iter().any(|&a| a < total) {
            assert!(
                Instant::now() < deadline,
                "stalled ({test}): offered {offered}, applied {applied:?}\n{}",
                dump(&nodes)
            );
            while offered < total && client.offer(&message(offered)).is_ok() {
                offered += 1;
            }
            let mut work = 0;
            for (node, next) in nodes.iter_mut().zip(applied.iter_mut()) {
                work += apply(node, next);
            }
            if work == 0 {
                std::thread::yield_now();
            }
        }
        let reader = nodes[0].counters().reader();
        let frames = reader.find("consensus commit frames").unwrap();
        let cycles = reader.find("consensus duty cycles").unwrap();
        let control = reader.find("sender control syscalls").unwrap();
        assert!(frames > 0, "commit frames were sent ({test})");
        assert!(frames <= cycles, "{frames} commit frames in {cycles} consensus duty cycles ({test})");
        assert!(
            control >= frames,
            "each commit frame costs the Sender control syscalls: {control} < {frames} ({test})"
        );
        for node in nodes {
            node.close().unwrap();
        }
    }
}
