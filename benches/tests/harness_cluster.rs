//! The one cluster harness: its load (numbered messages, checked), its bounded driving loop, and the
//! measuring cluster in the cluster bench's split layout (the leader on the calling thread, the followers
//! on a thread of their own), with a follower paused and resumed.
//!
//! Nothing busy-spins: the harness threads yield when a cycle found no work.

use std::time::Duration;

use quorumcast_bench::sweep::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use quorumcast_testkit::load::{derived_message, drive_until, Messages};

#[test]
fn messages_are_numbered_and_checked_byte_for_byte() {
    let mut buffer = Vec::new();
    Messages::Fixed(64).write(7, &mut buffer);
    assert_eq!(buffer.len(), 64);
    assert!(Messages::Fixed(64).is_intact(7, &buffer));
    assert!(!Messages::Fixed(64).is_intact(8, &buffer), "another number");
    assert!(!Messages::Fixed(64).is_intact(7, &buffer[..63]), "another length");

    for seq in [0, 1, 50, 51, 499, 500, 12_345] {
        Messages::Derived.write(seq, &mut buffer);
        assert_eq!(buffer, derived_message(seq));
        assert!(Messages::Derived.is_intact(seq, &buffer));
        let mut flipped = buffer.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(!Messages::Derived.is_intact(seq, &flipped), "message {seq}: a flipped byte is seen");
    }
    assert_eq!(derived_message(500).len(), 3000, "one in 500 is fragmented at any MTU the tests use");
}

#[test]
fn the_driving_loop_ends_when_done_fails_with_its_cycle_and_times_out_naming_what() {
    let mut cycles = 0;
    drive_until("three cycles", Duration::from_secs(60), &mut cycles, |c| {
        *c += 1;
        Ok((*c < 3).then_some(1))
    })
    .unwrap();
    assert_eq!(cycles, 3);
    let failed = drive_until("never", Duration::from_secs(60), &mut (), |_| Err::<Option<usize>, _>("broken".into()));
    assert_eq!(failed.unwrap_err(), "broken");
    let timed_out = drive_until("the impossible", Duration::ZERO, &mut (), |_| Ok(Some(0)));
    assert!(timed_out.unwrap_err().contains("the impossible"));
}

#[test]
fn the_split_layout_commits_with_a_follower_paused_and_catches_it_up() {
    let spec = ClusterSpec::new(1408, 64, Layout::split(false));
    on_harness_thread(|| {
        let mut cluster = LoadCluster::start(&spec)?;
        let offer = |cluster: &mut LoadCluster, target: u64| -> Result<(), _> {
            while cluster.offered() < target {
                if !cluster.offer()? {
                    cluster.cycle(|_| {});
                }
            }
            cluster.drain(Duration::from_secs(60))
        };
        offer(&mut cluster, 2_000)?;
        assert_eq!(cluster.applied(), [2_000; 3]);

        // Member 2 stops: the leader and member 1 commit without it.
        cluster.pause_member(2, true)?;
        let behind = cluster.applied()[2];
        while cluster.offered() < 4_000 || cluster.committed() < 4_000 {
            if cluster.offered() < 4_000 {
                cluster.offer()?;
            }
            cluster.cycle(|_| {});
        }
        assert_eq!(cluster.applied()[2], behind, "a paused member applies nothing");
        // Back: it catches up with every message, in order.
        cluster.pause_member(2, false)?;
        cluster.drain(Duration::from_secs(60))?;
        assert_eq!(cluster.applied(), [4_000; 3]);
        assert!(cluster.pause_member(0, true).is_err(), "the leader cannot be paused");
        let stats = cluster.stats();
        assert!(stats[2].receiver().images() >= 1, "the followers' counters are read from their files");
        cluster.close()
    })
    .unwrap();
}
