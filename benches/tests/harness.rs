//! The shared harness: ports handed out once, scratch directories that clean up.

use quorumcast_testkit::{free_loopback_port, ScratchDir};

#[test]
fn ports_are_never_handed_out_twice_and_stay_below_the_ephemeral_range() {
    let ports: Vec<u16> = (0..200).map(|_| free_loopback_port()).collect();
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ports.len());
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32_768);
    assert!(ports.iter().all(|&p| p >= 10_000 && p < ephemeral), "{ports:?} (ephemeral from {ephemeral})");
}

#[test]
fn a_scratch_directory_is_fresh_and_goes_away() {
    let path = {
        let scratch = ScratchDir::new("harness-scratch");
        std::fs::write(scratch.join("f"), b"x").unwrap();
        assert!(scratch.path().is_dir());
        scratch.path().to_path_buf()
    };
    assert!(!path.exists() || std::env::var_os("QC_KEEP").is_some());
}
