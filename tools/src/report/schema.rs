//! The sweep report's data: the types `summary.json` is made of.
//!
//! Field names are the report schema's JSON keys, which scripts read, exactly; the few extra fields
//! (`profile`, `timestamp`, `layout`, `c_probe`, `service_hgrm`) are additions, never renames. All rates
//! are per second, all latencies are in microseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

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
}

/// `x` rounded to 3 decimals (a nanosecond, in microseconds), so the JSON shows no float noise.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl ConfigResult {
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
        }
    }
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

    #[test]
    fn point_stem_is_a_safe_file_name() {
        let c = ConfigResult {
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
            points: vec![],
            agents: vec![],
            latency_source: None,
        };
        assert_eq!(c.point_stem(0.7), "mtu1408-sleep-ns_1000-msg128-classic-separate-rho0.70");
        assert_eq!(c.mu_error_percent(), None);
    }
}
