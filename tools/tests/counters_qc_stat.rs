//! The built `qc-stat` binary against real node directories: running, by name, missing, stale, and a
//! node shutting down under a sampling loop.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use quorumcast_driver::shm::counters::{CountersManager, COUNTERS_FILE_NAME, TYPE_SENDER_POSITION, TYPE_SYSTEM};
use quorumcast_driver::shm::directory::{NodeDirectory, StalePolicy};
use quorumcast_testkit::ScratchDir;

fn qc_stat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qc-stat")).args(args).output().unwrap()
}

/// A node directory with three counters: two with values, one left at zero.
fn node(path: &Path) -> (NodeDirectory, CountersManager) {
    let dir = NodeDirectory::create(path, StalePolicy::Refuse).unwrap();
    let manager = CountersManager::create(dir.file(COUNTERS_FILE_NAME), 16).unwrap();
    manager.allocate("Bytes sent", TYPE_SYSTEM).unwrap().set(1_234_567);
    manager.allocate("snd-pos: stream 3", TYPE_SENDER_POSITION).unwrap().set(-42);
    manager.allocate("idle", TYPE_SYSTEM).unwrap();
    (dir, manager)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The words of the output line ending with `label`.
fn row(stdout: &str, label: &str) -> Vec<String> {
    let line = stdout.lines().find(|l| l.ends_with(label)).unwrap_or_else(|| panic!("no {label:?} in:\n{stdout}"));
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn once_prints_every_counter_with_value_and_rate() {
    let scratch = ScratchDir::new("stat-once");
    let path = scratch.join("node");
    let (dir, _manager) = node(&path);
    let output = qc_stat(&["--once", "--dir", path.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", text(&output.stderr));
    assert!(stdout.contains(&format!("running: pid {}", std::process::id())), "{stdout}");
    assert!(stdout.contains("3 of 16 counters"), "{stdout}");
    assert_eq!(row(&stdout, "Bytes sent"), ["0", "1,234,567", "0.0", "Bytes", "sent"]);
    assert_eq!(row(&stdout, "snd-pos: stream 3"), ["1", "-42", "0.0", "snd-pos:", "stream", "3"]);
    assert_eq!(row(&stdout, "idle"), ["2", "0", "0.0", "idle"]);
    drop(dir);
}

#[test]
fn json_prints_one_object_per_sample() {
    let scratch = ScratchDir::new("stat-json");
    let path = scratch.join("node");
    let (dir, _manager) = node(&path);
    let output = qc_stat(&["--once", "--json", "--dir", path.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", text(&output.stderr));
    assert_eq!(stdout.trim_end().lines().count(), 1, "{stdout}");
    let sample: serde_json::Value = serde_json::from_str(stdout.trim_end()).unwrap();
    assert!(sample["interval_s"].as_f64().is_some_and(|s| s > 0.0), "{sample}");
    let counters = sample["counters"].as_array().unwrap();
    assert_eq!(counters.len(), 3);
    assert_eq!(
        (&counters[0]["label"], &counters[0]["value"], &counters[0]["rate"]),
        (&"Bytes sent".into(), &1_234_567.into(), &0.0.into())
    );
    assert_eq!((&counters[1]["type_id"], &counters[1]["value"]), (&TYPE_SENDER_POSITION.into(), &(-42).into()));
    drop(dir);
}

#[test]
fn a_node_name_resolves_under_the_default_root() {
    let name = format!("qc-test-{}-stat-by-name", std::process::id());
    let path = NodeDirectory::default_path(&name);
    let _ = std::fs::remove_dir_all(&path);
    let (dir, _manager) = node(&path);
    let output = qc_stat(&["--once", &name]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(row(&text(&output.stdout), "Bytes sent")[1], "1,234,567");
    dir.close().unwrap();
}

#[test]
fn a_missing_directory_or_counters_file_is_a_clear_error() {
    let scratch = ScratchDir::new("stat-missing");
    let path = scratch.join("node");
    let output = qc_stat(&["--once", "--dir", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("no node directory") && stderr.contains("no node is running"), "{stderr}");

    let dir = NodeDirectory::create(&path, StalePolicy::Refuse).unwrap();
    let output = qc_stat(&["--once", "--dir", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("counters.dat") && stderr.contains("running: pid"), "{stderr}");
    drop(dir);

    let output = qc_stat(&["--once"]);
    assert_eq!(output.status.code(), Some(2), "a node is required");
}

#[test]
fn a_stale_directory_is_refused_unless_asked_for() {
    let scratch = ScratchDir::new("stat-stale");
    let path = scratch.join("node");
    let (dir, manager) = node(&path);
    drop(manager);
    let path = dir.leak();
    let output = qc_stat(&["--once", "--dir", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("stale") && stderr.contains("not running") && stderr.contains("--allow-stale"), "{stderr}");

    let output = qc_stat(&["--once", "--allow-stale", "--dir", path.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.contains("NOT RUNNING"), "{stdout}");
    assert_eq!(row(&stdout, "Bytes sent")[1], "1,234,567");
    std::fs::remove_dir_all(&path).unwrap();
}

#[test]
fn the_sampling_loop_ends_when_the_node_shuts_down() {
    let scratch = ScratchDir::new("stat-loop");
    let path = scratch.join("node");
    let (dir, manager) = node(&path);
    let mut child = Command::new(env!("CARGO_BIN_EXE_qc-stat"))
        .args(["--interval-ms", "20", "--dir", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    // Two samples: the first has a blank rate, the second a rate.
    let mut samples = 0;
    while samples < 2 {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "qc-stat ended early:\n{seen}");
        if line.trim_end().ends_with("idle") {
            samples += 1;
        }
        seen.push_str(&line);
    }
    drop(manager);
    dir.close().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("qc-stat kept running after the node shut down");
        }
        thread::sleep(Duration::from_millis(5));
    };
    stdout.read_to_string(&mut seen).unwrap();
    assert!(status.success(), "{status}:\n{seen}");
    assert!(seen.contains("has shut down"), "{seen}");
    let idle_rows: Vec<Vec<String>> = seen
        .lines()
        .filter(|l| l.ends_with("idle"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert_eq!(idle_rows[0], ["2", "0", "idle"], "no rate on the first sample");
    assert_eq!(idle_rows[1], ["2", "0", "0.0", "idle"], "a rate from the second sample on");
}

/// A GET of `target` at `addr`: the status line and the body.
fn http_get(addr: &str, target: &str) -> (String, String) {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// Every sample of a Prometheus text exposition: (name, labels, value); panics on a line that is not one.
fn parse_exposition(text: &str) -> Vec<(String, String, f64)> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(comment.starts_with("HELP ") || comment.starts_with("TYPE "), "{line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}').unwrap_or_else(|| panic!("{line}"))),
            None => (series, ""),
        };
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "metric name {name:?}");
        samples.push((name.to_owned(), labels.to_owned(), value.parse().unwrap_or_else(|_| panic!("{line}"))));
    }
    samples
}

#[test]
fn prometheus_serves_every_typed_counter_labelled_by_member() {
    use quorumcast_driver::shm::stats::{kinds, CATALOGUE, TYPE_ACK_POSITION};
    let scratch = ScratchDir::new("stat-prometheus");
    let path = scratch.join("node");
    let dir = NodeDirectory::create(&path, StalePolicy::Refuse).unwrap();
    let manager = CountersManager::create(dir.file(COUNTERS_FILE_NAME), CATALOGUE.len() + 4).unwrap();
    for (i, kind) in CATALOGUE.iter().enumerate() {
        let value = if kind.type_id == kinds::election::member_id.type_id { 3 } else { 1000 + i as i64 };
        manager.allocate(kind.label, kind.type_id).unwrap().set(value);
    }
    manager.allocate_owned("ack position of member 1", TYPE_ACK_POSITION, 1).unwrap().set(4096);
    let mut child = Command::new(env!("CARGO_BIN_EXE_qc-stat"))
        .args(["--prometheus", "127.0.0.1:0", "--dir", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let addr = first.trim_end().rsplit("http://").next().unwrap().trim_end_matches("/metrics").to_owned();
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let samples = parse_exposition(&body);
    for (i, kind) in CATALOGUE.iter().enumerate() {
        let name = format!("quorumcast_{}", kind.key.replace('.', "_"));
        let sample = samples.iter().find(|(n, _, _)| *n == name).unwrap_or_else(|| panic!("no {name} in\n{body}"));
        assert_eq!(sample.1, "member=\"3\"", "{name}");
        if kind.type_id != kinds::election::member_id.type_id {
            assert_eq!(sample.2, 1000.0 + i as f64, "{name}");
        }
    }
    let ack = samples.iter().find(|(n, _, _)| n == "quorumcast_ack_position").unwrap();
    assert_eq!((ack.1.as_str(), ack.2), ("member=\"3\",follower=\"1\"", 4096.0));
    assert_eq!(http_get(&addr, "/other").0, "HTTP/1.1 404 Not Found");
    // The node shuts down: the next scrape is refused and the server exits.
    drop(manager);
    drop(dir);
    assert_eq!(http_get(&addr, "/metrics").0, "HTTP/1.1 503 Service Unavailable");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
