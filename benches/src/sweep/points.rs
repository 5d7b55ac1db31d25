//! The utilisation points of one configuration: each offered `rho x mu` (in process or from a client
//! process), with the host watched over the same window, judged, and printed under `--verbose`.

use std::path::Path;
use std::time::Instant;

use crate::hiccup::{self, Hiccups, HostCpu, WakeProbe};
use crate::report::{
    self, AgentDutyCycles, ConfigResult, CycleQuantiles, OtherCpu, PointResult, WakeLateness, NS_PER_US,
};

use super::cluster::LoadCluster;
use super::measure::{self, SendTimes};
use super::profile::{self, Profile};
use super::progress::{rate, Progress};
use super::{remote, SweepError};

/// Runs every utilisation point of the profile at `rho x mu` on `cluster`, writing each point's
/// histograms under `dir` and adding it to `result`; with `client`, each point's load comes from that
/// client process (see [`remote::client_point`]). Under `--verbose` each point is printed beside
/// `hiccups`, the host's own stalls.
#[allow(clippy::too_many_arguments)]
pub(super) fn measure_points(
    cluster: &mut LoadCluster,
    profile: &Profile,
    result: &mut ConfigResult,
    mu: f64,
    times: &mut SendTimes,
    hiccups: &Hiccups,
    dir: &Path,
    progress: &Progress,
    client: Option<&remote::ClientProcess>,
) -> Result<(), SweepError> {
    let t = &profile.timings;
    for &rho in &profile.rhos {
        progress.phase(&format!("rho {rho:.2}"));
        let stem = result.point_stem(rho);
        let watch = HostWatch::start(progress);
        let mut entry = match client {
            None => in_process_point(cluster, rho, mu, t, times, dir, &stem, progress)?,
            Some(client) => {
                let files = (dir.join(PointResult::hgrm_path(&stem)), dir.join(PointResult::service_hgrm_path(&stem)));
                let json = dir.join("client").join(format!("{stem}.json"));
                let sizes = (result.msg as usize, result.mtu as usize);
                let point = remote::client_point(cluster, client, rho, mu, sizes, t, json, Some(files))?;
                let report = &point.report;
                progress.detail(&format!(
                    "   rho {rho:.2}: client process: lambda {} achieved {} msg/s; from intended p50 {:.1} p99 {:.1} \
                     p99.9 {:.1} max {:.0} us; from offer p50 {:.1} p99 {:.1} us ({} messages after {} of warm-up)",
                    rate(point.lambda),
                    rate(report.rate),
                    report.latency_us.p50,
                    report.latency_us.p99,
                    report.latency_us.p999,
                    report.latency_us.max,
                    report.service_latency_us.p50,
                    report.service_latency_us.p99,
                    point.messages,
                    point.warmup
                ));
                PointResult {
                    rho,
                    lambda: point.lambda,
                    achieved: report.rate,
                    latency_us: report.latency_us,
                    service_latency_us: report.service_latency_us,
                    hgrm: PointResult::hgrm_path(&stem),
                    service_hgrm: PointResult::service_hgrm_path(&stem),
                    agents: point.agents.iter().map(duty_cycles).collect(),
                    past_1ms_share: None,
                    steal_share: 0.0,
                    wake_probe: None,
                    tail_target: None,
                    other_cpu: None,
                    thread_waits: Vec::new(),
                    host_tasks: None,
                    saturated: false,
                }
            }
        };
        watch.finish(&mut entry);
        if let Some(worst) = entry.agents.iter().max_by_key(|a| a.duty_cycle_ns.max) {
            progress.detail(&format!(
                "            longest agent duty cycle: {} up to {} us (its p99 {} us, p99.9 {} us)",
                worst.name,
                worst.duty_cycle_ns.max / 1000,
                worst.duty_cycle_ns.p99 / 1000,
                worst.duty_cycle_ns.p999 / 1000
            ));
        }
        let measured = entry.past_1ms_share.map_or_else(|| "not known".into(), |s| format!("{:.2}%", 100.0 * s));
        progress.detail(&format!(
            "            past 1 ms: {measured} of messages (the host alone: {:.2}% of the worst core's time was more \
             than 1 ms into a stall in the hiccup probe); steal {:.2}% of the CPUs' time",
            100.0 * hiccups.past_long_share(),
            100.0 * entry.steal_share
        ));
        progress.detail(&format!("            {}", host_during(&entry, result.achieved_rho(&entry))));
        let nearest_half = result.points.iter().all(|p| (p.rho - 0.5).abs() > (rho - 0.5).abs());
        if nearest_half {
            result.agents = entry.agents.clone();
        }
        result.points.push(entry);
        progress.points_done(progress.bar.position() as usize + 1);
    }
    Ok(())
}

/// What watches the host while one point runs: the wake probe (threads sleeping 1 ms at a time) and
/// the CPU ticks at the point's start. Both cost next to nothing, so they run during the point.
struct HostWatch {
    probe: Option<WakeProbe>,
    cpu: Option<HostCpu>,
    waits: Option<hiccup::ThreadWaits>,
    tasks: Option<hiccup::HostTasks>,
    started: Instant,
}

impl HostWatch {
    /// Starts the probe (a warning, and no probe, when its thread cannot start) and reads the ticks.
    fn start(progress: &Progress) -> Self {
        let probe =
            WakeProbe::start().map_err(|e| progress.warn("   ", &format!("no wake probe for this point: {e}"))).ok();
        let tasks = hiccup::HostTasks::read();
        Self { probe, cpu: HostCpu::read(), waits: hiccup::ThreadWaits::read(), tasks, started: Instant::now() }
    }

    /// Stops the probe and fills in `entry`'s host fields over the window since [`start`](Self::start):
    /// the probe's lateness, the steal, the other processes' CPU, the host's tasks; then its judgements
    /// ([`PointResult::assess`]).
    fn finish(self, entry: &mut PointResult) {
        let seconds = self.started.elapsed().as_secs_f64();
        entry.wake_probe = self.probe.map(|p| WakeLateness::from_records(&p.stop()));
        if let (Some(before), Some(after)) = (&self.waits, hiccup::ThreadWaits::read()) {
            entry.thread_waits = after.since(before, report::THREAD_WAIT_MIN_MS, &["wake-probe"]);
        }
        if let (Some(before), Some(after)) = (&self.tasks, hiccup::HostTasks::read()) {
            entry.host_tasks = Some(after.since(before));
        }
        if let (Some(before), Some(after)) = (self.cpu, HostCpu::read()) {
            let delta = after.since(&before);
            entry.steal_share = delta.cpu.steal_share();
            let ticks_per_s = hiccup::clock_ticks_per_s();
            entry.other_cpu = Some(OtherCpu::from_ticks(delta.other_ticks(), delta.cpu.irq, seconds, ticks_per_s));
        }
        entry.assess();
    }
}

/// One line on the host during a point: the wake probe beside the latency, the tail target, the other
/// processes' CPU, and whether the point fell short of its load (at `achieved_rho`).
fn host_during(entry: &PointResult, achieved_rho: f64) -> String {
    let probe = entry.wake_probe.as_ref().map_or_else(
        || "no wake probe".to_string(),
        |w| {
            let mut threads: Vec<String> = w
                .cores
                .iter()
                .map(|c| {
                    let rt = if c.realtime { "" } else { ", not real-time" };
                    format!("core {} p99 {:.1}, max {:.0}{rt}", c.core, c.late_us.p99, c.late_us.max)
                })
                .collect();
            if let Some(any) = &w.any_core_us {
                threads.push(format!("any core p99 {:.1}, max {:.0}", any.p99, any.max));
            }
            format!(
                "1 ms sleepers ({}) woke late p99 {:.1} us, p99.9 {:.1} us, max {:.0} us ({} wake-ups; {} us; latency \
                 p99 {:.1} us, p99.9 {:.1} us)",
                w.reference,
                w.late_us.p99,
                w.late_us.p999,
                w.late_us.max,
                w.wakeups,
                threads.join("; "),
                entry.latency_us.p99,
                entry.latency_us.p999
            )
        },
    );
    let target = entry
        .tail_target
        .as_ref()
        .map_or_else(String::new, |t| format!("; tail target {:.1} us: {}", t.limit_us, t.verdict()));
    let other = entry.other_cpu.map_or_else(
        || "; other processes: not known".to_string(),
        |o| {
            format!(
                "; other processes {:.1}% of a core ({}){}",
                100.0 * o.core_share,
                o.ticks_text(),
                if o.flagged { " (FLAGGED: the host was not quiet)" } else { "" }
            )
        },
    );
    let tasks =
        entry.host_tasks.as_ref().map_or_else(String::new, |t| format!("; the host's tasks ran {}", t.describe()));
    let saturated = if entry.saturated { format!("; SATURATED: ran at rho {achieved_rho:.2}") } else { String::new() };
    format!("host: {probe}{target}{other}{tasks}{saturated}; {}", thread_waits_text(&entry.thread_waits))
}

/// The threads that waited for a CPU during a point: `waited for a core: sender+receiver 11.2 ms, ...`.
fn thread_waits_text(waits: &[hiccup::ThreadWait]) -> String {
    if waits.is_empty() {
        return format!("no thread of this process waited {} ms or more for a core", report::THREAD_WAIT_MIN_MS);
    }
    let each: Vec<String> = waits.iter().map(|w| format!("{} {:.1} ms", w.thread, w.waited_ms)).collect();
    format!("waited for a core: {}", each.join(", "))
}

/// One utilisation point with the in-process load generator ([`measure::run_point`]), its histograms
/// written under `dir`.
#[allow(clippy::too_many_arguments)]
fn in_process_point(
    cluster: &mut LoadCluster,
    rho: f64,
    mu: f64,
    t: &profile::Timings,
    times: &mut SendTimes,
    dir: &Path,
    stem: &str,
    progress: &Progress,
) -> Result<PointResult, SweepError> {
    let point = measure::run_point(cluster, rho, mu, t, times)?;
    report::write_point_histograms(dir, stem, &point.latency, &point.service)?;
    let mut entry = PointResult::from_histograms(
        stem,
        rho,
        point.lambda,
        point.achieved,
        &point.latency,
        &point.service,
        NS_PER_US,
    );
    entry.agents = point.agents.iter().map(duty_cycles).collect();
    progress.detail(&format!(
        "   rho {rho:.2}: lambda {} achieved {} msg/s; from intended p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.0} us; \
         from offer p50 {:.1} p99 {:.1} us; {} back-pressured offers, max offer lag {:.0} us",
        rate(point.lambda),
        rate(point.achieved),
        entry.latency_us.p50,
        entry.latency_us.p99,
        entry.latency_us.p999,
        entry.latency_us.max,
        entry.service_latency_us.p50,
        entry.service_latency_us.p99,
        point.back_pressured,
        point.max_offer_lag_ns as f64 / 1e3
    ));
    Ok(entry)
}

/// The report's form of one agent's cycle distribution.
fn duty_cycles(a: &measure::AgentCycles) -> AgentDutyCycles {
    AgentDutyCycles {
        name: a.name.clone(),
        cycles: a.cycles,
        duty_cycle_ns: CycleQuantiles { p50: a.p50_ns, p99: a.p99_ns, p999: a.p999_ns, max: a.max_ns },
    }
}
