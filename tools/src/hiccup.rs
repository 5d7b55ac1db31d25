//! The host's own stalls: how long a thread that never blocks is kept off its core.
//!
//! A latency tail has two sources: the pipeline's stages, which the agents' duty-cycle counters name, and
//! the machine under them, which no counter of ours can see. On a virtual machine the hypervisor runs its
//! own work by descheduling a virtual CPU ("steal"), and on any host the kernel runs interrupts, softirqs
//! and its own threads on the cores our agents spin on. [`probe`] measures that floor the way jHiccup does:
//! one thread per core spins reading the monotonic clock, and every gap between two reads longer than
//! [`GAP_THRESHOLD_NS`] is time the thread did not have. It runs on every core at once, because a host that
//! leaves a busy guest alone while one core idles may not when both are busy. [`CpuTimes`] reads the
//! kernel's own steal accounting from `/proc/stat` (10 ms ticks) to tell the hypervisor's share apart.
//!
//! The figures answer one question for a latency report: how much of the tail is the machine's. A message
//! that arrives while a core it needs is more than a millisecond into a stall waits a millisecond or more
//! whatever the software does, and those queued behind the stall while the stage catches up add to them;
//! so over the same stretch of time, the share of a core's time that is more than 1 ms into a stall
//! ([`Hiccups::past_long_share`]) is a floor under the share of messages past 1 ms, at every load. The
//! stalls come in bursts (a few a second, some of 10 ms and more), so a probe of seconds, run before the
//! points rather than during them, gives that floor's order of magnitude, not its value in each point.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Gaps between two clock reads shorter than this are the loop itself (a clock read, a branch), not a
/// stall; longer ones are counted as time the thread lost.
pub const GAP_THRESHOLD_NS: u64 = 20_000;

/// A gap at least this long is a "long" gap: one that by itself puts a message past a millisecond.
pub const LONG_GAP_NS: u64 = 1_000_000;

/// What one core's spinning thread lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CoreHiccups {
    /// The core the thread was pinned to (`None`: not pinned, the pin was refused).
    pub core: Option<usize>,
    /// Gaps longer than [`GAP_THRESHOLD_NS`] per second.
    pub gaps_per_s: f64,
    /// Share of the time spent in such gaps (0 to 1).
    pub lost_share: f64,
    /// Gaps of at least [`LONG_GAP_NS`] per second.
    pub long_gaps_per_s: f64,
    /// Share of the time spent in gaps of at least [`LONG_GAP_NS`] (0 to 1).
    pub long_gap_share: f64,
    /// Share of the time by which gaps ran past [`LONG_GAP_NS`]: the sum of `gap - 1 ms` over the long
    /// gaps, over the time (0 to 1). A message that waits out the part of a gap past its first
    /// millisecond waits a millisecond or more.
    #[serde(default)]
    pub past_long_share: f64,
    /// The longest gap, ns.
    pub longest_ns: u64,
}

/// The hiccup probe's result: every core at once, and the kernel's steal accounting over the same time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hiccups {
    /// How long the threads spun, seconds.
    pub seconds: f64,
    /// One entry per core probed.
    pub cores: Vec<CoreHiccups>,
    /// Share of all CPUs' time the hypervisor took (`/proc/stat` steal; 0 when unknown, as on bare metal).
    pub steal_share: f64,
}

impl Hiccups {
    /// The largest share of a core's time that was more than a millisecond into a stall: on that core,
    /// at least this share of arrivals waits a millisecond or more, whatever the software does (queueing
    /// behind the stall while the stage catches up only adds to it).
    pub fn past_long_share(&self) -> f64 {
        self.cores.iter().map(|c| c.past_long_share).fold(0.0, f64::max)
    }

    /// One line for a report: per core, the share lost, the long gaps and the longest; then the steal.
    pub fn describe(&self) -> String {
        let cores: Vec<String> = self
            .cores
            .iter()
            .map(|c| {
                format!(
                    "core {}: {:.2}% lost, {:.1} gaps >= 1 ms/s ({:.2}% of the time, {:.2}% more than 1 ms into \
                     one), longest {:.2} ms",
                    c.core.map_or_else(|| "?".to_string(), |n| n.to_string()),
                    100.0 * c.lost_share,
                    c.long_gaps_per_s,
                    100.0 * c.long_gap_share,
                    100.0 * c.past_long_share,
                    c.longest_ns as f64 / 1e6
                )
            })
            .collect();
        format!(
            "a spinning thread per core for {:.1} s: {}; steal {:.2}% of the CPUs' time",
            self.seconds,
            cores.join("; "),
            100.0 * self.steal_share
        )
    }
}

/// Counts the gaps in a sequence of clock reads.
#[derive(Debug, Clone, Copy, Default)]
struct GapTally {
    gaps: u64,
    lost_ns: u64,
    long_gaps: u64,
    /// Sum over the long gaps of their part past [`LONG_GAP_NS`] (their whole length is this plus
    /// `long_gaps x LONG_GAP_NS`).
    past_long_ns: u64,
    longest_ns: u64,
}

impl GapTally {
    /// Accounts for the time between two consecutive clock reads.
    #[inline]
    fn record(&mut self, gap_ns: u64) {
        if gap_ns < GAP_THRESHOLD_NS {
            return;
        }
        self.gaps += 1;
        self.lost_ns += gap_ns;
        self.longest_ns = self.longest_ns.max(gap_ns);
        if gap_ns >= LONG_GAP_NS {
            self.long_gaps += 1;
            self.past_long_ns += gap_ns - LONG_GAP_NS;
        }
    }

    fn summarize(&self, core: Option<usize>, elapsed_ns: u64) -> CoreHiccups {
        let seconds = (elapsed_ns.max(1)) as f64 / 1e9;
        let share = |ns: u64| ns as f64 / elapsed_ns.max(1) as f64;
        CoreHiccups {
            core,
            gaps_per_s: self.gaps as f64 / seconds,
            lost_share: share(self.lost_ns),
            long_gaps_per_s: self.long_gaps as f64 / seconds,
            long_gap_share: share(self.past_long_ns + self.long_gaps * LONG_GAP_NS),
            past_long_share: share(self.past_long_ns),
            longest_ns: self.longest_ns,
        }
    }
}

/// Spins reading `now_ns` until it reaches `until_ns`, tallying the gaps; returns the tally and the time
/// covered.
fn spin(mut now_ns: impl FnMut() -> u64, until_ns: u64) -> (GapTally, u64) {
    let mut tally = GapTally::default();
    let start = now_ns();
    let mut last = start;
    while last < until_ns {
        let now = now_ns();
        tally.record(now.saturating_sub(last));
        last = now;
    }
    (tally, last - start)
}

/// Spins one thread on each of `cores` (unpinned threads for `None`) for `duration`, all at once, and
/// reports what each lost, with the steal the kernel accounted over the same time.
pub fn probe(cores: &[Option<usize>], duration: Duration) -> Hiccups {
    let barrier = Arc::new(Barrier::new(cores.len() + 1));
    let threads: Vec<_> = cores
        .iter()
        .map(|&core| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let pinned = core.filter(|&c| quorumcast::agent::pin_current_thread(c).is_ok());
                let epoch = Instant::now();
                let now_ns = || epoch.elapsed().as_nanos() as u64;
                barrier.wait();
                let (tally, elapsed) = spin(now_ns, now_ns() + duration.as_nanos() as u64);
                tally.summarize(pinned, elapsed)
            })
        })
        .collect();
    let before = CpuTimes::read();
    barrier.wait();
    let cores = threads.into_iter().map(|t| t.join().unwrap_or_default()).collect();
    let steal_share = match (before, CpuTimes::read()) {
        (Some(before), Some(after)) => after.since(&before).steal_share(),
        _ => 0.0,
    };
    Hiccups { seconds: duration.as_secs_f64(), cores, steal_share }
}

/// The all-CPU times of `/proc/stat`'s `cpu` line, in the kernel's ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Every state's ticks summed (user, nice, system, idle, iowait, irq, softirq, steal).
    pub total: u64,
    /// Ticks the hypervisor ran something else while a virtual CPU wanted to run.
    pub steal: u64,
}

impl CpuTimes {
    /// Reads `/proc/stat`; `None` where it is missing or unreadable.
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the `cpu ` line of a `/proc/stat` text (guest time is already inside user and nice, so it
    /// is not added again).
    pub fn parse(text: &str) -> Option<Self> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line.split_whitespace().skip(1).map_while(|f| f.parse().ok()).collect();
        if fields.len() < 4 {
            return None;
        }
        let steal = fields.get(7).copied().unwrap_or(0);
        let total = fields.iter().take(8).sum();
        Some(Self { total, steal })
    }

    /// The ticks from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self { total: self.total.saturating_sub(earlier.total), steal: self.steal.saturating_sub(earlier.steal) }
    }

    /// Steal as a share of all the CPUs' ticks (0 when no tick passed).
    pub fn steal_share(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.steal as f64 / self.total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_under_the_threshold_are_the_loop_and_longer_ones_are_lost_time() {
        // Reads every 100 ns, then a 50 us gap, a 3 ms gap, and on to 10 ms.
        let mut reads = vec![0u64];
        let mut t = 0;
        while t < 10_000_000 {
            t += match t {
                1_000_000 => 50_000,
                5_000_000 => 3_000_000,
                _ => 100,
            };
            reads.push(t);
        }
        let mut it = reads.into_iter();
        let (tally, elapsed) = spin(|| it.next().unwrap_or(u64::MAX), 10_000_000);
        assert_eq!(elapsed, 10_000_000);
        assert_eq!((tally.gaps, tally.lost_ns), (2, 3_050_000));
        assert_eq!((tally.long_gaps, tally.past_long_ns, tally.longest_ns), (1, 2_000_000, 3_000_000));
        let core = tally.summarize(Some(1), elapsed);
        assert!((core.gaps_per_s - 200.0).abs() < 1e-9);
        assert!((core.lost_share - 0.305).abs() < 1e-9);
        assert!((core.long_gap_share - 0.3).abs() < 1e-9);
        assert!((core.long_gaps_per_s - 100.0).abs() < 1e-9);
        assert!((core.past_long_share - 0.2).abs() < 1e-9);
        let calm = CoreHiccups { past_long_share: 0.01, ..core };
        let h = Hiccups { seconds: 0.01, cores: vec![calm, core], steal_share: 0.0 };
        assert!((h.past_long_share() - 0.2).abs() < 1e-9, "the worst core");
    }

    #[test]
    fn proc_stat_gives_total_and_steal() {
        let text = "cpu  3901788 709552 1903219 1686519 48565 0 232666 29902 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let t = CpuTimes::parse(text).unwrap();
        assert_eq!(t.steal, 29902);
        assert_eq!(t.total, 3901788 + 709552 + 1903219 + 1686519 + 48565 + 232666 + 29902);
        let later = CpuTimes { total: t.total + 1000, steal: t.steal + 25 };
        assert!((later.since(&t).steal_share() - 0.025).abs() < 1e-12);
        // An old kernel's shorter line has no steal; garbage has no line.
        assert_eq!(CpuTimes::parse("cpu  1 2 3 4\n").map(|t| (t.total, t.steal)), Some((10, 0)));
        assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
        assert_eq!(CpuTimes::default().steal_share(), 0.0);
    }

    #[test]
    fn the_probe_runs_one_thread_per_core_and_accounts_for_its_time() {
        // One thread: the tests beside it may be spinning on the other core.
        let h = probe(&[None], Duration::from_millis(20));
        assert_eq!(h.cores.len(), 1);
        for core in &h.cores {
            // Whatever the host did, a thread cannot have lost more than all of its time.
            assert!((0.0..=1.0).contains(&core.lost_share), "{core:?}");
            assert!(core.long_gap_share <= core.lost_share);
        }
        assert!((0.0..=1.0).contains(&h.steal_share));
        assert!(h.describe().contains("core ?: "), "{}", h.describe());
    }
}
