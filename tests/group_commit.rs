//! The recorder's group commit on its committer thread (`batch`): whatever it published as synced is on the
//! disk after a power loss at any moment, across segment rolls, and a failing sync stops the recorder
//! without publishing what it did not make durable.
//!
//! The recording is on the node simulator's disk, which keeps only what was synced (and a drawn prefix of
//! the rest, torn) when the power goes; the committer runs on its own thread, the recorder on the test's.
//! Nothing here asserts on time: each check holds whatever the two threads' interleaving was.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumcast::unstable::recording::{
    Recorder, RecorderCounters, RecorderSource, Recording, RecordingConfig, RecordingIdentity, SyncPolicy,
};
use quorumcast_consensus::log_switch::SwitchQueue;
use quorumcast_driver::agent::Agent;
use quorumcast_driver::shm::counters::Counter;
use quorumcast_driver::shm::log_buffer::{LogBuffer, LogConfig};
use quorumcast_testkit::sim::disk::{DiskFaults, SimDisk};

const IDENTITY: RecordingIdentity = RecordingIdentity { membership: 7, stream_id: 1001, term_length: 1 << 20 };

fn config() -> RecordingConfig {
    // Small segments: a run rolls many times.
    RecordingConfig {
        dir: Path::new("/data/recording").to_path_buf(),
        segment_length: 8 << 10,
        sync: SyncPolicy::Batch,
        page_cache_window: Some(8 << 20),
    }
}

/// A recorder with its committer thread, recording `log` on `disk`.
fn recorder(disk: &SimDisk, log: &LogBuffer) -> (Recorder, RecorderCounters) {
    let (recording, _) = Recording::open_on(disk.process(), config(), IDENTITY).expect("the recording opens");
    let switches = Arc::new(SwitchQueue::default());
    let consumer = log.register_consumer(0).expect("a consumer slot");
    switches.push(0, Some(RecorderSource { log: log.clone(), consumer }));
    let counters = RecorderCounters::detached();
    let recorder = Recorder::new(recording, switches, counters.clone(), Counter::detached())
        .with_group_commit_thread()
        .expect("the committer starts");
    (recorder, counters)
}

/// Bytes of each message, and of its frame (a 32-byte header, aligned to 32).
const MESSAGE: usize = 200;
const FRAME: usize = 256;

fn log() -> LogBuffer {
    LogBuffer::create_anonymous(LogConfig { stream_id: 1001, ..LogConfig::new(1 << 20, 1408) }).expect("a log")
}

/// Invokes `recorder` until its committer has synced all it wrote (yielding to it; a minute at most).
fn settle(recorder: &mut Recorder, counters: &RecorderCounters) {
    let until = Instant::now() + Duration::from_secs(60);
    while counters.synced_position.get() < counters.position.get() {
        assert!(Instant::now() < until, "the committer syncs");
        recorder.do_work().expect("the recorder works");
        std::thread::yield_now();
    }
}

/// Runs `seed`'s schedule: messages appended a few at a time, the recorder invoked between, the power lost
/// at a drawn cycle; the synced position read just before must be within what survived, byte for byte.
fn power_loss_keeps_what_was_synced(seed: u64) {
    let disk = SimDisk::new(seed);
    let log = log();
    let mut appender = log.appender().expect("the appender");
    appender.set_limit(i64::MAX);
    let (mut recorder, counters) = recorder(&disk, &log);
    let cut_at = 50 + (seed * 7919 % 400) as usize;
    let mut synced = 0;
    let mut values = Vec::new();
    for cycle in 0..cut_at {
        for i in 0..(1 + cycle % 5) {
            values.push((cycle + i) as u8);
            appender.append(&[(cycle + i) as u8; MESSAGE]).expect("room in the log");
        }
        recorder.do_work().expect("the recorder works");
        if cycle % 4 == 0 {
            // Now and then the committer is let catch up (else a fast recorder may outrun it to the end).
            settle(&mut recorder, &counters);
        }
        let now = counters.synced_position.get();
        assert!(now >= synced, "the synced position only rises: {synced} then {now}");
        assert!(now <= counters.position.get(), "synced {now} is past what was written");
        synced = now;
    }
    assert!(counters.fsyncs.get() > 0, "seed {seed}: the committer synced");
    disk.power_loss();
    drop(recorder);
    let (recording, _) = Recording::open_on(disk.process(), config(), IDENTITY).expect("the recording opens again");
    assert!(recording.end() >= synced, "seed {seed}: synced {synced} but {} survived", recording.end());
    let mut reader = recording.reader(0);
    let mut position = 0;
    while let Some((at, block, end)) = reader.next_block(recording.end()).expect("what survived reads back") {
        assert_eq!(at, position);
        for (i, frame) in block.chunks_exact(FRAME).enumerate() {
            let value = values[at as usize / FRAME + i];
            assert!(frame[32..32 + MESSAGE].iter().all(|&b| b == value), "seed {seed}: the frame at {at} + {i}");
        }
        position = end;
    }
    assert!(recording.segment_count() > 1 || synced < 8 << 10, "seed {seed}: the run rolled segments");
}

#[test]
fn what_the_committer_publishes_as_synced_survives_a_power_loss() {
    for seed in 1..=40 {
        power_loss_keeps_what_was_synced(seed);
    }
}

#[test]
fn a_failing_sync_stops_the_recorder_and_publishes_nothing_past_the_last_good_one() {
    for seed in 1..=10 {
        let disk = SimDisk::new(seed);
        let log = log();
        let mut appender = log.appender().expect("the appender");
        appender.set_limit(i64::MAX);
        let (mut recorder, counters) = recorder(&disk, &log);
        let mut synced = 0;
        let mut failed = None;
        let until = Instant::now() + Duration::from_secs(60);
        for cycle in 0.. {
            assert!(Instant::now() < until, "seed {seed}: a sync failed and the recorder said so");
            if cycle == 20 {
                disk.set_faults(DiskFaults { sync_error: 0.2, ..DiskFaults::default() });
            }
            // The log keeps growing (a little ahead of the recorder, never a term's worth) until a sync
            // fails: a run whose few syncs all succeeded would otherwise wait for one that never comes (on a
            // loaded host the committer batches more, and syncs less often).
            if appender.position() - counters.position.get() < 256 << 10 {
                appender.append(&[cycle as u8; 300]).expect("room in the log");
            }
            std::thread::yield_now();
            match recorder.do_work() {
                Ok(_) => synced = counters.synced_position.get(),
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        assert!(failed.is_some_and(|why| why.contains("sync")), "seed {seed}: the recorder said why");
        disk.set_faults(DiskFaults::default());
        disk.power_loss();
        drop(recorder);
        let (recording, _) = Recording::open_on(disk.process(), config(), IDENTITY).expect("it opens again");
        assert!(recording.end() >= synced, "seed {seed}: synced {synced} but {} survived", recording.end());
    }
}
