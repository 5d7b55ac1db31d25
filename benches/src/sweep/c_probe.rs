//! The C probe: per consensus idle strategy and layout, a cluster paced at fractions of the model's
//! capacity, counting the leader Sender's control syscalls; and the probe's C for a configuration.

use crate::probe::SendRate;
use crate::report::{CProbe, CProbeLoad, C_ALONE, C_SHARED};
use quorumcast_driver::agent::idle::IdleStrategyConfig;
use quorumcast_driver::media::transport::SendMode;

use super::cluster::{on_harness_thread, ClusterSpec, Layout, LoadCluster};
use super::config::predict;
use super::measure;
use super::profile::{self, ConfigSpec, Profile, C_PROBE_RHOS};
use super::progress::{rate, Progress};
use super::{SweepError, SweepOptions};

/// The C probe: for each consensus idle strategy, a cluster whose consensus agent runs its own duty cycle
/// on a core of its own ([`Layout::for_c_probe`]), paced at [`C_PROBE_RHOS`] of the model's capacity for
/// MTU 1408, 128 B, classic (from this host's S probe), counting commit frames, the Sender's control
/// syscalls and idle polls, and the consensus agent's duty cycles; then the same with the leader's
/// consensus agent, Sender and Receiver on one thread ([`Layout::for_c_probe_shared`]).
pub(super) fn probe_c(
    options: &SweepOptions,
    profile: &Profile,
    rates: &[SendRate],
    progress: &Progress,
) -> Result<Vec<CProbe>, SweepError> {
    let t = &profile.timings;
    let (mtu, msg) = (1408, 128);
    let s = measure::rate_for(rates, SendMode::Classic, mtu).map_or(0.0, |r| r.datagrams_per_s);
    let capacity = predict(&ConfigSpec::c_probe(mtu, msg), s, 0.0).1;
    let capacity = if capacity > 0.0 { capacity } else { t.c_rate / C_PROBE_RHOS[1] };
    let idles = profile.c_probe_idles();
    let layouts = [(C_ALONE, options.layout.for_c_probe()), (C_SHARED, options.layout.for_c_probe_shared())];
    for (name, layout) in &layouts {
        progress.detail(&format!("C probe layout {name}: {}", layout.describe(IdleStrategyConfig::default())));
    }
    let mut probes = Vec::new();
    let count = layouts.len() * idles.len();
    for (name, layout) in layouts {
        for &idle in &idles {
            progress.phase(&format!("C probe {}/{count}: {name}, consensus idle {idle}", probes.len() + 1));
            probes.push(probe_c_with(layout, name, idle, (mtu, msg, capacity), t, progress)?);
        }
    }
    Ok(probes)
}

/// The C probe of one layout (`name`) and consensus idle strategy: a cluster of `msg`-byte messages at MTU
/// `mtu`, paced at [`C_PROBE_RHOS`] of `capacity`.
fn probe_c_with(
    layout: Layout,
    name: &str,
    idle: IdleStrategyConfig,
    (mtu, msg, capacity): (usize, usize, f64),
    t: &profile::Timings,
    progress: &Progress,
) -> Result<CProbe, SweepError> {
    let spec = ClusterSpec { consensus_idle: idle, ..ClusterSpec::new(mtu, msg, layout) };
    let loads = on_harness_thread(|| {
        let mut cluster = LoadCluster::start(&spec)?;
        let loads: Result<Vec<_>, _> =
            C_PROBE_RHOS.iter().map(|&rho| measure::probe_control(&mut cluster, t, rho * capacity)).collect();
        cluster.close()?;
        loads
    })?;
    for (rho, c) in C_PROBE_RHOS.iter().zip(&loads) {
        progress.detail(&format!(
            "C  {name:<15} consensus idle {:<20} rho {rho:.1} ({:>6}/s offered, {:>6}/s committed): commit frames {:>6}/s \
             (C = {:>6}/s), control syscalls {:>7}/s of which idle polls {:>7}/s, consensus cycles {:>7}/s",
            idle.to_string(),
            rate(c.offered_per_s),
            rate(c.committed_per_s),
            rate(c.commit_frames_per_s),
            rate(c.c_per_s),
            rate(c.control_per_s),
            rate(c.idle_polls_per_s),
            rate(c.consensus_cycles_per_s)
        ));
        if c.committed_per_s < 0.5 * c.offered_per_s {
            progress.detail(
                "   warning: the cluster carried under half the load it was offered; this C is not at that load",
            );
        }
    }
    let middle = &loads[1];
    let probe = CProbe {
        idle: idle.to_string(),
        layout: name.to_string(),
        c_per_s: middle.c_per_s,
        data_syscalls_per_s: middle.data_per_s,
        loads: C_PROBE_RHOS
            .iter()
            .zip(&loads)
            .map(|(&rho, c)| CProbeLoad {
                rho,
                offered_msgs_per_s: c.offered_per_s,
                committed_msgs_per_s: c.committed_per_s,
                commit_frames_per_s: c.commit_frames_per_s,
                control_syscalls_per_s: c.control_per_s,
                idle_polls_per_s: c.idle_polls_per_s,
                consensus_cycles_per_s: c.consensus_cycles_per_s,
            })
            .collect(),
    };
    Ok(probe)
}

/// The C probe's value for `config`'s idle strategy (0 when not probed).
pub(super) fn probe_c_for(config: &ConfigSpec, c_probe: &[CProbe]) -> f64 {
    let idle = config.idle.to_string();
    c_probe.iter().find(|c| c.idle == idle && c.layout == C_ALONE).map_or(0.0, |c| c.c_per_s)
}
