//! A full `/dev/shm` (a small private tmpfs mounted for the test) is a clear error naming the file and
//! the size, never a `SIGBUS`: for a leader whose log does not fit at start, and for a follower whose
//! image does not fit when the leader's SETUP arrives (it refuses the SETUP, counts it, and lives on); and a
//! full disk under a member's recorded log stops that member with the file and the cause named, while the
//! majority goes on.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`); where the mount fails the test prints why and passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use quorumcast::NodeError;
use quorumcast_testkit::cluster::{counter, members, test_builder, test_channel, Driver};
use quorumcast_testkit::{dump, ScratchDir};

/// A tmpfs of `size` mounted at a fresh directory, unmounted on drop.
struct SmallTmpfs(PathBuf);

impl SmallTmpfs {
    fn mount(name: &str, size: &str) -> Result<Self, String> {
        let path = std::env::temp_dir().join(format!("qc-tmpfs-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            let _ = std::fs::remove_dir(&path);
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
        }
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_leader_whose_log_does_not_fit_fails_to_start_naming_the_file() {
    let tmpfs = match SmallTmpfs::mount("leader", "2m") {
        Ok(t) => t,
        Err(why) => return eprintln!("skipped: cannot mount a small tmpfs ({why})"),
    };
    let members = members(3);
    let scratch = ScratchDir::new("full-shm-leader");
    let error = test_builder(&scratch, 0, &members, test_channel())
        .directory(tmpfs.path().join("node-0"))
        .start()
        .expect_err("a 3 MiB log in a 2 MiB tmpfs");
    let text = error.to_string();
    assert!(
        matches!(error, NodeError::Io(_) | NodeError::Log(_)),
        "an I/O error, not a configuration error: {error:?}"
    );
    assert!(text.contains(&tmpfs.path().display().to_string()) && text.contains("no space"), "{text}");
}

#[test]
fn a_follower_whose_image_does_not_fit_refuses_the_setup_and_lives_on() {
    let tmpfs = match SmallTmpfs::mount("follower", "2m") {
        Ok(t) => t,
        Err(why) => return eprintln!("skipped: cannot mount a small tmpfs ({why})"),
    };
    let members = members(3);
    let scratch = ScratchDir::new("full-shm-follower");
    let mut nodes = vec![
        test_builder(&scratch, 0, &members, test_channel()).start().unwrap(),
        test_builder(&scratch, 1, &members, test_channel()).start().unwrap(),
    ];
    let mut small = test_builder(&scratch, 2, &members, test_channel()).directory(tmpfs.path().join("node-2"));
    small = small.ingress_capacity(64 * 1024);
    nodes.push(small.start().expect("counters and ingress fit; the image will not"));
    let mut driver = Driver::checked(3);
    driver.run_to(&mut nodes, &[true, true, false], 2_000, Duration::from_secs(60));
    let until = Instant::now() + Duration::from_secs(30);
    while counter(&nodes[2], "receiver setups refused") == 0 {
        assert!(Instant::now() < until, "the follower never refused the SETUP\n{}", dump(&nodes));
        driver.round(&mut nodes, &[true, true, true], 2_000);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(counter(&nodes[2], "receiver images"), 0);
    assert!(nodes[2].failures().is_empty());
    let leftovers: Vec<_> = std::fs::read_dir(tmpfs.path().join("node-2"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("image-"))
        .collect();
    assert!(leftovers.is_empty(), "no sparse image left behind: {leftovers:?}");
}

#[test]
fn a_full_disk_under_the_recorded_log_stops_the_member_naming_the_file_and_the_others_go_on() {
    let tmpfs = match SmallTmpfs::mount("recording", "1m") {
        Ok(t) => t,
        Err(why) => return eprintln!("skipped: cannot mount a small tmpfs ({why})"),
    };
    let members = members(3);
    let scratch = ScratchDir::new("full-recording");
    let mut nodes = vec![
        test_builder(&scratch, 0, &members, test_channel()).start().unwrap(),
        test_builder(&scratch, 1, &members, test_channel()).start().unwrap(),
        test_builder(&scratch, 2, &members, test_channel()).data_dir(tmpfs.path().join("data-2")).start().unwrap(),
    ];
    let client = nodes[0].client();
    let until = Instant::now() + Duration::from_secs(60);
    let failure = loop {
        assert!(Instant::now() < until, "member 2's recorder never failed\n{}", dump(&nodes));
        let _ = client.offer(&[7u8; 1000]);
        nodes[0].invoke().unwrap();
        nodes[1].invoke().unwrap();
        match nodes[2].invoke() {
            Ok(_) => {}
            Err(NodeError::Agents(failures)) => break format!("{failures:?}"),
            Err(e) => panic!("{e}"),
        }
        for node in nodes.iter_mut() {
            node.poll_committed(256, |_| {});
        }
    };
    assert!(
        failure.contains("disk is full") && failure.contains("segment-"),
        "names the file and the cause: {failure}"
    );
    // The other two still commit: the leader and member 1 are a majority.
    let commit = nodes[0].commit_position();
    let until = Instant::now() + Duration::from_secs(60);
    while nodes[0].commit_position() < commit + (64 << 10) {
        assert!(Instant::now() < until, "the majority stopped committing");
        let _ = client.offer(&[8u8; 1000]);
        for node in &mut nodes[..2] {
            node.invoke().unwrap();
            node.poll_committed(256, |_| {});
        }
    }
}
