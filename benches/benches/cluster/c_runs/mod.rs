//! The model's C per consensus idle strategy, in the threaded layout: the leader's consensus agent on its
//! own thread with the strategy under test, a paced moderate load, the leader Sender's control syscalls
//! (and data syscalls, commit frames, consensus cycles), and serial latency in that layout.

use std::time::{Duration, Instant};

use quorumcast_bench::sweep::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use quorumcast_bench::sweep::SweepError;
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::shm::stats::Stats;

use crate::{histogram, offer, remove_data, spec, us, Settings, Variant, C_RATE};

/// What one C run found.
#[derive(Clone, Debug)]
pub struct CResult {
    pub variant: Variant,
    pub idle: String,
    pub achieved: f64,
    pub control_per_s: f64,
    pub data_per_s: f64,
    pub commit_frames_per_s: f64,
    pub consensus_cycles_per_s: f64,
    pub serial: (f64, f64, u64),
}

pub fn run_c(variant: Variant, idle: &str, settings: &Settings, index: usize) -> Result<CResult, String> {
    let run = format!("c{index}");
    remove_data(&run);
    let result = on_harness_thread(|| measure_c(&run, variant, idle, settings).map_err(SweepError::Cluster))
        .map_err(|e| e.to_string());
    remove_data(&run);
    result
}

fn measure_c(run: &str, variant: Variant, idle: &str, settings: &Settings) -> Result<CResult, String> {
    let consensus: IdleStrategyConfig = idle.parse().map_err(|e| format!("{e}"))?;
    let layout = Layout::for_cores(2).for_c_probe();
    let layout = if settings.pin { layout } else { layout.without_pinning() };
    let spec = ClusterSpec { consensus_idle: consensus, ..spec(run, &variant, layout) };
    let mut cluster = LoadCluster::start(&spec).map_err(|e| format!("C run {idle}: {e}"))?;
    // Paced load: the warm-up third of the time, then the measured window.
    let warmup = settings.c_time / 3;
    let start = Instant::now();
    let base = cluster.offered();
    let mut first: Option<(Instant, Stats, Vec<u64>)> = None;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= warmup + settings.c_time {
            break;
        }
        if first.is_none() && elapsed >= warmup {
            let leader = cluster.stats().swap_remove(0);
            first = Some((Instant::now(), leader, cluster.applied()));
        }
        let due = base + (C_RATE as u128 * elapsed.as_nanos() / 1_000_000_000) as u64;
        while cluster.offered() < due && offer(&mut cluster) {}
        cluster.poll(|_| {});
        std::thread::sleep(Duration::from_micros(50));
    }
    let (t0, s0, a0) = first.expect("the warm-up ends before the window");
    let seconds = t0.elapsed().as_secs_f64();
    let applied = cluster.applied();
    let leader = cluster.stats().swap_remove(0).since(&s0);
    let rate = |count: i64| count as f64 / seconds;
    let achieved = applied.iter().zip(&a0).map(|(a, b)| a - b).min().unwrap_or(0) as f64 / seconds;
    let (control_per_s, data_per_s) = (rate(leader.sender().control_syscalls()), rate(leader.sender().data_syscalls()));
    let (commit_frames_per_s, consensus_cycles_per_s) =
        (rate(leader.consensus().commit_frames()), rate(leader.labelled("consensus duty cycles")));
    // Serial latency in this layout.
    cluster.drain(Duration::from_secs(10)).map_err(|e| format!("C run {idle}: {e}"))?;
    let mut histogram = histogram();
    let end = Instant::now() + settings.serial_time;
    for _ in 0..settings.c_serial_samples {
        if Instant::now() > end {
            break;
        }
        let t = Instant::now();
        while !offer(&mut cluster) {
            std::thread::yield_now();
        }
        while cluster.committed() < cluster.offered() {
            if cluster.poll(|_| {}) == 0 {
                std::thread::yield_now();
            }
        }
        let _ = histogram.record(t.elapsed().as_nanos() as u64);
    }
    cluster.close().map_err(|e| format!("C run {idle}: {e}"))?;
    Ok(CResult {
        variant,
        idle: idle.to_owned(),
        achieved,
        control_per_s,
        data_per_s,
        commit_frames_per_s,
        consensus_cycles_per_s,
        serial: (us(&histogram, 0.5), us(&histogram, 0.99), histogram.len()),
    })
}
