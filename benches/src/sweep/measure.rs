//! The measurements of a sweep: S (the send path alone), C (control syscalls at a moderate load), mu (the
//! sustained committed rate under a saturating load, with the bottleneck's evidence) and the latency of one
//! paced utilisation point.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::budget::SenderWindow;
use crate::hiccup::ProcessTimes;
use crate::probe::{probe_s, ProbeCores, SendRate};
use quorumcast_driver::agent::{cycle_bucket_ns, cycle_quantile_ns, CYCLE_BUCKETS};
use quorumcast_driver::media::transport::{probe_gso, SendMode};
use quorumcast_driver::shm::stats::Stats;

use super::bottleneck::StageEvidence;
use super::cluster::{LoadCluster, Positions, SETTLE_TIMEOUT};
use super::profile::Timings;
use super::SweepError;

/// Followers each log datagram goes to in a 3-node cluster: the model's D.
pub const D: usize = 2;
/// Messages offered per burst of the saturating load (about one consensus drain).
pub const BURST: usize = 1024;
/// The largest latency a histogram holds: 60 s in nanoseconds.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Slots of the ring of send times (a power of two): messages in flight beyond it wait.
pub const SEND_TIMES: usize = 1 << 20;

/// Thread names of the harness's layout, as their agent counters are labelled.
const LEADER_CONSENSUS: &str = "consensus";
const LEADER_SENDER: &str = "sender+receiver";
/// A follower's thread (or invoker); the leader's too in the C probe's shared layout.
const FOLLOWER: &str = "consensus+sender+receiver";

/// S for every (MTU, send mode): datagrams of one MTU to [`D`] loopback destinations from one thread, on
/// `cores`.
/// GSO is skipped where the kernel lacks it; a mode whose probe fails is reported with its error.
pub fn probe_send_rates(
    mtus: &[usize],
    modes: &[SendMode],
    timings: &Timings,
    cores: ProbeCores,
) -> Result<Vec<SendRate>, SweepError> {
    let mut rates = Vec::new();
    for &mtu in mtus {
        for &mode in modes {
            if mode == SendMode::Gso && !probe_gso() {
                continue;
            }
            let rate = probe_s(mode, mtu, D, timings.s_window, timings.s_windows, cores)
                .map_err(|e| SweepError::Probe(format!("S probe of {mode} at {mtu} B failed: {e}")))?;
            rates.push(rate);
        }
    }
    Ok(rates)
}

/// The probe's rate for `mode` at `mtu`, if it was measured and positive.
pub fn rate_for(rates: &[SendRate], mode: SendMode, mtu: usize) -> Option<&SendRate> {
    rates.iter().find(|r| r.send_mode == mode && r.datagram_bytes == mtu && r.datagrams_per_s > 0.0)
}

/// What the C probe found for one idle strategy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControlRate {
    /// The model's C: the Sender's syscalls per second for consensus control traffic, the commit frames
    /// it sends (one syscall per commit frame per follower).
    pub c_per_s: f64,
    /// Every control (non-data) syscall of the leader's Sender per second: C plus its polls of the control
    /// socket (made every duty cycle, mostly when idle, so they take little from the data budget), status,
    /// setup and heartbeat traffic.
    pub control_per_s: f64,
    /// Data syscalls per second of the leader's Sender in the same window.
    pub data_per_s: f64,
    /// Commit frames per second the consensus agent sent.
    pub commit_frames_per_s: f64,
    /// The Sender's polls of its control sockets on duty cycles that sent nothing (also in
    /// `control_per_s`): idle time, not data budget.
    pub idle_polls_per_s: f64,
    /// The leader consensus agent's duty cycles per second: what sets how often commit frames can go.
    pub consensus_cycles_per_s: f64,
    /// The paced load offered, messages per second.
    pub offered_per_s: f64,
    /// Committed messages per second (the load actually carried).
    pub committed_per_s: f64,
}

/// Offers every message due at `rate` per second since `start` (counting from `base`); false when the
/// ingress was full.
fn offer_due(cluster: &mut LoadCluster, start: Instant, base: u64, rate: f64) -> Result<bool, SweepError> {
    let due = base + (start.elapsed().as_secs_f64() * rate) as u64;
    while cluster.offered() < due {
        if !cluster.offer()? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// C: the leader Sender's consensus control syscalls per second (and all its control syscalls) while the
/// cluster carries `rate` messages per second, over `timings.c_window` after `timings.c_warmup`.
pub fn probe_control(cluster: &mut LoadCluster, timings: &Timings, rate: f64) -> Result<ControlRate, SweepError> {
    let offered_per_s = rate;
    let start = Instant::now();
    let base = cluster.offered();
    let pace = |cluster: &mut LoadCluster, until: Instant| -> Result<(), SweepError> {
        while Instant::now() < until {
            offer_due(cluster, start, base, offered_per_s)?;
            cluster.cycle(|_| {});
        }
        Ok(())
    };
    pace(cluster, start + timings.c_warmup)?;
    let (t0, before, committed0) = (Instant::now(), cluster.stats(), cluster.committed());
    pace(cluster, t0 + timings.c_window)?;
    let seconds = t0.elapsed().as_secs_f64();
    let leader = cluster.stats()[0].since(&before[0]);
    let rate = |value: i64| value as f64 / seconds;
    let result = ControlRate {
        c_per_s: rate(leader.consensus().commit_frames()) * D as f64,
        control_per_s: rate(leader.sender().control_syscalls()),
        data_per_s: rate(leader.sender().data_syscalls()),
        commit_frames_per_s: rate(leader.consensus().commit_frames()),
        idle_polls_per_s: rate(leader.sender().idle_control_polls()),
        // The consensus agent's own thread, or the one it shares with the Sender and Receiver (only one
        // of the two counts).
        consensus_cycles_per_s: rate(
            leader.labelled(&format!("{LEADER_CONSENSUS} duty cycles"))
                + leader.labelled(&format!("{FOLLOWER} duty cycles")),
        ),
        offered_per_s,
        committed_per_s: (cluster.committed() - committed0) as f64 / seconds,
    };
    cluster.drain(SETTLE_TIMEOUT)?;
    Ok(result)
}

/// What a saturating run found.
#[derive(Clone, Debug, PartialEq)]
pub struct MuRun {
    /// Committed messages per second over all windows: the measured mu.
    pub mu: f64,
    /// Committed messages per second of each window.
    pub windows: Vec<f64>,
    /// S (datagrams per second) of each slice probed around the windows, in time order: one before the
    /// first window and one after each.
    pub s_slices: Vec<f64>,
    /// Which stage was busy, from the counters over all windows (the Sender's share against the slices'
    /// mean S).
    pub evidence: StageEvidence,
    /// The leader Sender's control syscalls per second during the windows, less its polls on cycles that
    /// sent nothing: the control syscalls that took from the data budget (the C of the prediction).
    pub control_per_s: f64,
    /// The leader Sender's control polls per second on cycles that sent nothing (idle time, not budget).
    pub idle_polls_per_s: f64,
    /// Commit frames x D per second during the windows: C as the saturated cluster had it.
    pub c_per_s: f64,
    /// The leader Sender's data syscalls per second during the windows.
    pub data_per_s: f64,
    /// Messages per data datagram the Sender achieved (both followers' copies counted once).
    pub messages_per_datagram: f64,
    /// This process's CPU seconds (every thread, user + system, from `/proc/self/stat`) over the
    /// windows: the cluster's and the harness's, which offers and applies; `None` where unreadable.
    pub cpu_s: Option<f64>,
    /// Messages committed over the windows.
    pub committed: u64,
    /// The leader Sender over the windows: its time split (all 0 when the cluster did not split it) and
    /// its counts, for its budget ([`crate::budget`]).
    pub sender: SenderWindow,
}

impl MuRun {
    /// The S of the prediction: the mean of the slices (0 when none measured a rate).
    pub fn s(&self) -> f64 {
        mean(&self.s_slices)
    }

    /// CPU microseconds per committed message over the windows, if measured.
    pub fn cpu_us_per_msg(&self) -> Option<f64> {
        Some(self.cpu_s? * 1e6 / self.committed.max(1) as f64)
    }
}

/// The mean of `values`, 0 when there are none.
fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// How often a saturating run samples the leader's log positions.
const QUEUE_SAMPLE_INTERVAL: Duration = Duration::from_millis(2);

/// A flow-control window smaller than this (one datagram at the largest preset MTU) counts as closed.
const CLOSED_WINDOW: i64 = 8192;

/// Sums of the byte gaps between pipeline stages (unsent, uncommitted, unapplied), and how many samples
/// found the flow-control window closed with data waiting.
#[derive(Debug, Default)]
struct QueueSamples {
    sums: [f64; 3],
    closed: u32,
    samples: u32,
}

impl QueueSamples {
    fn add(&mut self, p: Positions) {
        let gaps = [p.appended - p.sent, p.sent - p.committed, p.committed - p.applied];
        for (sum, gap) in self.sums.iter_mut().zip(gaps) {
            *sum += gap.max(0) as f64;
        }
        if p.appended > p.sent && p.limit - p.sent < CLOSED_WINDOW {
            self.closed += 1;
        }
        self.samples += 1;
    }

    fn closed_fraction(&self) -> f64 {
        f64::from(self.closed) / f64::from(self.samples.max(1))
    }

    fn mean(&self, i: usize) -> f64 {
        self.sums[i] / f64::from(self.samples.max(1))
    }
}

/// Offers up to [`BURST`] messages; returns true when the ingress filled before the burst ended.
fn offer_burst(cluster: &mut LoadCluster) -> Result<bool, SweepError> {
    for _ in 0..BURST {
        if !cluster.offer()? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The idle fraction of `thread`'s duty cycles in `deltas` (counter changes over the windows; 1 when it
/// ran no cycle).
fn idle_fraction(deltas: &Stats, thread: &str) -> f64 {
    let cycles = deltas.labelled(&format!("{thread} duty cycles"));
    if cycles <= 0 {
        return 1.0;
    }
    deltas.labelled(&format!("{thread} idle cycles")) as f64 / cycles as f64
}

/// Offers as fast as the leader's ingress takes, and polls, for `period`.
fn saturate(cluster: &mut LoadCluster, period: Duration) -> Result<(), SweepError> {
    let end = Instant::now() + period;
    while Instant::now() < end {
        offer_burst(cluster)?;
        cluster.poll(|_| {});
    }
    Ok(())
}

/// What the saturating windows saw, summed over them.
#[derive(Debug, Default)]
struct Saturated {
    /// Counter changes of each node over the windows (the leader first; empty before the first window).
    deltas: Vec<Stats>,
    /// Committed messages per second of each window.
    windows: Vec<f64>,
    committed: u64,
    seconds: f64,
    bursts: u64,
    full: u64,
    queues: QueueSamples,
    /// This process's CPU ticks over the windows (`None` once a read failed).
    cpu_ticks: Option<u64>,
}

impl Saturated {
    /// One window of `period` under saturating load.
    fn window(&mut self, cluster: &mut LoadCluster, period: Duration) -> Result<(), SweepError> {
        let before = cluster.stats();
        let cpu_before = ProcessTimes::read();
        let (started, committed) = (Instant::now(), cluster.committed());
        let end = started + period;
        let mut next_sample = started;
        while Instant::now() < end {
            self.bursts += 1;
            self.full += u64::from(offer_burst(cluster)?);
            cluster.poll(|_| {});
            if Instant::now() >= next_sample {
                self.queues.add(cluster.positions());
                next_sample += QUEUE_SAMPLE_INTERVAL;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let cpu = ProcessTimes::read().zip(cpu_before).map(|(after, before)| after.since(&before).own);
        self.cpu_ticks = self.cpu_ticks.zip(cpu).map(|(sum, ticks)| sum + ticks);
        let after = cluster.stats();
        self.deltas.resize_with(after.len(), Stats::default);
        for (sum, (b, a)) in self.deltas.iter_mut().zip(before.iter().zip(&after)) {
            sum.accumulate(&a.since(b));
        }
        let committed = cluster.committed() - committed;
        self.windows.push(committed as f64 / seconds);
        self.committed += committed;
        self.seconds += seconds;
        Ok(())
    }

    /// A count over the windows, per second of them.
    fn per_second(&self, count: i64) -> f64 {
        count as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// mu: a saturating load (as fast as the leader's ingress takes) for the warm-up, then `mu_windows`
/// windows, each between two S slices: `probe_s` runs with the cluster's agent threads paused (so that
/// it has their cores), and the load resumes for `mu_resume` before the next window. S and mu so see the
/// same host moments, on a host whose S drifts by a third within seconds. mu is the windows' committed
/// messages over their time; the counters' rates are over the windows alone.
pub fn measure_mu(
    cluster: &mut LoadCluster,
    timings: &Timings,
    mut probe_s: impl FnMut() -> Result<Option<f64>, SweepError>,
) -> Result<MuRun, SweepError> {
    saturate(cluster, timings.mu_warmup)?;
    let mut s_slices = Vec::with_capacity(timings.mu_windows + 1);
    s_slices.extend(cluster.paused(&mut probe_s)?);
    let mut run = Saturated { cpu_ticks: Some(0), ..Saturated::default() };
    for _ in 0..timings.mu_windows.max(1) {
        saturate(cluster, timings.mu_resume)?;
        run.window(cluster, timings.mu_window)?;
        s_slices.extend(cluster.paused(&mut probe_s)?);
    }
    let s = mean(&s_slices);
    let (l, followers) = run.deltas.split_first().ok_or_else(|| SweepError::Cluster("no window ran".into()))?;
    let (sender, consensus) = (l.sender(), l.consensus());
    let idle_polls_per_s = run.per_second(sender.idle_control_polls());
    let control_per_s = run.per_second(sender.control_syscalls()) - idle_polls_per_s;
    let data_per_s = run.per_second(sender.data_syscalls());
    let datagrams = run.per_second(sender.data_datagrams());
    let consensus_cycles = l.labelled(&format!("{LEADER_CONSENSUS} duty cycles")).max(1) as f64;
    let evidence = StageEvidence {
        ingress_full: run.full as f64 / run.bursts.max(1) as f64,
        consensus_idle: idle_fraction(l, LEADER_CONSENSUS),
        log_back_pressured: consensus.back_pressure() as f64 / consensus_cycles,
        sender_idle: idle_fraction(l, LEADER_SENDER),
        sender_busy: l.labelled(&format!("{LEADER_SENDER} work ns")) as f64 / (run.seconds * 1e9).max(1.0),
        sender_caught_up_per_s: run.per_second(sender.caught_up_cycles()),
        sender_window_closed_per_s: run.per_second(sender.window_closed_cycles()),
        sender_share: if s > 0.0 { datagrams / s } else { 0.0 },
        window_closed: run.queues.closed_fraction(),
        naks_per_s: run.per_second(sender.naks_received()),
        receiver_idle: followers.iter().map(|f| idle_fraction(f, FOLLOWER)).fold(1.0, f64::min),
        sender_queue: run.queues.mean(0),
        receiver_queue: run.queues.mean(1),
        apply_queue: run.queues.mean(2),
        harness_runs_agents: cluster.invokes_agents(),
    };
    let messages_per_datagram =
        if datagrams > 0.0 { D as f64 * run.per_second(consensus.messages_appended()) / datagrams } else { 0.0 };
    let sender_window = SenderWindow::from_counters(
        run.seconds,
        sender,
        consensus,
        l.labelled(&format!("{LEADER_SENDER} duty cycles")) as f64,
        run.committed as f64,
    );
    cluster.drain(SETTLE_TIMEOUT)?;
    Ok(MuRun {
        mu: run.committed as f64 / run.seconds,
        windows: run.windows.clone(),
        s_slices,
        evidence,
        control_per_s,
        idle_polls_per_s,
        c_per_s: run.per_second(consensus.commit_frames()) * D as f64,
        data_per_s,
        messages_per_datagram,
        cpu_s: run.cpu_ticks.map(ProcessTimes::seconds),
        committed: run.committed,
        sender: sender_window,
    })
}

/// Each in-flight message's intended and actual offer times (ns from the point's start), in a ring
/// indexed by sequence number. Preallocated: the paced loop never allocates.
#[derive(Debug)]
pub struct SendTimes {
    intended: Vec<u64>,
    actual: Vec<u64>,
}

impl Default for SendTimes {
    fn default() -> Self {
        Self::new()
    }
}

impl SendTimes {
    /// A ring of [`SEND_TIMES`] slots.
    pub fn new() -> Self {
        Self { intended: vec![0; SEND_TIMES], actual: vec![0; SEND_TIMES] }
    }

    fn slot(seq: u64) -> usize {
        (seq as usize) & (SEND_TIMES - 1)
    }

    fn set(&mut self, seq: u64, intended: u64, actual: u64) {
        let slot = Self::slot(seq);
        self.intended[slot] = intended;
        self.actual[slot] = actual;
    }

    fn get(&self, seq: u64) -> (u64, u64) {
        let slot = Self::slot(seq);
        (self.intended[slot], self.actual[slot])
    }
}

/// A latency histogram in nanoseconds, 1 ns to 60 s, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("constant bounds are valid")
}

/// What one utilisation point found.
#[derive(Debug)]
pub struct PointRun {
    /// The target utilisation.
    pub rho: f64,
    /// The paced offered load, messages per second.
    pub lambda: f64,
    /// Committed messages per second: the point's messages over the time until the last committed.
    pub achieved: f64,
    /// Latency from each message's intended send time to its commit, ns.
    pub latency: Histogram<u64>,
    /// Latency from each message's actual offer time to its commit, ns.
    pub service: Histogram<u64>,
    /// Messages of the point.
    pub messages: u64,
    /// Offers that found the ingress full.
    pub back_pressured: u64,
    /// The largest gap between a message's intended and actual offer time, ns: when large, the load
    /// generator (or the ingress) fell behind the schedule.
    pub max_offer_lag_ns: u64,
    /// Each agent thread's duty-cycle lengths during the point, so that a stall names its stage.
    pub agents: Vec<AgentCycles>,
}

/// The distribution of one agent thread's duty-cycle lengths over a window, from its power-of-two buckets
/// (each quantile is the upper bound of the bucket it falls in, so it is at most 2x the true value).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCycles {
    /// `node <id> <thread>`, e.g. `node 0 sender+receiver`.
    pub name: String,
    /// Duty cycles in the window.
    pub cycles: i64,
    /// Median, 99th and 99.9th percentile, and the longest bucket reached, ns.
    pub p50_ns: u64,
    /// See `p50_ns`.
    pub p99_ns: u64,
    /// See `p50_ns`.
    pub p999_ns: u64,
    /// See `p50_ns`.
    pub max_ns: u64,
}

/// Every agent thread's cycle distribution in `deltas` (one [`Stats`] of counter changes per node).
pub fn agent_cycles(deltas: &[Stats]) -> Vec<AgentCycles> {
    const FIRST_BUCKET: &str = " cycles to 1024 ns";
    let mut agents = Vec::new();
    for (node, stats) in deltas.iter().enumerate() {
        let threads = stats.iter().filter_map(|c| c.label.strip_suffix(FIRST_BUCKET)).map(str::to_owned);
        for thread in threads.collect::<Vec<_>>() {
            let counts: [i64; CYCLE_BUCKETS] = std::array::from_fn(|i| {
                stats.labelled(&format!("{thread} cycles to {} ns", cycle_bucket_ns(i))).max(0)
            });
            let top = counts.iter().rposition(|&c| c > 0).map_or(0, cycle_bucket_ns);
            agents.push(AgentCycles {
                name: format!("node {node} {thread}"),
                cycles: counts.iter().sum(),
                p50_ns: cycle_quantile_ns(&counts, 0.5),
                p99_ns: cycle_quantile_ns(&counts, 0.99),
                p999_ns: cycle_quantile_ns(&counts, 0.999),
                max_ns: top,
            });
        }
    }
    agents
}

/// Offers `lambda = rho x mu` messages per second, open loop, for `timings.point` (at most
/// `timings.point_messages` messages): message `i` is due at `i / lambda` and offered as soon as the
/// harness reaches it. Records each message's latency to its commit on the leader from its intended time
/// (correcting coordinated omission) and from its actual offer time. Waits until every node applied the
/// point's messages.
pub fn run_point(
    cluster: &mut LoadCluster,
    rho: f64,
    mu: f64,
    timings: &Timings,
    times: &mut SendTimes,
) -> Result<PointRun, SweepError> {
    let lambda = rho * mu;
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(SweepError::Config(format!("rho {rho} x mu {mu} is no load: mu must be positive")));
    }
    let messages = ((lambda * timings.point.as_secs_f64()).ceil() as u64).clamp(1, timings.point_messages.max(1));
    let interval_ns = 1e9 / lambda;
    let (mut latency, mut service) = (latency_histogram(), latency_histogram());
    let first = cluster.offered();
    let end = first + messages;
    let (mut back_pressured, mut max_lag, mut last_commit_ns) = (0u64, 0u64, 0u64);
    let before = cluster.stats();
    let start = Instant::now();
    let deadline = start + timings.point + SETTLE_TIMEOUT;
    let ns = |start: Instant| start.elapsed().as_nanos() as u64;
    while cluster.committed() < end {
        let mut work = 0;
        let now = ns(start);
        while cluster.offered() < end && cluster.offered() - cluster.committed() < SEND_TIMES as u64 {
            let seq = cluster.offered();
            let intended = ((seq - first) as f64 * interval_ns) as u64;
            if intended > now {
                break;
            }
            let actual = ns(start);
            if !cluster.offer()? {
                back_pressured += 1;
                break;
            }
            times.set(seq, intended, actual);
            max_lag = max_lag.max(actual.saturating_sub(intended));
            work += 1;
        }
        work += cluster.poll(|seq| {
            if seq < first || seq >= end {
                return;
            }
            let committed = ns(start);
            let (intended, actual) = times.get(seq);
            latency.saturating_record(committed.saturating_sub(intended).max(1));
            service.saturating_record(committed.saturating_sub(actual).max(1));
            last_commit_ns = committed;
        });
        if work == 0 && Instant::now() > deadline {
            return Err(SweepError::Cluster(format!(
                "point rho {rho}: {} of {messages} messages committed within {} s",
                cluster.committed().saturating_sub(first),
                (timings.point + SETTLE_TIMEOUT).as_secs()
            )));
        }
        cluster.idle(work);
    }
    let deltas: Vec<Stats> = cluster.stats().iter().zip(&before).map(|(after, before)| after.since(before)).collect();
    cluster.drain(SETTLE_TIMEOUT)?;
    let achieved = messages as f64 / (last_commit_ns.max(1) as f64 / 1e9);
    let agents = agent_cycles(&deltas);
    Ok(PointRun {
        rho,
        lambda,
        achieved,
        latency,
        service,
        messages,
        back_pressured,
        max_offer_lag_ns: max_lag,
        agents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_times_wrap_by_sequence() {
        let mut t = SendTimes::new();
        t.set(3, 10, 11);
        t.set(3 + SEND_TIMES as u64, 20, 21);
        assert_eq!(t.get(3), (20, 21));
        t.set(4, 30, 31);
        assert_eq!(t.get(4), (30, 31));
    }

    #[test]
    fn s_is_the_mean_of_the_slices() {
        assert_eq!(mean(&[200_000.0, 300_000.0, 250_000.0]), 250_000.0);
        assert_eq!(mean(&[]), 0.0, "no slice, no S (and no prediction)");
    }

    #[test]
    fn idle_fraction_reads_the_threads_counters() {
        let (before, after) = (
            counts(&[("x duty cycles", 50), ("x idle cycles", 5)]),
            counts(&[("x duty cycles", 150), ("x idle cycles", 30)]),
        );
        let mut deltas = Stats::default();
        deltas.accumulate(&after.since(&before));
        deltas.accumulate(&counts(&[("x duty cycles", 100), ("x idle cycles", 25)]));
        assert_eq!(idle_fraction(&deltas, "x"), 0.25, "two windows' deltas, summed");
        assert_eq!(idle_fraction(&deltas, "y"), 1.0);
    }

    #[test]
    fn agent_cycles_name_each_thread_and_read_its_buckets() {
        let node0 = counts(&[("sender cycles to 1024 ns", 99), ("sender cycles to 262144 ns", 1), ("other", 5)]);
        let node1 = counts(&[("followers cycles to 1024 ns", 0)]);
        let agents = agent_cycles(&[node0, node1]);
        assert_eq!(agents.len(), 2);
        let sender = &agents[0];
        assert_eq!(sender.name, "node 0 sender");
        assert_eq!((sender.cycles, sender.p50_ns, sender.p99_ns), (100, 1024, 1024));
        assert_eq!((sender.p999_ns, sender.max_ns), (262_144, 262_144));
        assert_eq!((agents[1].name.as_str(), agents[1].cycles, agents[1].max_ns), ("node 1 followers", 0, 0));
    }

    fn counts(values: &[(&str, i64)]) -> Stats {
        let manager = quorumcast_driver::shm::counters::CountersManager::anonymous(8).unwrap();
        for (label, value) in values {
            manager.allocate(label, 0).unwrap().set(*value);
        }
        Stats::read(&manager.reader())
    }
}
