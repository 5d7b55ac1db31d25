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

/// Runs `qc-cluster` with `args` and the members' directories; its exit status and output.
fn qc_cluster(args: &[&str], dirs: &[std::path::PathBuf]) -> (bool, String) {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for dir in dirs {
        all.extend(["--dir".to_string(), dir.to_str().unwrap().to_string()]);
    }
    let output = Command::new(env!("CARGO_BIN_EXE_qc-cluster")).args(&all).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// The leader `describe --json` names.
fn leader_of(dirs: &[std::path::PathBuf]) -> Option<i64> {
    let (ok, text) = qc_cluster(&["describe", "--json", "--window-ms", "1"], dirs);
    assert!(ok, "{text}");
    let view: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let members = view["members"].as_array().unwrap().clone();
    members.iter().find(|m| m["role"] == "leader").and_then(|m| m["member_id"].as_i64())
}

#[test]
fn qc_cluster_changes_a_running_clusters_members_and_hands_over_its_leadership() {
    use quorumcast::agent::ThreadingMode;
    use quorumcast::cluster::consensus_core::Role;
    use quorumcast::node::{LocalOfferError, Node};
    use quorumcast_testkit::cluster::{members, test_builder, test_channel};
    use quorumcast_testkit::wait_until;
    use std::time::Duration;

    let scratch = ScratchDir::new("qc-cluster-admin");
    let all = members(4);
    let start = |id: i32| -> Node {
        let known = if id == 3 { &all[..] } else { &all[..3] };
        test_builder(&scratch, id, known, test_channel())
            .initial_members(vec![0, 1, 2])
            .threading(ThreadingMode::Dedicated)
            .idle_all("backoff:10,5,1us,100us")
            .start()
            .unwrap()
    };
    let nodes: Vec<Node> = (0..4).map(start).collect();
    let dirs: Vec<_> = nodes.iter().map(|n| n.directory().unwrap().to_path_buf()).collect();
    let three = &dirs[..3];
    wait_until("member 0 leads", Duration::from_secs(60), || nodes[0].role() == Role::Leader);
    let client = nodes[0].client();
    client.offer_and_wait(b"before", Duration::from_secs(30)).unwrap();

    let (log, consensus, client) = (all[3].log.to_string(), all[3].consensus.to_string(), all[3].client.to_string());
    let add = ["add-member", "--id", "3", "--log", &log, "--consensus", &consensus, "--client", &client];
    let (ok, text) = qc_cluster(&add, three);
    assert!(ok && text.contains("learners [3] committed"), "{text}");
    let (ok, text) = qc_cluster(&add, three);
    assert!(!ok && text.contains("member 3 is already a member"), "a second add is refused, naming why: {text}");
    let (ok, text) = qc_cluster(&["promote", "--id", "3"], three);
    assert!(ok && text.contains("voters [0, 1, 2, 3]"), "{text}");
    let (ok, text) = qc_cluster(&["transfer-leadership", "--to", "3"], &dirs);
    assert!(ok && text.contains("member 3 leads"), "{text}");
    assert_eq!(leader_of(&dirs), Some(3));
    let (ok, text) = qc_cluster(&["remove-member", "--id", "0"], &dirs);
    assert!(ok && text.contains("voters [1, 2, 3]"), "{text}");

    let (ok, text) = qc_cluster(&["suspend"], &dirs);
    assert!(ok, "{text}");
    assert_eq!(nodes[3].client().offer(b"while suspended"), Err(LocalOfferError::Suspended));
    let (ok, text) = qc_cluster(&["resume"], &dirs);
    assert!(ok, "{text}");
    nodes[3].client().offer_and_wait(b"after", Duration::from_secs(30)).unwrap();
    let (ok, text) = qc_cluster(&["snapshot"], &dirs[1..]);
    assert!(ok && text.matches("takes a snapshot").count() == 3, "every member given is asked: {text}");
    for node in nodes {
        node.close().unwrap();
    }
}
