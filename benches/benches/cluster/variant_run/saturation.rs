//! The saturation run of one variant: offers as fast as the leader's ingress takes, in windows, and
//! what the counters say about it (the committed rate, the leader Sender's syscalls and time split, the
//! recorders' rates and cost, the stage that saturated first's evidence, and the diagnosis lines).

use std::sync::atomic::Ordering;
use std::time::Instant;

use quorumcast_bench::budget::SenderWindow;
use quorumcast_bench::sweep::bottleneck::SplitEvidence;
use quorumcast_bench::sweep::cluster::LoadCluster;
use quorumcast_driver::shm::stats::Stats;

use crate::{cpu_seconds, load_average, offer, rate, Settings, ALLOCATED};

/// What the saturation run found.
#[derive(Clone, Debug, Default)]
pub struct Saturation {
    /// Committed (applied on every node) messages per second of each window.
    pub rates: Vec<f64>,
    /// Leader Sender control and data syscalls per second over all windows.
    pub control_per_s: f64,
    pub data_per_s: f64,
    pub commit_frames_per_s: f64,
    pub alloc_bytes_per_entry: f64,
    /// CPU seconds the process used per wall second (2.0 = both cores).
    pub cpu_util: f64,
    /// The recorders (all 0 with the log in memory).
    pub recorder: RecorderRates,
    /// The leader Sender's control syscalls per second less its polls on cycles that sent nothing: the C
    /// of the model (as the sweep takes it).
    pub model_c_per_s: f64,
    /// The leader Sender's data datagrams per second, every follower's copy counted.
    pub datagrams_per_s: f64,
    /// What names the stage that saturated first (its `sender_share` is set once S is known).
    pub evidence: SplitEvidence,
    pub diagnosis: Vec<String>,
    /// The leader Sender over the windows: its time split (0 with `--no-split`) and its counts.
    pub sender: SenderWindow,
}

/// What the recorders did over the saturation windows.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecorderRates {
    /// The leader's recorder's `fdatasync` calls per second (0 under `none`).
    pub fsyncs_per_s: f64,
    /// Frames (entries, and the odd padding frame) the leader's recorder recorded per second.
    pub frames_per_s: f64,
    /// Bytes the leader's recorder wrote per second (block headers not counted).
    pub bytes_per_s: f64,
    /// The followers' recorders' `fdatasync` calls per second, each (the mean of the two).
    pub follower_fsyncs_per_s: f64,
    /// The three recorders together: what they cost per byte they wrote.
    pub all: RecorderCost,
}

/// The three recorders' counters added up over the saturation windows: their cost per byte.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecorderCost {
    /// Bytes written per second, the three together.
    pub bytes_per_s: f64,
    /// Write calls per second.
    pub writes_per_s: f64,
    /// `fdatasync` calls per second.
    pub fsyncs_per_s: f64,
    /// Nanoseconds checksumming, per byte written.
    pub checksum_ns_per_byte: f64,
    /// Nanoseconds in write calls, per byte written.
    pub write_ns_per_byte: f64,
    /// Mean `fdatasync` time, microseconds.
    pub fsync_us: f64,
    /// Zeros written ahead of the blocks, per byte written (each is written to the disk twice).
    pub zeros_ahead_per_byte: f64,
}

impl RecorderCost {
    pub fn of(recorders: &[quorumcast_driver::shm::stats::RecorderStats<'_>], seconds: f64) -> Self {
        let sum = |f: &dyn Fn(&quorumcast_driver::shm::stats::RecorderStats<'_>) -> i64| {
            recorders.iter().map(|r| f(r) as f64).sum::<f64>()
        };
        let (bytes, writes, fsyncs) = (sum(&|r| r.bytes()), sum(&|r| r.writes()), sum(&|r| r.fsyncs()));
        let per_byte = |ns: f64| if bytes > 0.0 { ns / bytes } else { 0.0 };
        Self {
            bytes_per_s: bytes / seconds,
            writes_per_s: writes / seconds,
            fsyncs_per_s: fsyncs / seconds,
            checksum_ns_per_byte: per_byte(sum(&|r| r.checksum_ns())),
            write_ns_per_byte: per_byte(sum(&|r| r.write_ns())),
            fsync_us: if fsyncs > 0.0 { sum(&|r| r.sync_ns()) / fsyncs / 1e3 } else { 0.0 },
            zeros_ahead_per_byte: per_byte(sum(&|r| r.zeros_ahead())),
        }
    }

    /// Bytes per write call.
    pub fn bytes_per_write(&self) -> f64 {
        if self.writes_per_s > 0.0 {
            self.bytes_per_s / self.writes_per_s
        } else {
            0.0
        }
    }

    /// Bytes per `fdatasync`: the batch a group commit covered, on average.
    pub fn bytes_per_fsync(&self) -> Option<f64> {
        (self.fsyncs_per_s > 0.0).then(|| self.bytes_per_s / self.fsyncs_per_s)
    }
}

impl RecorderRates {
    /// Entries the leader's recorder made durable per `fdatasync`; `None` when it made none.
    pub fn entries_per_fsync(&self) -> Option<f64> {
        (self.fsyncs_per_s > 0.0).then(|| self.frames_per_s / self.fsyncs_per_s)
    }
}

impl Saturation {
    /// Process CPU microseconds per committed message over the windows (spinning idle loops included):
    /// what each message costs, whatever share of the cores the process got.
    pub fn cpu_per_entry_us(&self) -> f64 {
        let rate = self.rates.iter().sum::<f64>() / self.rates.len().max(1) as f64;
        if rate > 0.0 {
            1e6 * self.cpu_util / rate
        } else {
            0.0
        }
    }

    pub fn median(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        r.get(r.len() / 2).copied().unwrap_or(0.0)
    }
}

/// Offers as fast as the leader's ingress takes, for the warm-up and then `windows` windows.
pub fn saturate(cluster: &mut LoadCluster, settings: &Settings) -> Saturation {
    let end_warmup = Instant::now() + settings.warmup;
    while Instant::now() < end_warmup {
        offer_burst(cluster);
        cluster.cycle(|_| {});
    }
    let mut result = Saturation::default();
    let first_counters = cluster.stats();
    let follower_loops = cluster.follower_loops();
    let alloc_start = ALLOCATED.load(Ordering::Relaxed);
    let cpu_start = cpu_seconds();
    let (mut loops, mut idle_loops, mut refused) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let first_applied = cluster.applied();
    let mut window_start = (started, first_applied.clone());
    for _ in 0..settings.windows {
        let end = window_start.0 + settings.window;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let offered = offer_burst(cluster);
            if offered < 1024 {
                refused += 1;
            }
            let work = cluster.cycle(|_| {});
            loops += 1;
            if work == 0 {
                idle_loops += 1;
            }
        }
        let now = Instant::now();
        let applied = cluster.applied();
        let seconds = (now - window_start.0).as_secs_f64();
        let slowest = applied.iter().zip(&window_start.1).map(|(a, b)| a - b).min().unwrap_or(0);
        result.rates.push(slowest as f64 / seconds);
        window_start = (now, applied);
    }
    let seconds = started.elapsed().as_secs_f64();
    result.cpu_util = (cpu_seconds() - cpu_start) / seconds;
    let last_applied = cluster.applied();
    let entries = last_applied[0] - first_applied[0];
    result.alloc_bytes_per_entry = (ALLOCATED.load(Ordering::Relaxed) - alloc_start) as f64 / entries.max(1) as f64;
    let last = cluster.stats();
    let deltas: Vec<Stats> = last.iter().zip(&first_counters).map(|(l, f)| l.since(f)).collect();
    let (leader, followers) = deltas.split_first().expect("the leader's counters");
    let (sender, consensus) = (leader.sender(), leader.consensus());
    let per_s = |count: i64| count as f64 / seconds;
    result.control_per_s = per_s(sender.control_syscalls());
    result.data_per_s = per_s(sender.data_syscalls());
    result.commit_frames_per_s = per_s(consensus.commit_frames());
    result.model_c_per_s = per_s(sender.control_syscalls() - sender.idle_control_polls());
    let recorders: Vec<_> = deltas.iter().map(|d| d.recorder()).collect();
    result.recorder = RecorderRates {
        fsyncs_per_s: per_s(leader.recorder().fsyncs()),
        frames_per_s: per_s(leader.recorder().frames()),
        bytes_per_s: per_s(leader.recorder().bytes()),
        follower_fsyncs_per_s: per_s(followers.iter().map(|f| f.recorder().fsyncs()).sum())
            / followers.len().max(1) as f64,
        all: RecorderCost::of(&recorders, seconds),
    };
    let follower_loops = {
        let (loops, idle_loops) = cluster.follower_loops();
        (loops - follower_loops.0, idle_loops - follower_loops.1)
    };
    let datagrams = per_s(sender.data_datagrams());
    result.datagrams_per_s = datagrams;
    result.sender = SenderWindow::from_counters(
        seconds,
        sender,
        consensus,
        // The leader's agents run as one invoked composite: its duty cycles are the Sender's.
        leader.iter().filter(|c| c.label.ends_with(" duty cycles")).map(|c| c.value as f64).sum(),
        result.rates.iter().sum::<f64>() / result.rates.len().max(1) as f64 * seconds,
    );
    result.evidence = SplitEvidence {
        followers: followers.len(),
        sender_share: 0.0,
        window_closed_per_s: per_s(sender.window_closed_cycles()),
        caught_up_per_s: per_s(sender.caught_up_cycles()),
        ingress_full: refused as f64 / loops.max(1) as f64,
        log_back_pressured: consensus.back_pressure() as f64 / loops.max(1) as f64,
        leader_thread_idle: idle_loops as f64 / loops.max(1) as f64,
        followers_thread_idle: follower_loops.1 as f64 / follower_loops.0.max(1) as f64,
    };
    // Each node's agents' time in duty cycles that did work (their `work ns` counters) over the wall time.
    let busy = |d: &Stats| {
        d.iter().filter(|c| c.label.ends_with(" work ns")).map(|c| c.value as f64).sum::<f64>() / (seconds * 1e9)
    };
    result.diagnosis = vec![
        format!(
            "process CPU {:.2} cores of 2 (load average {:.1}); thread 0 (load + leader): {:.0} loops/s, {:.1}% idle, {:.1}% of loops the ingress was full; appended {:.0}/s, \
             log back pressure {:.0}/s, flow-control stalls {:.0}/s",
            result.cpu_util,
            load_average(),
            loops as f64 / seconds,
            100.0 * idle_loops as f64 / loops.max(1) as f64,
            100.0 * refused as f64 / loops.max(1) as f64,
            per_s(consensus.messages_appended()),
            per_s(consensus.back_pressure()),
            per_s(sender.flow_control_stalls()),
        ),
        format!(
            "leader sender: {:.0} data syscalls/s, {:.0} datagrams/s (all {} followers), {:.1} msgs/datagram, \
             {:.0} control syscalls/s, {:.0} commit frames/s, {:.0} status msgs/s in, short sends {:.0}/s, \
             empty cycles {:.0}/s window closed and {:.0}/s caught up",
            result.data_per_s,
            datagrams,
            followers.len(),
            followers.len() as f64 * per_s(consensus.messages_appended()) / datagrams.max(1.0),
            result.control_per_s,
            result.commit_frames_per_s,
            per_s(sender.status_messages_received()),
            per_s(sender.short_sends()),
            result.evidence.window_closed_per_s,
            result.evidence.caught_up_per_s,
        ),
        format!(
            "thread 1 ({} followers): {:.0} loops/s, {:.1}% idle; follower 1 receives {:.0} datagrams/s in {:.0} recv \
             syscalls/s, NAKs {:.0}/s; datagrams/s of the others {}",
            followers.len(),
            follower_loops.0 as f64 / seconds,
            100.0 * result.evidence.followers_thread_idle,
            per_s(followers[0].receiver().datagrams()),
            per_s(followers[0].receiver().recv_syscalls()),
            per_s(followers[0].receiver().naks_sent()),
            followers[1..].iter().map(|f| rate(per_s(f.receiver().datagrams()))).collect::<Vec<_>>().join(" "),
        ),
        format!(
            "agents busy (work ns / wall time): leader {:.0}% (on thread 0), followers {} (on thread 1)",
            100.0 * busy(leader),
            followers.iter().map(|f| format!("{:.0}%", 100.0 * busy(f))).collect::<Vec<_>>().join(" "),
        ),
    ];
    if result.recorder.frames_per_s > 0.0 {
        let r = &result.recorder;
        result.diagnosis.push(format!(
            "recorders: leader {:.0} MB/s, {:.0} frames/s, {:.0} fsyncs/s ({} entries/fsync); followers {:.0} fsyncs/s each; \
             at the end the leader's recorder was {} bytes behind its log, its synced position {} behind that",
            r.bytes_per_s / 1e6,
            r.frames_per_s,
            r.fsyncs_per_s,
            r.entries_per_fsync().map_or("-".into(), |e| format!("{e:.0}")),
            r.follower_fsyncs_per_s,
            last[0].consensus().append_position() - last[0].recorder().position(),
            last[0].recorder().position() - last[0].recorder().synced_position(),
        ));
        let all = &r.all;
        result.diagnosis.push(format!(
            "recorders' cost (all three): {:.0} MB/s in {:.0} B writes, checksum {:.3} ns/B, write calls {:.3} ns/B \
             (wall time), {:.0} fsyncs/s of {:.0} KB, mean fsync {:.0} us, zeros written ahead {:.1}% of the bytes",
            all.bytes_per_s / 1e6,
            all.bytes_per_write(),
            all.checksum_ns_per_byte,
            all.write_ns_per_byte,
            all.fsyncs_per_s,
            all.bytes_per_fsync().unwrap_or(0.0) / 1e3,
            all.fsync_us,
            all.zeros_ahead_per_byte * 100.0,
        ));
    }
    result
}

/// Offers up to one consensus drain's worth of messages; returns how many were taken.
fn offer_burst(cluster: &mut LoadCluster) -> usize {
    let mut taken = 0;
    while taken < 1024 && offer(cluster) {
        taken += 1;
    }
    taken
}
