//! One configuration of the sweep: mu on a cluster whose Sender splits its time, with S probed between the
//! windows; the model's prediction beside it; then its utilisation points on a fresh cluster.

use std::path::Path;

use crate::budget::{SeedInputs, SenderBudget};
use crate::hiccup::Hiccups;
use crate::model::Model;
use crate::probe::SendRate;
use crate::report::{CProbe, ConfigResult};
use quorumcast_driver::agent::idle::IdleStrategyConfig;

use super::bottleneck;
use super::c_probe::probe_c_for;
use super::cluster::{on_harness_thread, ClusterSpec, LoadCluster};
use super::measure::{self, SendTimes, D};
use super::points::measure_points;
use super::profile::ConfigSpec;
use super::progress::{rate, Progress};
use super::{SweepError, SweepOptions};

/// The model's mu and M_pkt for `config` with `s` and `c`; mu is 0 (and `why` says why) when the model
/// cannot predict.
pub(super) fn predict(config: &ConfigSpec, s: f64, c: f64) -> (u32, f64, Option<String>) {
    match Model::new(s, c, D as u32).and_then(|m| m.analyze(config.mtu, config.msg)) {
        Ok(capacity) => (capacity.packing.per_datagram().floor() as u32, capacity.mu, None),
        Err(e) => {
            let m_pkt = crate::model::messages_per_datagram(config.mtu, config.msg).map_or(0, |p| p.messages as u32);
            (m_pkt, 0.0, Some(e.to_string()))
        }
    }
}

/// What the sweep measured of the host before the clusters ran.
pub(super) struct HostProbes<'a> {
    /// S per MTU and send mode.
    pub(super) rates: &'a [SendRate],
    /// C per idle strategy.
    pub(super) c: &'a [CProbe],
    /// The host's own stalls.
    pub(super) hiccups: &'a Hiccups,
    /// Nanoseconds one read of the clock the Sender's time split uses takes ([`budget::clock_read_ns`]).
    pub(super) clock_read_ns: f64,
}

pub(super) fn run_config(
    options: &SweepOptions,
    config: &ConfigSpec,
    probes: &HostProbes<'_>,
    times: &mut SendTimes,
    dir: &Path,
    progress: &Progress,
) -> Result<ConfigResult, SweepError> {
    let profile = &options.profile;
    let t = &profile.timings;
    // S drifts on a shared host (within seconds, on a small VM): probe it for this mode and MTU
    // in slices between the mu windows, with the cluster paused, and predict with the slices' mean, so
    // that the prediction and mu see the same machine; the slices stay in the report.
    // A slice that measured nothing (a probe that found no rate) takes the sweep's first probe.
    let cores = options.layout.probe_cores();
    let first = measure::rate_for(probes.rates, config.send_mode, config.mtu).map(|r| r.datagrams_per_s);
    let probe = || -> Result<Option<f64>, SweepError> {
        let fresh = measure::probe_send_rates(&[config.mtu], &[config.send_mode], t, cores)?;
        Ok(measure::rate_for(&fresh, config.send_mode, config.mtu).map(|r| r.datagrams_per_s).or(first))
    };
    let spec = ClusterSpec {
        send_mode: config.send_mode,
        control: config.control,
        consensus_idle: config.idle,
        sender_idle: profile.sender_idle,
        ..ClusterSpec::new(config.mtu, config.msg, options.layout)
    };
    // The mu cluster's Sender splits its time (its budget); the points' clusters run without the timing.
    let mu_spec = ClusterSpec { time_split: true, ..spec.clone() };
    let mu = with_cluster(&mu_spec, progress, |cluster| measure::measure_mu(cluster, t, probe))?;
    let mut result = summarize(config, probes, &mu, progress);
    let client = options.client.as_ref();
    let points_spec = match client {
        None => spec,
        Some(_) => ClusterSpec {
            clients: true,
            sender_idle: if spec.sender_idle.is_busy() { IdleStrategyConfig::default() } else { spec.sender_idle },
            ..spec.clone()
        },
    };
    if let Some(client) = client {
        result.latency_source = Some(format!(
            "client round trip (a qc-client process, idle {}, to the commit acknowledgement)",
            client.idle.map_or_else(|| "sched_yield".to_string(), |i| i.to_string())
        ));
    }
    with_cluster(&points_spec, progress, |cluster| {
        measure_points(cluster, profile, &mut result, mu.mu, times, probes.hiccups, dir, progress, client)
    })?;
    Ok(result)
}

/// Starts a cluster for `spec` on a fresh harness thread ([`on_harness_thread`]: the nodes start with the
/// whole affinity mask, then the thread pins itself), runs `work` on it, and closes it; an error of `work`
/// comes first, then one of closing.
fn with_cluster<T: Send>(
    spec: &ClusterSpec,
    progress: &Progress,
    work: impl FnOnce(&mut LoadCluster) -> Result<T, SweepError> + Send,
) -> Result<T, SweepError> {
    on_harness_thread(|| {
        let mut cluster = LoadCluster::start(spec)?;
        for warning in cluster.warnings() {
            progress.warn("   ", warning);
        }
        let outcome = work(&mut cluster);
        let closed = cluster.close();
        let value = outcome?;
        closed?;
        Ok(value)
    })
}

/// The configuration's result without its points: the prediction from the mean of the S slices probed
/// around the mu windows and the C of the saturated run, beside the measured mu; printed under `--verbose`.
fn summarize(config: &ConfigSpec, probes: &HostProbes<'_>, mu: &measure::MuRun, progress: &Progress) -> ConfigResult {
    let s = mu.s();
    let c_probe = probe_c_for(config, probes.c);
    let c = mu.control_per_s;
    let (m_pkt, mu_predicted, why) = predict(config, s, c);
    if let Some(why) = why {
        progress.detail(&format!("   no prediction: {why}"));
    }
    let mu_predicted_probe_c = if c_probe > 0.0 { predict(config, s, c_probe).1 } else { 0.0 };
    let sender_share = mu.evidence.sender_share;
    let result = ConfigResult {
        mtu: config.mtu as u32,
        idle: config.idle.to_string(),
        msg: config.msg as u32,
        send_mode: config.send_mode.as_str().to_string(),
        control: config.control.as_str().to_string(),
        s,
        s_before: mu.s_slices.first().copied().unwrap_or(0.0),
        s_after: mu.s_slices.last().copied().unwrap_or(0.0),
        s_slices: mu.s_slices.clone(),
        c,
        c_probe,
        mu_predicted_probe_c,
        sender_share,
        d: D as u32,
        m_pkt,
        mu_predicted,
        mu_measured: mu.mu,
        bottleneck: bottleneck::classify(&mu.evidence).text,
        sender_budget: SenderBudget::of(
            &mu.sender,
            &SeedInputs { s, c, d: D as u32, m_pkt: f64::from(m_pkt) },
            probes.clock_read_ns,
        ),
        points: Vec::new(),
        agents: Vec::new(),
        latency_source: None,
    };
    let (s_min, s_max) = result.s_band();
    let error = result.mu_error_percent().map_or("n/a".to_string(), |e| format!("{e:+.1}%"));
    progress.detail(&format!(
        "{config}: mu measured {} msg/s (windows {}), predicted ({} - {}) / {D} x {m_pkt} = {} msg/s, error {error} \
         (S {} slices {}-{}; with the C probe's {}/s: {}); sender {} data syscalls/s ({:.0}% of S) + {} \
         control ({}/s commit frames x {D}; {} idle polls/s left out), {:.1} msgs/datagram; bottleneck: {}",
        rate(mu.mu),
        mu.windows.iter().map(|&w| rate(w)).collect::<Vec<_>>().join(" "),
        rate(s),
        rate(c),
        rate(mu_predicted),
        mu.s_slices.len(),
        rate(s_min),
        rate(s_max),
        rate(c_probe),
        rate(mu_predicted_probe_c),
        rate(mu.data_per_s),
        result.sender_share * 100.0,
        rate(mu.control_per_s),
        rate(mu.c_per_s / D as f64),
        rate(mu.idle_polls_per_s),
        mu.messages_per_datagram,
        result.bottleneck
    ));
    match &result.sender_budget {
        Some(b) => {
            progress.detail(&format!("   {}", b.describe(mu.mu)));
            if !result.sender_bound() {
                progress
                    .detail("   (the budget is held to mu only where the Sender saturated first: not compared here)");
            }
        }
        None => progress.detail("   sender time: not split (no data sent, or the split was off)"),
    }
    result
}
