//! A 3-process cluster of `qc-node` binaries, started from the `tuning/` node files and the `small-host`
//! profile: the leader offers 100k messages; every process exits 0 after applying all of them, with the
//! digest of the exact sequence the leader generated. Also: a signal closes a node cleanly, and a file
//! with an unknown key is refused with the key named.
//!
//! The node files are copied to a temp dir with free ports in place of the fixed ones, and each node's
//! directory goes under the temp dir (`--directory`). The small-host profile never busy-spins, so three
//! processes fit on two cores.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use quorumcast_testkit::{free_loopback_port, Fnv1a64, ScratchDir};

const QC_NODE: &str = env!("CARGO_BIN_EXE_qc-node");
const MESSAGES: u64 = 100_000;
const MSG_SIZE: usize = 64;
/// Generous: the test machine may be shared with other builds; the run itself takes seconds.
const DEADLINE: Duration = Duration::from_secs(300);

/// The `qc-client` load client, a binary of `quorumcast-bench`: next to `qc-node`, where a workspace
/// `cargo test` builds it; built there once (by the cargo that built this test) when this crate's tests run
/// alone.
fn qc_client() -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(QC_NODE).parent().expect("qc-node in a profile directory");
        let binary = dir.join("qc-client");
        if !binary.exists() {
            let target_dir = dir.parent().expect("the profile directory in a target directory");
            let profile = match dir.file_name().and_then(|name| name.to_str()) {
                Some("debug") | None => "dev",
                Some(other) => other,
            };
            let status = Command::new(env!("CARGO"))
                .args(["build", "-p", "quorumcast-bench", "--bin", "qc-client", "--profile", profile, "--target-dir"])
                .arg(target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo runs");
            assert!(status.success(), "cargo build -p quorumcast-bench --bin qc-client failed: {status}");
        }
        binary
    })
}

fn tuning(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("tuning").join(path)
}

/// Copies of the tuning node files with the members' ports replaced by free ones; returns their paths.
fn node_files(scratch: &Path) -> Vec<PathBuf> {
    node_files_with(scratch, |_| {})
}

/// As [`node_files`], with remote clients taken at free client endpoints.
fn client_node_files(scratch: &Path) -> Vec<PathBuf> {
    let clients: Vec<u16> = (0..3).map(|_| free_loopback_port()).collect();
    // The key every member derives its sessions' ids and tokens from: the same on all three.
    let session_key = quorumcast_driver::media::auth::AuthKey::generate().unwrap().to_hex();
    node_files_with(scratch, |table| {
        for member in table["members"].as_array_mut().unwrap() {
            let member = member.as_table_mut().unwrap();
            let id = member["id"].as_integer().unwrap() as usize;
            member.insert("client".into(), format!("127.0.0.1:{}", clients[id]).into());
        }
        let mut section = toml::Table::new();
        section.insert("enabled".into(), true.into());
        section.insert("session_key".into(), session_key.clone().into());
        table.insert("clients".into(), section.into());
    })
}

/// Copies of the tuning node files with free ports, each changed by `edit`.
fn node_files_with(scratch: &Path, edit: impl Fn(&mut toml::Table)) -> Vec<PathBuf> {
    let ports: Vec<u16> = (0..3).map(|_| free_loopback_port()).collect();
    let consensus: Vec<u16> = (0..3).map(|_| free_loopback_port()).collect();
    (0..3)
        .map(|id| {
            let text = std::fs::read_to_string(tuning(&format!("cluster/node{id}.toml"))).unwrap();
            let mut table: toml::Table = text.parse().unwrap();
            let members = table["members"].as_array_mut().expect("the node file lists its members");
            assert_eq!(members.len(), 3);
            for member in members.iter_mut() {
                let member = member.as_table_mut().unwrap();
                let member_id = member["id"].as_integer().unwrap() as usize;
                member.insert("log".into(), format!("127.0.0.1:{}", ports[member_id]).into());
                member.insert("consensus".into(), format!("127.0.0.1:{}", consensus[member_id]).into());
            }
            edit(&mut table);
            let path = scratch.join(format!("node{id}.toml"));
            std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
            path
        })
        .collect()
}

/// A running qc-node whose output is collected by two reader threads.
struct Process {
    name: String,
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    status: Option<ExitStatus>,
}

impl Process {
    fn spawn(name: &str, args: &[&str]) -> Self {
        Self::spawn_binary(QC_NODE, name, args)
    }

    fn spawn_binary(binary: impl AsRef<std::ffi::OsStr>, name: &str, args: &[&str]) -> Self {
        let mut child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("qc-node starts");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        Self { name: name.into(), child, stdout, stderr, status: None }
    }

    /// Whether it has exited (and its status is kept).
    fn poll(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status.is_some()
    }

    /// Waits up to `deadline` for a line of stderr containing `text`.
    fn await_stderr(&mut self, text: &str, deadline: Instant) {
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains(text) => return,
                Ok(line) => seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!("{} never printed `{text}`; stderr so far:\n{}", self.name, seen.join("\n"));
    }

    /// Every line it printed to stdout, once it has exited: read until the pipe's end, which its reader
    /// thread may reach after the exit is seen (a client's last lines were missed on a loaded host).
    fn stdout_to_end(&self) -> Vec<String> {
        assert!(self.status.is_some(), "{} is still running", self.name);
        let mut out = Vec::new();
        loop {
            match self.stdout.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => out.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("{}: its stdout never ended", self.name),
            }
        }
    }

    fn all_stderr(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.poll() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn lines(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until every process has exited, or panics at the deadline (the processes are then killed by
/// their drop guards) with what each printed.
fn wait_all(processes: &mut [Process], deadline: Instant) {
    // Every process is polled each round (not `all`, which stops at the first still running), so that the
    // report says which ones exited.
    while processes.iter_mut().map(Process::poll).filter(|exited| !exited).count() > 0 {
        if Instant::now() >= deadline {
            let report: Vec<String> = processes
                .iter_mut()
                .map(|p| format!("--- {} (exited: {:?}):\n{}", p.name, p.status, p.all_stderr()))
                .collect();
            panic!("the cluster did not finish in time:\n{}", report.join("\n"));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The digest qc-node prints for the first `n` generated messages of `size` bytes: FNV-1a 64 over each
/// entry's length (4 bytes, little-endian) and bytes, in sequence order.
fn expected_digest(n: u64, size: usize) -> String {
    let mut digest = Fnv1a64::new();
    let mut message = vec![0u8; size];
    for seq in 0..n {
        message[..8].copy_from_slice(&seq.to_le_bytes());
        for (i, byte) in message.iter_mut().enumerate().skip(8) {
            *byte = (seq as usize).wrapping_mul(31).wrapping_add(i) as u8;
        }
        digest.update(&(size as u32).to_le_bytes());
        digest.update(&message);
    }
    format!("{:016x}", digest.value())
}

#[test]
fn three_processes_apply_100k_messages_with_the_same_digest() {
    let scratch = ScratchDir::new("node-proc-cluster");
    let files = node_files(scratch.path());
    let profile = tuning("profiles/small-host.toml");
    let deadline = Instant::now() + DEADLINE;
    let messages = MESSAGES.to_string();
    let msg_size = MSG_SIZE.to_string();
    let timeout = DEADLINE.as_secs().to_string();
    let mut processes: Vec<Process> = (0..3)
        .map(|id| {
            let dir = scratch.join(format!("dir{id}"));
            let data = scratch.join(format!("dir{id}-data"));
            let mut args = vec![
                "--config",
                files[id].to_str().unwrap(),
                "--profile",
                profile.to_str().unwrap(),
                "--directory",
                dir.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--expect",
                &messages,
                "--msg-size",
                &msg_size,
                "--timeout",
                &timeout,
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            if id == 0 {
                args.extend(["--offer".into(), messages.clone()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Process::spawn(&format!("node {id}"), &args)
        })
        .collect();
    wait_all(&mut processes, deadline);

    let expected = format!("applied {MESSAGES} digest {}", expected_digest(MESSAGES, MSG_SIZE));
    for (id, process) in processes.iter_mut().enumerate() {
        let status = process.status.unwrap();
        let stdout: Vec<String> = process.stdout_to_end().into_iter().filter(|l| l.starts_with("applied")).collect();
        assert!(status.success(), "node {id} exited with {status}:\n{}", process.all_stderr());
        assert_eq!(stdout, vec![expected.clone()], "node {id} applied a different sequence");
        assert!(!scratch.join(format!("dir{id}")).exists(), "node {id} left its directory behind");
    }
}

#[test]
fn a_signal_closes_the_node_and_removes_its_directory() {
    let scratch = ScratchDir::new("node-proc-signal");
    let files = node_files(scratch.path());
    let dir = scratch.join("dir1");
    let mut follower = Process::spawn(
        "node 1",
        &[
            "--config",
            files[1].to_str().unwrap(),
            "--profile",
            tuning("profiles/small-host.toml").to_str().unwrap(),
            "--directory",
            dir.to_str().unwrap(),
            "--data-dir",
            scratch.join("data").to_str().unwrap(),
        ],
    );
    follower.await_stderr("started as follower", Instant::now() + DEADLINE);
    assert!(dir.exists());
    let pid = follower.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    wait_all(std::slice::from_mut(&mut follower), Instant::now() + DEADLINE);
    let status = follower.status.unwrap();
    assert!(status.success(), "exited with {status}:\n{}", follower.all_stderr());
    assert!(!dir.exists(), "the node directory is still there after SIGTERM");
}

#[test]
fn an_unknown_key_is_refused_with_its_name() {
    let scratch = ScratchDir::new("node-proc-unknown-key");
    let file = scratch.join("node.toml");
    let text = std::fs::read_to_string(tuning("cluster/node0.toml")).unwrap();
    std::fs::write(&file, text.replace("[timers]", "[timers]\nnak_dealy = \"1ms\"")).unwrap();
    let output = Command::new(QC_NODE).args(["--config", file.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`nak_dealy`") && stderr.contains("node.toml"), "{stderr}");
}

/// Runs qc-node on node 0's file edited by `edit`; returns its exit code and standard error.
fn refused(name: &str, edit: impl Fn(&str) -> String) -> (Option<i32>, String, PathBuf) {
    let scratch = ScratchDir::new(name);
    let file = scratch.join("node.toml");
    let text = std::fs::read_to_string(tuning("cluster/node0.toml")).unwrap();
    std::fs::write(&file, edit(&text)).unwrap();
    let output = Command::new(QC_NODE)
        .args(["--config", file.to_str().unwrap(), "--directory"])
        .arg(scratch.join("dir"))
        .output()
        .unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned(), file)
}

#[test]
fn harmful_values_are_refused_naming_the_file_the_key_and_the_fix() {
    let cases: [(&str, &str, &str, &str); 4] = [
        ("receiver_timeout = \"2s\"", "receiver_timeout = \"0s\"", "[timers] receiver_timeout", "more than 0"),
        ("status_interval = \"10ms\"", "status_interval = \"0ns\"", "[timers] status_interval", "more than 0"),
        ("mtu = 8192", "mtu = 1400", "[channel] mtu", "multiple of 32"),
        (
            "term_buffer_length = \"16MiB\"",
            "term_buffer_length = 100000",
            "[channel] term_buffer_length",
            "power of two",
        ),
    ];
    for (from, to, key, rule) in cases {
        let (code, stderr, file) = refused("node-proc-harmful", |text| {
            assert!(text.contains(from), "node0.toml has `{from}`");
            text.replace(from, to)
        });
        assert_eq!(code, Some(2), "{to}: {stderr}");
        let named = stderr.contains(&file.display().to_string()) && stderr.contains(key) && stderr.contains(rule);
        assert!(named, "{to}: the message names the file, `{key}` and the rule: {stderr}");
    }
}

#[test]
fn an_endpoint_in_use_is_refused_naming_the_address() {
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let address = busy.local_addr().unwrap().to_string();
    let (code, stderr, _) = refused("node-proc-in-use", |text| {
        // Member 1's endpoint is already bound: node 1 cannot listen there.
        let mut table: toml::Table = text.parse().unwrap();
        table.insert("id".into(), 1.into());
        let members = table["members"].as_array_mut().unwrap();
        members[1].as_table_mut().unwrap().insert("log".into(), address.clone().into());
        toml::to_string(&table).unwrap()
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&address), "the bind error names {address}: {stderr}");
}

#[test]
fn every_node_file_with_every_profile_is_a_valid_config() {
    use quorumcast::NodeFile;
    use quorumcast_driver::agent::ThreadingMode;
    for profile in ["latency", "balanced", "small-host"] {
        for id in 0..3 {
            let node = NodeFile::load(tuning(&format!("cluster/node{id}.toml"))).unwrap();
            let merged = node.merge(NodeFile::load(tuning(&format!("profiles/{profile}.toml"))).unwrap());
            let busy_app = merged.application_idle().is_busy();
            let config = merged.into_config().unwrap_or_else(|e| panic!("node{id} + {profile}: {e}"));
            assert_eq!((config.id, config.leader, config.members.len()), (id, Some(0), 3));
            assert_eq!((config.channel.mtu, config.channel.term_length), (8192, 16 << 20));
            let busy = config.idle.iter().filter(|i| i.is_busy()).count();
            match profile {
                "latency" => {
                    assert_eq!((config.threading, busy, busy_app), (ThreadingMode::Dedicated, 3, true));
                    assert_eq!(config.timers, quorumcast_consensus::consensus_core::Timers::latency());
                }
                "balanced" => assert_eq!((config.threading, busy, busy_app), (ThreadingMode::Dedicated, 0, false)),
                _ => assert_eq!((config.threading, busy, busy_app), (ThreadingMode::Invoker, 0, false)),
            }
        }
    }
}

/// What one qc-node process printed on stdout so far: its checkpoints (applied count, digest) and its
/// role changes (role, term).
#[derive(Default)]
struct Progress {
    checkpoints: std::collections::BTreeMap<u64, String>,
    roles: Vec<(String, i64)>,
}

impl Progress {
    fn read(&mut self, process: &Process) {
        for line in process.stdout.try_iter() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["applied", n, "digest", digest] => {
                    self.checkpoints.insert(n.parse().unwrap(), digest.to_string());
                }
                ["role", role, "term", term, "leader", _] => self.roles.push((role.to_string(), term.parse().unwrap())),
                _ => {}
            }
        }
    }

    fn applied(&self) -> u64 {
        self.checkpoints.keys().next_back().copied().unwrap_or(0)
    }

    fn leads_after(&self, term: i64) -> Option<i64> {
        self.roles.iter().rev().find(|(role, t)| role == "leader" && *t > term).map(|(_, t)| *t)
    }
}

/// The arguments of a failover cluster member: it offers while it leads (20k messages a second) and prints
/// a checkpoint every 1000 entries.
fn failover_args(file: &Path, dir: &Path) -> Vec<String> {
    let profile = tuning("profiles/small-host.toml");
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let mut args: Vec<String> =
        ["--config", &path(file), "--profile", &path(&profile), "--directory", &path(dir)].map(String::from).to_vec();
    let mut data = dir.as_os_str().to_owned();
    data.push("-data");
    args.extend(["--data-dir".to_string(), path(Path::new(&data))]);
    let load = ["--offer", "1000000000", "--rate", "20000", "--in-flight", "20000", "--checkpoint", "1000"];
    args.extend(load.map(String::from));
    args.extend(["--timeout".to_string(), DEADLINE.as_secs().to_string()]);
    args
}

/// Spawns member `id` of the failover cluster (see [`failover_args`]).
fn failover_node(scratch: &ScratchDir, files: &[PathBuf], id: usize) -> Process {
    let args = failover_args(&files[id], &scratch.join(format!("dir{id}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::spawn(&format!("node {id}"), &args)
}

/// Reads every process's output until `done` holds; panics at the deadline with what each printed.
fn await_progress(
    processes: &mut [Option<Process>],
    progress: &mut [Progress],
    what: &str,
    mut done: impl FnMut(&[Progress]) -> bool,
) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        for (process, progress) in processes.iter().zip(progress.iter_mut()) {
            if let Some(process) = process {
                progress.read(process);
            }
        }
        if done(progress) {
            return;
        }
        let exited = processes.iter_mut().flatten().any(Process::poll);
        if exited || Instant::now() >= deadline {
            let report: Vec<String> = processes
                .iter_mut()
                .flatten()
                .zip(progress.iter())
                .map(|(p, g)| {
                    format!("--- {} applied {} roles {:?}:\n{}", p.name, g.applied(), g.roles, p.all_stderr())
                })
                .collect();
            panic!("{what}: not reached (a member exited: {exited})\n{}", report.join("\n"));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Every checkpoint `a` and `b` both reached has the same digest: they applied the same entries.
fn assert_same_prefix(a: &Progress, b: &Progress, what: &str) {
    let common: Vec<u64> = a.checkpoints.keys().filter(|n| b.checkpoints.contains_key(n)).copied().collect();
    assert!(!common.is_empty(), "{what}: no common checkpoint");
    for n in common {
        assert_eq!(a.checkpoints[&n], b.checkpoints[&n], "{what}: the first {n} entries differ");
    }
}

#[test]
fn killing_the_leader_process_elects_another_and_loses_no_committed_entry() {
    let scratch = ScratchDir::new("node-proc-failover");
    let files = node_files(scratch.path());
    let mut processes: Vec<Option<Process>> = (0..3).map(|id| Some(failover_node(&scratch, &files, id))).collect();
    let mut progress: Vec<Progress> = (0..3).map(|_| Progress::default()).collect();
    await_progress(&mut processes, &mut progress, "member 0 leads and all apply 5000", |p| {
        p[0].leads_after(0).is_some() && p.iter().all(|p| p.applied() >= 5_000)
    });
    let first_term = progress[0].leads_after(0).unwrap();

    // kill -9 the leader mid-stream. What it applied was committed: every member must apply the same.
    let mut leader = processes[0].take().unwrap();
    leader.child.kill().unwrap();
    leader.child.wait().unwrap();
    progress[0].read(&leader);
    let killed = std::mem::take(&mut progress[0]);
    let applied_at_kill = killed.applied();
    await_progress(&mut processes, &mut progress, "a new leader and 10000 more applied", |p| {
        p[1..].iter().any(|p| p.leads_after(first_term).is_some())
            && p[1..].iter().all(|p| p.applied() >= applied_at_kill + 10_000)
    });
    for (survivor, progress) in progress.iter().enumerate().skip(1) {
        assert_eq!(
            progress.checkpoints.get(&applied_at_kill),
            killed.checkpoints.get(&applied_at_kill),
            "member {survivor} lost or reordered entries the old leader had applied"
        );
        assert_same_prefix(progress, &killed, "survivor and killed leader");
    }
    assert_same_prefix(&progress[1], &progress[2], "the two survivors");
    let new_term = progress[1..].iter().filter_map(|p| p.leads_after(first_term)).max().unwrap();
    eprintln!("killed the leader of term {first_term} at {applied_at_kill} applied; term {new_term} goes on");

    // The old leader comes back, first with its directories kept (the term and vote it persisted), then
    // killed again and back with both removed: each time it follows and applies the same sequence.
    for clean in [false, true] {
        if clean {
            let mut again = processes[0].take().unwrap();
            again.child.kill().unwrap();
            again.child.wait().unwrap();
            std::fs::remove_dir_all(scratch.join("dir0")).unwrap();
            std::fs::remove_dir_all(scratch.join("dir0-data")).unwrap();
        }
        processes[0] = Some(failover_node(&scratch, &files, 0));
        progress[0] = Progress::default();
        if !clean {
            // Its process died with its log: it reads it back, votes and rejoins with it.
            let process = processes[0].as_mut().unwrap();
            process.await_stderr("recorded log recovered up to position", Instant::now() + DEADLINE);
        }
        let target = progress[1].applied().max(progress[2].applied()) + 5_000;
        await_progress(&mut processes, &mut progress, "the restarted member catches up", |p| {
            p.iter().all(|p| p.applied() >= target)
        });
        assert!(progress[0].roles.iter().any(|(role, _)| role == "follower"), "it rejoined as a follower");
        assert_same_prefix(&progress[0], &progress[1], "restarted member");
        assert_same_prefix(&progress[1], &progress[2], "the two others");
        let cut = processes[0].as_ref().unwrap().all_stderr().lines().filter(|l| l.contains("cut back")).count();
        eprintln!(
            "restarted member 0 (clean: {clean}) applied {} entries, the same; log truncations reported: {cut}",
            progress[0].applied()
        );
    }
    for process in processes.iter_mut().flatten() {
        let pid = process.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }
    let mut all: Vec<Process> = processes.into_iter().flatten().collect();
    wait_all(&mut all, Instant::now() + DEADLINE);
}

/// Three network namespaces on one bridge, each member in its own; removed on drop.
struct Namespaces {
    names: Vec<String>,
    bridge: String,
    /// The bridge-side end of each member's veth pair: setting it down cuts that member off.
    links: Vec<String>,
}

impl Namespaces {
    /// Makes the namespaces, or says why they cannot be made here.
    fn create() -> Result<Self, String> {
        let tag = std::process::id() % 100_000;
        let names: Vec<String> = (0..3).map(|i| format!("qc{tag}n{i}")).collect();
        let bridge = format!("qc{tag}br");
        let links: Vec<String> = (0..3).map(|i| format!("qc{tag}b{i}")).collect();
        let made = Self { names: names.clone(), bridge: bridge.clone(), links: links.clone() };
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..3 {
            let inside = format!("qc{tag}v{i}");
            ip(&["netns", "add", &names[i]])?;
            ip(&["link", "add", &inside, "type", "veth", "peer", "name", &links[i]])?;
            ip(&["link", "set", &inside, "netns", &names[i]])?;
            ip(&["link", "set", &links[i], "master", &bridge])?;
            ip(&["link", "set", &links[i], "up"])?;
            let address = format!("10.77.0.{}/24", i + 1);
            ip(&["netns", "exec", &names[i], "ip", "addr", "add", &address, "dev", &inside])?;
            ip(&["netns", "exec", &names[i], "ip", "link", "set", &inside, "up"])?;
            ip(&["netns", "exec", &names[i], "ip", "link", "set", "lo", "up"])?;
        }
        // A program must run inside them (some containers allow the namespaces but not entering them).
        let entered = Command::new("ip").args(["netns", "exec", &names[0], "true"]).status();
        if !entered.is_ok_and(|s| s.success()) {
            return Err(format!("cannot run a program in namespace {}", names[0]));
        }
        Ok(made)
    }

    fn set_link(&self, member: usize, up: bool) {
        ip(&["link", "set", &self.links[member], if up { "up" } else { "down" }]).expect("ip link set");
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = ip(&["netns", "del", name]);
        }
        for link in &self.links {
            let _ = ip(&["link", "del", link]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
    }
}

#[test]
fn a_partitioned_leader_cannot_commit_the_majority_goes_on_and_it_converges_when_the_links_return() {
    let namespaces = match Namespaces::create() {
        Ok(namespaces) => namespaces,
        Err(why) => {
            eprintln!("skipped: network namespaces cannot be made here: {why}");
            return;
        }
    };
    let scratch = ScratchDir::new("node-proc-partition");
    // The node files with each member on its own namespace's address.
    let files: Vec<PathBuf> = node_files(scratch.path());
    for path in &files {
        let mut table: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
        for member in table["members"].as_array_mut().unwrap() {
            let member = member.as_table_mut().unwrap();
            let host = format!("10.77.0.{}", member["id"].as_integer().unwrap() + 1);
            member.insert("log".into(), format!("{host}:40501").into());
            member.insert("consensus".into(), format!("{host}:40601").into());
        }
        // A veth carries 1500-byte frames: the MTU that fits them.
        table["channel"].as_table_mut().unwrap().insert("mtu".into(), 1408.into());
        std::fs::write(path, toml::to_string(&table).unwrap()).unwrap();
    }
    let spawn = |id: usize| {
        let mut args: Vec<String> =
            ["netns", "exec", namespaces.names[id].as_str(), QC_NODE].map(String::from).to_vec();
        args.extend(failover_args(&files[id], &scratch.join(format!("dir{id}"))));
        let mut child = Command::new("ip")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec qc-node starts");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        Process { name: format!("node {id}"), child, stdout, stderr, status: None }
    };
    let mut processes: Vec<Option<Process>> = (0..3).map(|id| Some(spawn(id))).collect();
    let mut progress: Vec<Progress> = (0..3).map(|_| Progress::default()).collect();
    await_progress(&mut processes, &mut progress, "member 0 leads and all apply 5000", |p| {
        p[0].leads_after(0).is_some() && p.iter().all(|p| p.applied() >= 5_000)
    });
    let first_term = progress[0].leads_after(0).unwrap();

    // Cut the leader off. The majority elects another and goes on; the old leader commits nothing more.
    namespaces.set_link(0, false);
    let cut = Instant::now();
    await_progress(&mut processes, &mut progress, "the majority elects and commits 10000 more", |p| {
        p[1..].iter().any(|p| p.leads_after(first_term).is_some()) && p[1].applied() >= p[0].applied() + 10_000
    });
    let minority = progress[0].applied();
    // Whatever it applied after the cut was committed before it (its last commit frames): give that a
    // moment to land, then it must stand still while cut off.
    thread::sleep(Duration::from_millis(500).saturating_sub(cut.elapsed()));
    progress[0].read(processes[0].as_ref().unwrap());
    let standing = progress[0].applied();
    thread::sleep(Duration::from_millis(1000));
    progress[0].read(processes[0].as_ref().unwrap());
    assert_eq!(progress[0].applied(), standing, "the cut-off leader committed without a majority");
    assert!(standing <= minority + 1_000, "it applied {standing} after the cut, {minority} at the majority's progress");

    // The links return: the old leader learns the newer term, steps down, and converges.
    namespaces.set_link(0, true);
    let target = progress[1].applied().max(progress[2].applied()) + 5_000;
    await_progress(&mut processes, &mut progress, "the old leader converges", |p| {
        p.iter().all(|p| p.applied() >= target)
    });
    let second_term = progress[1..].iter().filter_map(|p| p.leads_after(first_term)).max().unwrap();
    assert!(
        progress[0].roles.iter().any(|(role, term)| role == "follower" && *term >= second_term),
        "the old leader stepped down: {:?}",
        progress[0].roles
    );
    assert_same_prefix(&progress[0], &progress[1], "old leader after the partition");
    assert_same_prefix(&progress[1], &progress[2], "the majority");
    let cut: Vec<String> = processes[0]
        .as_ref()
        .unwrap()
        .all_stderr()
        .lines()
        .filter(|l| l.contains("cut back"))
        .map(String::from)
        .collect();
    eprintln!("partition: term {first_term} cut off at {standing} applied; term {second_term} went on; converged");
    eprintln!("partition: the old leader's truncations: {cut:?}");
    assert!(!cut.is_empty(), "the old leader appended offers while cut off: it must have cut them back");
    for process in processes.iter_mut().flatten() {
        let _ = process.child.kill();
    }
}

/// Kill -9 at random moments: each iteration kills one member (leader or follower, at random) of the
/// 3-process cluster under load, at a random moment, then starts it again from its data directory. After
/// every restart the restarted member, which replays its recorded log from position 0, applies the
/// same entries as the others (the same digest at every checkpoint), and nothing the killed process had
/// applied (committed) is missing from the survivors. `QC_KILL_SOAK=<iterations>` runs a soak (50 or
/// more); `cargo test` runs 3. The seed is printed (`QC_KILL_SEED` replays the choice of members and
/// moments, not the scheduling).
#[test]
fn killing_random_members_at_random_moments_loses_no_committed_entry() {
    let iterations: u64 = std::env::var("QC_KILL_SOAK").ok().map_or(3, |v| v.parse().expect("QC_KILL_SOAK=<n>"));
    let seed: u64 = std::env::var("QC_KILL_SEED").ok().map_or_else(
        || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
        |v| v.parse().expect("QC_KILL_SEED=<n>"),
    );
    eprintln!("kill soak: {iterations} iterations, seed {seed}");
    let mut rng = seed | 1;
    let mut next = move |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    };
    let scratch = ScratchDir::new("node-proc-kill-soak");
    let files = node_files(scratch.path());
    let mut processes: Vec<Option<Process>> = (0..3).map(|id| Some(failover_node(&scratch, &files, id))).collect();
    let mut progress: Vec<Progress> = (0..3).map(|_| Progress::default()).collect();
    await_progress(&mut processes, &mut progress, "a leader and all apply 2000", |p| {
        p.iter().any(|p| p.leads_after(0).is_some()) && p.iter().all(|p| p.applied() >= 2_000)
    });
    for iteration in 0..iterations {
        let victim = next(3) as usize;
        std::thread::sleep(Duration::from_millis(100 + next(1_400)));
        let mut process = processes[victim].take().unwrap();
        process.child.kill().unwrap();
        process.child.wait().unwrap();
        progress[victim].read(&process);
        let killed = std::mem::take(&mut progress[victim]);
        // What the killed process applied was committed: the survivors apply the same, past it.
        let target = killed.applied() + 2_000;
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        await_progress(&mut processes, &mut progress, "the survivors go past what the killed member applied", |p| {
            survivors.iter().all(|&i| p[i].applied() >= target)
        });
        for &i in &survivors {
            if killed.applied() > 0 {
                assert_same_prefix(
                    &progress[i],
                    &killed,
                    &format!("iteration {iteration}: survivor {i} and killed {victim}"),
                );
            }
        }
        // Back from its data directory: it replays its recording, rejoins and applies the same sequence.
        processes[victim] = Some(failover_node(&scratch, &files, victim));
        let target = progress.iter().map(Progress::applied).max().unwrap() + 2_000;
        await_progress(&mut processes, &mut progress, "the restarted member catches up", |p| {
            p.iter().all(|p| p.applied() >= target)
        });
        for i in 0..3 {
            for j in i + 1..3 {
                assert_same_prefix(&progress[i], &progress[j], &format!("iteration {iteration}: members {i} and {j}"));
            }
        }
        eprintln!(
            "iteration {iteration}: killed member {victim} at {} applied; all agree up to {target}",
            killed.applied()
        );
    }
    for process in processes.iter_mut().flatten() {
        let pid = process.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }
    let mut all: Vec<Process> = processes.into_iter().flatten().collect();
    wait_all(&mut all, Instant::now() + DEADLINE);
}

/// A member of a cluster that serves remote clients: it runs until a signal, writes each client
/// message it applies to `<dir>-applied.log`, and prints a checkpoint every 1000 entries.
fn client_cluster_node(scratch: &ScratchDir, files: &[PathBuf], id: usize) -> Process {
    let dir = scratch.join(format!("dir{id}"));
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let profile = tuning("profiles/small-host.toml");
    let args = [
        "--config".into(),
        path(&files[id]),
        "--profile".into(),
        path(&profile),
        "--directory".into(),
        path(&dir),
        "--data-dir".into(),
        path(&scratch.join(format!("dir{id}-data"))),
        "--applied-log".into(),
        path(&scratch.join(format!("applied{id}.log"))),
        "--checkpoint".into(),
        "1000".into(),
        "--timeout".into(),
        DEADLINE.as_secs().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::spawn(&format!("node {id}"), &args)
}

/// A qc-client process against the cluster of `file`.
fn client_process(file: &Path, name: &str, load: &[&str]) -> Process {
    let mut args = vec!["--cluster", file.to_str().unwrap(), "--msg-size", "128"];
    args.extend_from_slice(load);
    args.extend(["--timeout", "240"]);
    Process::spawn_binary(qc_client(), name, &args)
}

/// What a finished qc-client printed: its session and `key value` counts.
fn client_outcome(process: &mut Process) -> (u64, std::collections::HashMap<String, f64>) {
    let status = process.status.unwrap();
    let stdout = process.stdout_to_end();
    assert!(
        status.success(),
        "{} exited with {status}:\n{}\n{}",
        process.name,
        stdout.join("\n"),
        process.all_stderr()
    );
    let mut values = std::collections::HashMap::new();
    for line in &stdout {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.chunks(2) {
            if let [key, value] = pair {
                if let Ok(value) = value.parse::<f64>() {
                    values.insert(key.to_string(), value);
                }
            }
        }
    }
    // A session id is 64 random-looking bits: read as an integer, not through the f64 of the counts.
    let session = stdout
        .iter()
        .flat_map(|line| {
            line.split_whitespace().collect::<Vec<_>>().windows(2).map(|w| (w[0], w[1])).collect::<Vec<_>>()
        })
        .find_map(|(key, value)| (key == "session").then(|| value.parse::<u64>().ok()).flatten())
        .unwrap_or_else(|| panic!("{}: no session:\n{stdout:?}", process.name));
    (session, values)
}

/// What each of `nodes` printed to stderr so far, for a failure message.
fn stderr_of(nodes: &mut [Option<Process>]) -> String {
    let report: Vec<String> =
        nodes.iter_mut().flatten().map(|p| format!("--- {} {:?}:\n{}", p.name, p.status, p.all_stderr())).collect();
    report.join("\n")
}

/// Waits for `clients` to finish and checks each had all `per_client` messages committed, none reported
/// twice, none reported not applied; returns their sessions with what each printed. A client that failed
/// has the members' logs printed beside its own output.
fn finished_sessions(
    clients: &mut [Process],
    nodes: &mut [Option<Process>],
    per_client: u64,
) -> Vec<(u64, std::collections::HashMap<String, f64>)> {
    wait_all(clients, Instant::now() + DEADLINE);
    let mut sessions = Vec::new();
    for client in clients.iter_mut() {
        if !client.status.is_some_and(|s| s.success()) {
            eprintln!("{} failed; the members' logs:\n{}", client.name, stderr_of(nodes));
        }
        let (session, values) = client_outcome(client);
        eprintln!("{}: {:?}", client.name, values);
        assert_eq!(values["committed"], per_client as f64);
        assert_eq!(values["reported_twice"], 0.0);
        assert_eq!(values["not_applied"], 0.0);
        sessions.push((session, values));
    }
    sessions
}

/// The client messages a member applied, by session, in log order.
fn applied_by_session(path: &Path) -> std::collections::BTreeMap<u64, Vec<u64>> {
    let mut sessions = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let mut words = line.split_whitespace().map(|w| w.parse::<u64>().unwrap());
        if let (Some(session), Some(id)) = (words.next(), words.next()) {
            sessions.entry(session).or_default().push(id);
        }
    }
    sessions
}

/// Waits until the members' applied logs hold `count` messages of each of `sessions`.
fn await_applied(
    scratch: &ScratchDir,
    members: &[usize],
    sessions: &[u64],
    count: usize,
    nodes: &mut [Option<Process>],
) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let done = members.iter().all(|&id| {
            let applied = applied_by_session(&scratch.join(format!("applied{id}.log")));
            sessions.iter().all(|s| applied.get(s).map_or(0, Vec::len) >= count)
        });
        if done {
            return;
        }
        if Instant::now() >= deadline {
            panic!("the members did not apply every client message:\n{}", stderr_of(nodes));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Every session's messages, 1 to `count`, each exactly once and in order, on every one of `members`.
fn assert_exactly_once(scratch: &ScratchDir, members: &[usize], sessions: &[u64], count: u64) {
    let expected: Vec<u64> = (1..=count).collect();
    for &id in members {
        let applied = applied_by_session(&scratch.join(format!("applied{id}.log")));
        for session in sessions {
            let got = applied.get(session).map(Vec::as_slice).unwrap_or_default();
            if got != expected.as_slice() {
                let mut seen = std::collections::HashMap::new();
                for c in got {
                    *seen.entry(*c).or_insert(0) += 1;
                }
                let doubled = seen.values().filter(|&&n| n > 1).count();
                let missing = expected.iter().filter(|c| !seen.contains_key(c)).count();
                panic!("member {id}, session {session}: {} applied, {doubled} doubled, {missing} missing", got.len());
            }
        }
    }
}

fn terminate(processes: Vec<Option<Process>>) {
    let mut all: Vec<Process> = processes.into_iter().flatten().collect();
    for process in &mut all {
        if !process.poll() {
            let pid = process.child.id().to_string();
            assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        }
    }
    wait_all(&mut all, Instant::now() + DEADLINE);
}

#[test]
fn four_client_processes_commit_100k_messages_exactly_once_with_their_responses() {
    let scratch = ScratchDir::new("client-proc-cluster");
    let files = client_node_files(scratch.path());
    let mut nodes: Vec<Option<Process>> = (0..3).map(|id| Some(client_cluster_node(&scratch, &files, id))).collect();
    let per_client = (MESSAGES / 4).to_string();
    let mut clients: Vec<Process> = (0..4)
        .map(|i| client_process(&files[i % 3], &format!("client {i}"), &["--offer", &per_client, "--window", "64"]))
        .collect();
    wait_all(&mut clients, Instant::now() + DEADLINE);
    let mut sessions = Vec::new();
    for client in &mut clients {
        let (session, values) = client_outcome(client);
        eprintln!("{}: {:?}", client.name, values);
        assert_eq!(values["committed"], (MESSAGES / 4) as f64);
        assert_eq!(values["reported_twice"], 0.0);
        assert_eq!(values["bad_responses"], 0.0);
        assert_eq!(values["not_applied"], 0.0);
        assert_eq!(values["responses"] + values["duplicates"], values["committed"], "a response for every message");
        sessions.push(session);
    }
    await_applied(&scratch, &[0, 1, 2], &sessions, (MESSAGES / 4) as usize, &mut nodes);
    terminate(nodes);
    assert_exactly_once(&scratch, &[0, 1, 2], &sessions, MESSAGES / 4);
}

#[test]
fn killing_the_leader_under_steady_clients_applies_every_message_exactly_once() {
    let scratch = ScratchDir::new("client-proc-failover");
    let files = client_node_files(scratch.path());
    let mut nodes: Vec<Option<Process>> = (0..3).map(|id| Some(client_cluster_node(&scratch, &files, id))).collect();
    let mut progress: Vec<Progress> = (0..3).map(|_| Progress::default()).collect();
    await_progress(&mut nodes, &mut progress, "member 0 leads", |p| p[0].leads_after(0).is_some());
    // Four clients at 2000 messages a second each, for about 10 s; the leader dies after the first 8000.
    let per_client: u64 = 20_000;
    let count = per_client.to_string();
    let mut clients: Vec<Process> = (0..4)
        .map(|i| {
            let load = ["--offer", &count, "--rate", "2000", "--window", "1024", "--leader-timeout", "0.5"];
            client_process(&files[(i + 1) % 3], &format!("client {i}"), &load)
        })
        .collect();
    await_progress(&mut nodes, &mut progress, "8000 client messages applied", |p| p[1].applied() >= 8_000);
    let mut leader = nodes[0].take().unwrap();
    leader.child.kill().unwrap();
    leader.child.wait().unwrap();
    eprintln!("killed the leader at {} applied on member 1", progress[1].applied());
    let finished = finished_sessions(&mut clients, &mut nodes, per_client);
    for (client, (_, values)) in clients.iter().zip(&finished) {
        assert!(values["reconnects"] >= 1.0, "{} found the new leader", client.name);
    }
    let sessions: Vec<u64> = finished.iter().map(|(session, _)| *session).collect();
    // The killed member comes back with its recorded log: it replays it (writing its applied log anew
    // from the first entry), catches up, and must have applied the same, once each.
    nodes[0] = Some(client_cluster_node(&scratch, &files, 0));
    await_applied(&scratch, &[0, 1, 2], &sessions, per_client as usize, &mut nodes);
    terminate(nodes);
    assert_exactly_once(&scratch, &[0, 1, 2], &sessions, per_client);
}

const QC_CLUSTER: &str = env!("CARGO_BIN_EXE_qc-cluster");

/// Node files of five members of which 0, 1 and 2 make the initial configuration: every file lists all
/// five (their endpoints on free ports), remote clients taken at each member's client endpoint.
fn five_member_files(scratch: &Path) -> Vec<PathBuf> {
    let free = |n: usize| -> Vec<u16> { (0..n).map(|_| free_loopback_port()).collect() };
    let (logs, consensus, clients) = (free(5), free(5), free(5));
    let session_key = quorumcast_driver::media::auth::AuthKey::generate().unwrap().to_hex();
    let template = std::fs::read_to_string(tuning("cluster/node0.toml")).unwrap();
    (0..5)
        .map(|id| {
            let mut table: toml::Table = template.parse().unwrap();
            table.insert("id".into(), (id as i64).into());
            let members: Vec<toml::Value> = (0..5)
                .map(|m| {
                    let mut member = toml::Table::new();
                    member.insert("id".into(), (m as i64).into());
                    member.insert("log".into(), format!("127.0.0.1:{}", logs[m]).into());
                    member.insert("consensus".into(), format!("127.0.0.1:{}", consensus[m]).into());
                    member.insert("client".into(), format!("127.0.0.1:{}", clients[m]).into());
                    member.into()
                })
                .collect();
            table.insert("members".into(), members.into());
            table.insert("initial_members".into(), vec![0i64, 1, 2].into());
            let clients = table["clients"].as_table_mut().unwrap();
            clients.insert("enabled".into(), true.into());
            clients.insert("session_key".into(), session_key.clone().into());
            let path = scratch.join(format!("node{id}.toml"));
            std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
            path
        })
        .collect()
}

/// Runs `qc-cluster` with `args` and the directories of `members`: whether it succeeded, and its output.
fn try_qc_cluster(scratch: &ScratchDir, args: &[&str], members: &[usize]) -> (bool, String) {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for id in members {
        all.extend(["--dir".into(), scratch.join(format!("dir{id}")).to_str().unwrap().into()]);
    }
    if args[0] != "describe" {
        all.extend(["--timeout-ms".into(), "60000".into()]);
    }
    let output = Command::new(QC_CLUSTER).args(&all).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// As [`qc_cluster`], asked again while the tool finds no member leading and says to retry after the
/// election (a change or transfer just before can leave the members between leaders): it waits for that
/// event; the bound is one only a cluster that never elects reaches.
fn qc_cluster_once_led(scratch: &ScratchDir, args: &[&str], members: &[usize]) -> String {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (ok, text) = try_qc_cluster(scratch, args, members);
        if ok {
            return text;
        }
        assert!(
            text.contains("retry after the election") && std::time::Instant::now() < until,
            "qc-cluster {args:?}: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// As [`try_qc_cluster`]; its output, or a panic with it.
fn qc_cluster(scratch: &ScratchDir, args: &[&str], members: &[usize]) -> String {
    let (ok, text) = try_qc_cluster(scratch, args, members);
    assert!(ok, "qc-cluster {args:?}: {text}");
    text
}

/// The member that `describe --json` says leads, among `members`, once one does.
fn await_leader(scratch: &ScratchDir, members: &[usize], not: Option<i64>) -> i64 {
    let deadline = Instant::now() + DEADLINE;
    loop {
        // A member starting has no directory yet: describe fails until it has.
        let (ok, text) = try_qc_cluster(scratch, &["describe", "--json", "--window-ms", "1"], members);
        let view: serde_json::Value = if ok { serde_json::from_str(text.trim()).unwrap() } else { Default::default() };
        let described = view["members"].as_array().cloned().unwrap_or_default();
        let leader = described.iter().find(|m| m["role"] == "leader").cloned();
        if let Some(id) = leader.and_then(|m| m["member_id"].as_i64()).filter(|id| Some(*id) != not) {
            return id;
        }
        assert!(Instant::now() < deadline, "no leader among {members:?}: {text}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until member `id`'s process says it started (a member started again on its directories finds a
/// stale node directory there, which it replaces while it recovers its log: not a running member's yet).
fn await_running(nodes: &mut [Option<Process>], id: usize) {
    nodes[id].as_mut().unwrap().await_stderr(&format!("node {id} started"), Instant::now() + DEADLINE);
}

/// Adds member `id` (of `files`) as a learner and promotes it once it has caught up, through `members`.
fn add_and_promote(scratch: &ScratchDir, files: &[PathBuf], id: usize, members: &[usize]) {
    let table: toml::Table = std::fs::read_to_string(&files[id]).unwrap().parse().unwrap();
    let entry = table["members"].as_array().unwrap()[id].as_table().unwrap().clone();
    let endpoint = |key: &str| entry[key].as_str().unwrap().to_string();
    let (log, consensus, client) = (endpoint("log"), endpoint("consensus"), endpoint("client"));
    let id_text = id.to_string();
    let add = ["add-member", "--id", &id_text, "--log", &log, "--consensus", &consensus, "--client", &client];
    let text = qc_cluster(scratch, &add, members);
    assert!(text.contains("committed"), "{text}");
    // Promoted once it is within the leader's promotion distance and has answered the leader: until then
    // the leader says how far behind it is, or that too few voters of the new configuration answered.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (ok, text) = try_qc_cluster(scratch, &["promote", "--id", &id_text], members);
        if ok {
            break;
        }
        let waiting =
            ["behind the leader", "answered recently", "answered the leader recently"].iter().any(|t| text.contains(t));
        assert!(waiting && Instant::now() < deadline, "promote {id}: {text}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Under steady client load, member 0 (the leader) is killed for good and replaced by member 3 (a new
/// process on new ports, from an empty data directory: it catches up from the leader's recording); the
/// cluster then grows to five (member 4, and member 0 started again on its old directories, each added
/// and promoted), hands its leadership over 20 times in a row, and shrinks back to three. Every client
/// message acknowledged is applied exactly once, in order, on every final member.
#[test]
fn a_killed_member_is_replaced_and_the_cluster_grows_to_five_and_shrinks_to_three_under_load() {
    let scratch = ScratchDir::new("membership-processes");
    let files = five_member_files(scratch.path());
    let mut nodes: Vec<Option<Process>> =
        (0..5).map(|id| (id < 3).then(|| client_cluster_node(&scratch, &files, id))).collect();
    assert_eq!(await_leader(&scratch, &[0, 1, 2], None), 0);
    let per_client: u64 = 30_000;
    let count = per_client.to_string();
    let mut clients: Vec<Process> = (0..2)
        .map(|i| {
            let load = ["--offer", &count, "--rate", "1000", "--window", "1024", "--leader-timeout", "0.5"];
            client_process(&files[1 + i], &format!("client {i}"), &load)
        })
        .collect();
    thread::sleep(Duration::from_secs(2));
    let mut killed = nodes[0].take().unwrap();
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let leader = await_leader(&scratch, &[1, 2], Some(0));
    eprintln!("member 0 killed; member {leader} leads");

    nodes[3] = Some(client_cluster_node(&scratch, &files, 3));
    await_running(&mut nodes, 3);
    add_and_promote(&scratch, &files, 3, &[1, 2]);
    let text = qc_cluster(&scratch, &["remove-member", "--id", "0"], &[1, 2, 3]);
    assert!(text.contains("voters [1, 2, 3]"), "{text}");
    eprintln!("member 0 replaced by member 3");

    nodes[4] = Some(client_cluster_node(&scratch, &files, 4));
    await_running(&mut nodes, 4);
    add_and_promote(&scratch, &files, 4, &[1, 2, 3]);
    nodes[0] = Some(client_cluster_node(&scratch, &files, 0));
    await_running(&mut nodes, 0);
    add_and_promote(&scratch, &files, 0, &[1, 2, 3, 4]);
    let all = [0, 1, 2, 3, 4];
    let (ok, text) = try_qc_cluster(&scratch, &["describe", "--json", "--window-ms", "1"], &all);
    if !ok {
        panic!("grown to five: {text}\n{}", stderr_of(&mut nodes));
    }
    eprintln!("grown to five: {text}");
    for i in 0..20 {
        let (ok, text) = try_qc_cluster(&scratch, &["transfer-leadership"], &all);
        if !ok || !text.contains("leads term") {
            panic!("transfer {i}: {text}\n{}", stderr_of(&mut nodes));
        }
    }
    for id in [4, 0] {
        let text = qc_cluster_once_led(&scratch, &["remove-member", "--id", &id.to_string()], &all);
        assert!(text.contains("committed"), "{text}");
    }
    let text = qc_cluster(&scratch, &["describe", "--json", "--window-ms", "1"], &[1, 2, 3]);
    eprintln!("shrunk to three: {text}");

    let sessions: Vec<u64> =
        finished_sessions(&mut clients, &mut nodes, per_client).into_iter().map(|(s, _)| s).collect();
    await_applied(&scratch, &[1, 2, 3], &sessions, per_client as usize, &mut nodes);
    terminate(nodes);
    assert_exactly_once(&scratch, &[1, 2, 3], &sessions, per_client);
}
