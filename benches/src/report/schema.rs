//! The sweep report's data: the types `summary.json` is made of.
//!
//! Field names are the report schema's JSON keys, which scripts read, exactly; the few extra fields
//! (`profile`, `timestamp`, `layout`, `c_probe`, `service_hgrm`) are additions, never renames. All rates
//! are per second, all latencies are in microseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::budget::SenderBudget;
use crate::hiccup::Hiccups;

/// The whole report of one sweep run: what `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// The sweep's profile: `quick` or `full` (or a custom name for a hand-picked grid).
    pub profile: String,
    /// When the sweep started, UTC, as `YYYY-MM-DDTHH:MM:SSZ` (see [`super::utc_timestamp`]).
    pub timestamp: String,
    /// The machine the sweep ran on.
    pub host: Host,
    /// The core layout the clusters ran with, as printed by the sweep (e.g. `leader sender: core 1; ...`).
    pub layout: String,
    /// The measured S: single-thread send calls per second for each datagram size, and D.
    pub s_probe: SProbe,
    /// The measured C: a leader Sender's control syscalls per second, one entry per idle strategy.
    pub c_probe: Vec<CProbe>,
    /// One entry per configuration (MTU x idle strategy x message size x send mode x control).
    pub configs: Vec<ConfigResult>,
    /// The host's own stalls, measured before the clusters ran: the floor under the points' tails (see
    /// [`crate::hiccup`]). Absent in reports written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hiccups: Option<Hiccups>,
}

impl SweepReport {
    /// How many points were flagged, saturated, and met or missed the tail target.
    pub fn flags(&self) -> PointFlags {
        let points: Vec<&PointResult> = self.configs.iter().flat_map(|c| &c.points).collect();
        let targets = points.iter().filter_map(|p| p.tail_target.as_ref());
        PointFlags {
            points: points.len(),
            host_busy: points.iter().filter(|p| p.host_busy()).count(),
            saturated: points.iter().filter(|p| p.saturated).count(),
            target_met: targets.clone().filter(|t| t.met).count(),
            target_missed: targets.filter(|t| !t.met).count(),
        }
    }
}

/// The counts of [`SweepReport::flags`]: what the sweep's summary line says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointFlags {
    /// Points in the report.
    pub points: usize,
    /// Points during which other processes took more than [`OTHER_CPU_FLAG_SHARE`] of a core.
    pub host_busy: usize,
    /// Points that carried less than [`SATURATED_BELOW`] of their offered load.
    pub saturated: usize,
    /// Points at rho <= [`TAIL_TARGET_MAX_RHO`] whose tail met the target.
    pub target_met: usize,
    /// Points at rho <= [`TAIL_TARGET_MAX_RHO`] whose tail missed it.
    pub target_missed: usize,
}

impl PointFlags {
    /// One sentence: `12 points: 3 flagged, other processes took more than 5% of a core during them; 1
    /// saturated (achieved < 95% of offered); tail target at rho <= 0.5 (p99 <= probe p99 + 3 x p50): 4
    /// met, 2 missed`.
    pub fn describe(&self) -> String {
        format!(
            "{} points: {} flagged, other processes took more than {:.0}% of a core during them; {} saturated \
             (achieved < {:.0}% of offered); tail target at rho <= {} (p99 <= probe p99 + {} x p50): {} met, {} missed",
            self.points,
            self.host_busy,
            100.0 * OTHER_CPU_FLAG_SHARE,
            self.saturated,
            100.0 * SATURATED_BELOW,
            TAIL_TARGET_MAX_RHO,
            TAIL_TARGET_P50_FACTOR,
            self.target_met,
            self.target_missed
        )
    }
}

/// The machine a sweep ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// The CPU model name (from `/proc/cpuinfo`).
    pub cpu: String,
    /// Online cores the sweep could use.
    pub cores: u32,
    /// The kernel release (`uname -r`).
    pub kernel: String,
}

/// The S probe: single-thread send calls per second for each datagram size, to `d` destinations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SProbe {
    /// Destinations per datagram (followers) the probe sent to, alternating.
    pub d: u32,
    /// One measurement per (datagram size, send mode).
    pub sizes: Vec<SProbeEntry>,
}

/// One S measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SProbeEntry {
    /// The datagram size in bytes (an MTU).
    pub datagram: u32,
    /// The send mode: `classic` (one `sendmsg` per datagram), `mmsg` or `gso` (effective datagrams/s).
    pub send_mode: String,
    /// Datagrams per second one thread sent.
    pub s: f64,
}

/// The C probe for one idle strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CProbe {
    /// The idle strategy in its text form (`noop`, `sleep-ns:1000`, `backoff`, ...).
    pub idle: String,
    /// Where the consensus agent ran: [`C_ALONE`] (a thread and a core of its own; the C the predictions
    /// take) or [`C_SHARED`] (one thread with the leader's Sender and Receiver). Reports written before the
    /// shared layout existed have only the first.
    #[serde(default = "c_alone")]
    pub layout: String,
    /// The model's C with this strategy: commit frames x D per second at the middle load of `loads` (rho
    /// 0.3), the C the predictions "with probe C" use.
    pub c_per_s: f64,
    /// Data syscalls per second of the leader's Sender during the same window.
    pub data_syscalls_per_s: f64,
    /// What the consensus agent and the Sender did at each paced load.
    #[serde(default)]
    pub loads: Vec<CProbeLoad>,
}

/// [`CProbe::layout`]: the consensus agent alone on a thread and a core of its own.
pub const C_ALONE: &str = "consensus-alone";
/// [`CProbe::layout`]: the consensus agent on one thread with the leader's Sender and Receiver.
pub const C_SHARED: &str = "shared";

fn c_alone() -> String {
    C_ALONE.to_string()
}

/// The C probe at one paced load, with the consensus agent on a core of its own running its own duty
/// cycle with the strategy under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CProbeLoad {
    /// The load as a share of the model's capacity for MTU 1408, 128 B, classic (from the S probe).
    pub rho: f64,
    /// Messages per second offered.
    pub offered_msgs_per_s: f64,
    /// Messages per second committed.
    pub committed_msgs_per_s: f64,
    /// Commit frames per second the consensus agent sent (each costs the Sender D syscalls: that is C).
    pub commit_frames_per_s: f64,
    /// Every control (non-data) syscall of the leader's Sender per second, idle polls included.
    pub control_syscalls_per_s: f64,
    /// Of those, the Sender's polls of empty control sockets on cycles that sent nothing.
    pub idle_polls_per_s: f64,
    /// The consensus agent's duty cycles per second.
    pub consensus_cycles_per_s: f64,
}

/// One configuration of the sweep: the model's prediction, the measured capacity, and the latency points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    /// The MTU in bytes.
    pub mtu: u32,
    /// The idle strategy in its text form.
    pub idle: String,
    /// The application message size in bytes.
    pub msg: u32,
    /// The send mode: `classic`, `mmsg` or `gso`.
    pub send_mode: String,
    /// How commits travel: `separate` commit frames or `piggyback`ed on data.
    pub control: String,
    /// The S used in the prediction (per second): the mean of `s_slices`, probed for this send mode and
    /// MTU between the mu windows (the report's `s_probe` holds the sweep's first probe).
    pub s: f64,
    /// The first S slice, probed just before the first mu window (per second).
    #[serde(default)]
    pub s_before: f64,
    /// The last S slice, probed just after the last mu window (per second).
    #[serde(default)]
    pub s_after: f64,
    /// Every S slice, in time order: one before the first mu window and one after each (per second), with
    /// the cluster's agent threads paused so that the probe had their cores.
    #[serde(default)]
    pub s_slices: Vec<f64>,
    /// The C used in the prediction (per second): the control syscalls the leader's Sender made during the
    /// saturated run on duty cycles that also sent data, plus every control frame it sent (commit frames to
    /// each follower, polls for acknowledgements and status messages, heartbeats): the budget control
    /// traffic really took from data while mu was measured. Polls on cycles that sent nothing are idle time
    /// and are left out.
    pub c: f64,
    /// The C probe's value for this idle strategy, measured at the probe's moderate load (per second); 0
    /// when the probe did not measure this strategy.
    #[serde(default)]
    pub c_probe: f64,
    /// The model's capacity with `c_probe` for C: what a sizing from the two probes alone predicts.
    #[serde(default)]
    pub mu_predicted_probe_c: f64,
    /// The leader Sender's data syscalls per second during the saturated run, as a fraction of S.
    #[serde(default)]
    pub sender_share: f64,
    /// Destinations per log datagram (followers).
    pub d: u32,
    /// Messages per datagram: `floor(usable_MTU / framed_msg)`.
    pub m_pkt: u32,
    /// The model's capacity `(S - C) / D x M_pkt`, messages per second.
    pub mu_predicted: f64,
    /// The sustained committed messages per second under a saturating load.
    pub mu_measured: f64,
    /// The stage that saturated first: `sender`, `append`, `receiver` or `load`.
    pub bottleneck: String,
    /// The leader Sender's time split over the mu windows and the capacity that budget gives, with the
    /// seed model's error taken apart term by term (see [`crate::budget`]). Absent where the split was not
    /// measured, and in reports written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_budget: Option<SenderBudget>,
    /// One entry per utilization point, in the order they ran.
    pub points: Vec<PointResult>,
    /// The agents' duty-cycle lengths at the point nearest rho 0.5 (each point has its own in `points`).
    #[serde(default)]
    pub agents: Vec<AgentDutyCycles>,
    /// Where the points' latency was taken when not by the in-process harness (absent then): `client round
    /// trip (...)` when a client process offered each point's load (the sweep's `--client-process`), its
    /// latency from each message's intended send time to its commit acknowledgement at the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_source: Option<String>,
}

/// One operating point: a paced open-loop load at `rho x mu_measured`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// The target utilization `lambda / mu_measured`.
    pub rho: f64,
    /// The offered load, messages per second.
    pub lambda: f64,
    /// The committed messages per second actually achieved.
    pub achieved: f64,
    /// Latency from each message's intended send time to its commit (corrected for coordinated omission).
    pub latency_us: Percentiles,
    /// Latency from each message's actual offer time to its commit.
    pub service_latency_us: Percentiles,
    /// The `.hgrm` file of `latency_us`, relative to the report directory.
    pub hgrm: String,
    /// The `.hgrm` file of `service_latency_us`, relative to the report directory.
    pub service_hgrm: String,
    /// Each agent thread's duty-cycle lengths during the point (so that a stall names its stage).
    #[serde(default)]
    pub agents: Vec<AgentDutyCycles>,
    /// Share of the messages whose latency from intended send time was a millisecond or more (0 to 1;
    /// absent where the latency came from a client process's report, which has percentiles only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub past_1ms_share: Option<f64>,
    /// Share of the CPUs' time the hypervisor took during the point (`/proc/stat` steal, 0 to 1), which
    /// no agent's counters can show; counted in 10 ms ticks, so short points often read 0.
    #[serde(default)]
    pub steal_share: f64,
    /// How late a thread sleeping 1 ms at a time woke over the same window as the point (the host's own
    /// stalls, measured while the point ran). Absent where its thread could not start, and in reports
    /// written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_probe: Option<WakeLateness>,
    /// The tail target at rho <= [`TAIL_TARGET_MAX_RHO`]: latency p99 <= the probe's p99 +
    /// [`TAIL_TARGET_P50_FACTOR`] x latency p50 (see [`TailTarget::evaluate`]); absent at higher rho, and
    /// where the point has no probe or no latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_target: Option<TailTarget>,
    /// The CPU time processes other than the sweep (and its reaped children) took during the point.
    /// Absent where `/proc` could not be read, and in reports written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cpu: Option<OtherCpu>,
    /// This process's threads that stood runnable for at least [`THREAD_WAIT_MIN_MS`] while other
    /// threads held their CPUs during the point, by name, longest first (the wake probe's own left out):
    /// a late stage whose thread waited was kept off its core, one that did not was working. The wake
    /// probe's real-time sleepers take part of it: each wake-up preempts the thread on its core for
    /// 10-20 us, 20-30 ms of a 1.5 s point (measured 2026-12-05); the rest is other threads'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_waits: Vec<crate::hiccup::ThreadWait>,
    /// The CPU time the machine's other tasks (kernel threads and other processes) took during the point,
    /// task by task: what the real-time wake probe, which preempts them, cannot see. Absent where the
    /// kernel keeps no scheduler statistics, and in reports written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tasks: Option<crate::hiccup::HostTasksRan>,
    /// The point carried less than [`SATURATED_BELOW`] of its offered load (`achieved < 0.95 x lambda`):
    /// it did not run at its nominal rho, so the chart draws it apart, at its achieved rho
    /// (`achieved / mu_measured`), off the latency line.
    #[serde(default)]
    pub saturated: bool,
}

/// A point whose achieved rate is under this share of its offered rate is [`PointResult::saturated`].
pub const SATURATED_BELOW: f64 = 0.95;

/// A point during which other processes took more than this share of one core's time is flagged
/// ([`OtherCpu::flagged`]): its latency is not the engine's alone.
pub const OTHER_CPU_FLAG_SHARE: f64 = 0.05;

/// Fewer other ticks than this in a window never flag it: `/proc/stat` and `/proc/self/stat` are
/// counted in 10 ms ticks, and their difference is good to a tick or two, so a window too short to hold
/// this many (a point of a few milliseconds) cannot tell a busy host from rounding.
pub const OTHER_CPU_MIN_TICKS: u64 = 3;

/// A thread's wait for a CPU during a point is reported from this many milliseconds.
pub const THREAD_WAIT_MIN_MS: f64 = 0.5;

/// The tail target is evaluated at points of rho up to this (queueing dominates the tail above it).
pub const TAIL_TARGET_MAX_RHO: f64 = 0.5;

/// The tail target's allowance for the pipeline: latency p99 may exceed the host probe's p99 by this many
/// latency p50s.
pub const TAIL_TARGET_P50_FACTOR: f64 = 3.0;

/// What the wake probe (threads sleeping 1 ms at a time, see [`crate::hiccup::WakeProbe`]) saw during a
/// point: how late they woke.
///
/// Invariant: `late_us` is, percentile by percentile, the worst of the threads the host's stalls are
/// read from ([`crate::hiccup::WakeRecords::host_stalls`]): every core's pinned real-time thread, or the
/// free thread alone where real-time priority was refused; `reference` names which.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeLateness {
    /// The sleep asked for each time, and the correction's expected interval, us (1000).
    pub interval_us: f64,
    /// Times the threads read for `late_us` woke during the point, together.
    pub wakeups: u64,
    /// Values in their histograms: the wake-ups plus, for each one late by k intervals, the k it
    /// swallowed (recorded with the expected-interval correction, as jHiccup does).
    pub recorded: u64,
    /// How late they woke, us: the host's stalls as a runnable thread saw them, over the point's window.
    pub late_us: Percentiles,
    /// Where `late_us` comes from: `every core` (the pinned real-time threads) or `any core` (the free
    /// thread). Reports from before the pinned threads read `any core`.
    #[serde(default = "any_core")]
    pub reference: String,
    /// The free thread's lateness (the one jHiccup runs: woken wherever the scheduler puts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_core_us: Option<Percentiles>,
    /// Each core's pinned thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cores: Vec<CoreLateness>,
}

fn any_core() -> String {
    "any core".into()
}

/// What one core's pinned wake-probe thread saw during a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreLateness {
    /// The core.
    pub core: usize,
    /// Whether the thread ran at real-time priority (else its lateness includes this process's threads).
    pub realtime: bool,
    /// Its wake-ups.
    pub wakeups: u64,
    /// How late it woke, us.
    pub late_us: Percentiles,
}

impl WakeLateness {
    /// The report's form of a probe's records (histograms in ns).
    pub fn from_records(records: &crate::hiccup::WakeRecords) -> Self {
        let stalls = records.host_stalls();
        let late_us = stalls
            .iter()
            .map(|r| Percentiles::from_histogram(&r.late_ns, 1000.0))
            .reduce(|a, b| a.worst(&b))
            .unwrap_or_else(|| Percentiles::from_histogram(&records.any_core.late_ns, 1000.0));
        Self {
            interval_us: crate::hiccup::WAKE_INTERVAL_NS as f64 / 1000.0,
            wakeups: stalls.iter().map(|r| r.wakeups).sum(),
            recorded: stalls.iter().map(|r| r.late_ns.len()).sum(),
            late_us,
            reference: if records.every_core_realtime() { "every core".into() } else { any_core() },
            any_core_us: Some(Percentiles::from_histogram(&records.any_core.late_ns, 1000.0)),
            cores: records
                .cores
                .iter()
                .map(|c| CoreLateness {
                    core: c.core,
                    realtime: c.realtime,
                    wakeups: c.record.wakeups,
                    late_us: Percentiles::from_histogram(&c.record.late_ns, 1000.0),
                })
                .collect(),
        }
    }
}

/// The CPU time other processes took during a point, from `/proc`: the machine's busy ticks (user, nice,
/// system, irq, softirq of `/proc/stat`) less this process's and its reaped children's (`/proc/self/stat`).
///
/// Invariant: `core_share = ticks / (seconds x ticks_per_s)` (0 for no time), `flagged = core_share >
/// OTHER_CPU_FLAG_SHARE && ticks >= OTHER_CPU_MIN_TICKS`. Ticks are sampled (10 ms on Linux), so a
/// point's figure is good to a tick or two: about 1% of a core over a 1.5 s point, 5% over 0.3 s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OtherCpu {
    /// The window, seconds.
    pub seconds: f64,
    /// Busy ticks that were neither this process's nor its children's.
    pub ticks: u64,
    /// Of all busy ticks in the window, those in interrupts and softirqs: a kernel that accounts them
    /// apart from tasks counts this process's own loopback traffic there, so that part of `ticks` may be
    /// ours.
    pub irq_ticks: u64,
    /// `ticks` as cores: 1.0 is one core's whole time over the window.
    pub core_share: f64,
    /// `core_share > OTHER_CPU_FLAG_SHARE` (over at least [`OTHER_CPU_MIN_TICKS`] ticks): the point ran on
    /// a host that was not quiet.
    pub flagged: bool,
}

impl OtherCpu {
    /// The tick count as words: `1 tick`, `3 ticks`.
    pub fn ticks_text(&self) -> String {
        if self.ticks == 1 {
            "1 tick".into()
        } else {
            format!("{} ticks", self.ticks)
        }
    }

    /// From the ticks of a window of `seconds` at `ticks_per_s` ticks a second (a window or a tick rate
    /// that is not positive gives a share of 0).
    pub fn from_ticks(ticks: u64, irq_ticks: u64, seconds: f64, ticks_per_s: u64) -> Self {
        let span = seconds * ticks_per_s as f64;
        let core_share = if span.is_finite() && span > 0.0 { ticks as f64 / span } else { 0.0 };
        let flagged = core_share > OTHER_CPU_FLAG_SHARE && ticks >= OTHER_CPU_MIN_TICKS;
        Self { seconds, ticks, irq_ticks, core_share, flagged }
    }
}

/// The tail target of one point: latency p99 <= probe p99 + [`TAIL_TARGET_P50_FACTOR`] x latency p50.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailTarget {
    /// The limit, us: the wake probe's p99 plus three latency p50s.
    pub limit_us: f64,
    /// Whether latency p99 was within it.
    pub met: bool,
    /// The wake probe's greatest lateness during the point, us: the host's longest stall it saw.
    pub host_max_us: f64,
    /// Milliseconds the machine's other tasks ran during the point ([`PointResult::host_tasks`]; 0 where
    /// not known): time they may have held a core inside any one duty cycle, which the probe, at
    /// real-time priority, does not see.
    #[serde(default)]
    pub host_tasks_ms: f64,
    /// On a miss, the agent thread whose longest duty cycle was surely longer than the host's longest
    /// stall the probe saw plus all the time the host's tasks ran: the stage that was late while the host
    /// was not. `None` when met, or when every agent's longest cycle fits within what the host took (the
    /// host, or queueing, then explains the tail, not one stage's cycle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_stage: Option<LateStage>,
}

impl TailTarget {
    /// `met`, or `missed: node 0 sender+receiver late (cycles up to 2.1 ms; the host's longest stall 400
    /// us, its tasks 1.2 ms)`, or `missed: no stage's cycle outlasted what the host took (longest stall 5
    /// ms, its tasks 11 ms)` when none is named.
    pub fn verdict(&self) -> String {
        use super::charts::duration_label;
        let tasks = if self.host_tasks_ms > 0.0 {
            format!(", its tasks {}", duration_label(self.host_tasks_ms * 1000.0))
        } else {
            String::new()
        };
        let host = format!("longest stall {}{tasks}", duration_label(self.host_max_us));
        match (&self.late_stage, self.met) {
            (_, true) => "met".into(),
            (Some(s), false) => format!(
                "missed: {} late (cycles up to {}; the host's {host})",
                s.name,
                duration_label(s.max_cycle_ns as f64 / 1000.0)
            ),
            (None, false) => format!("missed: no stage's cycle outlasted what the host took ({host})"),
        }
    }
}

/// The stage named by a missed [`TailTarget`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateStage {
    /// The agent thread, `node <id> <thread>`.
    pub name: String,
    /// Its longest duty cycle during the point, ns: the upper bound of its power-of-two bucket (the cycle
    /// took more than half of it).
    pub max_cycle_ns: u64,
}

impl TailTarget {
    /// The target of `point`, or `None` where it does not apply: rho above [`TAIL_TARGET_MAX_RHO`] (or not a
    /// number), no wake probe, or no latency recorded (p50 not positive).
    pub fn evaluate(point: &PointResult) -> Option<Self> {
        let latency = &point.latency_us;
        let applies = point.rho <= TAIL_TARGET_MAX_RHO && latency.p50 > 0.0;
        if !applies {
            return None;
        }
        let probe = point.wake_probe.as_ref()?;
        let limit_us = probe.late_us.p99 + TAIL_TARGET_P50_FACTOR * latency.p50;
        let met = latency.p99 <= limit_us;
        let host_max_us = probe.late_us.max;
        let host_tasks_ms = point.host_tasks.as_ref().map_or(0.0, |t| t.ran_ms);
        let late_stage = if met { None } else { late_stage(&point.agents, host_max_us + host_tasks_ms * 1000.0) };
        Some(Self { limit_us, met, host_max_us, host_tasks_ms, late_stage })
    }
}

/// The shortest cycle a duty-cycle bucket of upper bound `bucket_ns` can hold: half the bound (the
/// first bucket holds cycles from 0).
fn bucket_floor_ns(bucket_ns: u64) -> u64 {
    if bucket_ns <= quorumcast_driver::agent::cycle_bucket_ns(0) {
        0
    } else {
        bucket_ns / 2
    }
}

/// Of `agents`, the one with the longest duty cycle among those whose longest cycle was surely longer
/// than `host_us` (the wake probe's greatest lateness plus the host's tasks' run time: all the host can
/// have taken from one cycle): that stage was late by itself. `None` when none was.
fn late_stage(agents: &[AgentDutyCycles], host_us: f64) -> Option<LateStage> {
    let host_ns = (host_us.max(0.0) * 1000.0) as u64;
    let late = agents.iter().filter(|a| bucket_floor_ns(a.duty_cycle_ns.max) > host_ns);
    let worst = late.fold(None::<&AgentDutyCycles>, |worst, a| match worst {
        Some(w) if w.duty_cycle_ns.max >= a.duty_cycle_ns.max => Some(w),
        _ => Some(a),
    })?;
    Some(LateStage { name: worst.name.clone(), max_cycle_ns: worst.duty_cycle_ns.max })
}

/// One agent thread's duty-cycle lengths over a point, from power-of-two buckets: each figure is the
/// upper bound of the bucket it falls in (at most twice the true length).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDutyCycles {
    /// `node <id> <thread>`.
    pub name: String,
    /// Duty cycles run during the point.
    pub cycles: i64,
    /// The quantiles, ns.
    pub duty_cycle_ns: CycleQuantiles,
}

/// Quantiles of duty-cycle lengths, ns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CycleQuantiles {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// The longest bucket reached.
    pub max: u64,
}

/// The share of `histogram`'s values at or above `value`, to the histogram's resolution (0 for an empty
/// histogram).
fn share_at_least(histogram: &Histogram<u64>, value: f64) -> f64 {
    let total = histogram.len();
    if total == 0 {
        return 0.0;
    }
    let below = histogram.count_between(0, (value as u64).saturating_sub(1));
    total.saturating_sub(below) as f64 / total as f64
}

/// Summary statistics of one latency histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
    /// The largest value recorded.
    pub max: f64,
    /// The mean.
    pub mean: f64,
    /// The standard deviation.
    pub stddev: f64,
}

impl Percentiles {
    /// Summarizes `histogram`, dividing every value by `unit_divisor` (1000.0 for a histogram recorded in
    /// nanoseconds, to report microseconds). Percentile values are the highest value equivalent to the
    /// recorded ones, as HdrHistogram reports them; mean and standard deviation are rounded to 3 decimals. An empty histogram gives all zeros; a divisor that is
    /// not a positive finite number is treated as 1.
    pub fn from_histogram(histogram: &Histogram<u64>, unit_divisor: f64) -> Self {
        let div = if unit_divisor.is_finite() && unit_divisor > 0.0 { unit_divisor } else { 1.0 };
        let at = |q: f64| histogram.value_at_quantile(q) as f64 / div;
        if histogram.is_empty() {
            return Self { p50: 0.0, p90: 0.0, p99: 0.0, p999: 0.0, max: 0.0, mean: 0.0, stddev: 0.0 };
        }
        let (mean, stddev) = super::hgrm::mean_and_stddev(histogram);
        Self {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: histogram.max() as f64 / div,
            mean: round3(mean / div),
            stddev: round3(stddev / div),
        }
    }

    /// Field by field, the larger of `self` and `other`: the worst of two threads' distributions. Of
    /// two cores' stalls, the share of time either was late by more than `x` is at least the larger
    /// share, so this is a lower bound on what a pipeline that needs both cores meets.
    pub fn worst(&self, other: &Self) -> Self {
        Self {
            p50: self.p50.max(other.p50),
            p90: self.p90.max(other.p90),
            p99: self.p99.max(other.p99),
            p999: self.p999.max(other.p999),
            max: self.max.max(other.max),
            mean: self.mean.max(other.mean),
            stddev: self.stddev.max(other.stddev),
        }
    }
}

/// `x` rounded to 3 decimals (a nanosecond, in microseconds), so the JSON shows no float noise.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl ConfigResult {
    /// Whether the Sender was the stage that saturated first (`bottleneck` names it first): the rows whose
    /// [`sender_budget`](Self::sender_budget) is held to mu.
    pub fn sender_bound(&self) -> bool {
        self.bottleneck.starts_with("sender")
    }

    /// The file stem for one point of this configuration, e.g. `mtu1408-noop-msg128-classic-separate-rho0.70`:
    /// only ASCII letters, digits, `.`, `-` and `_` (other characters, like the `:` of `sleep-ns:1000`, become
    /// `_`). Unique within a sweep as long as configurations and rho values (to 2 decimals) are.
    pub fn point_stem(&self, rho: f64) -> String {
        let raw =
            format!("mtu{}-{}-msg{}-{}-{}-rho{:.2}", self.mtu, self.idle, self.msg, self.send_mode, self.control, rho);
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect()
    }

    /// A short human label, e.g. `MTU 1408 · 128 B · noop · classic/separate`.
    pub fn label(&self) -> String {
        format!("MTU {} · {} B · {} · {}/{}", self.mtu, self.msg, self.idle, self.send_mode, self.control)
    }

    /// The model's error in percent: `(measured - predicted) / predicted x 100`, or `None` without a
    /// positive prediction.
    pub fn mu_error_percent(&self) -> Option<f64> {
        (self.mu_predicted > 0.0).then(|| (self.mu_measured - self.mu_predicted) / self.mu_predicted * 100.0)
    }

    /// The rho `point` really ran at: its achieved rate over `mu_measured` (its nominal rho without a
    /// positive mu).
    pub fn achieved_rho(&self, point: &PointResult) -> f64 {
        if self.mu_measured > 0.0 && point.achieved.is_finite() {
            point.achieved / self.mu_measured
        } else {
            point.rho
        }
    }

    /// The lowest and highest S slice: how far S moved while mu was measured (the first and last slice
    /// for a report without slices).
    pub fn s_band(&self) -> (f64, f64) {
        let lowest = self.s_slices.iter().copied().reduce(f64::min);
        let highest = self.s_slices.iter().copied().reduce(f64::max);
        match (lowest, highest) {
            (Some(lowest), Some(highest)) => (lowest, highest),
            _ => (self.s_before.min(self.s_after), self.s_before.max(self.s_after)),
        }
    }
}

impl PointResult {
    /// The `.hgrm` path (relative to the report) for the intended-time histogram of the point `stem`.
    pub fn hgrm_path(stem: &str) -> String {
        format!("hgrm/{stem}.hgrm")
    }

    /// The `.hgrm` path (relative to the report) for the actual-offer-time histogram of the point `stem`.
    pub fn service_hgrm_path(stem: &str) -> String {
        format!("hgrm/{stem}.service.hgrm")
    }

    /// Builds a point from its two histograms (recorded in units of `unit_divisor` per microsecond, i.e.
    /// 1000.0 for nanoseconds), naming its `.hgrm` files after `stem` (see [`ConfigResult::point_stem`]).
    pub fn from_histograms(
        stem: &str,
        rho: f64,
        lambda: f64,
        achieved: f64,
        latency: &Histogram<u64>,
        service: &Histogram<u64>,
        unit_divisor: f64,
    ) -> Self {
        Self {
            rho,
            lambda,
            achieved,
            latency_us: Percentiles::from_histogram(latency, unit_divisor),
            service_latency_us: Percentiles::from_histogram(service, unit_divisor),
            hgrm: Self::hgrm_path(stem),
            service_hgrm: Self::service_hgrm_path(stem),
            agents: Vec::new(),
            past_1ms_share: Some(share_at_least(latency, 1000.0 * unit_divisor)),
            steal_share: 0.0,
            wake_probe: None,
            tail_target: None,
            other_cpu: None,
            thread_waits: Vec::new(),
            host_tasks: None,
            saturated: achieved_short_of(achieved, lambda),
        }
    }

    /// Whether the point carried less than [`SATURATED_BELOW`] of its offered rate (false when the
    /// offered rate is not positive or either rate is not a number).
    pub fn short_of_offered(&self) -> bool {
        achieved_short_of(self.achieved, self.lambda)
    }

    /// Sets the judgements from the measured fields: [`saturated`](Self::saturated) from the rates and
    /// [`tail_target`](Self::tail_target) from the latency, the wake probe and the agents (call it once
    /// those are in).
    pub fn assess(&mut self) {
        self.saturated = self.short_of_offered();
        self.tail_target = TailTarget::evaluate(self);
    }

    /// Whether other processes took more than [`OTHER_CPU_FLAG_SHARE`] of a core during the point.
    pub fn host_busy(&self) -> bool {
        self.other_cpu.is_some_and(|o| o.flagged)
    }
}

/// `achieved < SATURATED_BELOW x offered`, for a positive offered rate.
fn achieved_short_of(achieved: f64, offered: f64) -> bool {
    offered > 0.0 && achieved < SATURATED_BELOW * offered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_scale_to_microseconds() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = Percentiles::from_histogram(&h, 1000.0);
        // 500 us is recorded as 500_000 ns, whose bucket is 256 ns wide at 3 significant digits.
        assert!((p.p50 - 500.0).abs() < 0.3, "p50 {}", p.p50);
        assert!((p.p99 - 990.0).abs() < 0.6, "p99 {}", p.p99);
        assert!((p.max - 1000.0).abs() < 0.6, "max {}", p.max);
        assert!((p.mean - 500.5).abs() < 0.5, "mean {}", p.mean);
        assert!((p.stddev - 288.7).abs() < 0.5, "stddev {}", p.stddev);
        assert!(p.p50 <= p.p90 && p.p90 <= p.p99 && p.p99 <= p.p999 && p.p999 <= p.max);
    }

    #[test]
    fn empty_histogram_gives_zeros() {
        let h = Histogram::<u64>::new(3).unwrap();
        let p = Percentiles::from_histogram(&h, 1000.0);
        assert_eq!(p.max, 0.0);
        assert_eq!(p.p50, 0.0);
    }

    fn percentiles(p50: f64, p99: f64, max: f64) -> Percentiles {
        Percentiles { p50, p90: p50, p99, p999: max, max, mean: p50, stddev: 0.0 }
    }

    fn agent(name: &str, max_ns: u64) -> AgentDutyCycles {
        AgentDutyCycles {
            name: name.into(),
            cycles: 100,
            duty_cycle_ns: CycleQuantiles { p50: 1024, p99: 2048, p999: max_ns, max: max_ns },
        }
    }

    /// A point at `rho` with latency p50/p99 and a wake probe of p99 `probe_p99`, max `probe_max` (us).
    fn point(rho: f64, (p50, p99): (f64, f64), (probe_p99, probe_max): (f64, f64)) -> PointResult {
        let empty = Histogram::<u64>::new(3).unwrap();
        let mut p = PointResult::from_histograms("x", rho, 1000.0, 1000.0, &empty, &empty, 1000.0);
        p.latency_us = percentiles(p50, p99, p99 * 2.0);
        p.wake_probe = Some(WakeLateness {
            interval_us: 1000.0,
            wakeups: 1000,
            recorded: 1000,
            late_us: percentiles(5.0, probe_p99, probe_max),
            reference: any_core(),
            any_core_us: None,
            cores: Vec::new(),
        });
        p
    }

    #[test]
    fn the_tail_target_allows_the_probe_s_p99_and_three_p50s() {
        // 100 + 3 x 50 = 250: a p99 of 250 meets it, 251 misses.
        let met = TailTarget::evaluate(&point(0.3, (50.0, 250.0), (100.0, 400.0))).unwrap();
        assert_eq!((met.limit_us, met.met, met.host_max_us, met.late_stage.as_ref()), (250.0, true, 400.0, None));
        assert_eq!(met.verdict(), "met");
        let missed = TailTarget::evaluate(&point(0.5, (50.0, 251.0), (100.0, 400.0))).unwrap();
        assert!(!missed.met);
        // Not evaluated above rho 0.5, without a probe, without latency, or at a rho that is no number.
        assert_eq!(TailTarget::evaluate(&point(0.51, (50.0, 900.0), (100.0, 400.0))), None);
        assert_eq!(TailTarget::evaluate(&point(f64::NAN, (50.0, 900.0), (100.0, 400.0))), None);
        assert_eq!(TailTarget::evaluate(&point(0.1, (0.0, 0.0), (100.0, 400.0))), None);
        let mut no_probe = point(0.1, (50.0, 900.0), (100.0, 400.0));
        no_probe.wake_probe = None;
        assert_eq!(TailTarget::evaluate(&no_probe), None);
    }

    #[test]
    fn a_miss_names_the_stage_that_was_late_while_the_host_was_not() {
        // The host's longest stall: 400 us.
        let mut p = point(0.3, (50.0, 2000.0), (100.0, 400.0));
        p.agents = vec![
            // Its bucket of 524 us holds cycles from 262 us: maybe only the host's 400 us stall.
            agent("node 0 consensus", 524_288),
            // Surely longer than 400 us (more than 1 ms), the longest: named.
            agent("node 0 sender+receiver", 2_097_152),
            // Also surely longer, but shorter.
            agent("node 1 consensus+sender+receiver", 1_048_576),
        ];
        let t = TailTarget::evaluate(&p).unwrap();
        let stage = t.late_stage.as_ref().unwrap();
        assert_eq!(stage.name, "node 0 sender+receiver");
        assert_eq!(stage.max_cycle_ns, 2_097_152);
        assert_eq!(
            t.verdict(),
            "missed: node 0 sender+receiver late (cycles up to 2.1 ms; the host's longest stall 400 us)"
        );
        // When the host stalled longer than any cycle could have been, no stage is blamed.
        p.wake_probe.as_mut().unwrap().late_us.max = 5000.0;
        let t = TailTarget::evaluate(&p).unwrap();
        assert_eq!((t.met, t.late_stage.as_ref()), (false, None));
        assert_eq!(t.verdict(), "missed: no stage's cycle outlasted what the host took (longest stall 5 ms)");
        // Nor when the host's tasks ran as long as a cycle, unseen by the probe: 400 us + 1.7 ms covers
        // the 2.1 ms bucket's floor (1.05 ms) and the 1 ms one's, so only a longer cycle is named.
        p.wake_probe.as_mut().unwrap().late_us.max = 400.0;
        p.host_tasks = Some(crate::hiccup::HostTasksRan { ran_ms: 1.7, turns: 2, largest: Vec::new() });
        let t = TailTarget::evaluate(&p).unwrap();
        assert_eq!((t.late_stage.as_ref(), t.host_tasks_ms), (None, 1.7));
        assert_eq!(
            t.verdict(),
            "missed: no stage's cycle outlasted what the host took (longest stall 400 us, its tasks 1.7 ms)"
        );
        p.agents.push(agent("node 2 consensus+sender+receiver", 8_388_608));
        let t = TailTarget::evaluate(&p).unwrap();
        assert_eq!(t.late_stage.unwrap().name, "node 2 consensus+sender+receiver");
        p.host_tasks = None;
        // Equal maxima: the first one listed.
        p.wake_probe.as_mut().unwrap().late_us.max = 400.0;
        p.agents = vec![agent("a", 4_194_304), agent("b", 4_194_304)];
        assert_eq!(TailTarget::evaluate(&p).unwrap().late_stage.unwrap().name, "a");
        // The first bucket holds cycles from 0: never surely late.
        assert_eq!(bucket_floor_ns(1024), 0);
        assert_eq!(bucket_floor_ns(2048), 1024);
    }

    #[test]
    fn a_point_short_of_its_offered_rate_is_saturated() {
        let mut p = point(0.9, (50.0, 100.0), (10.0, 20.0));
        p.lambda = 100_000.0;
        p.achieved = 95_000.0;
        p.assess();
        assert!(!p.saturated, "exactly 0.95 x offered is not short");
        p.achieved = 94_999.0;
        p.assess();
        assert!(p.saturated);
        assert_eq!(p.tail_target, None, "rho 0.9: no target");
        for (achieved, lambda) in [(f64::NAN, 100.0), (0.0, 0.0), (5.0, -1.0)] {
            (p.achieved, p.lambda) = (achieved, lambda);
            assert!(!p.short_of_offered(), "{achieved} of {lambda}");
        }
        // Plotted at its achieved rho: achieved over mu measured.
        let mut c = config();
        c.mu_measured = 200_000.0;
        p.achieved = 50_000.0;
        assert_eq!(c.achieved_rho(&p), 0.25);
        c.mu_measured = 0.0;
        assert_eq!(c.achieved_rho(&p), 0.9, "no mu: its nominal rho");
    }

    #[test]
    fn other_processes_past_five_percent_of_a_core_flag_the_point() {
        // 1.5 s at 100 ticks/s: 150 ticks are one core; 7 ticks are 4.7%, 8 are 5.3%.
        let calm = OtherCpu::from_ticks(7, 2, 1.5, 100);
        assert!((calm.core_share - 7.0 / 150.0).abs() < 1e-12);
        assert!(!calm.flagged);
        let busy = OtherCpu::from_ticks(8, 0, 1.5, 100);
        assert!(busy.flagged);
        // A 10 ms window with 2 ticks reads as 2 cores, but that is rounding: not flagged.
        let short = OtherCpu::from_ticks(2, 0, 0.01, 100);
        assert!((short.core_share - 2.0).abs() < 1e-12 && !short.flagged);
        assert!(OtherCpu::from_ticks(OTHER_CPU_MIN_TICKS, 0, 0.01, 100).flagged);
        assert_eq!(OtherCpu::from_ticks(100, 0, 0.0, 100).core_share, 0.0, "no window, no share");
        assert_eq!(OtherCpu::from_ticks(100, 0, f64::NAN, 100).core_share, 0.0);
        assert_eq!(OtherCpu::from_ticks(100, 0, 1.0, 0).core_share, 0.0);
        let mut p = point(0.1, (50.0, 100.0), (10.0, 20.0));
        assert!(!p.host_busy(), "unknown is not flagged");
        p.other_cpu = Some(busy);
        assert!(p.host_busy());
        assert_eq!(
            (busy.ticks_text(), OtherCpu::from_ticks(1, 0, 1.0, 100).ticks_text()),
            ("8 ticks".into(), "1 tick".into())
        );
    }

    fn config() -> ConfigResult {
        ConfigResult {
            mtu: 1408,
            idle: "sleep-ns:1000".into(),
            msg: 128,
            send_mode: "classic".into(),
            control: "separate".into(),
            s: 0.0,
            s_before: 0.0,
            s_after: 0.0,
            s_slices: Vec::new(),
            c: 0.0,
            c_probe: 0.0,
            mu_predicted_probe_c: 0.0,
            sender_share: 0.0,
            d: 2,
            m_pkt: 8,
            mu_predicted: 0.0,
            mu_measured: 0.0,
            bottleneck: "sender".into(),
            sender_budget: None,
            points: vec![],
            agents: vec![],
            latency_source: None,
        }
    }

    #[test]
    fn point_stem_is_a_safe_file_name() {
        let c = config();
        assert_eq!(c.point_stem(0.7), "mtu1408-sleep-ns_1000-msg128-classic-separate-rho0.70");
        assert_eq!(c.mu_error_percent(), None);
    }
}
