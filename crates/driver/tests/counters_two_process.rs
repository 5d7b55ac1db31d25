//! A counters file written by this process and read by another: the child sees every label and sees
//! the values rise while the parent increments them.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use quorumcast_driver::shm::counters::{CountersManager, CountersReader, TYPE_AGENT_WORK, TYPE_SYSTEM};
use quorumcast_testkit::ScratchDir;

/// Env var carrying the counters file's path to the child.
const CHILD_FILE_VAR: &str = "QC_TEST_CHILD_COUNTERS_FILE";
/// Labels the parent allocates, the last one multi-byte UTF-8 and as long as allowed.
const LABELS: [&str; 3] = ["bytes sent", "agent work: sender", "é-label"];
/// How long either side waits for the other before failing.
const PATIENCE: Duration = Duration::from_secs(30);

/// Child side: opens the file, checks labels and owner, and waits for every value to rise twice.
#[test]
fn child_reads_counters_from_another_process() {
    let Some(path) = std::env::var_os(CHILD_FILE_VAR) else {
        return;
    };
    let reader = CountersReader::open(PathBuf::from(path)).unwrap();
    let parent = std::os::unix::process::parent_id();
    assert_eq!(reader.pid(), parent, "the header names the writer");
    let labels: Vec<String> = reader.snapshot().into_iter().map(|c| c.label).collect();
    assert_eq!(labels, LABELS);
    let types: Vec<i32> = reader.snapshot().into_iter().map(|c| c.type_id).collect();
    assert_eq!(types, [TYPE_SYSTEM, TYPE_AGENT_WORK, 1000]);
    let deadline = Instant::now() + PATIENCE;
    for label in LABELS {
        let mut last = reader.find(label).unwrap();
        for _ in 0..2 {
            loop {
                let now = reader.find(label).unwrap();
                assert!(now >= last, "{label} went backwards: {last} then {now}");
                if now > last {
                    last = now;
                    break;
                }
                assert!(Instant::now() < deadline, "{label} stayed at {last}");
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[test]
fn another_process_sees_labels_and_rising_values() {
    let dir = ScratchDir::new("counters-two-process");
    let path = dir.join("counters.dat");
    let manager = CountersManager::create(&path, 8).unwrap();
    let counters: Vec<_> = LABELS
        .iter()
        .zip([TYPE_SYSTEM, TYPE_AGENT_WORK, 1000])
        .map(|(label, type_id)| manager.allocate(label, type_id).unwrap())
        .collect();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_reads_counters_from_another_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_FILE_VAR, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        for counter in &counters {
            counter.increment();
        }
        thread::sleep(Duration::from_millis(1));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "child failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let child_output = String::from_utf8_lossy(&output.stdout);
    assert!(child_output.contains("1 passed"), "the child ran no test:\n{child_output}");
}
