//! IPC between two processes: the parent publishes a million messages of varying sizes (some fragmented)
//! into a log file; a child process (this test binary run again) subscribes and checks that every one
//! arrives, whole, once and in order, then sees the end of the stream.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use quorumcast_driver::media::ipc::{IpcOfferError, IpcPublication, IpcSubscription};
use quorumcast_driver::shm::log_buffer::LogConfig;
use quorumcast_testkit::ScratchDir;

/// Env var carrying the log file's path to the child.
const CHILD_LOG_VAR: &str = "QC_TEST_CHILD_IPC_LOG";
/// Messages the parent publishes.
const COUNT: u64 = 1_000_000;
/// Each message: sequence number (8 bytes), FNV-1a checksum of the rest (8 bytes), then a payload.
const HEADER: usize = 16;
/// How long either side waits for the other to make progress before failing (never hit when healthy).
const PATIENCE: Duration = Duration::from_secs(120);

/// Payload length of message `seq`: mostly 0..250 bytes, every 97th one 1500..3500 (fragmented at MTU 1408).
fn payload_length(seq: u64) -> usize {
    if seq % 97 == 0 {
        1500 + (seq as usize * 13) % 2000
    } else {
        (seq as usize * 7919) % 251
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Fills `buffer` with message `seq` and returns its length.
fn encode(seq: u64, buffer: &mut [u8]) -> usize {
    let length = HEADER + payload_length(seq);
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut buffer[HEADER..length] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let checksum = fnv1a(&buffer[HEADER..length]);
    buffer[..8].copy_from_slice(&seq.to_le_bytes());
    buffer[8..16].copy_from_slice(&checksum.to_le_bytes());
    length
}

/// Child side: subscribes and checks sequence, length and checksum of every message up to the end of stream.
#[test]
fn child_subscribes_and_checks_every_message() {
    let Some(path) = std::env::var_os(CHILD_LOG_VAR) else {
        return;
    };
    let mut sub = IpcSubscription::open(PathBuf::from(path)).unwrap();
    let mut expected = 0u64;
    let backoff = Backoff::new();
    let mut last_progress = Instant::now();
    while !sub.is_end_of_stream() {
        let read = sub.poll(
            |m| {
                assert!(m.len() >= HEADER, "message {expected} is {} bytes", m.len());
                let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
                assert_eq!(seq, expected, "out of order or lost");
                assert_eq!(m.len(), HEADER + payload_length(seq), "length of message {seq}");
                let checksum = u64::from_le_bytes(m[8..16].try_into().unwrap());
                assert_eq!(checksum, fnv1a(&m[HEADER..]), "checksum of message {seq}");
                expected += 1;
            },
            256,
        );
        if read > 0 {
            backoff.reset();
            last_progress = Instant::now();
        } else {
            assert!(last_progress.elapsed() < PATIENCE, "no message for {PATIENCE:?} after {expected}");
            backoff.snooze();
        }
    }
    assert_eq!(expected, COUNT, "every message arrived before the end of stream");
}

/// Kills the child if the parent fails first, so that no process is left behind.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl KillOnDrop {
    /// Fails the test if the child has exited already (it can only exit early by failing).
    fn check_alive(&mut self) {
        let child = self.0.as_mut().unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            let output = self.0.take().unwrap().wait_with_output().unwrap();
            panic!(
                "the child exited early with {status}:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

#[test]
fn a_million_messages_reach_another_process_in_order() {
    let dir = ScratchDir::new("ipc-two-process");
    let path = dir.join("ipc-1.log");
    let config = LogConfig { pre_touch: true, ..LogConfig::new(1 << 20, 1408) };
    let mut publication = IpcPublication::create(&path, config).unwrap();

    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_subscribes_and_checks_every_message", "--nocapture", "--test-threads=1"])
        .env(CHILD_LOG_VAR, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(Some(child));

    let mut buffer = vec![0u8; HEADER + 4096];
    let backoff = Backoff::new();
    let mut last_progress = Instant::now();
    for seq in 0..COUNT {
        let length = encode(seq, &mut buffer);
        loop {
            match publication.offer(&buffer[..length]) {
                Ok(_) => break,
                // Before the child subscribes, and whenever it falls half a term behind.
                Err(IpcOfferError::NotConnected | IpcOfferError::BackPressured) => {
                    if backoff.is_completed() {
                        child.check_alive();
                        assert!(last_progress.elapsed() < PATIENCE, "stuck at message {seq}");
                        std::thread::yield_now();
                    } else {
                        backoff.snooze();
                    }
                }
                Err(e) => panic!("offer {seq}: {e}"),
            }
        }
        backoff.reset();
        last_progress = Instant::now();
    }
    publication.close();

    let output = child.0.take().unwrap().wait_with_output().unwrap();
    let log = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the child failed:\n{log}");
    assert!(log.contains("child_subscribes_and_checks_every_message ... ok"), "the child ran its test:\n{log}");
    drop(publication);
}
