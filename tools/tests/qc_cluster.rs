//! The built `qc-cluster` binary: `describe` against node directories laid out as three members' would be,
//! `recovery-plan` against the data directory a real node wrote (whole, then with a torn tail).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumcast::StateMachine;
use quorumcast::{Node, StorageConfig};
use quorumcast_driver::shm::counters::{Counter, CountersManager, COUNTERS_FILE_NAME};
use quorumcast_driver::shm::directory::{NodeDirectory, StalePolicy};
use quorumcast_driver::shm::stats::{kinds, CounterKind, CATALOGUE};
use quorumcast_testkit::cluster::{elect, members, test_builder, test_channel, Driver};
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
    use quorumcast::{LocalOfferError, Node};
    use quorumcast_consensus::consensus_core::Role;
    use quorumcast_driver::agent::ThreadingMode;
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
    let (ok, text) = qc_cluster(&["describe", "--json", "--window-ms", "1"], &dirs[3..]);
    let view: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert!(ok && view["members"][0]["configuration_id"] == 3, "three changes made: {text}");

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

/// Administration over the network: `--connect` to the members' consensus endpoints with the operator key;
/// a wrong key gets no answer, and a member without an operator key says it takes none this way.
#[test]
fn qc_cluster_administers_over_the_network_with_the_operator_key_only() {
    use quorumcast::{LocalOfferError, Node};
    use quorumcast_consensus::consensus_core::Role;
    use quorumcast_driver::agent::ThreadingMode;
    use quorumcast_driver::media::auth::AuthKey;
    use quorumcast_testkit::cluster::{members, test_builder, test_channel};
    use quorumcast_testkit::wait_until;
    use std::time::Duration;

    let scratch = ScratchDir::new("qc-cluster-remote");
    let all = members(3);
    let key = AuthKey::generate().unwrap();
    let start = |id: i32| -> Node {
        let builder = test_builder(&scratch, id, &all, test_channel())
            .threading(ThreadingMode::Dedicated)
            .idle_all("backoff:10,5,1us,100us");
        // Member 2 has no operator key: it takes commands only through its directory.
        let builder = if id == 2 { builder } else { builder.admin_key(key) };
        builder.start().unwrap()
    };
    let mut nodes: Vec<Node> = (0..3).map(start).collect();
    wait_until("member 0 leads", Duration::from_secs(60), || nodes[0].role() == Role::Leader);
    let key_file = scratch.path().join("admin.key");
    std::fs::write(&key_file, key.to_hex()).unwrap();
    let wrong_file = scratch.path().join("wrong.key");
    std::fs::write(&wrong_file, AuthKey::generate().unwrap().to_hex()).unwrap();
    let spawn = |args: &[&str], endpoints: &[usize], key: &Path| -> std::process::Child {
        let mut all_args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for &i in endpoints {
            all_args.extend(["--connect".to_string(), all[i].consensus.to_string()]);
        }
        all_args.extend(["--admin-key-file".to_string(), key.to_str().unwrap().to_string()]);
        let piped = std::process::Stdio::piped;
        Command::new(env!("CARGO_BIN_EXE_qc-cluster")).args(&all_args).stdout(piped()).stderr(piped()).spawn().unwrap()
    };
    let finished = |child: std::process::Child| -> (bool, String) {
        let output = child.wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), text)
    };
    let run = |args: &[&str], endpoints: &[usize], key: &Path| finished(spawn(args, endpoints, key));

    // Described while the leader commits (offered and applied here): the lag in time needs a commit rate.
    let mut describing = spawn(&["describe", "--json", "--window-ms", "300"], &[0, 1], &key_file);
    while describing.try_wait().unwrap().is_none() {
        let _ = nodes[0].client().offer(b"while described");
        for node in nodes.iter_mut() {
            node.poll_committed(64, |_| {});
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (ok, text) = finished(describing);
    assert!(ok, "{text}");
    let view: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let members = view["members"].as_array().unwrap();
    let roles: Vec<&str> = members.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["leader", "follower"], "{text}");
    assert_eq!(view["members"][1]["leader"], 0, "{text}");
    assert!(members[0]["applied_position"].as_i64().is_some_and(|a| a > 0), "the leader applied: {text}");
    assert_eq!(members[0]["snapshot_position"], 0, "no snapshot taken: {text}");
    assert!(members.iter().all(|m| m["lag_ms"].as_f64().is_some()), "the leader committed in the window: {text}");

    let (ok, text) = run(&["suspend"], &[0, 1], &key_file);
    assert!(ok && text.contains("member 0 takes no client entries"), "{text}");
    assert_eq!(nodes[0].client().offer(b"while suspended"), Err(LocalOfferError::Suspended));
    let (ok, text) = run(&["resume"], &[1, 0], &key_file);
    assert!(ok, "{text}");
    nodes[0].client().offer_and_wait(b"after", Duration::from_secs(30)).unwrap();
    let (ok, text) = run(&["transfer-leadership", "--to", "1"], &[0, 1], &key_file);
    assert!(ok && text.contains("member 1 leads"), "{text}");

    // Another key: the members drop the requests unanswered.
    let (ok, text) = run(&["suspend", "--timeout-ms", "300"], &[0], &wrong_file);
    assert!(!ok && text.contains("no answer"), "{text}");
    // No operator key on member 2: refused, saying why.
    let (ok, text) = run(&["snapshot"], &[2], &key_file);
    assert!(!ok && text.contains("no operator key"), "{text}");
    for node in nodes {
        node.close().unwrap();
    }
}

/// A state machine that counts its entries' bytes: something to snapshot.
#[derive(Default)]
struct Bytes(u64);

impl StateMachine for Bytes {
    fn apply(&mut self, _position: i64, entry: &[u8]) {
        self.0 += entry.len() as u64;
    }
    fn take_snapshot(&mut self, writer: &mut dyn std::io::Write) -> std::io::Result<()> {
        writer.write_all(&self.0.to_le_bytes())
    }
    fn load_snapshot(&mut self, reader: &mut dyn std::io::Read) -> std::io::Result<()> {
        let mut bytes = [0; 8];
        reader.read_exact(&mut bytes)?;
        self.0 = u64::from_le_bytes(bytes);
        Ok(())
    }
}

/// Every file under `dir` (recursively) with its length and content hash, in path order.
fn fingerprint(dir: &Path) -> Vec<(std::path::PathBuf, u64, String)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let mut hash = quorumcast_testkit::Fnv1a64::new();
                hash.update(&bytes);
                files.push((path, bytes.len() as u64, format!("{:016x}", hash.value())));
            }
        }
    }
    files.sort();
    files
}

fn recovery_plan(data_dir: &Path) -> (Option<i32>, serde_json::Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_qc-cluster"))
        .args(["recovery-plan", "--json", "--data-dir", data_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null), stderr)
}

#[test]
fn recovery_plan_reads_a_stopped_members_data_directory_and_changes_nothing() {
    let scratch = ScratchDir::new("qc-cluster-recovery-plan");
    let members = members(3);
    let storage = StorageConfig { segment_length: 64 << 10, ..StorageConfig::default() };
    let builder =
        |id| test_builder(&scratch, id, &members, test_channel()).term_buffer_length(1 << 20).storage(storage.clone());
    let mut nodes: Vec<Node> = (0..3).map(|id| builder(id).start().expect("node starts")).collect();
    elect(&mut nodes, 0, Duration::from_secs(60));
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &[true; 3], 1_500, Duration::from_secs(120));
    let snapshot = nodes[2].take_snapshot(&mut Bytes::default()).unwrap();
    driver.run_to(&mut nodes, &[true; 3], 2_000, Duration::from_secs(120));
    let data_dir = scratch.join("data-2");

    // A running member's directory is refused: its files change under a reader.
    let (code, _, stderr) = recovery_plan(&data_dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("running") && stderr.contains(data_dir.to_str().unwrap()), "{stderr}");

    let term = nodes[2].leadership_term_id();
    for node in nodes {
        node.close().unwrap();
    }
    let before = fingerprint(&data_dir);
    let (code, plan, stderr) = recovery_plan(&data_dir);
    assert_eq!(fingerprint(&data_dir), before, "recovery-plan changes nothing");
    assert_eq!(code, Some(0), "{plan}{stderr}");
    assert_eq!((&plan["vote"]["member_id"], &plan["restart_term"]), (&2.into(), &term.into()), "{plan}");
    let recording = &plan["recording"];
    let segments = recording["segments"].as_array().unwrap();
    // The snapshot let the recorder delete the segments below it: the recording starts past 0.
    let start = recording["start_position"].as_i64().unwrap();
    assert!(!segments.is_empty() && start > 0 && start <= snapshot.position, "{plan}");
    assert_eq!(segments[0]["base_position"].as_i64(), Some(start));
    assert!(segments.iter().all(|s| s["damage"].is_null() && s["fate"] == "kept" && s["blocks"].as_u64() > Some(0)));
    let end = recording["end_position"].as_i64().unwrap();
    assert_eq!(segments.last().unwrap()["end_position"].as_i64(), Some(end));
    assert_eq!((&recording["torn_bytes"], &recording["index_format"]), (&0.into(), &"qcidx002".into()));
    assert_eq!(plan["snapshots"]["newest_verified"]["position"].as_i64(), Some(snapshot.position), "{plan}");
    assert_eq!(plan["replay_from"].as_i64(), Some(snapshot.position));
    assert_eq!(plan["replay_bytes"].as_i64(), Some(end - snapshot.position));
    assert_eq!((plan["restart_position"].as_i64(), plan["catch_up_from"].as_i64()), (Some(end), Some(end)));
    assert_eq!((&plan["refusals"], &plan["notes"]), (&serde_json::json!([]), &serde_json::json!([])), "{plan}");

    // A torn last block (half a block header, as a crash mid-write leaves): the plan says what is cut.
    let last = std::path::PathBuf::from(segments.last().unwrap()["file"].as_str().unwrap());
    let mut file = std::fs::OpenOptions::new().append(true).open(&last).unwrap();
    std::io::Write::write_all(&mut file, &[0x71, 0x63, 0x62, 0x34, 0x40, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(file);
    let before = fingerprint(&data_dir);
    let (code, torn, stderr) = recovery_plan(&data_dir);
    assert_eq!(fingerprint(&data_dir), before, "recovery-plan cuts nothing itself");
    assert_eq!(code, Some(0), "{torn}{stderr}");
    assert_eq!((torn["recording"]["torn_bytes"].as_u64(), torn["restart_position"].as_i64()), (Some(11), Some(end)));
    let segment = torn["recording"]["segments"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(segment["bytes_past_damage"].as_u64(), Some(11), "{segment}");
    // The text names the file and the bytes cut.
    let text = Command::new(env!("CARGO_BIN_EXE_qc-cluster"))
        .args(["recovery-plan", "--data-dir", data_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("restart cuts 11 bytes") && text.contains(last.to_str().unwrap()), "{text}");

    // What the node then does at its start is what the plan said.
    let restarted = builder(2).start().expect("member 2 starts again");
    let stats = restarted.stats();
    assert_eq!((stats.recorder().torn_bytes(), stats.recorder().position()), (11, end));
    restarted.close().unwrap();

    // A damaged index: the plan's refusal (exit status 3) is the error the node stops with.
    let index = scratch.join("data-1").join("recording").join("index.dat");
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(&index, bytes).unwrap();
    let (code, refused, stderr) = recovery_plan(&scratch.join("data-1"));
    assert_eq!(code, Some(3), "{refused}{stderr}");
    let error = builder(1).start().expect_err("a damaged index stops the node").to_string();
    assert!(error.contains(refused["refusals"][0].as_str().unwrap()), "{error}\n{refused}");
}
