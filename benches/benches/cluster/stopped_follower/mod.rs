//! The stall a stopped follower causes: a paced run in which member 2 is not run for 2 s, the longest
//! time the leader's commit position stood still before, during and after, and its table.

use std::time::{Duration, Instant};

use quorumcast_bench::sweep::cluster::{Layout, LoadCluster};
use quorumcast_driver::media::transport::SendMode;

use crate::{offer, rate, spec, Variant};

/// The stall a stopped follower causes: the longest time the leader's commit position stood still in
/// each phase of a paced run (before, while member 2 is stopped, after it runs again).
#[derive(Clone, Debug)]
pub struct StallResult {
    pub offered_per_s: f64,
    /// Longest gap between commit advances on the leader, in ms: before, stopped, after.
    pub gaps_ms: [f64; 3],
    /// Committed messages per second in each phase.
    pub committed_per_s: [f64; 3],
    /// Whether member 2 was told it is behind the retained log (it was stopped long enough to be).
    pub told_behind: bool,
}

/// Phases of the stall run: before, member 2 stopped for 2 s, after.
pub const STALL_PHASES: [(&str, Duration); 3] =
    [("before", Duration::from_secs(1)), ("stopped", Duration::from_secs(2)), ("after", Duration::from_secs(1))];

/// Offered load of the stall run, messages per second: moderate, well below saturation.
const STALL_RATE: f64 = 200_000.0;

pub fn run_stall(pinned: bool) -> Result<StallResult, String> {
    let variant = Variant { fast_status: true, ..Variant::plain(1408, SendMode::Classic, false) };
    let mut cluster = LoadCluster::start(&spec("stall", &variant, Layout::split(pinned))).map_err(|e| e.to_string())?;
    let mut gaps_ms = [0f64; 3];
    let mut committed_per_s = [0f64; 3];
    for (phase, (_, length)) in STALL_PHASES.iter().enumerate() {
        cluster.pause_member(2, phase == 1).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let (offered_at_start, committed_at_start) = (cluster.offered(), cluster.commit_position());
        let (mut commit, mut last_advance) = (committed_at_start, started);
        let applied_at_start = cluster.committed();
        while started.elapsed() < *length {
            let due = offered_at_start + (started.elapsed().as_secs_f64() * STALL_RATE) as u64;
            while cluster.offered() < due && offer(&mut cluster) {}
            cluster.cycle(|_| {});
            let now = Instant::now();
            let c = cluster.commit_position();
            if c > commit {
                commit = c;
                last_advance = now;
            } else if cluster.offered() > cluster.committed() {
                gaps_ms[phase] = gaps_ms[phase].max((now - last_advance).as_secs_f64() * 1e3);
            }
        }
        committed_per_s[phase] = (cluster.committed() - applied_at_start) as f64 / length.as_secs_f64();
    }
    let told_behind = cluster.stats()[2].receiver().behind_retained_received() > 0;
    if std::env::var_os("QC_BENCH_DEBUG").is_some() {
        for (id, snapshot) in cluster.stats().iter().enumerate() {
            let moved: Vec<_> = snapshot.iter().filter(|c| c.value != 0).map(|c| (&c.label, c.value)).collect();
            println!("node {id}: {moved:?}");
        }
    }
    cluster.close().map_err(|e| e.to_string())?;
    Ok(StallResult { offered_per_s: STALL_RATE, gaps_ms, committed_per_s, told_behind })
}

pub fn print_stall(s: &StallResult) {
    println!(
        "\nStopped follower (mtu1408 classic separate, status interval 10 ms), paced at {}/s:",
        rate(s.offered_per_s)
    );
    println!("| phase | seconds | committed /s | longest gap between commits on the leader |");
    println!("|---|---:|---:|---:|");
    for (i, (name, length)) in STALL_PHASES.iter().enumerate() {
        println!("| {name} | {:.0} | {} | {:.2} ms |", length.as_secs_f64(), rate(s.committed_per_s[i]), s.gaps_ms[i]);
    }
    println!("member 2 told it is behind the retained log when it ran again: {}", s.told_behind);
}
