//! The built `qc-cluster` binary against node directories laid out as three members' would be.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use quorumcast::shm::counters::{Counter, CountersManager, COUNTERS_FILE_NAME};
use quorumcast::shm::directory::{NodeDirectory, StalePolicy};
use quorumcast::shm::stats::{kinds, CounterKind, CATALOGUE};
use quorumcast_testkit::ScratchDir;

/// A member's directory with every catalogue counter, and the given election and consensus values.
fn member(path: &Path, id: i64, role: i64, leader: i64, commit: i64) -> (NodeDirectory, CountersManager, Counter) {
    let dir = NodeDirectory::create(path, StalePolicy::Refuse).unwrap();
    let manager = CountersManager::create(dir.file(COUNTERS_FILE_NAME), CATALOGUE.len()).unwrap();
    let value = |kind: &CounterKind| match kind.type_id {
        t if t == kinds::election::member_id.type_id => id,
        t if t == kinds::election::role.type_id => role,
        t if t == kinds::election::leader_member_id.type_id => leader,
        t if t == kinds::election::leadership_term.type_id => 4,
        t if t == kinds::consensus::commit_position.type_id => commit,
        t if t == kinds::state::applied_position.type_id => commit - 64 * (id + 1),
        t if t == kinds::state::snapshot_position.type_id => 4096 * (id + 1),
        _ => 0,
    };
    let mut commit_counter = None;
    for kind in CATALOGUE {
        let counter = manager.allocate(kind.label, kind.type_id).unwrap();
        counter.set(value(kind));
        if kind.type_id == kinds::consensus::commit_position.type_id {
            commit_counter = Some(counter);
        }
    }
    (dir, manager, commit_counter.unwrap())
}

#[test]
fn describe_lists_every_member_with_its_lag_behind_the_leader() {
    let scratch = ScratchDir::new("qc-cluster-describe");
    let paths: Vec<_> = (0..3).map(|i| scratch.join(format!("m{i}"))).collect();
    let leader = member(&paths[0], 0, 3, 0, 10_000);
    let _one = member(&paths[1], 1, 0, 0, 9_000);
    let _two = member(&paths[2], 2, 0, 0, 10_000);
    // The leader commits while qc-cluster reads, so a rate (and a lag in time) exists.
    let counter = leader.2.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
                counter.add(1);
            }
        })
    };
    let mut args = vec!["describe", "--json", "--window-ms", "50"];
    for path in &paths {
        args.extend(["--dir", path.to_str().unwrap()]);
    }
    let output = Command::new(env!("CARGO_BIN_EXE_qc-cluster")).args(&args).output().unwrap();
    stop.store(true, Ordering::Relaxed);
    committer.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let view: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let members = view["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!((&members[0]["role"], &members[0]["lag_bytes"]), (&"leader".into(), &0.into()));
    assert_eq!(
        (&members[1]["role"], &members[1]["leader"], &members[1]["leadership_term_id"]),
        (&"follower".into(), &0.into(), &4.into())
    );
    assert_eq!(
        (&members[1]["applied_position"], &members[1]["snapshot_position"]),
        (&(9_000 - 128).into(), &8192.into()),
        "each member's applied position and last snapshot, from its counters"
    );
    let leader_commit = members[0]["commit_position"].as_i64().unwrap();
    assert_eq!(members[1]["lag_bytes"].as_i64(), Some(leader_commit - 9_000));
    assert!(members[1]["lag_ms"].as_f64().is_some(), "the leader committed during the window: {view}");
    // A member that is not running is named.
    drop(_two);
    let output = Command::new(env!("CARGO_BIN_EXE_qc-cluster")).args(&args).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(paths[2].to_str().unwrap()), "{stderr}");
    drop(leader);
}
