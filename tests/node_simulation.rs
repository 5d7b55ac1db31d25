//! The node simulator over many seeds: real `Node`s (the type an application embeds) in one thread, with a
//! simulated clock and network (see `quorumcast_testkit::sim`).
//!
//! `QC_NODE_SIM_SEED=<n>` replays one seed exactly (`QC_NODE_SIM_TRACE=1` prints what happened);
//! `QC_NODE_SIM_SOAK=<count>` runs that many seeds from a random start. A seed that ever fails becomes a
//! named test below.

use quorumcast_testkit::sim::{SimConfig, Simulation};

/// Seeds per member count in a plain `cargo test`.
const DEFAULT_SEEDS: u64 = 40;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

fn run(seed: u64, members: usize) {
    let mut config = SimConfig::new(seed, members);
    config.trace = std::env::var_os("QC_NODE_SIM_TRACE").is_some();
    if let Err(failure) = Simulation::new(config).run() {
        panic!("{members} members: {failure}");
    }
}

fn seeds(first: u64) -> Vec<u64> {
    if let Some(seed) = env_u64("QC_NODE_SIM_SEED") {
        return vec![seed];
    }
    let count = env_u64("QC_NODE_SIM_SOAK").unwrap_or(DEFAULT_SEEDS);
    let start = if env_u64("QC_NODE_SIM_SOAK").is_some() {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    } else {
        first
    };
    (0..count).map(|i| start.wrapping_add(i)).collect()
}

#[test]
fn three_real_nodes_keep_one_committed_order_and_recover_after_faults() {
    for seed in seeds(1_000) {
        run(seed, 3);
    }
}

#[test]
fn five_real_nodes_keep_one_committed_order_and_recover_after_faults() {
    for seed in seeds(5_000) {
        run(seed, 5);
    }
}

/// Found by seed 1001: a new leader's log is continued from its previous one at a later position than a
/// lagging follower's; the follower NAKed below the log's first byte, was never answered nor told it was
/// behind, and, responsive, held the Sender (and every commit) back by the lag bound for good. The
/// publication now knows its log's start (`NetworkPublication::set_log_start`).
#[test]
fn seed_1001_a_follower_below_a_continued_log_does_not_stall_commits() {
    run(1001, 3);
}
