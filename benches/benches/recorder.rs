//! The recorder alone: the CPU time it takes per byte it records (its thread's, from
//! `CLOCK_THREAD_CPUTIME_ID` around each duty cycle: user and system, the copy into the page cache
//! included), for a log that grows by a given amount between two of its duty cycles. A figure that the
//! sharing of the cores moves little, unlike a rate.
//!
//! `cargo bench --bench recorder` (a few seconds). One thread appends 128-byte messages to a log buffer
//! and invokes a recorder (sync `none`, a fresh recording under `<target>/recorder-data`, removed after)
//! after every `step` bytes; each row records 256 MiB. Steps: 2 KiB (a moderate load, written look by
//! look), 24 KiB (what the cluster bench's recorders found per look at MTU 1408), 320 KiB (at 8192).
//! Reported per row: CPU ns per byte recorded, bytes per write call, and from the recorder's counters the
//! wall time per byte in checksums and in write calls. `target/recorder/latest/summary.json`.

use std::sync::Arc;
use std::time::Instant;

use quorumcast::unstable::recording::{
    Recorder, RecorderCounters, RecorderSource, Recording, RecordingConfig, RecordingIdentity, SyncPolicy,
};
use quorumcast::StorageConfig;
use quorumcast_bench::bench::{host, target_dir, write_summary};
use quorumcast_consensus::log_switch::SwitchQueue;
use quorumcast_driver::agent::clock::NanoClock;
use quorumcast_driver::agent::Agent;
use quorumcast_driver::shm::counters::Counter;
use quorumcast_driver::shm::log_buffer::{LogBuffer, LogConfig};
use serde_json::json;

const MESSAGE: usize = 128;
const TERM_LENGTH: usize = 16 << 20;
const TOTAL: u64 = 256 << 20;
const STEPS: [usize; 3] = [2 << 10, 24 << 10, 320 << 10];

/// This thread's CPU time, nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec it is given and touches nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// What one row measured.
struct Row {
    step: usize,
    bytes: u64,
    cpu_ns_per_byte: f64,
    bytes_per_write: f64,
    checksum_ns_per_byte: f64,
    write_ns_per_byte: f64,
    seconds: f64,
}

fn run(step: usize, index: usize) -> Row {
    let dir = target_dir().join("recorder-data").join(format!("{}-{index}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let identity = RecordingIdentity { membership: 1, stream_id: 1001, term_length: TERM_LENGTH as u32 };
    let config = RecordingConfig {
        dir: dir.clone(),
        segment_length: 128 << 20,
        sync: SyncPolicy::None,
        page_cache_window: StorageConfig::default().page_cache_window,
    };
    let (recording, _) = Recording::open(config, identity).expect("a recording");
    let log =
        LogBuffer::create_anonymous(LogConfig { stream_id: 1001, ..LogConfig::new(TERM_LENGTH, 1408) }).expect("a log");
    let mut appender = log.appender().expect("the appender");
    appender.set_limit(i64::MAX);
    let switches = Arc::new(SwitchQueue::default());
    let consumer = log.register_consumer(0).expect("a consumer slot");
    switches.push(0, Some(RecorderSource { log: log.clone(), consumer }));
    let counters = RecorderCounters::detached();
    let mut recorder = Recorder::new(recording, switches, counters.clone(), Counter::detached())
        .with_write_coalescing(NanoClock::new());
    let message = [7u8; MESSAGE];
    let frame = (MESSAGE + 32).next_multiple_of(32);
    let (mut cpu, mut appended) = (0u64, 0u64);
    let started = Instant::now();
    while (counters.position.get() as u64) < TOTAL {
        if appended < TOTAL {
            for _ in 0..step / frame {
                appender.append(&message).expect("room in the log");
                appended += frame as u64;
            }
        }
        let before = thread_cpu_ns();
        recorder.do_work().expect("the recorder records");
        cpu += thread_cpu_ns() - before;
    }
    let seconds = started.elapsed().as_secs_f64();
    recorder.on_close();
    drop(recorder);
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = counters.bytes.get().max(1) as f64;
    Row {
        step,
        bytes: bytes as u64,
        cpu_ns_per_byte: cpu as f64 / bytes,
        bytes_per_write: bytes / counters.writes.get().max(1) as f64,
        checksum_ns_per_byte: counters.checksum_ns.get() as f64 / bytes,
        write_ns_per_byte: counters.write_ns.get() as f64 / bytes,
        seconds,
    }
}

fn main() {
    println!("recorder bench: {MESSAGE} B messages, sync none, {} MiB per row", TOTAL >> 20);
    println!();
    println!("| log growth per duty cycle | CPU ns/B recorded | B per write call | checksum ns/B (wall) | write calls ns/B (wall) |");
    println!("|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for (index, &step) in STEPS.iter().enumerate() {
        let row = run(step, index);
        println!(
            "| {} KiB | {:.3} | {:.0} | {:.3} | {:.3} |",
            row.step >> 10,
            row.cpu_ns_per_byte,
            row.bytes_per_write,
            row.checksum_ns_per_byte,
            row.write_ns_per_byte
        );
        rows.push(json!({
            "step_bytes": row.step,
            "bytes": row.bytes,
            "cpu_ns_per_byte": row.cpu_ns_per_byte,
            "bytes_per_write": row.bytes_per_write,
            "checksum_ns_per_byte": row.checksum_ns_per_byte,
            "write_ns_per_byte": row.write_ns_per_byte,
            "seconds": row.seconds,
        }));
    }
    let summary = json!({ "bench": "recorder", "host": host(), "message_bytes": MESSAGE, "rows": rows });
    match write_summary("recorder", &summary) {
        Ok(path) => println!("\nsummary: {}", path.display()),
        Err(e) => println!("\nsummary not written: {e}"),
    }
}
