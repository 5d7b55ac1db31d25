//! Node directory life cycle: creation, removal, refusal while running, stale detection and cleaning,
//! including a real crash of another process.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use quorumcast_driver::shm::directory::{DirectoryError, DirectoryStatus, NodeDirectory, StalePolicy, LOCK_FILE_NAME};
use quorumcast_testkit::ScratchDir;

/// Env var telling the child test where to create its node directory.
const CHILD_DIR_VAR: &str = "QC_TEST_CHILD_NODE_DIR";

fn lock_text(dir: &Path) -> String {
    fs::read_to_string(dir.join(LOCK_FILE_NAME)).unwrap()
}

#[test]
fn create_makes_the_directory_and_drop_removes_it() {
    let scratch = ScratchDir::new("dir-drop");
    let root = scratch.join("node");
    let path = root.join("parents/node");
    let dir = NodeDirectory::create(&path, StalePolicy::Refuse).unwrap();
    assert_eq!(dir.path(), path);
    assert_eq!(dir.file("counters.dat"), path.join("counters.dat"));
    assert!(dir.is_owner());
    fs::write(dir.file("counters.dat"), b"x").unwrap();
    fs::create_dir(dir.file("logs")).unwrap();
    fs::write(dir.file("logs/term-0"), b"y").unwrap();
    assert!(lock_text(&path).starts_with(&format!("{} ", std::process::id())));
    drop(dir);
    assert!(!path.exists());
    assert!(root.join("parents").exists(), "only the node directory is removed");

    let dir = NodeDirectory::create(&path, StalePolicy::Refuse).unwrap();
    dir.close().unwrap();
    assert!(!path.exists());
}

#[test]
fn a_second_create_is_refused_while_the_first_lives_even_in_the_same_process() {
    let scratch = ScratchDir::new("dir-running");
    let root = scratch.join("node");
    let first = NodeDirectory::create(&root, StalePolicy::Clean).unwrap();
    for policy in [StalePolicy::Refuse, StalePolicy::Clean] {
        match NodeDirectory::create(&root, policy) {
            Err(DirectoryError::AlreadyRunning { path, pid }) => {
                assert_eq!(path, root);
                assert_eq!(pid, Some(std::process::id()));
            }
            other => panic!("expected AlreadyRunning, got {other:?}"),
        }
    }
    assert!(first.file(LOCK_FILE_NAME).exists(), "a refused create touches nothing");
    assert!(matches!(NodeDirectory::status(&root), DirectoryStatus::Running(o) if o.pid == Some(std::process::id())));
    drop(first);
    let again = NodeDirectory::create(&root, StalePolicy::Refuse).unwrap();
    assert_eq!(again.cleaned(), None);
}

#[test]
fn a_leaked_directory_is_stale_until_cleaned() {
    let scratch = ScratchDir::new("dir-stale");
    let root = scratch.join("node");
    let dir = NodeDirectory::create(&root, StalePolicy::Refuse).unwrap();
    fs::write(dir.file("counters.dat"), b"old run").unwrap();
    let old_lock = lock_text(&root);
    let path = dir.leak();
    assert_eq!(path, root);
    assert!(path.join("counters.dat").exists(), "leak keeps the files");

    let status = NodeDirectory::status(&path);
    assert!(matches!(status, DirectoryStatus::Stale(o) if o.pid == Some(std::process::id())), "{status:?}");
    let error = NodeDirectory::create(&path, StalePolicy::Refuse).unwrap_err();
    match &error {
        DirectoryError::Stale { path: p, pid, started_at } => {
            assert_eq!(p, &path);
            assert_eq!(*pid, Some(std::process::id()));
            assert!(started_at.is_some());
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    assert!(error.to_string().contains("StalePolicy::Clean"), "{error}");
    assert_eq!(lock_text(&path), old_lock, "a refused create leaves the stale files as they were");
    assert!(path.join("counters.dat").exists());

    let fresh = NodeDirectory::create(&path, StalePolicy::Clean).unwrap();
    assert_eq!(fresh.cleaned().and_then(|o| o.pid), Some(std::process::id()));
    assert!(!path.join("counters.dat").exists(), "clean removes the old run's files");
    assert!(matches!(NodeDirectory::status(&path), DirectoryStatus::Running(_)));
    drop(fresh);
    assert!(!path.exists());
}

#[test]
fn a_directory_of_files_without_a_lock_file_is_stale() {
    let scratch = ScratchDir::new("dir-nolock");
    let root = scratch.join("node");
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("counters.dat"), b"?").unwrap();
    assert_eq!(NodeDirectory::status(&root), DirectoryStatus::NoLockFile);
    let error = NodeDirectory::create(&root, StalePolicy::Refuse).unwrap_err();
    assert!(matches!(error, DirectoryError::Stale { pid: None, .. }), "{error:?}");
    let dir = NodeDirectory::create(&root, StalePolicy::Clean).unwrap();
    assert!(!dir.file("counters.dat").exists());
}

#[test]
fn attach_neither_locks_nor_removes() {
    let scratch = ScratchDir::new("dir-attach");
    let root = scratch.join("node");
    assert!(matches!(NodeDirectory::attach(&root), Err(DirectoryError::Missing { .. })));
    assert_eq!(NodeDirectory::status(&root), DirectoryStatus::Missing);
    let owner = NodeDirectory::create(&root, StalePolicy::Refuse).unwrap();
    let reader = NodeDirectory::attach(&root).unwrap();
    assert!(!reader.is_owner());
    assert!(matches!(reader.current_status(), DirectoryStatus::Running(_)));
    drop(reader);
    assert!(root.exists(), "dropping an attached directory removes nothing");
    assert!(matches!(NodeDirectory::create(&root, StalePolicy::Clean), Err(DirectoryError::AlreadyRunning { .. })));
    drop(owner);
    assert!(!root.exists());
}

/// Child side of the crash test: creates a node directory, says it is ready, and waits to be killed.
#[test]
fn child_holds_a_node_directory_until_killed() {
    let Some(path) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let dir = NodeDirectory::create(PathBuf::from(path), StalePolicy::Refuse).unwrap();
    fs::write(dir.file("ready"), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    panic!("the parent never killed this child");
}

#[test]
fn a_killed_owner_leaves_a_stale_directory_that_clean_recovers() {
    let scratch = ScratchDir::new("dir-crash");
    let root = scratch.join("node");
    let path = root.join("node");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holds_a_node_directory_until_killed", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_VAR, &path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.join("ready").exists() {
        assert!(child.try_wait().unwrap().is_none(), "the child exited before creating its directory");
        assert!(Instant::now() < deadline, "the child never created its directory");
        thread::sleep(Duration::from_millis(5));
    }
    let child_pid = Some(child.id());
    match NodeDirectory::create(&path, StalePolicy::Clean) {
        Err(DirectoryError::AlreadyRunning { pid, .. }) => assert_eq!(pid, child_pid),
        other => panic!("expected AlreadyRunning while the child lives, got {other:?}"),
    }
    assert!(matches!(NodeDirectory::status(&path), DirectoryStatus::Running(o) if o.pid == child_pid));

    child.kill().unwrap();
    child.wait().unwrap();
    assert!(matches!(NodeDirectory::status(&path), DirectoryStatus::Stale(o) if o.pid == child_pid));
    match NodeDirectory::create(&path, StalePolicy::Refuse) {
        Err(DirectoryError::Stale { pid, .. }) => assert_eq!(pid, child_pid),
        other => panic!("expected Stale after the kill, got {other:?}"),
    }
    let dir = NodeDirectory::create(&path, StalePolicy::Clean).unwrap();
    assert_eq!(dir.cleaned().and_then(|o| o.pid), child_pid);
    assert!(!dir.file("ready").exists());
}

#[test]
fn a_node_refused_for_a_stale_directory_names_the_setting_its_caller_has() {
    use quorumcast::{Member, NodeBuilder, NodeError};
    use quorumcast_driver::setting::FrontEnd;
    let scratch = ScratchDir::new("dir-stale-node");
    let root = scratch.join("node");
    NodeDirectory::create(&root, StalePolicy::Refuse).unwrap().leak();
    let endpoint = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let builder = || {
        NodeBuilder::new(0, vec![Member::new(0, endpoint)]).directory(&root).data_dir(scratch.join("data")).memory_log()
    };
    match builder().start() {
        Err(NodeError::Setting(e)) => {
            assert_eq!(e.setting.id(), "node.clean_stale");
            let embedder = e.to_string();
            assert!(
                embedder.starts_with("NodeBuilder::clean_stale:") && embedder.contains("no longer running"),
                "{embedder}"
            );
            let file = e.render(FrontEnd::NodeFile);
            assert!(file.starts_with("clean_stale:") && !file.contains("NodeBuilder"), "{file}");
        }
        Err(other) => panic!("expected the clean_stale setting, got {other}"),
        Ok(_) => panic!("a stale directory was taken without clean_stale"),
    }
    builder().clean_stale(true).start().expect("clean_stale(true) starts over a crashed run").close().unwrap();
}
