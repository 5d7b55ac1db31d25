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
//!
//! Two things do run during every point, because they cost almost nothing:
//!
//! - [`WakeProbe`]: threads that sleep [`WAKE_INTERVAL_NS`] at a time and record how late they woke, as
//!   jHiccup does: one free to run anywhere (jHiccup's), and one pinned to each core at real-time
//!   priority, which sees the stalls of a core a busy agent holds. They are asleep nearly all the time (a
//!   wake-up a millisecond, a few microseconds of CPU each), so they do not take a core from the agents;
//!   what they see is how long the host keeps a runnable thread waiting: the same stalls that delay a
//!   message, measured over the same window.
//! - [`HostCpu`]: `/proc/stat`'s busy ticks against this process's own (`/proc/self/stat`), so that a
//!   point can say how much CPU other processes took while it ran.
//! - [`HostTasks`]: the same from the scheduler's statistics, task by task (`schedstat`: time on a CPU and
//!   turns), so that a point can name the kernel threads and processes that took the cores, which a
//!   real-time sleeper preempts and so never sees; and [`ThreadWaits`], how long this process's own
//!   threads stood waiting for a core.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
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
                let pinned = core.filter(|&c| quorumcast_driver::agent::pin_current_thread(c).is_ok());
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

/// The all-CPU times of `/proc/stat`'s `cpu` line, in the kernel's ticks (`USER_HZ`, see
/// [`clock_ticks_per_s`]).
///
/// Invariant: `steal <= total`, `busy + idle time + iowait + steal = total`, `irq <= busy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Every state's ticks summed (user, nice, system, idle, iowait, irq, softirq, steal).
    pub total: u64,
    /// Ticks the hypervisor ran something else while a virtual CPU wanted to run.
    pub steal: u64,
    /// Ticks some task or the kernel ran on a CPU of this machine: user, nice, system, irq and softirq
    /// (idle, iowait and steal left out: in them nothing of this machine ran).
    pub busy: u64,
    /// Of `busy`, the ticks in interrupts and softirqs. A kernel that accounts interrupt time apart from
    /// the task it interrupted (`CONFIG_IRQ_TIME_ACCOUNTING`) counts there the softirq work of this
    /// process's own loopback traffic, which `/proc/self/stat` then leaves out; so this part of "other"
    /// time may be ours.
    pub irq: u64,
}

impl CpuTimes {
    /// Reads `/proc/stat`; `None` where it is missing or unreadable.
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the `cpu ` line of a `/proc/stat` text (guest time is already inside user and nice, so it
    /// is not added again). `None` without such a line or with fewer than the four oldest fields.
    pub fn parse(text: &str) -> Option<Self> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line.split_whitespace().skip(1).map_while(|f| f.parse().ok()).collect();
        if fields.len() < 4 {
            return None;
        }
        let field = |i: usize| fields.get(i).copied().unwrap_or(0);
        let irq = field(5) + field(6);
        Some(Self {
            total: fields.iter().take(8).sum(),
            steal: field(7),
            busy: field(0) + field(1) + field(2) + irq,
            irq,
        })
    }

    /// The ticks from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            total: self.total.saturating_sub(earlier.total),
            steal: self.steal.saturating_sub(earlier.steal),
            busy: self.busy.saturating_sub(earlier.busy),
            irq: self.irq.saturating_sub(earlier.irq),
        }
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

/// This process's CPU time from `/proc/self/stat`, in the kernel's ticks: every thread's user and system
/// time (`utime`, `stime`), and that of the children it has waited for (`cutime`, `cstime`), so a child
/// process (a `qc-client`) that exited and was reaped within a window is counted in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessTimes {
    /// `utime + stime`: this process's threads, the dead ones included.
    pub own: u64,
    /// `cutime + cstime`: its reaped children (and theirs).
    pub children: u64,
}

impl ProcessTimes {
    /// Reads `/proc/self/stat`; `None` where it is missing or unreadable.
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/self/stat").ok()?)
    }

    /// Reads `/proc/<pid>/stat` (another process: a cluster's, from its client); `None` where it is
    /// missing or unreadable.
    pub fn read_pid(pid: u32) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// Seconds of `ticks` ([`clock_ticks_per_s`]).
    pub fn seconds(ticks: u64) -> f64 {
        ticks as f64 / clock_ticks_per_s() as f64
    }

    /// Parses a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may itself hold
    /// spaces and parentheses, so the fields are counted from the last `)`: field 3 (the state) is the
    /// first after it, `utime` is field 14. `None` when the line is cut short or a field is no number
    /// (a negative `cutime` or `cstime`, which the kernel never writes, counts as 0).
    pub fn parse(text: &str) -> Option<Self> {
        let fields: Vec<&str> = stat_fields(text)?.1.collect();
        // Field n of the line is fields[n - 3].
        let unsigned = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let signed = |n: usize| fields.get(n - 3)?.parse::<i64>().ok().map(|v| v.max(0) as u64);
        Some(Self { own: unsigned(14)? + unsigned(15)?, children: signed(16)? + signed(17)? })
    }

    /// Own and children's ticks together.
    pub fn total(&self) -> u64 {
        self.own + self.children
    }

    /// The ticks from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self { own: self.own.saturating_sub(earlier.own), children: self.children.saturating_sub(earlier.children) }
    }
}

/// The machine's ticks and this process's, read together: the difference of two is what other processes
/// (and the kernel's interrupt work) took in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCpu {
    /// All CPUs (`/proc/stat`).
    pub cpu: CpuTimes,
    /// This process and its reaped children (`/proc/self/stat`).
    pub process: ProcessTimes,
}

impl HostCpu {
    /// Reads both files; `None` when either is unreadable.
    pub fn read() -> Option<Self> {
        Some(Self { cpu: CpuTimes::read()?, process: ProcessTimes::read()? })
    }

    /// The ticks from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self { cpu: self.cpu.since(&earlier.cpu), process: self.process.since(&earlier.process) }
    }

    /// Of a difference (see [`since`](Self::since)): the busy ticks that were not this process's nor its
    /// children's. Both are counted by sampling at each tick, so a window's figure is good to a few
    /// ticks; a negative difference (sampling noise) reads 0.
    pub fn other_ticks(&self) -> u64 {
        self.cpu.busy.saturating_sub(self.process.total())
    }
}

/// The kernel's tick rate for `/proc/stat` and `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux), from
/// `sysconf(_SC_CLK_TCK)`; 100 where it says nothing sensible.
pub fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf reads a constant of the C library; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// How long the [`WakeProbe`] asks to sleep each time, ns, and the expected interval of its corrected
/// recording: a wake-up this much late stands for one interval the thread did not get.
pub const WAKE_INTERVAL_NS: u64 = 1_000_000;

/// The largest lateness the probe's histogram holds, ns (60 s; longer ones are recorded as this).
pub const MAX_LATENESS_NS: u64 = 60_000_000_000;

/// What a [`WakeProbe`] recorded.
#[derive(Debug, Clone)]
pub struct WakeRecord {
    /// How late each wake-up came, ns, recorded with the expected-interval correction
    /// (`record_correct(late, WAKE_INTERVAL_NS)`), so a stall of k intervals counts as the k wake-ups it
    /// swallowed: its `len()` counts those filled-in values too.
    pub late_ns: Histogram<u64>,
    /// The wake-ups the thread really had.
    pub wakeups: u64,
}

impl WakeRecord {
    /// An empty record: 1 ns to [`MAX_LATENESS_NS`], 3 significant digits.
    pub fn new() -> Self {
        let late_ns = Histogram::new_with_bounds(1, MAX_LATENESS_NS, 3).expect("constant bounds are valid");
        Self { late_ns, wakeups: 0 }
    }

    /// Records one sleep of [`WAKE_INTERVAL_NS`] that took `slept_ns` from the call to the wake-up: its
    /// lateness (0 when it woke early, as after a signal), with the expected-interval correction.
    pub fn record_sleep(&mut self, slept_ns: u64) {
        let late = slept_ns.saturating_sub(WAKE_INTERVAL_NS).min(MAX_LATENESS_NS);
        // Every value the correction adds is smaller than `late`, which is in range, so this cannot fail;
        // were it to, the wake-up itself is still counted.
        if self.late_ns.record_correct(late, WAKE_INTERVAL_NS).is_err() {
            self.late_ns.saturating_record(late);
        }
        self.wakeups += 1;
    }
}

impl Default for WakeRecord {
    fn default() -> Self {
        Self::new()
    }
}

/// Threads that sleep [`WAKE_INTERVAL_NS`] at a time, from [`start`](Self::start) until
/// [`stop`](Self::stop), and record how late they woke (see [`WakeRecord`]): one that may run on any CPU
/// of the process, and one pinned to each of those CPUs at real-time priority.
///
/// Each sleep is relative (`clock_nanosleep(CLOCK_MONOTONIC, 0, 1 ms)`), timed from just before the call,
/// as jHiccup's `Thread.sleep` is: after a 5 ms stall the next sleep starts afresh, and the correction
/// fills in the four wake-ups the stall swallowed. Absolute deadlines would replay them as four
/// immediate returns of decreasing lateness, and with the correction count the stall twice.
///
/// Why both kinds. The thread free to run anywhere (jHiccup's) is woken on whichever core the scheduler
/// picks, which is the idle one: a stall of the core a busy agent holds (the kernel's own threads, such
/// as a memory-monitoring `kdamond`, run there for milliseconds) is one it does not see, yet every
/// message through that agent waits it out. A thread pinned to each core sees that core's stalls; at
/// `SCHED_FIFO` priority it takes the core from any ordinary thread the moment it wakes, so what keeps
/// it waiting is what no thread of this process could have got past either: the hypervisor not running
/// the virtual CPU, interrupts, and kernel work that does not yield (this kernel's own threads, and the
/// kernel side of a system call in progress). At ordinary priority a pinned thread would also wait for
/// this process's own busy threads, so where the kernel refuses real-time priority (no
/// `CAP_SYS_NICE`) the pinned thread still runs but says so ([`CoreWakeRecord::realtime`]) and the
/// host's stalls are read from the free thread alone ([`WakeRecords::host_stalls`]).
///
/// What the pinned threads do not see: an ordinary host thread that yields (the guest's `kdamond.0`)
/// taking its fair turns on an agent's core. It can hold that core in millisecond turns for many
/// milliseconds while the real-time sleeper there still wakes on time, since it preempts the host thread
/// as it would the agent. Pinned sleepers at ordinary priority would see those turns, but they wait for
/// this process's own busy threads too (the harness, the Sender), and such a reference would excuse the
/// engine's own stalls. The report counts other processes' CPU time per point beside it ([`HostCpu`]).
///
/// Each thread asks for a timer slack of 1 ns (Linux's default, 50 us, would wake it up to 50 us late on
/// a quiet host and hide small stalls). Costs: a wake-up a millisecond per thread; on a core a busy agent
/// holds, each real-time wake-up preempts it for the few microseconds the wake-up takes, a small share of
/// the agent's time.
#[derive(Debug)]
pub struct WakeProbe {
    stop: Arc<AtomicBool>,
    any_core: Option<JoinHandle<(WakeRecord, bool)>>,
    cores: Vec<(usize, JoinHandle<(WakeRecord, bool)>)>,
}

/// What one pinned thread of a [`WakeProbe`] recorded.
#[derive(Debug, Clone)]
pub struct CoreWakeRecord {
    /// The core it was pinned to.
    pub core: usize,
    /// Whether it ran at real-time priority (`SCHED_FIFO`); if not, its lateness includes this
    /// process's own threads on that core.
    pub realtime: bool,
    /// How late it woke.
    pub record: WakeRecord,
}

/// What a [`WakeProbe`]'s threads recorded.
#[derive(Debug, Clone, Default)]
pub struct WakeRecords {
    /// The thread that could run on any CPU of the process.
    pub any_core: WakeRecord,
    /// The pinned threads, one per core (empty where they could not be started).
    pub cores: Vec<CoreWakeRecord>,
}

impl WakeRecords {
    /// Whether a pinned thread ran on every core at real-time priority.
    pub fn every_core_realtime(&self) -> bool {
        !self.cores.is_empty() && self.cores.iter().all(|c| c.realtime)
    }

    /// The records to read the host's stalls from: the pinned threads' when every one of them ran at
    /// real-time priority (a stall of any core the pipeline runs on is the host's), else the free
    /// thread's alone.
    pub fn host_stalls(&self) -> Vec<&WakeRecord> {
        if self.every_core_realtime() {
            self.cores.iter().map(|c| &c.record).collect()
        } else {
            vec![&self.any_core]
        }
    }
}

impl WakeProbe {
    /// Starts the threads; the error when the free one cannot be spawned (a pinned one that cannot is
    /// left out).
    ///
    /// Returns once every thread runs its loop, so that the window a caller measures next is covered
    /// from its start: on a busy host a new thread may wait milliseconds for its first time on a CPU,
    /// and a short window would otherwise end before the probe began. Since each loop checks for
    /// [`stop`](Self::stop) only after each sleep, each record holds at least one wake-up.
    pub fn start() -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicUsize::new(0));
        let any_core = spawn_sleeper("wake-probe", &stop, &running, || {
            unpin_current_thread();
            false
        })?;
        let cores: Vec<_> = process_cpu_list()
            .into_iter()
            .filter_map(|core| {
                let setup =
                    move || quorumcast_driver::agent::pin_current_thread(core).is_ok() && set_realtime_priority();
                spawn_sleeper(&format!("wake-probe-{core}"), &stop, &running, setup).ok().map(|t| (core, t))
            })
            .collect();
        while running.load(Ordering::Acquire) < 1 + cores.len() {
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(Self { stop, any_core: Some(any_core), cores })
    }

    /// Stops the threads (after their current sleeps, within one interval and its lateness) and returns
    /// what they recorded (an empty record for one that panicked).
    pub fn stop(mut self) -> WakeRecords {
        self.halt()
    }

    fn halt(&mut self) -> WakeRecords {
        self.stop.store(true, Ordering::Relaxed);
        let any_core = self.any_core.take().and_then(|t| t.join().ok()).unwrap_or_default().0;
        let cores = self
            .cores
            .drain(..)
            .map(|(core, t)| {
                let (record, realtime) = t.join().unwrap_or_default();
                CoreWakeRecord { core, realtime, record }
            })
            .collect();
        WakeRecords { any_core, cores }
    }
}

impl Drop for WakeProbe {
    /// A probe dropped without [`stop`](Self::stop) (an error of the point) still ends its threads.
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// Spawns a thread named `name` that runs `setup` (its result is handed back with the record), counts
/// itself in `running`, then sleeps and records until `stop`.
fn spawn_sleeper(
    name: &str,
    stop: &Arc<AtomicBool>,
    running: &Arc<AtomicUsize>,
    setup: impl FnOnce() -> bool + Send + 'static,
) -> std::io::Result<JoinHandle<(WakeRecord, bool)>> {
    let (stop, running) = (Arc::clone(stop), Arc::clone(running));
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let set = setup();
        set_timer_slack_ns(1);
        let mut record = WakeRecord::new();
        running.fetch_add(1, Ordering::Release);
        loop {
            let before = Instant::now();
            sleep_interval();
            record.record_sleep(before.elapsed().as_nanos() as u64);
            if stop.load(Ordering::Relaxed) {
                return (record, set);
            }
        }
    })
}

/// Puts the calling thread in `SCHED_FIFO` at the highest real-time priority (above any agent an
/// operator runs at real-time priority); false when the kernel refuses (no `CAP_SYS_NICE`, or a
/// real-time budget of 0).
fn set_realtime_priority() -> bool {
    // SAFETY: reads only its integer argument.
    let highest = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    let param = libc::sched_param { sched_priority: highest.max(1) };
    // SAFETY: `param` is a valid sched_param that outlives the call; 0 names the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// The CPUs this process may run on, as core numbers (empty when the kernel does not say).
fn process_cpu_list() -> Vec<usize> {
    let Some(cpus) = process_cpus() else { return Vec::new() };
    // SAFETY: CPU_ISSET reads one bit of a valid set, at an index below its size.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &cpus) }).collect()
}

/// One task's scheduler statistics, as `/proc/<pid>/task/<tid>/schedstat` gives them (kept where the
/// kernel has `CONFIG_SCHED_INFO`), and its name (`comm`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TaskSched {
    name: String,
    /// Nanoseconds on a CPU.
    ran_ns: u64,
    /// Nanoseconds runnable on a run queue, waiting for a CPU.
    waited_ns: u64,
    /// Turns on a CPU.
    turns: u64,
}

impl TaskSched {
    /// One `schedstat` line: `<on cpu ns> <waiting ns> <turns>`.
    fn parse(line: &str) -> Option<(u64, u64, u64)> {
        let mut fields = line.split_whitespace().map(str::parse::<u64>);
        Some((fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?))
    }

    /// Every task under `tasks` (a `/proc/<pid>/task` directory) into `into`, keyed by thread id; a task
    /// that ended between the listing and the reads is left out.
    fn read_all(tasks: &std::path::Path, into: &mut std::collections::BTreeMap<u32, TaskSched>) {
        let Ok(entries) = std::fs::read_dir(tasks) else { return };
        for entry in entries.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("schedstat")) else { continue };
            let Some((ran_ns, waited_ns, turns)) = Self::parse(&stat) else { continue };
            let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            into.insert(tid, TaskSched { name: name.trim_end().to_string(), ran_ns, waited_ns, turns });
        }
    }
}

/// How long each thread of this process has waited runnable for a CPU, from the kernel's scheduler
/// statistics (`/proc/self/task/<tid>/schedstat`: time on a CPU, time waiting on a run queue, turns):
/// the one figure that says whether a late agent was working or was kept off its core by other threads.
///
/// Invariant: keyed by thread id, each with its name (`comm`) and its statistics, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadWaits(std::collections::BTreeMap<u32, TaskSched>);

/// A thread's run-queue wait over a window, summed over the threads of one name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadWait {
    /// The thread name (`comm`, at most 15 bytes: `sender+receiver`, `sweep-harness`, ...).
    pub thread: String,
    /// The threads of that name.
    pub threads: usize,
    /// Milliseconds they stood runnable while other threads held the CPUs they may run on.
    pub waited_ms: f64,
}

impl ThreadWaits {
    /// Reads every thread of this process; `None` when the kernel keeps no scheduler statistics.
    pub fn read() -> Option<Self> {
        let mut tasks = std::collections::BTreeMap::new();
        TaskSched::read_all(std::path::Path::new("/proc/self/task"), &mut tasks);
        (!tasks.is_empty()).then_some(Self(tasks))
    }

    /// What the threads waited since `before` (a thread new since then from 0), summed by name, of the
    /// names that waited at least `min_ms`, longest first; threads whose names start with `leave_out`'s
    /// entries are left out.
    pub fn since(&self, before: &Self, min_ms: f64, leave_out: &[&str]) -> Vec<ThreadWait> {
        let mut by_name: std::collections::BTreeMap<&str, (usize, u64)> = std::collections::BTreeMap::new();
        for (tid, task) in &self.0 {
            if leave_out.iter().any(|l| task.name.starts_with(l)) {
                continue;
            }
            let earlier = before.0.get(tid).map_or(0, |t| t.waited_ns);
            let entry = by_name.entry(&task.name).or_default();
            entry.0 += 1;
            entry.1 += task.waited_ns.saturating_sub(earlier);
        }
        let mut waits: Vec<ThreadWait> = by_name
            .into_iter()
            .map(|(name, (threads, ns))| ThreadWait { thread: name.to_string(), threads, waited_ms: ns as f64 / 1e6 })
            .filter(|w| w.waited_ms >= min_ms)
            .collect();
        waits.sort_by(|a, b| b.waited_ms.total_cmp(&a.waited_ms));
        waits
    }
}

/// The CPU time every task of the machine that is neither this process's nor a child's took, task by
/// task, from the same scheduler statistics (`/proc/<pid>/task/<tid>/schedstat`): the kernel's own
/// threads (`kdamond`, `kworker`, `ksoftirqd`, ...) and other processes. A wake probe at real-time
/// priority preempts them, so it cannot see them take a busy agent's core; this can, by their run time
/// and turns (`kdamond.0`, the kernel's memory-access monitor, runs turns of about a millisecond at
/// ordinary priority and can hold an agent's core for several of them in a row).
///
/// Invariant: keyed by thread id, tasks of this process and of its children excluded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTasks(std::collections::BTreeMap<u32, TaskSched>);

/// What the host's tasks ran over a window: all of them, and the names that ran the most.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostTasksRan {
    /// Milliseconds on a CPU, every task (but this process's and its children's) summed: an upper bound
    /// on the time they can have kept any one of this process's threads off its core.
    pub ran_ms: f64,
    /// Their turns on a CPU.
    pub turns: u64,
    /// The names that ran at least [`HOST_TASK_MIN_MS`], most first (at most [`HOST_TASKS_NAMED`]).
    pub largest: Vec<HostTaskRan>,
}

/// The tasks of one name over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTaskRan {
    /// The task name (`comm`): `kdamond.0`, `kworker/1:2-events`, `sshd`, ...
    pub task: String,
    /// Milliseconds on a CPU.
    pub ran_ms: f64,
    /// Turns on a CPU (`ran_ms / turns` is a turn's mean length).
    pub turns: u64,
}

/// Host tasks that ran less than this over a window are counted but not named.
pub const HOST_TASK_MIN_MS: f64 = 0.5;
/// At most this many host task names are kept per window.
pub const HOST_TASKS_NAMED: usize = 4;

impl HostTasksRan {
    /// `11.0 ms in 40 turns (kdamond.0 8.2 ms in 9, kworker/1:2-events 1.1 ms in 30)`.
    pub fn describe(&self) -> String {
        let named: Vec<String> =
            self.largest.iter().map(|t| format!("{} {:.1} ms in {}", t.task, t.ran_ms, t.turns)).collect();
        let named = if named.is_empty() { String::new() } else { format!(" ({})", named.join(", ")) };
        format!("{:.1} ms in {} turns{named}", self.ran_ms, self.turns)
    }
}

impl HostTasks {
    /// Reads every task of the machine but this process's and its children's; `None` when the kernel
    /// keeps no scheduler statistics or `/proc` cannot be listed.
    pub fn read() -> Option<Self> {
        let me = std::process::id();
        let mut tasks = std::collections::BTreeMap::new();
        for (pid, dir, stat) in processes()? {
            if pid == me || parent(&stat) == Some(me) {
                continue;
            }
            TaskSched::read_all(&dir.join("task"), &mut tasks);
        }
        (!tasks.is_empty()).then_some(Self(tasks))
    }

    /// What the tasks ran since `before` (a task new since then from 0, one gone since then not at all).
    pub fn since(&self, before: &Self) -> HostTasksRan {
        let mut by_name: std::collections::BTreeMap<&str, (u64, u64)> = std::collections::BTreeMap::new();
        for (tid, task) in &self.0 {
            let (ran, turns) = before.0.get(tid).map_or((0, 0), |t| (t.ran_ns, t.turns));
            let entry = by_name.entry(&task.name).or_default();
            entry.0 += task.ran_ns.saturating_sub(ran);
            entry.1 += task.turns.saturating_sub(turns);
        }
        let ran_ns: u64 = by_name.values().map(|&(ns, _)| ns).sum();
        let turns = by_name.values().map(|&(_, t)| t).sum();
        let mut largest: Vec<HostTaskRan> = by_name
            .into_iter()
            .map(|(name, (ns, turns))| HostTaskRan { task: name.to_string(), ran_ms: ns as f64 / 1e6, turns })
            .filter(|t| t.ran_ms >= HOST_TASK_MIN_MS)
            .collect();
        largest.sort_by(|a, b| b.ran_ms.total_cmp(&a.ran_ms));
        largest.truncate(HOST_TASKS_NAMED);
        HostTasksRan { ran_ms: ran_ns as f64 / 1e6, turns, largest }
    }
}

/// A warning when the kernel's data-access monitor (DAMON: `kdamond.<n>` threads) runs at normal
/// priority: it wakes about twice a second for turns of about a millisecond, and on a host whose cores
/// the agents keep busy it takes them from an agent, which the real-time wake probe cannot see (it
/// preempts kdamond). Under `SCHED_IDLE` it gives way to any ordinary thread, so the agents keep their
/// cores and the tails no longer carry its turns; the sweep only says so and changes nothing itself.
/// `None` where no such thread runs or each is already `SCHED_IDLE`.
pub fn damon_warning() -> Option<String> {
    let busy: Vec<String> = processes()?
        .filter_map(|(pid, _, stat)| {
            let (name, policy) = name_and_policy(&stat)?;
            (name.starts_with("kdamond") && policy != libc::SCHED_IDLE as u32).then(|| format!("{name} (pid {pid})"))
        })
        .collect();
    if busy.is_empty() {
        return None;
    }
    Some(format!(
        "DAMON runs at normal priority here ({}): its turns of about 1 ms take the agents' cores, and the points' \
         tails carry them (2-core AMD guest, 2026-12-05: tail target met in 10-16 of 36 points, 26-27 with DAMON \
         under SCHED_IDLE); the report counts them per point as the host's tasks. To keep it off busy cores, as \
         root: chrt -i -p 0 <pid> (or stop DAMON); the sweep changes nothing",
        busy.join(", ")
    ))
}

/// One `/proc/<pid>/stat` line taken apart: the parenthesised name (which may itself hold spaces and
/// parentheses), and the fields after it, from field 3 (`state`) on.
fn stat_fields(stat: &str) -> Option<(&str, std::str::SplitWhitespace<'_>)> {
    let (head, rest) = stat.rsplit_once(')')?;
    Some((head.split_once('(')?.1, rest.split_whitespace()))
}

/// The name and scheduling policy (field 41) of one `/proc/<pid>/stat` line.
fn name_and_policy(stat: &str) -> Option<(&str, u32)> {
    let (name, mut fields) = stat_fields(stat)?;
    Some((name, fields.nth(41 - 3)?.parse().ok()?))
}

/// The parent process id (field 4) of one `/proc/<pid>/stat` line.
fn parent(stat: &str) -> Option<u32> {
    stat_fields(stat)?.1.nth(4 - 3)?.parse().ok()
}

/// Every process `/proc` lists, with its directory and its `stat` line; one gone between the listing and
/// the read is left out. `None` when `/proc` cannot be listed.
fn processes() -> Option<impl Iterator<Item = (u32, std::path::PathBuf, String)>> {
    Some(std::fs::read_dir("/proc").ok()?.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        Some((pid, entry.path(), stat))
    }))
}

/// Sleeps [`WAKE_INTERVAL_NS`] on the monotonic clock, relative to now; a signal may end it early.
fn sleep_interval() {
    let request = libc::timespec { tv_sec: 0, tv_nsec: WAKE_INTERVAL_NS as libc::c_long };
    // SAFETY: `request` is a valid timespec that outlives the call; no remainder is asked for (null).
    let error = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &request, std::ptr::null_mut()) };
    if error != 0 && error != libc::EINTR {
        // A kernel without CLOCK_MONOTONIC sleeps: sleep anyway, so the loop never spins.
        std::thread::sleep(Duration::from_nanos(WAKE_INTERVAL_NS));
    }
}

/// Asks the kernel to wake this thread's timed sleeps within `ns` of their deadline (best effort).
fn set_timer_slack_ns(ns: libc::c_ulong) {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and changes only this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns) };
}

/// The CPUs this process may run on: its main thread's affinity (the benches and the sweep never pin
/// it; their harness threads are pinned). `None` when the kernel does not say.
pub(crate) fn process_cpus() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is a plain bit array, valid when zeroed.
    let mut cpus: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size_of::<cpu_set_t>()` bytes into `cpus`, which has that size; the
    // process id is this process's, whose main thread is alive while any of its threads runs.
    let read = unsafe { libc::sched_getaffinity(libc::getpid(), std::mem::size_of::<libc::cpu_set_t>(), &mut cpus) };
    (read == 0).then_some(cpus)
}

/// Lets the calling thread run on every CPU the process may (best effort: it stays where it is when the
/// kernel refuses).
fn unpin_current_thread() {
    if let Some(cpus) = process_cpus() {
        // SAFETY: `cpus` is a valid set of the size given; 0 names the calling thread.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cpus) };
    }
}

#[cfg(test)]
mod tests;
